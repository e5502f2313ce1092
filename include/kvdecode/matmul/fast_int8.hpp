// The opt-in fast mode of quantized products (`--fast-matmul`,
// Transformer::set_fast_matmul): activations rounded to int8 blocks, integer
// dot products against the weights' codes, as llama.cpp computes. Off by
// default: the default mode keeps activations in the compute type.
//
// NUMERICS (one definition, every path). Row m of x is rounded once per
// product, in blocks j of 32 values:
//   amax = the largest |x| of the block (NaNs skipped), d_j = amax / 127,
//   q[k] = x[k] * (1 / d_j) rounded to the nearest integer, ties to even,
//          clamped to [-127, 127] (0 where d_j = 0 or the product is NaN),
//   Q_j  = the sum of the block's q (an integer).
// Output (m, n), with the weights' codes c, scales D and offsets N of the
// factored form (quant_kernels.hpp), whose sub-blocks are these blocks of 32 or,
// for q6_K, their halves of 16:
//   acc = +0; for each sub-block s, in increasing k, in block j:
//     I   = the sum of c[n][k] q[m][k] over the sub-block   (int32, exact in any order)
//     acc = fma(float(I) * d_j, D[n][s], acc)
//     acc = fma(d_j * float(Q_s), N[n][s], acc)            (types with a min; Q_s = the
//                                                          sum of q over sub-block s)
//   y[m][n] = acc
// The integer sums are exact and every float step is a fixed, row-local
// sequence, so the result is the same bits for every M, path, tiling and thread
// count: the exactness contract holds in this mode as in the default one (each
// mode against itself). float(I) is exact: |I| <= 32 * 31 * 127 (q5) or
// 16 * 32 * 127 (q6_K) < 2^24. For sub-blocks of 32, Q_s = Q_j.
//
// Types: every block type but q8_0. Codes in sub-blocks of 32: q4_0, q4_1, q4_K
// (4 bits), q5_0, q5_1, q5_K (5 bits); in sub-blocks of 16: q2_K (2 bits), q3_K
// (3) and q6_K (6). So Q4_K_M, Q5_K_M, Q3_K_M and Q2_K files run in fast mode
// throughout. q8_0 keeps the default numerics: on AVX2 its bytes would need
// transposing to 4 values per output lane, which measured no faster than its
// float path (docs/fast-mode.md). A matrix of a type the mode does not compute
// keeps the default numerics, per matrix, so a model mixing types is still
// exact across paths.
//
// PATHS. The scalar loop below defines the result. On AVX2 the 8 nibbles of a
// code word (values k .. k + 7 of one output) split into two byte vectors,
// (w & 0x0F..) = values k, k+2, k+4, k+6 and (w >> 4 & 0x0F..) = k+1, k+3, k+5,
// k+7, so the rounded rows are stored with each group of 8 in the order 0, 2, 4,
// 6, 1, 3, 5, 7: one 4-byte broadcast then feeds vpmaddubsw for 8 outputs.
// A sub-block's 16-bit partial sums stay below 8 * 2 * 15 * 127 = 30480. q6_K's
// 6-bit codes are the same nibble planes plus two high bits per value, spread
// from the high word into bits 4..5 of each byte; their 16-bit sums (at most
// 2 * 2 * 63 * 127 = 32004 per group of 8 values) widen to 32 bits per group.
// q5's codes are the nibble planes plus one high bit per value, spread from the
// high word into bit 4 of each byte (sums of at most 2 * 2 * 31 * 127 = 15748
// per group, widened per group). q2_K and q3_K hold 16 values of 2 bits in a
// word (value v at bits 2 v), so (w >> 2 j) & 3 gives values j, j + 4, j + 8,
// j + 12 in its 4 bytes: their rounded rows store each group of 16 in the
// order 0, 4, 8, 12, 1, 5, ... (fast_order() 16). q3_K adds its high bit (bit 2
// of each byte, from the high word) and takes code + 4 in [0, 8), subtracting
// 4 Q_s after (at most 8 * 2 * 7 * 127 = 14224 in 16 bits per sub-block).
// With VNNI (AVX512-VNNI + VL, or AVX-VNNI) the same tiles take vpdpbusd for each
// pair of vpmaddubsw and 16-bit adds: 32-bit sums throughout, the same integers.
// With AVX512-VNNI and BW, large M of the byte-plane types (below) runs 512-bit
// tiles over both halves of a panel at once: 16 outputs per vpdpbusd.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvdecode/matmul/quant_kernels.hpp"

