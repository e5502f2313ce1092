// The matrix product with weights in one of ggml's block types (q8_0, q4_0,
// q4_1, q5_0, q5_1, q2_K .. q6_K), repacked into panel blocks (panel_layout.hpp):
// the numerics, the buffered paths and the dispatcher matmul_quant_with(). The
// decoders are in quant_decode_avx512.hpp, quant_decode_avx2.hpp and
// quant_decode_neon.hpp, the fused small-M tiles in quant_fused.hpp, and
// QuantMatrix, a stand-alone repacked matrix for tests and benchmarks, in
// quant_matrix.hpp.
//
// NUMERICS. Within a sub-block of S values (32 for q8_0..q5_1, q4_K and q5_K;
// 16 for q2_K, q3_K and q6_K) every weight is w = c * D + N: c a small integer
// code, D the sub-block's scale, N its offset (only q4_1, q5_1, q2_K, q4_K and
// q5_K have one), D and N computed as ggml computes them, so c * D + N is
// ggml's dequantized value bit for bit (weights/blocks.hpp's factored form).
// The product factors D and N out of each sub-block's partial sum:
//   for each sub-block j of row n, in increasing k:
//     t   = fma(x[m][k_last], c[n][k_last], ... fma(x[m][k_first], c[n][k_first], 0) ...)
//     acc = fma(t, D[n][j], acc)
//     acc = fma(xs[m][j], N[n][j], acc)     (types with an offset; xs = the
//                                           sub-block's x added in increasing k from +0)
//   y[m][n] = acc (from +0)
// This is a fixed, row-local sequence of float operations, so the result is
// the same bits whatever M, the path, the tiling or the thread count. It is
// not the fma chain over the dequantized weights (that is dense_kernels.hpp's rule
// for float matrices): decoding a code is one instruction cheaper than
// decoding a weight, which is what decode speed is made of here. Accuracy is
// the same kind: tests compare with a float64 forward on the dequantized weights.
//
// LAYOUT. Rows are grouped in panels of 16 (dense_kernels.hpp's output panels). For
// each panel and each block of k, the 16 rows' blocks are stored together,
// field by field, with the 16 rows' copies of each field element side by side
// ("panel block"): e.g. for q4_K, 16 f16 d, 16 f16 dmin, then for each of the
// 12 scale bytes the 16 rows' bytes, then for each of the 128 code bytes the
// 16 rows' bytes. One 16-byte load then holds one code byte of 16 outputs,
// which widen to one 16-lane vector. The repacked matrix has exactly the
// file's bytes plus the zero rows that pad the last panel to 16.
//
// PATHS (all give the same bits):
//  * small M (decode, M <= 8) on AVX-512 (quant_fused.hpp): a register tile of up to 8 rows x 4
//    panels decodes each k's 16-lane code vectors in registers from the
//    streamed panel blocks and runs the sub-block chains.
//  * small M on AVX2 (no AVX-512): the same with 8-lane decoders on half
//    panels, tiles of up to 8 rows x 4 half panels (shapes per decoder).
//  * small M on aarch64: the same with 4-lane NEON decoders on quarter panels
//    (quant_decode_neon.hpp), tiles of up to 8 rows x 8 quarter panels.
//    With more than one row, all read the rows interleaved (x'[k][r], copied
//    once per product by interleave_tile_rows()).
//  * otherwise: a k block of a tile of panels is factored into per-thread
//    buffers (codes, scales, offsets) and a micro-kernel with dense_kernels.hpp's
//    tile shapes runs over them (large M: with dense_kernels.hpp's GotoBLAS
//    blocking; the buffers are reused by every row of a row block, so their
//    cost vanishes as M grows). The factoring runs through the AVX-512, AVX2 or
//    NEON decoders, or the scalar code where the build has none.
// The rows' sub-block sums xs are computed once per product into a per-thread
// buffer (allocated at its first use on each thread).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/matmul/dense_kernels.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/matmul/quant_decode_avx2.hpp"
#include "kvdecode/matmul/quant_decode_avx512.hpp"
#include "kvdecode/matmul/quant_decode_neon.hpp"
#include "kvdecode/matmul/quant_fused.hpp"
#include "kvdecode/weights/block_types.hpp"
#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/weights/weight_type.hpp"

