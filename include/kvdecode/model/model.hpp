// Model: the packed weights of a transformer, immutable once built, shared by
// every Transformer (and thread) that runs it.
//
// Packing happens once, here: the blocks' projections, the classifier, the final
// norm, the RoPE tables and the embedding. Nothing in a Model changes during a
// forward pass (the workspace, the rows and the logits live in each Transformer),
// so any number of Transformers on any threads may run one Model at the same
// time, each with its own caches, and each gets the bits it would get alone. This
// is llama.cpp's llama_model / llama_context split, and gemma.cpp's const Gemma
// beside a per-call environment.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "kvdecode/model/block.hpp"
#include "kvdecode/core/config.hpp"
#include "kvdecode/weights/model_weights.hpp"

namespace kvd {

template <class T = float>
class Model {
 public:
  using Scalar = T;

  /// Validates and packs the weights (once), releasing each layer's source as it
  /// is packed. Throws ConfigError if weights.validate() fails.
  explicit Model(ModelWeights<T> weights) {
    weights.validate();
    config_ = weights.config;
    // One RoPE table per kind of layer: global (rope_theta, rope_scale, rope_freqs)
    // and, with swa_pattern, local (rope_theta_local; scaled only with rope_scale_local).
    auto scaling = [&](double factor) {
      RopeScalingParams p;
      p.factor = factor;
      p.type = config_.rope_scaling;
      p.orig_ctx = config_.yarn_orig_ctx;
      p.beta_fast = config_.yarn_beta_fast;
      p.beta_slow = config_.yarn_beta_slow;
      p.truncate = config_.yarn_truncate;
      return p;
    };
    rope_ = std::make_unique<RoPE<T>>(config_.head_dim, config_.max_seq_len, config_.rope_theta, config_.rope_style,
                                      config_.rotary_dim(), weights.rope_freq_factors, scaling(config_.rope_scale));
    if (config_.swa_pattern > 0)
      rope_local_ = std::make_unique<RoPE<T>>(
          config_.head_dim, config_.max_seq_len, config_.rope_theta_local, config_.rope_style, config_.rotary_dim(),
          Vector<T>(), config_.rope_scale_local ? scaling(config_.rope_scale) : RopeScalingParams());
    if (config_.embed_scale) embed_scale_ = static_cast<T>(std::sqrt(static_cast<double>(config_.d_model)));
    blocks_.reserve(config_.n_layers);
    for (int l = 0; l < config_.n_layers; ++l) {
      blocks_.emplace_back(config_, weights.layers[l], l, config_.layer_local(l) ? rope_local_.get() : rope_.get());
      weights.layers[l].release_pages();
      weights.layers[l] = LayerWeights<T>();  // the packed copy is all we keep
    }
    final_norm_ = RMSNorm<T>(weights.final_norm, config_.norm_eps);
    classifier_ = PackedMatrix<T>({&weights.output_matrix()});
    weights.classifier.release_pages();
    // Rows of the embedding are looked up one token at a time: a float model keeps
    // it as stored (in place in a mapped file), a double model converts it once.
    if constexpr (std::is_same_v<T, float>)
      embedding_ = std::move(weights.token_embedding);
    else
      embedding_ = WeightMatrix::from_dense(weights.token_embedding.template to_dense<T>());
  }

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  Model(Model&&) = default;  // the blocks point at *rope_, which stays where it is
  Model& operator=(Model&&) = default;

  const ModelConfig& config() const { return config_; }
  const std::vector<TransformerBlock<T>>& blocks() const { return blocks_; }
  const PackedMatrix<T>& classifier() const { return classifier_; }  ///< (V, D)
  const WeightMatrix& embedding() const { return embedding_; }       ///< (V, D)
  const RMSNorm<T>& final_norm() const { return final_norm_; }

  /// The input row of `token` (in [0, vocab_size), unchecked) into out (D values):
  /// its embedding row, multiplied by sqrt(d_model) rounded to T when config.embed_scale
  /// (Gemma). Every path embeds through here. Never fails.
  void embed(int token, T* out) const {
    embedding_.dequantize_row(token, out);
    if (config_.embed_scale)
      for (int i = 0; i < config_.d_model; ++i) out[i] = out[i] * embed_scale_;
  }

  /// The numerics mode of every matrix (numerics.hpp): kExact (float activations
  /// everywhere, what a Model is built with), kInt8Blocks (block-type matrices round
  /// their input rows to int8 blocks and use integer dot products, fast_int8.hpp:
  /// what open_model() loads by default) or kFast (also f16/bf16 matrices in bf16 on
  /// CPUs with AVX512-BF16, fast_bf16.hpp). Every path stays bit-identical to every
  /// other in each mode; the modes' logits differ from one another wherever they
  /// round differently. Double models, and f32 matrices, keep float activations.
  /// It changes the model for everyone running it: set it before sharing, never
  /// during a forward pass. Never fails.
  void set_numerics(Numerics n) {
    for (auto& b : blocks_) b.set_numerics(n);
    classifier_.set_numerics(n);
  }
  Numerics numerics() const { return classifier_.numerics(); }  ///< as set_numerics() left every matrix
  /// set_numerics(on ? kFast : kExact).
  void set_fast_matmul(bool on) { set_numerics(on ? Numerics::kFast : Numerics::kExact); }
  bool fast_matmul() const { return numerics() == Numerics::kFast; }

  /// Bytes of weights a decode step reads: every packed matrix (of a mixture of
  /// experts, the router and K experts per layer), one embedding row and the norm
  /// vectors (what bounds decode speed).
  std::uint64_t weight_bytes_per_token() const {
    std::uint64_t b = classifier_.bytes() + embedding_.row_bytes() +
                      sizeof(T) * (config_.d_model * ((config_.post_norms ? 4ull : 2ull) * config_.n_layers + 1));
    for (const auto& blk : blocks_)
      b += blk.attention().wqkv().bytes() + blk.attention().wo().bytes() + blk.ffn_active_bytes();
    return b;
  }

  /// Bytes of every packed matrix and the embedding as stored (what the model
  /// holds in memory; with experts, all E of them).
  std::uint64_t weight_bytes() const {
    std::uint64_t b = classifier_.bytes() + embedding_.bytes();
    for (const auto& blk : blocks_) b += blk.attention().wqkv().bytes() + blk.attention().wo().bytes() + blk.ffn_bytes();
    return b;
  }

 private:
  ModelConfig config_;
  std::unique_ptr<RoPE<T>> rope_;  // on the heap: blocks keep a pointer that must survive moves
  std::unique_ptr<RoPE<T>> rope_local_;  // the local layers' table (swa_pattern), else null
  T embed_scale_ = T(1);                 // sqrt(d_model) in T, with config.embed_scale
  std::vector<TransformerBlock<T>> blocks_;
  RMSNorm<T> final_norm_;
  PackedMatrix<T> classifier_;  // (V, D)
  WeightMatrix embedding_;      // (V, D) in its storage type (f64 for a double model)
};

}  // namespace kvd
