// The AVX-512 decoders of the block types: for each row of weights/block_types.hpp,
// a struct that reads one panel block (matmul/panel_layout.hpp) one sub-block at a
// time and gives its scales, offsets and the 16 rows' codes as float vectors,
// exactly the factored form of weights/block_formats.hpp. Avx512DecoderOf<Row>
// names each row's decoder, with_decoder() looks one up for a run-time type, and
// factor_panel_block_avx512() is the buffered paths' use of them; the fused tiles
// (quant_fused.hpp) decode in registers. Empty unless KVDECODE_QUANT_AVX512.
#pragma once

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/matmul/lane_bits.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/matmul/static_for.hpp"
#include "kvdecode/weights/block_types.hpp"

namespace kvd::detail {

#if defined(KVDECODE_QUANT_AVX512)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports its own intrinsics' undefined-source idiom as maybe-uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// ---- AVX-512 decoders ------------------------------------------------------------
// Each decoder reads one panel block one sub-block at a time: begin(pb, s)
// loads sub-block s's scales D and (kMin) offsets N for the 16 rows, code<kk>()
// gives the 16 rows' codes at k = s * kSub + kk as floats (the factored form of
// weights/blocks.hpp). They read the panel block at the offsets of quant_layout().

inline __m512 qk_f16x16(const unsigned char* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512i qk_u8x16(const unsigned char* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512i qk_i8x16(const unsigned char* p) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
/// Floats 0..15: vpermps with it turns the low 4 bits of each lane into that float.
inline __m512 qk_iota16() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/// The AVX-512 decoder of a block type's row (weights/block_types.hpp): `type`,
/// specialised after each decoder below. A row without one does not compile here.
template <class Row>
struct Avx512DecoderOf;

struct DecodeQ8_0 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = false;
  const unsigned char* q;
  __m512 D, N;
  void begin(const unsigned char* pb, int) {
    D = qk_f16x16(pb);
    q = pb + 32;
  }
  template <int kk>
  __m512 code() const { return _mm512_cvtepi32_ps(qk_i8x16(q + 16 * kk)); }
};
template <>
struct Avx512DecoderOf<BlockTypeQ8_0> {
  using type = DecodeQ8_0;
};

/// The 4-bit code of value kk (0..31) of a group of 32 from its 4 code words
/// (kNibbles* layout), as 16 lanes of int32.
/// `table` gives the float of each code (qk_iota16(): the code itself).
template <int kk>
inline __m512 qk_nibble_float(const unsigned char* words, __m512 table = qk_iota16()) {
  const __m512i v = _mm512_loadu_si512(words + 64 * (kk / 8));
  return _mm512_permutexvar_ps(kk % 8 == 0 ? v : _mm512_srli_epi32(v, 4 * (kk % 8)), table);
}
/// The 5-bit index of value kk (0..31): its nibble in bits 0..3, bit kk of the
/// high-bit word hw in bit 4, anything above (vpermt2ps reads 5 bits only).
template <int kk>
inline __m512i qk_five_bit_index(const unsigned char* words, __m512i hw) {
  const __m512i lo = _mm512_srli_epi32(_mm512_loadu_si512(words + 64 * (kk / 8)), 4 * (kk % 8));
  __m512i hi;
  if constexpr (kk >= 4)
    hi = _mm512_srli_epi32(hw, kk - 4);
  else
    hi = _mm512_slli_epi32(hw, 4 - kk);
  // bits 0..3 from lo, the rest from hi: (c ? a : b) with c = 15
  return _mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi32(15), 0xE4);
}

/// q4_0 / q4_1: one group of 32. q4_0: (code - 8) d; q4_1: fma(code, d, m); as ggml.
template <bool kHasMin>
struct DecodeQ4 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = kHasMin;
  const unsigned char* q;
  __m512 D, N;
  void begin(const unsigned char* pb, int) {
    D = qk_f16x16(pb);
    N = kMin ? qk_f16x16(pb + 32) : _mm512_setzero_ps();
    q = pb + (kMin ? 64 : 32);
  }
  // q4_0 as ggml writes it, (code - 8) * d: the table holds code - 8. (fma(code, d,
  // -8 d) rounds the same for finite d, but gives +0 where ggml gives -0 (code 8,
  // d < 0) and NaN where ggml gives +-inf (an infinite scale).)
  template <int kk>
  __m512 code() const {
    if constexpr (kMin) return qk_nibble_float<kk>(q);
    return qk_nibble_float<kk>(q, _mm512_sub_ps(qk_iota16(), _mm512_set1_ps(8.f)));
  }
};
template <>
struct Avx512DecoderOf<BlockTypeQ4_0> {
  using type = DecodeQ4<false>;
};
template <>
struct Avx512DecoderOf<BlockTypeQ4_1> {
  using type = DecodeQ4<true>;
};

