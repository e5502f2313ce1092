// The AVX2 decoders of the block types: the AVX-512 decoders' arithmetic
// (quant_decode_avx512.hpp) on half a panel, 8 lanes per vector. Avx2DecoderOf<Row>
// names each row's decoder (weights/block_types.hpp), with_decoder_avx2() looks one
// up for a run-time type, and factor_panel_block_avx2() is the buffered paths' use
// of them. The fused tiles (quant_fused.hpp) and the fast mode's AVX2 tiles
// (fast_tiles.hpp, fast_planes.hpp) read panel blocks through them too.
// Empty unless KVDECODE_QUANT_AVX2.
#pragma once

#include <algorithm>
#include <cstddef>

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/matmul/lane_bits.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/matmul/static_for.hpp"
#include "kvdecode/weights/block_types.hpp"

namespace kvd::detail {

#if defined(KVDECODE_QUANT_AVX2)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// ---- AVX2 decoders -----------------------------------------------------------------
// The AVX-512 decoders' arithmetic on half a panel: lanes 8 h .. 8 h + 7 (h = 0, 1)
// of a panel block, one 8-lane ymm vector per value. begin(pb, s, h) loads
// sub-block s's scales D and (kMin) offsets N for those 8 rows; code<kk>() gives
// their codes at k = s * kSub + kk as floats. kHeavy: the decoder keeps a code
// word in a register besides the words it loads (q5_0, q5_1, q3_K, q5_K, q6_K),
// which shapes the tiles below. Every code is a small integer,
// converted exactly; every code but q8_0's goes through byte planes, a group of 8
// (q2_K, q3_K: 16) values at a time (lane_bits.hpp: one Xeon core in L2, x86-64-v3
// build, M = 1, G multiply-adds/s: q4_K 13.8 -> 15.3, q5_K 9.3 -> 11.0, q6_K 7.7 ->
// 10.6, q5_0 8.4 -> 10.0, q3_K 7.7 -> 8.7, q2_K 12.7 -> 14.1, iq4_nl 8.6 -> 11.8;
// q4_0 level), where extracting each value's bits from its word took a shift and a
// conversion on the port the FMAs use, for the high bits two more shifts, and for a
// table type's level two vpermps and a blend. D and N are the same float operations
// as the scalar factoring (weights/blocks.hpp), so the same bits. Half h of a field sits at
// +16 h bytes in an f16 field (16 x 2 bytes), +8 h in a byte field (16 x 1)
// and +32 h in a code-word field (16 x 4).

inline __m256 q2_f16x8(const unsigned char* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i q2_u8x8(const unsigned char* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i q2_i8x8(const unsigned char* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i q2_words(const unsigned char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256 q2_neg(__m256 v) { return _mm256_sub_ps(_mm256_set1_ps(-0.f), v); }  // -v exactly, zeros included

/// The AVX2 decoder of a block type's row (weights/block_types.hpp): `type`,
/// specialised after each decoder below.
template <class Row>
struct Avx2DecoderOf;

struct Avx2DecodeQ8_0 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = false;
  static constexpr FastCodes kFastCodes = FastCodes::kBytes;
  static constexpr int kFastOffset = 128;  // code + 128 as an unsigned byte (the tiles with vpdpbusd)
  const unsigned char* q;
  __m256 D, N;
  void begin(const unsigned char* pb, int, int h) {
    D = q2_f16x8(pb + 16 * h);
    N = _mm256_setzero_ps();
    q = pb + 32 + 8 * h;
  }
  template <int kk>
  __m256 code() const { return _mm256_cvtepi32_ps(q2_i8x8(q + 16 * kk)); }
};
template <>
struct Avx2DecoderOf<BlockTypeQ8_0> {
  using type = Avx2DecodeQ8_0;
};

/// q4_0 (code - 8) / q4_1 (code): one group of 32.
template <bool kHasMin>
struct Avx2DecodeQ4 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = kHasMin;
  static constexpr bool kHeavy = false;
  static constexpr FastCodes kFastCodes = FastCodes::kNibbles;
  static constexpr int kFastOffset = kHasMin ? 0 : 8;
  const unsigned char* q;
  __m256 D, N;
  void begin(const unsigned char* pb, int, int h) {
    D = q2_f16x8(pb + 16 * h);
    N = kMin ? q2_f16x8(pb + 32 + 16 * h) : _mm256_setzero_ps();
    q = pb + (kMin ? 64 : 32) + 32 * h;
  }
  template <int kk>
  __m256 code() const {
    return nibble_code_float<LaneBits256, kk, kMin ? 0 : 8, false>(q2_words(q + 64 * (kk / 8)), __m256i());
  }
};
template <>
struct Avx2DecoderOf<BlockTypeQ4_0> {
  using type = Avx2DecodeQ4<false>;
};
template <>
struct Avx2DecoderOf<BlockTypeQ4_1> {
  using type = Avx2DecodeQ4<true>;
};

/// q5_0 (code - 16) / q5_1 (code): nibble | bit kk of the row's qh << 4.
template <bool kHasMin>
struct Avx2DecodeQ5 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = kHasMin;
  static constexpr bool kHeavy = true;
  static constexpr FastCodes kFastCodes = FastCodes::kFive;
  static constexpr int kFastOffset = kHasMin ? 0 : 16;
  const unsigned char* q;
  __m256 D, N;
  __m256i qh;
  void begin(const unsigned char* pb, int, int h) {
    D = q2_f16x8(pb + 16 * h);
    N = kMin ? q2_f16x8(pb + 32 + 16 * h) : _mm256_setzero_ps();
    qh = q2_words(pb + (kMin ? 64 : 32) + 32 * h);
    q = pb + (kMin ? 128 : 96) + 32 * h;
  }
  template <int kk>
  __m256 code() const {
    return nibble_code_float<LaneBits256, kk, kMin ? 0 : 16, true>(q2_words(q + 64 * (kk / 8)), qh);
  }
};
template <>
struct Avx2DecoderOf<BlockTypeQ5_0> {
  using type = Avx2DecodeQ5<false>;
};
template <>
struct Avx2DecoderOf<BlockTypeQ5_1> {
  using type = Avx2DecodeQ5<true>;
};

/// q2_K / q3_K: the code word of sub-block s, half h (value v at bits 2 v), and for
/// q3_K the high bits of values 4 n .. 4 n + 3 in bits 0..3 of byte n (hx).
template <bool kThree>
KVD_ALWAYS_INLINE inline void k2_words(const unsigned char* pb, int s, int h, __m256i& wv, __m256i& hx) {
  wv = q2_words(pb + (kThree ? 736 : 320) + 64 * s + 32 * h);
  if constexpr (kThree) {
    const __m256i v = q2_words(pb + 224 + 64 * (s / 2) + 32 * h);
    hx = nibbles_to_bytes<LaneBits256>(s % 2 ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)));
  } else {
    hx = _mm256_setzero_si256();  // unused
  }
}

