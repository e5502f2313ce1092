// The fast mode of 16-bit weights (`--fast-matmul`, Transformer::set_fast_matmul):
// activations rounded to bfloat16 and multiplied by bf16 dot products, two
// products per 32-bit lane (AVX512-BF16's vdpbf16ps), as many multiply-adds per
// instruction as two f32 FMAs. fast_int8.hpp does the same for the block types
// with int8 activations. Off by default.
//
// NUMERICS (one definition, every path). Row m of x is rounded once per product,
// value by value, as VCVTNEPS2BF16 rounds:
//   r(v) = a zero of v's sign if v is subnormal, else fp32_to_bf16(v)
//          (nearest, ties to even; a NaN stays a NaN, made quiet).
// Weights: bf16 bits as stored; f16 values as r(float(h)) (3 bits of their 11
// dropped: every f16 value is a normal float, so r is plain rounding there).
// Output (m, n), for K even:
//   acc = +0; for p = 0 .. K/2 - 1:
//     acc = step(acc, x[2p+1], W[n][2p+1])
//     acc = step(acc, x[2p],   W[n][2p])
//   y[m][n] = acc,  step(acc, a, b) = ftz(fma(daz(a), daz(b), daz(acc)))
// where daz turns a subnormal input into a zero of its sign and ftz a subnormal
// result into a zero of its sign (acc is never subnormal here, but vdpbf16ps
// flushes a subnormal accumulator too): one vdpbf16ps lane, as Intel's pseudo-code
// gives it (odd element first, two fused steps, MXCSR neither read nor written).
// The test FastBf16.HardwareStepIsTheDefinition checks that on the CPU it runs
// on (Zen 5: 3.2 million lanes with subnormal inputs and results, none differs;
// even-first would differ in 4.1% of them, one rounding of both products in 3.5%). Each output is one chain in a fixed order, so the
// result is the same bits for every M, path, tiling and thread count.
//
// WHERE. The tiles need AVX512-BF16 (and BW, for the word permutes): Intel
// Cooper Lake, Sapphire Rapids and later, AMD Zen 4 and later. Built without it,
// the fast mode leaves 16-bit matrices in the default numerics (an emulation of
// the step's flush-to-zero costs more than it would save), and so does a matrix
// whose K is odd. fast_bf16_type() says which.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kvdecode/core/isa.hpp"
#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/matmul/dense_kernels.hpp"


namespace kvd {
namespace detail {

/// Whether the fast mode computes a 16-bit matrix of type t with K inputs per row
/// in bf16 (the CPU has the instructions, t is f16 or bf16, K is even); if not,
/// it keeps the default numerics.
inline bool fast_bf16_type(WeightType t, long K) {
#if defined(KVDECODE_FAST_BF16)
  return (t == WeightType::kF16 || t == WeightType::kBF16) && K % 2 == 0;
#else
  (void)t, (void)K;
  return false;
#endif
}

/// r(v) of the top of this file: VCVTNEPS2BF16's rounding of one float.
inline std::uint16_t fast_bf16_round(float v) {
  if (std::fpclassify(v) == FP_SUBNORMAL) return static_cast<std::uint16_t>((float_bits(v) >> 16) & 0x8000u);
  return fp32_to_bf16(v);
}

/// A weight of a 16-bit panel as the fast mode multiplies it (bf16 bits).
inline std::uint16_t fast_bf16_weight(WeightType t, std::uint16_t bits) {
  return t == WeightType::kF16 ? fast_bf16_round(half_bits_to_float(bits)) : bits;
}

/// daz/ftz of the top of this file: a subnormal becomes a zero of its sign.
inline float fast_bf16_flush(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.f, v) : v; }

/// step(acc, a, b) of the top of this file (a, b: bf16 bits): one half of a vdpbf16ps lane.
inline float fast_bf16_step(float acc, std::uint16_t a, std::uint16_t b) {
  return fast_bf16_flush(
      std::fma(fast_bf16_flush(bf16_bits_to_float(a)), fast_bf16_flush(bf16_bits_to_float(b)), fast_bf16_flush(acc)));
}

/// Rounded rows: v (M x Kp bf16 bits, row stride Kp = K rounded up to 32, so
/// that each row starts on a cache line; the padding is never read).
struct FastBf16Rows {
  AlignedBuffer<std::uint16_t> v;
  long K = 0, stride = 0;
  void reserve(long M, long k) {
    K = k;
    stride = (k + 31) / 32 * 32;
    v.reserve(static_cast<std::size_t>(M * stride));
  }
  const std::uint16_t* row(long m) const { return v.data() + m * stride; }
};

/// Rows [m0, m1) of x (stride ldx) rounded into `rows`.
inline void fast_bf16_round_rows(const float* x, long ldx, long m0, long m1, FastBf16Rows& rows, bool portable) {
  const long K = rows.K;
  for (long m = m0; m < m1; ++m) {
    const float* xr = x + m * ldx;
    std::uint16_t* out = rows.v.data() + m * rows.stride;
    long k = 0;
#if defined(KVDECODE_FAST_BF16)
    if (!portable)
      for (; k + 16 <= K; k += 16) {
        const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(xr + k));  // r(v) for each of 16 values
        std::memcpy(out + k, &b, 32);
      }
#endif
    (void)portable;
    for (; k < K; ++k) out[k] = fast_bf16_round(xr[k]);
  }
}

