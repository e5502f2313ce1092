// The reference quantizers of ggml's block types: quantize_block() for each block
// struct of block_formats.hpp. Each block's codes and scales come from a small
// search that minimises the block's (weighted) squared error, as ggml's reference
// quantizers do; the scales are then rounded to their stored precision and the
// codes chosen again for the stored scales. They need not reproduce llama.cpp's
// bytes (tests/quant_test.cpp checks the round trip). quantize_row() in blocks.hpp
// is the row-level entry.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kvdecode/weights/block_formats.hpp"

namespace kvd::detail {

/// Round to nearest, ties to even (|x| < 2^22), as ggml's nearest_int.
inline int nearest_int(float x) {
  const float v = x + 12582912.f;  // 1.5 * 2^23: the integer lands in the low mantissa bits
  return static_cast<int>(float_bits(v) & 0x7fffffu) - 0x400000;
}

inline constexpr float kGroupMaxEps = 1e-15f;

/// Symmetric codes l in [-nmax, nmax) with x ~ scale * l, returned scale and
/// codes L[i] = l + nmax. Tries the scales that put the largest |x| at
/// -(nmax + 0.1 t), t in [-9, 9], and keeps the least weighted squared error
/// (weights w; w == nullptr: x^2). Returns 0 with all-zero codes for a zero block.
inline float search_symmetric(int n, int nmax, const float* x, const float* w, std::int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  auto weight = [&](int i) { return w ? w[i] : x[i] * x[i]; };
  float best_scale = 0, best = -1;
  for (int t = -9; t <= 9; ++t) {
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(t)) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      sumlx += weight(i) * x[i] * static_cast<float>(l);
      suml2 += weight(i) * static_cast<float>(l * l);
    }
    // For the best scale sumlx/suml2 the error is sum(w x^2) - sumlx^2/suml2.
    if (suml2 > 0 && (best < 0 || sumlx * sumlx > best * suml2)) {
      best_scale = sumlx / suml2;
      best = best_scale * sumlx;
      for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1) + nmax);
    }
  }
  return best_scale;
}

