// The fused small-M paths of quantized products (decode, M <= kQuantFusedMaxM):
// register tiles that decode each k's codes in registers from the streamed panel
// blocks (AVX-512: up to 8 rows x 4 panels; AVX2: up to 8 rows x 4 half panels,
// shapes per decoder; NEON: up to 8 rows x 8 quarter panels) and run the factored order of quant_kernels.hpp. They give
// the same bits as the buffered paths (tests/quant_matrix_test.cpp compares every
// path). matmul_quant_with() (quant_kernels.hpp) picks them; the block type is
// looked up once per product, outside the tiles.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/matmul/dense_kernels.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/matmul/quant_decode_avx2.hpp"
#include "kvdecode/matmul/quant_decode_avx512.hpp"
#include "kvdecode/matmul/quant_decode_neon.hpp"
#include "kvdecode/matmul/static_for.hpp"

namespace kvd::detail {

/// Most rows of the fused small-M paths.
inline constexpr long kQuantFusedMaxM = 8;

/// The fused tiles' input: x (M rows, stride ldx, K values) split into row tiles of
/// mr_max rows (the last may be shorter), each tile's rows interleaved:
/// out[m0 * K + k * mr + r] = x[m0 + r][k] for the tile of mr rows starting at m0.
/// A broadcast of row r at k is then one base register plus a constant; with one
/// pointer per row, GCC kept each of a tile's MR x 32 addresses in a stack slot and
/// loaded it before its broadcast (AVX2 q8_0, 5 rows: 18 against 36 G multiply-adds/s
/// per core in L2). M = 1 needs no copy and returns x. Otherwise the copy goes to a
/// per-thread buffer, allocated at its first use on the calling thread, and stays
/// valid until that thread's next call.
inline const float* interleave_tile_rows(const float* x, long ldx, long M, long K, long mr_max) {
  if (M == 1) return x;
  static thread_local AlignedBuffer<float> buf;
  buf.reserve(static_cast<std::size_t>(M * K));
  for (long m0 = 0; m0 < M; m0 += mr_max) {
    const long mr = std::min(mr_max, M - m0);
    float* dst = buf.data() + m0 * K;
    for (long r = 0; r < mr; ++r)
      for (long k = 0; k < K; ++k) dst[k * mr + r] = x[(m0 + r) * ldx + k];
  }
  return buf.data();
}

#if defined(KVDECODE_QUANT_AVX512)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports its own intrinsics' undefined-source idiom as maybe-uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// The fused small-M kernels: 23 register tiles per block type, each unrolled over
// a sub-block. Sanitized builds (KVDECODE_NO_FUSED_QUANT, set by the project's
// ASan and fuzz builds) leave them out, because instrumenting them takes longer
// than the rest of the build (over 12 minutes for this file with GCC
// -fsanitize=address,undefined); products then take the buffered path, which
// gives the same bits (tests/quant_matrix_test.cpp compares every path).
#if defined(KVDECODE_QUANT_FUSED)
/// Small-M register tile (AVX-512, float): MR rows x NP panels over all of k,
/// the codes decoded in registers, in the factored order (top of quant_kernels.hpp).
/// xp = the MR rows interleaved, xp[k * MR + r] = x[r][k] (interleave_tile_rows()).
/// xs (MR x K / kSub, row stride ldxs) = the rows' sub-block sums (types with a min).
/// y rows get all 16 NP columns.
template <class Dec, int MR, int NP>
inline void quant_tile_fused(const float* xp, const float* xs, long ldxs, const QuantPanels& w, long p0, float* y,
                             long ldy) {
  // The running sums stay in registers when they fit beside the sub-block sums,
  // else in y (read and written once per sub-block; exact either way).
  constexpr bool kInRegisters = 2 * MR * NP + 3 * NP + 2 <= 32;
  __m512 acc[kInRegisters ? MR : 1][kInRegisters ? NP : 1];
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(4) for (int p = 0; p < NP; ++p) {
      if constexpr (kInRegisters)
        acc[r][p] = _mm512_setzero_ps();
      else
        _mm512_storeu_ps(y + r * ldy + (p0 + p) * kLanes, _mm512_setzero_ps());
    }
  const long nb = w.n_blocks();
  const std::size_t pbb = w.panel_block_bytes();
  constexpr int kSubs = Dec::kBlock / Dec::kSub;
  for (long b = 0; b < nb; ++b) {
    const unsigned char* pb[NP];
    KVD_UNROLL(4) for (int p = 0; p < NP; ++p) pb[p] = w.panel_block(p0 + p, b);
    for (int s = 0; s < kSubs; ++s) {
      const float* xk = xp + (b * Dec::kBlock + s * Dec::kSub) * MR;
      Dec dec[NP];
      KVD_UNROLL(4) for (int p = 0; p < NP; ++p) {
        dec[p].begin(pb[p], s);
        // Two blocks ahead in each panel stream, a share per sub-block (never faults).
        const std::size_t line0 = pbb * s / kSubs / 64, line1 = (pbb * (s + 1) / kSubs + 63) / 64;
        for (std::size_t l = line0; l < line1; ++l) prefetch_read_at(pb[p], 2 * pbb + 64 * l);
      }
      __m512 t[MR][NP];
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(4) for (int p = 0; p < NP; ++p) t[r][p] = _mm512_setzero_ps();
      static_for<Dec::kSub>([&](auto kk) KVD_ALWAYS_INLINE {
        __m512 cv[NP];
        KVD_UNROLL(4) for (int p = 0; p < NP; ++p) cv[p] = dec[p].template code<kk>();
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
          const __m512 xv = _mm512_set1_ps(xk[kk * MR + r]);
          KVD_UNROLL(4) for (int p = 0; p < NP; ++p) t[r][p] = _mm512_fmadd_ps(xv, cv[p], t[r][p]);
        }
      });
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
        const __m512 xsv = Dec::kMin ? _mm512_set1_ps(xs[r * ldxs + b * kSubs + s]) : _mm512_setzero_ps();
        KVD_UNROLL(4) for (int p = 0; p < NP; ++p) {
          float* yp = y + r * ldy + (p0 + p) * kLanes;
          __m512 a;
          if constexpr (kInRegisters)
            a = acc[r][p];
          else
            a = _mm512_loadu_ps(yp);
          a = _mm512_fmadd_ps(t[r][p], dec[p].D, a);
          if constexpr (Dec::kMin) a = _mm512_fmadd_ps(xsv, dec[p].N, a);
          if constexpr (kInRegisters)
            acc[r][p] = a;
          else
            _mm512_storeu_ps(yp, a);
        }
      }
    }
  }
  if constexpr (kInRegisters) {
    KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(4) for (int p = 0; p < NP; ++p) _mm512_storeu_ps(y + r * ldy + (p0 + p) * kLanes, acc[r][p]);
  }
}

