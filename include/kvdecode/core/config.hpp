// ModelConfig: the hyperparameters of a Llama-style decoder, plain fields with
// defaults, a validate() that rejects inconsistent values, and derived sizes.
//
// Dimension legend used in every kvdecode file:
//   vocab_size  V   tokens in the vocabulary
//   d_model     D   residual stream width
//   n_layers    L   transformer blocks
//   n_heads     H   query heads
//   n_kv_heads  Hk  key/value heads (H % Hk == 0; H == Hk is MHA, Hk == 1 is MQA)
//   head_dim    Dh  width of one head
//   hidden_dim  F   SwiGLU hidden width (of each expert in a mixture of experts)
//   n_experts   E   experts of a mixture-of-experts FFN (0: one dense SwiGLU)
//   n_experts_used K experts each row runs (top-k of the router)
//   max_seq_len S   longest sequence the model (and RoPE) supports
//   pos             position of a token in its sequence, 0-based
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kvdecode/core/dtype.hpp"
#include "kvdecode/error.hpp"

namespace kvd {

/// Which dimensions of a head RoPE rotates together. Explicit values: frozen.
enum class RopeStyle : std::uint8_t {
  kAdjacent = 0,  ///< pairs (x[2i], x[2i+1]): llama2.c, GGUF `llama` (llama.cpp's "normal" RoPE)
  kHalves = 1,    ///< pairs (x[i], x[i + n/2]): GPT-NeoX, Hugging Face rotate_half, GGUF qwen2/qwen3 ("NEOX")
};

/// Which heads a KV cache stores rotated by the fixed Walsh-Hadamard transform
/// (model/hadamard.hpp): none, keys (queries rotated alike), or keys and values (the
/// attention output rotated back). Explicit values: frozen (cache files, header byte 38).
enum class KVRotation : std::uint8_t {
  kNone = 0,
  kKeys = 1,
  kKeysValues = 2,
};

/// "none", "k" or "kv". Never fails.
inline const char* kv_rotation_name(KVRotation r) {
  return r == KVRotation::kKeys ? "k" : r == KVRotation::kKeysValues ? "kv" : "none";
}

/// Parses "none", "k" (also "keys") or "kv" (also "keys-values"). Throws ArgumentError
/// naming the text and the accepted names.
inline KVRotation parse_kv_rotation(const std::string& s) {
  if (s == "none") return KVRotation::kNone;
  if (s == "k" || s == "keys") return KVRotation::kKeys;
  if (s == "kv" || s == "keys-values") return KVRotation::kKeysValues;
  throw ArgumentError(detail::msg("unknown cache rotation '", s, "'; expected one of none, k, kv"));
}

namespace detail {
/// True when n is a power of two (1, 2, 4, ...): the head widths a cache rotation takes.
constexpr bool is_power_of_two(long long n) { return n > 0 && (n & (n - 1)) == 0; }

/// The one sliding-window formula: the first position a query at `pos` may attend
/// to, 0 without a window (sliding_window = 0), else max(0, pos - window + 1).
inline int first_visible(int pos, int sliding_window) {
  return sliding_window > 0 && pos - sliding_window + 1 > 0 ? pos - sliding_window + 1 : 0;
}
}  // namespace detail

/// How a mixture-of-experts router turns its logits into the K weights. Explicit
/// values: frozen.
enum class RouterOrder : std::uint8_t {
  kSoftmaxTopK = 0,  ///< softmax over all E logits, then the top K probabilities (Qwen3-MoE)
  kTopKSoftmax = 1,  ///< the top K logits, then softmax over those K (gpt-oss)
};

/// The gate's activation in a gated FFN: act(gate) * up. Explicit values: frozen.
enum class Activation : std::uint8_t {
  kSilu = 0,      ///< SiLU: SwiGLU (Llama, Qwen)
  kGeluTanh = 1,  ///< GELU, tanh approximation: GeGLU (Gemma; PyTorch's gelu_pytorch_tanh)
  kSwigluOai = 2, ///< gpt-oss's clamped SwiGLU: g = min(gate, 7), g * sigmoid(1.702 g) * (clamp(up, -7, 7) + 1)
};

/// "silu", "gelu_tanh" or "swiglu_oai". Never fails.
inline const char* activation_name(Activation a) {
  return a == Activation::kGeluTanh ? "gelu_tanh" : a == Activation::kSwigluOai ? "swiglu_oai" : "silu";
}

/// How the scaled layers' RoPE stretches positions (ModelConfig::rope_scale). Explicit
/// values: frozen.
enum class RopeScaling : std::uint8_t {
  kLinear = 0,  ///< every frequency divided by rope_scale (1 = none)
  kYarn = 1,    ///< YaRN: frequencies blended between divided and kept by a ramp over the pairs, cos
                ///< and sin multiplied by 1 + 0.1 ln(rope_scale) (gpt-oss; RoPE::RoPE has the formulas)
};

/// "adjacent" or "halves". Never fails.
inline const char* rope_style_name(RopeStyle s) { return s == RopeStyle::kHalves ? "halves" : "adjacent"; }

struct ModelConfig {
  static constexpr int kMaxExperts = 1024;  ///< most experts an FFN may have (E)
  int vocab_size = 512;
  int d_model = 64;
  int n_layers = 2;
  int n_heads = 4;
  int n_kv_heads = 4;
  int head_dim = 16;
  int hidden_dim = 172;
  int max_seq_len = 256;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool shared_classifier = true;  ///< classifier weight is the token embedding (tied)
  int sliding_window = 0;         ///< attend to the last `sliding_window` positions only; 0 = off
  RopeStyle rope_style = RopeStyle::kAdjacent;  ///< how RoPE pairs a head's dimensions
  int rope_dim = 0;               ///< leading dimensions of each head that RoPE rotates; 0 = all (head_dim)
  bool qkv_bias = false;          ///< q, k and v projections add a bias (qwen2)
  bool qk_norm = false;           ///< per-head RMSNorm of q and k before RoPE (qwen3)
  int n_experts = 0;              ///< E: experts of the FFN, 0 = one dense SwiGLU (model/moe.hpp)
  int n_experts_used = 0;         ///< K: experts each row runs, in [1, E] when E > 0, else 0
  RouterOrder router_order = RouterOrder::kSoftmaxTopK;  ///< softmax then top-k, or top-k then softmax
  bool norm_topk_prob = false;    ///< the K router weights are divided by their sum (Qwen3-MoE)
  // Gemma 3: local and global layers, sandwich norms, scaled embeddings, GeGLU.
  /// Layer kinds: 0 = every layer alike (sliding_window, rope_theta); N > 0 = layer l is
  /// local when (l + 1) % N != 0 and global otherwise (Gemma 3: 6, five local then one
  /// global; a pattern above n_layers makes every layer local). Local layers attend to the last local_window positions with RoPE base
  /// rope_theta_local; global ones to every position with rope_theta. The KV cache
  /// keeps every position (its window is sliding_window, 0 here).
  int swa_pattern = 0;
  int local_window = 0;           ///< with swa_pattern: the local layers' window (> 0)
  double rope_theta_local = 10000.0;  ///< with swa_pattern: the local layers' RoPE base
  double rope_scale = 1.0;        ///< RoPE scaling factor of the global layers (every layer without
                                  ///< swa_pattern, and the local ones with rope_scale_local); 1 = none
  bool rope_scale_local = false;  ///< with swa_pattern: the local layers are scaled too (gpt-oss; Gemma's are not)
  RopeScaling rope_scaling = RopeScaling::kLinear;  ///< how rope_scale scales: linear or YaRN
  int yarn_orig_ctx = 0;          ///< with kYarn: the context the model was trained at (> 0)
  double yarn_beta_fast = 32.0;   ///< with kYarn: rotations over yarn_orig_ctx below which a pair is kept
  double yarn_beta_slow = 1.0;    ///< with kYarn: rotations above which a pair is fully scaled
  bool yarn_truncate = true;      ///< with kYarn: the ramp's ends rounded to whole pairs (ggml, HF's default);
                                  ///< false: kept fractional (HF rope_scaling.truncate false, gpt-oss's release)
  bool embed_scale = false;       ///< embedding rows multiplied by sqrt(d_model), rounded to the compute type (Gemma)
  bool post_norms = false;        ///< RMSNorm of the attention and FFN outputs before each residual add (Gemma 3)
  Activation ffn_activation = Activation::kSilu;  ///< the gated FFN's activation: SwiGLU or GeGLU
  int query_pre_attn_scalar = 0;  ///< attention scores are divided by sqrt(this); 0 = head_dim
  // gpt-oss: attention sinks and biases on the output projection, router and experts.
  bool attn_sinks = false;        ///< one learned logit per query head joins each softmax's denominator
  bool attn_out_bias = false;     ///< the output projection (wo) adds a bias
  bool moe_bias = false;          ///< with experts: the router and each expert's gate, up and down add biases
  /// How KV caches store heads: rotated by the Walsh-Hadamard transform (keys, or keys
  /// and values) to spread outliers before a block type quantizes them. Not a property
  /// of the weights: a load option (--cache-rotate). Needs a power-of-two head_dim.
  KVRotation kv_rotation = KVRotation::kNone;