/// Asymmetric codes l in [0, nmax] with x ~ scale * l - min_out (min_out >= 0):
/// tries the scales (nmax + rmin + rdelta t)/(max - min), t in [0, nstep], each
/// with its least-squares scale and offset, and keeps the least weighted error.
inline float search_asymmetric(int n, int nmax, const float* x, const float* w, std::uint8_t* L, float& min_out,
                               float rmin, float rdelta, int nstep) {
  float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    min_out = -lo;
    return 0.f;
  }
  float scale = (hi - lo) / static_cast<float>(nmax), min = lo, best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<std::uint8_t>(std::clamp(nearest_int((x[i] - lo) / scale), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best += w[i] * diff * diff;
  }
  std::uint8_t aux[256];
  for (int t = 0; t <= nstep; ++t) {
    const float iscale = (rmin + rdelta * static_cast<float>(t) + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      aux[i] = static_cast<std::uint8_t>(l);
      sum_l += w[i] * static_cast<float>(l);
      sum_l2 += w[i] * static_cast<float>(l * l);
      sum_xl += w[i] * static_cast<float>(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * aux[i] + this_min - x[i];
      err += w[i] * diff * diff;
    }
    if (err < best) {
      std::copy(aux, aux + n, L);
      best = err;
      scale = this_scale;
      min = this_min;
    }
  }
  min_out = -min;
  return scale;
}

/// q3_K's sub-block search: symmetric codes in [-nmax, nmax), then coordinate
/// descent that moves single codes while the x^2-weighted fit improves.
/// Returns the scale; L[i] = code + nmax.
inline float search_q3(int n, int nmax, const float* x, std::int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<std::int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l * l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
      if (slx <= 0) continue;
      float sl2 = suml2 - w * static_cast<float>(L[i] * L[i]);
      const int nl = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (nl == L[i]) continue;
      slx += w * x[i] * static_cast<float>(nl);
      sl2 += w * static_cast<float>(nl * nl);
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<std::int8_t>(nl);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(L[i] + nmax);
  return suml2 > 0 ? sumlx / suml2 : 0.f;
}

inline void quantize_block(const float* x, BlockQ8_0& b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  b.d = fp32_to_fp16(amax / 127.f);
  const float d = fp16_to_fp32(b.d), id = d != 0 ? 1.f / d : 0.f;
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<std::int8_t>(std::clamp(nearest_int(x[i] * id), -127, 127));
}

/// Legacy symmetric types (q4_0, q5_0): codes [0, 2 nmax) for x ~ d (code - nmax).
template <int kNmax>
inline float quantize_symmetric32(const float* x, std::uint16_t& d16, int* codes) {
  float w[32];
  for (int i = 0; i < 32; ++i) w[i] = 1.f;
  std::int8_t L[32];
  d16 = fp32_to_fp16(search_symmetric(32, kNmax, x, w, L));
  const float d = fp16_to_fp32(d16);
  for (int i = 0; i < 32; ++i) codes[i] = d != 0 ? std::clamp(nearest_int(x[i] / d), -kNmax, kNmax - 1) + kNmax : kNmax;
  return d;
}

/// Legacy asymmetric types (q4_1, q5_1): codes [0, nmax] for x ~ d code + m.
template <int kNmax>
inline void quantize_asymmetric32(const float* x, std::uint16_t& d16, std::uint16_t& m16, int* codes) {
  float w[32];
  for (int i = 0; i < 32; ++i) w[i] = 1.f;
  std::uint8_t L[32];
  float neg_min = 0;
  const float scale = search_asymmetric(32, kNmax, x, w, L, neg_min, -1.f, 0.1f, 20);
  d16 = fp32_to_fp16(scale);
  m16 = fp32_to_fp16(-neg_min);
  const float d = fp16_to_fp32(d16), m = fp16_to_fp32(m16);
  for (int i = 0; i < 32; ++i) codes[i] = d != 0 ? std::clamp(nearest_int((x[i] - m) / d), 0, kNmax) : 0;
}

inline void pack_nibbles(const int* codes, std::uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<std::uint8_t>((codes[j] & 0xF) | (codes[j + 16] & 0xF) << 4);
}
inline void pack_fifth_bits(const int* codes, std::uint8_t* qh) {
  std::uint32_t h = 0;
  for (int i = 0; i < 32; ++i) h |= static_cast<std::uint32_t>((codes[i] >> 4) & 1) << i;
  for (int i = 0; i < 4; ++i) qh[i] = static_cast<std::uint8_t>(h >> (8 * i));
}

inline void quantize_block(const float* x, BlockQ4_0& b) {
  int c[32];
  quantize_symmetric32<8>(x, b.d, c);
  pack_nibbles(c, b.qs);
}
inline void quantize_block(const float* x, BlockQ5_0& b) {
  int c[32];
  quantize_symmetric32<16>(x, b.d, c);
  pack_nibbles(c, b.qs);
  pack_fifth_bits(c, b.qh);
}
inline void quantize_block(const float* x, BlockQ4_1& b) {
  int c[32];
  quantize_asymmetric32<15>(x, b.d, b.m, c);
  pack_nibbles(c, b.qs);
}
inline void quantize_block(const float* x, BlockQ5_1& b) {
  int c[32];
  quantize_asymmetric32<31>(x, b.d, b.m, c);
  pack_nibbles(c, b.qs);
  pack_fifth_bits(c, b.qh);
}

/// Packs 2-bit codes L[0..256) into q2_K/q3_K's qs layout (see two_bit_code()).
inline void pack_two_bits(const std::uint8_t* L, std::uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const std::uint8_t* p = L + 128 * h + l;
      qs[32 * h + l] = static_cast<std::uint8_t>((p[0] & 3) | (p[32] & 3) << 2 | (p[64] & 3) << 4 | (p[96] & 3) << 6);
    }
}

