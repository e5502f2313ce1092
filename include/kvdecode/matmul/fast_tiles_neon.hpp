// The fast mode's NEON register tiles (fast_int8.hpp) on aarch64: MR rows x NH half
// panels over all of k, the codes rebuilt as bytes in q registers from the panel
// blocks (the NEON decoders' fields, quant_decode_neon.hpp) and multiplied with the
// rounded rows (fast_rows.hpp) by exact integer dot products.
//
// Each 32-bit lane of a code vector holds 4 codes of one output, a quarter panel (4
// outputs) per vector, in the order of the rounded rows' 4 bytes that multiply them:
// so lane l of a 16-byte load of a rounded row serves every output. The nibble
// planes of a code word (values k .. k + 7) are (w & 15) = values k, k+2, k+4, k+6
// and (w >> 4) = k+1, k+3, k+5, k+7, the rows' groups of 8 in that order; q5's and
// q6_K's high bits join at bit 4 (and 5) of each byte through a byte shuffle (tbl)
// and per-byte shifts; q2_K's / q3_K's 2-bit codes (w >> 2 j) & 3 are values j,
// j + 4, j + 8, j + 12, the rows' order 16; q8_0's bytes (value k of 16 outputs side
// by side) are transposed by zips; the table types look their nibbles up (tbl) as
// the signed levels. With __ARM_FEATURE_DOTPROD (KVDECODE_FAST_DOTPROD) sdot adds
// each lane's 4 products to a 32-bit sum; on armv8-a smull / smlal add two products
// per 16-bit lane (at most 2 * 128 * 127 = 32512: codes in [-128, 127], activations
// in [-127, 127]) and sadalp widens pairs of them into 32-bit sums, which one addp
// per sub-block folds into one per output. With __ARM_FEATURE_MATMUL_INT8 too
// (KVDECODE_FAST_I8MM), a tile of 2 or more rows takes them in pairs through smmla:
// zip1 / zip2 of the 32-bit lanes of lo and hi put each output's 8 codes of a group
// side by side (two outputs per vector), a zip of two rows' 16-byte loads their 8
// rounded values, and one smmla adds the 2 x 2 block of sums (2 rows x 2 outputs);
// an odd last row and M = 1 stay on sdot. The sums are the same integers every way,
// and the float epilogue is the definition's, per output: the same bits.
// Empty unless KVDECODE_FAST_NEON.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/matmul/dense_kernels.hpp"
#include "kvdecode/matmul/fast_rows.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/matmul/quant_decode_neon.hpp"
#include "kvdecode/matmul/static_for.hpp"

namespace kvd::detail {

#if defined(KVDECODE_FAST_NEON)
/// A tile's integer sums for the 4 outputs of a quarter panel and one row: with dot
/// products one 32-bit lane per output; without, pairs of partial sums (outputs 0, 1
/// in a, 2, 3 in b) folded by total().
struct FastSumNeon {
  int32x4_t a;
#if !defined(KVDECODE_FAST_DOTPROD)
  int32x4_t b;
#endif
  KVD_ALWAYS_INLINE void zero() {
    a = vdupq_n_s32(0);
#if !defined(KVDECODE_FAST_DOTPROD)
    b = vdupq_n_s32(0);
#endif
  }
  /// The sum of each output.
  KVD_ALWAYS_INLINE int32x4_t total() const {
#if defined(KVDECODE_FAST_DOTPROD)
    return a;
#else
    return vpaddq_s32(a, b);
#endif
  }
};

/// s + each output's 4 codes in lo times the rounded values in 32-bit lane kL of x,
/// plus those in hi times lane kL + 1.
template <int kL>
KVD_ALWAYS_INLINE inline void fast_dot2_neon(FastSumNeon& s, int8x16_t lo, int8x16_t hi, int8x16_t x) {
#if defined(KVDECODE_FAST_DOTPROD)
  s.a = vdotq_laneq_s32(vdotq_laneq_s32(s.a, lo, x, kL), hi, x, kL + 1);
#else
  const int8x16_t b0 = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), kL));
  const int8x16_t b1 = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), kL + 1));
  const int16x8_t p0 = vmlal_s8(vmull_s8(vget_low_s8(lo), vget_low_s8(b0)), vget_low_s8(hi), vget_low_s8(b1));  // outputs 0, 1
  const int16x8_t p1 = vmlal_high_s8(vmull_high_s8(lo, b0), hi, b1);                                            // outputs 2, 3
  s.a = vpadalq_s16(s.a, p0);
  s.b = vpadalq_s16(s.b, p1);