  int q_dim() const { return n_heads * head_dim; }            ///< H * Dh
  int kv_dim() const { return n_kv_heads * head_dim; }        ///< Hk * Dh
  int heads_per_kv() const { return n_heads / n_kv_heads; }   ///< query heads sharing one KV head
  int rotary_dim() const { return rope_dim > 0 ? rope_dim : head_dim; }  ///< dims RoPE rotates per head
  bool moe() const { return n_experts > 0; }  ///< the FFN is a mixture of experts
  /// Layer `layer` is a local (sliding-window) layer of a swa_pattern model.
  bool layer_local(int layer) const { return swa_pattern > 0 && (layer + 1) % swa_pattern != 0; }
  /// The window layer `layer` attends with (0 = every position): local_window for a
  /// local layer, else sliding_window. The one per-layer window rule.
  int layer_window(int layer) const { return layer_local(layer) ? local_window : sliding_window; }
  /// The RoPE base of layer `layer`: rope_theta_local for a local layer, else rope_theta.
  double layer_rope_theta(int layer) const { return layer_local(layer) ? rope_theta_local : rope_theta; }
  /// The RoPE scaling factor of layer `layer`: rope_scale, or 1 for a local layer
  /// without rope_scale_local.
  double layer_rope_scale(int layer) const { return layer_local(layer) && !rope_scale_local ? 1.0 : rope_scale; }
  /// What attention scores are divided by the square root of: query_pre_attn_scalar, or head_dim.
  int attention_scalar() const { return query_pre_attn_scalar > 0 ? query_pre_attn_scalar : head_dim; }
  /// Rows of FFN work per token: K for a mixture of experts, else 1.
  int ffn_rows_per_token() const { return n_experts > 0 ? n_experts_used : 1; }