/// Panels per fused tile for m rows (register budget: m * NP partial sums, NP codes, 2 NP scale vectors;
/// 5 to 8 rows take one panel, which keeps the running sums in registers: 15-25% faster at M = 8
/// than two panels with them in y).
constexpr int quant_fused_panels(int m) { return m <= 3 ? 4 : m == 4 ? 3 : 1; }

template <class Dec, int MR, int NP = quant_fused_panels(MR)>
inline void quant_tile_fused_np(int np, const float* xp, const float* xs, long ldxs, const QuantPanels& w, long p0,
                                float* y, long ldy) {
  if constexpr (NP >= 1) {
    if (np == NP) return quant_tile_fused<Dec, MR, NP>(xp, xs, ldxs, w, p0, y, ldy);
    return quant_tile_fused_np<Dec, MR, NP - 1>(np, xp, xs, ldxs, w, p0, y, ldy);
  }
}

template <class Dec, int MR = static_cast<int>(kQuantFusedMaxM)>
inline void quant_tile_fused_any(int mr, int np, const float* xp, const float* xs, long ldxs, const QuantPanels& w,
                                 long p0, float* y, long ldy) {
  if constexpr (MR >= 1) {
    if (mr == MR) return quant_tile_fused_np<Dec, MR>(np, xp, xs, ldxs, w, p0, y, ldy);
    return quant_tile_fused_any<Dec, MR - 1>(mr, np, xp, xs, ldxs, w, p0, y, ldy);
  }
}