#endif
}

#if defined(KVDECODE_FAST_I8MM)
/// A pair of rows' integer sums for the 4 outputs of a quarter panel, as smmla's 2x2
/// blocks: a = (row 0: outputs 0, 1; row 1: outputs 0, 1), b the same for outputs 2, 3.
struct FastPairSumNeon {
  int32x4_t a, b;
  KVD_ALWAYS_INLINE void zero() { a = b = vdupq_n_s32(0); }
  /// The sum of each output of row kR (0 or 1) of the pair.
  template <int kR>
  KVD_ALWAYS_INLINE int32x4_t total() const {
    const int64x2_t a2 = vreinterpretq_s64_s32(a), b2 = vreinterpretq_s64_s32(b);
    return vreinterpretq_s32_s64(kR == 0 ? vzip1q_s64(a2, b2) : vzip2q_s64(a2, b2));
  }
};

/// The codes fast_dot2_neon() reads from lo and hi as smmla's 8 values per output:
/// c[0] = outputs 0, 1 and c[1] = outputs 2, 3, each output's lane of lo then of hi.
KVD_ALWAYS_INLINE inline void fast_pair_codes_neon(int8x16_t lo, int8x16_t hi, int8x16_t (&c)[2]) {
  const int32x4_t l = vreinterpretq_s32_s8(lo), h = vreinterpretq_s32_s8(hi);
  c[0] = vreinterpretq_s8_s32(vzip1q_s32(l, h));
  c[1] = vreinterpretq_s8_s32(vzip2q_s32(l, h));
}

/// s + two rows' 8 rounded values (x2: row 0 in bytes 0..7, row 1 in 8..15) times
/// each output's 8 codes (c from fast_pair_codes_neon): the sums fast_dot2_neon()
/// adds for each row, as 2x2 blocks.
KVD_ALWAYS_INLINE inline void fast_mmla_neon(FastPairSumNeon& s, const int8x16_t (&c)[2], int8x16_t x2) {
  s.a = vmmlaq_s32(s.a, x2, c[0]);
  s.b = vmmlaq_s32(s.b, x2, c[1]);
}
#endif

/// The word of high bits a 5-bit decoder loaded in begin() (bit v = value v of the sub-block).
template <class Dec>
KVD_ALWAYS_INLINE inline uint8x16_t fast_high_word_neon(const Dec& d) {
  if constexpr (std::is_same_v<Dec, NeonDecodeQK4<true>>)
    return vreinterpretq_u8_u32(d.hw);
  else
    return vreinterpretq_u8_u32(d.qh);
}

/// The codes of one half panel (quarters 2 h and 2 h + 1 of a panel block) in
/// sub-block s: begin() finds its words, group<g>() gives group g's two code vectors
/// per quarter: values 8 g + 2 b (lo) and 8 g + 2 b + 1 (hi) in byte b of each lane,
/// or for q8_0 values 8 g .. 8 g + 3 and 8 g + 4 .. 8 g + 7, for q2_K / q3_K value
/// vectors 2 g and 2 g + 1 (values 4 b + j).
template <class Dec>
struct FastHalfNeon {
  static constexpr FastCodes kCodes = Dec::kFastCodes;
  const unsigned char* q;  // quarter 2 h's code words (2 h + 1's at + 16), or q8_0's codes
  int h;
  uint8x16_t cw[2], hw[2];  // q2_K / q3_K code words; q5 / q6_K / q3_K high bits
  int8x16_t levels;