namespace kvd::detail {

/// How a panel block becomes floats: kPortable (scalar, weights/blocks.hpp),
/// kAvx2, kAvx512 or kNeon (quant_decode_avx2.hpp, quant_decode_avx512.hpp,
/// quant_decode_neon.hpp). All give the same bits. A request for decoders the
/// build lacks takes the next one it has (AVX-512, then AVX2, then the scalar code
/// on x86; on aarch64 every request but kPortable takes NEON);
/// kQuantDequantBest is the fastest the build has.
enum class QuantDequant { kPortable, kAvx2, kAvx512, kNeon };
#if defined(KVDECODE_QUANT_AVX512)
inline constexpr QuantDequant kQuantDequantBest = QuantDequant::kAvx512;
#elif defined(KVDECODE_QUANT_AVX2)
inline constexpr QuantDequant kQuantDequantBest = QuantDequant::kAvx2;
#elif defined(KVDECODE_QUANT_NEON)
inline constexpr QuantDequant kQuantDequantBest = QuantDequant::kNeon;
#else
inline constexpr QuantDequant kQuantDequantBest = QuantDequant::kPortable;
#endif

/// The k block of the buffered paths: 256 values, a whole number of blocks of every type.
inline constexpr long kQuantKc = 256;

/// The factored form of panels [p0, p0 + np) over k in [k0, k0 + kc): codes c
/// (kc x 16 per panel, panels kc * 16 apart), scales D and offsets N (kc / sub
/// x 16 per panel, panels kc / sub * 16 apart; N only for types with a min).
template <class T>
inline void factor_panels(const QuantPanels& w, long p0, int np, long k0, long kc, T* c, T* D, T* N, QuantDequant how) {
  const long bs = w.block_size(), sub = quant_factoring(w.type()).sub;
  for (int p = 0; p < np; ++p)
    for (long k = k0; k < k0 + kc; k += bs) {
      const unsigned char* pb = w.panel_block(p0 + p, k / bs);
      T* co = c + (p * kc + (k - k0)) * kLanes;
      const long so = (p * (kc / sub) + (k - k0) / sub) * kLanes;
      T* Do = D + so;
      T* No = N ? N + so : nullptr;
#if defined(KVDECODE_QUANT_AVX512)
      if constexpr (std::is_same_v<T, float>) {
        if (how == QuantDequant::kAvx512) {
          with_decoder(w.type(), [&](auto dec) { factor_panel_block_avx512<decltype(dec)>(pb, co, Do, No); });
          continue;
        }
      }
#endif
#if defined(KVDECODE_QUANT_AVX2)
      if constexpr (std::is_same_v<T, float>) {
        if (how != QuantDequant::kPortable) {
          with_decoder_avx2(w.type(), [&](auto dec) { factor_panel_block_avx2<decltype(dec)>(pb, co, Do, No); });
          continue;
        }
      }
#endif
#if defined(KVDECODE_QUANT_NEON)
      if constexpr (std::is_same_v<T, float>) {
        if (how != QuantDequant::kPortable) {
          with_decoder_neon(w.type(), [&](auto dec) { factor_panel_block_neon<decltype(dec)>(pb, co, Do, No); });
          continue;
        }
      }
#endif
      (void)how;
      factor_panel_block_portable<T>(w.type(), pb, co, Do, No);
    }
}

/// xs[m * (K / sub) + j] = the sum of row m's values in sub-block j, added in
/// increasing k from +0 (the one definition every path uses). Sixteen sub-blocks
/// are summed side by side (k outer, sub-block inner), so that sixteen independent
/// chains hide the add latency; each chain is still the same sequence of adds.
template <class T>
inline void sub_block_sums_rows(const T* x, long ldx, long m0, long m1, long K, long sub, T* xs) {
  constexpr long kChains = 16;
  const long n = K / sub;
  for (long m = m0; m < m1; ++m) {
    const T* row = x + m * ldx;
    for (long j0 = 0; j0 < n; j0 += kChains) {
      const long nj = std::min(kChains, n - j0);
      T s[kChains] = {};
      for (long k = 0; k < sub; ++k)
        for (long j = 0; j < nj; ++j) s[j] += row[(j0 + j) * sub + k];
      std::copy(s, s + nj, xs + m * n + j0);
    }
  }
}

/// sub_block_sums_rows() over all M rows, split by rows between threads when parallel.
template <class T>
inline void sub_block_sums(const T* x, long ldx, long M, long K, long sub, T* xs, bool parallel = false) {
#if defined(_OPENMP)
#pragma omp parallel if (parallel && M > 1)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    long m0, m1;
    split_range(M, t, nt, m0, m1);
    sub_block_sums_rows(x, ldx, m0, m1, K, sub, xs);
  }
}