/// Small M (<= kQuantFusedMaxM), AVX-512: one row tile; threads take contiguous ranges of column tiles.
/// A template (T = float only) so that its tiles are instantiated where matmul_quant_with
/// is, once in the kernel-instance library, not in every file that includes this header.
template <class T>
void matmul_quant_fused(const T* x, long ldx, long M, const T* xs, long ldxs, const QuantPanels& w, T* y, long ldy,
                        bool parallel) {
  static_assert(std::is_same_v<T, float>, "the fused tiles are float-only");
  const int mr = static_cast<int>(M);
  const int np_max = quant_fused_panels(mr);
  const long P = w.n_panels(), n_ctiles = (P + np_max - 1) / np_max;
  const float* xp = interleave_tile_rows(x, ldx, M, w.n_in(), M);
  with_decoder(w.type(), [&](auto dec) {
    using Dec = decltype(dec);
    parallel_parts(n_ctiles, parallel, [&](long c0, long c1) {
      for (long c = c0; c < c1; ++c) {
        const long p0 = c * np_max;
        const int np = static_cast<int>(std::min<long>(np_max, P - p0));
        quant_tile_fused_any<Dec>(mr, np, xp, xs, ldxs, w, p0, y, ldy);
      }
    });
  });
}
#endif  // fused tiles
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // AVX-512

#if defined(KVDECODE_QUANT_AVX2)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#if defined(KVDECODE_QUANT_FUSED_AVX2)
/// Small-M register tile (AVX2, float): MR rows x NH half panels (8 outputs each,
/// half panel i = lanes 8 (i % 2) .. of panel i / 2) over all of k, the codes
/// decoded in registers, in the factored order (top of quant_kernels.hpp). The running
/// sums live in y (read and written once per sub-block), the sub-block's partial
/// sums in registers: MR NH of them, beside the NH code vectors and one broadcast.
/// xp = the MR rows interleaved, xp[k * MR + r] = x[r][k] (interleave_tile_rows()).
/// xs (MR x K / kSub, row stride ldxs) = the rows' sub-block sums (types with a min).
template <class Dec, int MR, int NH>
inline void quant_tile_fused_avx2(const float* xp, const float* xs, long ldxs, const QuantPanels& w, long h0, float* y,
                                  long ldy) {
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(8) for (int i = 0; i < NH; ++i) _mm256_storeu_ps(y + r * ldy + (h0 + i) * 8, _mm256_setzero_ps());
  const long nb = w.n_blocks();
  const std::size_t pbb = w.panel_block_bytes();
  constexpr int kSubs = Dec::kBlock / Dec::kSub;
  for (long b = 0; b < nb; ++b) {
    const unsigned char* pb[NH];
    KVD_UNROLL(8) for (int i = 0; i < NH; ++i) pb[i] = w.panel_block((h0 + i) / 2, b);
    for (int s = 0; s < kSubs; ++s) {
      const float* xk = xp + (b * Dec::kBlock + s * Dec::kSub) * MR;
      Dec dec[NH];
      KVD_UNROLL(8) for (int i = 0; i < NH; ++i) {
        dec[i].begin(pb[i], s, static_cast<int>((h0 + i) % 2));
        prefetch_half_panel_share(pb[i], pbb, s, kSubs, (h0 + i) % 2);
      }
      __m256 t[MR][NH];
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(8) for (int i = 0; i < NH; ++i) t[r][i] = _mm256_setzero_ps();
      static_for<Dec::kSub>([&](auto kk) KVD_ALWAYS_INLINE {
        __m256 cv[NH];
        KVD_UNROLL(8) for (int i = 0; i < NH; ++i) cv[i] = dec[i].template code<kk>();
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
          const __m256 xb = _mm256_broadcast_ss(xk + kk * MR + r);
          KVD_UNROLL(8) for (int i = 0; i < NH; ++i) t[r][i] = _mm256_fmadd_ps(xb, cv[i], t[r][i]);
        }
      });
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
        KVD_UNROLL(8) for (int i = 0; i < NH; ++i) {
          float* yp = y + r * ldy + (h0 + i) * 8;
          __m256 a = _mm256_fmadd_ps(t[r][i], dec[i].D, _mm256_loadu_ps(yp));
          if constexpr (Dec::kMin) a = _mm256_fmadd_ps(_mm256_broadcast_ss(xs + r * ldxs + b * kSubs + s), dec[i].N, a);
          _mm256_storeu_ps(yp, a);
        }
      }
    }
  }
}

