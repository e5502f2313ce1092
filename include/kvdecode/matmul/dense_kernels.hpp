// Matrix-product kernels that give the same bits for an output element
// whatever the number of rows processed together, the tiling and the thread
// count. They are what makes prefill, decode, chunked prefill and batched
// decode bit-identical.
//
// THE REDUCTION-ORDER RULE (every kernel in kvdecode obeys it):
//   y[m][n] = fma(x[m][K-1], W[n][K-1], ... fma(x[m][1], W[n][1], fma(x[m][0], W[n][0], 0)) ...)
// i.e. one accumulator per output element, starting from +0, updated by one
// fused multiply-add per k in increasing k. Vectors hold 16 *different output
// columns*, never 16 parts of one sum, so the vector width changes nothing.
// Tiling over rows (MR) and columns (NP panels) only changes which outputs are
// computed together; blocking over k (KC) stores the running accumulator to
// memory and reloads it, which is exact whatever the block length. Copying
// input rows into a packed buffer is exact. Threads split output columns or
// rows, never k. Hence the result of a row depends only on that row's inputs,
// and every tile shape, block size and thread split below is free to depend on
// M (the tests compare every path with a plain scalar loop, bit for bit).
//
// Weights are packed once, at load time, into panels of 16 output columns:
//   panel p, element (k, j) = W[16p + j][k]      (K x 16, k-major)
// so the kernel streams each weight byte exactly once per call, contiguously.
//
// Two paths, chosen by M (rows):
//  * small M (decode, batched decode; M <= 16 for float on AVX-512): one
//    register tile holds all the rows (up to 3 rows x 8 panels, ..., 8 x 3,
//    14 x 2) and runs over the whole of k, so the weights are read once, from
//    memory, for all rows; 15 or 16 rows take two tiles that share each k
//    block of weights through L1. Each thread takes a contiguous range of
//    panels and prefetches 4 KiB ahead in each panel stream. Nothing is
//    allocated.
//  * large M (prefill): GotoBLAS-style blocking with a 14 x 2-panel register
//    tile (28 of the 32 zmm registers accumulate; 95% of the FMA peak when its
//    operands are in L1) and k blocks of 256. Up to 512 rows at a time are
//    packed once into a buffer the threads share; the threads then take
//    chunks of (up to 256 rows) x (128 to 512 columns) dynamically, each over
//    the whole of k.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/profile.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/matmul/packed_matrix.hpp"

