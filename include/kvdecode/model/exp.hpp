// kvdecode's exp: one algorithm with a scalar form and vector forms that give
// identical bits, so softmax and SiLU can run 16 lanes at a time in one path
// and one value at a time in another without breaking exactness.
//
// Why the forms agree: every step is a correctly rounded IEEE operation (fma,
// subtraction, multiplication by an exact power of two) or exact integer work,
// applied in the same order in each form, and each lane is independent.
//   1. out of range: x >= hi -> +inf (NaN -> NaN), x < lo -> +0
//   2. n = (fma(x, log2(e), M) - M)            M = 1.5 * 2^mantissa_bits: round to nearest integer
//   3. r = fma(n, -ln2_hi, x); r = fma(n, -ln2_lo, r)        Cody-Waite reduction, |r| <= ln2/2
//   4. p = Taylor polynomial of e^r by Horner with fma (degree 7 for float, 13 for double)
//   5. result = (p * 2^floor(n/2)) * 2^(n - floor(n/2))    two exact-or-once-rounded scalings,
//      so results in the subnormal range round once, like ldexp
// Accuracy: within 2 ulp of the true exp for float and double (tested).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kvdecode/core/isa.hpp"

#if defined(KVDECODE_VEC_AVX512) || defined(KVDECODE_VEC_AVX2)
#include <immintrin.h>
#endif
#if defined(KVDECODE_VEC_NEON)
#include <arm_neon.h>
#endif

namespace kvd::detail {

template <class T>
struct ExpConstants;

template <>
struct ExpConstants<float> {
  static constexpr float hi = 88.72283935546875f;   // >= this: +inf (ln(FLT_MAX) rounds below it)
  static constexpr float lo = -103.97208404541016f; // < this: +0 (below half the smallest subnormal)
  static constexpr float log2e = 1.44269502162933349609375f;
  static constexpr float magic = 12582912.0f;       // 1.5 * 2^23
  static constexpr float ln2_hi = 0.693359375f;     // 355/512, exact in few bits
  static constexpr float ln2_lo = -2.12194440e-4f;  // ln2 - ln2_hi
  static constexpr int degree = 7;
  static constexpr float coef[degree + 1] = {1.0f, 1.0f, 0.5f, 1.0f / 6, 1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};
  static float pow2(int k) {  // 2^k for k in [-126, 127]
    const std::uint32_t bits = static_cast<std::uint32_t>(k + 127) << 23;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

template <>
struct ExpConstants<double> {
  static constexpr double hi = 709.78271289338408;  // the first double whose exp overflows
  static constexpr double lo = -745.1332191019412;
  static constexpr double log2e = 1.4426950408889634;
  static constexpr double magic = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr double ln2_hi = 0.693147180369123816490;    // fdlibm's split of ln 2
  static constexpr double ln2_lo = 1.90821492927058770002e-10;
  static constexpr int degree = 13;
  static constexpr double coef[degree + 1] = {1.0, 1.0, 0.5, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040,
                                              1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800,
                                              1.0 / 479001600, 1.0 / 6227020800.0};
  static double pow2(int k) {  // 2^k for k in [-1022, 1023]
    const std::uint64_t bits = static_cast<std::uint64_t>(k + 1023) << 52;
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
};

/// e^x by the algorithm above (scalar form).
template <class T>
inline T exp_scalar(T x) {
  using C = ExpConstants<T>;
  if (!(x < C::hi)) return x != x ? x : std::numeric_limits<T>::infinity();
  if (x < C::lo) return T(0);
  const T n = std::fma(x, C::log2e, C::magic) - C::magic;
  T r = std::fma(n, -C::ln2_hi, x);
  r = std::fma(n, -C::ln2_lo, r);
  T p = C::coef[C::degree];
  for (int i = C::degree - 1; i >= 0; --i) p = std::fma(p, r, C::coef[i]);
  const int ni = static_cast<int>(n);
  const int n1 = ni >> 1;  // floor(n / 2)
  return (p * C::pow2(n1)) * C::pow2(ni - n1);
}

// GCC 12 warns that its own AVX-512 intrinsics read an "uninitialized" pass-through
// register (_mm512_undefined_*); the warning is about the compiler's headers, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/// out[i] = e^x[i] for i in [0, n); vectorised where the instruction set allows,
/// with bits identical to exp_scalar. out may equal x.
template <class T>
inline void exp_array(const T* x, T* out, long n) {
  long i = 0;
#if defined(KVDECODE_VEC_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    using C = ExpConstants<float>;
    const __m512 hi = _mm512_set1_ps(C::hi), lo = _mm512_set1_ps(C::lo), magic = _mm512_set1_ps(C::magic);
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(x + i);
      const __mmask16 over = _mm512_cmp_ps_mask(v, hi, _CMP_NLT_UQ);  // x >= hi or NaN
      const __mmask16 under = _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ);
      const bool in_range = (over | under) == 0;                      // softmax's and SiLU's usual case
      const __m512 xc = in_range ? v : _mm512_max_ps(_mm512_min_ps(v, hi), lo);  // keeps the integer work in range
      const __m512 nn = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(C::log2e), magic), magic);
      __m512 r = _mm512_fmadd_ps(nn, _mm512_set1_ps(-C::ln2_hi), xc);
      r = _mm512_fmadd_ps(nn, _mm512_set1_ps(-C::ln2_lo), r);
      __m512 p = _mm512_set1_ps(C::coef[C::degree]);
      for (int k = C::degree - 1; k >= 0; --k) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C::coef[k]));
      // p * 2^n rounded once: the same value as step 5's two scalings (the first is exact
      // for n >= -150, so only the second rounds), in one instruction.
      __m512 res = _mm512_maskz_scalef_ps(__mmask16(0xFFFF), p, nn);
      if (!in_range) {
        const __m512 inf_or_nan = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                                                       _mm512_set1_ps(std::numeric_limits<float>::infinity()), v);
        res = _mm512_mask_blend_ps(over, res, inf_or_nan);
        res = _mm512_mask_blend_ps(under, res, _mm512_setzero_ps());
      }
      _mm512_storeu_ps(out + i, res);
    }
  }