/// The AVX2 fused tiles' shapes (16 ymm registers: MR NH partial sums, NH code
/// vectors, a broadcast, the decoders' constants and, for a heavy decoder, one
/// code word per half panel). Measured per core in L2 (2048-long rows, Zen 3,
/// interleaved rows), best of NH = 1, 2, 4 (G multiply-adds/s): light decoders
/// take 4 half panels for 1 or 2 rows and 2 for 3 to 6 (q8_0: 3 rows 28.9, 4
/// rows 33.6, 5 rows 35.5, 6 rows 37.5); 7 or 8 rows are split into two tiles
/// (two 4 x 2 tiles 33.6 against 33.4 for one 8 x 1). Heavy decoders take 2 half
/// panels up to 5 rows (3 rows: 16.5-22.7 against 14.5-17.4 with one; 5 rows:
/// 19.9-27.3 against 19.2-23.2) and 1 for 6 to 8, with up to 8 rows per tile
/// (q5_K 8 x 1: 28.1).
template <class Dec>
constexpr int quant_fused_rows_avx2(int m) { return Dec::kHeavy || m <= 6 ? m : (m + 1) / 2; }
template <class Dec>
constexpr int quant_fused_halves_avx2(int mr) {
  if constexpr (Dec::kHeavy) return mr <= 5 ? 2 : 1;
  return mr <= 2 ? 4 : 2;
}

template <class Dec, int MR, int NH = quant_fused_halves_avx2<Dec>(MR)>
inline void quant_tile_fused_avx2_nh(int nh, const float* xp, const float* xs, long ldxs, const QuantPanels& w, long h0,
                                     float* y, long ldy) {
  if constexpr (NH >= 1) {
    if (nh == NH) return quant_tile_fused_avx2<Dec, MR, NH>(xp, xs, ldxs, w, h0, y, ldy);
    return quant_tile_fused_avx2_nh<Dec, MR, NH - 1>(nh, xp, xs, ldxs, w, h0, y, ldy);
  }
}

/// The most rows of any AVX2 tile of decoder Dec.
template <class Dec>
constexpr int quant_fused_max_rows_avx2() {
  int most = 0;
  for (int m = 1; m <= static_cast<int>(kQuantFusedMaxM); ++m) most = std::max(most, quant_fused_rows_avx2<Dec>(m));
  return most;
}

template <class Dec, int MR = quant_fused_max_rows_avx2<Dec>()>
inline void quant_tile_fused_avx2_any(int mr, int nh, const float* xp, const float* xs, long ldxs, const QuantPanels& w,
                                      long h0, float* y, long ldy) {
  if constexpr (MR >= 1) {
    if (mr == MR) return quant_tile_fused_avx2_nh<Dec, MR>(nh, xp, xs, ldxs, w, h0, y, ldy);
    return quant_tile_fused_avx2_any<Dec, MR - 1>(mr, nh, xp, xs, ldxs, w, h0, y, ldy);
  }
}