/// One register tile of the buffered paths: MR rows x NP panels over k in [0, kc),
/// in the factored order. Input row r at k is a[r * lda + k] (lda = kLda when
/// kLda > 0); panel p's codes at k are c[p * cstride + 16 k ..), its scales and
/// offsets of sub-block j at D / N[p * dstride + 16 j ..) (N null: no min); xs[r *
/// ldxs + j] the row's sum over sub-block j. `first` starts y at +0, otherwise the
/// tile continues the running sums stored in y.
template <class T, class V, int MR, int NP, long kLda>
inline void quant_tile(const T* a, long lda, const T* c, long cstride, long kc, long sub, const T* D, const T* N,
                       long dstride, const T* xs, long ldxs, T* y, long ldy, bool first) {
  if constexpr (kLda > 0) lda = kLda;
  // The running sums stay in registers when they fit beside the partial sums
  // (the prefill tiles, quant_large_rows), else in y (once per sub-block).
  constexpr bool kInRegisters = 2 * MR * NP <= V::kLargeAccumulators;
  V acc[kInRegisters ? MR : 1][kInRegisters ? NP : 1];
  KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(8) for (int p = 0; p < NP; ++p) {
      if constexpr (kInRegisters)
        acc[r][p] = first ? V::zero() : V::load(y + r * ldy + p * kLanes);
      else if (first)
        V::zero().store(y + r * ldy + p * kLanes);
    }
  for (long s0 = 0, j = 0; s0 < kc; s0 += sub, ++j) {
    V t[MR][NP];
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) t[r][p] = V::zero();
    for (long k = s0; k < s0 + sub; ++k) {
      V bv[NP];
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) bv[p] = V::load(c + p * cstride + k * kLanes);
      KVD_UNROLL(16) for (int r = 0; r < MR; ++r) {
        const V av = V::broadcast(a[r * lda + k]);
        KVD_UNROLL(8) for (int p = 0; p < NP; ++p) t[r][p].fma(av, bv[p]);
      }
    }
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) {
        V a;
        if constexpr (kInRegisters)
          a = acc[r][p];
        else
          a = V::load(y + r * ldy + p * kLanes);
        a.fma(t[r][p], V::load(D + p * dstride + j * kLanes));
        if (N) a.fma(V::broadcast(xs[r * ldxs + j]), V::load(N + p * dstride + j * kLanes));
        if constexpr (kInRegisters)
          acc[r][p] = a;
        else
          a.store(y + r * ldy + p * kLanes);
      }
  }
  if constexpr (kInRegisters) {
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p].store(y + r * ldy + p * kLanes);
  }
}

/// Rows of a prefill (large-M) tile. With 32 vector registers (AVX-512): half the
/// float tiles' rows, so that the running sums fit in registers beside the
/// partial sums (7 x 2 panels: 14 partial sums). With 16 (AVX2, one panel of 2
/// ymm): all the float tile's rows, the running sums in y (read and written once
/// per sub-block). Halving there left 6 partial-sum chains, fewer than the 8 that
/// two fma pipes of latency 4 need: Q8_0 prefill ran at 58% of the FMA peak
/// against f32's 87% (Zen 3).
template <class V>
inline constexpr int kQuantLargeRows = kLargePanels<V> >= 2 ? std::max(1, kLargeRows<V> / 2) : kLargeRows<V>;

// Runtime (mr, np) -> the matching compiled tile (the shapes of dense_kernels.hpp's float tiles).
template <class T, class V, long kLda, int NP, int MR = max_tile_rows<V, kLda>(NP)>
inline void quant_tile_rows(int mr, const T* a, long lda, const T* c, long cstride, long kc, long sub, const T* D,
                            const T* N, long dstride, const T* xs, long ldxs, T* y, long ldy, bool first) {
  if constexpr (MR >= 1) {
    if (mr == MR) return quant_tile<T, V, MR, NP, kLda>(a, lda, c, cstride, kc, sub, D, N, dstride, xs, ldxs, y, ldy, first);
    return quant_tile_rows<T, V, kLda, NP, MR - 1>(mr, a, lda, c, cstride, kc, sub, D, N, dstride, xs, ldxs, y, ldy, first);
  }
}
template <class T, class V, long kLda, int NP = (kLda > 0 ? kLargePanels<V> : kMaxTilePanels)>
inline void quant_tile_any(int mr, int np, const T* a, long lda, const T* c, long cstride, long kc, long sub, const T* D,
                           const T* N, long dstride, const T* xs, long ldxs, T* y, long ldy, bool first) {
  if constexpr (NP >= 1) {
    if (np == NP) return quant_tile_rows<T, V, kLda, NP>(mr, a, lda, c, cstride, kc, sub, D, N, dstride, xs, ldxs, y, ldy, first);
    return quant_tile_any<T, V, kLda, NP - 1>(mr, np, a, lda, c, cstride, kc, sub, D, N, dstride, xs, ldxs, y, ldy, first);
  }
}

