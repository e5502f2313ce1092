// The attention kernels: scores, the position-keyed softmax and the weighted
// sum over a cache's 16-position blocks, for one decode row (the query heads
// of one KV head, which share every K and V load, so a block type's values are
// decoded once per KV head) or for up to 8 consecutive prefill rows of one
// sequence sharing every K and V load. The reduction order they all follow is stated at the top of
// kvdecode/model/attention.hpp; each row's result is the same whichever kernel ran it.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvdecode/core/config.hpp"
#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/model/ops.hpp"

namespace kvd {

namespace detail {

/// Loads 16 consecutive storage values as a compute vector.
template <class T, class S>
inline Vec16<T> load_lanes(const S* p) {
  if constexpr (std::is_same_v<S, T>) {
    return Vec16<T>::load(p);
  } else if constexpr (std::is_same_v<T, float> && std::is_same_v<S, Eigen::half>) {  // exact conversions
    return Vec16<T>::load_f16(reinterpret_cast<const std::uint16_t*>(p));
  } else if constexpr (std::is_same_v<T, float> && std::is_same_v<S, Eigen::bfloat16>) {
    return Vec16<T>::load_bf16(reinterpret_cast<const std::uint16_t*>(p));
  } else {
    T tmp[kLanes];
    for (int i = 0; i < kLanes; ++i) tmp[i] = from_storage<T>(p[i]);
    return Vec16<T>::load(tmp);
  }
}

/// Asks for the cache line holding value i of a block slice (a plain pointer, or the
/// code bytes of a quantized block) to be fetched into L1. Reads nothing, changes
/// nothing: the kernels below call it for the block kAttendAhead blocks ahead, so the
/// next blocks stream in while this one is computed (at 8k positions the K and V of
/// a layer's KV head are 1-2 MB, past L2, in 2-4 KB slices 16-32 KB apart, a stride
/// the hardware prefetchers do not follow across pages).
template <class S>
KVD_ALWAYS_INLINE inline void prefetch_value(const S* p, long i) {
  prefetch_read(p + i);
}
template <int kBits, bool kKey>
KVD_ALWAYS_INLINE inline void prefetch_value(const QuantRef<kBits, kKey>& r, long i) {
  prefetch_read(r.q + (r.i + i) * kBits / 8);
}
/// Blocks of 16 positions between the block being computed and the one prefetched.
inline constexpr int kAttendAhead = 4;

/// s[i] = s[i] / d for i in [0, n), each quotient correctly rounded, as IEEE division
/// gives it: the attention scores' scaling and the softmax's normalisation. When d is
/// a power of two whose reciprocal is a finite T, s[i] * (1 / d) is that same value for
/// every s[i] (subnormal results, infinities and NaNs included), so that case
/// multiplies (head_dim 64 or 256 gives a score divisor of 8 or 16). Otherwise, for
/// float on x86 the quotient is formed in double, q = s[i] * (1 / d), and rounded to
/// float: a multiplication costs a fraction of a vector division.
/// Why that is the same value: the double q is within 2^-52 (relative) of s[i] / d, while
/// a quotient of two floats that is not exactly halfway between two floats is at least
/// 2^-49 (relative) from every such midpoint, so both round to the same float. A
/// quotient can fall exactly halfway only in the subnormal range; lanes whose float
/// result is below FLT_MIN (and nonzero dividends) are divided again, by division, and
/// so are NaN results, whose payload division picks (a compiler may swap the operands
/// of a product). Infinities and zeros give what division gives. Tested against division on
/// random, subnormal and halfway cases (Softmax.DivisionBySumIsCorrectlyRounded).
template <class T>
inline void divide_by(T* s, long n, T d) {
  int e = 0;
  const T m = std::frexp(d, &e);  // d = m * 2^e, m in [0.5, 1)
  const T inv = std::ldexp(T(1), 1 - e);
  if (m == T(0.5) && inv != T(0) && std::isfinite(inv) && inv * d == T(1)) {
    for (long j = 0; j < n; ++j) s[j] = s[j] * inv;
    return;
  }
  long i = 0;
#if defined(KVDECODE_VEC_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    const __m512d r = _mm512_set1_pd(1.0 / static_cast<double>(d));
    const __m512 dv = _mm512_set1_ps(d), tiny = _mm512_set1_ps(std::numeric_limits<float>::min());
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (; i + kLanes <= n; i += kLanes) {
      const __m512 x = _mm512_loadu_ps(s + i);
      // The maskz forms with all lanes set are the plain instructions (see Vec16::load_f16);
      // GCC 12's casts between 256 and 512 bits are built from the unmasked ones.
      const __m512d lo = _mm512_mul_pd(_mm512_maskz_cvtps_pd(__mmask8(0xFF), _mm512_maskz_extractf32x8_ps(__mmask8(0xFF), x, 0)), r);
      const __m512d hi = _mm512_mul_pd(_mm512_maskz_cvtps_pd(__mmask8(0xFF), _mm512_maskz_extractf32x8_ps(__mmask8(0xFF), x, 1)), r);
      const __m512 q_lo = _mm512_maskz_insertf32x8(__mmask16(0xFFFF), _mm512_setzero_ps(), _mm512_maskz_cvtpd_ps(__mmask8(0xFF), lo), 0);
      __m512 q = _mm512_maskz_insertf32x8(__mmask16(0xFFFF), q_lo, _mm512_maskz_cvtpd_ps(__mmask8(0xFF), hi), 1);
      const __mmask16 redo = (_mm512_cmp_ps_mask(_mm512_and_ps(q, abs_mask), tiny, _CMP_LT_OQ) &
                              _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_OQ)) |
                             _mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q);
      if (redo) q = _mm512_mask_div_ps(q, redo, x, dv);
      _mm512_storeu_ps(s + i, q);
    }
  }
