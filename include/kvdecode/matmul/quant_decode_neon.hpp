// The NEON decoders of the block types (aarch64): the AVX2 decoders' arithmetic
// (quant_decode_avx2.hpp) on a quarter of a panel, 4 lanes per q register.
// NeonDecoderOf<Row> names each row's decoder (weights/block_types.hpp),
// with_decoder_neon() looks one up for a run-time type, and
// factor_panel_block_neon() is the buffered paths' use of them. The fused tiles
// (quant_fused.hpp) read panel blocks through them too. Empty unless
// KVDECODE_QUANT_NEON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/matmul/static_for.hpp"
#include "kvdecode/weights/block_types.hpp"

namespace kvd::detail {

#if defined(KVDECODE_QUANT_NEON)
// ---- NEON decoders -----------------------------------------------------------------
// Lanes 4 g .. 4 g + 3 (g = 0 .. 3) of a panel block, one float32x4_t per value.
// begin(pb, s, g) loads sub-block s's scales D and (kMin) offsets N for those 4
// rows; code<kk>() gives their codes at k = s * kSub + kk as floats. kHeavy: the
// decoder keeps a code word in a register besides the words it loads, which shapes
// the tiles. Every code is a small integer converted exactly (ucvtf/scvtf, with a
// fixed-point shift only where the shifted value is the code times a power of two);
// D and N are the same float operations as the scalar factoring (weights/blocks.hpp:
// a product of two floats, a negation), so the same bits as the scalar and x86
// builds. kFastCodes and kFastOffset: how the fast mode's tiles read the codes
// as bytes (panel_layout.hpp's FastCodes; fast_tiles_neon.hpp). Quarter g of a field sits at +8 g bytes in an f16 field (16 x 2 bytes),
// +4 g in a byte field (16 x 1) and +16 g in a code-word field (16 x 4).

inline float32x4_t q4_f16x4(const unsigned char* p) { return vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p))); }
/// Bytes p[0..4) in every 4 bytes of a q register (p need not be aligned).
inline uint8x16_t q4_bytes4x4(const unsigned char* p) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return vreinterpretq_u8_u32(vdupq_n_u32(w));
}
inline uint8x8_t q4_bytes4(const unsigned char* p) { return vget_low_u8(q4_bytes4x4(p)); }
inline uint32x4_t q4_u8x4(const unsigned char* p) { return vmovl_u16(vget_low_u16(vmovl_u8(q4_bytes4(p)))); }
/// Bytes p[0..4) as signed integers, byte j in lane j, as floats: tbl puts byte j at
/// the top of lane j (index 16 reads 0), scvtf #24 divides byte << 24 back exactly.
inline float32x4_t q4_i8x4_float(const unsigned char* p) {
  const uint8x16_t top = {16, 16, 16, 0, 16, 16, 16, 1, 16, 16, 16, 2, 16, 16, 16, 3};
  return vcvtq_n_f32_s32(vreinterpretq_s32_u8(vqtbl1q_u8(q4_bytes4x4(p), top)), 24);
}
inline uint32x4_t q4_words(const unsigned char* p) { return vreinterpretq_u32_u8(vld1q_u8(p)); }
inline uint32x4_t q4_dup(std::uint32_t v) { return vdupq_n_u32(v); }
/// v >> n for a run-time n (0 .. 31).
inline uint32x4_t q4_shr(uint32x4_t v, int n) { return vshlq_u32(v, vdupq_n_s32(-n)); }
/// Bits shift .. shift + width - 1 of each lane of v, at bit 0.
template <int kShift, int kWidth>
inline uint32x4_t q4_bits(uint32x4_t v) {
  if constexpr (kShift + kWidth == 32) {
    return vshrq_n_u32(v, kShift);
  } else if constexpr (kShift == 0) {
    return vandq_u32(v, q4_dup((1u << kWidth) - 1));
  } else {
    return vandq_u32(vshrq_n_u32(v, kShift), q4_dup((1u << kWidth) - 1));
  }
}
/// Bits shift .. shift + width - 1 of each lane of v as a float: the masked field is
/// the code times 2^shift, which ucvtf's fixed-point form divides back exactly.
template <int kShift, int kWidth>
inline float32x4_t q4_field(uint32x4_t v) {
  if constexpr (kShift == 0 || kShift + kWidth == 32) {
    return vcvtq_f32_u32(q4_bits<kShift, kWidth>(v));
  } else {
    return vcvtq_n_f32_u32(vandq_u32(v, q4_dup(((1u << kWidth) - 1) << kShift)), kShift);
  }
}
/// Bit kBit of each lane of v, at bit 0 (the other bits 0).
template <int kBit>
inline uint32x4_t q4_bit(uint32x4_t v) {
  if constexpr (kBit == 31) {
    return vshrq_n_u32(v, 31);
  } else if constexpr (kBit == 0) {
    return vandq_u32(v, q4_dup(1));
  } else {
    return vandq_u32(vshrq_n_u32(v, kBit), q4_dup(1));
  }
}
/// Bits from kShift up of each lane of v at bit 0, high bits left (for vsli below).
template <int kShift>
inline uint32x4_t q4_down(uint32x4_t v) {
  if constexpr (kShift == 0) {
    return v;
  } else {
    return vshrq_n_u32(v, kShift);
  }
}
/// The 4-bit code at bit kShift of each lane of low with hi's bits above it: sli
/// keeps the low 4 bits of the first operand and inserts hi << 4.
template <int kShift>
inline uint32x4_t q4_nibble_with(uint32x4_t low, uint32x4_t hi) {
  return vsliq_n_u32(q4_down<kShift>(low), hi, 4);
}

