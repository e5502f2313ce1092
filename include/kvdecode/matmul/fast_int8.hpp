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
// mode against itself). float(I) is exact: |I| <= 32 * 128 * 127 (q8_0),
// 16 * 32 * 127 (q6_K) or 32 * 127 * 127 (the levels) < 2^24. For sub-blocks of
// 32, Q_s = Q_j.
//
// Types: every block type. Codes in sub-blocks of 32: q4_0, q4_1, q4_K (4 bits),
// q5_0, q5_1, q5_K (5 bits), q8_0 (8 bits, signed), and the levels of iq4_nl,
// iq4_xs and mxfp4 (int8 table values picked by 4-bit codes); in sub-blocks of 16:
// q2_K (2 bits), q3_K (3) and q6_K (6). So Q4_K_M, Q5_K_M, Q3_K_M, Q2_K and Q8_0
// files run in fast mode throughout. A matrix of a type the mode does not compute
// (f16, bf16 without AVX512-BF16, f32) keeps the default numerics, per matrix, so a
// model mixing types is still exact across paths.
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
// q8_0's bytes sit in the panel as value k of 16 outputs side by side; its tiles
// transpose each 4 values of 8 outputs into one 32-bit lane per output (two
// 32-byte loads, an unpack, a permute and a shuffle) and its rounded rows keep
// their values in order (fast_order() 4). Its signed codes enter vpdpbusd as code
// + 128 (subtracting 128 Q_j after); without VNNI, vpmaddubsw takes |code| and
// the activation with the code's sign (pairs of at most 2 * 128 * 127 = 32512).
// The table types look their nibble planes up in a 16-byte table (vpshufb): with
// VNNI as level + 128 (unsigned, subtracting 128 Q_s after); without, as the
// signed level, multiplied as |level| times q with the level's sign (vpsignb), each
// plane's 16-bit pair sums (at most 2 * 127 * 127 = 32258) widened to 32 bits.
// With VNNI (AVX512-VNNI + VL, or AVX-VNNI) the same tiles take vpdpbusd for each
// pair of vpmaddubsw and 16-bit adds: 32-bit sums throughout, the same integers.
// With AVX512-VNNI and BW, large M of the byte-plane types (fast_planes.hpp) runs 512-bit
// tiles over both halves of a panel at once: 16 outputs per vpdpbusd. With VL too,
// so does small M (fast_tiles_512.hpp) for the nibble types, q6_K and (with VBMI) q8_0.
// On aarch64 (KVDECODE_FAST_NEON) the tiles of fast_tiles_neon.hpp read the same
// rounded rows for every M: the same code bytes per quarter panel, multiplied by sdot
// (KVDECODE_FAST_DOTPROD; pairs of rows by smmla with KVDECODE_FAST_I8MM) or smull /
// smlal and sadalp, signed (q8_0 and the levels without an offset).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/parallel.hpp"
#include "kvdecode/matmul/fast_planes.hpp"
#include "kvdecode/matmul/fast_rows.hpp"
#include "kvdecode/matmul/fast_tiles.hpp"
#include "kvdecode/matmul/fast_tiles_512.hpp"
#include "kvdecode/matmul/fast_tiles_neon.hpp"
#include "kvdecode/matmul/packed_matrix.hpp"
#include "kvdecode/matmul/quant_kernels.hpp"

