// The two model shapes every benchmark program measures (random float32 weights
// of llama2.c's stories15M and stories110M shapes) and their fixed inputs.
// Shared by kvdecode-bench and kvdecode-roofline so both measure the same thing.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kvdecode/config.hpp"

namespace kvd_bench {

enum class Shape { k15M, k110M };

inline const char* shape_name(Shape s) { return s == Shape::k15M ? "stories15M" : "stories110M"; }

/// The shape's config with max_seq_len 1024, so positions up to 1000 fit (the weights are unchanged).
inline kvd::ModelConfig shape_config(Shape s) {
  kvd::ModelConfig c = s == Shape::k15M ? kvd::stories15m_config() : kvd::stories110m_config();
  c.max_seq_len = 1024;
  return c;
}

/// n token ids, uniform in [0, vocab_size), the same for every run.
inline std::vector<int> random_tokens(int n, int vocab_size, std::uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  std::vector<int> t(n);
  for (auto& x : t) x = static_cast<int>(rng() % static_cast<std::uint64_t>(vocab_size));
  return t;
}

}  // namespace kvd_bench
