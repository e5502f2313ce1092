// ModelWeights: the model's tensors as a checkpoint holds them (row-major,
// output dimension first, so y = W x), before any packing for the kernels.
// Each matrix is a WeightMatrix with its own storage type (f32, f16, bf16 or a
// ggml block type); norms and biases are vectors of the compute type T.
// Built from memory, from a seeded random initialiser, or by a checkpoint
// loader. Transformer packs these once at construction.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kvdecode/core/config.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/weights/weight_matrix.hpp"

namespace kvd {

/// One block's tensors. Matrices keep the storage type their source gave them
/// (WeightMatrix); vectors (norms, biases) are always in the compute type T.
template <class T>
struct LayerWeights {
  Vector<T> attn_norm;  // (D)
  WeightMatrix wq;      // (H*Dh, D)
  WeightMatrix wk;      // (Hk*Dh, D)
  WeightMatrix wv;      // (Hk*Dh, D)
  WeightMatrix wo;      // (D, H*Dh)
  Vector<T> bq, bk, bv; // (H*Dh), (Hk*Dh), (Hk*Dh) q/k/v biases when config.qkv_bias, else empty
  Vector<T> q_norm;     // (Dh) per-head RMSNorm of q when config.qk_norm, else empty
  Vector<T> k_norm;     // (Dh) per-head RMSNorm of k when config.qk_norm, else empty
  Vector<T> ffn_norm;   // (D)
  WeightMatrix w1;      // (F, D)  gate
  WeightMatrix w2;      // (D, F)  down
  WeightMatrix w3;      // (F, D)  up

  /// Tells mapped files that this layer's matrices have been packed (see WeightMatrix::release_pages).
  void release_pages() const noexcept {
    for (const WeightMatrix* m : {&wq, &wk, &wv, &wo, &w1, &w2, &w3}) m->release_pages();
  }
};

template <class T>
struct ModelWeights {
  using Scalar = T;
  ModelConfig config;
  WeightMatrix token_embedding;  // (V, D)
  std::vector<LayerWeights<T>> layers;  // L entries
  Vector<T> final_norm;          // (D)
  WeightMatrix classifier;       // (V, D); empty when config.shared_classifier
  Vector<T> rope_freq_factors;   // (rotary_dim/2) each RoPE frequency is divided by its factor
                                 // (Llama 3.1 `rope_freqs`, HF rope_scaling); empty = none

  /// The classifier matrix actually used: the embedding when shared.
  const WeightMatrix& output_matrix() const { return config.shared_classifier ? token_embedding : classifier; }

  /// Throws ConfigError if config is invalid or any tensor's shape disagrees with it
  /// (the message names the tensor, its shape and the expected shape), or a matrix's
  /// storage type is one kvdecode cannot compute with (naming the tensor and the type).
  void validate() const {
    config.validate();
    auto where = [](const char* name, int layer) {
      return detail::msg(name, layer >= 0 ? detail::msg("[layer ", layer, "]") : std::string());
    };
    auto check = [&](const char* name, int layer, long rows, long cols, long er, long ec) {
      if (rows != er || cols != ec)
        throw ConfigError(detail::msg("weight ", where(name, layer), " has shape ", rows, "x", cols, ", expected ", er, "x", ec));
    };
    auto matrix = [&](const char* name, int layer, const WeightMatrix& m, long er, long ec) {
      check(name, layer, m.rows(), m.cols(), er, ec);
      if (!weight_type_traits(m.type()).supported)
        throw ConfigError(detail::msg("weight ", where(name, layer), " has type ", weight_type_name(m.type()),
                                      ", which kvdecode does not support"));
    };
    auto optional = [&](const char* name, int layer, const Vector<T>& v, bool wanted, long n) {
      check(name, layer, v.rows(), 1, wanted ? n : 0, 1);
    };
    const long D = config.d_model, V = config.vocab_size, F = config.hidden_dim;
    const long q = config.q_dim(), kv = config.kv_dim(), Dh = config.head_dim;
    matrix("token_embedding", -1, token_embedding, V, D);
    if (static_cast<long>(layers.size()) != config.n_layers)
      throw ConfigError(detail::msg("weights hold ", layers.size(), " layers, config says n_layers = ", config.n_layers));
    for (int l = 0; l < config.n_layers; ++l) {
      const auto& w = layers[l];
      check("attn_norm", l, w.attn_norm.rows(), 1, D, 1);
      matrix("wq", l, w.wq, q, D);
      matrix("wk", l, w.wk, kv, D);
      matrix("wv", l, w.wv, kv, D);
      matrix("wo", l, w.wo, D, q);
      optional("bq", l, w.bq, config.qkv_bias, q);
      optional("bk", l, w.bk, config.qkv_bias, kv);
      optional("bv", l, w.bv, config.qkv_bias, kv);
      optional("q_norm", l, w.q_norm, config.qk_norm, Dh);
      optional("k_norm", l, w.k_norm, config.qk_norm, Dh);
      check("ffn_norm", l, w.ffn_norm.rows(), 1, D, 1);
      matrix("w1", l, w.w1, F, D);
      matrix("w2", l, w.w2, D, F);
      matrix("w3", l, w.w3, F, D);
    }
    check("final_norm", -1, final_norm.rows(), 1, D, 1);
    if (!config.shared_classifier) matrix("classifier", -1, classifier, V, D);
    if (rope_freq_factors.size() != 0) {
      check("rope_freq_factors", -1, rope_freq_factors.rows(), 1, config.rotary_dim() / 2, 1);
      for (long i = 0; i < rope_freq_factors.size(); ++i)
        if (!(rope_freq_factors[i] > T(0)) || !std::isfinite(static_cast<double>(rope_freq_factors[i])))
          throw ConfigError(detail::msg("rope_freq_factors[", i, "] = ", rope_freq_factors[i], " must be positive and finite"));
    }
  }