namespace kvd {
namespace detail {

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
/// 2-bit planes (q2_K, q3_K), else of 8 (also for a type the fast mode does not compute).
inline int fast_order(WeightType t) {
  int order = 8;
  visit_block_type(t, [&](auto row) { order = decltype(row)::kFastOrder == 16 ? 16 : 8; });
  return order;
}
/// Where value k of a rounded row of the given order (8 or 16) is stored.
constexpr long fast_pos(int order, long k) {
  return order == 16 ? (k & ~15L) + fast_slot16(static_cast<int>(k & 15)) : (k & ~7L) + fast_slot(static_cast<int>(k & 7));
}

/// Rounded rows: q (M x K, row stride K, groups of `order` values reordered:
/// fast_pos()), and per row and block of 32: the scale d, the integer sum of q,
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

/// One block of 32 values rounded (top of this file): the integer codes in natural order, the scale.
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

/// The scalar definition of the fast product: y (M x Npad) from rounded rows.
inline void matmul_fast_portable(const FastRows& rows, long M, const QuantPanels& w, float* y, long ldy, bool parallel) {
  const long K = w.n_in(), nb = K / kFastBlock, P = w.n_panels(), bs = w.block_size();
  const QuantFactoring f = quant_factoring(w.type());
  const long sub = f.sub, n_sub = bs / sub;
  KVD_ASSERT(sub == kFastBlock || sub == 16);
  parallel_parts(P, parallel, [&](long p0, long p1) {
    std::vector<float> c(static_cast<std::size_t>(bs * kLanes)), D(static_cast<std::size_t>(n_sub * kLanes)), N(D.size());
    for (long p = p0; p < p1; ++p) {
      for (long m = 0; m < M; ++m) std::fill(y + m * ldy + p * kLanes, y + m * ldy + (p + 1) * kLanes, 0.f);
      for (long b = 0; b < w.n_blocks(); ++b) {
        factor_panel_block_portable<float>(w.type(), w.panel_block(p, b), c.data(), D.data(), f.has_min ? N.data() : nullptr);
        for (long m = 0; m < M; ++m)
          for (long s = 0; s < n_sub; ++s) {
            const long k0 = b * bs + s * sub, j = k0 / kFastBlock;  // first value, block of 32
            const std::int8_t* q = rows.q.data() + m * K;
            const float d = rows.d.data()[m * nb + j];
            const float xq = sub == kFastBlock ? rows.xq.data()[m * nb + j] : rows.xq16.data()[m * (K / 16) + k0 / 16];
            for (int lane = 0; lane < kLanes; ++lane) {
              std::int32_t I = 0;
              for (long k = k0; k < k0 + sub; ++k)
                I += static_cast<std::int32_t>(c[(k - b * bs) * kLanes + lane]) * q[fast_pos(rows.order, k)];
              float& acc = y[m * ldy + p * kLanes + lane];
              acc = std::fma(static_cast<float>(I) * d, D[s * kLanes + lane], acc);
              if (f.has_min) acc = std::fma(xq, N[s * kLanes + lane], acc);
            }
          }
      }
    }
  });
}

#if defined(KVDECODE_FAST_AVX2)
#if defined(KVDECODE_FAST_VNNI)
// VNNI: vpdpbusd adds the 4 products of unsigned code bytes and signed activation
// bytes of each 32-bit lane to it in one instruction, exactly (no 16-bit step,
// no saturation), where AVX2 takes vpmaddubsw, a 16-bit add and a vpmaddwd. The
// integer sums are the same, so are the bits.
/// acc + for each 32-bit lane the sum of its 4 products u8[b] * s8[b] (vpdpbusd).
KVD_ALWAYS_INLINE inline __m256i fast_dpbusd(__m256i acc, __m256i u8, __m256i s8) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u8, s8);
#else
  return _mm256_dpbusd_avx_epi32(acc, u8, s8);
#endif
}
#endif
/// Whether Dec decodes 5-bit codes (a nibble plus one high bit per value).
template <class Dec>
inline constexpr bool kFastFive =
    std::is_same_v<Dec, Avx2DecodeQ5<false>> || std::is_same_v<Dec, Avx2DecodeQ5<true>> || std::is_same_v<Dec, Avx2DecodeQK4<true>>;

/// The fast mode's offset of Dec's unsigned codes (subtracted as offset * Q_s).
template <class Dec>
constexpr int fast_code_offset() {
  if constexpr (std::is_same_v<Dec, Avx2DecodeQ4<false>>) return 8;
  if constexpr (std::is_same_v<Dec, Avx2DecodeQ5<false>>) return 16;
  if constexpr (std::is_same_v<Dec, Avx2DecodeQ3_K>) return 4;
  if constexpr (std::is_same_v<Dec, Avx2DecodeQ6_K>) return 32;
  return 0;
}

/// The word of high bits a 5-bit decoder loaded in begin() (bit v = value v of the sub-block).
template <class Dec>
inline __m256i fast_high_word(const Dec& d) {
  if constexpr (std::is_same_v<Dec, Avx2DecodeQK4<true>>)
    return d.hw;
  else
    return d.qh;
}

/// q5: ors group g's 8 high bits (bits 8 g .. 8 g + 7 of the high word) into bit 4
/// of the nibble planes' bytes: lo holds values 8 g + 2 b, hi values 8 g + 2 b + 1.
KVD_ALWAYS_INLINE inline void fast_or_high_bits(__m256i hword, int g, __m256i& lo, __m256i& hi) {
  // bits 2 b and 2 b + 1 of the group to byte b, then to bit 4 of lo and hi
  __m256i x = _mm256_and_si256(_mm256_srl_epi32(hword, _mm_cvtsi32_si128(8 * g)), _mm256_set1_epi32(0xFF));
  x = _mm256_and_si256(_mm256_or_si256(x, _mm256_slli_epi32(x, 12)), _mm256_set1_epi32(0x000F000F));
  x = _mm256_and_si256(_mm256_or_si256(x, _mm256_slli_epi32(x, 6)), _mm256_set1_epi32(0x03030303));
  const __m256i b4 = _mm256_set1_epi8(16);
  lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi32(x, 4), b4));
  hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi32(x, 3), b4));
}

/// The low 16 bits of each lane of v, nibble n -> byte n (bits 0..3).
KVD_ALWAYS_INLINE inline __m256i fast_nibbles_to_bytes(__m256i v16) {
  __m256i v = _mm256_and_si256(_mm256_or_si256(v16, _mm256_slli_epi32(v16, 8)), _mm256_set1_epi32(0x00FF00FF));
  return _mm256_and_si256(_mm256_or_si256(v, _mm256_slli_epi32(v, 4)), _mm256_set1_epi8(15));
}

/// q2_K / q3_K: the code word of sub-block s, half h (value v at bits 2 v), and for
/// q3_K the high bits of values 4 n .. 4 n + 3 in bits 0..3 of byte n (hx).
template <bool kThree>
KVD_ALWAYS_INLINE inline void fast_k2_words(const unsigned char* pb, int s, int h, __m256i& wv, __m256i& hx) {
  // Avx2DecodeQ2_K's / Avx2DecodeQ3_K's fields
  wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + (kThree ? 736 : 320) + 64 * s + 32 * h));
  if constexpr (kThree) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 224 + 64 * (s / 2) + 32 * h));
    hx = fast_nibbles_to_bytes(s % 2 ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)));
  } else {
    hx = _mm256_setzero_si256();  // unused
  }
}