#elif defined(KVDECODE_VEC_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    const __m256d r = _mm256_set1_pd(1.0 / static_cast<double>(d));
    const __m256 dv = _mm256_set1_ps(d), tiny = _mm256_set1_ps(std::numeric_limits<float>::min());
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_loadu_ps(s + i);
      const __m128 lo = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), r));
      const __m128 hi = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), r));
      __m256 q = _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
      const __m256 redo = _mm256_or_ps(_mm256_and_ps(_mm256_cmp_ps(_mm256_and_ps(q, abs_mask), tiny, _CMP_LT_OQ),
                                                     _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_OQ)),
                                       _mm256_cmp_ps(q, q, _CMP_UNORD_Q));
      if (!_mm256_testz_ps(redo, redo)) q = _mm256_blendv_ps(q, _mm256_div_ps(x, dv), redo);
      _mm256_storeu_ps(s + i, q);
    }
  }
#endif
  for (; i < n; ++i) s[i] = s[i] / d;
}

/// Softmax over the scores of one query, in place. s[i] is the score of position
/// base + i, base a multiple of 16, for i in [0, 16 * n_blocks); only positions in
/// [lo, hi] are visible and every other entry ends as exactly 0 (the value stored
/// there beforehand is ignored). The reduction structure is keyed to absolute
/// positions, so every caller that sees the same visible scores gets the same bits:
///   m      = max over visible scores                       (exact in any order)
///   e      = exp_(s - m) for visible entries, 0 elsewhere
///   sum    = 16 lane sums, lane j adding the e of positions = j (mod 16) in
///            increasing position, then ((l0+l1)+(l2+l3))+... in a fixed tree
///   s      = e / sum
/// Entries that are not visible add +0 to their lane, which changes nothing.
/// An attention sink (gpt-oss; -inf: none) is one more logit in the denominator only:
/// m = max(m, sink) and sum = tree + exp_(sink - m), after the tree. Without one these
/// are max(m, -inf) = m and sum + 0 = sum: the same bits.
template <class T>
inline void softmax_blocks(T* s, int base, int n_blocks, int lo, int hi,
                           T sink = -std::numeric_limits<T>::infinity()) {
  const int n = n_blocks * kLanes;
  const int i0 = lo - base, i1 = hi - base;  // visible index range [i0, i1]
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int i = 0; i < i0; ++i) s[i] = neg_inf;
  for (int i = i1 + 1; i < n; ++i) s[i] = neg_inf;
  // Four running maxima per lane, so the loop is not one chain of dependent maxima.
  // std::max(m, NaN) keeps m, so every grouping gives the same maximum of the
  // scores that are not NaN (up to the sign of a zero maximum: see below).
  Vec16<T> maxes[4];
  for (auto& m : maxes) m = Vec16<T>::broadcast(neg_inf);
  int b = 0;
  for (; b + 4 <= n_blocks; b += 4)
    for (int k = 0; k < 4; ++k) maxes[k] = Vec16<T>::max(maxes[k], Vec16<T>::load(s + (b + k) * kLanes));
  for (; b < n_blocks; ++b) maxes[0] = Vec16<T>::max(maxes[0], Vec16<T>::load(s + b * kLanes));
  T lane_max[kLanes];
  Vec16<T>::max(Vec16<T>::max(maxes[0], maxes[1]), Vec16<T>::max(maxes[2], maxes[3])).store(lane_max);
  T mx = neg_inf;
  for (int j = 0; j < kLanes; ++j) mx = std::max(mx, lane_max[j]);
  mx = std::max(mx, sink);
  // A signed-zero maximum may come out as +0 or -0 depending on order; s - (+0) and
  // s - (-0) are equal for every s (and exp(+0) == exp(-0)), so that cannot matter.
  // Then e = exp_(s - mx) and the lane sums, 8 blocks at a time while they are in L1.
  T lane_sum[kLanes];
  for (int j = 0; j < kLanes; ++j) lane_sum[j] = T(0);
  constexpr int kChunk = 8;
  for (int b0 = 0; b0 < n_blocks; b0 += kChunk) {
    const int nc = std::min(kChunk, n_blocks - b0) * kLanes;
    T* c = s + b0 * kLanes;
    for (int i = 0; i < nc; ++i) c[i] = c[i] - mx;  // -inf stays -inf
    exp_array(c, c, nc);                            // same bits as exp_ on each value; exp(-inf) = 0
    for (int i = 0; i < nc; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lane_sum[j] = lane_sum[j] + c[i + j];
  }
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lane_sum[j] = lane_sum[2 * j] + lane_sum[2 * j + 1];
  const T sum = sink > neg_inf ? lane_sum[0] + exp_(sink - mx) : lane_sum[0];
  divide_by(s, n, sum);
}