  /// Bytes of every weight matrix as stored (embedding, projections, classifier if
  /// separate), plus the compute-type vectors. What a decode step streams is
  /// decode_weight_bytes().
  std::uint64_t weight_bytes() const {
    std::uint64_t b = token_embedding.bytes() + classifier.bytes();
    for (const auto& l : layers) b += l.wq.bytes() + l.wk.bytes() + l.wv.bytes() + l.wo.bytes() + l.w1.bytes() + l.w2.bytes() + l.w3.bytes();
    return b;
  }

/// Seeded random weights with the scale of a trained model (N(0, 1/sqrt(fan_in)) for
  /// projections, N(0, 1) for the embedding, norms near 1). Same seed, same weights, on
  /// every platform (std::mt19937_64 and our own Box-Muller, not std::normal_distribution).
  /// Throws ConfigError if `config` is invalid.
  static ModelWeights random(const ModelConfig& config, std::uint64_t seed) {
    config.validate();
    std::mt19937_64 rng(seed);
    auto uniform = [&rng]() { return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
    auto normal = [&]() {
      const double u1 = uniform(), u2 = uniform();
      return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    };
    auto matrix = [&](long rows, long cols, double scale) {
      RowMatrix<T> m(rows, cols);
      for (long i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(normal() * scale);
      return WeightMatrix::from_dense(m);
    };
    auto small_vec = [&](long n, double scale) {
      Vector<T> v(n);
      for (long i = 0; i < n; ++i) v[i] = static_cast<T>(scale * normal());
      return v;
    };
    auto norm_vec = [&](long n) {
      Vector<T> v(n);
      for (long i = 0; i < n; ++i) v[i] = static_cast<T>(1.0 + 0.1 * normal());
      return v;
    };
    const long D = config.d_model, V = config.vocab_size, F = config.hidden_dim;
    const long q = config.q_dim(), kv = config.kv_dim();
    ModelWeights w;
    w.config = config;
    w.token_embedding = matrix(V, D, 1.0);
    w.layers.resize(config.n_layers);
    for (auto& l : w.layers) {
      l.attn_norm = norm_vec(D);
      l.wq = matrix(q, D, 1.0 / std::sqrt(double(D)));
      l.wk = matrix(kv, D, 1.0 / std::sqrt(double(D)));
      l.wv = matrix(kv, D, 1.0 / std::sqrt(double(D)));
      l.wo = matrix(D, q, 0.5 / std::sqrt(double(q)));
      l.ffn_norm = norm_vec(D);
      l.w1 = matrix(F, D, 1.0 / std::sqrt(double(D)));
      l.w2 = matrix(D, F, 0.5 / std::sqrt(double(F)));
      l.w3 = matrix(F, D, 1.0 / std::sqrt(double(D)));
      if (config.qkv_bias) {
        l.bq = small_vec(q, 0.5);
        l.bk = small_vec(kv, 0.5);
        l.bv = small_vec(kv, 0.5);
      }
      if (config.qk_norm) {
        l.q_norm = norm_vec(config.head_dim);
        l.k_norm = norm_vec(config.head_dim);
      }
    }
    w.final_norm = norm_vec(D);
    if (!config.shared_classifier) w.classifier = matrix(V, D, 1.0 / std::sqrt(double(D)));
    return w;
  }

  /// An explicit copy converted to another compute type (e.g. float -> double):
  /// vectors and dense (f32/f64) matrices convert to U; matrices in other storage
  /// types (f16, bf16, block types) keep theirs, so both models compute with the
  /// same weight values.
  template <class U>
  ModelWeights<U> cast() const {
    auto vec = [](const Vector<T>& v) -> Vector<U> { return v.template cast<U>(); };
    auto mat = [](const WeightMatrix& m) { return m.template with_dense_type<U>(); };
    ModelWeights<U> o;
    o.config = config;
    o.token_embedding = mat(token_embedding);
    o.layers.resize(layers.size());
    for (size_t i = 0; i < layers.size(); ++i) {
      const auto& a = layers[i];
      auto& b = o.layers[i];
      b.attn_norm = vec(a.attn_norm);
      b.wq = mat(a.wq);
      b.wk = mat(a.wk);
      b.wv = mat(a.wv);
      b.wo = mat(a.wo);
      b.bq = vec(a.bq);
      b.bk = vec(a.bk);
      b.bv = vec(a.bv);
      b.q_norm = vec(a.q_norm);
      b.k_norm = vec(a.k_norm);
      b.ffn_norm = vec(a.ffn_norm);
      b.w1 = mat(a.w1);
      b.w2 = mat(a.w2);
      b.w3 = mat(a.w3);
    }
    o.final_norm = vec(final_norm);
    o.classifier = mat(classifier);
    o.rope_freq_factors = vec(rope_freq_factors);
    return o;
  }
};

}  // namespace kvd
