// The fast mode's 512-bit register tiles for small M (fast_int8.hpp): MR rows x NP
// whole panels (16 outputs each) over all of k, for the nibble-plane block types
// (q4_0, q4_1, q4_K; q5_0, q5_1, q5_K with their high bits; iq4_nl, iq4_xs, mxfp4
// through their level table), q6_K, and with AVX512-VBMI q8_0. A panel block holds the codes of its two halves side
// by side, 32 bytes each per group of 8 values, so one 64-byte load gives the code
// vectors of both halves that the AVX2 tile (fast_tiles.hpp) loads in two, and one
// zmm vpdpbusd does the work of two ymm ones. The scales and offsets come from the
// AVX-512 decoders (quant_decode_avx512.hpp), the same floats per output as the
// AVX2 decoders'. The same integer sums and the same float steps per output as the
// AVX2 tile and the scalar definition, so the same bits. Empty unless
// KVDECODE_FAST_TILES_512.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvdecode/core/cpu_features.hpp"
#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/matmul/fast_rows.hpp"
#include "kvdecode/matmul/fast_tiles.hpp"
#include "kvdecode/matmul/lane_bits.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/matmul/quant_decode_avx2.hpp"
#include "kvdecode/matmul/quant_decode_avx512.hpp"
#include "kvdecode/matmul/static_for.hpp"