// Register budgets of the group kernels below. They shape passes only, never results:
// every head's chains are the same whatever the pass that carries them.
//   kGroupPass: query heads one pass holds (8 with 32 vector registers, 4 with 16).
//   kScoreBlocks: 16-position blocks whose scores one pass computes at once.
//   kSumVectors: 16-dim vectors of the output one pass of the weighted sum holds.
template <class T>
inline constexpr int kGroupPass = Vec16<T>::kAccumulators >= 24 ? 8 : (Vec16<T>::kAccumulators >= 6 ? 4 : 2);
template <class T, int HG>
inline constexpr int kScoreBlocks = Vec16<T>::kAccumulators / HG >= 4 ? 4 : (Vec16<T>::kAccumulators / HG >= 2 ? 2 : 1);
template <class T, int HG>
inline constexpr int kSumVectors = std::max(1, std::min(8, Vec16<T>::kAccumulators * 2 / 3 / HG));

// HG heads sharing one KV head: acc[h][v] += w[h][t - first] * v_t[16v .. 16v + 16) for t
// in [first, last], in increasing t; NV vectors of 16 dims from dim d0, all in registers.
// Each V vector is loaded (and, for a block type, decoded) once and feeds the HG heads'
// chains, which are independent, so they also overlap in the pipeline. The same dims
// of the block kAttendAhead ahead are requested meanwhile.
// v_block(b) returns the KV head's (16, head_dim) values of positions [16b, 16b + 16).
// The loops over h and v are unrolled by pragma: without it GCC 12 kept the
// accumulators of the AVX2 build (HG 4, NV 1) in memory as well, storing all 8 every
// position and reading one back (one thread, 4 KV heads of 8 query heads, head_dim 64,
// f16 cache: 1024 positions x 4 layers 0.80 -> 0.64 ms, 2048 x 22 10.1 -> 8.3 ms; the
// AVX-512 build level).
template <int HG, int NV, class T, class VBlock>
inline void weighted_sum_vecs(const T* const* w, int first, int last, int head_dim, int d0, VBlock&& v_block,
                              T* const* out) {
  Vec16<T> acc[HG][NV];
  KVD_UNROLL(8) for (int h = 0; h < HG; ++h)
    KVD_UNROLL(8) for (int v = 0; v < NV; ++v) acc[h][v] = Vec16<T>::zero();
  const int b_last = last / kLanes;
  for (int b = first / kLanes; b <= b_last; ++b) {
    const auto vb = v_block(b) + d0;
    const int l0 = std::max(first, b * kLanes) - b * kLanes, l1 = std::min(last, b * kLanes + kLanes - 1) - b * kLanes;
    const int wo = b * kLanes - first;
    const bool ahead = b + kAttendAhead <= b_last;
    const auto va = v_block(ahead ? b + kAttendAhead : b) + d0;
    for (int lane = l0; lane <= l1; ++lane) {
      const auto row = vb + static_cast<long>(lane) * head_dim;
      if (ahead)
        KVD_UNROLL(8) for (int v = 0; v < NV; ++v) prefetch_value(va, static_cast<long>(lane) * head_dim + v * kLanes);
      Vec16<T> vv[NV];
      KVD_UNROLL(8) for (int v = 0; v < NV; ++v) vv[v] = load_lanes<T>(row + v * kLanes);
      KVD_UNROLL(8) for (int h = 0; h < HG; ++h) {
        const Vec16<T> wt = Vec16<T>::broadcast(w[h][wo + lane]);
        KVD_UNROLL(8) for (int v = 0; v < NV; ++v) acc[h][v].fma(wt, vv[v]);
      }
    }
  }
  KVD_UNROLL(8) for (int h = 0; h < HG; ++h)
    KVD_UNROLL(8) for (int v = 0; v < NV; ++v) acc[h][v].store(out[h] + d0 + v * kLanes);
}