/// q2_K / q3_K code vector j (0..3): values j, j + 4, j + 8, j + 12 of 8 outputs in
/// their 4 bytes, unsigned (q3_K: code + 4).
template <bool kThree, int j>
KVD_ALWAYS_INLINE inline __m256i fast_k2_codes(__m256i wv, [[maybe_unused]] __m256i hx) {
  __m256i c = _mm256_and_si256(j == 0 ? wv : _mm256_srli_epi32(wv, 2 * j), _mm256_set1_epi8(3));
  if constexpr (kThree) {
    const __m256i hb = j < 2 ? _mm256_slli_epi32(hx, 2 - j) : j == 2 ? hx : _mm256_srli_epi32(hx, 1);
    c = _mm256_or_si256(c, _mm256_and_si256(hb, _mm256_set1_epi8(4)));
  }
  return c;
}

/// q6_K: group g (0, 1) of a sub-block as two byte planes, lo (values 8 g + 2 b) and
/// hi (8 g + 2 b + 1), 6-bit unsigned codes (code + 32), from the low word wv and
/// the sub-block's high word hw.
KVD_ALWAYS_INLINE inline void fast_q6_planes(__m256i wv, __m256i hw, int g, __m256i& lo, __m256i& hi) {
  // the group's 8 pairs of high bits (16 bits), nibble n -> byte n: byte n then
  // holds the high bits of values 2n (bits 0..1) and 2n + 1 (bits 2..3)
  const __m256i v = fast_nibbles_to_bytes(g == 0 ? _mm256_and_si256(hw, _mm256_set1_epi32(0xFFFF)) : _mm256_srli_epi32(hw, 16));
  const __m256i m4 = _mm256_set1_epi8(15);
  lo = _mm256_or_si256(_mm256_and_si256(wv, m4), _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi8(3)), 4));
  hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wv, 4), m4),
                       _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi8(12)), 2));
}

/// The tiles' running sums in y (MR rows x NH half panels from h0) set to +0.
template <int MR, int NH>
inline void fast_tile_zero(float* y, long ldy, long h0) {
  KVD_UNROLL(4) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(4) for (int i = 0; i < NH; ++i) _mm256_storeu_ps(y + r * ldy + (h0 + i) * 8, _mm256_setzero_ps());
}

/// Panel block b of each of the NH half panels from h0.
template <int NH>
KVD_ALWAYS_INLINE inline void fast_panel_blocks(const QuantPanels& w, long nblk, std::size_t pbb, long h0, long b,
                                                const unsigned char* (&pb)[NH]) {
  KVD_UNROLL(4) for (int i = 0; i < NH; ++i) pb[i] = w.data + (static_cast<std::size_t>((h0 + i) / 2) * nblk + b) * pbb;
}

/// AVX2 register tile for codes in nibble planes (q4_0, q4_1, q4_K; q5_0, q5_1,
/// q5_K with their high bits): MR rows x NH half panels over all of k (see the top
/// of this file). The running sums live in y, the sub-block's partial sums in
/// registers (16-bit for 4-bit codes, widened to 32 per group of 8 for 5-bit ones).
template <class Dec, int MR, int NH>
inline void fast_tile_avx2(const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y, long ldy) {
  constexpr bool kFive = kFastFive<Dec>;
  constexpr int kOffset = fast_code_offset<Dec>();  // q4_0: codes - 8, q5_0: codes - 16
  constexpr int kSubs = Dec::kBlock / kFastBlock;
  const long K = rows.K, nbq = K / kFastBlock;
  fast_tile_zero<MR, NH>(y, ldy, h0);
  const __m256i m4 = _mm256_set1_epi8(15);
  [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);
  const std::size_t pbb = w.panel_block_bytes();
  const long nblk = w.n_blocks();  // once: QuantPanels looks both up in the type's traits
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  for (long b = 0; b < nblk; ++b) {
    const unsigned char* pb[NH];
    fast_panel_blocks<NH>(w, nblk, pbb, h0, b, pb);
    for (int s = 0; s < kSubs; ++s) {
      const long j = b * kSubs + s;
      // The code words' addresses now, the scales and offsets after the sub-block's
      // integer loop (computed before it, GCC keeps them in registers the loop needs).
      const unsigned char* qw[NH];
      [[maybe_unused]] __m256i hword[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
        Dec where;
        where.begin(pb[i], s, static_cast<int>((h0 + i) % 2));
        qw[i] = where.q;
        if constexpr (kFive) hword[i] = fast_high_word(where);
        prefetch_half_panel_share(pb[i], pbb, s, kSubs, (h0 + i) % 2);
      }
      __m256i t[MR][NH];
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) t[r][i] = _mm256_setzero_si256();
      // A loop, not unrolled: unrolled, GCC reassociates the 16-bit sums and
      // computes every product of the sub-block first, spilling them to the stack.
      // VNNI has no 16-bit sums, and unrolled its tiles keep the broadcasts in registers.
#if defined(KVDECODE_FAST_VNNI)
      KVD_UNROLL(4)
#else
      KVD_UNROLL(1)
#endif
      for (int g = 0; g < 4; ++g) {
        // every half panel's two code vectors, then each row's two broadcasts used
        // for all of them: 2 NH + MR NH + 2 + 1 registers
        __m256i lo[NH], hi[NH];
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
          const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw[i] + 64 * g));
          lo[i] = _mm256_and_si256(wv, m4);
          hi[i] = _mm256_and_si256(_mm256_srli_epi16(wv, 4), m4);
          if constexpr (kFive) fast_or_high_bits(hword[i], g, lo[i], hi[i]);
        }
        KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
          const std::int8_t* qa = q0 + r * K + j * kFastBlock + 8 * g;
          std::int32_t a0, a1;
          std::memcpy(&a0, qa, 4);
          std::memcpy(&a1, qa + 4, 4);
          const __m256i b0 = _mm256_set1_epi32(a0), b1 = _mm256_set1_epi32(a1);
          KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
#if defined(KVDECODE_FAST_VNNI)
            t[r][i] = fast_dpbusd(fast_dpbusd(t[r][i], lo[i], b0), hi[i], b1);
#else
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo[i], b0), _mm256_maddubs_epi16(hi[i], b1));
            t[r][i] = kFive ? _mm256_add_epi32(t[r][i], _mm256_madd_epi16(p, ones)) : _mm256_add_epi16(t[r][i], p);
