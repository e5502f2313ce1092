// The fast mode's rounded activations (fast_int8.hpp): which block types the mode
// computes, the order of the rounded rows, and the rounding of rows of x into
// int8 blocks of 32 with their scales and sums, one definition for every path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/weights/block_types.hpp"

namespace kvd::detail {

/// Whether the fast mode computes matrices of type t (its row's kFastOrder is not 0;
/// the others keep the default numerics). Never throws.
inline bool fast_matmul_type(WeightType t) {
  bool fast = false;
  visit_block_type(t, [&](auto row) { fast = decltype(row)::kFastOrder != 0; });
  return fast;
}

inline constexpr long kFastBlock = 32;

/// Position of value k (0..7) of a group of 8 in the rounded row (0, 2, 4, 6, 1, 3, 5, 7).
constexpr int fast_slot(int k) { return (k % 2 == 0) ? k / 2 : 4 + k / 2; }
/// Position of value k (0..15) of a group of 16 in a row of order 16 (0, 4, 8, 12, 1, 5, 9, 13, ...).
constexpr int fast_slot16(int k) { return 4 * (k % 4) + k / 4; }
/// The rounded rows' order for type t: its row's kFastOrder, groups of 16 for the
/// 2-bit planes (q2_K, q3_K), 4 (the values in their order) for q8_0's bytes, else
/// groups of 8 (also for a type the fast mode does not compute).
inline int fast_order(WeightType t) {
  int order = 8;
  visit_block_type(t, [&](auto row) {
    constexpr int o = decltype(row)::kFastOrder;
    order = o == 16 || o == 4 ? o : 8;
  });
  return order;
}
/// Where value k of a rounded row of the given order (4, 8 or 16) is stored.
constexpr long fast_pos(int order, long k) {
  if (order == 4) return k;
  return order == 16 ? (k & ~15L) + fast_slot16(static_cast<int>(k & 15)) : (k & ~7L) + fast_slot(static_cast<int>(k & 7));
}

/// Rounded rows: q (M x K, row stride K, groups of `order` values reordered, or
/// for order 4 in their order: fast_pos()), and per row and block of 32: the scale d, the integer sum of q,
/// and d * float(that sum); per half block of 16: the integer sum of q and d *
/// float(it) (the sub-blocks of q2_K, q3_K and q6_K).
struct FastRows {
  AlignedBuffer<std::int8_t> q;
  AlignedBuffer<float> d, xq, xq16;
  AlignedBuffer<std::int32_t> qsum, qsum16;
  long K = 0;
  int order = 8;
  void reserve(long M, long k, int row_order = 8) {
    K = k;
    order = row_order;
    q.reserve(static_cast<std::size_t>(M * K));
    d.reserve(static_cast<std::size_t>(M * K / kFastBlock));
    xq.reserve(static_cast<std::size_t>(M * K / kFastBlock));
    qsum.reserve(static_cast<std::size_t>(M * K / kFastBlock));
    qsum16.reserve(static_cast<std::size_t>(M * K / 16));
    xq16.reserve(static_cast<std::size_t>(M * K / 16));
  }
};

/// A block's scale d = amax / 127 from its largest |x|, and in id the factor the
/// values are multiplied by before rounding (1 / d, 0 where d is 0): one
/// definition for the scalar and every vector path.
inline float fast_block_scale(float amax, float* id) {
  const float d = amax / 127.f;
  *id = d != 0.f ? 1.f / d : 0.f;
  return d;
}

/// The scalar definition of one block's rounding (fast_round_block_bytes()).
inline float fast_round_block_portable(const float* x, std::int32_t* qi) {
  float amax = 0.f;
  for (long k = 0; k < kFastBlock; ++k) {
    const float a = std::fabs(x[k]);
    amax = a > amax ? a : amax;  // skips NaN
  }
  float id;
  const float d = fast_block_scale(amax, &id);
  for (long k = 0; k < kFastBlock; ++k) {
    float r = std::nearbyint(x[k] * id);  // the default rounding mode: to nearest, ties to even
    if (!(r == r)) r = 0.f;
    r = std::min(std::max(r, -127.f), 127.f);
    qi[k] = static_cast<std::int32_t>(r);
  }
  return d;
}

#if defined(KVDECODE_VEC_AVX2)
/// One block of 32 values rounded (top of fast_int8.hpp) with the same operations as
/// fast_round_block_portable(): max skipping NaNs (vmaxps returns its second operand
/// when either is NaN), one multiply, round to nearest even. Its codes are stored as
/// bytes at q in the rounded rows' order (4, 8 or 16: fast_pos()), and the sums of its
/// two halves of 16 codes in half: the bytes are only moved, and integer sums are
/// exact in any order.
inline float fast_round_block_bytes(const float* x, int order, std::int8_t* q, std::int32_t half[2]) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps();
  for (int v = 0; v < 4; ++v) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * v), abs_mask), m);
  // the largest lane: no NaN reaches m (vmaxps keeps its second operand), so any order of maxima gives it
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  float id;
  const float d = fast_block_scale(amax, &id);
  const __m256 vid = _mm256_set1_ps(id), lo = _mm256_set1_ps(-127.f), hi = _mm256_set1_ps(127.f);
  __m256i c[4];
  for (int v = 0; v < 4; ++v) {
    __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * v), vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));  // NaN -> 0
    c[v] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
  }
  // bytes in value order: the packs leave dword i of each lane holding 4 values of c[i]
  __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  if (order == 8)
    b = _mm256_shuffle_epi8(b, _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15,  //
                                                0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15));
  else if (order == 16)
    b = _mm256_shuffle_epi8(b, _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,  //
                                                0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), b);
  // half 0 is c[0] + c[1], half 1 is c[2] + c[3]
  __m256i s = _mm256_hadd_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
  s = _mm256_hadd_epi32(s, s);
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  half[0] = _mm_cvtsi128_si32(s4);
  half[1] = _mm_extract_epi32(s4, 1);
  return d;
}
#elif defined(KVDECODE_VEC_NEON)
/// fast_round_block_bytes() with NEON: vmaxnmq keeps the number when one operand
/// is NaN (the scalar max's skip), vrndnq rounds to nearest even; the same codes,
/// moved into the rows' order by a table lookup, and exact integer sums.
inline float fast_round_block_bytes(const float* x, int order, std::int8_t* q, std::int32_t half[2]) {
  float32x4_t m = vdupq_n_f32(0.f);
  for (int v = 0; v < 8; ++v) m = vmaxnmq_f32(vabsq_f32(vld1q_f32(x + 4 * v)), m);
  const float amax = vmaxnmvq_f32(m);
  float id;
  const float d = fast_block_scale(amax, &id);
  const float32x4_t vid = vdupq_n_f32(id), lo = vdupq_n_f32(-127.f), hi = vdupq_n_f32(127.f);
  int32x4_t c[8];
  for (int v = 0; v < 8; ++v) {
    float32x4_t r = vrndnq_f32(vmulq_f32(vld1q_f32(x + 4 * v), vid));
    r = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(r), vceqq_f32(r, r)));  // NaN -> 0
    c[v] = vcvtq_s32_f32(vminq_f32(vmaxq_f32(r, lo), hi));
  }
  int8x16_t b[2];
  for (int h = 0; h < 2; ++h) {
    const int16x8_t w0 = vcombine_s16(vmovn_s32(c[4 * h]), vmovn_s32(c[4 * h + 1]));
    const int16x8_t w1 = vcombine_s16(vmovn_s32(c[4 * h + 2]), vmovn_s32(c[4 * h + 3]));
    b[h] = vcombine_s8(vmovn_s16(w0), vmovn_s16(w1));
    half[h] = vaddvq_s32(vaddq_s32(vaddq_s32(c[4 * h], c[4 * h + 1]), vaddq_s32(c[4 * h + 2], c[4 * h + 3])));
  }
  if (order == 8 || order == 16) {
    static const std::uint8_t k8[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
    static const std::uint8_t k16[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
    const uint8x16_t t = vld1q_u8(order == 8 ? k8 : k16);
    for (int h = 0; h < 2; ++h) b[h] = vqtbl1q_s8(b[h], t);
  }
  vst1q_s8(q, b[0]);
  vst1q_s8(q + 16, b[1]);
  return d;
}
#endif

/// Rows [m0, m1) of x (stride ldx, K values) rounded into `rows`.
inline void fast_round_rows(const float* x, long ldx, long m0, long m1, FastRows& rows,
                            [[maybe_unused]] bool portable = false) {
  const long K = rows.K, nb = K / kFastBlock;
  const int order = rows.order;
  std::int8_t* const q0 = rows.q.data();
  float *const dd = rows.d.data(), *const xq = rows.xq.data(), *const xq16 = rows.xq16.data();
  std::int32_t *const qsum = rows.qsum.data(), *const qsum16 = rows.qsum16.data();
  for (long m = m0; m < m1; ++m)
    for (long j = 0; j < nb; ++j) {
      const float* xb = x + m * ldx + j * kFastBlock;
      std::int8_t* q = q0 + m * K + j * kFastBlock;
      std::int32_t half[2] = {0, 0};
      float d;
#if defined(KVDECODE_VEC_AVX2) || defined(KVDECODE_VEC_NEON)
      if (!portable) {
        d = fast_round_block_bytes(xb, order, q, half);
      } else
#endif
      {
        std::int32_t qi[kFastBlock];
        d = fast_round_block_portable(xb, qi);
        for (int k = 0; k < kFastBlock; ++k) {
          q[fast_pos(order, k)] = static_cast<std::int8_t>(qi[k]);
          half[k / 16] += qi[k];
        }
      }
      const std::int32_t s = half[0] + half[1];
      for (int h = 0; h < 2; ++h) {
        qsum16[(m * nb + j) * 2 + h] = half[h];
        xq16[(m * nb + j) * 2 + h] = d * static_cast<float>(half[h]);
      }
      dd[m * nb + j] = d;
      qsum[m * nb + j] = s;
      xq[m * nb + j] = d * static_cast<float>(s);
    }
}

}  // namespace kvd::detail
