// Fuzz target: a Hugging Face model folder (hf_model.hpp): config.json,
// generation_config.json and model.safetensors. The input is the three files
// joined by NUL bytes, in that order (JSON holds no NUL; the safetensors part
// may): config.json \0 generation_config.json \0 model.safetensors. They are
// written to a scratch folder, then: hf_model_info (every config field,
// rope_scaling, the sliding-window rules), hf_generation_eos_ids, and when the
// model is small (at most 2^20 parameters), load_hf_model (every tensor's
// name, dtype and shape against the config) and one decode step.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "fuzz_util.hpp"
#include "kvdecode/kvdecode.hpp"

namespace {
void write_part(const std::filesystem::path& p, const std::uint8_t* b, const std::uint8_t* e) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b), e - b);
  if (!out) {
    std::fprintf(stderr, "kvdecode fuzz: cannot write %s\n", p.c_str());
    std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path dir = kvd_fuzz::scratch_path("hf-folder");
  std::filesystem::create_directories(dir);
  const std::uint8_t* end = data + size;
  const std::uint8_t* nul1 = std::find(data, end, 0);
  const std::uint8_t* gen_begin = nul1 == end ? end : nul1 + 1;
  const std::uint8_t* nul2 = std::find(gen_begin, end, 0);
  const std::uint8_t* st_begin = nul2 == end ? end : nul2 + 1;
  write_part(dir / "config.json", data, nul1);
  std::filesystem::remove(dir / "generation_config.json");
  if (nul1 != end) write_part(dir / "generation_config.json", gen_begin, nul2);
  write_part(dir / "model.safetensors", st_begin, end);
  kvd_fuzz::run([&] {
    const std::vector<int> eos = kvd::hf_generation_eos_ids(dir.string());
    for (int id : eos)
      if (id < 0) {
        std::fprintf(stderr, "FINDING: hf_generation_eos_ids returned %d\n", id);
        std::abort();
      }
    kvd::HFLoadOptions opt;
    opt.max_seq_len = 8;
    const kvd::HFModelInfo info = kvd::hf_model_info(dir.string(), opt);
    if (info.config.n_params() > (1u << 20)) return;
    kvd::Transformer<float> model(kvd::load_hf_model<float>(dir.string(), opt));
    kvd::KVCache<float> cache(model.config(), std::min(model.config().max_seq_len, 4));
    (void)model.decode_step(0, cache);
  });
  return 0;
}