#endif
          }
        }
      }
      Dec dec[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) dec[i].begin(pb[i], s, static_cast<int>((h0 + i) % 2));
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
        const long e = (m0 + r) * nbq + j;
        const __m256 d = _mm256_set1_ps(rows.d.data()[e]);
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
#if defined(KVDECODE_FAST_VNNI)
          __m256i I = t[r][i];
#else
          __m256i I = kFive ? t[r][i] : _mm256_madd_epi16(t[r][i], ones);
#endif
          if constexpr (kOffset != 0) I = _mm256_sub_epi32(I, _mm256_set1_epi32(kOffset * rows.qsum.data()[e]));
          float* yp = y + r * ldy + (h0 + i) * 8;
          __m256 a = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(I), d), dec[i].D, _mm256_loadu_ps(yp));
          if constexpr (Dec::kMin) a = _mm256_fmadd_ps(_mm256_set1_ps(rows.xq.data()[e]), dec[i].N, a);
          _mm256_storeu_ps(yp, a);
        }
      }
    }
  }
}

/// The q2_K (kThree = false) and q3_K tile: MR rows x NH half panels, sub-blocks of
/// 16 values, one code word per row (value v at bits 2 v); rows of order 16.
/// Vector j = (w >> 2 j) & 3 holds values j, j + 4, j + 8, j + 12 in its bytes;
/// q3_K ors in its high bit at bit 2 (code + 4) and subtracts 4 Q_s after.
template <bool kThree, int MR, int NH>
inline void fast_tile_k2_avx2(const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y, long ldy) {
  using Dec = std::conditional_t<kThree, Avx2DecodeQ3_K, Avx2DecodeQ2_K>;
  const long K = rows.K, nbq = K / kFastBlock;
  fast_tile_zero<MR, NH>(y, ldy, h0);
  [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);
  const std::size_t pbb = w.panel_block_bytes();
  const long nblk = w.n_blocks();  // once: QuantPanels looks both up in the type's traits
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  for (long b = 0; b < nblk; ++b) {
    const unsigned char* pb[NH];
    fast_panel_blocks<NH>(w, nblk, pbb, h0, b, pb);
    for (int s = 0; s < 16; ++s) {
      __m256i wv[NH], hx[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
        fast_k2_words<kThree>(pb[i], s, static_cast<int>((h0 + i) % 2), wv[i], hx[i]);
        prefetch_half_panel_share(pb[i], pbb, s, 16, (h0 + i) % 2);
      }
      __m256i t[MR][NH];
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) t[r][i] = _mm256_setzero_si256();
      const long k0 = b * 256 + 16 * s;
      static_for<4>([&](auto jj) KVD_ALWAYS_INLINE {
        constexpr int j = decltype(jj)::value;
        __m256i bq[MR];
        KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
          std::int32_t a;
          std::memcpy(&a, q0 + r * K + k0 + 4 * j, 4);
          bq[r] = _mm256_set1_epi32(a);
        }
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
          const __m256i c = fast_k2_codes<kThree, j>(wv[i], hx[i]);
#if defined(KVDECODE_FAST_VNNI)
          KVD_UNROLL(4) for (int r = 0; r < MR; ++r) t[r][i] = fast_dpbusd(t[r][i], c, bq[r]);
#else
          KVD_UNROLL(4) for (int r = 0; r < MR; ++r) t[r][i] = _mm256_add_epi16(t[r][i], _mm256_maddubs_epi16(c, bq[r]));
#endif
        }
      });
      Dec dec[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) dec[i].begin(pb[i], s, static_cast<int>((h0 + i) % 2));
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
        const long row = m0 + r, e16 = row * (K / 16) + k0 / 16;
        const __m256 d = _mm256_set1_ps(rows.d.data()[row * nbq + k0 / kFastBlock]);
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
#if defined(KVDECODE_FAST_VNNI)
          __m256i I = t[r][i];
#else
          __m256i I = _mm256_madd_epi16(t[r][i], ones);
#endif
          if constexpr (kThree) I = _mm256_sub_epi32(I, _mm256_set1_epi32(fast_code_offset<Dec>() * rows.qsum16.data()[e16]));
          float* yp = y + r * ldy + (h0 + i) * 8;
          __m256 a = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(I), d), dec[i].D, _mm256_loadu_ps(yp));
          if constexpr (!kThree) a = _mm256_fmadd_ps(_mm256_set1_ps(rows.xq16.data()[e16]), dec[i].N, a);
          _mm256_storeu_ps(yp, a);
        }
      }
    }
  }
}

/// The q6_K tile: MR rows x NH half panels; per group of 8 values the two nibble
/// planes get their two high bits (bits 4..5 of each byte) from the high word.
template <int MR, int NH>
inline void fast_tile_q6k_avx2(const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y, long ldy) {
  const long K = rows.K, nbq = K / kFastBlock;
  fast_tile_zero<MR, NH>(y, ldy, h0);
  [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);
  const std::size_t pbb = w.panel_block_bytes();
  const long nblk = w.n_blocks();  // once: QuantPanels looks both up in the type's traits
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  for (long b = 0; b < nblk; ++b) {
    const unsigned char* pb[NH];
    fast_panel_blocks<NH>(w, nblk, pbb, h0, b, pb);
    for (int s = 0; s < 16; ++s) {
      const unsigned char* ql[NH];
      const unsigned char* qh[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
        const int h = static_cast<int>((h0 + i) % 2);
        ql[i] = pb[i] + 288 + 128 * s + 32 * h;  // Avx2DecodeQ6_K's fields
        qh[i] = pb[i] + 2336 + 64 * s + 32 * h;
        prefetch_half_panel_share(pb[i], pbb, s, 16, (h0 + i) % 2);
      }
      __m256i t[MR][NH];
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) t[r][i] = _mm256_setzero_si256();
      const long k0 = b * 256 + 16 * s;
      KVD_UNROLL(1) for (int g = 0; g < 2; ++g) {
        __m256i lo[NH], hi[NH];
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
          fast_q6_planes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql[i] + 64 * g)),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh[i])), g, lo[i], hi[i]);
        }
        KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
          const std::int8_t* qa = q0 + r * K + k0 + 8 * g;
          std::int32_t a0, a1;
          std::memcpy(&a0, qa, 4);
          std::memcpy(&a1, qa + 4, 4);
          const __m256i b0 = _mm256_set1_epi32(a0), b1 = _mm256_set1_epi32(a1);
          KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