/// Small M (<= kQuantFusedMaxM), AVX2: one or two row tiles; threads take contiguous
/// ranges of column tiles (a template for the same reason as matmul_quant_fused).
/// The rows of each row tile are interleaved first (interleave_tile_rows()).
template <class T>
void matmul_quant_fused_avx2(const T* x, long ldx, long M, const T* xs, long ldxs, const QuantPanels& w, T* y, long ldy,
                             bool parallel) {
  static_assert(std::is_same_v<T, float>, "the fused tiles are float-only");
  with_decoder_avx2(w.type(), [&](auto dec) {
    using Dec = decltype(dec);
    const int mr_max = quant_fused_rows_avx2<Dec>(static_cast<int>(M));
    const int nh_max = quant_fused_halves_avx2<Dec>(mr_max);
    const long K = w.n_in();
    const float* xp = interleave_tile_rows(x, ldx, M, K, mr_max);  // row tile m0 at xp + m0 * K
    const long H = 2 * w.n_panels(), n_ctiles = (H + nh_max - 1) / nh_max;
    parallel_parts(n_ctiles, parallel, [&](long c0, long c1) {
      for (long c = c0; c < c1; ++c) {
        const long h0 = c * nh_max;
        const int nh = static_cast<int>(std::min<long>(nh_max, H - h0));
        for (long m0 = 0; m0 < M; m0 += mr_max) {
          const int mr = static_cast<int>(std::min<long>(mr_max, M - m0));
          quant_tile_fused_avx2_any<Dec>(mr, nh, xp + m0 * K, xs ? xs + m0 * ldxs : nullptr, ldxs, w, h0, y + m0 * ldy,
                                         ldy);
        }
      }
    });
  });
}
#endif  // fused tiles
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // AVX2

#if defined(KVDECODE_QUANT_FUSED_NEON)
/// Small-M register tile (NEON, float): MR rows x NQ quarter panels (4 outputs each,
/// quarter i = lanes 4 (i % 4) .. of panel i / 4) over all of k, the codes decoded
/// in registers, in the factored order (top of quant_kernels.hpp): the AVX2 tile's
/// loop with 4-lane vectors. The running sums live in y (read and written once per
/// sub-block), the sub-block's partial sums in registers.
/// xp = the MR rows interleaved, xp[k * MR + r] = x[r][k] (interleave_tile_rows()).
/// xs (MR x K / kSub, row stride ldxs) = the rows' sub-block sums (types with a min).
template <class Dec, int MR, int NQ>
inline void quant_tile_fused_neon(const float* xp, const float* xs, long ldxs, const QuantPanels& w, long q0, float* y,
                                  long ldy) {
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(8) for (int i = 0; i < NQ; ++i) vst1q_f32(y + r * ldy + (q0 + i) * 4, vdupq_n_f32(0.f));
  const long nb = w.n_blocks();
  const std::size_t pbb = w.panel_block_bytes();
  constexpr int kSubs = Dec::kBlock / Dec::kSub;
  for (long b = 0; b < nb; ++b) {
    const unsigned char* pb[NQ];
    KVD_UNROLL(8) for (int i = 0; i < NQ; ++i) pb[i] = w.panel_block((q0 + i) / 4, b);
    for (int s = 0; s < kSubs; ++s) {
      const float* xk = xp + (b * Dec::kBlock + s * Dec::kSub) * MR;
      Dec dec[NQ];
      KVD_UNROLL(8) for (int i = 0; i < NQ; ++i) {
        dec[i].begin(pb[i], s, static_cast<int>((q0 + i) % 4));
        prefetch_quarter_panel_share(pb[i], pbb, s, kSubs, (q0 + i) % 4);
      }
      float32x4_t t[MR][NQ];
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(8) for (int i = 0; i < NQ; ++i) t[r][i] = vdupq_n_f32(0.f);
      static_for<Dec::kSub>([&](auto kk) KVD_ALWAYS_INLINE {
        // Keeps GCC from moving the loads of later steps up (they spilled the partial sums).
        asm volatile("" ::: "memory");
        float32x4_t cv[NQ];
        KVD_UNROLL(8) for (int i = 0; i < NQ; ++i) cv[i] = dec[i].template code<kk>();
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
          const float32x4_t xb = vld1q_dup_f32(xk + kk * MR + r);
          KVD_UNROLL(8) for (int i = 0; i < NQ; ++i) t[r][i] = vfmaq_f32(t[r][i], xb, cv[i]);
        }
      });
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
        KVD_UNROLL(8) for (int i = 0; i < NQ; ++i) {
          float* yp = y + r * ldy + (q0 + i) * 4;
          float32x4_t a = vfmaq_f32(vld1q_f32(yp), t[r][i], dec[i].D);
          if constexpr (Dec::kMin) a = vfmaq_f32(a, vld1q_dup_f32(xs + r * ldxs + b * kSubs + s), dec[i].N);
          vst1q_f32(yp, a);
        }
      }
    }
  }
}