/// out[h][0..head_dim) = fma chain over t in [first, last], increasing, from +0, of
/// w[h][t - first] * v_t[d], for HG heads sharing one KV head. Vectorised over d,
/// kSumVectors vectors per pass in registers; each d's chain is the same sequence of
/// operations as a scalar loop.
template <int HG, class T, class VBlock>
inline void weighted_sum(const T* const* w, int first, int last, int head_dim, VBlock&& v_block, T* const* out) {
  constexpr int kMax = kSumVectors<T, HG>;
  int d0 = 0;
  for (; head_dim - d0 >= kMax * kLanes; d0 += kMax * kLanes)
    weighted_sum_vecs<HG, kMax>(w, first, last, head_dim, d0, v_block, out);
  switch ((head_dim - d0) / kLanes) {
    case 7: if constexpr (kMax > 7) weighted_sum_vecs<HG, 7>(w, first, last, head_dim, d0, v_block, out); break;
    case 6: if constexpr (kMax > 6) weighted_sum_vecs<HG, 6>(w, first, last, head_dim, d0, v_block, out); break;
    case 5: if constexpr (kMax > 5) weighted_sum_vecs<HG, 5>(w, first, last, head_dim, d0, v_block, out); break;
    case 4: if constexpr (kMax > 4) weighted_sum_vecs<HG, 4>(w, first, last, head_dim, d0, v_block, out); break;
    case 3: if constexpr (kMax > 3) weighted_sum_vecs<HG, 3>(w, first, last, head_dim, d0, v_block, out); break;
    case 2: if constexpr (kMax > 2) weighted_sum_vecs<HG, 2>(w, first, last, head_dim, d0, v_block, out); break;
    case 1: if constexpr (kMax > 1) weighted_sum_vecs<HG, 1>(w, first, last, head_dim, d0, v_block, out); break;
    default: break;
  }
  for (int h = 0; h < HG; ++h)
    for (int d = head_dim / kLanes * kLanes; d < head_dim; ++d) {  // the dims past the last full vector
      T acc = T(0);
      for (int t = first; t <= last; ++t)
        acc = std::fma(w[h][t - first], from_storage<T>(v_block(t / kLanes)[(t % kLanes) * head_dim + d]), acc);
      out[h][d] = acc;
    }
}