  /// Bytes the KV cache stores per token: 2 (K and V) * L * Hk * (bytes of one head vector of Dh values).
  /// For q8 each head vector is its own group run (34 bytes per 32 values, rounded up).
  std::uint64_t kv_bytes_per_token(DType t) const {
    return 2ull * static_cast<std::uint64_t>(n_layers) * static_cast<std::uint64_t>(n_kv_heads) *
           dtype_bytes_for(t, static_cast<std::uint64_t>(head_dim));
  }

  /// Bytes of weights one token reads, of a model whose tensors take `weight_bytes`
  /// of which `expert_bytes` are expert tensors: each token reads K of the E experts
  /// of every layer (K / E of expert_bytes, rounded down), every other tensor whole.
  /// Without experts: weight_bytes. Never fails.
  std::uint64_t active_weight_bytes(std::uint64_t weight_bytes, std::uint64_t expert_bytes) const {
    if (n_experts <= 0 || expert_bytes > weight_bytes) return weight_bytes;
    const std::uint64_t per_expert = expert_bytes / static_cast<std::uint64_t>(n_experts);
    return weight_bytes - expert_bytes + per_expert * static_cast<std::uint64_t>(n_experts_used);
  }

  /// Number of weight parameters (embedding, norms, projections, MLP or router and
  /// experts, classifier if separate).
  std::uint64_t n_params() const {
    const std::uint64_t D = d_model, V = vocab_size, L = n_layers, F = hidden_dim;
    const std::uint64_t q = q_dim(), kv = kv_dim(), E = n_experts > 0 ? n_experts : 0;
    std::uint64_t per_layer = D /*attn norm*/ + D * q + 2 * D * kv + q * D + D /*ffn norm*/;
    per_layer += E > 0 ? E * D /*router*/ + E * 3 * D * F : 3 * D * F;
    if (qkv_bias) per_layer += q + 2 * kv;
    if (qk_norm) per_layer += 2ull * static_cast<std::uint64_t>(head_dim);
    if (post_norms) per_layer += 2 * D;
    if (attn_sinks) per_layer += static_cast<std::uint64_t>(n_heads);
    if (attn_out_bias) per_layer += D;
    if (moe_bias && E > 0) per_layer += E + E * (2 * F + D);
    return V * D + L * per_layer + D + (shared_classifier ? 0 : V * D);
  }