  KVD_ALWAYS_INLINE void begin(const unsigned char* pb, int s, int half) {
    h = half;
    if constexpr (kCodes == FastCodes::kBytes) {
      q = pb + 32;  // NeonDecodeQ8_0's codes: 16 bytes per value
    } else if constexpr (kCodes == FastCodes::kSix) {
      q = pb + 288 + 128 * s + 32 * h;  // NeonDecodeQ6_K's fields
      for (int k = 0; k < 2; ++k) hw[k] = vld1q_u8(pb + 2336 + 64 * s + 32 * h + 16 * k);
    } else if constexpr (kCodes == FastCodes::kCrumbs || kCodes == FastCodes::kCrumbs3) {
      constexpr bool kThree = kCodes == FastCodes::kCrumbs3;
      for (int k = 0; k < 2; ++k) cw[k] = vld1q_u8(pb + (kThree ? 736 : 320) + 64 * s + 32 * h + 16 * k);
      if constexpr (kThree) {
        // the high bits of the sub-block's 16 values: bits 16 (s % 2) .. of word s / 2;
        // byte b of a lane gets the byte holding values 4 b .. 4 b + 3's bits (nibble b % 2)
        const uint8x16_t idx = {0, 0, 1, 1, 4, 4, 5, 5, 8, 8, 9, 9, 12, 12, 13, 13};
        const uint8x16_t sel = vaddq_u8(idx, vdupq_n_u8(static_cast<std::uint8_t>(2 * (s % 2))));
        for (int k = 0; k < 2; ++k) hw[k] = vqtbl1q_u8(vld1q_u8(pb + 224 + 64 * (s / 2) + 32 * h + 16 * k), sel);
      }
    } else {
      Dec d;
      d.begin(pb, s, 2 * h);
      q = d.q;
      if constexpr (kCodes == FastCodes::kLevels) levels = d.levels;
      if constexpr (kCodes == FastCodes::kFive) {
        hw[0] = fast_high_word_neon(d);
        Dec d1;
        d1.begin(pb, s, 2 * h + 1);
        hw[1] = fast_high_word_neon(d1);
      }
    }
  }

