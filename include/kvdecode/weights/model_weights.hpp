// ModelWeights: the model's tensors as a checkpoint holds them (row-major,
// output dimension first, so y = W x), before any packing for the kernels.
// Each matrix is a WeightMatrix with its own storage type (f32, f16, bf16 or a
// ggml block type); norms and biases are vectors of the compute type T.
// Built from memory, from a seeded random initialiser, or by a checkpoint
// loader. Transformer packs these once at construction. Which tensors a model
// holds, their shapes and names are the rows of architecture.hpp.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kvdecode/weights/architecture.hpp"
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
  WeightMatrix w1;      // (F, D)  gate; empty in a mixture of experts
  WeightMatrix w2;      // (D, F)  down; empty in a mixture of experts
  WeightMatrix w3;      // (F, D)  up; empty in a mixture of experts
  // A mixture of experts (config.moe()), else empty. Expert e's rows of each
  // experts_* matrix are [e * F, (e + 1) * F) (gate, up) or [e * D, (e + 1) * D) (down).
  WeightMatrix router;        // (E, D)      router logits
  WeightMatrix experts_gate;  // (E * F, D)  every expert's gate, stacked
  WeightMatrix experts_down;  // (E * D, F)  every expert's down, stacked
  WeightMatrix experts_up;    // (E * F, D)  every expert's up, stacked
  // Post norms (config.post_norms, Gemma 3), else empty: RMSNorm of the attention
  // output and of the FFN output before each is added to the residual stream.
  Vector<T> attn_post_norm;  // (D)
  Vector<T> ffn_post_norm;   // (D)
  // gpt-oss, else empty: the output projection's bias (config.attn_out_bias), the
  // sinks (config.attn_sinks), the router's and experts' biases (config.moe_bias),
  // expert e's entries of each experts_*_bias at the rows of its matrix.
  Vector<T> bo;                 // (D)
  Vector<T> attn_sinks;         // (H) one logit per query head
  Vector<T> router_bias;        // (E)
  Vector<T> experts_gate_bias;  // (E * F)
  Vector<T> experts_down_bias;  // (E * D)
  Vector<T> experts_up_bias;    // (E * F)

  /// Tells mapped files that this layer's matrices have been packed (see WeightMatrix::release_pages).
  void release_pages() const noexcept {
    for (const TensorSpec& s : kTensors)
      if (s.per_layer && s.matrix) tensor_slot(*this, s.id).matrix->release_pages();
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
    // Every row of the table (architecture.hpp): a matrix of its shape when the config
    // has it, a vector of its length when the config has it and empty when not; the
    // optional rope_freq_factors below.
    auto tensor = [&](const TensorSpec& s, int layer, auto slot) {
      const long er = static_cast<long>(tensor_rows(s, config)), ec = static_cast<long>(tensor_cols(s, config));
      if (slot.matrix) {
        if (tensor_required(s, config)) matrix(s.name, layer, *slot.matrix, er, ec);
      } else if (s.presence != Presence::kIfStored) {
        check(s.name, layer, slot.vector->rows(), 1, tensor_required(s, config) ? er : 0, 1);
      }
    };
    tensor(tensor_spec(TensorId::kTokenEmbedding), -1, tensor_slot(*this, TensorId::kTokenEmbedding, -1));
    if (static_cast<long>(layers.size()) != config.n_layers)
      throw ConfigError(detail::msg("weights hold ", layers.size(), " layers, config says n_layers = ", config.n_layers));
    for (int l = 0; l < config.n_layers; ++l)
      for (const TensorSpec& s : kTensors)
        if (s.per_layer) tensor(s, l, tensor_slot(layers[static_cast<std::size_t>(l)], s.id));
    for (const TensorSpec& s : kTensors)
      if (!s.per_layer && s.id != TensorId::kTokenEmbedding) tensor(s, -1, tensor_slot(*this, s.id, -1));
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
    for (const auto& l : layers)
      for (const TensorSpec& s : kTensors)
        if (s.per_layer && s.matrix) b += tensor_slot(l, s.id).matrix->bytes();
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
    // Each tensor as its row's RandomInit says, drawn in table order (architecture.hpp):
    // the embedding, each layer, then the final norm and the classifier.
    auto fill = [&](const TensorSpec& s, auto slot) {
      const long rows = static_cast<long>(tensor_rows(s, config)), cols = static_cast<long>(tensor_cols(s, config));
      if (slot.matrix) {
        const double scale = s.init == RandomInit::kUnit        ? 1.0
                             : s.init == RandomInit::kHalfFanIn ? 0.5 / std::sqrt(double(cols))
                                                                : 1.0 / std::sqrt(double(cols));
        RowMatrix<T> m(rows, cols);
        for (long i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(normal() * scale);
        *slot.matrix = WeightMatrix::from_dense(m);
      } else if (s.init == RandomInit::kNearOne || s.init == RandomInit::kSmall) {
        Vector<T> v(rows);
        for (long i = 0; i < rows; ++i)
          v[i] = static_cast<T>(s.init == RandomInit::kNearOne ? 1.0 + 0.1 * normal() : 0.5 * normal());
        *slot.vector = std::move(v);
      }
    };
    ModelWeights w;
    w.config = config;
    w.layers.resize(config.n_layers);
    fill(tensor_spec(TensorId::kTokenEmbedding), tensor_slot(w, TensorId::kTokenEmbedding, -1));
    for (auto& l : w.layers) for_each_tensor(l, config, fill);
    for (const TensorSpec& s : kTensors)
      if (!s.per_layer && s.id != TensorId::kTokenEmbedding && tensor_required(s, config)) fill(s, tensor_slot(w, s.id, -1));
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
    for (size_t i = 0; i < layers.size(); ++i)
      for (const TensorSpec& s : kTensors) {
        if (!s.per_layer) continue;
        const auto from = tensor_slot(layers[i], s.id);
        const auto to = tensor_slot(o.layers[i], s.id);
        if (from.matrix)
          *to.matrix = mat(*from.matrix);
        else
          *to.vector = vec(*from.vector);
      }
    o.final_norm = vec(final_norm);
    o.classifier = mat(classifier);
    o.rope_freq_factors = vec(rope_freq_factors);
    return o;
  }
};

}  // namespace kvd