namespace kvd {

namespace detail {
/// 16 packed weights of element type W at p, as a vector of the compute type.
/// Every conversion is exact, so the fma chain sees the stored values themselves.
template <class V, class W, class T>
inline V load_weights(const W* p) {
  if constexpr (std::is_same_v<W, T>) return V::load(p);
  else if constexpr (std::is_same_v<W, F16Bits>) return V::load_f16(reinterpret_cast<const std::uint16_t*>(p));
  else return V::load_bf16(reinterpret_cast<const std::uint16_t*>(p));
}

#define KVD_PRAGMA_(x) _Pragma(#x)
#if defined(__clang__)
#define KVD_UNROLL(n) KVD_PRAGMA_(unroll n)
#elif defined(__GNUC__)
#define KVD_UNROLL(n) KVD_PRAGMA_(GCC unroll n)
#else
#define KVD_UNROLL(n)
#endif

// ---- Tile shapes -----------------------------------------------------------
// A register tile is MR rows x NP panels: MR * NP accumulators that stay in
// registers for a whole run over k. Which tile computes an output never
// changes that output's fma chain, so shapes are chosen freely by M and by the
// vector implementation V (Vec16<T>, or a narrower one in the tests).

/// Most panels per tile: 8 panels (128 columns), 8 weight streams.
inline constexpr int kMaxTilePanels = 8;

/// Large-M tile (prefill): kLargeRows x kLargePanels, 14 x 2 for float on AVX-512.
template <class V>
inline constexpr int kLargePanels = V::kLargeAccumulators >= 8 ? 2 : 1;
template <class V>
inline constexpr int kLargeRows = V::kLargeAccumulators / kLargePanels<V>;

/// Small-M tiles (decode, batched decode): up to kSmallRows rows with as many
/// panels as fit (M = 1: 8 panels; dense weights 4), or up to kLargeRows rows with kLargePanels.
template <class V>
inline constexpr int kSmallRows = V::kAccumulators >= 3 ? V::kAccumulators / 3 : 1;
/// The small-M path serves M <= kSmallMaxM (16 for float on AVX-512): one row
/// tile up to kLargeRows rows, else two.
template <class V>
inline constexpr long kSmallMaxM = std::max(2L * kSmallRows<V>, static_cast<long>(kLargeRows<V>));
/// Panels per tile for a small-M row tile of mr rows.
template <class V>
constexpr int small_panels(int mr) {
  return mr <= kSmallRows<V> ? std::min(kMaxTilePanels, std::max(1, V::kAccumulators / mr)) : kLargePanels<V>;
}

/// Panels of a dense (f32, f16, bf16 weights) small-M tile: at M = 1, 4 weight
/// streams per tile rather than small_panels()' 8. One Zen 4 core, M = 1, f16
/// weights, GB/s: 39 -> 53 in L2 (512 x 1024; 36 -> 54 for -march=x86-64-v3); two
/// threads over 12 matrices of 5632 x 2048 (264 MiB), alternated: 37-39 -> 48-49,
/// 27-37 -> 31-48, f32 41-45 -> 46-50. M = 2 to 8 keep small_panels() (4 panels
/// at M = 2 measured level in L2 and up to 20% slower from memory).
template <class V>
constexpr int dense_small_panels(int mr) {
  return mr == 1 ? std::min(4, V::kAccumulators) : small_panels<V>(mr);
}

/// Small-M tiles that stream weights from memory prefetch each panel this many
/// bytes ahead (4 KiB per stream, 64 k of float; measured better than 1 or 16 KiB).
inline constexpr std::size_t kPrefetchBytes = 4096;
/// k block of the small-M path when it has more than one row tile.
inline constexpr long kSmallKc = 128;

/// Large-M cache blocks: a KC x (2 panels) weight tile (32 KiB of float) stays
/// in L1 while the row tiles of an MC x KC block of packed inputs (in L2) pass over it.
inline constexpr long kMatmulKc = 256;
inline constexpr long kMatmulMc = 384;
/// Row stride of packed input rows: KC plus one cache line, so that the rows of
/// a tile do not all fall in the same cache sets.
inline constexpr long kPackStride = kMatmulKc + 16;
/// Below this many multiply-adds a product runs on one thread (the result is the same either way).
inline constexpr std::int64_t kMatmulParallelThreshold = 1 << 18;

// ---- Micro-kernel ----------------------------------------------------------

/// One register tile: MR rows x NP panels over k in [0, kc). Input row r at k
/// is a[r * lda + k], with lda = kLda when kLda > 0 (packed rows: with a
/// compile-time stride one base register serves every row). Panel p at k is
/// b[p * bstride + 16 k .. +16).
/// `first` starts every accumulator at +0, otherwise at the value in y: a k
/// block continues the same fma chain exactly where the previous one stored it.
template <class T, class V, class W, int MR, int NP, long kLda, bool kPrefetch = false>
inline void matmul_tile(const T* a, long lda, const W* b, long bstride, long kc, T* y, long ldy, bool first) {
  if constexpr (kLda > 0) lda = kLda;
  V acc[MR][NP];
  if (first) {
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p] = V::zero();
  } else {
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p] = V::load(y + r * ldy + p * kLanes);
  }
  for (long k = 0; k < kc; ++k) {
    V bv[NP];
    KVD_UNROLL(8) for (int p = 0; p < NP; ++p) bv[p] = load_weights<V, W, T>(b + p * bstride + k * kLanes);
    if constexpr (kPrefetch) {
      // (may point past the end of the weights: a prefetch never faults)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) prefetch_read_at(b + p * bstride + k * kLanes, kPrefetchBytes);
    }
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r) {
      const V av = V::broadcast(a[r * lda + k]);
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p].fma(av, bv[p]);
    }
  }
  KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p].store(y + r * ldy + p * kLanes);
}

/// Most rows of a tile with np panels: large-M (packed, kLda > 0) or small-M (kLda = 0).
template <class V, long kLda>
constexpr int max_tile_rows(int np) {
  if (kLda > 0 || np <= kLargePanels<V>) return std::min(kLargeRows<V>, V::kLargeAccumulators / np);
  return std::min(kSmallRows<V>, V::kAccumulators / np);
}