/// The NEON decoder of a block type's row (weights/block_types.hpp): `type`,
/// specialised after each decoder below.
template <class Row>
struct NeonDecoderOf;

/// q8_0: code kk of the 16 rows is one 16-byte load; tbl puts the quarter's byte j at
/// the top of lane j, scvtf #24 divides it back exactly (the sign included).
struct NeonDecodeQ8_0 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = false;
  static constexpr FastCodes kFastCodes = FastCodes::kBytes;
  static constexpr int kFastOffset = 0;  // signed codes, as sdot / smull take them
  const unsigned char* q;
  float32x4_t D, N;
  uint8x16_t top;
  void begin(const unsigned char* pb, int, int g) {
    D = q4_f16x4(pb + 8 * g);
    N = vdupq_n_f32(0.f);
    q = pb + 32;
    const uint8x16_t top0 = {16, 16, 16, 0, 16, 16, 16, 1, 16, 16, 16, 2, 16, 16, 16, 3};  // 16 + 4 g: still 0
    top = vaddq_u8(top0, vdupq_n_u8(static_cast<std::uint8_t>(4 * g)));
  }
  template <int kk>
  float32x4_t code() const { return vcvtq_n_f32_s32(vreinterpretq_s32_u8(vqtbl1q_u8(vld1q_u8(q + 16 * kk), top)), 24); }
};
template <>
struct NeonDecoderOf<BlockTypeQ8_0> {
  using type = NeonDecodeQ8_0;
};

/// q4_0 (code - 8) / q4_1 (code): one group of 32. The float code - 8 is exact.
template <bool kHasMin>
struct NeonDecodeQ4 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = kHasMin;
  static constexpr bool kHeavy = false;
  static constexpr FastCodes kFastCodes = FastCodes::kNibbles;
  static constexpr int kFastOffset = kHasMin ? 0 : 8;
  const unsigned char* q;
  float32x4_t D, N;
  void begin(const unsigned char* pb, int, int g) {
    D = q4_f16x4(pb + 8 * g);
    N = kMin ? q4_f16x4(pb + 32 + 8 * g) : vdupq_n_f32(0.f);
    q = pb + (kMin ? 64 : 32) + 16 * g;
  }
  template <int kk>
  float32x4_t code() const {
    const float32x4_t c = q4_field<4 * (kk % 8), 4>(q4_words(q + 64 * (kk / 8)));
    return kMin ? c : vsubq_f32(c, vdupq_n_f32(8.f));
  }
};
template <>
struct NeonDecoderOf<BlockTypeQ4_0> {
  using type = NeonDecodeQ4<false>;
};
template <>
struct NeonDecoderOf<BlockTypeQ4_1> {
  using type = NeonDecodeQ4<true>;
};