#if defined(KVDECODE_FAST_VNNI)
            t[r][i] = fast_dpbusd(fast_dpbusd(t[r][i], lo[i], b0), hi[i], b1);
#else
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo[i], b0), _mm256_maddubs_epi16(hi[i], b1));
            t[r][i] = _mm256_add_epi32(t[r][i], _mm256_madd_epi16(p, ones));
#endif
          }
        }
      }
      Avx2DecodeQ6_K dec[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) dec[i].begin(pb[i], s, static_cast<int>((h0 + i) % 2));
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
        const long row = m0 + r;
        const __m256 d = _mm256_set1_ps(rows.d.data()[row * nbq + k0 / kFastBlock]);
        const __m256i off = _mm256_set1_epi32(fast_code_offset<Avx2DecodeQ6_K>() * rows.qsum16.data()[row * (K / 16) + k0 / 16]);
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
          const __m256i I = _mm256_sub_epi32(t[r][i], off);  // codes - 32
          float* yp = y + r * ldy + (h0 + i) * 8;
          _mm256_storeu_ps(yp, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(I), d), dec[i].D, _mm256_loadu_ps(yp)));
        }
      }
    }
  }
}

#if defined(__AVX512VL__)
// EVEX encodings reach 32 vector registers: tiles of up to 7 rows (M = 5 to 7).
inline constexpr int kFastVectorRegisters = 32;
#else
inline constexpr int kFastVectorRegisters = 16;
#endif
/// The rows of a tile for M > kFastMaxRows (and every M with 16 registers).
inline constexpr int kFastTileRows = 4;
/// The rows of a tile: 4, or with 32 registers M itself for M = 5 to 7 (a speculative
/// verification), which would otherwise run as 4 rows and a remainder. One core in L2,
/// Zen 5, G multiply-adds/s at M = 5, 4 + 1 -> 5 rows: q4_0 44 -> 66-69, q4_K 54 -> 68-70,
/// q5_K 36 -> 51-56. Larger M keeps 4-row tiles: 8-row tiles lost at M = 8 and 64
/// (q4_K 60 -> 53, 62 -> 55).
inline constexpr int kFastMaxRows = kFastVectorRegisters == 32 ? 7 : kFastTileRows;
/// Rows of a byte-plane tile (large M): 2 MR sums, a code vector, a broadcast and a constant in 16 registers.
/// (12 rows in 32 registers measured slower: 43 against 67 G multiply-adds/s for q5_0 at M = 64, Zen 5.)
inline constexpr int kFastPlaneRows = 6;
/// The smallest M that takes the byte planes.
inline constexpr long kFastPlanesMinM = 16;
/// Half panels per tile: 4 for 1 or 2 rows, 2 beyond (8 to 16 accumulators).
constexpr int fast_halves(int mr) { return mr <= 2 ? 4 : 2; }

/// The most rows of a tile for Dec: kFastMaxRows for the nibble planes; 4 for q2_K,
/// q3_K and q6_K, whose 5-row tiles gained nothing (Zen 5, one core in L2: q6_K 31
/// at M = 5 either way; their 8-row tiles fell at M = 8, q2_K 55 -> 33, q6_K 39 -> 28).
template <class Dec>
constexpr int fast_max_rows() {
  if constexpr (std::is_same_v<Dec, Avx2DecodeQ6_K> || std::is_same_v<Dec, Avx2DecodeQ2_K> || std::is_same_v<Dec, Avx2DecodeQ3_K>)
    return kFastTileRows;
  return kFastMaxRows;
}

/// q6_K's tiles hold 32-bit sums and more constants: 2 half panels for 1 row, 1
/// beyond; the q5 and q3_K tiles hold a word of high bits per half panel besides.
template <class Dec>
constexpr int fast_halves_of(int mr) {
  if constexpr (std::is_same_v<Dec, Avx2DecodeQ6_K>) return mr <= 1 ? 2 : 1;
  if constexpr (kFastFive<Dec> || std::is_same_v<Dec, Avx2DecodeQ3_K>) return mr <= 2 ? 2 : 1;
  return fast_halves(mr);
}

template <class Dec, int MR, int NH = fast_halves_of<Dec>(MR)>
inline void fast_tile_avx2_nh(int nh, const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y, long ldy) {
  if constexpr (NH >= 1) {
    if (nh == NH) {
      if constexpr (std::is_same_v<Dec, Avx2DecodeQ6_K>) return fast_tile_q6k_avx2<MR, NH>(rows, m0, w, h0, y, ldy);
      else if constexpr (std::is_same_v<Dec, Avx2DecodeQ2_K>) return fast_tile_k2_avx2<false, MR, NH>(rows, m0, w, h0, y, ldy);
      else if constexpr (std::is_same_v<Dec, Avx2DecodeQ3_K>) return fast_tile_k2_avx2<true, MR, NH>(rows, m0, w, h0, y, ldy);
      else return fast_tile_avx2<Dec, MR, NH>(rows, m0, w, h0, y, ldy);
    }
    return fast_tile_avx2_nh<Dec, MR, NH - 1>(nh, rows, m0, w, h0, y, ldy);
  }
}
template <class Dec, int MR = fast_max_rows<Dec>()>
inline void fast_tile_avx2_any(int mr, int nh, const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y,
                               long ldy) {
  if constexpr (MR >= 1) {
    if (mr == MR) return fast_tile_avx2_nh<Dec, MR>(nh, rows, m0, w, h0, y, ldy);
    return fast_tile_avx2_any<Dec, MR - 1>(mr, nh, rows, m0, w, h0, y, ldy);
  }
}