inline void quantize_block(const float* x, BlockQ2_K& b) {
  std::uint8_t L[256];
  float scales[16], mins[16], w[16];
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 16; ++s) {
    for (int i = 0; i < 16; ++i) w[i] = std::fabs(x[16 * s + i]);
    scales[s] = search_asymmetric(16, 3, x + 16 * s, w, L + 16 * s, mins[s], -0.5f, 0.1f, 15);
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }
  for (int s = 0; s < 16; ++s) {
    const int ls = max_scale > 0 ? std::clamp(nearest_int(15.f / max_scale * scales[s]), 0, 15) : 0;
    const int lm = max_min > 0 ? std::clamp(nearest_int(15.f / max_min * mins[s]), 0, 15) : 0;
    b.scales[s] = static_cast<std::uint8_t>(ls | lm << 4);
  }
  b.d = fp32_to_fp16(max_scale > 0 ? max_scale / 15.f : 0.f);
  b.dmin = fp32_to_fp16(max_min > 0 ? max_min / 15.f : 0.f);
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(b.scales[s] & 0xF), ml = dmin * static_cast<float>(b.scales[s] >> 4);
    for (int i = 16 * s; i < 16 * s + 16; ++i)
      L[i] = static_cast<std::uint8_t>(dl != 0 ? std::clamp(nearest_int((x[i] + ml) / dl), 0, 3) : 0);
  }
  pack_two_bits(L, b.qs);
}

inline void quantize_block(const float* x, BlockQ3_K& b) {
  std::int8_t L[256];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int s = 0; s < 16; ++s) {
    scales[s] = search_q3(16, 4, x + 16 * s, L + 16 * s);
    if (std::fabs(scales[s]) > amax) amax = std::fabs(scales[s]), max_scale = scales[s];
  }
  std::memset(b.scales, 0, sizeof b.scales);
  if (max_scale != 0) {
    const float iscale = -32.f / max_scale;
    for (int s = 0; s < 16; ++s) {
      const int l = std::clamp(nearest_int(iscale * scales[s]), -32, 31) + 32;
      if (s < 8)
        b.scales[s] = static_cast<std::uint8_t>(l & 0xF);
      else
        b.scales[s - 8] = static_cast<std::uint8_t>(b.scales[s - 8] | (l & 0xF) << 4);
      b.scales[8 + s % 4] = static_cast<std::uint8_t>(b.scales[8 + s % 4] | (l >> 4) << (2 * (s / 4)));
    }
    b.d = fp32_to_fp16(1.f / iscale);
  } else {
    b.d = fp32_to_fp16(0.f);
  }
  const float d = fp16_to_fp32(b.d);
  std::uint8_t U[256];
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(q3k_scale(b.scales, s));
    for (int i = 16 * s; i < 16 * s + 16; ++i)
      U[i] = static_cast<std::uint8_t>((dl != 0 ? std::clamp(nearest_int(x[i] / dl), -4, 3) : 0) + 4);
  }
  std::memset(b.hmask, 0, sizeof b.hmask);
  for (int i = 0; i < 256; ++i)
    if (U[i] > 3) {
      b.hmask[i % 32] = static_cast<std::uint8_t>(b.hmask[i % 32] | 1 << (i / 32));
      U[i] = static_cast<std::uint8_t>(U[i] - 4);
    }
  pack_two_bits(U, b.qs);
}

/// q4_K/q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; returns the codes in L.
template <int kNmax>
inline void quantize_k4_scales(const float* x, std::uint16_t& d16, std::uint16_t& dmin16, std::uint8_t* packed,
                               std::uint8_t* L, float rmin, int nstep) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float sum_x2 = 0;
    for (int i = 0; i < 32; ++i) sum_x2 += xs[i] * xs[i];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int i = 0; i < 32; ++i) w[i] = av_x + std::fabs(xs[i]);
    scales[s] = search_asymmetric(32, kNmax, xs, w, L + 32 * s, mins[s], rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(packed, 0, 12);
  for (int s = 0; s < 8; ++s) {
    const int ls = std::clamp(nearest_int(inv_scale * scales[s]), 0, 63);
    const int lm = std::clamp(nearest_int(inv_min * mins[s]), 0, 63);
    if (s < 4) {
      packed[s] = static_cast<std::uint8_t>(ls);
      packed[s + 4] = static_cast<std::uint8_t>(lm);
    } else {
      packed[s + 4] = static_cast<std::uint8_t>((ls & 0xF) | (lm & 0xF) << 4);
      packed[s - 4] = static_cast<std::uint8_t>(packed[s - 4] | (ls >> 4) << 6);
      packed[s] = static_cast<std::uint8_t>(packed[s] | (lm >> 4) << 6);
    }
  }
  d16 = fp32_to_fp16(max_scale / 63.f);
  dmin16 = fp32_to_fp16(max_min / 63.f);
  const float d = fp16_to_fp32(d16), dmin = fp16_to_fp32(dmin16);
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    k4_scale_min(s, packed, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    for (int i = 32 * s; i < 32 * s + 32; ++i)
      L[i] = static_cast<std::uint8_t>(d1 != 0 ? std::clamp(nearest_int((x[i] + m1) / d1), 0, kNmax) : 0);
  }
}