// scores[h * ld_s + 16j .. + 16) = fma chain over d of q_h[d] * K[block b0 + j][d][lane], from
// +0, for HG heads sharing one KV head (q_h = q + h * head_dim) and NG consecutive blocks:
// each K vector is loaded (and decoded) once and feeds HG independent chains.
// Blocks b0 + kAttendAhead + j for j < n_ahead (at most NG) are prefetched meanwhile.
template <int HG, int NG, class T, class KBlock>
inline void score_blocks(const T* q, int head_dim, int b0, KBlock&& k_block, T* scores, long ld_s, int n_ahead) {
  decltype(k_block(0)) kbs[NG], kas[NG];
  for (int j = 0; j < NG; ++j) {
    kbs[j] = k_block(b0 + j);
    kas[j] = j < n_ahead ? k_block(b0 + kAttendAhead + j) : kbs[j];
  }
  Vec16<T> acc[NG][HG];
  for (int j = 0; j < NG; ++j)
    for (int h = 0; h < HG; ++h) acc[j][h] = Vec16<T>::zero();
  for (int d = 0; d < head_dim; ++d)
    for (int j = 0; j < NG; ++j) {
      if (j < n_ahead) prefetch_value(kas[j], d * kLanes);
      const Vec16<T> k = load_lanes<T>(kbs[j] + d * kLanes);
      for (int h = 0; h < HG; ++h) acc[j][h].fma(Vec16<T>::broadcast(q[h * head_dim + d]), k);
    }
  for (int j = 0; j < NG; ++j)
    for (int h = 0; h < HG; ++h) acc[j][h].store(scores + h * ld_s + j * kLanes);
}

/// HG consecutive query heads of one row, all reading KV head kvh, over cache
/// positions [first, last]: q holds the HG heads' queries back to back and out
/// receives their outputs back to back. scores: HG rows of ld_s scratch, each at
/// least round_up_lanes(last + 1) - 16 * (first / 16) values. Each K and V value is
/// read once for the HG heads, and each head's result is the same as computing it
/// alone: the heads share loads, never a chain. Scores are divided by `score_div`
/// (sqrt of ModelConfig::attention_scalar()). `sinks`: the HG heads' sink logits, or
/// nullptr for none.
template <int HG, class T, class Cache>
inline void attend_group(const T* q, const Cache& cache, int layer, int kvh, int head_dim, int first, int last,
                         T score_div, const T* sinks, T* scores, long ld_s, T* out) {
  const int b0 = first / kLanes, b1 = last / kLanes, nb = b1 - b0 + 1;
  const long off = static_cast<long>(kvh) * head_dim * kLanes;  // the KV head inside a block
  auto k_block = [&](int b) { return cache.k_block(layer, b) + off; };  // (head_dim, 16)
  auto v_block = [&](int b) { return cache.v_block(layer, b) + off; };  // (16, head_dim)
  constexpr int kNB = kScoreBlocks<T, HG>;
  int g = 0;
  auto n_ahead = [&](int g0, int n) { return std::clamp(nb - (g0 + kAttendAhead), 0, n); };
  for (; g + kNB <= nb; g += kNB)
    score_blocks<HG, kNB>(q, head_dim, b0 + g, k_block, scores + g * kLanes, ld_s, n_ahead(g, kNB));
  for (; g < nb; ++g) score_blocks<HG, 1>(q, head_dim, b0 + g, k_block, scores + g * kLanes, ld_s, n_ahead(g, 1));
  const T* w[HG];
  T* o[HG];
  for (int h = 0; h < HG; ++h) {
    T* s = scores + h * ld_s;
    divide_by(s, nb * kLanes, score_div);
    softmax_blocks(s, b0 * kLanes, nb, first, last, sinks ? sinks[h] : -std::numeric_limits<T>::infinity());
    w[h] = s + (first - b0 * kLanes);
    o[h] = out + h * head_dim;
  }
  weighted_sum<HG>(w, first, last, head_dim, v_block, o);
}