  /// Throws ConfigError naming the first inconsistent field, its value and the limit.
  void validate() const {
    auto positive = [](const char* name, long long v) {
      if (v <= 0) throw ConfigError(detail::msg("ModelConfig.", name, " = ", v, " must be positive"));
    };
    positive("vocab_size", vocab_size);
    positive("d_model", d_model);
    positive("n_layers", n_layers);
    positive("n_heads", n_heads);
    positive("n_kv_heads", n_kv_heads);
    positive("head_dim", head_dim);
    positive("hidden_dim", hidden_dim);
    positive("max_seq_len", max_seq_len);
    if (n_heads % n_kv_heads != 0)
      throw ConfigError(detail::msg("ModelConfig.n_heads = ", n_heads, " is not a multiple of n_kv_heads = ", n_kv_heads));
    if (head_dim % 2 != 0)
      throw ConfigError(detail::msg("ModelConfig.head_dim = ", head_dim, " must be even (RoPE rotates pairs)"));
    if (!(rope_theta > 1.0) || rope_theta > 1e12)
      throw ConfigError(detail::msg("ModelConfig.rope_theta = ", rope_theta, " must be in (1, 1e12]"));
    if (!(norm_eps > 0.0) || norm_eps > 1.0)
      throw ConfigError(detail::msg("ModelConfig.norm_eps = ", norm_eps, " must be in (0, 1]"));
    if (rope_dim < 0 || rope_dim > head_dim || rope_dim % 2 != 0)
      throw ConfigError(detail::msg("ModelConfig.rope_dim = ", rope_dim, " must be even and in [0, head_dim = ", head_dim,
                                    "] (0 = head_dim)"));
    if (rope_style != RopeStyle::kAdjacent && rope_style != RopeStyle::kHalves)
      throw ConfigError(detail::msg("ModelConfig.rope_style = ", static_cast<int>(rope_style), " is not a RoPE style"));
    if (sliding_window < 0)
      throw ConfigError(detail::msg("ModelConfig.sliding_window = ", sliding_window, " must be >= 0 (0 = off)"));
    if (n_experts < 0 || n_experts > kMaxExperts)
      throw ConfigError(detail::msg("ModelConfig.n_experts = ", n_experts, " must be in [0, ", kMaxExperts, "] (0 = dense FFN)"));
    if (n_experts > 0 && (n_experts_used < 1 || n_experts_used > n_experts))
      throw ConfigError(detail::msg("ModelConfig.n_experts_used = ", n_experts_used, " must be in [1, n_experts = ",
                                    n_experts, "]"));
    if (n_experts == 0 && n_experts_used != 0)
      throw ConfigError(detail::msg("ModelConfig.n_experts_used = ", n_experts_used, " must be 0 without experts (n_experts = 0)"));
    if (router_order != RouterOrder::kSoftmaxTopK && router_order != RouterOrder::kTopKSoftmax)
      throw ConfigError(detail::msg("ModelConfig.router_order = ", static_cast<int>(router_order), " is not a router order"));
    if (swa_pattern < 0)
      throw ConfigError(detail::msg("ModelConfig.swa_pattern = ", swa_pattern, " must be >= 0 (0 = every layer alike)"));
    if (swa_pattern > 0 && local_window <= 0)
      throw ConfigError(detail::msg("ModelConfig.local_window = ", local_window, " must be positive with swa_pattern = ",
                                    swa_pattern));
    if (swa_pattern == 0 && local_window != 0)
      throw ConfigError(detail::msg("ModelConfig.local_window = ", local_window, " must be 0 without swa_pattern"));
    if (swa_pattern > 0 && sliding_window != 0)
      throw ConfigError(detail::msg("ModelConfig.sliding_window = ", sliding_window,
                                    " must be 0 with swa_pattern (local layers use local_window)"));
    if (!(rope_theta_local > 1.0) || rope_theta_local > 1e12)
      throw ConfigError(detail::msg("ModelConfig.rope_theta_local = ", rope_theta_local, " must be in (1, 1e12]"));
    if (!(rope_scale >= 1.0) || rope_scale > 1e6)
      throw ConfigError(detail::msg("ModelConfig.rope_scale = ", rope_scale, " must be in [1, 1e6]"));
    if (ffn_activation != Activation::kSilu && ffn_activation != Activation::kGeluTanh &&
        ffn_activation != Activation::kSwigluOai)
      throw ConfigError(detail::msg("ModelConfig.ffn_activation = ", static_cast<int>(ffn_activation), " is not an activation"));
    if (rope_scaling != RopeScaling::kLinear && rope_scaling != RopeScaling::kYarn)
      throw ConfigError(detail::msg("ModelConfig.rope_scaling = ", static_cast<int>(rope_scaling), " is not a RoPE scaling"));
    if (rope_scaling == RopeScaling::kYarn) {
      if (yarn_orig_ctx <= 0 || yarn_orig_ctx > (1 << 20))
        throw ConfigError(detail::msg("ModelConfig.yarn_orig_ctx = ", yarn_orig_ctx, " must be in [1, ", 1 << 20, "] with YaRN"));
      if (!(yarn_beta_slow > 0.0) || !(yarn_beta_fast > yarn_beta_slow) || yarn_beta_fast > 1e6)
        throw ConfigError(detail::msg("ModelConfig.yarn_beta_fast = ", yarn_beta_fast, " and yarn_beta_slow = ", yarn_beta_slow,
                                      " must satisfy 0 < yarn_beta_slow < yarn_beta_fast <= 1e6"));
    }
    if (rope_scale_local && swa_pattern == 0)
      throw ConfigError("ModelConfig.rope_scale_local = true needs swa_pattern > 0 (local layers)");
    if (moe_bias && n_experts == 0)
      throw ConfigError("ModelConfig.moe_bias = true needs a mixture of experts (n_experts > 0)");
    if (query_pre_attn_scalar < 0)
      throw ConfigError(detail::msg("ModelConfig.query_pre_attn_scalar = ", query_pre_attn_scalar, " must be >= 0 (0 = head_dim)"));
    if (kv_rotation != KVRotation::kNone && kv_rotation != KVRotation::kKeys && kv_rotation != KVRotation::kKeysValues)
      throw ConfigError(detail::msg("ModelConfig.kv_rotation = ", static_cast<int>(kv_rotation), " is not a cache rotation"));
    if (kv_rotation != KVRotation::kNone && !detail::is_power_of_two(head_dim))
      throw ConfigError(detail::msg("ModelConfig.head_dim = ", head_dim, " is not a power of two, which the cache rotation (",
                                    kv_rotation_name(kv_rotation), ", a Walsh-Hadamard transform per head) needs"));
    // Limits that keep every buffer size far from integer overflow (2^31 elements per matrix).
    constexpr long long kMaxDim = 1 << 20;
    auto bounded = [&](const char* name, long long v) {
      if (v > kMaxDim) throw ConfigError(detail::msg("ModelConfig.", name, " = ", v, " exceeds the limit ", kMaxDim));
    };
    bounded("vocab_size", vocab_size);
    bounded("d_model", d_model);
    bounded("n_layers", n_layers);
    bounded("n_heads", n_heads);
    bounded("n_kv_heads", n_kv_heads);
    bounded("head_dim", head_dim);
    bounded("hidden_dim", hidden_dim);
    bounded("max_seq_len", max_seq_len);
    bounded("sliding_window", sliding_window);
    bounded("local_window", local_window);
    bounded("swa_pattern", swa_pattern);
    bounded("query_pre_attn_scalar", query_pre_attn_scalar);
    constexpr long long kMaxMatrix = std::numeric_limits<int>::max();
    auto product = [&](const char* what, long long a, long long b) {
      if (a * b > kMaxMatrix)
        throw ConfigError(detail::msg("ModelConfig: ", what, " = ", a, " x ", b, " elements exceeds the limit ", kMaxMatrix));
    };
    product("vocab_size x d_model", vocab_size, d_model);
    product("q_dim x d_model", static_cast<long long>(n_heads) * head_dim, d_model);
    product("hidden_dim x d_model", hidden_dim, d_model);
    // Each expert tensor (every expert's rows stacked) is one matrix.
    if (n_experts > 0) product("n_experts x hidden_dim x d_model", static_cast<long long>(n_experts) * hidden_dim, d_model);
    // One head row of every layer (q_dim <= 2^20) and the whole KV cache of one
    // max_seq_len sequence (2 * L * Hk * Dh * S <= 2^40 elements) stay far below
    // 2^64 bytes in every size the caches and kernels form, even in int indices.
    const long long q = static_cast<long long>(n_heads) * head_dim;
    if (q > kMaxDim)
      throw ConfigError(detail::msg("ModelConfig: q_dim = n_heads x head_dim = ", n_heads, " x ", head_dim, " = ", q,
                                    " exceeds the limit ", kMaxDim));
    constexpr long long kMaxCacheElements = 1ll << 40;
    const long long per_token = 2ll * n_layers * n_kv_heads * head_dim;  // <= 2 * 2^20 * 2^20
    if (per_token > kMaxCacheElements / max_seq_len)
      throw ConfigError(detail::msg("ModelConfig: a full KV cache of 2 x n_layers x n_kv_heads x head_dim x max_seq_len = 2 x ",
                                    n_layers, " x ", n_kv_heads, " x ", head_dim, " x ", max_seq_len,
                                    " elements exceeds the limit ", kMaxCacheElements));
  }