#elif defined(KVDECODE_VEC_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    using C = ExpConstants<float>;
    const __m256 hi = _mm256_set1_ps(C::hi), lo = _mm256_set1_ps(C::lo), magic = _mm256_set1_ps(C::magic);
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      const __m256 over = _mm256_cmp_ps(v, hi, _CMP_NLT_UQ);
      const __m256 under = _mm256_cmp_ps(v, lo, _CMP_LT_OQ);
      const __m256 out_of_range = _mm256_or_ps(over, under);
      const bool in_range = _mm256_testz_ps(out_of_range, out_of_range) != 0;
      const __m256 xc = in_range ? v : _mm256_max_ps(_mm256_min_ps(v, hi), lo);
      const __m256 nn = _mm256_sub_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(C::log2e), magic), magic);
      __m256 r = _mm256_fmadd_ps(nn, _mm256_set1_ps(-C::ln2_hi), xc);
      r = _mm256_fmadd_ps(nn, _mm256_set1_ps(-C::ln2_lo), r);
      __m256 p = _mm256_set1_ps(C::coef[C::degree]);
      for (int k = C::degree - 1; k >= 0; --k) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C::coef[k]));
      const __m256i ni = _mm256_cvtps_epi32(nn);
      const __m256i n1 = _mm256_srai_epi32(ni, 1);
      const __m256i n2 = _mm256_sub_epi32(ni, n1);
      const __m256i bias = _mm256_set1_epi32(127);
      const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
      const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
      __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
      if (!in_range) {
        const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        const __m256 inf_or_nan = _mm256_blendv_ps(_mm256_set1_ps(std::numeric_limits<float>::infinity()), v, nan);
        res = _mm256_blendv_ps(res, inf_or_nan, over);
        res = _mm256_blendv_ps(res, _mm256_setzero_ps(), under);
      }
      _mm256_storeu_ps(out + i, res);
    }
  }
#elif defined(KVDECODE_VEC_NEON)
  if constexpr (std::is_same_v<T, float>) {
    using C = ExpConstants<float>;
    const float32x4_t hi = vdupq_n_f32(C::hi), lo = vdupq_n_f32(C::lo), magic = vdupq_n_f32(C::magic);
    for (; i + 4 <= n; i += 4) {
      const float32x4_t v = vld1q_f32(x + i);
      const uint32x4_t over = vmvnq_u32(vcltq_f32(v, hi));  // x >= hi or NaN
      const uint32x4_t under = vcltq_f32(v, lo);
      const float32x4_t xc = vmaxq_f32(vminq_f32(v, hi), lo);  // NaN stays NaN here; its lane is replaced below
      const float32x4_t nn = vsubq_f32(vfmaq_f32(magic, xc, vdupq_n_f32(C::log2e)), magic);
      float32x4_t r = vfmaq_f32(xc, nn, vdupq_n_f32(-C::ln2_hi));
      r = vfmaq_f32(r, nn, vdupq_n_f32(-C::ln2_lo));
      float32x4_t p = vdupq_n_f32(C::coef[C::degree]);
      for (int k = C::degree - 1; k >= 0; --k) p = vfmaq_f32(vdupq_n_f32(C::coef[k]), p, r);
      const int32x4_t ni = vcvtq_s32_f32(nn);  // nn is a whole number: exact (a NaN lane gives 0)
      const int32x4_t n1 = vshrq_n_s32(ni, 1);
      const int32x4_t n2 = vsubq_s32(ni, n1);
      const int32x4_t bias = vdupq_n_s32(127);
      const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
      const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
      float32x4_t res = vmulq_f32(vmulq_f32(p, s1), s2);
      const float32x4_t inf_or_nan = vbslq_f32(vceqq_f32(v, v), vdupq_n_f32(std::numeric_limits<float>::infinity()), v);
      res = vbslq_f32(over, inf_or_nan, res);
      res = vbslq_f32(under, vdupq_n_f32(0.0f), res);
      vst1q_f32(out + i, res);
    }
  }
#endif
  for (; i < n; ++i) out[i] = exp_scalar(x[i]);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace kvd::detail