/// q5_0 (code - 16) / q5_1 (code): nibble | bit kk of the row's qh << 4.
template <bool kHasMin>
struct NeonDecodeQ5 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = kHasMin;
  static constexpr bool kHeavy = true;
  static constexpr FastCodes kFastCodes = FastCodes::kFive;
  static constexpr int kFastOffset = kHasMin ? 0 : 16;
  const unsigned char* q;
  float32x4_t D, N;
  uint32x4_t qh;
  void begin(const unsigned char* pb, int, int g) {
    D = q4_f16x4(pb + 8 * g);
    N = kMin ? q4_f16x4(pb + 32 + 8 * g) : vdupq_n_f32(0.f);
    qh = q4_words(pb + (kMin ? 64 : 32) + 16 * g);
    q = pb + (kMin ? 128 : 96) + 16 * g;
  }
  template <int kk>
  float32x4_t code() const {
    const uint32x4_t c = q4_nibble_with<4 * (kk % 8)>(q4_words(q + 64 * (kk / 8)), q4_bit<kk>(qh));
    if constexpr (kMin) return vcvtq_f32_u32(c);
    return vcvtq_f32_s32(vsubq_s32(vreinterpretq_s32_u32(c), vdupq_n_s32(16)));
  }
};
template <>
struct NeonDecoderOf<BlockTypeQ5_0> {
  using type = NeonDecodeQ5<false>;
};
template <>
struct NeonDecoderOf<BlockTypeQ5_1> {
  using type = NeonDecodeQ5<true>;
};

/// q2_K: 16 sub-blocks of 16, sub-block s = code word s; D = d (sc & 15), N = -(dmin (sc >> 4)).
struct NeonDecodeQ2_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = true;
  static constexpr bool kHeavy = false;
  static constexpr FastCodes kFastCodes = FastCodes::kCrumbs;
  static constexpr int kFastOffset = 0;
  uint32x4_t words;
  float32x4_t D, N;
  void begin(const unsigned char* pb, int s, int g) {
    const uint32x4_t sc = q4_u8x4(pb + 64 + 16 * s + 4 * g);
    D = vmulq_f32(q4_f16x4(pb + 8 * g), vcvtq_f32_u32(vandq_u32(sc, q4_dup(15))));
    N = vnegq_f32(vmulq_f32(q4_f16x4(pb + 32 + 8 * g), vcvtq_f32_u32(vshrq_n_u32(sc, 4))));
    words = q4_words(pb + 320 + 64 * s + 16 * g);
  }
  template <int kk>
  float32x4_t code() const { return q4_field<2 * kk, 2>(words); }
};
template <>
struct NeonDecoderOf<BlockTypeQ2_K> {
  using type = NeonDecodeQ2_K;
};

