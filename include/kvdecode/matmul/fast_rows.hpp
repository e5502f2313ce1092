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

/// The scalar definition of fast_round_block().
inline float fast_round_block_portable(const float* x, std::int32_t* qi) {
  float amax = 0.f;
  for (long k = 0; k < kFastBlock; ++k) {
    const float a = std::fabs(x[k]);
    amax = a > amax ? a : amax;  // skips NaN
  }
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  for (long k = 0; k < kFastBlock; ++k) {
    float r = std::nearbyint(x[k] * id);  // the default rounding mode: to nearest, ties to even
    if (!(r == r)) r = 0.f;
    r = std::min(std::max(r, -127.f), 127.f);
    qi[k] = static_cast<std::int32_t>(r);
  }
  return d;
}

/// One block of 32 values rounded (top of fast_int8.hpp): the integer codes in natural order, the scale.
inline float fast_round_block(const float* x, std::int32_t* qi) {
#if defined(KVDECODE_VEC_AVX2)
  // The same operations as the scalar code: max skipping NaNs (vmaxps returns
  // its second operand when either is NaN), one multiply, round to nearest even.
  __m256 m = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int v = 0; v < 4; ++v) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * v), abs_mask), m);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float amax = 0.f;
  for (float a : lanes) amax = a > amax ? a : amax;
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  const __m256 vid = _mm256_set1_ps(id), lo = _mm256_set1_ps(-127.f), hi = _mm256_set1_ps(127.f);
  for (int v = 0; v < 4; ++v) {
    __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * v), vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));  // NaN -> 0
    r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qi + 8 * v), _mm256_cvtps_epi32(r));
  }
  return d;
#else
  return fast_round_block_portable(x, qi);
#endif
}

/// Rows [m0, m1) of x (stride ldx, K values) rounded into `rows`.
inline void fast_round_rows(const float* x, long ldx, long m0, long m1, FastRows& rows, bool portable = false) {
  const long K = rows.K, nb = K / kFastBlock;
  for (long m = m0; m < m1; ++m)
    for (long j = 0; j < nb; ++j) {
      std::int32_t qi[kFastBlock];
      const float* xb = x + m * ldx + j * kFastBlock;
      const float d = portable ? fast_round_block_portable(xb, qi) : fast_round_block(xb, qi);
      std::int8_t* q = rows.q.data() + m * K + j * kFastBlock;
      std::int32_t s = 0, half[2] = {0, 0};
      for (int k = 0; k < kFastBlock; ++k) {
        q[fast_pos(rows.order, k)] = static_cast<std::int8_t>(qi[k]);
        s += qi[k];
        half[k / 16] += qi[k];
      }
      for (int h = 0; h < 2; ++h) {
        rows.qsum16.data()[(m * nb + j) * 2 + h] = half[h];
        rows.xq16.data()[(m * nb + j) * 2 + h] = d * static_cast<float>(half[h]);
      }
      rows.d.data()[m * nb + j] = d;
      rows.qsum.data()[m * nb + j] = s;
      rows.xq.data()[m * nb + j] = d * static_cast<float>(s);
    }
}

}  // namespace kvd::detail