  template <int g>
  KVD_ALWAYS_INLINE void group(int8x16_t (&lo)[2], int8x16_t (&hi)[2]) const {
    if constexpr (kCodes == FastCodes::kBytes) {
      // values 8 g + 4 v .. 8 g + 4 v + 3 of the half's outputs, one lane per output
      // (zip1 of two values' 16 bytes interleaves outputs 0..7, zip2 outputs 8..15)
      for (int v = 0; v < 2; ++v) {
        uint8x16_t c[4];
        for (int k = 0; k < 4; ++k) c[k] = vld1q_u8(q + 16 * (8 * g + 4 * v + k));
        uint16x8_t x01, x23;
        if (h == 0) {
          x01 = vreinterpretq_u16_u8(vzip1q_u8(c[0], c[1]));
          x23 = vreinterpretq_u16_u8(vzip1q_u8(c[2], c[3]));
        } else {
          x01 = vreinterpretq_u16_u8(vzip2q_u8(c[0], c[1]));
          x23 = vreinterpretq_u16_u8(vzip2q_u8(c[2], c[3]));
        }
        int8x16_t(&out)[2] = v == 0 ? lo : hi;
        out[0] = vreinterpretq_s8_u16(vzip1q_u16(x01, x23));
        out[1] = vreinterpretq_s8_u16(vzip2q_u16(x01, x23));
      }
    } else if constexpr (kCodes == FastCodes::kCrumbs || kCodes == FastCodes::kCrumbs3) {
      for (int k = 0; k < 2; ++k) {
        lo[k] = vreinterpretq_s8_u8(crumbs<2 * g>(k));
        hi[k] = vreinterpretq_s8_u8(crumbs<2 * g + 1>(k));
      }
    } else {
      const uint8x16_t m4 = vdupq_n_u8(15);
      for (int k = 0; k < 2; ++k) {
        const uint8x16_t w = vld1q_u8(q + 64 * g + 16 * k);
        uint8x16_t l = vandq_u8(w, m4), u = vshrq_n_u8(w, 4);
        if constexpr (kCodes == FastCodes::kFive) {
          // byte g of each lane (the group's 8 high bits) to all 4 bytes; bit 2 b to
          // bit 4 of lo's byte b, bit 2 b + 1 to bit 4 of hi's
          const uint8x16_t idx = {g, g, g, g, 4 + g, 4 + g, 4 + g, 4 + g, 8 + g, 8 + g, 8 + g, 8 + g, 12 + g, 12 + g, 12 + g, 12 + g};
          const uint8x16_t t = vqtbl1q_u8(hw[k], idx);
          const int8x16_t sl = {4, 2, 0, -2, 4, 2, 0, -2, 4, 2, 0, -2, 4, 2, 0, -2};
          const int8x16_t sh = {3, 1, -1, -3, 3, 1, -1, -3, 3, 1, -1, -3, 3, 1, -1, -3};
          const uint8x16_t b4 = vdupq_n_u8(16);
          l = vorrq_u8(l, vandq_u8(vshlq_u8(t, sl), b4));
          u = vorrq_u8(u, vandq_u8(vshlq_u8(t, sh), b4));
        } else if constexpr (kCodes == FastCodes::kSix) {
          // byte b of the high word holds the pairs of values 2 b, 2 b + 1 (group 0) and
          // 8 + 2 b, 9 + 2 b (group 1) at bits 0, 2, 4, 6 (q6_high_shift): to bits 4..5
          const uint8x16_t b45 = vdupq_n_u8(0x30);
          const uint8x16_t hl = g == 0 ? vshlq_n_u8(hw[k], 4) : hw[k];
          const uint8x16_t hh = g == 0 ? vshlq_n_u8(hw[k], 2) : vshrq_n_u8(hw[k], 2);
          l = vorrq_u8(l, vandq_u8(hl, b45));
          u = vorrq_u8(u, vandq_u8(hh, b45));
        }
        if constexpr (kCodes == FastCodes::kLevels) {
          lo[k] = vqtbl1q_s8(levels, l);
          hi[k] = vqtbl1q_s8(levels, u);
        } else {
          lo[k] = vreinterpretq_s8_u8(l);
          hi[k] = vreinterpretq_s8_u8(u);
        }
      }
    }
  }

  /// q2_K / q3_K: value vector j (values 4 b + j in byte b) of quarter 2 h + k;
  /// q3_K's high bit at bit 2 (code + 4).
  template <int j>
  KVD_ALWAYS_INLINE uint8x16_t crumbs(int k) const {
    uint8x16_t c;
    if constexpr (j == 0) c = vandq_u8(cw[k], vdupq_n_u8(3));
    else c = vandq_u8(vshrq_n_u8(cw[k], 2 * j), vdupq_n_u8(3));
    if constexpr (kCodes == FastCodes::kCrumbs3) {
      // value 4 b + j's bit: bit j of the byte for even b, j + 4 for odd b
      const int8x16_t sh = {2 - j, -2 - j, 2 - j, -2 - j, 2 - j, -2 - j, 2 - j, -2 - j,
                            2 - j, -2 - j, 2 - j, -2 - j, 2 - j, -2 - j, 2 - j, -2 - j};
      c = vorrq_u8(c, vandq_u8(vshlq_u8(hw[k], sh), vdupq_n_u8(4)));
    }
    return c;
  }
};