inline void quantize_block(const float* x, BlockQ4_K& b) {
  std::uint8_t L[256];
  quantize_k4_scales<15>(x, b.d, b.dmin, b.scales, L, -1.f, 20);
  for (int h = 0; h < 4; ++h)
    for (int l = 0; l < 32; ++l) b.qs[32 * h + l] = static_cast<std::uint8_t>(L[64 * h + l] | L[64 * h + 32 + l] << 4);
}

inline void quantize_block(const float* x, BlockQ5_K& b) {
  std::uint8_t L[256];
  quantize_k4_scales<31>(x, b.d, b.dmin, b.scales, L, -0.5f, 15);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int i = 0; i < 256; ++i)
    if (L[i] > 15) b.qh[i % 32] = static_cast<std::uint8_t>(b.qh[i % 32] | 1 << (i / 32));
  for (int h = 0; h < 4; ++h)
    for (int l = 0; l < 32; ++l)
      b.qs[32 * h + l] = static_cast<std::uint8_t>((L[64 * h + l] & 0xF) | (L[64 * h + 32 + l] & 0xF) << 4);
}

inline void quantize_block(const float* x, BlockQ6_K& b) {
  std::int8_t L[256];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int s = 0; s < 16; ++s) {
    scales[s] = search_symmetric(16, 32, x + 16 * s, nullptr, L + 16 * s);
    if (std::fabs(scales[s]) > amax) amax = std::fabs(scales[s]), max_scale = scales[s];
  }
  std::memset(&b, 0, sizeof b);
  if (amax < kGroupMaxEps) return;  // all zero: d = 0
  const float iscale = -128.f / max_scale;
  b.d = fp32_to_fp16(1.f / iscale);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[s])));
  const float d = fp16_to_fp32(b.d);
  std::uint8_t U[256];
  for (int s = 0; s < 16; ++s) {
    const float ds = d * static_cast<float>(b.scales[s]);
    for (int i = 16 * s; i < 16 * s + 16; ++i)
      U[i] = static_cast<std::uint8_t>((ds != 0 ? std::clamp(nearest_int(x[i] / ds), -32, 31) : 0) + 32);
  }
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const std::uint8_t* u = U + 128 * h + l;
      b.ql[64 * h + l] = static_cast<std::uint8_t>((u[0] & 0xF) | (u[64] & 0xF) << 4);
      b.ql[64 * h + 32 + l] = static_cast<std::uint8_t>((u[32] & 0xF) | (u[96] & 0xF) << 4);
      b.qh[32 * h + l] = static_cast<std::uint8_t>(u[0] >> 4 | (u[32] >> 4) << 2 | (u[64] >> 4) << 4 | (u[96] >> 4) << 6);
    }
}

// ---- Table types: iq4_nl, iq4_xs, mxfp4 ------------------------------------------

/// The index of the level of `values` (16 int8 levels) nearest to x; the first on a tie.
inline int nearest_level(const std::int8_t* values, float x) {
  int best = 0;
  float best_err = std::fabs(x - static_cast<float>(values[0]));
  for (int l = 1; l < 16; ++l) {
    const float err = std::fabs(x - static_cast<float>(values[l]));
    if (err < best_err) best = l, best_err = err;
  }
  return best;
}

/// iq4_nl's search for a group of n values (ggml's shape of it): the scales that
/// put the signed largest x at level values[0] + t for t in [-7, 7], plus the one
/// that puts it at -values[0], each refitted by least squares over its levels
/// with weights x^2, keeping the least weighted error. Returns the scale (0 for a
/// zero group).
inline float search_iq4(int n, const float* x, std::uint8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<std::uint8_t>(nearest_level(kIq4nlValues, 0.f));
    return 0.f;
  }
  const float v0 = static_cast<float>(kIq4nlValues[0]);
  float best_scale = 0, best = -1;
  for (int t = -8; t <= 7; ++t) {
    const float id = t == -8 ? -v0 / max : (v0 + static_cast<float>(t)) / max;
    float sumqx = 0, sumq2 = 0;
    std::uint8_t aux[32];
    for (int i = 0; i < n; ++i) {
      aux[i] = static_cast<std::uint8_t>(nearest_level(kIq4nlValues, id * x[i]));
      const float q = static_cast<float>(kIq4nlValues[aux[i]]), w = x[i] * x[i];
      sumqx += w * q * x[i];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && (best < 0 || sumqx * sumqx > best * sumq2)) {
      best_scale = sumqx / sumq2;
      best = best_scale * sumqx;
      std::copy(aux, aux + n, L);
    }
  }
  return best_scale;
}