  /// A one-line description such as "D=288 L=6 H=6 Hk=6 Dh=48 F=768 V=32000 S=256".
  std::string summary() const {
    return detail::msg("D=", d_model, " L=", n_layers, " H=", n_heads, " Hk=", n_kv_heads, " Dh=", head_dim,
                       " F=", hidden_dim, " V=", vocab_size, " S=", max_seq_len,
                       sliding_window ? detail::msg(" window=", sliding_window) : std::string(),
                       rope_style == RopeStyle::kHalves ? " rope=halves" : "",
                       rope_dim ? detail::msg(" rope_dim=", rope_dim) : std::string(), qkv_bias ? " qkv_bias" : "",
                       qk_norm ? " qk_norm" : "",
                       n_experts ? detail::msg(" experts=", n_experts_used, "/", n_experts,
                                               router_order == RouterOrder::kTopKSoftmax ? " topk-softmax" : "",
                                               norm_topk_prob ? " norm_topk" : "")
                                 : std::string(),
                       kv_rotation != KVRotation::kNone ? detail::msg(" kv_rotation=", kv_rotation_name(kv_rotation)) : std::string(),
                       swa_pattern ? detail::msg(" local=", swa_pattern - 1, ":1 window=", local_window) : std::string(),
                       embed_scale ? " embed_scale" : "", post_norms ? " post_norms" : "",
                       ffn_activation != Activation::kSilu ? detail::msg(" ffn=", activation_name(ffn_activation)) : std::string(),
                       query_pre_attn_scalar ? detail::msg(" attn_scalar=", query_pre_attn_scalar) : std::string(),
                       rope_scale != 1.0 ? detail::msg(" rope_scale=", rope_scale,
                                                       rope_scaling == RopeScaling::kYarn ? detail::msg(" yarn(", yarn_orig_ctx, yarn_truncate ? "" : " untruncated", ")") : std::string(),
                                                       rope_scale_local ? " all_layers" : "")
                                         : std::string(),
                       attn_sinks ? " sinks" : "", attn_out_bias ? " out_bias" : "", moe_bias ? " moe_bias" : "");
  }