// ---- Large M (prefill): the codes decoded once into byte planes ---------------------
// The tiles above rebuild every code for each tile of at most 4 rows, which for the
// heavy decoders (q3_K, q5, q6_K) costs more than the integer products. For large M
// each half panel's codes over all of k are decoded once, per thread, into byte
// planes: per sub-block of S values, S / 4 vectors of 32 bytes, vector v holding
// the 4 values of 8 outputs whose rounded activations are the row's bytes
// [k0 + 4 v, k0 + 4 v + 4) (the rows' order makes that so for every type), as
// unsigned codes (the type's offset is subtracted after the integer sum, as in
// the tiles above). The same integer sums and float steps, so the same bits.

/// Sub-block s of half h of panel block pb as byte planes (out: Dec::kSub / 4
/// vectors of 32 bytes, vstride bytes apart) and its scales D (8 floats) and
/// offsets N (8 floats, types with a min).
template <class Dec>
inline void fast_planes_avx2(const unsigned char* pb, int s, int h, unsigned char* out, float* D, float* N,
                             long vstride = 32) {
  Dec dec;
  dec.begin(pb, s, h);
  _mm256_storeu_ps(D, dec.D);
  if constexpr (Dec::kMin) _mm256_storeu_ps(N, dec.N);
  auto put = [&](int v, __m256i c) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + vstride * v), c); };
  if constexpr (std::is_same_v<Dec, Avx2DecodeQ2_K> || std::is_same_v<Dec, Avx2DecodeQ3_K>) {
    constexpr bool kThree = std::is_same_v<Dec, Avx2DecodeQ3_K>;
    __m256i wv, hx;
    fast_k2_words<kThree>(pb, s, h, wv, hx);
    static_for<4>([&](auto jj) KVD_ALWAYS_INLINE { put(decltype(jj)::value, fast_k2_codes<kThree, decltype(jj)::value>(wv, hx)); });
  } else if constexpr (std::is_same_v<Dec, Avx2DecodeQ6_K>) {
    const unsigned char* ql = pb + 288 + 128 * s + 32 * h;  // Avx2DecodeQ6_K's fields
    const __m256i hw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 2336 + 64 * s + 32 * h));
    for (int g = 0; g < 2; ++g) {
      __m256i lo, hi;
      fast_q6_planes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * g)), hw, g, lo, hi);
      put(2 * g, lo);
      put(2 * g + 1, hi);
    }
  } else {
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int g = 0; g < 4; ++g) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dec.q + 64 * g));
      __m256i lo = _mm256_and_si256(wv, m4), hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), m4);
      if constexpr (kFastFive<Dec>) fast_or_high_bits(fast_high_word(dec), g, lo, hi);
      put(2 * g, lo);
      put(2 * g + 1, hi);
    }
  }
}

/// A tile over byte planes: MR rows x one half panel (8 outputs) over all of k.
/// codes: the half panel's planes over k (8 bytes per value); D, N: 8 floats per
/// sub-block. 16-bit sums over W vectors (W 4 values of codes below 32, 2 for
/// q6_K's 6-bit codes: 2 x 2 x 63 x 127 = 32004), then widened.
template <class Dec, int MR>
inline void fast_planes_tile_avx2(const FastRows& rows, long m0, const unsigned char* codes, const float* D,
                                  const float* N, float* y, long ldy) {
  constexpr int S = Dec::kSub, kOffset = fast_code_offset<Dec>();
  [[maybe_unused]] constexpr int W = std::is_same_v<Dec, Avx2DecodeQ6_K> ? 2 : 4;
  const long K = rows.K, nbq = K / kFastBlock;
  [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  fast_tile_zero<MR, 1>(y, ldy, 0);
  for (long k0 = 0, s = 0; k0 < K; k0 += S, ++s) {
    __m256i t32[MR];
    KVD_UNROLL(8) for (int r = 0; r < MR; ++r) t32[r] = _mm256_setzero_si256();
#if defined(KVDECODE_FAST_VNNI)
    static_for<S / 4>([&](auto vv) KVD_ALWAYS_INLINE {
      constexpr int v = decltype(vv)::value;
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (k0 + 4 * v) * 8));
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
        std::int32_t a;
        std::memcpy(&a, q0 + r * K + k0 + 4 * v, 4);
        t32[r] = fast_dpbusd(t32[r], c, _mm256_set1_epi32(a));
      }
    });
#else
    KVD_UNROLL(1) for (int v0 = 0; v0 < S / 4; v0 += W) {
      __m256i t16[MR];
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) t16[r] = _mm256_setzero_si256();
      static_for<W>([&](auto vv) KVD_ALWAYS_INLINE {
        const int v = v0 + decltype(vv)::value;
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (k0 + 4 * v) * 8));
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
          std::int32_t a;
          std::memcpy(&a, q0 + r * K + k0 + 4 * v, 4);
          t16[r] = _mm256_add_epi16(t16[r], _mm256_maddubs_epi16(c, _mm256_set1_epi32(a)));
        }
      });
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) t32[r] = _mm256_add_epi32(t32[r], _mm256_madd_epi16(t16[r], ones));
    }
#endif
    const __m256 Dv = _mm256_loadu_ps(D + 8 * s);
    KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
      const long row = m0 + r;
      const __m256 d = _mm256_set1_ps(rows.d.data()[row * nbq + k0 / kFastBlock]);
      __m256i I = t32[r];
      if constexpr (kOffset != 0) {
        const std::int32_t Q = S == kFastBlock ? rows.qsum.data()[row * nbq + k0 / kFastBlock] : rows.qsum16.data()[row * (K / 16) + k0 / 16];
        I = _mm256_sub_epi32(I, _mm256_set1_epi32(kOffset * Q));
      }
      float* yp = y + r * ldy;
      __m256 a = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(I), d), Dv, _mm256_loadu_ps(yp));
      if constexpr (Dec::kMin) {
        const float xq = S == kFastBlock ? rows.xq.data()[row * nbq + k0 / kFastBlock] : rows.xq16.data()[row * (K / 16) + k0 / 16];
        a = _mm256_fmadd_ps(_mm256_set1_ps(xq), _mm256_loadu_ps(N + 8 * s), a);
      }
      _mm256_storeu_ps(yp, a);
    }
  }
}