/// q5_0 / q5_1: code = nibble | bit kk of the row's qh << 4 (q5_0: code - 16, then
/// * d; q5_1: code, then fma with d and m).
template <bool kHasMin>
struct DecodeQ5 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = kHasMin;
  const unsigned char* q;
  __m512 D, N;
  __m512i qh;
  void begin(const unsigned char* pb, int) {
    D = qk_f16x16(pb);
    N = kMin ? qk_f16x16(pb + 32) : _mm512_setzero_ps();
    qh = _mm512_loadu_si512(pb + (kMin ? 64 : 32));
    q = pb + (kMin ? 128 : 96);
  }
  // q5_1: the code's byte from the planes (nibble_code_float(); one Xeon core in L2,
  // M = 1: 16.4 -> 19.6 G multiply-adds/s). q5_0: code - 16 from the table, which
  // takes the bias for free (through the planes it needs an or and a subtraction
  // more: 17.0 -> 15.9).
  template <int kk>
  __m512 code() const {
    if constexpr (kMin) return nibble_code_float<LaneBits512, kk, 0, true>(_mm512_loadu_si512(q + 64 * (kk / 8)), qh);
    const __m512 lo = _mm512_sub_ps(qk_iota16(), _mm512_set1_ps(16.f));
    return _mm512_permutex2var_ps(lo, qk_five_bit_index<kk>(q, qh), qk_iota16());
  }
};
template <>
struct Avx512DecoderOf<BlockTypeQ5_0> {
  using type = DecodeQ5<false>;
};
template <>
struct Avx512DecoderOf<BlockTypeQ5_1> {
  using type = DecodeQ5<true>;
};

/// q2_K: 16 sub-blocks of 16, sub-block s = code word s; y = fma(code, dl, -ml), exact.
struct DecodeQ2_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = true;
  __m512i words;
  __m512 D, N;
  void begin(const unsigned char* pb, int s) {
    const __m512i sc = qk_u8x16(pb + 64 + 16 * s);
    D = _mm512_mul_ps(qk_f16x16(pb), _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15))));
    const __m512 ml = _mm512_mul_ps(qk_f16x16(pb + 32), _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4)));
    N = _mm512_sub_ps(_mm512_set1_ps(-0.f), ml);  // -ml exactly (-0 - x negates every x, zeros included)
    words = _mm512_loadu_si512(pb + 320 + 64 * s);
  }
  template <int kk>
  __m512 code() const {
    // vpermps reads the low 4 bits: the 2-bit code and 2 bits of the next one, so the table repeats 0..3.
    const __m512 table = _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    return _mm512_permutexvar_ps(kk == 0 ? words : _mm512_srli_epi32(words, 2 * kk), table);
  }
};
template <>
struct Avx512DecoderOf<BlockTypeQ2_K> {
  using type = DecodeQ2_K;
};

