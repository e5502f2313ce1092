// ggml's weight block formats, one block at a time: their byte layouts, the
// dequantization that gives bit for bit the floats ggml's dequantize_row_* gives,
// and the factored form (codes, scales, offsets) the matrix kernels compute with.
// The reference quantizers are in block_quantize.hpp, the table of block types in
// block_types.hpp, and the row-level functions (dequantize_row, ...) in blocks.hpp.
//
// Layouts (QK_K = 256). All multi-byte fields are little-endian, as in ggml
// (which only runs on little-endian hosts); `f16` is an IEEE binary16 bit pattern.
//   q8_0  (32 values,  34 B): f16 d; i8 qs[32]                    y = qs * d
//   q4_0  (32 values,  18 B): f16 d; u8 qs[16]                    y = (nibble - 8) * d
//   q4_1  (32 values,  20 B): f16 d, m; u8 qs[16]                 y = nibble * d + m
//   q5_0  (32 values,  22 B): f16 d; u8 qh[4]; u8 qs[16]          y = (5-bit - 16) * d
//   q5_1  (32 values,  24 B): f16 d, m; u8 qh[4]; u8 qs[16]       y = 5-bit * d + m
//     nibbles: qs[j] low nibble = value j, high nibble = value j + 16; the 5th bit of
//     value j is bit j of the little-endian u32 qh.
//   q2_K (256 values,  84 B): u8 scales[16]; u8 qs[64]; f16 d, dmin
//     16 sub-blocks of 16: scale = d * (scales[s] & 15), min = dmin * (scales[s] >> 4),
//     y = scale * q - min with q the 2-bit code.
//   q3_K (256 values, 110 B): u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
//     16 sub-blocks of 16 with 6-bit signed scales (offset 32), y = (d * sc) * q with
//     q = low 2 bits - (high bit clear ? 4 : 0).
//   q4_K (256 values, 144 B): f16 d, dmin; u8 scales[12]; u8 qs[128]
//   q5_K (256 values, 176 B): f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
//     8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes,
//     y = (d * sc) * q - (dmin * m).
//   q6_K (256 values, 210 B): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
//     16 sub-blocks of 16, y = (d * scale) * (6-bit - 32).
//   iq4_nl (32 values, 18 B): f16 d; u8 qs[16]                    y = d * kIq4nlValues[nibble]
//     q4_0's nibble order; the 16 levels are a fixed non-linear table of int8.
//   iq4_xs (256 values, 136 B): f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]
//     8 sub-blocks of 32, each q4_0's nibble order in its own 16 bytes; 6-bit
//     scale ls = low nibble of scales_l[s/2] (high nibble for odd s) | 2 bits of
//     scales_h at 2s << 4, y = (d * (ls - 32)) * kIq4nlValues[nibble].
//   mxfp4 (32 values, 17 B): u8 e (e8m0); u8 qs[16]               y = kMxfp4Values[nibble] * 2^(e - 128)
//     q4_0's nibble order; OCP MX's e2m1 values, doubled to integers (so the
//     scale is halved: ggml's GGML_E8M0_TO_FP32_HALF). e = 0xFF is OCP MX's NaN.
// Where within a block each value's bits sit is spelled out by the dequantizers
// below (the *_code() helpers), which the kernels' repacking shares.
//
// Exactness: each dequantized value is produced by the same IEEE float
// operations, in the same order, as ggml's C code. Every product in them is
// exact: a scale is an f16 (11 significant bits) times a sub-block scale of at
// most 8 bits, times a code of at most 6 bits, 24 bits at most (iq4_xs: 11 + 5 +
// 7 bits; mxfp4: a power of two times a code of at most 4 bits). So the one
// rounding is the final add or subtract, and computing s * q - m as a fused
// multiply-add gives the same float (the kernels rely on this; a test checks
// every scale and code width).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kvd::detail {