template <class Dec, int MR = kFastPlaneRows>
inline void fast_planes_tile_any(int mr, const FastRows& rows, long m0, const unsigned char* codes, const float* D,
                                 const float* N, float* y, long ldy) {
  if constexpr (MR >= 1) {
    if (mr == MR) return fast_planes_tile_avx2<Dec, MR>(rows, m0, codes, D, N, y, ldy);
    return fast_planes_tile_any<Dec, MR - 1>(mr, rows, m0, codes, D, N, y, ldy);
  }
}

/// Rows of a 512-bit byte-plane tile (defined on every ISA: matmul_fast_planes names it
/// in both of its instances). One Zen 5 core in L2, M = 64, G multiply-adds/s,
/// 3 / 4 / 6 / 10 rows: q5_0 87 / 97 / 88 / 57, q3_K 70 / 70-73 / 67 / 47, q6_K 70 /
/// 74-75 / 68 / 47-49 (the 256-bit planes: q5_0 66, q3_K 47, q6_K 49).
inline constexpr int kFastPlaneRows512 = 4;

#if defined(KVDECODE_FAST_PLANES_512)
// With AVX-512 the planes of a panel's two halves sit side by side, 64 bytes per
// 4 values of 16 outputs, and one zmm vpdpbusd does what two ymm ones did: the
// same integer sums, the same float steps per output, so the same bits.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's own 512-bit intrinsics
#endif

/// A tile over a panel's byte planes: MR rows x 16 outputs over all of k.
/// codes: 16 bytes per value; D, N: 16 floats per sub-block.
template <class Dec, int MR>
inline void fast_planes_tile_512(const FastRows& rows, long m0, const unsigned char* codes, const float* D,
                                 const float* N, float* y, long ldy) {
  constexpr int S = Dec::kSub, kOffset = fast_code_offset<Dec>();
  const long K = rows.K, nbq = K / kFastBlock;
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r) _mm512_storeu_ps(y + r * ldy, _mm512_setzero_ps());
  for (long k0 = 0, s = 0; k0 < K; k0 += S, ++s) {
    __m512i t32[MR];
    KVD_UNROLL(8) for (int r = 0; r < MR; ++r) t32[r] = _mm512_setzero_si512();
    static_for<S / 4>([&](auto vv) KVD_ALWAYS_INLINE {
      constexpr int v = decltype(vv)::value;
      const __m512i c = _mm512_loadu_si512(codes + (k0 + 4 * v) * 16);
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
        std::int32_t a;
        std::memcpy(&a, q0 + r * K + k0 + 4 * v, 4);
        t32[r] = _mm512_dpbusd_epi32(t32[r], c, _mm512_set1_epi32(a));
      }
    });
    const __m512 Dv = _mm512_loadu_ps(D + 16 * s);
    KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
      const long row = m0 + r;
      const __m512 d = _mm512_set1_ps(rows.d.data()[row * nbq + k0 / kFastBlock]);
      __m512i I = t32[r];
      if constexpr (kOffset != 0) {
        const std::int32_t Q = S == kFastBlock ? rows.qsum.data()[row * nbq + k0 / kFastBlock] : rows.qsum16.data()[row * (K / 16) + k0 / 16];
        I = _mm512_sub_epi32(I, _mm512_set1_epi32(kOffset * Q));
      }
      float* yp = y + r * ldy;
      __m512 a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(I), d), Dv, _mm512_loadu_ps(yp));
      if constexpr (Dec::kMin) {
        const float xq = S == kFastBlock ? rows.xq.data()[row * nbq + k0 / kFastBlock] : rows.xq16.data()[row * (K / 16) + k0 / 16];
        a = _mm512_fmadd_ps(_mm512_set1_ps(xq), _mm512_loadu_ps(N + 16 * s), a);
      }
      _mm512_storeu_ps(yp, a);
    }
  }
}