/// q3_K: 16 sub-blocks of 16, D = d (6-bit scale - 32), code = 2-bit + 4 high bit - 4.
struct NeonDecodeQ3_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = true;
  static constexpr FastCodes kFastCodes = FastCodes::kCrumbs3;
  static constexpr int kFastOffset = 4;
  uint32x4_t lw, hw;
  float32x4_t D, N;
  void begin(const unsigned char* pb, int s, int g) {
    const unsigned char* sc = pb + 32 + 4 * g;
    const uint32x4_t lo = s < 8 ? vandq_u32(q4_u8x4(sc + 16 * s), q4_dup(15)) : vshrq_n_u32(q4_u8x4(sc + 16 * (s - 8)), 4);
    const uint32x4_t hi = vandq_u32(q4_shr(q4_u8x4(sc + 16 * (8 + s % 4)), 2 * (s / 4)), q4_dup(3));
    const int32x4_t v = vsubq_s32(vreinterpretq_s32_u32(vorrq_u32(lo, vshlq_n_u32(hi, 4))), vdupq_n_s32(32));
    D = vmulq_f32(q4_f16x4(pb + 8 * g), vcvtq_f32_s32(v));
    N = vdupq_n_f32(0.f);
    lw = q4_words(pb + 736 + 64 * s + 16 * g);
    // high bits of values 16 s .. 16 s + 15: word s / 2, from bit 16 (s % 2)
    hw = q4_shr(q4_words(pb + 224 + 64 * (s / 2) + 16 * g), 16 * (s % 2));
  }
  template <int kk>
  float32x4_t code() const {
    const uint32x4_t idx = vsliq_n_u32(q4_down<2 * kk>(lw), q4_bit<kk>(hw), 2);  // low 2 bits | high bit << 2
    return vcvtq_f32_s32(vsubq_s32(vreinterpretq_s32_u32(idx), vdupq_n_s32(4)));
  }
};
template <>
struct NeonDecoderOf<BlockTypeQ3_K> {
  using type = NeonDecodeQ3_K;
};

/// q4_K / q5_K's 6-bit scale and min of sub-block s for 4 rows (sc: the scale bytes at +4 g).
inline void q4_k4_scale_min(const unsigned char* sc, int s, uint32x4_t& scale, uint32x4_t& min) {
  const uint32x4_t m63 = q4_dup(63);
  if (s < 4) {
    scale = vandq_u32(q4_u8x4(sc + 16 * s), m63);
    min = vandq_u32(q4_u8x4(sc + 16 * (s + 4)), m63);
  } else {
    const uint32x4_t b = q4_u8x4(sc + 16 * (s + 4));
    scale = vorrq_u32(vandq_u32(b, q4_dup(15)), vshlq_n_u32(vshrq_n_u32(q4_u8x4(sc + 16 * (s - 4)), 6), 4));
    min = vorrq_u32(vshrq_n_u32(b, 4), vshlq_n_u32(vshrq_n_u32(q4_u8x4(sc + 16 * s), 6), 4));
  }
}

/// q4_K (kFive = false) and q5_K (true): 8 sub-blocks of 32, D = d sc, N = -(dmin m).
template <bool kFive>
struct NeonDecodeQK4 {
  static constexpr int kBlock = 256, kSub = 32;
  static constexpr bool kMin = true;
  static constexpr bool kHeavy = kFive;
  static constexpr FastCodes kFastCodes = kFive ? FastCodes::kFive : FastCodes::kNibbles;
  static constexpr int kFastOffset = 0;
  const unsigned char* q;
  float32x4_t D, N;
  uint32x4_t hw;
  void begin(const unsigned char* pb, int s, int g) {
    uint32x4_t sc, mn;
    q4_k4_scale_min(pb + 64 + 4 * g, s, sc, mn);
    D = vmulq_f32(q4_f16x4(pb + 8 * g), vcvtq_f32_u32(sc));
    N = vnegq_f32(vmulq_f32(q4_f16x4(pb + 32 + 8 * g), vcvtq_f32_u32(mn)));
    q = pb + (kFive ? 768 : 256) + 256 * s + 16 * g;
    hw = kFive ? q4_words(pb + 256 + 64 * s + 16 * g) : q4_dup(0);
  }
  template <int kk>
  float32x4_t code() const {
    if constexpr (!kFive) return q4_field<4 * (kk % 8), 4>(q4_words(q + 64 * (kk / 8)));
    return vcvtq_f32_u32(q4_nibble_with<4 * (kk % 8)>(q4_words(q + 64 * (kk / 8)), q4_bit<kk>(hw)));
  }
};
template <>
struct NeonDecoderOf<BlockTypeQ4_K> {
  using type = NeonDecodeQK4<false>;
};
template <>
struct NeonDecoderOf<BlockTypeQ5_K> {
  using type = NeonDecodeQK4<true>;
};