// ---- Scalar conversions ------------------------------------------------------

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// v as `digits` lowercase hex digits.
inline std::string hex_u32(std::uint32_t v, int digits) {
  std::string s(static_cast<std::size_t>(digits), '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = "0123456789abcdef"[v & 15];
  return s;
}

/// IEEE binary16 -> binary32. Exact for every finite value and infinity; a NaN
/// keeps its sign and payload and comes back quiet (as x86's vcvtph2ps does).
inline float fp16_to_fp32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return bits_float(sign | float_bits(v));
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

/// binary32 -> binary16, rounding to nearest even (as ggml's GGML_FP32_TO_FP16:
/// F16C's vcvtps2ph with rounding mode 0). Overflow gives infinity; NaN stays a
/// quiet NaN.
inline std::uint16_t fp32_to_fp16(float f) {
  const std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  std::uint32_t h;
  if (ax < 0x38800000u) {  // below 2^-14: a binary16 subnormal (or zero)
    const std::uint32_t e = ax >> 23;
    if (e == 0) return static_cast<std::uint16_t>(sign);  // float subnormals round to 0
    const std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;  // value = m * 2^(e-150)
    const std::uint32_t s = 126 - e;                       // value / 2^-24 = m >> s
    if (s >= 32) return static_cast<std::uint16_t>(sign);
    h = m >> s;
    const std::uint32_t r = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (r > half || (r == half && (h & 1))) ++h;
  } else {
    h = (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ffu);
    const std::uint32_t r = ax & 0x1fffu;
    if (r > 0x1000u || (r == 0x1000u && (h & 1))) ++h;  // a carry moves into the exponent correctly
  }
  return static_cast<std::uint16_t>(sign | h);
}

/// bfloat16 -> binary32 (exact: the top 16 bits).
inline float bf16_to_fp32(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

/// binary32 -> bfloat16 as ggml rounds it: to nearest even; a NaN is forced quiet.
inline std::uint16_t fp32_to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 64u);
  return static_cast<std::uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// ---- Block layouts -------------------------------------------------------------
// Byte-exact images of ggml's blocks (ggml-common.h). Read them from file bytes
// with load_block() (memcpy: file data need not be aligned for these structs).

inline constexpr int kQK = 32;    ///< values per block of the legacy types
inline constexpr int kQK_K = 256; ///< values per super-block of the k-quants

struct BlockQ8_0 { std::uint16_t d; std::int8_t qs[32]; };
struct BlockQ4_0 { std::uint16_t d; std::uint8_t qs[16]; };
struct BlockQ4_1 { std::uint16_t d, m; std::uint8_t qs[16]; };
struct BlockQ5_0 { std::uint16_t d; std::uint8_t qh[4]; std::uint8_t qs[16]; };
struct BlockQ5_1 { std::uint16_t d, m; std::uint8_t qh[4]; std::uint8_t qs[16]; };
struct BlockQ2_K { std::uint8_t scales[16]; std::uint8_t qs[64]; std::uint16_t d, dmin; };
struct BlockQ3_K { std::uint8_t hmask[32]; std::uint8_t qs[64]; std::uint8_t scales[12]; std::uint16_t d; };
struct BlockQ4_K { std::uint16_t d, dmin; std::uint8_t scales[12]; std::uint8_t qs[128]; };
struct BlockQ5_K { std::uint16_t d, dmin; std::uint8_t scales[12]; std::uint8_t qh[32]; std::uint8_t qs[128]; };
struct BlockQ6_K { std::uint8_t ql[128]; std::uint8_t qh[64]; std::int8_t scales[16]; std::uint16_t d; };

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20, "block layout");
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24, "block layout");
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144, "block layout");
struct BlockIQ4_NL { std::uint16_t d; std::uint8_t qs[16]; };
struct BlockIQ4_XS { std::uint16_t d; std::uint16_t scales_h; std::uint8_t scales_l[4]; std::uint8_t qs[128]; };
struct BlockMXFP4 { std::uint8_t e; std::uint8_t qs[16]; };

static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210, "block layout");
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136 && sizeof(BlockMXFP4) == 17, "block layout");

