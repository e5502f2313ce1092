// Fuzz target: llama2.c checkpoints (legacy and v1 "ak42").
// read_checkpoint_info, load_checkpoint<float>; for a small model also a
// save/reload round trip (the weights must come back bit for bit) and one
// decode step through the cache.
#include <algorithm>
#include <cstring>

#include "fuzz_util.hpp"
#include "kvdecode/kvdecode.hpp"

namespace {
template <class M>
bool same_bits(const M& a, const M& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0);
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

    // Save and reload: the same config and the same bits in every tensor.
    const std::string copy = path + ".copy";
    kvd::save_checkpoint(w, copy, info.format);
    kvd::ModelWeights<float> back = kvd::load_checkpoint<float>(copy);
    std::remove(copy.c_str());
    bool same = back.config == c && same_bits(back.token_embedding, w.token_embedding) &&
                same_bits(back.final_norm, w.final_norm) && same_bits(back.classifier, w.classifier) &&
                back.layers.size() == w.layers.size();
    for (std::size_t l = 0; same && l < w.layers.size(); ++l) {
      const auto &a = w.layers[l], &b = back.layers[l];
      same = same_bits(a.attn_norm, b.attn_norm) && same_bits(a.wq, b.wq) && same_bits(a.wk, b.wk) &&
             same_bits(a.wv, b.wv) && same_bits(a.wo, b.wo) && same_bits(a.ffn_norm, b.ffn_norm) &&
             same_bits(a.w1, b.w1) && same_bits(a.w2, b.w2) && same_bits(a.w3, b.w3);
    }
    if (!same) {
      std::fprintf(stderr, "FINDING: save_checkpoint + load_checkpoint changed the weights of %s\n", c.summary().c_str());
      std::abort();
    }

    kvd::Transformer<float> model(std::move(w));
    kvd::KVCache<float> cache(model.config(), std::min(c.max_seq_len, 4));
    const auto logits = model.decode_step(kvd::Tokenizer::kBosId % c.vocab_size, cache);
    (void)logits;
  });
  return 0;
}