// Runtime (mr, np) -> the matching compiled tile. Only shapes that fit the
// register budget exist; callers never ask for others.
template <class T, class V, class W, long kLda, int NP, int MR = max_tile_rows<V, kLda>(NP)>
inline void matmul_tile_rows(int mr, const T* a, long lda, const W* b, long bstride, long kc, T* y, long ldy,
                             bool first, bool prefetch) {
  if constexpr (MR >= 1) {
    if (mr == MR) {
      if (kLda == 0 && prefetch) return matmul_tile<T, V, W, MR, NP, kLda, true>(a, lda, b, bstride, kc, y, ldy, first);
      return matmul_tile<T, V, W, MR, NP, kLda>(a, lda, b, bstride, kc, y, ldy, first);
    }
    return matmul_tile_rows<T, V, W, kLda, NP, MR - 1>(mr, a, lda, b, bstride, kc, y, ldy, first, prefetch);
  }
}

template <class T, class V, class W, long kLda, int NP = (kLda > 0 ? kLargePanels<V> : kMaxTilePanels)>
inline void matmul_tile_any(int mr, int np, const T* a, long lda, const W* b, long bstride, long kc, T* y, long ldy,
                            bool first, bool prefetch = false) {
  if constexpr (NP >= 1) {
    if (np == NP) return matmul_tile_rows<T, V, W, kLda, NP>(mr, a, lda, b, bstride, kc, y, ldy, first, prefetch);
    return matmul_tile_any<T, V, W, kLda, NP - 1>(mr, np, a, lda, b, bstride, kc, y, ldy, first, prefetch);
  }
}

/// The panels of one segment as the kernels see them: P panels of K x 16 elements of W.
template <class W>
struct PanelRange {
  const W* data = nullptr;  // panel p starts at data + p * K * 16
  long n_panels = 0, K = 0;
  const W* panel(long p) const { return data + p * K * kLanes; }
};

/// Small M (decode, batched decode): no packing, nothing allocated. Each thread
/// takes a contiguous range of column tiles, so the threads stream disjoint
/// contiguous parts of the packed weights, each byte once from memory; a second
/// row tile, if any, rereads each k block of weights from L1.
template <class T, class V, class W>
void matmul_small(const T* x, long ldx, long M, const PanelRange<W>& w, T* y, long ldy, bool parallel) {
  const long K = w.K, P = w.n_panels, bstride = K * kLanes;
  const long n_rtiles = M <= kLargeRows<V> ? 1 : (M + kSmallRows<V> - 1) / kSmallRows<V>;
  const int mr_max = static_cast<int>((M + n_rtiles - 1) / n_rtiles);
  const int np_max = dense_small_panels<V>(mr_max);
  const long n_ctiles = (P + np_max - 1) / np_max;
  // One row tile streams the weights once, over all of k. Several row tiles
  // take k in blocks, so that each block of weights is still in L1 when the
  // next row tile reads it.
  const long kc_max = n_rtiles == 1 ? K : kSmallKc;
  parallel_parts(n_ctiles, parallel, [&](long c0, long c1) {
    for (long c = c0; c < c1; ++c) {
      const long p0 = c * np_max;
      const int np = static_cast<int>(std::min<long>(np_max, P - p0));
      for (long k0 = 0; k0 < K; k0 += kc_max) {
        const long kc = std::min(kc_max, K - k0);
        for (long m0 = 0; m0 < M; m0 += mr_max) {
          const int mr = static_cast<int>(std::min<long>(mr_max, M - m0));
          matmul_tile_any<T, V, W, 0>(mr, np, x + m0 * ldx + k0, ldx, w.panel(p0) + k0 * kLanes, bstride, kc,
                                      y + m0 * ldy + p0 * kLanes, ldy, k0 == 0, m0 == 0);
        }
      }
    }
  });
}

/// Per-thread scratch for packed input rows, allocated once per thread at its
/// fixed size (kMatmulMc rows of kPackStride) and reused by every later call.
template <class T>
inline T* matmul_pack_buffer() {
  static thread_local AlignedBuffer<T> buf(static_cast<std::size_t>(kMatmulMc) * kPackStride);
  return buf.data();
}

/// Large-M work split (prefill): up to kMatmulSuperRows rows at a time are
/// packed once, by all threads together, into a buffer they share; the product
/// of those rows is then cut into chunks of (up to kMatmulChunkRows rows) x
/// (chunk_panels panels, see below) that the threads take dynamically. A chunk
/// computes its outputs over the whole of k, so each output's chain is whole,
/// whichever thread took it.
/// A chunk's column block is as wide as leaves about kMatmulChunksPerThread
/// chunks per thread, within [kMatmulChunkPanels, kMatmulChunkMaxPanels] panels
/// (even): wide chunks reuse each packed row block from L2 across more weight
/// tiles, many chunks keep the threads balanced.
inline constexpr long kMatmulSuperRows = 512;
inline constexpr long kMatmulChunkRows = 256;
inline constexpr long kMatmulChunkPanels = 8;
inline constexpr long kMatmulChunkMaxPanels = 32;
inline constexpr long kMatmulChunksPerThread = 8;

