// Fuzz target: llama2.c checkpoints (legacy and v1 "ak42").
// read_checkpoint_info, load_checkpoint<float>; for a small model also a
// save/reload/save round trip (both saved files must be identical) and one
// decode step through the cache.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_util.hpp"
#include "kvdecode/kvdecode.hpp"

namespace {
std::vector<unsigned char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kvd_fuzz::remove_scratch_at_exit("checkpoint.bin");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvd_fuzz::run([&] {
    const std::string& path = kvd_fuzz::write_scratch("checkpoint.bin", data, size);
    const kvd::CheckpointInfo info = kvd::read_checkpoint_info(path);
    kvd::ModelWeights<float> w = kvd::load_checkpoint<float>(path);
    if (w.config != info.config) {
      std::fprintf(stderr, "FINDING: load_checkpoint's config %s differs from read_checkpoint_info's %s\n",
                   w.config.summary().c_str(), info.config.summary().c_str());
      std::abort();
    }
    const kvd::ModelConfig& c = w.config;
    // Small models only: the file bounds the weights, not max_seq_len (RoPE, cache).
    if (c.n_params() > (1u << 18) || static_cast<std::uint64_t>(c.max_seq_len) * c.head_dim > (1u << 22)) return;

    // Save, reload and save again: the two files must be identical (the weights
    // survive the round trip bit for bit; only the public API is used).
    const std::string copy = path + ".copy", copy2 = path + ".copy2";
    kvd::save_checkpoint(w, copy, info.format);
    const kvd::ModelWeights<float> back = kvd::load_checkpoint<float>(copy);
    kvd::save_checkpoint(back, copy2, info.format);
    const bool same = back.config == c && read_all(copy) == read_all(copy2);
    std::remove(copy.c_str());
    std::remove(copy2.c_str());
    if (!same) {
      std::fprintf(stderr, "FINDING: save_checkpoint + load_checkpoint changed the weights of %s\n", c.summary().c_str());
      std::abort();
    }

    kvd::Transformer<float> model(std::move(w));
    kvd::KVCache<float> cache(model.config(), std::min(c.max_seq_len, 4));
    const auto logits = model.decode_step(kvd::Llama2cTokenizer::kBosId % c.vocab_size, cache);
    (void)logits;
  });
  return 0;
}