/// iq4_nl's and iq4_xs's 16 levels (ggml's kvalues_iq4nl), indexed by the 4-bit code.
inline constexpr std::int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};
/// mxfp4's 16 e2m1 values doubled (ggml's kvalues_mxfp4): code bit 3 is the sign,
/// bits 0..2 the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 times two.
inline constexpr std::int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
/// mxfp4's e8m0 byte that OCP MX defines as NaN (ggml reads it as 2^127; refused at load).
inline constexpr std::uint8_t kE8m0NaN = 0xFF;

/// Half the e8m0 scale e, 2^(e - 128), as ggml's GGML_E8M0_TO_FP32_HALF builds it
/// from bits: e = 0 and 1 give the float subnormals 2^-128 and 2^-127.
inline float e8m0_to_fp32_half(std::uint8_t e) {
  return bits_float(e >= 2 ? static_cast<std::uint32_t>(e - 1) << 23 : 0x00200000u << e);
}
/// iq4_xs: the 6-bit scale of sub-block s (0..7) minus its offset 32: in [-32, 32).
inline int iq4xs_scale(const BlockIQ4_XS& b, int s) {
  const int lo = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF, hi = (b.scales_h >> (2 * s)) & 3;
  return (lo | hi << 4) - 32;
}

template <class Block>
inline Block load_block(const unsigned char* p) {
  Block b;
  std::memcpy(&b, p, sizeof(Block));
  return b;
}

// ---- Where each value's bits are ---------------------------------------------
// Value i (0 <= i < block size) of a block, as the small integer code ggml
// multiplies by the block's (sub-)scale. Shared by dequantization and the tests.

/// q4_0 / q4_1: the 4-bit code of value i in [0, 16).
inline int nibble_code(const std::uint8_t* qs, int i) { return i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4; }
/// q5_0 / q5_1: the 5-bit code of value i in [0, 32).
inline int five_bit_code(const std::uint8_t* qs, const std::uint8_t* qh4, int i) {
  const std::uint32_t qh = std::uint32_t(qh4[0]) | std::uint32_t(qh4[1]) << 8 | std::uint32_t(qh4[2]) << 16 |
                           std::uint32_t(qh4[3]) << 24;
  return nibble_code(qs, i) | static_cast<int>(((qh >> i) & 1u) << 4);
}

/// q4_K / q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void k4_scale_min(int j, const std::uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/// q3_K: 6-bit scale of sub-block j (0..15), minus its offset 32: in [-32, 32).
inline int q3k_scale(const std::uint8_t* s, int j) {
  const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | hi << 4) - 32;
}

/// 2-bit fields of q2_K / q3_K: value i sits in byte 32*(i/128) + i%32 at bit
/// shift 2*((i%128)/32).
inline int two_bit_code(const std::uint8_t* qs, int i) {
  return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}
/// q3_K: the high bit of value i is bit (i/32) of hmask[i%32]; the code is in [-4, 4).
inline int q3k_code(const BlockQ3_K& b, int i) {
  return two_bit_code(b.qs, i) - ((b.hmask[i % 32] >> (i / 32)) & 1 ? 0 : 4);
}
/// q4_K: value i sits in byte 32*(i/64) + i%32, low nibble if (i%64) < 32.
inline int q4k_code(const std::uint8_t* qs, int i) {
  const std::uint8_t b = qs[32 * (i / 64) + i % 32];
  return (i % 64) < 32 ? b & 0xF : b >> 4;
}
/// q5_K: q4_K's nibble plus 16 if bit (i/32) of qh[i%32] is set.
inline int q5k_code(const BlockQ5_K& b, int i) {
  return q4k_code(b.qs, i) + ((b.qh[i % 32] >> (i / 32)) & 1 ? 16 : 0);
}
/// q6_K: value i (in half h = i/128, quarter r = (i%128)/32, l = i%32):
/// low nibble from ql[64h + l + 32*(r&1)] (high nibble when r >= 2), top 2 bits
/// from qh[32h + l] >> 2r; minus 32.
inline int q6k_code(const BlockQ6_K& b, int i) {
  const int h = i / 128, r = (i % 128) / 32, l = i % 32;
  const std::uint8_t lo = b.ql[64 * h + l + 32 * (r & 1)];
  const int low = r >= 2 ? lo >> 4 : lo & 0xF;
  return (low | ((b.qh[32 * h + l] >> (2 * r)) & 3) << 4) - 32;
}