/// The scalar definition: y (M x Npad) from rounded rows and the 16-bit panels of
/// type t (n_panels panels of K x 16, dense_kernels.hpp's layout).
inline void matmul_fast_bf16_portable(const FastBf16Rows& rows, long M, WeightType t, const std::uint16_t* panels,
                                      long n_panels, float* y, long ldy, bool parallel) {
  const long K = rows.K;
  parallel_parts(n_panels, parallel, [&](long p0, long p1) {
    for (long p = p0; p < p1; ++p) {
      const std::uint16_t* pw = panels + p * K * kLanes;
      for (long m = 0; m < M; ++m)
        for (int j = 0; j < kLanes; ++j) {
          float acc = 0.f;
          for (long k = 0; k < K; k += 2) {
            acc = fast_bf16_step(acc, rows.row(m)[k + 1], fast_bf16_weight(t, pw[(k + 1) * kLanes + j]));
            acc = fast_bf16_step(acc, rows.row(m)[k], fast_bf16_weight(t, pw[k * kLanes + j]));
          }
          y[m * ldy + p * kLanes + j] = acc;
        }
    }
  });
}

#if defined(KVDECODE_FAST_BF16)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's own _mm512_cvtph_ps
#endif
// THE TILES. A panel's rows k and k + 1 (16 lanes each) are 64 adjacent bytes;
// one vpermw interleaves them into the 16 pairs (W[n][k], W[n][k+1]) of
// vdpbf16ps's lanes (f16: converted to f32 and rounded to bf16 after). The pair
// (x[k], x[k+1]) of a row is one 32-bit broadcast. Small M reads each panel from
// memory once for all rows; large M converts a group of panels once into the
// thread's buffer and runs every row tile over it.

/// Panel rows k and k + 1 (64 bytes at p) as vdpbf16ps operand: lane j = (W[j][k], W[j][k+1]).
template <bool kF16>
KVD_ALWAYS_INLINE inline __m512i fast_bf16_pairs(const std::uint16_t* p) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i v = _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(p));
  if constexpr (!kF16) return v;
  const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(v)), hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1));
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));  // r(float(h)), lanes in order
}

/// Pair (x[k], x[k+1]) of a rounded row, broadcast.
KVD_ALWAYS_INLINE inline __m512i fast_bf16_xpair(const std::uint16_t* x) {
  std::uint32_t a;
  std::memcpy(&a, x, 4);
  return _mm512_set1_epi32(static_cast<int>(a));
}

KVD_ALWAYS_INLINE inline __m512 fast_bf16_dot(__m512 acc, __m512i w, __m512i x) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(w), reinterpret_cast<__m512bh>(x));
}

/// Small M: MR rows x NP panels (stride K x 16 values) over all of k, weights from memory.
template <bool kF16, int MR, int NP>
inline void fast_bf16_tile_small(const FastBf16Rows& rows, long m0, const std::uint16_t* pw, float* y, long ldy) {
  const long K = rows.K, pstride = K * kLanes;
  __m512 acc[MR][NP];
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r) KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  for (long k = 0; k < K; k += 2) {
    __m512i w[NP];
    KVD_UNROLL(8) for (int p = 0; p < NP; ++p) {
      w[p] = fast_bf16_pairs<kF16>(pw + p * pstride + k * kLanes);
      prefetch_read_at(pw + p * pstride + k * kLanes, kPrefetchBytes);  // (may point past the end: never faults)
    }
    KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
      const __m512i xv = fast_bf16_xpair(rows.row(m0 + r) + k);
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p] = fast_bf16_dot(acc[r][p], w[p], xv);
    }
  }
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r) KVD_UNROLL(8) for (int p = 0; p < NP; ++p)
    _mm512_storeu_ps(y + r * ldy + p * kLanes, acc[r][p]);
}