/// q6_K: 16 sub-blocks of 16, D = d sc, code = 6-bit - 32. Value 16 s + kk: low 4
/// bits in low word 2 s + kk / 8, high 2 bits in high word s (from bit q6_high_shift(kk)).
/// The upper high bit is inverted once per sub-block and an
/// arithmetic shift turns the two high bits into high - 2 (sign above), which sli
/// puts above the low 4 bits: the two's complement of the code minus 32.
struct NeonDecodeQ6_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = true;
  static constexpr FastCodes kFastCodes = FastCodes::kSix;
  static constexpr int kFastOffset = 32;
  const unsigned char* ql;
  uint32x4_t hw;
  float32x4_t D, N;
  void begin(const unsigned char* pb, int s, int g) {
    D = vmulq_f32(q4_f16x4(pb + 8 * g), q4_i8x4_float(pb + 32 + 16 * s + 4 * g));
    N = vdupq_n_f32(0.f);
    ql = pb + 288 + 128 * s + 16 * g;
    hw = veorq_u32(q4_words(pb + 2336 + 64 * s + 16 * g), q4_dup(0xAAAAAAAAu));
  }
  template <int kk>
  float32x4_t code() const {
    const int32x4_t top = vreinterpretq_s32_u32(vshlq_n_u32(hw, 30 - q6_high_shift(kk)));
    const uint32x4_t hi = vreinterpretq_u32_s32(vshrq_n_s32(top, 30));
    return vcvtq_f32_s32(vreinterpretq_s32_u32(q4_nibble_with<4 * (kk % 8)>(q4_words(ql + 64 * (kk / 8)), hi)));
  }
};
template <>
struct NeonDecoderOf<BlockTypeQ6_K> {
  using type = NeonDecodeQ6_K;
};

/// The level of each lane's 4-bit code (bits 0..3 of idx, the bits above 0) in a
/// table of 16 int8 levels, as a float: tbl reads the level into each lane's low
/// byte (table[0] into the three above, which the shift drops), scvtf #24 divides
/// level << 24 back exactly.
inline float32x4_t q4_level(uint32x4_t idx, int8x16_t levels) {
  const uint32x4_t b = vreinterpretq_u32_s8(vqtbl1q_s8(levels, vreinterpretq_u8_u32(idx)));
  return vcvtq_n_f32_s32(vreinterpretq_s32_u32(vshlq_n_u32(b, 24)), 24);
}

/// iq4_nl (kE8m0 = false: f16 d) and mxfp4 (true: e8m0 scale): one group of 32,
/// code = the level of its nibble.
template <bool kE8m0>
struct NeonDecodeTable32 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = true;
  static constexpr FastCodes kFastCodes = FastCodes::kLevels;
  static constexpr int kFastOffset = 0;  // the signed levels
  const unsigned char* q;
  float32x4_t D, N;
  int8x16_t levels;
  void begin(const unsigned char* pb, int, int g) {
    if constexpr (kE8m0) {
      // e8m0_to_fp32_half(): (e - 1) << 23, or 0x00200000 << e for e < 2
      const uint32x4_t e = q4_u8x4(pb + 4 * g);
      const uint32x4_t normal = vshlq_n_u32(vsubq_u32(e, q4_dup(1)), 23);
      const uint32x4_t tiny = vshlq_u32(q4_dup(0x00200000u), vreinterpretq_s32_u32(vminq_u32(e, q4_dup(2))));
      D = vreinterpretq_f32_u32(vbslq_u32(vcltq_u32(e, q4_dup(2)), tiny, normal));
    } else {
      D = q4_f16x4(pb + 8 * g);
    }
    N = vdupq_n_f32(0.f);
    q = pb + (kE8m0 ? 16 : 32) + 16 * g;
    levels = vld1q_s8(kE8m0 ? kMxfp4Values : kIq4nlValues);
  }
  template <int kk>
  float32x4_t code() const { return q4_level(q4_bits<4 * (kk % 8), 4>(q4_words(q + 64 * (kk / 8))), levels); }
};
template <>
struct NeonDecoderOf<BlockTypeIQ4_NL> {
  using type = NeonDecodeTable32<false>;
};
template <>
struct NeonDecoderOf<BlockTypeMXFP4> {
  using type = NeonDecodeTable32<true>;
};