/// n_q consecutive query heads of one row, all reading KV head kvh (a GQA group or
/// part of one), over cache positions [first, last]; q, out as for attend_group.
/// Runs them in passes of kGroupPass<T> heads (then 4, 2, 1), each pass reading
/// the KV head's positions once. scores: min(n_q, 8) rows of ld_s scratch. `sinks`:
/// the n_q heads' sink logits, or nullptr for none.
template <class T, class Cache>
inline void attend_kv_head(const T* q, const Cache& cache, int layer, int kvh, int n_q, int head_dim, int first,
                           int last, T score_div, const T* sinks, T* scores, long ld_s, T* out) {
  constexpr int kPass = kGroupPass<T>;
  const long step = head_dim;
  auto sink = [&](int h) { return sinks ? sinks + h : nullptr; };
  int h = 0;
  for (; n_q - h >= kPass; h += kPass)
    attend_group<kPass>(q + h * step, cache, layer, kvh, head_dim, first, last, score_div, sink(h), scores, ld_s, out + h * step);
  if constexpr (kPass > 4)
    if (n_q - h >= 4) {
      attend_group<4>(q + h * step, cache, layer, kvh, head_dim, first, last, score_div, sink(h), scores, ld_s, out + h * step);
      h += 4;
    }
  if constexpr (kPass > 2)
    if (n_q - h >= 2) {
      attend_group<2>(q + h * step, cache, layer, kvh, head_dim, first, last, score_div, sink(h), scores, ld_s, out + h * step);
      h += 2;
    }
  if (n_q - h >= 1) attend_group<1>(q + h * step, cache, layer, kvh, head_dim, first, last, score_div, sink(h), scores, ld_s, out + h * step);
}