/// Rows per small-M tile, at most; larger M is packed.
inline constexpr long kFastBf16SmallM = 8;
/// Panels of a small-M tile of mr rows (mr x NP accumulators, at most 24 of the 32 registers).
constexpr int fast_bf16_small_panels(int mr) { return mr <= 2 ? 8 : mr <= 4 ? 4 : mr <= 6 ? 3 : 2; }
/// The large-M tile: kFastBf16Rows rows x kFastBf16Panels panels (24 accumulators).
/// One Zen 5 core, 192 x 2048 in L2, M = 256 (`BM_Matmul16InCache`, G multiply-adds/s):
/// 12 x 2 182, 8 x 3 187, 6 x 4 188 (4 panels of K = 5632 fill 720 KiB of L2).
inline constexpr int kFastBf16Rows = 8, kFastBf16Panels = 3;

/// Large M: MR rows x NP panels over all of k from a converted group of
/// kFastBf16Panels panels (K/2 x kFastBf16Panels x 32 bf16; NP <= kFastBf16Panels are read).
template <int MR, int NP>
inline void fast_bf16_tile_packed(const FastBf16Rows& rows, long m0, const std::uint16_t* g, float* y, long ldy) {
  const long K = rows.K;
  __m512 acc[MR][NP];
  KVD_UNROLL(16) for (int r = 0; r < MR; ++r) KVD_UNROLL(4) for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  for (long k = 0; k < K; k += 2) {
    __m512i w[NP];
    KVD_UNROLL(4) for (int p = 0; p < NP; ++p) w[p] = _mm512_load_si512(g + (k / 2 * kFastBf16Panels + p) * 2 * kLanes);
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r) {
      const __m512i xv = fast_bf16_xpair(rows.row(m0 + r) + k);
      KVD_UNROLL(4) for (int p = 0; p < NP; ++p) acc[r][p] = fast_bf16_dot(acc[r][p], w[p], xv);
    }
  }
  KVD_UNROLL(16) for (int r = 0; r < MR; ++r) KVD_UNROLL(4) for (int p = 0; p < NP; ++p)
    _mm512_storeu_ps(y + r * ldy + p * kLanes, acc[r][p]);
}

/// Tile dispatch on the run-time panel count np (1 .. NP) and row count mr (1 .. MR).
template <bool kF16, int MR, int NP>
inline void fast_bf16_small_np(int np, const FastBf16Rows& rows, long m0, const std::uint16_t* pw, float* y, long ldy) {
  if constexpr (NP >= 1) {
    if (np < NP) return fast_bf16_small_np<kF16, MR, NP - 1>(np, rows, m0, pw, y, ldy);
    fast_bf16_tile_small<kF16, MR, NP>(rows, m0, pw, y, ldy);
  }
}
template <bool kF16, int MR = static_cast<int>(kFastBf16SmallM)>
inline void fast_bf16_small_any(int mr, int np, const FastBf16Rows& rows, long m0, const std::uint16_t* pw, float* y,
                                long ldy) {
  if constexpr (MR >= 1) {
    if (mr < MR) return fast_bf16_small_any<kF16, MR - 1>(mr, np, rows, m0, pw, y, ldy);
    fast_bf16_small_np<kF16, MR, fast_bf16_small_panels(MR)>(np, rows, m0, pw, y, ldy);
  }
}
template <int MR, int NP>
inline void fast_bf16_packed_np(int np, const FastBf16Rows& rows, long m0, const std::uint16_t* g, float* y, long ldy) {
  if constexpr (NP >= 1) {
    if (np < NP) return fast_bf16_packed_np<MR, NP - 1>(np, rows, m0, g, y, ldy);
    fast_bf16_tile_packed<MR, NP>(rows, m0, g, y, ldy);
  }
}
template <int MR = kFastBf16Rows>
inline void fast_bf16_packed_any(int mr, int np, const FastBf16Rows& rows, long m0, const std::uint16_t* g, float* y,
                                 long ldy) {
  if constexpr (MR >= 1) {
    if (mr < MR) return fast_bf16_packed_any<MR - 1>(mr, np, rows, m0, g, y, ldy);
    fast_bf16_packed_np<MR, kFastBf16Panels>(np, rows, m0, g, y, ldy);
  }
}