/// q3_K: 16 sub-blocks of 16, y = dl * code with code = 2-bit - (high bit ? 0 : 4) in [-4, 4):
/// the 2-bit code and the high bit form a 3-bit index into a table of the codes.
struct DecodeQ3_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = false;
  __m512i lw, hw;
  __m512 D, N;
  void begin(const unsigned char* pb, int s) {
    const unsigned char* sc = pb + 32;
    const __m512i lo = s < 8 ? _mm512_and_si512(qk_u8x16(sc + 16 * s), _mm512_set1_epi32(15))
                             : _mm512_srli_epi32(qk_u8x16(sc + 16 * (s - 8)), 4);
    const __m512i hi = _mm512_and_si512(_mm512_srl_epi32(qk_u8x16(sc + 16 * (8 + s % 4)), _mm_cvtsi32_si128(2 * (s / 4))),
                                        _mm512_set1_epi32(3));
    const __m512i v = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
    D = _mm512_mul_ps(qk_f16x16(pb), _mm512_cvtepi32_ps(v));
    lw = _mm512_loadu_si512(pb + 736 + 64 * s);
    // high bits of values 16 s .. 16 s + 15: word s / 2, from bit 16 (s % 2)
    hw = _mm512_srl_epi32(_mm512_loadu_si512(pb + 224 + 64 * (s / 2)), _mm_cvtsi32_si128(16 * (s % 2)));
  }
  template <int kk>
  __m512 code() const {
    const __m512 table = _mm512_setr_ps(-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3);
    const __m512i lo = kk == 0 ? lw : _mm512_srli_epi32(lw, 2 * kk);
    __m512i hi;
    if constexpr (kk >= 2)
      hi = _mm512_srli_epi32(hw, kk - 2);
    else
      hi = _mm512_slli_epi32(hw, 2 - kk);
    // bits 0..1 from lo, bit 2 (and above, ignored but for bit 3, which the table repeats over) from hi
    const __m512i idx = _mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi32(3), 0xE4);
    return _mm512_permutexvar_ps(idx, table);
  }
};
template <>
struct Avx512DecoderOf<BlockTypeQ3_K> {
  using type = DecodeQ3_K;
};

/// q4_K / q5_K's 6-bit scale and min of sub-block s for 16 rows.
inline void qk_k4_scale_min(const unsigned char* sc, int s, __m512i& scale, __m512i& min) {
  const __m512i m63 = _mm512_set1_epi32(63);
  if (s < 4) {
    scale = _mm512_and_si512(qk_u8x16(sc + 16 * s), m63);
    min = _mm512_and_si512(qk_u8x16(sc + 16 * (s + 4)), m63);
  } else {
    const __m512i b = qk_u8x16(sc + 16 * (s + 4));
    scale = _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32(15)),
                            _mm512_slli_epi32(_mm512_srli_epi32(qk_u8x16(sc + 16 * (s - 4)), 6), 4));
    min = _mm512_or_si512(_mm512_srli_epi32(b, 4), _mm512_slli_epi32(_mm512_srli_epi32(qk_u8x16(sc + 16 * s), 6), 4));
  }
}