/// The per-thread buffers of the buffered paths: codes, scales, offsets for np panels x kQuantKc.
template <class T>
struct QuantBuffers {
  AlignedBuffer<T> c, D, N;
  void reserve(long np) {
    c.reserve(static_cast<std::size_t>(np) * kQuantKc * kLanes);
    D.reserve(static_cast<std::size_t>(np) * kQuantKc * kLanes / 16);  // sub >= 16
    N.reserve(static_cast<std::size_t>(np) * kQuantKc * kLanes / 16);
  }
};

/// Buffered small M: per column tile and k block of kQuantKc, the tile's panels
/// are factored into a per-thread buffer and every row tile runs quant_tile over
/// it, continuing each output's running sum where the last k block left it.
template <class T, class V>
void matmul_quant_small(const T* x, long ldx, long M, const T* xs, long ldxs, const QuantPanels& w, T* y, long ldy,
                        bool parallel, QuantDequant how) {
  const long K = w.n_in(), P = w.n_panels();
  const QuantFactoring f = quant_factoring(w.type());
  const long n_rtiles = M <= kLargeRows<V> ? 1 : (M + kSmallRows<V> - 1) / kSmallRows<V>;
  const int mr_max = static_cast<int>((M + n_rtiles - 1) / n_rtiles);
  const int np_max = small_panels<V>(mr_max);
  const long n_ctiles = (P + np_max - 1) / np_max;
#if defined(_OPENMP)
#pragma omp parallel if (parallel)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    static thread_local QuantBuffers<T> buf;
    buf.reserve(kMaxTilePanels);
    long c0, c1;
    split_range(n_ctiles, t, nt, c0, c1);
    for (long c = c0; c < c1; ++c) {
      const long p0 = c * np_max;
      const int np = static_cast<int>(std::min<long>(np_max, P - p0));
      for (long k0 = 0; k0 < K; k0 += kQuantKc) {
        const long kc = std::min(kQuantKc, K - k0);
        T* N = f.has_min ? buf.N.data() : nullptr;
        factor_panels(w, p0, np, k0, kc, buf.c.data(), buf.D.data(), N, how);
        for (long m0 = 0; m0 < M; m0 += mr_max) {
          const int mr = static_cast<int>(std::min<long>(mr_max, M - m0));
          quant_tile_any<T, V, 0>(mr, np, x + m0 * ldx + k0, ldx, static_cast<const T*>(buf.c.data()), kc * kLanes, kc,
                                  f.sub, static_cast<const T*>(buf.D.data()), static_cast<const T*>(N), kc / f.sub * kLanes,
                                  xs ? xs + m0 * ldxs + k0 / f.sub : nullptr, ldxs, y + m0 * ldy + p0 * kLanes, ldy, k0 == 0);
        }
      }
    }
  }
}

