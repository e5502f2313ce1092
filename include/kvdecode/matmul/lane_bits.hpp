// Width traits over integer vectors of 32-bit lanes (LaneBits256: AVX2, one half
// panel; LaneBits512: AVX-512, a whole panel with its two halves side by side), and
// the bit steps written once over them that the exact decoders (quant_decode_avx2.hpp,
// quant_decode_avx512.hpp) and the fast mode's tiles (fast_tiles.hpp,
// fast_tiles_512.hpp) share: q6_K's codes as bytes, and a byte of each lane as a float.
#pragma once

#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/simd.hpp"

namespace kvd::detail {

/// vpshufb indices that copy byte g of each 32-bit lane to its 4 bytes, for g = 0..3
/// (16 bytes per 128-bit lane, repeated to 64 bytes).
alignas(64) inline constexpr unsigned char kLaneByteAll[4][64] = {
#define KVD_LANE_BYTE(g)                                                                                           \
  {g, g, g, g, 4 + g, 4 + g, 4 + g, 4 + g, 8 + g, 8 + g, 8 + g, 8 + g, 12 + g, 12 + g, 12 + g, 12 + g,             \
   g, g, g, g, 4 + g, 4 + g, 4 + g, 4 + g, 8 + g, 8 + g, 8 + g, 8 + g, 12 + g, 12 + g, 12 + g, 12 + g,             \
   g, g, g, g, 4 + g, 4 + g, 4 + g, 4 + g, 8 + g, 8 + g, 8 + g, 8 + g, 12 + g, 12 + g, 12 + g, 12 + g,             \
   g, g, g, g, 4 + g, 4 + g, 4 + g, 4 + g, 8 + g, 8 + g, 8 + g, 8 + g, 12 + g, 12 + g, 12 + g, 12 + g}
    KVD_LANE_BYTE(0), KVD_LANE_BYTE(1), KVD_LANE_BYTE(2), KVD_LANE_BYTE(3)
#undef KVD_LANE_BYTE
};

/// vpshufb indices that copy byte j of each 32-bit lane to the lane's byte 0 and
/// clear its other bytes, for j = 0..3 (16 bytes per 128-bit lane, repeated to 64).
alignas(64) inline constexpr unsigned char kLaneByteLow[4][64] = {
#define KVD_LANE_LOW(j)                                                                                           \
  {j, 128, 128, 128, 4 + j, 128, 128, 128, 8 + j, 128, 128, 128, 12 + j, 128, 128, 128,                          \
   j, 128, 128, 128, 4 + j, 128, 128, 128, 8 + j, 128, 128, 128, 12 + j, 128, 128, 128,                          \
   j, 128, 128, 128, 4 + j, 128, 128, 128, 8 + j, 128, 128, 128, 12 + j, 128, 128, 128,                          \
   j, 128, 128, 128, 4 + j, 128, 128, 128, 8 + j, 128, 128, 128, 12 + j, 128, 128, 128}
    KVD_LANE_LOW(0), KVD_LANE_LOW(1), KVD_LANE_LOW(2), KVD_LANE_LOW(3)
#undef KVD_LANE_LOW
};

#if defined(KVDECODE_QUANT_AVX2)
/// 256 bits: one half panel's codes.
struct LaneBits256 {
  using I = __m256i;
  using F = __m256;
  KVD_ALWAYS_INLINE static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  KVD_ALWAYS_INLINE static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  KVD_ALWAYS_INLINE static I set8(char v) { return _mm256_set1_epi8(v); }
  KVD_ALWAYS_INLINE static I set32(int v) { return _mm256_set1_epi32(v); }
  KVD_ALWAYS_INLINE static I shl32(I a, int n) { return _mm256_slli_epi32(a, n); }
  KVD_ALWAYS_INLINE static I shr32(I a, int n) { return _mm256_srli_epi32(a, n); }
  KVD_ALWAYS_INLINE static I shr16(I a, int n) { return _mm256_srli_epi16(a, n); }
  KVD_ALWAYS_INLINE static I load(const unsigned char* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  KVD_ALWAYS_INLINE static I shuffle8(I a, I idx) { return _mm256_shuffle_epi8(a, idx); }
  /// a with bit 4 set in each byte where x has every bit of m's byte (one bit each)
  KVD_ALWAYS_INLINE static I or_bit4_if(I a, I x, I m) {
    return _mm256_or_si256(a, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(x, m), m), _mm256_set1_epi8(16)));
  }
  KVD_ALWAYS_INLINE static F as_float(I a) { return _mm256_castsi256_ps(a); }
  KVD_ALWAYS_INLINE static F to_float(I a) { return _mm256_cvtepi32_ps(a); }
  KVD_ALWAYS_INLINE static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  KVD_ALWAYS_INLINE static F setf(float v) { return _mm256_set1_ps(v); }
};
#endif

