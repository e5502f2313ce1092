// Element-wise and per-row operations: exp, SiLU, the gated FFN activations
// (SwiGLU, GeGLU, gpt-oss's clamped SwiGLU), RMSNorm, RoPE (linear or YaRN scaling).
// Each exists exactly once, and every code path (prefill, decode, batched
// decode, the cache-free reference) calls these same functions, so the same
// input gives the same bits everywhere. Reductions inside them (the RMSNorm
// sum of squares) run in index order with one fma per element, like the
// matmul rule in dense_kernels.hpp, and depend only on the row they are given.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "kvdecode/core/exact_math.hpp"
#include "kvdecode/model/exp.hpp"
#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/weights/model_weights.hpp"

namespace kvd {

/// The one exp used everywhere: model/exp.hpp's algorithm, whose scalar and
/// vector forms give identical bits (never std::exp, whose vectorised variants differ).
template <class T>
inline T exp_(T x) { return detail::exp_scalar(x); }

/// SiLU(x) = x * sigmoid(x) = x / (1 + exp(-x)).
template <class T>
inline T silu(T x) { return x / (T(1) + exp_(-x)); }

/// out[i] = silu(gate[i]) * up[i] for i in [0, n), exp vectorised; same bits as silu().
/// `scratch` holds n values.
template <class T>
inline void swiglu_array(const T* gate, const T* up, T* out, T* scratch, long n) {
  for (long i = 0; i < n; ++i) scratch[i] = -gate[i];
  detail::exp_array(scratch, scratch, n);
  for (long i = 0; i < n; ++i) out[i] = gate[i] / (T(1) + scratch[i]) * up[i];
}

/// out[i] = gelu_tanh(gate[i]) * up[i] for i in [0, n): GeGLU with GELU's tanh
/// approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as the
/// equal x / (1 + exp(-2 sqrt(2/pi) x (1 + 0.044715 x^2))) with the one exp:
///   u = fma(0.044715, x * x, 1);  z = (2 sqrt(2/pi) * x) * u;  out = x / (1 + exp_(-z)) * up
/// Large |x| gives x (exp -> 0) or -0 (exp -> inf), never NaN. `scratch` holds n values.
template <class T>
inline void geglu_array(const T* gate, const T* up, T* out, T* scratch, long n) {
  const T a = static_cast<T>(0.044715), c2 = static_cast<T>(1.5957691216057307593);  // 2 sqrt(2/pi)
  for (long i = 0; i < n; ++i) {
    const T x = gate[i];
    scratch[i] = -((c2 * x) * std::fma(a, x * x, T(1)));
  }
  detail::exp_array(scratch, scratch, n);
  for (long i = 0; i < n; ++i) out[i] = gate[i] / (T(1) + scratch[i]) * up[i];
}

/// out[i] = swiglu_oai(gate[i], up[i]) for i in [0, n): gpt-oss's clamped SwiGLU
/// (ggml's swiglu_oai, alpha 1.702, limit 7):
///   g = min(gate, 7);  u = min(max(up, -7), 7);  out = g / (1 + exp_(-1.702 g)) * (u + 1)
/// The gate is clamped above only, the up both ways. A NaN gate or up gives NaN.
/// `scratch` holds n values.
template <class T>
inline void swiglu_oai_array(const T* gate, const T* up, T* out, T* scratch, long n) {
  const T alpha = static_cast<T>(1.702), limit = T(7);
  auto clamp_gate = [&](T g) { return g > limit ? limit : g; };  // NaN stays NaN
  for (long i = 0; i < n; ++i) scratch[i] = -(alpha * clamp_gate(gate[i]));
  detail::exp_array(scratch, scratch, n);
  for (long i = 0; i < n; ++i) {
    const T g = clamp_gate(gate[i]);
    const T u = up[i] > limit ? limit : up[i] < -limit ? -limit : up[i];
    out[i] = g / (T(1) + scratch[i]) * (u + T(1));
  }
}

/// The gated FFN's middle: swiglu_array, geglu_array or swiglu_oai_array, as `act`
/// says. out may equal scratch (each reads gate[i] and up[i] after scratch[i]).
template <class T>
inline void gated_array(Activation act, const T* gate, const T* up, T* out, T* scratch, long n) {
  if (act == Activation::kGeluTanh)
    geglu_array(gate, up, out, scratch, n);
  else if (act == Activation::kSwigluOai)
    swiglu_oai_array(gate, up, out, scratch, n);
  else
    swiglu_array(gate, up, out, scratch, n);
}

/// RMSNorm of one row: out[i] = w[i] * (x[i] * 1/sqrt(mean(x^2) + eps)).
/// Sum of squares in index order with fma, as llama2.c's rmsnorm. out may alias x.
template <class T>
inline void rmsnorm_row(const T* x, const T* w, long n, T eps, T* out) {
  T ss = T(0);
  for (long i = 0; i < n; ++i) ss = std::fma(x[i], x[i], ss);
  const T scale = T(1) / std::sqrt(ss / static_cast<T>(n) + eps);
  for (long i = 0; i < n; ++i) out[i] = w[i] * (scale * x[i]);
}

/// Root-mean-square normalisation layer (pre-norm of each block and the final norm).
template <class T>
class RMSNorm {
 public:
  RMSNorm() = default;
  RMSNorm(Vector<T> weight, double eps) : weight_(std::move(weight)), eps_(static_cast<T>(eps)) {}
  long dim() const { return weight_.size(); }
  /// Normalises M rows of x (row stride ldx) into out (row stride ldo); out may equal x.
  void apply(const T* x, long ldx, long M, T* out, long ldo) const {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (M * dim() >= detail::kParallelElements)
#endif
    for (long m = 0; m < M; ++m) rmsnorm_row(x + m * ldx, weight_.data(), dim(), eps_, out + m * ldo);
  }
  /// apply() on the calling thread (for use inside a parallel region).
  void apply_rows(const T* x, long ldx, long M, T* out, long ldo) const {
    for (long m = 0; m < M; ++m) rmsnorm_row(x + m * ldx, weight_.data(), dim(), eps_, out + m * ldo);
  }
  const Vector<T>& weight() const { return weight_; }
  T eps() const { return eps_; }