/// The rows of a tile: up to 4 (larger M runs tiles of 4 and a remainder).
inline constexpr int kFastNeonRows = 4;
/// Half panels per tile: a whole panel for 1 or 2 rows, a half beyond (8 or 16
/// sums with dot products, twice that without, in 32 q registers).
constexpr int fast_halves_neon(int mr) { return mr <= 2 ? 2 : 1; }

/// The NEON register tile: MR rows x NH half panels from h0 over all of k, y's rows
/// from y (stride ldy) set to the product.
template <class Dec, int MR, int NH>
inline void fast_tile_neon(const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y, long ldy) {
  constexpr int kSub = Dec::kSub, kSubs = Dec::kBlock / kSub, kGroups = kSub / 8;
  constexpr int kOffset = Dec::kFastOffset;
#if defined(KVDECODE_FAST_I8MM)
  constexpr int kPairs = MR / 2;  // row pairs multiplied by smmla
#else
  constexpr int kPairs = 0;
#endif
  const long K = rows.K, nbq = K / kFastBlock;
  const std::size_t pbb = w.panel_block_bytes();
  const long nblk = w.n_blocks();
  const std::int8_t* q0 = rows.q.data() + m0 * K;
  KVD_UNROLL(4) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(4) for (int i = 0; i < 2 * NH; ++i) vst1q_f32(y + r * ldy + h0 * 8 + 4 * i, vdupq_n_f32(0.f));
  for (long b = 0; b < nblk; ++b) {
    const unsigned char* pb[NH];
    KVD_UNROLL(4) for (int i = 0; i < NH; ++i) pb[i] = w.data + (static_cast<std::size_t>((h0 + i) / 2) * nblk + b) * pbb;
    for (int s = 0; s < kSubs; ++s) {
      const long k0 = b * Dec::kBlock + s * kSub;
      FastHalfNeon<Dec> half[NH];
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
        half[i].begin(pb[i], s, static_cast<int>((h0 + i) % 2));
        for (int k = 0; k < 2; ++k) prefetch_quarter_panel_share(pb[i], pbb, s, kSubs, 2 * ((h0 + i) % 2) + k);
      }
      FastSumNeon t[MR][NH][2];
      KVD_UNROLL(4) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
          t[r][i][0].zero();
          t[r][i][1].zero();
        }
#if defined(KVDECODE_FAST_I8MM)
      // rows 0 .. 2 kPairs - 1 in pairs through smmla, an odd last row through sdot
      FastPairSumNeon u[kPairs > 0 ? kPairs : 1][NH][2];
      KVD_UNROLL(2) for (int p = 0; p < kPairs; ++p)
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) {
          u[p][i][0].zero();
          u[p][i][1].zero();
        }
#endif
      static_for<kGroups>([&](auto gg) KVD_ALWAYS_INLINE {
        constexpr int g = decltype(gg)::value;
        int8x16_t lo[NH][2], hi[NH][2];
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i) half[i].template group<g>(lo[i], hi[i]);
#if defined(KVDECODE_FAST_I8MM)
        if constexpr (kPairs > 0) {
          int8x16_t c[NH][2][2];
          KVD_UNROLL(4) for (int i = 0; i < NH; ++i)
            KVD_UNROLL(2) for (int k = 0; k < 2; ++k) fast_pair_codes_neon(lo[i][k], hi[i][k], c[i][k]);
          KVD_UNROLL(2) for (int p = 0; p < kPairs; ++p) {
            // the group's 8 rounded values of rows 2 p and 2 p + 1 (half g % 2 of their 16-byte loads)
            const int64x2_t x0 = vreinterpretq_s64_s8(vld1q_s8(q0 + 2 * p * K + k0 + 16 * (g / 2)));
            const int64x2_t x1 = vreinterpretq_s64_s8(vld1q_s8(q0 + (2 * p + 1) * K + k0 + 16 * (g / 2)));
            const int8x16_t x2 = vreinterpretq_s8_s64(g % 2 == 0 ? vzip1q_s64(x0, x1) : vzip2q_s64(x0, x1));
            KVD_UNROLL(4) for (int i = 0; i < NH; ++i)
              KVD_UNROLL(2) for (int k = 0; k < 2; ++k) fast_mmla_neon(u[p][i][k], c[i][k], x2);
          }
        }
#endif
        KVD_UNROLL(4) for (int r = 2 * kPairs; r < MR; ++r) {
          const int8x16_t x = vld1q_s8(q0 + r * K + k0 + 16 * (g / 2));
          KVD_UNROLL(4) for (int i = 0; i < NH; ++i)
            KVD_UNROLL(2) for (int k = 0; k < 2; ++k) fast_dot2_neon<2 * (g % 2)>(t[r][i][k], lo[i][k], hi[i][k], x);
        }
      });