#if defined(KVDECODE_QUANT_AVX512)
/// 512 bits: a whole panel's codes (half 0 in the low 256 bits, half 1 in the high).
struct LaneBits512 {
  using I = __m512i;
  using F = __m512;
  KVD_ALWAYS_INLINE static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  KVD_ALWAYS_INLINE static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  KVD_ALWAYS_INLINE static I set8(char v) { return _mm512_set1_epi8(v); }
  KVD_ALWAYS_INLINE static I set32(int v) { return _mm512_set1_epi32(v); }
  KVD_ALWAYS_INLINE static I shl32(I a, int n) { return _mm512_slli_epi32(a, static_cast<unsigned>(n)); }
  KVD_ALWAYS_INLINE static I shr32(I a, int n) { return _mm512_srli_epi32(a, static_cast<unsigned>(n)); }
  KVD_ALWAYS_INLINE static I shr16(I a, int n) { return _mm512_srli_epi16(a, static_cast<unsigned>(n)); }
  KVD_ALWAYS_INLINE static I load(const unsigned char* p) { return _mm512_load_si512(p); }
  KVD_ALWAYS_INLINE static I shuffle8(I a, I idx) { return _mm512_shuffle_epi8(a, idx); }
  /// a with bit 4 set in each byte where x has m's bit (one bit per byte of m; a's bit 4 is clear, so + 16 sets it)
  KVD_ALWAYS_INLINE static I or_bit4_if(I a, I x, I m) {
    return _mm512_mask_add_epi8(a, _mm512_test_epi8_mask(x, m), a, _mm512_set1_epi8(16));
  }
  KVD_ALWAYS_INLINE static F as_float(I a) { return _mm512_castsi512_ps(a); }
  KVD_ALWAYS_INLINE static F to_float(I a) { return _mm512_cvtepi32_ps(a); }
  KVD_ALWAYS_INLINE static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  KVD_ALWAYS_INLINE static F setf(float v) { return _mm512_set1_ps(v); }
};
#endif

/// Code words (8 values of 4 bits per 32-bit lane, value v at bits 4 v) as two byte
/// planes: byte b of each lane of lo holds value 2 b, of hi value 2 b + 1 (bits 0..3).
template <class B>
KVD_ALWAYS_INLINE inline void nibble_bytes(typename B::I wv, typename B::I& lo, typename B::I& hi) {
  const typename B::I m4 = B::set8(15);
  lo = B::and_(wv, m4);
  hi = B::and_(B::shr16(wv, 4), m4);
}

/// The low 16 bits of each lane of v, nibble n -> byte n (bits 0..3).
template <class B>
KVD_ALWAYS_INLINE inline typename B::I nibbles_to_bytes(typename B::I v16) {
  const typename B::I v = B::and_(B::or_(v16, B::shl32(v16, 8)), B::set32(0x00FF00FF));
  return B::and_(B::or_(v, B::shl32(v, 4)), B::set8(15));
}

/// q5: ors group g's 8 high bits (bits 8 g .. 8 g + 7 of the high word) into bit 4
/// of the nibble planes' bytes: lo holds values 8 g + 2 b, hi values 8 g + 2 b + 1.
template <class B>
KVD_ALWAYS_INLINE inline void or_high_bits(typename B::I hword, int g, typename B::I& lo, typename B::I& hi) {
  // the group's byte in all 4 bytes of its lane; byte b then tests bit 2 b (lo) and 2 b + 1 (hi)
  const typename B::I x = B::shuffle8(hword, B::load(kLaneByteAll[g]));
  lo = B::or_bit4_if(lo, x, B::set32(0x40100401));
  hi = B::or_bit4_if(hi, x, B::set32(static_cast<int>(0x80200802u)));
}

/// q6_K: group g (0, 1) of a sub-block as two byte planes, lo (values 8 g + 2 b) and
/// hi (8 g + 2 b + 1), 6-bit unsigned codes (code + 32), from the low word wv and
/// the sub-block's high word hw, whose byte b holds the pairs of values 2 b, 2 b + 1,
/// 8 + 2 b and 9 + 2 b at bits 0, 2, 4 and 6 (q6_high_shift()): each plane's pairs
/// are one shift (none for lo of group 1) and a mask away from bits 4..5.
template <class B>
KVD_ALWAYS_INLINE inline void q6_code_bytes(typename B::I wv, typename B::I hw, int g, typename B::I& lo,
                                            typename B::I& hi) {
  const typename B::I m45 = B::set8(0x30);
  const typename B::I hl = g == 0 ? B::shl32(hw, 4) : hw, hh = g == 0 ? B::shl32(hw, 2) : B::shr32(hw, 2);
  nibble_bytes<B>(wv, lo, hi);
  lo = B::or_(lo, B::and_(hl, m45));
  hi = B::or_(hi, B::and_(hh, m45));
}

/// Byte j of each 32-bit lane of v, an unsigned integer u, as the float u - kBias,
/// exactly: a byte shuffle and a conversion, or with a bias (kBias < 2^23) a byte
/// shuffle, an or and a subtraction: the byte under the exponent of 2^23 reads as
/// 2^23 + u, and (2^23 + u) - (2^23 + kBias) is exact. Both keep off the shift port,
/// which the FMAs share on Intel cores; the or and subtraction keep the bias off it
/// too (a conversion and an integer subtraction would both take it).
template <class B, int j, int kBias>
KVD_ALWAYS_INLINE inline typename B::F lane_byte_float(typename B::I v) {
  if constexpr (kBias == 0) return B::to_float(B::shuffle8(v, B::load(kLaneByteLow[j])));
  const typename B::I u = B::or_(B::shuffle8(v, B::load(kLaneByteLow[j])), B::set32(0x4B000000));
  return B::sub(B::as_float(u), B::setf(8388608.f + kBias));
}

/// The 4-bit (kFive: 5-bit, with the high word hw) code of value kk (0..31) of a
/// group of 32, as a float code - kBias: the planes of its 8 values (nibble_bytes(),
/// or_high_bits(); the same for the 8, so computed once) and its byte
/// (lane_byte_float()). wv: the code word of values 8 (kk / 8) .. + 7.
template <class B, int kk, int kBias, bool kFive>
KVD_ALWAYS_INLINE inline typename B::F nibble_code_float(typename B::I wv, [[maybe_unused]] typename B::I hw) {
  typename B::I lo, hi;
  nibble_bytes<B>(wv, lo, hi);
  if constexpr (kFive) or_high_bits<B>(hw, kk / 8, lo, hi);
  return lane_byte_float<B, (kk % 8) / 2, kBias>(kk % 2 ? hi : lo);
}

}  // namespace kvd::detail