 private:
  Vector<T> weight_;  // (D)
  T eps_ = T(1e-5);
};

/// How a RoPE table stretches positions: `factor` 1 is none; kLinear divides every
/// frequency by it; kYarn blends (RoPE's constructor) with the trained context
/// `orig_ctx` and the ramp's rotation counts beta_fast > beta_slow.
struct RopeScalingParams {
  double factor = 1.0;
  RopeScaling type = RopeScaling::kLinear;
  int orig_ctx = 0;
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;  ///< the ramp's ends rounded outward to whole pairs (floor, ceil)
};

/// Rotary position embedding. Within each head, RoPE rotates the first
/// rotary_dim dimensions in pairs (the rest pass through):
///   RopeStyle::kAdjacent  pair i = (x[2i], x[2i+1])             llama2.c, GGUF llama
///   RopeStyle::kHalves    pair i = (x[i], x[i + rotary_dim/2])   NeoX, HF, qwen2/qwen3
/// by angle pos * f_i, f_i = theta^(-2i/rotary_dim) / factor[i] (factors from Llama 3.1's
/// rope_freqs, 1 when absent), scaled:
///   linear  f_i / s (s = the scaling factor; 1 when none)
///   YaRN    f_i * (r_i + (1 - r_i) / s), cos and sin multiplied by m = 1 + 0.1 ln(s), where
///           the ramp r_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1) keeps the fast
///           pairs and scales the slow ones: with d(b) = rotary_dim ln(orig_ctx / (2 pi b))
///           / (2 ln theta), lo = max(0, floor(d(beta_fast))), hi = min(rotary_dim - 1,
///           ceil(d(beta_slow))) (ggml's rope_yarn, ext_factor 1, attn_factor 1); without
///           truncate, lo and hi keep their fractions (HF's rope_scaling.truncate false).
/// The cos/sin table is computed once, in double, for every position < max_seq_len,
/// so every path rotates with the same values. Its pow, log, cos and sin are
/// core/exact_math.hpp's, correctly rounded without the C library, so the table is
/// the same on every platform (and equals the one glibc's functions give).
template <class T>
class RoPE {
 public:
  RoPE() = default;
  /// factors: rotary_dim/2 positive values, or empty for none.
  RoPE(int head_dim, int max_seq_len, double theta, RopeStyle style = RopeStyle::kAdjacent, int rotary_dim = 0,
       const Vector<T>& factors = Vector<T>(), const RopeScalingParams& scaling = RopeScalingParams())
      : head_dim_(head_dim), rot_(rotary_dim > 0 ? rotary_dim : head_dim), max_seq_len_(max_seq_len), style_(style) {
    const int half = rot_ / 2;
    const bool yarn = scaling.type == RopeScaling::kYarn;
    double lo = 0, hi = 0, mscale = 1.0;
    if (yarn) {
      const double kPi = 3.14159265358979323846;
      auto corr_dim = [&](double b) {
        return rot_ * detail::exact_log(scaling.orig_ctx / (b * 2 * kPi)) / (2 * detail::exact_log(theta));
      };
      const double lo_d = corr_dim(scaling.beta_fast), hi_d = corr_dim(scaling.beta_slow);
      lo = std::max(0.0, scaling.truncate ? std::floor(lo_d) : lo_d);
      hi = std::min(static_cast<double>(rot_ - 1), scaling.truncate ? std::ceil(hi_d) : hi_d);
      mscale = std::fma(0.1, detail::exact_log(scaling.factor), 1.0);  // explicit: -ffp-contract must not decide
    }
    table_.resize(static_cast<std::size_t>(max_seq_len) * half * 2);
    for (int i = 0; i < half; ++i) {
      double freq = detail::exact_pow(theta, -2.0 * i / rot_);
      if (factors.size() == half) freq /= static_cast<double>(factors[i]);
      if (yarn) {
        const double y = (i - lo) / std::max(0.001, hi - lo);
        const double ramp = 1.0 - std::min(1.0, std::max(0.0, y));  // 1: kept, 0: scaled
        freq *= ramp + (1.0 - ramp) / scaling.factor;
      } else if (scaling.factor != 1.0) {
        freq /= scaling.factor;
      }
      if (static_cast<double>(max_seq_len - 1) * freq > detail::kSinCosMaxArg)
        throw ConfigError(detail::msg("RoPE: angle (max_seq_len - 1) * frequency = ", (max_seq_len - 1), " * ", freq,
                                      " of pair ", i, " exceeds 2^40"));
      for (int pos = 0; pos < max_seq_len; ++pos) {
        const double angle = pos * freq;
        double sin_a = 0, cos_a = 0;
        detail::exact_sincos(angle, &sin_a, &cos_a);
        table_[(static_cast<std::size_t>(pos) * half + i) * 2] = static_cast<T>(cos_a * mscale);
        table_[(static_cast<std::size_t>(pos) * half + i) * 2 + 1] = static_cast<T>(sin_a * mscale);
      }
    }
  }
  int max_seq_len() const { return max_seq_len_; }