/// q2_K / q3_K code plane j (0..3): values j, j + 4, j + 8, j + 12 of 8 outputs in
/// their 4 bytes, unsigned (q3_K: code + 4).
template <bool kThree, int j>
KVD_ALWAYS_INLINE inline __m256i k2_code_bytes(__m256i wv, [[maybe_unused]] __m256i hx) {
  __m256i c = _mm256_and_si256(j == 0 ? wv : _mm256_srli_epi32(wv, 2 * j), _mm256_set1_epi8(3));
  if constexpr (kThree) {
    const __m256i hb = j < 2 ? _mm256_slli_epi32(hx, 2 - j) : j == 2 ? hx : _mm256_srli_epi32(hx, 1);
    c = _mm256_or_si256(c, _mm256_and_si256(hb, _mm256_set1_epi8(4)));
  }
  return c;
}

/// q2_K: 16 sub-blocks of 16, sub-block s = code word s; D = d (sc & 15), N = -(dmin (sc >> 4)).
struct Avx2DecodeQ2_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = true;
  static constexpr bool kHeavy = false;
  static constexpr FastCodes kFastCodes = FastCodes::kCrumbs;
  static constexpr int kFastOffset = 0;
  __m256i words;
  __m256 D, N;
  void begin(const unsigned char* pb, int s, int h) {
    const __m256i sc = q2_u8x8(pb + 64 + 16 * s + 8 * h);
    D = _mm256_mul_ps(q2_f16x8(pb + 16 * h), _mm256_cvtepi32_ps(_mm256_and_si256(sc, _mm256_set1_epi32(15))));
    N = q2_neg(_mm256_mul_ps(q2_f16x8(pb + 32 + 16 * h), _mm256_cvtepi32_ps(_mm256_srli_epi32(sc, 4))));
    words = q2_words(pb + 320 + 64 * s + 32 * h);
  }
  /// Value kk: byte kk / 4 of plane kk % 4 (k2_code_bytes(), once per plane).
  template <int kk>
  __m256 code() const {
    return lane_byte_float<LaneBits256, kk / 4, 0>(k2_code_bytes<false, kk % 4>(words, __m256i()));
  }
};
template <>
struct Avx2DecoderOf<BlockTypeQ2_K> {
  using type = Avx2DecodeQ2_K;
};