/// The NEON fused tiles' shapes (32 q registers: MR NQ partial sums, NQ code
/// vectors, the code words and constants of the decoders, a broadcast): all rows in
/// one tile, a whole panel (4 quarters) for up to 4 rows, half a panel for more.
/// Two panels for 1 or 2 rows spilled partial sums to the stack (GCC 12 interleaves
/// the 32 unrolled steps): q4_K, one row, 1.39 against 0.98 instructions per weight
/// in the unrolled sub-block. Not tuned on hardware (docs/cpus.md).
template <class>
constexpr int quant_fused_quarters_neon(int mr) { return mr <= 4 ? 4 : 2; }

template <class Dec, int MR, int NQ = quant_fused_quarters_neon<Dec>(MR)>
inline void quant_tile_fused_neon_nq(int nq, const float* xp, const float* xs, long ldxs, const QuantPanels& w, long q0,
                                     float* y, long ldy) {
  if constexpr (NQ >= 1) {
    if (nq == NQ) return quant_tile_fused_neon<Dec, MR, NQ>(xp, xs, ldxs, w, q0, y, ldy);
    return quant_tile_fused_neon_nq<Dec, MR, NQ - 1>(nq, xp, xs, ldxs, w, q0, y, ldy);
  }
}

template <class Dec, int MR = static_cast<int>(kQuantFusedMaxM)>
inline void quant_tile_fused_neon_any(int mr, int nq, const float* xp, const float* xs, long ldxs, const QuantPanels& w,
                                      long q0, float* y, long ldy) {
  if constexpr (MR >= 1) {
    if (mr == MR) return quant_tile_fused_neon_nq<Dec, MR>(nq, xp, xs, ldxs, w, q0, y, ldy);
    return quant_tile_fused_neon_any<Dec, MR - 1>(mr, nq, xp, xs, ldxs, w, q0, y, ldy);
  }
}

/// Small M (<= kQuantFusedMaxM), NEON: one row tile; threads take contiguous ranges
/// of column tiles (a template for the same reason as matmul_quant_fused).
template <class T>
void matmul_quant_fused_neon(const T* x, long ldx, long M, const T* xs, long ldxs, const QuantPanels& w, T* y, long ldy,
                             bool parallel) {
  static_assert(std::is_same_v<T, float>, "the fused tiles are float-only");
  with_decoder_neon(w.type(), [&](auto dec) {
    using Dec = decltype(dec);
    const int mr = static_cast<int>(M);
    const int nq_max = quant_fused_quarters_neon<Dec>(mr);
    const float* xp = interleave_tile_rows(x, ldx, M, w.n_in(), M);
    const long Q = 4 * w.n_panels(), n_ctiles = (Q + nq_max - 1) / nq_max;
    parallel_parts(n_ctiles, parallel, [&](long c0, long c1) {
      for (long c = c0; c < c1; ++c) {
        const long q0 = c * nq_max;
        const int nq = static_cast<int>(std::min<long>(nq_max, Q - q0));
        quant_tile_fused_neon_any<Dec>(mr, nq, xp, xs, ldxs, w, q0, y, ldy);
      }
    });
  });
}
#endif  // NEON fused tiles

}  // namespace kvd::detail