/// R (up to 8) consecutive rows of one sequence (positions pos0 .. pos0 + R - 1), one query
/// head each, over their visible cache positions; used for prefill, where rows
/// travelling together share every K and V load. q_r = q + r * ld_q, out_r = out +
/// r * ld_out; scores: R rows of ld_s scratch. Row r sees [first(r), pos0 + r] with
/// first(r) = first_visible(pos0 + r, window), and its result is the same as
/// attend_heads<1> for that row alone: per row, the same chains in the same order.
/// `sink`: the head's sink logit (-inf: none).
template <int R, class T, class Cache>
inline void attend_rows(const T* q, long ld_q, const Cache& cache, int layer, int kvh, int head_dim, int pos0,
                        int window, T score_div, T sink, T* scores, long ld_s, T* out, long ld_out) {
  int first[R], last[R];
  for (int r = 0; r < R; ++r) {
    first[r] = first_visible(pos0 + r, window);
    last[r] = pos0 + r;
  }
  const int bmin = first[0] / kLanes, bmax = last[R - 1] / kLanes;
  const long off = static_cast<long>(kvh) * head_dim * kLanes;  // KV head inside a block
  // Scores of every row for blocks [bmin, bmax]: one K load feeds R chains.
  for (int b = bmin; b <= bmax; ++b) {
    const auto kb = cache.k_block(layer, b) + off;  // (head_dim, 16)
    const bool ahead = b + kAttendAhead <= bmax;
    const auto ka = ahead ? cache.k_block(layer, b + kAttendAhead) + off : kb;
    Vec16<T> acc[R];
    for (int r = 0; r < R; ++r) acc[r] = Vec16<T>::zero();
    for (int d = 0; d < head_dim; ++d) {
      if (ahead) prefetch_value(ka, d * kLanes);
      const Vec16<T> k = load_lanes<T>(kb + d * kLanes);
      for (int r = 0; r < R; ++r) acc[r].fma(Vec16<T>::broadcast(q[r * ld_q + d]), k);
    }
    for (int r = 0; r < R; ++r) acc[r].store(scores + r * ld_s + (b - bmin) * kLanes);
  }
  // Every row's weights are indexed by t - base: row r's weight of position t is
  // ws[r][t - base], read for t in [first[r], last[r]] only.
  const int base = bmin * kLanes;
  const T* ws[R];
  for (int r = 0; r < R; ++r) {
    T* s = scores + r * ld_s;
    const int nb = bmax - bmin + 1;
    divide_by(s, nb * kLanes, score_div);
    const int b0 = first[r] / kLanes;
    softmax_blocks(s + (b0 - bmin) * kLanes, b0 * kLanes, last[r] / kLanes - b0 + 1, first[r], last[r], sink);
    ws[r] = s;
  }
  auto v_row = [&](int t) { return cache.v_block(layer, t / kLanes) + off + static_cast<long>(t % kLanes) * head_dim; };
  // Weighted sums. Positions [first[R-1], last[0]] are visible to every row: one V load
  // feeds R chains. Before and after that span each row adds its own remaining
  // positions, so every row's chain still runs in increasing t.
  // Vectors of dims per pass: R x kNV accumulators stay in registers.
  constexpr int kNV = R <= 4 ? 4 : 2;
  const int all_lo = first[R - 1], all_hi = last[0];
  // The shared span of one pass of NV vectors from dim d0, block by block: each V block
  // is looked up once (a ring cache's lookup divides), the block kAttendAhead ahead
  // is requested meanwhile.
  auto shared_span = [&](auto nv_c, int d0, Vec16<T>(&acc)[R][kNV]) {
    constexpr int NV = decltype(nv_c)::value;
    const int b_lo = all_lo / kLanes, b_hi = all_hi / kLanes;
    for (int b = b_lo; b <= b_hi; ++b) {
      const auto vb = cache.v_block(layer, b) + off + d0;  // (16, head_dim) from dim d0
      const bool ahead = b + kAttendAhead <= b_hi;
      const auto va = ahead ? cache.v_block(layer, b + kAttendAhead) + off + d0 : vb;
      const int l0 = std::max(all_lo, b * kLanes) - b * kLanes, l1 = std::min(all_hi, b * kLanes + kLanes - 1) - b * kLanes;
      const int wo = b * kLanes - base;
      for (int lane = l0; lane <= l1; ++lane) {
        const long at = static_cast<long>(lane) * head_dim;
        if (ahead)
          for (int v = 0; v < NV; ++v) prefetch_value(va, at + v * kLanes);
        Vec16<T> vv[NV];
        for (int v = 0; v < NV; ++v) vv[v] = load_lanes<T>(vb + at + v * kLanes);
        for (int r = 0; r < R; ++r) {
          const Vec16<T> wt = Vec16<T>::broadcast(ws[r][wo + lane]);
          for (int v = 0; v < NV; ++v) acc[r][v].fma(wt, vv[v]);
        }
      }
    }
  };
  for (int d0 = 0; d0 < head_dim; d0 += kNV * kLanes) {
    const int nv = std::min(kNV, (head_dim - d0) / kLanes);
    if (nv == 0) break;
    Vec16<T> acc[R][kNV];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kNV; ++v) acc[r][v] = Vec16<T>::zero();
    auto one = [&](int r, int t) {
      const Vec16<T> wt = Vec16<T>::broadcast(ws[r][t - base]);
      const auto row = v_row(t) + d0;
      for (int v = 0; v < nv; ++v) acc[r][v].fma(wt, load_lanes<T>(row + v * kLanes));
    };
    if (all_lo > all_hi) {  // a window narrower than the group: no shared span
      for (int r = 0; r < R; ++r)
        for (int t = first[r]; t <= last[r]; ++t) one(r, t);
    } else {
      for (int r = 0; r < R; ++r)
        for (int t = first[r]; t < all_lo; ++t) one(r, t);
      static_assert(kNV == 2 || kNV == 4, "shared_span's vector counts");
      switch (nv) {
        case 1: shared_span(std::integral_constant<int, 1>{}, d0, acc); break;
        case 2: shared_span(std::integral_constant<int, 2>{}, d0, acc); break;
        case 3: if constexpr (kNV > 3) shared_span(std::integral_constant<int, 3>{}, d0, acc); break;
        default: if constexpr (kNV > 3) shared_span(std::integral_constant<int, 4>{}, d0, acc); break;
      }
      for (int r = 0; r < R; ++r)
        for (int t = all_hi + 1; t <= last[r]; ++t) one(r, t);
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < nv; ++v) acc[r][v].store(out + r * ld_out + d0 + v * kLanes);
  }
  for (int r = 0; r < R; ++r)
    for (int d = head_dim / kLanes * kLanes; d < head_dim; ++d) {  // the dims past the last full vector
      T acc = T(0);
      for (int t = first[r]; t <= last[r]; ++t) acc = std::fma(ws[r][t - base], from_storage<T>(v_row(t)[d]), acc);
      out[r * ld_out + d] = acc;
    }
}

}  // namespace detail

}  // namespace kvd