  /// Rotates n_heads consecutive heads of width head_dim in x at position pos (< max_seq_len).
  void apply(T* x, int n_heads, int pos) const {
    KVD_ASSERT(pos >= 0 && pos < max_seq_len_);
    const int half = rot_ / 2;
    // pair i is (v[i * step], v[i * step + gap])
    const int step = style_ == RopeStyle::kAdjacent ? 2 : 1, gap = style_ == RopeStyle::kAdjacent ? 1 : half;
    const T* cs = table_.data() + static_cast<std::size_t>(pos) * half * 2;  // (rotary_dim/2, 2): cos, sin
    for (int h = 0; h < n_heads; ++h) {
      T* v = x + h * head_dim_;
      for (int i = 0; i < half; ++i) {
        const T c = cs[2 * i], s = cs[2 * i + 1];
        T& a = v[i * step];
        T& b = v[i * step + gap];
        const T x0 = a, x1 = b;
        a = std::fma(x0, c, -(x1 * s));
        b = std::fma(x0, s, x1 * c);
      }
    }
  }

 private:
  int head_dim_ = 0, rot_ = 0, max_seq_len_ = 0;
  RopeStyle style_ = RopeStyle::kAdjacent;
  std::vector<T> table_;  // (max_seq_len, rotary_dim/2, 2)
};

}  // namespace kvd