/// iq4_xs: the 4-bit code of value i, q4_0's nibble order within each run of 32.
inline int iq4xs_code(const std::uint8_t* qs, int i) { return nibble_code(qs + 16 * (i / 32), i % 32); }

// ---- Blocks a file must not hold ------------------------------------------------
// ggml reads any bits; kvdecode refuses, at load, the new types' blocks whose
// values are not finite floats: iq4_nl/iq4_xs with a non-finite f16 d, mxfp4 with
// e8m0 0xFF (NaN in OCP MX, 2^127 to ggml) or a scale that makes a level overflow.
// The other types read any bits, as they always have.

/// Whether block b's values are all finite floats; if not and `why` is given,
/// *why names the field, its value and the limit. True for the types without a
/// check. Never throws.
template <class Block>
inline bool block_valid(const Block&, std::string* = nullptr) { return true; }
/// Whether Block has a check of its own (a load scans its blocks only then).
template <class Block>
inline constexpr bool kBlockChecked = false;
template <>
inline constexpr bool kBlockChecked<BlockIQ4_NL> = true;
template <>
inline constexpr bool kBlockChecked<BlockIQ4_XS> = true;
template <>
inline constexpr bool kBlockChecked<BlockMXFP4> = true;

inline bool f16_scale_valid(std::uint16_t d, std::string* why) {
  if ((d & 0x7c00u) != 0x7c00u) return true;
  if (why) *why = "its f16 scale d = 0x" + hex_u32(d, 4) + " is " + ((d & 0x3ffu) ? "NaN" : "infinite") +
                  " (the limit is a finite f16, |d| <= 65504)";
  return false;
}
inline bool block_valid(const BlockIQ4_NL& b, std::string* why = nullptr) { return f16_scale_valid(b.d, why); }
inline bool block_valid(const BlockIQ4_XS& b, std::string* why = nullptr) { return f16_scale_valid(b.d, why); }
inline bool block_valid(const BlockMXFP4& b, std::string* why = nullptr) {
  if (b.e == kE8m0NaN) {
    if (why) *why = "its e8m0 scale is 0xff, which OCP MX defines as NaN (the limit is 0xfe)";
    return false;
  }
  if (b.e <= 252) return true;  // level 12 times 2^124 at most: finite without looking at the codes
  int amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(static_cast<int>(kMxfp4Values[nibble_code(b.qs, i)])));
  if (std::isfinite(static_cast<float>(amax) * e8m0_to_fp32_half(b.e))) return true;
  if (why)
    *why = "its e8m0 scale 0x" + hex_u32(b.e, 2) + " times its largest level " + std::to_string(amax) +
           " / 2 overflows float (the limit is 2^128)";
  return false;
}

// ---- Dequantization of one block (ggml's float operation order) ----------------