namespace kvd::detail {

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

/// The small-M tiles' schedule (the AVX2 and NEON fast products): threads take
/// contiguous ranges of column tiles of nh_max half panels; rows go in blocks that
/// keep their rounded values in L2, and tiles of mr_max rows. tile(mr, nh, m0, h0,
/// y + m0 ldy) computes one.
template <class Tile>
inline void fast_run_tiles(const FastRows& rows, long M, const QuantPanels& w, float* y, long ldy, bool parallel, int mr_max,
                           int nh_max, Tile&& tile) {
  const long H = 2 * w.n_panels(), n_ctiles = (H + nh_max - 1) / nh_max;
  // rows per block (a multiple of 4, both ISAs' full tiles): their rounded values stay in L2
  const long mb = std::max<long>(mr_max, (128L << 10) / rows.K / 4 * 4);
  parallel_parts(n_ctiles, parallel, [&](long c0, long c1) {
    for (long b0 = 0; b0 < M; b0 += mb)
      for (long c = c0; c < c1; ++c) {
        const long h0 = c * nh_max;
        const int nh = static_cast<int>(std::min<long>(nh_max, H - h0));
        for (long m0 = b0; m0 < std::min(M, b0 + mb); m0 += mr_max)
          tile(static_cast<int>(std::min<long>(mr_max, M - m0)), nh, m0, h0, y + m0 * ldy);
      }
  });
}

#if defined(KVDECODE_FAST_AVX2)
/// The AVX2 fast product. Small M: threads take contiguous ranges of column tiles
/// (half panels, or with the 512-bit tiles whole panels); rows go in blocks that
/// keep their rounded values in L2, and tiles of up to 4 rows (7 for M = 5 to 7; 8
/// for the 512-bit tiles, fast_rows_512()). M >= kFastPlanesMinM, for every type but the table types: the byte planes (fast_planes.hpp).
inline void matmul_fast_avx2(const FastRows& rows, long M, const QuantPanels& w, float* y, long ldy, bool parallel) {
  auto run = [&](auto dec, [[maybe_unused]] auto row) {
    using Dec = decltype(dec);
    if constexpr (kFastPlanes<Dec>) {
      if (M >= kFastPlanesMinM) {
#if defined(KVDECODE_FAST_PLANES_512)
        return matmul_fast_planes<Dec, true>(rows, M, w, y, ldy, parallel);
#else
        return matmul_fast_planes<Dec, false>(rows, M, w, y, ldy, parallel);
#endif
      }
    }
    const int mr_max = static_cast<int>(M <= fast_max_rows<Dec>() ? M : kFastTileRows);
    constexpr std::size_t kPbb = kLanes * sizeof(typename decltype(row)::Block);  // a panel block's bytes
#if defined(KVDECODE_FAST_TILES_512)
    if constexpr (kFastTiles512<Dec>) {
      // whole panels: column tiles of 2 np half panels, from an even h0
      using Dec5 = typename Avx512DecoderOf<decltype(row)>::type;
      const bool halves = fast_avx512_halves();
      const int mr512 = fast_rows_512<Dec>(M, halves);
      return fast_run_tiles(rows, M, w, y, ldy, parallel, mr512, 2 * fast_panels_512<Dec>(mr512, halves),
                            [&](int mr, int nh, long m0, long h0, float* ym) {
                              fast_tile_512_any<Dec, Dec5, kPbb>(mr, nh / 2, rows, m0, w, h0 / 2, ym, ldy);
                            });
    }
#endif
    fast_run_tiles(rows, M, w, y, ldy, parallel, mr_max, fast_halves_of<Dec>(mr_max),
                   [&](int mr, int nh, long m0, long h0, float* ym) { fast_tile_avx2_any<Dec, kPbb>(mr, nh, rows, m0, w, h0, ym, ldy); });
  };
  const bool fast = visit_block_type(w.type(), [&](auto row) {
    using Row = decltype(row);
    using Dec = typename Avx2DecoderOf<Row>::type;
    static_assert(fast_codes_fit_row<Row, Dec>(), "a block type's fast-mode row order disagrees with its AVX2 decoder's codes");
    if constexpr (Row::kFastOrder != 0) run(Dec{}, row);
    else KVD_ASSERT(false);
  });
  if (!fast) KVD_ASSERT(false);
}
#endif  // KVDECODE_FAST_AVX2

#if defined(KVDECODE_FAST_NEON)
/// The NEON fast product: the tiles of fast_tiles_neon.hpp for every M, on the
/// schedule of fast_run_tiles().
inline void matmul_fast_neon(const FastRows& rows, long M, const QuantPanels& w, float* y, long ldy, bool parallel) {
  const bool fast = visit_block_type(w.type(), [&](auto row) {
    using Row = decltype(row);
    using Dec = typename NeonDecoderOf<Row>::type;
    static_assert(fast_codes_fit_row<Row, Dec>(), "a block type's fast-mode row order disagrees with its NEON decoder's codes");
    if constexpr (Row::kFastOrder != 0) {
      const int mr_max = static_cast<int>(std::min<long>(M, kFastNeonRows));
      fast_run_tiles(rows, M, w, y, ldy, parallel, mr_max, fast_halves_neon(mr_max),
                     [&](int mr, int nh, long m0, long h0, float* ym) { fast_tile_neon_any<Dec>(mr, nh, rows, m0, w, h0, ym, ldy); });
    } else {
      KVD_ASSERT(false);
    }
  });
  if (!fast) KVD_ASSERT(false);
}
#endif  // KVDECODE_FAST_NEON

/// y (M x Npad) = the fast product (top of this file) of x (M x K) and w.
/// Precondition (asserted): fast_matmul_type(w.type()).
/// A template only so that a program built with KVDECODE_EXTERN_KERNELS compiles its
/// tiles once, as a kernel instance (matmul/instances_list.hpp), not in every file
/// that runs a model.
template <class Unused = void>
void matmul_fast_with(const float* x, long ldx, long M, const QuantPanels& w, float* y, long ldy,
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
#elif defined(KVDECODE_FAST_NEON)
  if (!portable) return matmul_fast_neon(rows, M, w, y, ldy, parallel);
#endif
  matmul_fast_portable(rows, M, w, y, ldy, parallel);
}

}  // namespace kvd::detail
