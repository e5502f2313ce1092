// Fuzz target: GGUF files (gguf.hpp): header, metadata and tensor table.
// GGUFFile::from_bytes, every typed getter on every key (a wrong type is a
// clean FormatError), describe(), and for each tensor of a type the block
// decoders know, its rows dequantized (at most 1 MB of floats per input):
// every tensor's bytes must lie inside the file, which ASan checks. A file with a
// vocabulary (tokenizer.ggml.*) then encodes and decodes a short text with it, and
// a model of at most 2^20 parameters is built and runs one decode step.
#include <algorithm>
#include <memory>
#include <vector>

#include "fuzz_util.hpp"
#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/kvdecode.hpp"

namespace {
void getters(const kvd::GGUFFile& f, const std::string& key) {
  auto clean = [](auto&& get) { kvd_fuzz::run(get); };
  clean([&] { (void)f.get_string(key); });
  clean([&] { (void)f.get_u64(key); });
  clean([&] { (void)f.get_u32(key); });
  clean([&] { (void)f.get_i64(key); });
  clean([&] { (void)f.get_f64(key); });
  clean([&] { (void)f.get_bool(key); });
  clean([&] { (void)f.get_string_array(key); });
  clean([&] { (void)f.get_f64_array(key); });
  clean([&] { (void)f.get_i64_array(key); });
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvd_fuzz::run([&] {
    const kvd::GGUFFile f = kvd::GGUFFile::from_bytes(std::vector<unsigned char>(data, data + size), "fuzz.gguf");
    for (const auto& [key, v] : f.metadata()) {
      if (f.find(key) == nullptr) {
        std::fprintf(stderr, "FINDING: find('%s') is null for a key of metadata()\n", key.c_str());
        std::abort();
      }
      (void)v.size();
      getters(f, key);
    }
    (void)f.get_u32_or("general.alignment", 32);
    (void)f.describe(true);
    std::int64_t budget = 1 << 18;  // floats dequantized per input
    std::vector<float> row;
    for (const kvd::GGUFTensorInfo& t : f.tensors()) {
      if (f.find_tensor(t.name) == nullptr) {
        std::fprintf(stderr, "FINDING: find_tensor('%s') is null for a tensor of tensors()\n", t.name.c_str());
        std::abort();
      }
      if (t.n_bytes > f.file_size() || t.file_offset > f.file_size() - t.n_bytes || t.file_offset < f.data_offset()) {
        std::fprintf(stderr, "FINDING: tensor '%s' [%llu, +%llu) is outside the data section\n", t.name.c_str(),
                     static_cast<unsigned long long>(t.file_offset), static_cast<unsigned long long>(t.n_bytes));
        std::abort();
      }
      kvd_fuzz::run([&] {
        const std::int64_t n = static_cast<std::int64_t>(t.ne[0]);
        const std::uint64_t row_bytes = kvd::weight_row_bytes(t.type, t.ne[0]);  // ConfigError for odd types
        if (n <= 0 || row_bytes == 0 || n > budget) return;
        row.resize(static_cast<std::size_t>(n));
        const std::uint64_t rows = std::min<std::uint64_t>(t.rows(), static_cast<std::uint64_t>(budget / n));
        budget -= static_cast<std::int64_t>(rows) * n;
        for (std::uint64_t r = 0; r < rows; ++r)
          kvd::detail::dequantize_row(t.type, f.tensor_data(t) + r * row_bytes, row.data(), n);
      });
      f.release(t);
    }
    // The vocabulary in the metadata, if any: load it and encode a short text.
    if (f.find("tokenizer.ggml.tokens") != nullptr || f.find("tokenizer.ggml.model") != nullptr) {
      const auto tok = kvd::load_tokenizer_gguf(f);
      const std::vector<int> ids = tok->encode(kvd_fuzz::kSampleText, true, true);
      for (int id : ids)
        if (id < 0 || id >= tok->vocab_size()) {
          std::fprintf(stderr, "FINDING: encode returned id %d outside [0, %d)\n", id, tok->vocab_size());
          std::abort();
        }
      if (!kvd_fuzz::valid_utf8(tok->decode(ids, false))) {
        std::fprintf(stderr, "FINDING: decode produced invalid UTF-8\n");
        std::abort();
      }
    }
    // A model whose shape is small: build it (gguf_model.hpp) and run one decode step.
    kvd::GGUFLoadOptions opt;
    opt.max_seq_len = 8;
    const kvd::GGUFModelInfo info = kvd::gguf_model_info(f, opt);
    if (info.config.n_params() > (1u << 20)) return;
    auto owner = std::make_shared<const kvd::detail::GGUFOwner>(
        kvd::GGUFFile::from_bytes(std::vector<unsigned char>(data, data + size), "fuzz.gguf"));
    kvd::Transformer<float> model(kvd::load_gguf_weights<float>(std::move(owner), opt));
    kvd::KVCache<float> cache(model.config(), std::min(model.config().max_seq_len, 4));
    (void)model.decode_step(0, cache);
  });
  return 0;
}
