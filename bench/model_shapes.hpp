// The two model shapes every benchmark program measures (random float32 weights
// of llama2.c's stories15M and stories110M shapes) and their fixed inputs.
// Shared by kvdecode-bench and kvdecode-roofline so both measure the same thing.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kvdecode/kv_cache.hpp"
#include "kvdecode/transformer.hpp"

namespace kvd_bench {

enum class Shape { k15M, k110M };

inline const char* shape_name(Shape s) { return s == Shape::k15M ? "stories15M" : "stories110M"; }

/// The shape's config with max_seq_len 1024, so positions up to 1000 fit (the weights are unchanged).
inline kvd::ModelConfig shape_config(Shape s) {
  kvd::ModelConfig c = s == Shape::k15M ? kvd::stories15m_config() : kvd::stories110m_config();
  c.max_seq_len = 1024;
  return c;
}

/// TinyLlama-1.1B's shape (d_model 2048, hidden 5632, 22 layers, 32/4 heads, vocab
/// 32000) with the given max_seq_len.
inline kvd::ModelConfig tinyllama_config(int max_seq_len = 512) {
  kvd::ModelConfig c;
  c.vocab_size = 32000; c.d_model = 2048; c.n_layers = 22; c.n_heads = 32; c.n_kv_heads = 4;
  c.head_dim = 64; c.hidden_dim = 5632; c.max_seq_len = max_seq_len;
  return c;
}

/// n token ids, uniform in [0, vocab_size), the same for every run.
inline std::vector<int> random_tokens(int n, int vocab_size, std::uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  std::vector<int> t(n);
  for (auto& x : t) x = static_cast<int>(rng() % static_cast<std::uint64_t>(vocab_size));
  return t;
}

/// `batch` caches all holding the same `pos`-token prompt (prefilled once, then copied),
/// each with room for one more position: the state a batched decode step at `pos` starts from.
inline std::vector<kvd::KVCache<float>> batch_caches(kvd::Transformer<float>& m, int batch, int pos) {
  std::vector<kvd::KVCache<float>> caches;
  caches.reserve(static_cast<std::size_t>(batch));
  caches.emplace_back(m.config(), pos + 1);
  m.prefill(random_tokens(pos, m.config().vocab_size), caches[0]);
  for (int b = 1; b < batch; ++b) caches.push_back(caches[0].copy());
  return caches;
}

}  // namespace kvd_bench