namespace kvd::detail {

/// Which tile shapes the 512-bit tiles take: those of a CPU that runs 512-bit
/// operations as two halves (1), of one that runs them whole (0), or the running
/// CPU's (-1, cpu_features().avx512_halves; the default). Shapes never change
/// results; tests set it to run both sets of shapes on one CPU.
inline int& fast_halves_choice() {
  static int choice = -1;
  return choice;
}
inline bool fast_avx512_halves() {
  const int c = fast_halves_choice();
  return c < 0 ? cpu_features().avx512_halves : c != 0;
}

#if defined(KVDECODE_FAST_TILES_512)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's own 512-bit intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

/// Whether Dec's fast codes take the 512-bit small-M tiles: the nibble planes, q6_K,
/// and q8_0's bytes where vpermb (AVX512-VBMI) turns them into lanes.
template <class Dec>
inline constexpr bool kFastTiles512 =
    Dec::kFastCodes == FastCodes::kNibbles || Dec::kFastCodes == FastCodes::kFive ||
    Dec::kFastCodes == FastCodes::kLevels || Dec::kFastCodes == FastCodes::kSix ||
#if defined(KVDECODE_FAST_BYTES_512)
    Dec::kFastCodes == FastCodes::kBytes;
#else
    false;
#endif

/// Whether Dec's codes cost more to build than the nibble planes' (the 5- and 6-bit
/// types: their high bits).
template <class Dec>
inline constexpr bool kFastHeavy512 = Dec::kFastCodes == FastCodes::kFive || Dec::kFastCodes == FastCodes::kSix;

/// The most panels of a 512-bit tile of mr rows: 4 for 1 row (3 for the 5- and 6-bit
/// types, which hold a word of high bits per panel besides), 2 beyond. Up to 8 rows x 2
/// panels hold 16 sums of 32 bits in registers; the 16 float sums go to L1 and back
/// once per sub-block, through the load and store ports rather than the vector pipes.
template <class Dec>
constexpr int fast_panels_of(int mr) {
  if constexpr (kFastHeavy512<Dec>) return mr <= 1 ? 3 : 2;
  return mr <= 1 ? 4 : 2;
}

/// The rows of the 512-bit tiles for M rows: M itself up to 8 (a batch of 8 decoding
/// sequences, or a speculative verification), else tiles of 8, so that each code vector
/// built feeds 8 rows. Intel Xeon (AVX512-VNNI, one core in L2, M = 8, G multiply-adds/s,
/// medians of 5 alternated runs, two tiles of 4 -> one of 8 rows x 2 panels): q4_0
/// 150 -> 175, q4_K 131 -> 150, q8_0 138 -> 161; 8 rows x 1 panel -> 2: q5_K
/// 126 -> 135, q6_K 106 -> 124.
/// `halves` (a CPU that runs 512-bit operations as two halves, Zen 4): the nibble and
/// byte types keep M up to 7, else tiles of 4 (there, M = 8: q4_0 149 -> 139 and
/// q8_0 140 -> 136 with 8 rows), and the 5- and 6-bit types 1 panel beyond 4 rows.
template <class Dec>
inline int fast_rows_512(long M, bool halves) {
  const int most = halves && !kFastHeavy512<Dec> ? fast_max_rows<Dec>() : 8;
  const int tile = halves && !kFastHeavy512<Dec> ? kFastTileRows : 8;
  return static_cast<int>(M <= most ? M : tile);
}
/// Panels per tile of mr rows (fast_rows_512()): fast_panels_of(), or 1 beyond 4 rows
/// for the 5- and 6-bit types on a CPU that runs 512-bit operations as two halves.
template <class Dec>
inline int fast_panels_512(int mr, bool halves) {
  return halves && kFastHeavy512<Dec> && mr > 4 ? 1 : fast_panels_of<Dec>(mr);
}

/// The 512-bit decoder's word of high bits of a 5-bit type (both halves of the panel).
template <class Dec5>
KVD_ALWAYS_INLINE inline __m512i fast_high_word512(const Dec5& d) {
  if constexpr (std::is_same_v<Dec5, DecodeQK4<true>>)
    return d.hw;
  else
    return d.qh;
}

/// Code vectors lo and hi of group g (8 values) of sub-block s of panel block pb, both
/// halves: with VNNI's unsigned codes, the AVX2 tile's two half-panel vectors side by side.
template <class Dec, class Dec5>
KVD_ALWAYS_INLINE inline void fast_codes512(const Dec5& dec, const unsigned char* pb, int s, int g, __m512i table,
                                            __m512i& lo, __m512i& hi) {
  if constexpr (Dec::kFastCodes == FastCodes::kSix) {
    const unsigned char* ql = pb + 288 + 128 * s;  // Avx2DecodeQ6_K's fields, both halves
    q6_code_bytes<LaneBits512>(_mm512_loadu_si512(ql + 64 * g), _mm512_loadu_si512(pb + 2336 + 64 * s), g, lo, hi);
  } else if constexpr (Dec::kFastCodes == FastCodes::kBytes) {
#if defined(KVDECODE_FAST_BYTES_512)
    // 4 values of 16 outputs, value-major (16 bytes each), to 16 lanes of 4 values each, + 128
    const __m512i order = _mm512_set_epi8(63, 47, 31, 15, 62, 46, 30, 14, 61, 45, 29, 13, 60, 44, 28, 12,  //
                                          59, 43, 27, 11, 58, 42, 26, 10, 57, 41, 25, 9, 56, 40, 24, 8,    //
                                          55, 39, 23, 7, 54, 38, 22, 6, 53, 37, 21, 5, 52, 36, 20, 4,      //
                                          51, 35, 19, 3, 50, 34, 18, 2, 49, 33, 17, 1, 48, 32, 16, 0);
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    const unsigned char* q = dec.q + 128 * g;
    lo = _mm512_xor_si512(_mm512_permutexvar_epi8(order, _mm512_loadu_si512(q)), bias);
    hi = _mm512_xor_si512(_mm512_permutexvar_epi8(order, _mm512_loadu_si512(q + 64)), bias);
#endif
  } else {
    nibble_bytes<LaneBits512>(_mm512_loadu_si512(dec.q + 64 * g), lo, hi);
    if constexpr (kFastFive<Dec>) or_high_bits<LaneBits512>(fast_high_word512(dec), g, lo, hi);
    if constexpr (kFastLevels<Dec>) {
      lo = _mm512_shuffle_epi8(table, lo);
      hi = _mm512_shuffle_epi8(table, hi);
    }
  }
}

/// MR rows x NP panels from p0 over all of k: y's columns [16 p0, 16 (p0 + NP)) of
/// rows m0 .. m0 + MR - 1 (y points at row m0). Dec: the type's AVX2 decoder (its
/// fast codes and offset), Dec5: its AVX-512 decoder (the panel's scales). Sub-blocks
/// of 32 values, or 16 for q6_K (its offsets and sums per 16).
template <class Dec, class Dec5, int MR, int NP, std::size_t kPbb>
inline void fast_tile_512(const FastRows& rows, long m0, const QuantPanels& w, long p0, float* y, long ldy) {
  constexpr bool kSix = Dec::kFastCodes == FastCodes::kSix;
  constexpr int kOffset = fast_code_offset<Dec>(), S = kSix ? 16 : kFastBlock;
  constexpr int kSubs = Dec::kBlock / S;
  static_assert(Dec5::kBlock == Dec::kBlock && Dec5::kSub == S && Dec5::kMin == Dec::kMin,
                "a block type's AVX2 and AVX-512 decoders disagree on its sub-blocks");
  const long K = rows.K, nbq = K / kFastBlock;
  // the float sums of the tile, in registers: the same values a store and a load of y would carry
  __m512 acc[MR][NP];
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r) KVD_UNROLL(4) for (int i = 0; i < NP; ++i) acc[r][i] = _mm512_setzero_ps();
  const float *const rd = rows.d.data(), *const rxq = rows.xq.data();
  const std::int32_t *const rq = rows.qsum.data(), *const rq16 = rows.qsum16.data();
  [[maybe_unused]] __m512i table = _mm512_setzero_si512();
  if constexpr (kFastLevels<Dec>) table = _mm512_broadcast_i32x4(_mm256_castsi256_si128(fast_level_table<Dec>()));
  // the panel block's size as a constant: a sub-block's prefetches then compile to
  // straight-line code, not a loop of 3 instructions per line (q8_0 at M = 1, one Zen 5
  // core: the loop took about a fifth of the tile's time)
  constexpr std::size_t pbb = kPbb;
  const long nblk = w.n_blocks();
  const long ahead = static_cast<long>(panel_blocks_ahead(pbb));
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  // q4_K, q5_K: each panel block's scales and mins unpacked once for its 8 sub-blocks
  [[maybe_unused]] typename FastBlockScalesOf<Dec5>::type bsc[NP];
  for (long b = 0; b < nblk; ++b) {
    const unsigned char* pb[NP];
    KVD_UNROLL(4) for (int i = 0; i < NP; ++i) pb[i] = w.data + (static_cast<std::size_t>(p0 + i) * nblk + b) * pbb;
    if constexpr (kFastBlockScales<Dec5>) KVD_UNROLL(4) for (int i = 0; i < NP; ++i) Dec5::block_scales(pb[i], bsc[i]);
    // What to prefetch, as a byte offset into w.data: panel_blocks_ahead() ahead in
    // panel p0 + i, or past its end the same stream of the next tile (panel p0 + i + NP:
    // a thread's column tiles are contiguous), so that a tile's first blocks are not
    // fetched on demand.
    const bool in_panel = b + ahead < nblk;
    const long ba = in_panel ? b + ahead : b + ahead - nblk;
    std::size_t ahead_at[NP];
    KVD_UNROLL(4) for (int i = 0; i < NP; ++i)
      ahead_at[i] = (static_cast<std::size_t>(p0 + i + (in_panel ? 0 : NP)) * nblk + ba) * pbb;
    for (int s = 0; s < kSubs; ++s) {
      const long k0 = b * Dec::kBlock + S * s;
      Dec5 dec[NP];
      KVD_UNROLL(4) for (int i = 0; i < NP; ++i) {
        if constexpr (kFastBlockScales<Dec5>)
          dec[i].begin(bsc[i], pb[i], s);
        else
          dec[i].begin(pb[i], s);
        prefetch_panel_block_share(w.data, ahead_at[i], pbb, s, kSubs);
      }
      // The integer sums start at -kOffset Q_s rather than 0 (exact in 32 bits), so
      // the code offset costs no subtraction per panel after the loop (q6_K at M = 8,
      // one Zen 4 core in L2: 105-110 -> 116-118 G multiply-adds/s; the others level).
      __m512i t[MR][NP];
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
        __m512i t0 = _mm512_setzero_si512();
        if constexpr (kOffset != 0) {
          const long row = m0 + r, e = row * nbq + k0 / kFastBlock, e16 = row * (K / 16) + k0 / 16;
          t0 = _mm512_set1_epi32(-kOffset * (kSix ? rq16[e16] : rq[e]));
        }
        KVD_UNROLL(4) for (int i = 0; i < NP; ++i) t[r][i] = t0;
      }
      KVD_UNROLL(4) for (int g = 0; g < S / 8; ++g) {
        __m512i lo[NP], hi[NP];
        KVD_UNROLL(4) for (int i = 0; i < NP; ++i) fast_codes512<Dec>(dec[i], pb[i], s, g, table, lo[i], hi[i]);
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
          const std::int8_t* qa = q0 + r * K + k0 + 8 * g;
          const __m512i b0 = _mm512_set1_epi32(fast_row_word(qa)), b1 = _mm512_set1_epi32(fast_row_word(qa + 4));
          KVD_UNROLL(4) for (int i = 0; i < NP; ++i)
            t[r][i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(t[r][i], lo[i], b0), hi[i], b1);
        }
      }
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
        const long e = (m0 + r) * nbq + k0 / kFastBlock;
        const __m512 d = _mm512_set1_ps(rd[e]);
        KVD_UNROLL(4) for (int i = 0; i < NP; ++i) {
          acc[r][i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(t[r][i]), d), dec[i].D, acc[r][i]);
          if constexpr (Dec::kMin) acc[r][i] = _mm512_fmadd_ps(_mm512_set1_ps(rxq[e]), dec[i].N, acc[r][i]);
        }
      }
    }
  }
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(4) for (int i = 0; i < NP; ++i) _mm512_storeu_ps(y + r * ldy + (p0 + i) * 16, acc[r][i]);
}

/// The 512-bit tile shapes of Dec: up to 8 rows, fast_panels_of<Dec>(mr) panels.
template <class Dec>
struct FastShape512 {
  static constexpr int kMaxRows = 8;
  static constexpr int halves(int mr) { return fast_panels_of<Dec>(mr); }
};
/// The tile of mr rows and np panels (FastShape512<Dec>).
/// kPbb: the bytes of a panel block (w.panel_block_bytes(), asserted).
template <class Dec, class Dec5, std::size_t kPbb>
inline void fast_tile_512_any(int mr, int np, const FastRows& rows, long m0, const QuantPanels& w, long p0, float* y,
                              long ldy) {
  KVD_ASSERT(w.panel_block_bytes() == kPbb);
  with_tile_shape<FastShape512<Dec>>(mr, np, [&](auto r, auto p) {
    fast_tile_512<Dec, Dec5, decltype(r)::value, decltype(p)::value, kPbb>(rows, m0, w, p0, y, ldy);
  });
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // KVDECODE_FAST_TILES_512

}  // namespace kvd::detail