/// Codes of x[0..n) for the stored scale d (all the zero level's code if d is 0).
inline void iq4_codes(int n, const float* x, float d, int* codes) {
  const float id = d != 0 ? 1.f / d : 0.f;
  for (int i = 0; i < n; ++i) codes[i] = nearest_level(kIq4nlValues, x[i] * id);
}

inline void quantize_block(const float* x, BlockIQ4_NL& b) {
  std::uint8_t L[32];
  b.d = fp32_to_fp16(search_iq4(32, x, L));
  int c[32];
  iq4_codes(32, x, fp16_to_fp32(b.d), c);
  pack_nibbles(c, b.qs);
}

/// iq4_xs: each sub-block's scale from search_iq4, then one f16 d = -max / 32 for
/// the 6-bit signed sub-block scales (round(scale / d) in [-32, 31]), and the
/// codes chosen again for each stored d * ls.
inline void quantize_block(const float* x, BlockIQ4_XS& b) {
  float scales[8];
  float amax = 0, max_scale = 0;
  for (int s = 0; s < 8; ++s) {
    std::uint8_t L[32];
    scales[s] = search_iq4(32, x + 32 * s, L);
    if (std::fabs(scales[s]) > amax) amax = std::fabs(scales[s]), max_scale = scales[s];
  }
  std::memset(&b, 0, sizeof b);
  int ls[8];
  if (amax < kGroupMaxEps) {
    for (int s = 0; s < 8; ++s) ls[s] = 0;
  } else {
    b.d = fp32_to_fp16(-max_scale / 32.f);
    const float d = fp16_to_fp32(b.d), id = d != 0 ? 1.f / d : 0.f;
    for (int s = 0; s < 8; ++s) ls[s] = std::clamp(nearest_int(id * scales[s]), -32, 31);
  }
  const float d = fp16_to_fp32(b.d);
  for (int s = 0; s < 8; ++s) {
    const int u = ls[s] + 32;
    b.scales_l[s / 2] = static_cast<std::uint8_t>(b.scales_l[s / 2] | (u & 0xF) << (4 * (s % 2)));
    b.scales_h = static_cast<std::uint16_t>(b.scales_h | ((u >> 4) & 3) << (2 * s));
    int c[32];
    iq4_codes(32, x + 32 * s, d * static_cast<float>(ls[s]), c);
    pack_nibbles(c, b.qs + 16 * s);
  }
}

/// mxfp4: ggml's exponent, floor(log2(max |x|)) - 2 (so the largest value lands
/// between the levels 4 and 8 of the doubled table), and the one above it; each
/// with the nearest levels, keeping the smaller squared error. e8m0 stays in
/// [0, 254] (0xFF is NaN). floor(log2) is std::ilogb, exact in every C library.
inline void quantize_block(const float* x, BlockMXFP4& b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const int e0 = amax > 0 ? std::clamp(std::ilogb(amax) - 2 + 127, 0, 253) : 0;
  float best = -1;
  for (int e = e0; e <= e0 + 1; ++e) {
    const float d = e8m0_to_fp32_half(static_cast<std::uint8_t>(e));
    int c[32];
    float err = 0;
    for (int i = 0; i < 32; ++i) {
      c[i] = nearest_level(kMxfp4Values, x[i] / d);
      const float diff = static_cast<float>(kMxfp4Values[c[i]]) * d - x[i];
      err += diff * diff;
    }
    if (best < 0 || err < best) {
      best = err;
      b.e = static_cast<std::uint8_t>(e);
      pack_nibbles(c, b.qs);
    }
  }
}

}  // namespace kvd::detail
