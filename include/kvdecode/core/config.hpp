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
//   hidden_dim  F   SwiGLU hidden width
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

/// "adjacent" or "halves". Never fails.
inline const char* rope_style_name(RopeStyle s) { return s == RopeStyle::kHalves ? "halves" : "adjacent"; }

struct ModelConfig {
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
  /// How KV caches store heads: rotated by the Walsh-Hadamard transform (keys, or keys
  /// and values) to spread outliers before a block type quantizes them. Not a property
  /// of the weights: a load option (--cache-rotate). Needs a power-of-two head_dim.
  KVRotation kv_rotation = KVRotation::kNone;

  int q_dim() const { return n_heads * head_dim; }            ///< H * Dh
  int kv_dim() const { return n_kv_heads * head_dim; }        ///< Hk * Dh
  int heads_per_kv() const { return n_heads / n_kv_heads; }   ///< query heads sharing one KV head
  int rotary_dim() const { return rope_dim > 0 ? rope_dim : head_dim; }  ///< dims RoPE rotates per head

  /// Bytes the KV cache stores per token: 2 (K and V) * L * Hk * (bytes of one head vector of Dh values).
  /// For q8 each head vector is its own group run (34 bytes per 32 values, rounded up).
  std::uint64_t kv_bytes_per_token(DType t) const {
    return 2ull * static_cast<std::uint64_t>(n_layers) * static_cast<std::uint64_t>(n_kv_heads) *
           dtype_bytes_for(t, static_cast<std::uint64_t>(head_dim));
  }

  /// Number of weight parameters (embedding, norms, projections, MLP, classifier if separate).
  std::uint64_t n_params() const {
    const std::uint64_t D = d_model, V = vocab_size, L = n_layers, F = hidden_dim;
    const std::uint64_t q = q_dim(), kv = kv_dim();
    std::uint64_t per_layer = D /*attn norm*/ + D * q + 2 * D * kv + q * D + D /*ffn norm*/ + 3 * D * F;
    if (qkv_bias) per_layer += q + 2 * kv;
    if (qk_norm) per_layer += 2ull * static_cast<std::uint64_t>(head_dim);
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
    constexpr long long kMaxMatrix = std::numeric_limits<int>::max();
    auto product = [&](const char* what, long long a, long long b) {
      if (a * b > kMaxMatrix)
        throw ConfigError(detail::msg("ModelConfig: ", what, " = ", a, " x ", b, " elements exceeds the limit ", kMaxMatrix));
    };
    product("vocab_size x d_model", vocab_size, d_model);
    product("q_dim x d_model", static_cast<long long>(n_heads) * head_dim, d_model);
    product("hidden_dim x d_model", hidden_dim, d_model);
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
                       kv_rotation != KVRotation::kNone ? detail::msg(" kv_rotation=", kv_rotation_name(kv_rotation)) : std::string());
  }

  bool operator==(const ModelConfig& o) const {
    return vocab_size == o.vocab_size && d_model == o.d_model && n_layers == o.n_layers && n_heads == o.n_heads &&
           n_kv_heads == o.n_kv_heads && head_dim == o.head_dim && hidden_dim == o.hidden_dim &&
           max_seq_len == o.max_seq_len && rope_theta == o.rope_theta && norm_eps == o.norm_eps &&
           shared_classifier == o.shared_classifier && sliding_window == o.sliding_window &&
           rope_style == o.rope_style && rope_dim == o.rope_dim && qkv_bias == o.qkv_bias && qk_norm == o.qk_norm &&
           kv_rotation == o.kv_rotation;
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