/// The shared packed-row buffer of the calling thread (grown on demand, never shrunk):
/// n_kb k blocks x `rows` rows x kPackStride.
template <class T>
inline T* matmul_shared_pack_buffer(std::size_t n) {
  static thread_local AlignedBuffer<T> buf;
  buf.reserve(n);
  return buf.data();
}

/// Large M (prefill). For each super-block of up to kMatmulSuperRows rows:
///  1. the threads run the caller's RowPrologue on its rows, if any, and copy
///     them into the shared packed buffer (exact copies):
///     k block kb of row r at xp[(kb * rows + r) * kPackStride], so the rows of a
///     tile sit at a fixed stride that spreads them over the cache sets;
///  2. the threads take chunks dynamically (a thread the OS delays does not hold
///     the other up). Chunks run column block by column block, their row blocks
///     next to each other, so the threads read the same weights at the same time
///     (from memory once, through the shared L3). Inside a chunk, for each k block
///     (kMatmulKc), each KC x (kLargePanels panels) weight slice (in L1) meets the
///     chunk's row tiles in turn; row tiles have balanced sizes (13 and 14 rather
///     than 14 and a small remainder).
/// Every output's chain runs over k in order within one chunk, on one thread.
template <class T, class V, class W>
void matmul_large(const T* x, long ldx, long M, const PanelRange<W>& w, T* y, long ldy, bool parallel,
                  const RowPrologue& pre = RowPrologue()) {
  constexpr int MR = kLargeRows<V>, NP = kLargePanels<V>;
  const long K = w.K, P = w.n_panels, bstride = K * kLanes;
  const long n_kb = (K + kMatmulKc - 1) / kMatmulKc;
  const long rblocks_max = (std::min(M, kMatmulSuperRows) + kMatmulChunkRows - 1) / kMatmulChunkRows;
  const long chunk_panels =
      std::clamp(P * rblocks_max / (kMatmulChunksPerThread * (parallel ? num_threads() : 1)) / 2 * 2, kMatmulChunkPanels,
                 kMatmulChunkMaxPanels);
  const long n_cblocks = (P + chunk_panels - 1) / chunk_panels;
  T* const xp = matmul_shared_pack_buffer<T>(static_cast<std::size_t>(std::min(M, kMatmulSuperRows) * n_kb * kPackStride));
  PhaseTimes* const prof = phase_profile();
#if defined(_OPENMP)
#pragma omp parallel if (parallel)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    double pre_s = 0, pack_s = 0, wait_s = 0;
    for (long s0 = 0; s0 < M; s0 += kMatmulSuperRows) {
      const long sm = std::min(kMatmulSuperRows, M - s0);
      {  // 1. prepare (the caller's prologue) and pack this thread's share of the rows
        const double tp = prof ? profile_now() : 0;
        long r0, r1;
        split_range(sm, t, nt, r0, r1);
        if (pre && r1 > r0) pre(s0 + r0, s0 + r1);
        const double tq = prof ? profile_now() : 0;
        if (prof) pre_s += tq - tp;
        for (long r = r0; r < r1; ++r)
          for (long kb = 0; kb < n_kb; ++kb) {
            const long k0 = kb * kMatmulKc, kc = std::min(kMatmulKc, K - k0);
            const T* src = x + (s0 + r) * ldx + k0;
            std::copy(src, src + kc, xp + (kb * sm + r) * kPackStride);
          }
        if (prof) pack_s += profile_now() - tq;
        const double tw = prof ? profile_now() : 0;
#if defined(_OPENMP)
#pragma omp barrier
#endif
        if (prof) wait_s += profile_now() - tw;
      }
      // 2. the chunks
      const long n_rblocks = (sm + kMatmulChunkRows - 1) / kMatmulChunkRows;
      const long n_chunks = n_rblocks * n_cblocks;
#if defined(_OPENMP)
#pragma omp for schedule(dynamic, 1) nowait
#endif
      for (long ch = 0; ch < n_chunks; ++ch) {
        const long cb = ch / n_rblocks, rb = ch % n_rblocks;
        long mb, me;
        split_range(sm, static_cast<int>(rb), static_cast<int>(n_rblocks), mb, me);
        const long pc0 = cb * chunk_panels, pc1 = std::min(P, pc0 + chunk_panels);
        const long n_rtiles = (me - mb + MR - 1) / MR;
        auto rows_of = [&](long i, long& r0, long& r1) {
          split_range(me - mb, static_cast<int>(i), static_cast<int>(n_rtiles), r0, r1);
        };
        T* const yc = y + (s0 + mb) * ldy;
        for (long kb = 0; kb < n_kb; ++kb) {
          const long k0 = kb * kMatmulKc, kc = std::min(kMatmulKc, K - k0);
          const T* const xa = xp + (kb * sm + mb) * kPackStride;
          for (long p0 = pc0; p0 < pc1; p0 += NP) {
            const int np = static_cast<int>(std::min<long>(NP, pc1 - p0));
            const W* b = w.panel(p0) + k0 * kLanes;
            // The weight slice that comes next: the chunk's next panel tile, or its
            // first one in the next k block.
            long pn = p0 + NP, kn = k0;
            if (pn >= pc1) pn = pc0, kn = k0 + kMatmulKc;
            const bool next = kn < K;
            const long npn = std::min<long>(NP, pc1 - pn), kcn = next ? std::min(kMatmulKc, K - kn) : 0;
            for (long i = 0; i < n_rtiles; ++i) {
              long r0, r1;
              rows_of(i, r0, r1);
              // Cache hints (they never change a result): the output tile the next
              // row tile reloads (after the first k block), and a share of the next
              // weight slice, into L2.
              if (k0 > 0 && i + 1 < n_rtiles) {
                long q0, q1;
                rows_of(i + 1, q0, q1);
                for (long q = q0; q < q1; ++q)
                  for (long j = p0; j < p0 + np; ++j) prefetch_read(yc + q * ldy + j * kLanes);
              }
              if (next) {
                const long lines = npn * kcn, l1 = lines * (i + 1) / n_rtiles;
                const W* bn = w.panel(pn) + kn * kLanes;
                for (long l = lines * i / n_rtiles; l < l1; ++l) prefetch_l2(bn + (l % npn) * bstride + (l / npn) * kLanes);
              }
              matmul_tile_any<T, V, W, kPackStride>(static_cast<int>(r1 - r0), np, xa + r0 * kPackStride, kPackStride, b,
                                                    bstride, kc, yc + r0 * ldy + p0 * kLanes, ldy, k0 == 0);
            }
          }
        }
      }
      // Everyone is done with this super-block before its buffer is packed again
      // (the region's own end waits after the last one, unless profiling times it here).
      if (s0 + kMatmulSuperRows < M || prof) {
        const double tw = prof ? profile_now() : 0;
#if defined(_OPENMP)
#pragma omp barrier
#endif
        if (prof) wait_s += profile_now() - tw;
      }
    }
    if (prof) {
#if defined(_OPENMP)
#pragma omp critical(kvd_profile)
#endif
      {
        prof->prologue_thread_seconds += pre_s;
        prof->pack_thread_seconds += pack_s;
        prof->wait_thread_seconds += wait_s;
      }
    }
  }
}

