// The model shapes the benchmark programs measure (random float32 weights of
// llama2.c's stories15M and stories110M shapes, and the TinyLlama-1.1B shape in
// any storage type) and their fixed inputs. Shared by kvdecode-bench and
// kvdecode-roofline so both measure the same thing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/convert/quantize.hpp"
#include "kvdecode/model/transformer.hpp"

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

/// The TinyLlama-1.1B shape: d_model 2048, hidden 5632, 22 layers, 32 query and 4
/// KV heads, vocab 32000 (4.4 GB of f32 weights: far larger than any last-level cache).
inline kvd::ModelConfig tinyllama_config(int max_seq_len = 1024) {
  kvd::ModelConfig c;
  c.vocab_size = 32000; c.d_model = 2048; c.n_layers = 22; c.n_heads = 32; c.n_kv_heads = 4;
  c.head_dim = 64; c.hidden_dim = 5632; c.max_seq_len = max_seq_len;
  return c;
}

/// Rows quantized per matrix by weights_in_scheme(); the rest repeat their bytes.
constexpr long kQuantTileRows = 64;

/// `m` stored as type t, for speed measurements. f32/f16/bf16 convert every value.
/// Block types quantize the first kQuantTileRows rows with the library's quantizer and
/// repeat their bytes down the matrix: every row still has its own bytes in memory, so a
/// step streams exactly what a fully quantized matrix would, and building a 1.1B model
/// takes seconds instead of minutes per type. (Values repeat, so use it for speed only.)
inline kvd::WeightMatrix stored_as(const kvd::WeightMatrix& m, kvd::WeightType t) {
  if (t == m.type()) return m;
  if (kvd::weight_type_traits(t).block_size <= 1) return m.converted_to(t);
  const long rows = m.rows(), cols = m.cols(), tile = std::min(rows, kQuantTileRows);
  const std::uint64_t rb = kvd::weight_row_bytes(t, static_cast<std::uint64_t>(cols));
  std::vector<unsigned char> bytes(rb * static_cast<std::uint64_t>(rows));  // (rows, rb)
  std::vector<float> row(static_cast<std::size_t>(cols));                   // (cols)
  for (long r = 0; r < tile; ++r) {
    m.dequantize_row(r, row.data());
    kvd::detail::quantize_row(t, row.data(), bytes.data() + rb * r, cols);
  }
  for (long r = tile; r < rows; ++r) std::copy_n(bytes.data() + rb * (r % tile), rb, bytes.data() + rb * r);
  return kvd::WeightMatrix::copy_of(t, rows, cols, bytes.data(), bytes.size());
}

/// The weights with each matrix stored as `scheme` chooses for its GGUF tensor name
/// (kvd::choose_tensor_type: the plain types, or llama.cpp's mixes such as Q4_K_M), through
/// stored_as(). Norms stay f32. Throws as stored_as does.
inline kvd::ModelWeights<float> weights_in_scheme(const kvd::ModelWeights<float>& f32, kvd::QuantScheme scheme) {
  const kvd::ModelConfig& c = f32.config;
  kvd::TypeChoiceContext ctx;
  ctx.n_layers = c.n_layers; ctx.n_heads = c.n_heads; ctx.n_kv_heads = c.n_kv_heads;
  ctx.has_output = !c.shared_classifier;
  auto as = [&](const kvd::WeightMatrix& m, const std::string& name) {
    const std::vector<std::uint64_t> ne = {static_cast<std::uint64_t>(m.cols()), static_cast<std::uint64_t>(m.rows())};
    return stored_as(m, kvd::choose_tensor_type(scheme, name, ne, ctx));
  };
  kvd::ModelWeights<float> w = f32;
  kvd::for_each_tensor(w, [&](const kvd::TensorSpec& s, int layer, auto slot) {
    if (slot.matrix) *slot.matrix = as(*slot.matrix, kvd::gguf_tensor_name(s, layer));
  });
  return w;
}

}  // namespace kvd_bench