/// q3_K: 16 sub-blocks of 16, D = d (6-bit scale - 32), code = 2-bit + 4 high bit - 4.
struct Avx2DecodeQ3_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = true;
  static constexpr FastCodes kFastCodes = FastCodes::kCrumbs3;
  static constexpr int kFastOffset = 4;
  __m256i lw, hx;
  __m256 D, N;
  void begin(const unsigned char* pb, int s, int h) {
    const unsigned char* sc = pb + 32 + 8 * h;
    const __m256i lo = s < 8 ? _mm256_and_si256(q2_u8x8(sc + 16 * s), _mm256_set1_epi32(15))
                             : _mm256_srli_epi32(q2_u8x8(sc + 16 * (s - 8)), 4);
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi32(q2_u8x8(sc + 16 * (8 + s % 4)), _mm_cvtsi32_si128(2 * (s / 4))),
                                        _mm256_set1_epi32(3));
    const __m256i v = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    D = _mm256_mul_ps(q2_f16x8(pb + 16 * h), _mm256_cvtepi32_ps(v));
    N = _mm256_setzero_ps();
    k2_words<true>(pb, s, h, lw, hx);
  }
  /// Value kk: byte kk / 4 of plane kk % 4, code + 4 (k2_code_bytes(), once per plane).
  template <int kk>
  __m256 code() const { return lane_byte_float<LaneBits256, kk / 4, 4>(k2_code_bytes<true, kk % 4>(lw, hx)); }
};
template <>
struct Avx2DecoderOf<BlockTypeQ3_K> {
  using type = Avx2DecodeQ3_K;
};

/// q4_K / q5_K's 6-bit scale and min of sub-block s for 8 rows (sc: the scale bytes at +8 h).
inline void q2_k4_scale_min(const unsigned char* sc, int s, __m256i& scale, __m256i& min) {
  const __m256i m63 = _mm256_set1_epi32(63);
  if (s < 4) {
    scale = _mm256_and_si256(q2_u8x8(sc + 16 * s), m63);
    min = _mm256_and_si256(q2_u8x8(sc + 16 * (s + 4)), m63);
  } else {
    const __m256i b = q2_u8x8(sc + 16 * (s + 4));
    scale = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi32(15)),
                            _mm256_slli_epi32(_mm256_srli_epi32(q2_u8x8(sc + 16 * (s - 4)), 6), 4));
    min = _mm256_or_si256(_mm256_srli_epi32(b, 4), _mm256_slli_epi32(_mm256_srli_epi32(q2_u8x8(sc + 16 * s), 6), 4));
  }
}