/// Buffered large M (prefill): dense_kernels.hpp's matmul_large blocking (k blocks of
/// kMatmulKc = kQuantKc, row blocks of up to kMatmulMc packed rows) with 7 x
/// 2-panel tiles (kQuantLargeRows), each k block of a panel tile factored into a per-thread
/// buffer once per row block.
template <class T, class V>
void matmul_quant_large(const T* x, long ldx, long M, const T* xs, long ldxs, const QuantPanels& w, T* y, long ldy,
                        bool parallel, QuantDequant how) {
  static_assert(kMatmulKc == kQuantKc, "the packed-row stride assumes k blocks of kMatmulKc");
  constexpr int MR = kQuantLargeRows<V>, NP = kLargePanels<V>;
  const long K = w.n_in(), P = w.n_panels();
  const QuantFactoring f = quant_factoring(w.type());
  const long n_ctiles = (P + NP - 1) / NP;
#if defined(_OPENMP)
#pragma omp parallel if (parallel)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    long c0 = 0, c1 = n_ctiles, m_begin = 0, m_end = M;
    if (M >= 4L * MR * nt || n_ctiles < 2L * nt)
      split_range(M, t, nt, m_begin, m_end);
    else
      split_range(n_ctiles, t, nt, c0, c1);
    T* xp = matmul_pack_buffer<T>();
    static thread_local QuantBuffers<T> buf;
    buf.reserve(NP);
    const long n_mblocks = (m_end - m_begin + kMatmulMc - 1) / kMatmulMc;
    for (long k0 = 0; k0 < K; k0 += kQuantKc) {
      const long kc = std::min(kQuantKc, K - k0);
      for (long ib = 0; ib < n_mblocks; ++ib) {
        long mb, me;
        split_range(m_end - m_begin, static_cast<int>(ib), static_cast<int>(n_mblocks), mb, me);
        mb += m_begin;
        me += m_begin;
        for (long r = mb; r < me; ++r) std::copy(x + r * ldx + k0, x + r * ldx + k0 + kc, xp + (r - mb) * kPackStride);
        const long n_rtiles = (me - mb + MR - 1) / MR;
        for (long c = c0; c < c1; ++c) {
          const long p0 = c * NP;
          const int np = static_cast<int>(std::min<long>(NP, P - p0));
          T* N = f.has_min ? buf.N.data() : nullptr;
          factor_panels(w, p0, np, k0, kc, buf.c.data(), buf.D.data(), N, how);
          for (long i = 0; i < n_rtiles; ++i) {
            long r0, r1;
            split_range(me - mb, static_cast<int>(i), static_cast<int>(n_rtiles), r0, r1);
            quant_tile_any<T, V, kPackStride>(static_cast<int>(r1 - r0), np, static_cast<const T*>(xp + r0 * kPackStride),
                                              kPackStride, static_cast<const T*>(buf.c.data()), kc * kLanes, kc, f.sub,
                                              static_cast<const T*>(buf.D.data()), static_cast<const T*>(N),
                                              kc / f.sub * kLanes, xs ? xs + (mb + r0) * ldxs + k0 / f.sub : nullptr, ldxs,
                                              y + (mb + r0) * ldy + p0 * kLanes, ldy, k0 == 0);
          }
        }
      }
    }
  }
}

/// Which path a quantized product takes (the tests force each one; all give the same bits).
enum class QuantPath { kAuto, kFused, kSmall, kLarge };

/// matmul_quant() with an explicit float vector V, dequantizer and path.
/// kFused needs AVX-512, AVX2 or NEON (`how` picks which, as for the decoders), T =
/// float and M <= kQuantFusedMaxM (else it falls back to kAuto).
template <class T, class V>
void matmul_quant_with(const T* x, long ldx, long M, const QuantPanels& w, T* y, long ldy,
                       QuantPath path = QuantPath::kAuto, QuantDequant how = kQuantDequantBest) {
  KVD_ASSERT(ldy >= w.n_out_padded() && ldx >= w.n_in());
  if (M <= 0) return;
  const bool parallel = M * w.n_out_padded() * w.n_in() >= kMatmulParallelThreshold;
  // The rows' sub-block sums, for the offsets of the types with a min (computed
  // once here, shared by every thread and tile).
  const QuantFactoring f = quant_factoring(w.type());
  const long ldxs = w.n_in() / f.sub;
  static thread_local AlignedBuffer<T> xs_buf;
  const T* xs = nullptr;
  if (f.has_min) {
    xs_buf.reserve(static_cast<std::size_t>(M * ldxs));
    sub_block_sums(x, ldx, M, w.n_in(), f.sub, xs_buf.data(), parallel);
    xs = xs_buf.data();
  }
  if constexpr (std::is_same_v<T, float>) {
    if ((path == QuantPath::kAuto || path == QuantPath::kFused) && M <= kQuantFusedMaxM) {
#if defined(KVDECODE_QUANT_FUSED)
      if (how == QuantDequant::kAvx512) return matmul_quant_fused<T>(x, ldx, M, xs, ldxs, w, y, ldy, parallel);
#endif
#if defined(KVDECODE_QUANT_FUSED_AVX2)
      if (how != QuantDequant::kPortable) return matmul_quant_fused_avx2<T>(x, ldx, M, xs, ldxs, w, y, ldy, parallel);
#endif
#if defined(KVDECODE_QUANT_FUSED_NEON)
      if (how != QuantDequant::kPortable) return matmul_quant_fused_neon<T>(x, ldx, M, xs, ldxs, w, y, ldy, parallel);
#endif
    }
  }
  if (path == QuantPath::kSmall || ((path == QuantPath::kAuto || path == QuantPath::kFused) && M <= kSmallMaxM<V>))
    return matmul_quant_small<T, V>(x, ldx, M, xs, ldxs, w, y, ldy, parallel, how);
  matmul_quant_large<T, V>(x, ldx, M, xs, ldxs, w, y, ldy, parallel, how);
}

template <class T, class V>
void matmul_quant_panels(const T* x, long ldx, long M, const QuantPanels& w, T* y, long ldy) {
  matmul_quant_with<T, V>(x, ldx, M, w, y, ldy);
}

}  // namespace kvd::detail