/// q4_K (kFive = false) and q5_K (true): 8 sub-blocks of 32, y = fma(code, d sc, -(dmin m)).
/// q4_K's code is a table lookup by nibble (qk_nibble_float()); q5_K's is its byte in
/// the planes of its group (nibble_code_float(); one Xeon core in L2, M = 1: 15.8 ->
/// 18.5 G multiply-adds/s against the 32-float table lookup by 5-bit index).
template <bool kFive>
struct DecodeQK4 {
  static constexpr int kBlock = 256, kSub = 32;
  static constexpr bool kMin = true;
  const unsigned char* q;
  __m512 D, N;
  __m512i hw;
  void begin(const unsigned char* pb, int s) {
    __m512i sc, mn;
    qk_k4_scale_min(pb + 64, s, sc, mn);
    D = _mm512_mul_ps(qk_f16x16(pb), _mm512_cvtepi32_ps(sc));
    N = _mm512_sub_ps(_mm512_set1_ps(-0.f), _mm512_mul_ps(qk_f16x16(pb + 32), _mm512_cvtepi32_ps(mn)));  // -m exactly
    codes_at(pb, s);
  }
  /// q (and for q5_K hw): the code words of sub-block s.
  void codes_at(const unsigned char* pb, int s) {
    q = pb + (kFive ? 768 : 256) + 256 * s;
    if constexpr (kFive) hw = _mm512_loadu_si512(pb + 256 + 64 * s);
  }
  /// A panel block's 6-bit scales and mins, all 8 sub-blocks and 16 rows unpacked at
  /// once (sm[s]: the scales of sub-block s, sm[8 + s] its mins, one byte per row), and
  /// its d and dmin: what begin() extracts one sub-block at a time.
  struct BlockScales {
    alignas(64) unsigned char sm[16][16];
    __m512 d, dmin;
  };
  static void block_scales(const unsigned char* pb, BlockScales& b) {
    // bytes 0-3, 4-7 and 8-11 of the 16 rows (byte j of row n at 64 + 16 j + n)
    const __m512i x0 = _mm512_loadu_si512(pb + 64), x1 = _mm512_loadu_si512(pb + 128), x2 = _mm512_loadu_si512(pb + 192);
    const __m512i m63 = _mm512_set1_epi8(63), m15 = _mm512_set1_epi8(15), m48 = _mm512_set1_epi8(48);
    _mm512_store_si512(b.sm[0], _mm512_and_si512(x0, m63));
    _mm512_store_si512(b.sm[8], _mm512_and_si512(x1, m63));
    // bits 6, 7 of bytes s and s + 4 become bits 4, 5 of sub-block s + 4's scale and min
    _mm512_store_si512(b.sm[4], _mm512_or_si512(_mm512_and_si512(x2, m15), _mm512_and_si512(_mm512_srli_epi16(x0, 2), m48)));
    _mm512_store_si512(b.sm[12], _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(x2, 4), m15),
                                                 _mm512_and_si512(_mm512_srli_epi16(x1, 2), m48)));
    b.d = qk_f16x16(pb);
    b.dmin = qk_f16x16(pb + 32);
  }
  /// begin(pb, s) from the block's unpacked scales: the same D, N, q and hw.
  void begin(const BlockScales& b, const unsigned char* pb, int s) {
    D = _mm512_mul_ps(b.d, _mm512_cvtepi32_ps(qk_u8x16(b.sm[s])));
    N = _mm512_sub_ps(_mm512_set1_ps(-0.f), _mm512_mul_ps(b.dmin, _mm512_cvtepi32_ps(qk_u8x16(b.sm[8 + s]))));
    codes_at(pb, s);
  }
  template <int kk>
  __m512 code() const {
    if constexpr (!kFive) {
      return qk_nibble_float<kk>(q);
    } else {
      return nibble_code_float<LaneBits512, kk, 0, true>(_mm512_loadu_si512(q + 64 * (kk / 8)), hw);
    }
  }
};
template <>
struct Avx512DecoderOf<BlockTypeQ4_K> {
  using type = DecodeQK4<false>;
};
template <>
struct Avx512DecoderOf<BlockTypeQ5_K> {
  using type = DecodeQK4<true>;
};

/// q6_K: 16 sub-blocks of 16, y = (d sc) (code - 32), as ggml writes it.
/// Value 16 s + kk: low 4 bits in low word 2 s + kk / 8, high 2 bits in high word s
/// (from bit q6_high_shift(kk)). Each group of 8 values becomes two byte planes of
/// 6-bit codes once (q6_code_bytes(): byte j of each row's lane holds value 2 j, or
/// 2 j + 1), and each value is one byte of the plane's lanes as a float, code - 32
/// exactly (lane_byte_float()): a byte shuffle, an or and a subtraction per code
/// vector, where extracting each value's bits from the words took three shifts, a
/// bit merge and a conversion, the shifts and the conversion on the FMAs' port.
struct DecodeQ6_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = false;
  const unsigned char* ql;
  __m512i hw;
  __m512 D, N;
  void begin(const unsigned char* pb, int s) {
    D = _mm512_mul_ps(qk_f16x16(pb), _mm512_cvtepi32_ps(qk_i8x16(pb + 32 + 16 * s)));
    ql = pb + 288 + 128 * s;
    hw = _mm512_loadu_si512(pb + 2336 + 64 * s);
  }
  template <int kk>
  __m512 code() const {
    __m512i even, odd;  // the same for the 8 values of a group: computed once
    q6_code_bytes<LaneBits512>(_mm512_loadu_si512(ql + 64 * (kk / 8)), hw, kk / 8, even, odd);
    return lane_byte_float<LaneBits512, (kk % 8) / 2, 32>(kk % 2 ? odd : even);
  }
};
template <>
struct Avx512DecoderOf<BlockTypeQ6_K> {
  using type = DecodeQ6_K;
};