/// q4_K (kFive = false) and q5_K (true): 8 sub-blocks of 32, D = d sc, N = -(dmin m).
template <bool kFive>
struct Avx2DecodeQK4 {
  static constexpr int kBlock = 256, kSub = 32;
  static constexpr bool kMin = true;
  static constexpr bool kHeavy = kFive;
  static constexpr FastCodes kFastCodes = kFive ? FastCodes::kFive : FastCodes::kNibbles;
  static constexpr int kFastOffset = 0;
  const unsigned char* q;
  __m256 D, N;
  __m256i hw;
  void begin(const unsigned char* pb, int s, int h) {
    __m256i sc, mn;
    q2_k4_scale_min(pb + 64 + 8 * h, s, sc, mn);
    D = _mm256_mul_ps(q2_f16x8(pb + 16 * h), _mm256_cvtepi32_ps(sc));
    N = q2_neg(_mm256_mul_ps(q2_f16x8(pb + 32 + 16 * h), _mm256_cvtepi32_ps(mn)));
    codes_at(pb, s, h);
  }
  /// q (and for q5_K hw): the code words of sub-block s, half h.
  void codes_at(const unsigned char* pb, int s, int h) {
    q = pb + (kFive ? 768 : 256) + 256 * s + 32 * h;
    hw = kFive ? q2_words(pb + 256 + 64 * s + 32 * h) : _mm256_setzero_si256();
  }
  /// A panel block's 6-bit scales and mins, all 8 sub-blocks and 16 rows unpacked at
  /// once (sm[s]: the scales of sub-block s, sm[8 + s] its mins, one byte per row), and
  /// its d and dmin per half: what begin() extracts 8 rows and one sub-block at a time.
  struct BlockScales {
    alignas(32) unsigned char sm[16][16];
    __m256 d[2], dmin[2];
  };
  static void block_scales(const unsigned char* pb, BlockScales& b) {
    // bytes 0-1, 2-3, ..., 10-11 of the 16 rows (byte j of row n at 64 + 16 j + n)
    auto bytes = [&](int j) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 64 + 16 * j)); };
    auto put = [&](int i, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(b.sm[i]), v); };
    const __m256i m63 = _mm256_set1_epi8(63), m15 = _mm256_set1_epi8(15), m48 = _mm256_set1_epi8(48);
    for (int j = 0; j < 4; j += 2) {
      const __m256i lo = bytes(j), mid = bytes(j + 4), hi = bytes(j + 8);
      put(j, _mm256_and_si256(lo, m63));
      put(8 + j, _mm256_and_si256(mid, m63));
      // bits 6, 7 of bytes s and s + 4 become bits 4, 5 of sub-block s + 4's scale and min
      put(j + 4, _mm256_or_si256(_mm256_and_si256(hi, m15), _mm256_and_si256(_mm256_srli_epi16(lo, 2), m48)));
      put(12 + j, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(hi, 4), m15),
                                  _mm256_and_si256(_mm256_srli_epi16(mid, 2), m48)));
    }
    for (int h = 0; h < 2; ++h) {
      b.d[h] = q2_f16x8(pb + 16 * h);
      b.dmin[h] = q2_f16x8(pb + 32 + 16 * h);
    }
  }
  /// begin(pb, s, h) from the block's unpacked scales: the same D, N, q and hw.
  void begin(const BlockScales& b, const unsigned char* pb, int s, int h) {
    D = _mm256_mul_ps(b.d[h], _mm256_cvtepi32_ps(q2_u8x8(b.sm[s] + 8 * h)));
    N = q2_neg(_mm256_mul_ps(b.dmin[h], _mm256_cvtepi32_ps(q2_u8x8(b.sm[8 + s] + 8 * h))));
    codes_at(pb, s, h);
  }
  template <int kk>
  __m256 code() const {
    return nibble_code_float<LaneBits256, kk, 0, kFive>(q2_words(q + 64 * (kk / 8)), hw);
  }
};
template <>
struct Avx2DecoderOf<BlockTypeQ4_K> {
  using type = Avx2DecodeQK4<false>;
};
template <>
struct Avx2DecoderOf<BlockTypeQ5_K> {
  using type = Avx2DecodeQK4<true>;
};

/// q6_K: 16 sub-blocks of 16, D = d sc, code = 6-bit - 32. Value 16 s + kk: low 4
/// bits in low word 2 s + kk / 8, high 2 bits in high word s (from bit q6_high_shift(kk)).
/// As in the AVX-512 decoder, each group of 8 values becomes two byte planes of 6-bit
/// codes (q6_code_bytes(), once per group: byte j of each row's lane holds value
/// 2 j, or 2 j + 1), and each value is one byte of the plane's lanes as a float
/// (lane_byte_float()): 3 operations per code vector, against 6 to 7 extracting the
/// low and high bits of each value from the words.
struct Avx2DecodeQ6_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = true;
  static constexpr FastCodes kFastCodes = FastCodes::kSix;
  static constexpr int kFastOffset = 32;
  const unsigned char* ql;
  __m256i hw;
  __m256 D, N;
  void begin(const unsigned char* pb, int s, int h) {
    D = _mm256_mul_ps(q2_f16x8(pb + 16 * h), _mm256_cvtepi32_ps(q2_i8x8(pb + 32 + 16 * s + 8 * h)));
    N = _mm256_setzero_ps();
    ql = pb + 288 + 128 * s + 32 * h;
    hw = q2_words(pb + 2336 + 64 * s + 32 * h);
  }
  template <int kk>
  __m256 code() const {
    __m256i even, odd;  // the same for the 8 values of a group: computed once
    q6_code_bytes<LaneBits256>(q2_words(ql + 64 * (kk / 8)), hw, kk / 8, even, odd);
    return lane_byte_float<LaneBits256, (kk % 8) / 2, 32>(kk % 2 ? odd : even);
  }
};
template <>
struct Avx2DecoderOf<BlockTypeQ6_K> {
  using type = Avx2DecodeQ6_K;
};