/// iq4_xs: 8 sub-blocks of 32, D = d (ls - 32), code = iq4_nl's level of its nibble.
struct NeonDecodeIQ4_XS {
  static constexpr int kBlock = 256, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = true;
  static constexpr FastCodes kFastCodes = FastCodes::kLevels;
  static constexpr int kFastOffset = 0;  // the signed levels
  const unsigned char* q;
  float32x4_t D, N;
  int8x16_t levels;
  void begin(const unsigned char* pb, int s, int g) {
    const uint32x4_t lo = vandq_u32(q4_shr(q4_u8x4(pb + 64 + 16 * (s / 2) + 4 * g), 4 * (s % 2)), q4_dup(15));
    const uint32x4_t sh = vmovl_u16(vreinterpret_u16_u8(vld1_u8(pb + 32 + 8 * g)));
    const uint32x4_t hi = vandq_u32(q4_shr(sh, 2 * s), q4_dup(3));
    const int32x4_t ls = vsubq_s32(vreinterpretq_s32_u32(vorrq_u32(lo, vshlq_n_u32(hi, 4))), vdupq_n_s32(32));
    D = vmulq_f32(q4_f16x4(pb + 8 * g), vcvtq_f32_s32(ls));
    N = vdupq_n_f32(0.f);
    q = pb + 128 + 256 * s + 16 * g;
    levels = vld1q_s8(kIq4nlValues);
  }
  template <int kk>
  float32x4_t code() const { return q4_level(q4_bits<4 * (kk % 8), 4>(q4_words(q + 64 * (kk / 8))), levels); }
};
template <>
struct NeonDecoderOf<BlockTypeIQ4_XS> {
  using type = NeonDecodeIQ4_XS;
};

/// Calls f(Dec{}) with the NEON decoder of block type t (one look-up per call:
/// call it outside the tiles). Asserts that t is a block type.
template <class F>
inline void with_decoder_neon(WeightType t, F&& f) {
  visit_block_column<NeonDecoderOf>(t, f);
}

/// Panel block pb in the factored form, as factor_panel_block_portable() gives it.
template <class Dec>
KVDECODE_GCC_NOIPA inline void factor_panel_block_neon(const unsigned char* pb, float* c, float* D, float* N) {
  for (int s = 0; s < Dec::kBlock / Dec::kSub; ++s)
    for (int g = 0; g < 4; ++g) {
      Dec dec;
      dec.begin(pb, s, g);
      vst1q_f32(D + s * kLanes + 4 * g, dec.D);
      if constexpr (Dec::kMin) vst1q_f32(N + s * kLanes + 4 * g, dec.N);
      static_for<Dec::kSub>(
          [&](auto kk) KVD_ALWAYS_INLINE { vst1q_f32(c + (s * Dec::kSub + kk) * kLanes + 4 * g, dec.template code<kk>()); });
    }
}

/// Prefetches two panel blocks ahead in a panel stream, sub-block s's share of
/// n_subs (never faults); quarter g takes every fourth line from line g.
inline void prefetch_quarter_panel_share(const unsigned char* pb, std::size_t pbb, int s, int n_subs, long g) {
  const std::size_t line0 = pbb * s / n_subs / 64, line1 = (pbb * (s + 1) / n_subs + 63) / 64;
  for (std::size_t l = line0 + static_cast<std::size_t>(g); l < line1; l += 4) prefetch_read_at(pb, 2 * pbb + 64 * l);
}
#endif  // NEON

}  // namespace kvd::detail