/// The 16 int8 levels of a table type as floats, for vpermps.
inline __m512 qk_levels16(const std::int8_t* v) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v))));
}

/// iq4_nl (kE8m0 = false: f16 d) and mxfp4 (true: e8m0 scale): one group of 32,
/// code = the level of its nibble, y = code * D.
template <bool kE8m0>
struct DecodeTable32 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = false;
  const unsigned char* q;
  __m512 D, N;
  void begin(const unsigned char* pb, int) {
    if constexpr (kE8m0) {
      // e8m0_to_fp32_half(): (e - 1) << 23, or 0x00200000 << e for e < 2
      const __m512i e = qk_u8x16(pb);
      const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
      const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
      D = _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(2)), tiny, normal));
    } else {
      D = qk_f16x16(pb);
    }
    N = _mm512_setzero_ps();
    q = pb + (kE8m0 ? 16 : 32);
  }
  template <int kk>
  __m512 code() const { return qk_nibble_float<kk>(q, qk_levels16(kE8m0 ? kMxfp4Values : kIq4nlValues)); }
};
template <>
struct Avx512DecoderOf<BlockTypeIQ4_NL> {
  using type = DecodeTable32<false>;
};
template <>
struct Avx512DecoderOf<BlockTypeMXFP4> {
  using type = DecodeTable32<true>;
};

/// iq4_xs: 8 sub-blocks of 32, D = d (ls - 32) with the 6-bit ls from scales_l's
/// nibble and scales_h's 2 bits, code = iq4_nl's level of its nibble.
struct DecodeIQ4_XS {
  static constexpr int kBlock = 256, kSub = 32;
  static constexpr bool kMin = false;
  const unsigned char* q;
  __m512 D, N;
  void begin(const unsigned char* pb, int s) {
    const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(qk_u8x16(pb + 64 + 16 * (s / 2)), 4 * (s % 2)), _mm512_set1_epi32(15));
    const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32)));
    const __m512i hi = _mm512_and_si512(_mm512_srl_epi32(sh, _mm_cvtsi32_si128(2 * s)), _mm512_set1_epi32(3));
    const __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
    D = _mm512_mul_ps(qk_f16x16(pb), _mm512_cvtepi32_ps(ls));
    N = _mm512_setzero_ps();
    q = pb + 128 + 256 * s;
  }
  template <int kk>
  __m512 code() const { return qk_nibble_float<kk>(q, qk_levels16(kIq4nlValues)); }
};
template <>
struct Avx512DecoderOf<BlockTypeIQ4_XS> {
  using type = DecodeIQ4_XS;
};

/// Panel block pb in the factored form, as factor_panel_block_portable() gives it.
template <class Dec>
KVDECODE_GCC_NOIPA inline void factor_panel_block_avx512(const unsigned char* pb, float* c, float* D, float* N) {
  for (int s = 0; s < Dec::kBlock / Dec::kSub; ++s) {
    Dec dec;
    dec.begin(pb, s);
    _mm512_storeu_ps(D + s * kLanes, dec.D);
    if constexpr (Dec::kMin) _mm512_storeu_ps(N + s * kLanes, dec.N);
    static_for<Dec::kSub>([&](auto kk) KVD_ALWAYS_INLINE { _mm512_storeu_ps(c + (s * Dec::kSub + kk) * kLanes, dec.template code<kk>()); });
  }
}

/// Calls f(Dec{}) with the AVX-512 decoder of block type t (one look-up per call:
/// call it outside the tiles). Asserts that t is a block type.
template <class F>
inline void with_decoder(WeightType t, F&& f) {
  visit_block_column<Avx512DecoderOf>(t, f);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // AVX-512

}  // namespace kvd::detail