inline void dequantize_block(const BlockQ8_0& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(b.qs[i]) * d;
}
inline void dequantize_block(const BlockQ4_0& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(nibble_code(b.qs, i) - 8) * d;
}
inline void dequantize_block(const BlockQ4_1& b, float* y) {
  const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
  for (int i = 0; i < 32; ++i) y[i] = (static_cast<float>(nibble_code(b.qs, i)) * d) + m;
}
inline void dequantize_block(const BlockQ5_0& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(five_bit_code(b.qs, b.qh, i) - 16) * d;
}
inline void dequantize_block(const BlockQ5_1& b, float* y) {
  const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
  for (int i = 0; i < 32; ++i) y[i] = (static_cast<float>(five_bit_code(b.qs, b.qh, i)) * d) + m;
}
inline void dequantize_block(const BlockQ2_K& b, float* y) {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  // Sub-block s covers values 16s .. 16s+15.
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(b.scales[s] & 0xF);
    const float ml = dmin * static_cast<float>(b.scales[s] >> 4);
    for (int i = 16 * s; i < 16 * s + 16; ++i) y[i] = (dl * static_cast<float>(two_bit_code(b.qs, i))) - ml;
  }
}
inline void dequantize_block(const BlockQ3_K& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(q3k_scale(b.scales, s));
    for (int i = 16 * s; i < 16 * s + 16; ++i) y[i] = dl * static_cast<float>(q3k_code(b, i));
  }
}
inline void dequantize_block(const BlockQ4_K& b, float* y) {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    k4_scale_min(s, b.scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    for (int i = 32 * s; i < 32 * s + 32; ++i) y[i] = (d1 * static_cast<float>(q4k_code(b.qs, i))) - m1;
  }
}
inline void dequantize_block(const BlockQ5_K& b, float* y) {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    k4_scale_min(s, b.scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    for (int i = 32 * s; i < 32 * s + 32; ++i) y[i] = (d1 * static_cast<float>(q5k_code(b, i))) - m1;
  }
}
inline void dequantize_block(const BlockQ6_K& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int s = 0; s < 16; ++s) {
    const float ds = d * static_cast<float>(b.scales[s]);
    for (int i = 16 * s; i < 16 * s + 16; ++i) y[i] = ds * static_cast<float>(q6k_code(b, i));
  }
}

inline void dequantize_block(const BlockIQ4_NL& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(kIq4nlValues[nibble_code(b.qs, i)]);
}
inline void dequantize_block(const BlockIQ4_XS& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int s = 0; s < 8; ++s) {
    const float dl = d * static_cast<float>(iq4xs_scale(b, s));
    for (int i = 32 * s; i < 32 * s + 32; ++i) y[i] = dl * static_cast<float>(kIq4nlValues[iq4xs_code(b.qs, i)]);
  }
}
inline void dequantize_block(const BlockMXFP4& b, float* y) {
  const float d = e8m0_to_fp32_half(b.e);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(kMxfp4Values[nibble_code(b.qs, i)]) * d;
}

// ---- The factored form the matrix kernels compute with --------------------------
// Within a sub-block of `sub` consecutive values every type's value is
//   w = c * D + N        (N = 0 for the types without a min: D * c exactly)
// with c a small integer code (exact as a float), D the sub-block's scale and N
// its offset, D and N computed by ggml's own float operations. So c * D + N is
// ggml's dequantized value bit for bit (c * D is exact, see the top of this file;
// tests/quant_test.cpp checks every type). The kernels factor D and N out of
// each sub-block's partial sum (kvdecode/matmul/quant_kernels.hpp).
// The sub-block length and whether a type has an offset are its row's kSub and
// kMin (block_types.hpp).