/// A table type's 16 int8 levels + add (modulo 256) as bytes, in both 128-bit lanes:
/// vpshufb by a plane of nibbles gives each value's level + add.
inline __m256i q2_level_bytes(const std::int8_t* v, int add) {
  const __m128i b = _mm_add_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)), _mm_set1_epi8(static_cast<char>(add)));
  return _mm256_broadcastsi128_si256(b);
}
/// Value kk's level (0..31 of a group of 32) as a float: its nibble's byte in the planes
/// of its 8 values (nibble_bytes(), once per group), looked up in levels (+ 128) and
/// converted without the bias (lane_byte_float()).
template <int kk>
inline __m256 q2_level_float(const unsigned char* q, __m256i levels) {
  __m256i lo, hi;
  nibble_bytes<LaneBits256>(q2_words(q + 64 * (kk / 8)), lo, hi);
  return lane_byte_float<LaneBits256, (kk % 8) / 2, 128>(_mm256_shuffle_epi8(levels, kk % 2 ? hi : lo));
}

/// iq4_nl (kE8m0 = false: f16 d) and mxfp4 (true: e8m0 scale): one group of 32,
/// code = the level of its nibble.
template <bool kE8m0>
struct Avx2DecodeTable32 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = true;
  static constexpr FastCodes kFastCodes = FastCodes::kLevels;
  static constexpr int kFastOffset = 0;
  static const std::int8_t* levels() { return kE8m0 ? kMxfp4Values : kIq4nlValues; }
  const unsigned char* q;
  __m256 D, N;
  __m256i table;  // q2_level_bytes(levels(), 128)
  void begin(const unsigned char* pb, int, int h) {
    if constexpr (kE8m0) {
      // e8m0_to_fp32_half(): (e - 1) << 23, or 0x00200000 << e for e < 2
      const __m256i e = q2_u8x8(pb + 8 * h);
      const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
      const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
      const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
      D = _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, small));
    } else {
      D = q2_f16x8(pb + 16 * h);
    }
    N = _mm256_setzero_ps();
    q = pb + (kE8m0 ? 16 : 32) + 32 * h;
    table = q2_level_bytes(levels(), 128);
  }
  template <int kk>
  __m256 code() const { return q2_level_float<kk>(q, table); }
};
template <>
struct Avx2DecoderOf<BlockTypeIQ4_NL> {
  using type = Avx2DecodeTable32<false>;
};
template <>
struct Avx2DecoderOf<BlockTypeMXFP4> {
  using type = Avx2DecodeTable32<true>;
};

/// iq4_xs: 8 sub-blocks of 32, D = d (ls - 32), code = iq4_nl's level of its nibble.
struct Avx2DecodeIQ4_XS {
  static constexpr int kBlock = 256, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = true;
  static constexpr FastCodes kFastCodes = FastCodes::kLevels;
  static constexpr int kFastOffset = 0;
  static const std::int8_t* levels() { return kIq4nlValues; }
  const unsigned char* q;
  __m256 D, N;
  __m256i table;  // q2_level_bytes(levels(), 128)
  void begin(const unsigned char* pb, int s, int h) {
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi32(q2_u8x8(pb + 64 + 16 * (s / 2) + 8 * h), _mm_cvtsi32_si128(4 * (s % 2))),
                                        _mm256_set1_epi32(15));
    const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + 32 + 16 * h)));
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi32(sh, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    D = _mm256_mul_ps(q2_f16x8(pb + 16 * h), _mm256_cvtepi32_ps(ls));
    N = _mm256_setzero_ps();
    q = pb + 128 + 256 * s + 32 * h;
    table = q2_level_bytes(levels(), 128);
  }
  template <int kk>
  __m256 code() const { return q2_level_float<kk>(q, table); }
};
template <>
struct Avx2DecoderOf<BlockTypeIQ4_XS> {
  using type = Avx2DecodeIQ4_XS;
};

/// Calls f(Dec{}) with the AVX2 decoder of block type t (one look-up per call:
/// call it outside the tiles). Asserts that t is a block type.
template <class F>
inline void with_decoder_avx2(WeightType t, F&& f) {
  visit_block_column<Avx2DecoderOf>(t, f);
}