template <class Dec, int MR = kFastPlaneRows512>
inline void fast_planes_tile_512_any(int mr, const FastRows& rows, long m0, const unsigned char* codes, const float* D,
                                     const float* N, float* y, long ldy) {
  if constexpr (MR >= 1) {
    if (mr == MR) return fast_planes_tile_512<Dec, MR>(rows, m0, codes, D, N, y, ldy);
    return fast_planes_tile_512_any<Dec, MR - 1>(mr, rows, m0, codes, D, N, y, ldy);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // 512-bit planes

/// Large M: threads take ranges of units (half panels; with kWide, the 512-bit
/// planes, whole panels); each unit is decoded over all of k into the thread's
/// planes (L bytes per value: 8 outputs or 16), then every row tile runs over them.
template <class Dec, bool kWide>
void matmul_fast_planes(const FastRows& rows, long M, const QuantPanels& w, float* y, long ldy, bool parallel) {
  constexpr int S = Dec::kSub, kSubs = Dec::kBlock / S, L = kWide ? 16 : 8;
  const long K = rows.K;
  parallel_parts(kWide ? w.n_panels() : 2 * w.n_panels(), parallel, [&](long u0, long u1) {
    static thread_local AlignedBuffer<unsigned char> codes;
    static thread_local AlignedBuffer<float> D, N;
    codes.reserve(static_cast<std::size_t>(K * L));
    D.reserve(static_cast<std::size_t>(K / S * L));
    N.reserve(static_cast<std::size_t>(K / S * L));
    for (long u = u0; u < u1; ++u) {
      for (long b = 0; b < w.n_blocks(); ++b)
        for (int s = 0; s < kSubs; ++s)
          for (int h = 0; h < (kWide ? 2 : 1); ++h) {  // the halves side by side: 32 bytes, 8 floats each
            const long j = b * kSubs + s;
            fast_planes_avx2<Dec>(w.panel_block(kWide ? u : u / 2, b), s, kWide ? h : static_cast<int>(u % 2),
                                  codes.data() + j * S * L + 32 * h, D.data() + L * j + 8 * h, N.data() + L * j + 8 * h,
                                  4 * L);
          }
      constexpr long kRows = kWide ? kFastPlaneRows512 : kFastPlaneRows;
      for (long m0 = 0; m0 < M; m0 += kRows) {
        const int mr = static_cast<int>(std::min<long>(kRows, M - m0));
#if defined(KVDECODE_FAST_PLANES_512)
        if constexpr (kWide) {
          fast_planes_tile_512_any<Dec>(mr, rows, m0, codes.data(), D.data(), N.data(), y + m0 * ldy + u * L, ldy);
          continue;
        }
#endif
        fast_planes_tile_any<Dec>(mr, rows, m0, codes.data(), D.data(), N.data(), y + m0 * ldy + u * L, ldy);
      }
    }
  });
}

/// Whether large M takes the byte planes for Dec: the heavy decoders (q5, q3_K, q6_K);
/// every type with the 512-bit planes (one Zen 5 core in L2, M = 64, G multiply-adds/s,
/// 256-bit tiles -> 512-bit planes: q4_0 75 -> 91-96, q4_1 73 -> 87-92, q4_K 71 -> 87,
/// q2_K 55 -> 68).
/// One core in L2 at M = 64 (Zen 3, G multiply-adds/s, tiles -> planes, noisy):
/// q5_0 26.6 -> 36.1, q5_1 29.3 -> 43.5, q5_K 29.1 -> 39.4, q3_K 23.8 -> 32.9, q6_K
/// 28.3 -> 34.8; q4_K 40-43 -> 30-42 and q2_K 28-34 -> 22-32 stay with the tiles,
/// whose two half panels share each broadcast.
template <class Dec>
inline constexpr bool kFastPlanes =
#if defined(KVDECODE_FAST_PLANES_512)
    true;
#else
    kFastFive<Dec> || std::is_same_v<Dec, Avx2DecodeQ3_K> || std::is_same_v<Dec, Avx2DecodeQ6_K>;
#endif

/// The AVX2 fast product. Small M: threads take contiguous ranges of column tiles;
/// rows go in blocks that keep their rounded values in L2, and tiles of up to 4
/// rows. M >= kFastPlanesMinM for the heavy decoders: the byte planes above.
inline void matmul_fast_avx2(const FastRows& rows, long M, const QuantPanels& w, float* y, long ldy, bool parallel) {
  auto run = [&](auto dec) {
    using Dec = decltype(dec);
    if (kFastPlanes<Dec> && M >= kFastPlanesMinM) {
#if defined(KVDECODE_FAST_PLANES_512)
      return matmul_fast_planes<Dec, true>(rows, M, w, y, ldy, parallel);
#else
      return matmul_fast_planes<Dec, false>(rows, M, w, y, ldy, parallel);
#endif
    }
    constexpr long kRows = fast_max_rows<Dec>();
    const int mr_max = static_cast<int>(M <= kRows ? M : kFastTileRows);
    const int nh_max = fast_halves_of<Dec>(mr_max);
    const long H = 2 * w.n_panels(), n_ctiles = (H + nh_max - 1) / nh_max;
    const long mb = std::max<long>(mr_max, (128L << 10) / rows.K / kFastTileRows * kFastTileRows);  // rows per block: their rounded values stay in L2
    parallel_parts(n_ctiles, parallel, [&](long c0, long c1) {
      for (long b0 = 0; b0 < M; b0 += mb)
        for (long c = c0; c < c1; ++c) {
          const long h0 = c * nh_max;
          const int nh = static_cast<int>(std::min<long>(nh_max, H - h0));
          for (long m0 = b0; m0 < std::min(M, b0 + mb); m0 += mr_max) {
            const int mr = static_cast<int>(std::min<long>(mr_max, M - m0));
            fast_tile_avx2_any<Dec>(mr, nh, rows, m0, w, h0, y + m0 * ldy, ldy);
          }
        }
    });
  };
  const bool fast = visit_block_type(w.type(), [&](auto row) {
    using Row = decltype(row);
    if constexpr (Row::kFastOrder != 0) run(typename Avx2DecoderOf<Row>::type{});
    else KVD_ASSERT(false);
  });
  if (!fast) KVD_ASSERT(false);
}
#endif  // KVDECODE_QUANT_AVX2

/// y (M x Npad) = the fast product (top of this file) of x (M x K) and w.
/// Precondition (asserted): fast_matmul_type(w.type()).
inline void matmul_fast_with(const float* x, long ldx, long M, const QuantPanels& w, float* y, long ldy,
                             FastPath path = FastPath::kAuto) {
  KVD_ASSERT(fast_matmul_type(w.type()) && ldy >= w.n_out_padded() && ldx >= w.n_in());
  if (M <= 0) return;
  const bool parallel = M * w.n_out_padded() * w.n_in() >= kMatmulParallelThreshold;
  static thread_local FastRows rows_buf;
  FastRows& rows = rows_buf;  // the caller's buffer: inside the parallel regions, rows_buf would be each thread's own
  rows.reserve(M, w.n_in(), fast_order(w.type()));
  const bool portable = path == FastPath::kPortable;
  parallel_parts(M, parallel && M > 1, [&](long m0, long m1) { fast_round_rows(x, ldx, m0, m1, rows, portable); });
#if defined(KVDECODE_FAST_AVX2)
  if (!portable) return matmul_fast_avx2(rows, M, w, y, ldy, parallel);
#endif
  matmul_fast_portable(rows, M, w, y, ldy, parallel);
}

/// The fast product for kvd::matmul's dispatch (matmul.hpp).
inline void matmul_fast_panels(const float* x, long ldx, long M, const QuantPanels& w, float* y, long ldy) {
  matmul_fast_with(x, ldx, M, w, y, ldy);
}

}  // namespace detail

/// y (M x Npad, row stride ldy) = x (M x K) * W^T in the fast mode (top of this
/// file): the same bits for every M, tiling and thread count. Throws ConfigError
/// naming the type if the fast mode does not compute W's type (fast_matmul_type()).
inline void matmul_fast(const float* x, long ldx, long M, const QuantMatrix& w, float* y, long ldy) {
  if (!detail::fast_matmul_type(w.type()))
    throw ConfigError(detail::msg("fast matmul: weight type ", weight_type_name(w.type()), " is not computed in fast mode"));
  detail::matmul_fast_with(x, ldx, M, w.panels(), y, ldy);
}

}  // namespace kvd