  bool operator==(const ModelConfig& o) const {
    return vocab_size == o.vocab_size && d_model == o.d_model && n_layers == o.n_layers && n_heads == o.n_heads &&
           n_kv_heads == o.n_kv_heads && head_dim == o.head_dim && hidden_dim == o.hidden_dim &&
           max_seq_len == o.max_seq_len && rope_theta == o.rope_theta && norm_eps == o.norm_eps &&
           shared_classifier == o.shared_classifier && sliding_window == o.sliding_window &&
           rope_style == o.rope_style && rope_dim == o.rope_dim && qkv_bias == o.qkv_bias && qk_norm == o.qk_norm &&
           n_experts == o.n_experts && n_experts_used == o.n_experts_used && router_order == o.router_order &&
           norm_topk_prob == o.norm_topk_prob && kv_rotation == o.kv_rotation && swa_pattern == o.swa_pattern &&
           local_window == o.local_window && rope_theta_local == o.rope_theta_local && rope_scale == o.rope_scale &&
           embed_scale == o.embed_scale && post_norms == o.post_norms && ffn_activation == o.ffn_activation &&
           query_pre_attn_scalar == o.query_pre_attn_scalar && rope_scale_local == o.rope_scale_local &&
           rope_scaling == o.rope_scaling && yarn_orig_ctx == o.yarn_orig_ctx && yarn_beta_fast == o.yarn_beta_fast &&
           yarn_beta_slow == o.yarn_beta_slow && yarn_truncate == o.yarn_truncate && attn_sinks == o.attn_sinks &&
           attn_out_bias == o.attn_out_bias && moe_bias == o.moe_bias;
  }
  bool operator!=(const ModelConfig& o) const { return !(*this == o); }
};

/// stories15M's shape (llama2.c): the default demo and benchmark model.
inline ModelConfig stories15m_config() {
  ModelConfig c;
  c.vocab_size = 32000; c.d_model = 288; c.n_layers = 6; c.n_heads = 6; c.n_kv_heads = 6;
  c.head_dim = 48; c.hidden_dim = 768; c.max_seq_len = 256;
  return c;
}

/// stories110M's shape (llama2.c).
inline ModelConfig stories110m_config() {
  ModelConfig c;
  c.vocab_size = 32000; c.d_model = 768; c.n_layers = 12; c.n_heads = 12; c.n_kv_heads = 12;
  c.head_dim = 64; c.hidden_dim = 2048; c.max_seq_len = 1024;
  return c;
}

}  // namespace kvd