/// Panel block pb in the factored form, as factor_panel_block_portable() gives it.
template <class Dec>
KVDECODE_GCC_NOIPA inline void factor_panel_block_avx2(const unsigned char* pb, float* c, float* D, float* N) {
  for (int s = 0; s < Dec::kBlock / Dec::kSub; ++s)
    for (int h = 0; h < 2; ++h) {
      Dec dec;
      dec.begin(pb, s, h);
      _mm256_storeu_ps(D + s * kLanes + 8 * h, dec.D);
      if constexpr (Dec::kMin) _mm256_storeu_ps(N + s * kLanes + 8 * h, dec.N);
      static_for<Dec::kSub>(
          [&](auto kk) KVD_ALWAYS_INLINE { _mm256_storeu_ps(c + (s * Dec::kSub + kk) * kLanes + 8 * h, dec.template code<kk>()); });
    }
}

/// How far ahead of the 512-bit fast tiles their prefetches run: about 8 KiB of each
/// panel stream (at least two panel blocks), into L2 (prefetcht1). Zen 4, 1.1B shape,
/// fast-mode decode: against two blocks into L1, 1.4x at 1 thread and 1.1-1.2x at 2
/// (Q4_0, Q4_K_M, Q8_0); 4 and 16 KiB gave the same as 8.
inline constexpr std::size_t kStreamAheadBytes = 8192;
inline std::size_t panel_blocks_ahead(std::size_t pbb) { return std::max<std::size_t>(2, kStreamAheadBytes / pbb); }

/// The cache lines [line0, line1) of a panel block of pbb bytes that sub-block s of
/// n_subs prefetches: its share, so that the prefetches keep pace with the reads.
inline void panel_share_lines(std::size_t pbb, int s, int n_subs, std::size_t& line0, std::size_t& line1) {
  line0 = pbb * s / n_subs / 64;
  line1 = (pbb * (s + 1) / n_subs + 63) / 64;
}

/// Prefetches into L2 sub-block s's share (of n_subs) of the panel block at byte `at` of
/// the weights w (never faults, so `at` may lie past their end).
inline void prefetch_panel_block_share(const unsigned char* w, std::size_t at, std::size_t pbb, int s, int n_subs) {
  std::size_t line0, line1;
  panel_share_lines(pbb, s, n_subs, line0, line1);
  for (std::size_t l = line0; l < line1; ++l) prefetch_l2_at(w, at + 64 * l);
}

/// Prefetches two panel blocks ahead in a panel stream, sub-block s's share of
/// n_subs (never faults); half h takes the even lines, the other half the odd ones.
/// (Into L1: the 256-bit tiles lost up to 2.5x in decode with prefetch_panel_block_share's
/// distance and L2 hint on Zen 4.)
inline void prefetch_half_panel_share(const unsigned char* pb, std::size_t pbb, int s, int n_subs, long h) {
  std::size_t line0, line1;
  panel_share_lines(pbb, s, n_subs, line0, line1);
  for (std::size_t l = line0 + static_cast<std::size_t>(h); l < line1; l += 2) prefetch_read_at(pb, 2 * pbb + 64 * l);
}

/// How far ahead of the 256-bit fast tiles their prefetches run: about 4 KiB of the
/// panel stream, at least two panel blocks. Intel Xeon guest (family 6 model 207),
/// -march=x86-64-v3, fast-mode decode of the 1.1B shape, 2 threads, tokens/s, two
/// blocks -> 4 KiB: Q8_0 (544-byte blocks) 19.8-20.8 -> 22.2-23.1, Q4_0 (288)
/// 38.8-40.8 -> 40.7-43.4; 2 KiB about the same as 4; Q4_K_M (2,304) 39.8-40.2 at two
/// blocks and 36.3-36.6 at five (11.5 KiB), Q5_K_M and Q6_K level at three to four.
inline constexpr std::size_t kTileAheadBytes = 4096;

/// prefetch_half_panel_share() for both halves of the panel block at pb at once, with
/// its size a constant and kTileAheadBytes ahead: the lines from the one holding the
/// share's first byte, as many as a share can touch, in straight-line code (the share's
/// bounds and a loop per half panel took as many instructions as the prefetches).
template <std::size_t kPbb, int kSubs>
KVD_ALWAYS_INLINE inline void prefetch_panel_share(const unsigned char* pb, int s) {
  constexpr int kLines = static_cast<int>((kPbb / kSubs + 63) / 64) + 1;
  constexpr std::size_t kAhead = std::max<std::size_t>(2, kTileAheadBytes / kPbb) * kPbb;
  const std::size_t at = kAhead + (kPbb * static_cast<std::size_t>(s) / kSubs) / 64 * 64;
  static_for<kLines>([&](auto l) KVD_ALWAYS_INLINE { prefetch_read_at(pb, at + 64 * static_cast<std::size_t>(decltype(l)::value)); });
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // AVX2

}  // namespace kvd::detail