#if defined(KVDECODE_FAST_I8MM)
      // each paired row's sums where the epilogue reads them (with sdot, total() is a)
      KVD_UNROLL(2) for (int p = 0; p < kPairs; ++p)
        KVD_UNROLL(4) for (int i = 0; i < NH; ++i)
          KVD_UNROLL(2) for (int k = 0; k < 2; ++k) {
            t[2 * p][i][k].a = u[p][i][k].template total<0>();
            t[2 * p + 1][i][k].a = u[p][i][k].template total<1>();
          }
#endif
      KVD_UNROLL(4) for (int i = 0; i < NH; ++i)
        KVD_UNROLL(2) for (int k = 0; k < 2; ++k) {
          Dec dec;
          dec.begin(pb[i], s, static_cast<int>(2 * ((h0 + i) % 2) + k));
          KVD_UNROLL(4) for (int r = 0; r < MR; ++r) {
            const long row = m0 + r, e = kSub == kFastBlock ? row * nbq + k0 / kFastBlock : row * (K / 16) + k0 / 16;
            const float d = rows.d.data()[row * nbq + k0 / kFastBlock];
            int32x4_t I = t[r][i][k].total();
            if constexpr (kOffset != 0) {
              const std::int32_t Q = kSub == kFastBlock ? rows.qsum.data()[e] : rows.qsum16.data()[e];
              I = vsubq_s32(I, vdupq_n_s32(kOffset * Q));
            }
            float* yp = y + r * ldy + (h0 + i) * 8 + 4 * k;
            // the definition's float steps: fma(float(I) * d, D, acc), then fma(d Q_s, N, acc)
            float32x4_t a = vfmaq_f32(vld1q_f32(yp), vmulq_f32(vcvtq_f32_s32(I), vdupq_n_f32(d)), dec.D);
            if constexpr (Dec::kMin) {
              const float xq = kSub == kFastBlock ? rows.xq.data()[e] : rows.xq16.data()[e];
              a = vfmaq_f32(a, vdupq_n_f32(xq), dec.N);
            }
            vst1q_f32(yp, a);
          }
        }
    }
  }
}

/// The tile shapes: up to kFastNeonRows rows, fast_halves_neon(mr) half panels.
struct FastShapeNeon {
  static constexpr int kMaxRows = kFastNeonRows;
  static constexpr int halves(int mr) { return fast_halves_neon(mr); }
};
/// The tile of mr rows and nh half panels (FastShapeNeon).
template <class Dec>
inline void fast_tile_neon_any(int mr, int nh, const FastRows& rows, long m0, const QuantPanels& w, long h0, float* y,
                               long ldy) {
  with_tile_shape<FastShapeNeon>(mr, nh, [&](auto r, auto h) {
    fast_tile_neon<Dec, decltype(r)::value, decltype(h)::value>(rows, m0, w, h0, y, ldy);
  });
}
#endif  // KVDECODE_FAST_NEON

}  // namespace kvd::detail