// c: the block's codes; D, N: one per sub-block (N written only for types with a min).
inline void factor_block(const BlockQ8_0& b, float* c, float* D, float*) {
  D[0] = fp16_to_fp32(b.d);
  for (int i = 0; i < 32; ++i) c[i] = static_cast<float>(b.qs[i]);
}
inline void factor_block(const BlockQ4_0& b, float* c, float* D, float*) {
  D[0] = fp16_to_fp32(b.d);
  for (int i = 0; i < 32; ++i) c[i] = static_cast<float>(nibble_code(b.qs, i) - 8);
}
inline void factor_block(const BlockQ4_1& b, float* c, float* D, float* N) {
  D[0] = fp16_to_fp32(b.d);
  N[0] = fp16_to_fp32(b.m);
  for (int i = 0; i < 32; ++i) c[i] = static_cast<float>(nibble_code(b.qs, i));
}
inline void factor_block(const BlockQ5_0& b, float* c, float* D, float*) {
  D[0] = fp16_to_fp32(b.d);
  for (int i = 0; i < 32; ++i) c[i] = static_cast<float>(five_bit_code(b.qs, b.qh, i) - 16);
}
inline void factor_block(const BlockQ5_1& b, float* c, float* D, float* N) {
  D[0] = fp16_to_fp32(b.d);
  N[0] = fp16_to_fp32(b.m);
  for (int i = 0; i < 32; ++i) c[i] = static_cast<float>(five_bit_code(b.qs, b.qh, i));
}
inline void factor_block(const BlockQ2_K& b, float* c, float* D, float* N) {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int s = 0; s < 16; ++s) {
    D[s] = d * static_cast<float>(b.scales[s] & 0xF);
    N[s] = -(dmin * static_cast<float>(b.scales[s] >> 4));  // -ml: c*D + N is ggml's c*D - ml, zero signs included
  }
  for (int i = 0; i < 256; ++i) c[i] = static_cast<float>(two_bit_code(b.qs, i));
}
inline void factor_block(const BlockQ3_K& b, float* c, float* D, float*) {
  const float d = fp16_to_fp32(b.d);
  for (int s = 0; s < 16; ++s) D[s] = d * static_cast<float>(q3k_scale(b.scales, s));
  for (int i = 0; i < 256; ++i) c[i] = static_cast<float>(q3k_code(b, i));
}
inline void factor_k4_scales(const std::uint16_t d16, const std::uint16_t dmin16, const std::uint8_t* scales, float* D,
                             float* N) {
  const float d = fp16_to_fp32(d16), dmin = fp16_to_fp32(dmin16);
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    k4_scale_min(s, scales, sc, m);
    D[s] = d * static_cast<float>(sc);
    N[s] = -(dmin * static_cast<float>(m));  // -m, exactly: c*D + N is ggml's c*D - m
  }
}
inline void factor_block(const BlockQ4_K& b, float* c, float* D, float* N) {
  factor_k4_scales(b.d, b.dmin, b.scales, D, N);
  for (int i = 0; i < 256; ++i) c[i] = static_cast<float>(q4k_code(b.qs, i));
}
inline void factor_block(const BlockQ5_K& b, float* c, float* D, float* N) {
  factor_k4_scales(b.d, b.dmin, b.scales, D, N);
  for (int i = 0; i < 256; ++i) c[i] = static_cast<float>(q5k_code(b, i));
}
inline void factor_block(const BlockQ6_K& b, float* c, float* D, float*) {
  const float d = fp16_to_fp32(b.d);
  for (int s = 0; s < 16; ++s) D[s] = d * static_cast<float>(b.scales[s]);
  for (int i = 0; i < 256; ++i) c[i] = static_cast<float>(q6k_code(b, i));
}
// iq4_nl, iq4_xs, mxfp4: the code c is the table's level (an integer of at most 7
// bits), so c * D is ggml's product with its operands in either order.
inline void factor_block(const BlockIQ4_NL& b, float* c, float* D, float*) {
  D[0] = fp16_to_fp32(b.d);
  for (int i = 0; i < 32; ++i) c[i] = static_cast<float>(kIq4nlValues[nibble_code(b.qs, i)]);
}
inline void factor_block(const BlockIQ4_XS& b, float* c, float* D, float*) {
  const float d = fp16_to_fp32(b.d);
  for (int s = 0; s < 8; ++s) D[s] = d * static_cast<float>(iq4xs_scale(b, s));
  for (int i = 0; i < 256; ++i) c[i] = static_cast<float>(kIq4nlValues[iq4xs_code(b.qs, i)]);
}
inline void factor_block(const BlockMXFP4& b, float* c, float* D, float*) {
  D[0] = e8m0_to_fp32_half(b.e);
  for (int i = 0; i < 32; ++i) c[i] = static_cast<float>(kMxfp4Values[nibble_code(b.qs, i)]);
}

}  // namespace kvd::detail