template <bool kF16>
inline void matmul_fast_bf16_tiles(const FastBf16Rows& rows, long M, const std::uint16_t* panels, long n_panels,
                                   float* y, long ldy, bool parallel) {
  const long K = rows.K;
  if (M <= kFastBf16SmallM) {
    const int mr = static_cast<int>(M), np_max = fast_bf16_small_panels(mr);
    const long n_ctiles = (n_panels + np_max - 1) / np_max;
    parallel_parts(n_ctiles, parallel, [&](long c0, long c1) {
      for (long c = c0; c < c1; ++c) {
        const long p0 = c * np_max;
        const int np = static_cast<int>(std::min<long>(np_max, n_panels - p0));
        fast_bf16_small_any<kF16>(mr, np, rows, 0, panels + p0 * K * kLanes,
                                                                       y + p0 * kLanes, ldy);
      }
    });
    return;
  }
  constexpr int NP = kFastBf16Panels;
  const long n_groups = (n_panels + NP - 1) / NP;
  parallel_parts(n_groups, parallel, [&](long g0, long g1) {
    static thread_local AlignedBuffer<std::uint16_t> buf;
    buf.reserve(static_cast<std::size_t>(K * NP * kLanes));
    std::uint16_t* g = buf.data();
    for (long gi = g0; gi < g1; ++gi) {
      const long p0 = gi * NP;
      const int np = static_cast<int>(std::min<long>(NP, n_panels - p0));
      for (long k = 0; k < K; k += 2)
        for (int p = 0; p < np; ++p)
          _mm512_store_si512(g + (k / 2 * NP + p) * 2 * kLanes, fast_bf16_pairs<kF16>(panels + (p0 + p) * K * kLanes + k * kLanes));
      for (long m0 = 0; m0 < M; m0 += kFastBf16Rows) {
        const int mr = static_cast<int>(std::min<long>(kFastBf16Rows, M - m0));
        fast_bf16_packed_any(mr, np, rows, m0, g, y + m0 * ldy + p0 * kLanes, ldy);
      }
    }
  });
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // KVDECODE_FAST_BF16

/// y (M x Npad) = the bf16 fast product (top of this file) of x (M x K) and the
/// n_panels 16-bit panels of type t. Precondition (asserted): fast_bf16_type(t, K),
/// or path == kPortable with t f16 or bf16 and K even.
inline void matmul_fast_bf16_with(const float* x, long ldx, long M, WeightType t, const std::uint16_t* panels,
                                  long n_panels, long K, float* y, long ldy, FastPath path = FastPath::kAuto) {
  const bool portable = path == FastPath::kPortable;
  KVD_ASSERT((t == WeightType::kF16 || t == WeightType::kBF16) && K % 2 == 0 && (portable || fast_bf16_type(t, K)));
  KVD_ASSERT(ldy >= n_panels * kLanes && ldx >= K);
  if (M <= 0) return;
  const bool parallel = M * n_panels * kLanes * K >= kMatmulParallelThreshold;
  static thread_local FastBf16Rows rows_buf;
  FastBf16Rows& rows = rows_buf;  // the caller's buffer: inside the parallel regions, rows_buf would be each thread's own
  rows.reserve(M, K);
  parallel_parts(M, parallel && M > 1, [&](long m0, long m1) { fast_bf16_round_rows(x, ldx, m0, m1, rows, portable); });
#if defined(KVDECODE_FAST_BF16)
  if (!portable) {
    if (t == WeightType::kF16) return matmul_fast_bf16_tiles<true>(rows, M, panels, n_panels, y, ldy, parallel);
    return matmul_fast_bf16_tiles<false>(rows, M, panels, n_panels, y, ldy, parallel);
  }
#endif
  matmul_fast_bf16_portable(rows, M, t, panels, n_panels, y, ldy, parallel);
}

/// The bf16 fast product for kvd::matmul's dispatch (matmul.hpp).
inline void matmul_fast_bf16_panels(const float* x, long ldx, long M, WeightType t, const std::uint16_t* panels,
                                    long n_panels, long K, float* y, long ldy) {
  matmul_fast_bf16_with(x, ldx, M, t, panels, n_panels, K, y, ldy);
}

}  // namespace detail
}  // namespace kvd