/// One segment's product with an explicit vector implementation V and packed
/// element type W: y[:, 0 .. 16 * w.n_panels) for the segment's panels.
/// Runs pre on rows [0, M) of a K-wide input, split over threads when large enough.
inline void run_prologue(const RowPrologue& pre, long M, long K) {
  if (!pre || M <= 0) return;
#if defined(_OPENMP)
#pragma omp parallel if (M * std::max(K, 1L) >= kParallelElements)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    long r0, r1;
    split_range(M, t, nt, r0, r1);
    if (r1 > r0) pre(r0, r1);
  }
}

/// `pre` (optional) prepares the input rows first (see RowPrologue).
template <class T, class V, class W>
void matmul_panels(const T* x, long ldx, long M, const PanelRange<W>& w, T* y, long ldy, const RowPrologue& pre) {
  const long K = w.K;
  if (M <= 0) return;
  if (K == 0) {
    run_prologue(pre, M, K);
    for (long m = 0; m < M; ++m) std::fill(y + m * ldy, y + m * ldy + w.n_panels * kLanes, T(0));
    return;
  }
  const bool parallel = M * w.n_panels * kLanes * K >= kMatmulParallelThreshold;
  if (M <= kSmallMaxM<V>) {
    run_prologue(pre, M, K);
    matmul_small<T, V, W>(x, ldx, M, w, y, ldy, parallel);
  } else {
    matmul_large<T, V, W>(x, ldx, M, w, y, ldy, parallel, pre);
  }
}

}  // namespace detail
}  // namespace kvd
