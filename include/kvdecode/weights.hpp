// ModelWeights: the model's tensors as a checkpoint holds them (row-major,
// output dimension first, so y = W x), before any packing for the kernels.
// Built from memory, from a seeded random initialiser, or by a checkpoint
// loader. Transformer packs these once at construction.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kvdecode/config.hpp"
#include "kvdecode/error.hpp"

namespace kvd {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <class T>
struct LayerWeights {
  Vector<T> attn_norm;  // (D)
  RowMatrix<T> wq;      // (H*Dh, D)
  RowMatrix<T> wk;      // (Hk*Dh, D)
  RowMatrix<T> wv;      // (Hk*Dh, D)
  RowMatrix<T> wo;      // (D, H*Dh)
  Vector<T> ffn_norm;   // (D)
  RowMatrix<T> w1;      // (F, D)  gate
  RowMatrix<T> w2;      // (D, F)  down
  RowMatrix<T> w3;      // (F, D)  up
};

template <class T>
struct ModelWeights {
  ModelConfig config;
  RowMatrix<T> token_embedding;  // (V, D)
  std::vector<LayerWeights<T>> layers;  // L entries
  Vector<T> final_norm;          // (D)
  RowMatrix<T> classifier;       // (V, D); empty (0 x 0) when config.shared_classifier

  /// The classifier matrix actually used: the embedding when shared.
  const RowMatrix<T>& output_matrix() const { return config.shared_classifier ? token_embedding : classifier; }

  /// Throws ConfigError if config is invalid or any tensor's shape disagrees with it
  /// (the message names the tensor, its shape and the expected shape).
  void validate() const {
    config.validate();
    auto check = [](const char* name, int layer, long rows, long cols, long er, long ec) {
      if (rows != er || cols != ec)
        throw ConfigError(detail::msg("weight ", name, layer >= 0 ? detail::msg("[layer ", layer, "]") : std::string(),
                                      " has shape ", rows, "x", cols, ", expected ", er, "x", ec));
    };
    const long D = config.d_model, V = config.vocab_size, F = config.hidden_dim;
    const long q = config.q_dim(), kv = config.kv_dim();
    check("token_embedding", -1, token_embedding.rows(), token_embedding.cols(), V, D);
    if (static_cast<long>(layers.size()) != config.n_layers)
      throw ConfigError(detail::msg("weights hold ", layers.size(), " layers, config says n_layers = ", config.n_layers));
    for (int l = 0; l < config.n_layers; ++l) {
      const auto& w = layers[l];
      check("attn_norm", l, w.attn_norm.rows(), 1, D, 1);
      check("wq", l, w.wq.rows(), w.wq.cols(), q, D);
      check("wk", l, w.wk.rows(), w.wk.cols(), kv, D);
      check("wv", l, w.wv.rows(), w.wv.cols(), kv, D);
      check("wo", l, w.wo.rows(), w.wo.cols(), D, q);
      check("ffn_norm", l, w.ffn_norm.rows(), 1, D, 1);
      check("w1", l, w.w1.rows(), w.w1.cols(), F, D);
      check("w2", l, w.w2.rows(), w.w2.cols(), D, F);
      check("w3", l, w.w3.rows(), w.w3.cols(), F, D);
    }
    check("final_norm", -1, final_norm.rows(), 1, D, 1);
    if (!config.shared_classifier) check("classifier", -1, classifier.rows(), classifier.cols(), V, D);
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
      return m;
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
    }
    w.final_norm = norm_vec(D);
    if (!config.shared_classifier) w.classifier = matrix(V, D, 1.0 / std::sqrt(double(D)));
    return w;
  }

  /// An explicit deep copy converted to another scalar type (e.g. float -> double).
  template <class U>
  ModelWeights<U> cast() const {
    ModelWeights<U> o;
    o.config = config;
    o.token_embedding = token_embedding.template cast<U>();
    o.layers.resize(layers.size());
    for (size_t i = 0; i < layers.size(); ++i) {
      const auto& a = layers[i];
      auto& b = o.layers[i];
      b.attn_norm = a.attn_norm.template cast<U>();
      b.wq = a.wq.template cast<U>();
      b.wk = a.wk.template cast<U>();
      b.wv = a.wv.template cast<U>();
      b.wo = a.wo.template cast<U>();
      b.ffn_norm = a.ffn_norm.template cast<U>();
      b.w1 = a.w1.template cast<U>();
      b.w2 = a.w2.template cast<U>();
      b.w3 = a.w3.template cast<U>();
    }
    o.final_norm = final_norm.template cast<U>();
    o.classifier = classifier.template cast<U>();
    return o;
  }
};

}  // namespace kvd
