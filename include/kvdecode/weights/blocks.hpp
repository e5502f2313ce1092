// ggml's weight block formats: their byte layouts, dequantization that gives
// bit for bit the floats ggml's dequantize_row_* gives, and reference
// quantizers that minimise each block's error the way ggml's do.
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
// Where within a block each value's bits sit is spelled out by the dequantizers
// below (the *_code() helpers), which the kernels' repacking shares.
//
// Exactness: each dequantized value is produced by the same IEEE float
// operations, in the same order, as ggml's C code. Every product in them is
// exact: a scale is an f16 (11 significant bits) times a sub-block scale of at
// most 8 bits, times a code of at most 6 bits, 24 bits at most. So the one
// rounding is the final add or subtract, and computing s * q - m as a fused
// multiply-add gives the same float (the kernels rely on this; a test checks
// every scale and code width).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kvdecode/error.hpp"
#include "kvdecode/weights/weight_type.hpp"

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
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210, "block layout");

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

template <class Block, int kBlockValues>
inline void dequantize_blocks(const unsigned char* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n / kBlockValues; ++i)
    dequantize_block(load_block<Block>(src + i * sizeof(Block)), dst + i * kBlockValues);
}

/// Throws ConfigError unless t is a type quantize_row/dequantize_row handle and
/// n is a whole number of its blocks.
inline void check_row(WeightType t, std::int64_t n, bool dequantize) {
  const char* what = dequantize ? "dequantize" : "quantize";
  const auto tr = weight_type_traits(t);
  const bool ok = t == WeightType::kF32 || t == WeightType::kF16 || t == WeightType::kBF16 ||
                  t == WeightType::kQ8_0 || t == WeightType::kQ4_0 || t == WeightType::kQ4_1 ||
                  t == WeightType::kQ5_0 || t == WeightType::kQ5_1 || t == WeightType::kQ2_K ||
                  t == WeightType::kQ3_K || t == WeightType::kQ4_K || t == WeightType::kQ5_K ||
                  t == WeightType::kQ6_K || (t == WeightType::kF64 && dequantize);
  if (!ok) throw ConfigError(msg("cannot ", what, " weight type ", weight_type_name(t)));
  if (n < 0 || n % tr.block_size != 0)
    throw ConfigError(msg("cannot ", what, " a row of ", n, " values as ", tr.name, ": not a multiple of its block size ",
                          tr.block_size));
}

/// dst[0..n) = the values of `n` consecutive weights of type t at src, exactly
/// as ggml's dequantize_row_* (or its f16/bf16/f32 conversion) gives them.
/// Throws ConfigError (dst untouched) if t has no dequantization here or n is
/// not a multiple of its block size.
inline void dequantize_row(WeightType t, const void* src, float* dst, std::int64_t n) {
  check_row(t, n, true);
  const auto* p = static_cast<const unsigned char*>(src);
  switch (t) {
    case WeightType::kF32: std::memcpy(dst, p, static_cast<std::size_t>(n) * 4); return;
    case WeightType::kF64:
      for (std::int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    case WeightType::kF16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(static_cast<std::uint16_t>(p[2 * i] | p[2 * i + 1] << 8));
      return;
    case WeightType::kBF16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(static_cast<std::uint16_t>(p[2 * i] | p[2 * i + 1] << 8));
      return;
    case WeightType::kQ8_0: return dequantize_blocks<BlockQ8_0, kQK>(p, dst, n);
    case WeightType::kQ4_0: return dequantize_blocks<BlockQ4_0, kQK>(p, dst, n);
    case WeightType::kQ4_1: return dequantize_blocks<BlockQ4_1, kQK>(p, dst, n);
    case WeightType::kQ5_0: return dequantize_blocks<BlockQ5_0, kQK>(p, dst, n);
    case WeightType::kQ5_1: return dequantize_blocks<BlockQ5_1, kQK>(p, dst, n);
    case WeightType::kQ2_K: return dequantize_blocks<BlockQ2_K, kQK_K>(p, dst, n);
    case WeightType::kQ3_K: return dequantize_blocks<BlockQ3_K, kQK_K>(p, dst, n);
    case WeightType::kQ4_K: return dequantize_blocks<BlockQ4_K, kQK_K>(p, dst, n);
    case WeightType::kQ5_K: return dequantize_blocks<BlockQ5_K, kQK_K>(p, dst, n);
    case WeightType::kQ6_K: return dequantize_blocks<BlockQ6_K, kQK_K>(p, dst, n);
    default: break;
  }
}

// ---- The factored form the matrix kernels compute with --------------------------
// Within a sub-block of `sub` consecutive values every type's value is
//   w = c * D + N        (N = 0 for the types without a min: D * c exactly)
// with c a small integer code (exact as a float), D the sub-block's scale and N
// its offset, D and N computed by ggml's own float operations. So c * D + N is
// ggml's dequantized value bit for bit (c * D is exact, see the top of this file;
// tests/quant_test.cpp checks every type). The kernels factor D and N out of
// each sub-block's partial sum (kvdecode/matmul/quant_kernels.hpp).

/// Sub-block length and whether the type has an offset N.
struct QuantFactoring {
  int sub = 0;
  bool has_min = false;
};
inline QuantFactoring quant_factoring(WeightType t) {
  switch (t) {
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ5_0: return {32, false};
    case WeightType::kQ4_1:
    case WeightType::kQ5_1: return {32, true};
    case WeightType::kQ2_K: return {16, true};
    case WeightType::kQ3_K:
    case WeightType::kQ6_K: return {16, false};
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: return {32, true};
    default: return {};
  }
}

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

template <class Block, int kBlockValues>
inline void factor_blocks(const unsigned char* src, float* c, float* D, float* N, std::int64_t n, int sub) {
  const int per = kBlockValues / sub;
  for (std::int64_t i = 0; i < n / kBlockValues; ++i)
    factor_block(load_block<Block>(src + i * sizeof(Block)), c + i * kBlockValues, D + i * per, N ? N + i * per : nullptr);
}

/// The factored form of `n` consecutive weights of block type t at src: c[0..n)
/// the codes, D[0..n/sub) the scales and (types with a min) N[0..n/sub) the
/// offsets, sub = quant_factoring(t).sub. N may be null for a type without a min.
/// Throws ConfigError (outputs untouched) for a type that is not a block type
/// or n not a multiple of its block size.
inline void factor_row(WeightType t, const void* src, float* c, float* D, float* N, std::int64_t n) {
  const QuantFactoring f = quant_factoring(t);
  if (f.sub == 0) throw ConfigError(msg("weight type ", weight_type_name(t), " has no factored form"));
  check_row(t, n, true);
  const auto* p = static_cast<const unsigned char*>(src);
  switch (t) {
    case WeightType::kQ8_0: return factor_blocks<BlockQ8_0, kQK>(p, c, D, N, n, f.sub);
    case WeightType::kQ4_0: return factor_blocks<BlockQ4_0, kQK>(p, c, D, N, n, f.sub);
    case WeightType::kQ4_1: return factor_blocks<BlockQ4_1, kQK>(p, c, D, N, n, f.sub);
    case WeightType::kQ5_0: return factor_blocks<BlockQ5_0, kQK>(p, c, D, N, n, f.sub);
    case WeightType::kQ5_1: return factor_blocks<BlockQ5_1, kQK>(p, c, D, N, n, f.sub);
    case WeightType::kQ2_K: return factor_blocks<BlockQ2_K, kQK_K>(p, c, D, N, n, f.sub);
    case WeightType::kQ3_K: return factor_blocks<BlockQ3_K, kQK_K>(p, c, D, N, n, f.sub);
    case WeightType::kQ4_K: return factor_blocks<BlockQ4_K, kQK_K>(p, c, D, N, n, f.sub);
    case WeightType::kQ5_K: return factor_blocks<BlockQ5_K, kQK_K>(p, c, D, N, n, f.sub);
    case WeightType::kQ6_K: return factor_blocks<BlockQ6_K, kQK_K>(p, c, D, N, n, f.sub);
    default: break;
  }
}

// ---- Reference quantizers --------------------------------------------------------
// Each block's codes and scales come from a small search that minimises the
// block's (weighted) squared error, as ggml's reference quantizers do; the
// scales are then rounded to their stored precision and the codes chosen again
// for the stored scales. They need not reproduce llama.cpp's bytes.

/// Round to nearest, ties to even (|x| < 2^22), as ggml's nearest_int.
inline int nearest_int(float x) {
  const float v = x + 12582912.f;  // 1.5 * 2^23: the integer lands in the low mantissa bits
  return static_cast<int>(float_bits(v) & 0x7fffffu) - 0x400000;
}

inline constexpr float kGroupMaxEps = 1e-15f;

/// Symmetric codes l in [-nmax, nmax) with x ~ scale * l, returned scale and
/// codes L[i] = l + nmax. Tries the scales that put the largest |x| at
/// -(nmax + 0.1 t), t in [-9, 9], and keeps the least weighted squared error
/// (weights w; w == nullptr: x^2). Returns 0 with all-zero codes for a zero block.
inline float search_symmetric(int n, int nmax, const float* x, const float* w, std::int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  auto weight = [&](int i) { return w ? w[i] : x[i] * x[i]; };
  float best_scale = 0, best = -1;
  for (int t = -9; t <= 9; ++t) {
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(t)) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      sumlx += weight(i) * x[i] * static_cast<float>(l);
      suml2 += weight(i) * static_cast<float>(l * l);
    }
    // For the best scale sumlx/suml2 the error is sum(w x^2) - sumlx^2/suml2.
    if (suml2 > 0 && (best < 0 || sumlx * sumlx > best * suml2)) {
      best_scale = sumlx / suml2;
      best = best_scale * sumlx;
      for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1) + nmax);
    }
  }
  return best_scale;
}

/// Asymmetric codes l in [0, nmax] with x ~ scale * l - min_out (min_out >= 0):
/// tries the scales (nmax + rmin + rdelta t)/(max - min), t in [0, nstep], each
/// with its least-squares scale and offset, and keeps the least weighted error.
inline float search_asymmetric(int n, int nmax, const float* x, const float* w, std::uint8_t* L, float& min_out,
                               float rmin, float rdelta, int nstep) {
  float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    min_out = -lo;
    return 0.f;
  }
  float scale = (hi - lo) / static_cast<float>(nmax), min = lo, best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<std::uint8_t>(std::clamp(nearest_int((x[i] - lo) / scale), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best += w[i] * diff * diff;
  }
  std::uint8_t aux[256];
  for (int t = 0; t <= nstep; ++t) {
    const float iscale = (rmin + rdelta * static_cast<float>(t) + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      aux[i] = static_cast<std::uint8_t>(l);
      sum_l += w[i] * static_cast<float>(l);
      sum_l2 += w[i] * static_cast<float>(l * l);
      sum_xl += w[i] * static_cast<float>(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * aux[i] + this_min - x[i];
      err += w[i] * diff * diff;
    }
    if (err < best) {
      std::copy(aux, aux + n, L);
      best = err;
      scale = this_scale;
      min = this_min;
    }
  }
  min_out = -min;
  return scale;
}

/// q3_K's sub-block search: symmetric codes in [-nmax, nmax), then coordinate
/// descent that moves single codes while the x^2-weighted fit improves.
/// Returns the scale; L[i] = code + nmax.
inline float search_q3(int n, int nmax, const float* x, std::int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<std::int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l * l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
      if (slx <= 0) continue;
      float sl2 = suml2 - w * static_cast<float>(L[i] * L[i]);
      const int nl = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (nl == L[i]) continue;
      slx += w * x[i] * static_cast<float>(nl);
      sl2 += w * static_cast<float>(nl * nl);
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<std::int8_t>(nl);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(L[i] + nmax);
  return suml2 > 0 ? sumlx / suml2 : 0.f;
}

inline void quantize_block(const float* x, BlockQ8_0& b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  b.d = fp32_to_fp16(amax / 127.f);
  const float d = fp16_to_fp32(b.d), id = d != 0 ? 1.f / d : 0.f;
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<std::int8_t>(std::clamp(nearest_int(x[i] * id), -127, 127));
}

/// Legacy symmetric types (q4_0, q5_0): codes [0, 2 nmax) for x ~ d (code - nmax).
template <int kNmax>
inline float quantize_symmetric32(const float* x, std::uint16_t& d16, int* codes) {
  float w[32];
  for (int i = 0; i < 32; ++i) w[i] = 1.f;
  std::int8_t L[32];
  d16 = fp32_to_fp16(search_symmetric(32, kNmax, x, w, L));
  const float d = fp16_to_fp32(d16);
  for (int i = 0; i < 32; ++i) codes[i] = d != 0 ? std::clamp(nearest_int(x[i] / d), -kNmax, kNmax - 1) + kNmax : kNmax;
  return d;
}

/// Legacy asymmetric types (q4_1, q5_1): codes [0, nmax] for x ~ d code + m.
template <int kNmax>
inline void quantize_asymmetric32(const float* x, std::uint16_t& d16, std::uint16_t& m16, int* codes) {
  float w[32];
  for (int i = 0; i < 32; ++i) w[i] = 1.f;
  std::uint8_t L[32];
  float neg_min = 0;
  const float scale = search_asymmetric(32, kNmax, x, w, L, neg_min, -1.f, 0.1f, 20);
  d16 = fp32_to_fp16(scale);
  m16 = fp32_to_fp16(-neg_min);
  const float d = fp16_to_fp32(d16), m = fp16_to_fp32(m16);
  for (int i = 0; i < 32; ++i) codes[i] = d != 0 ? std::clamp(nearest_int((x[i] - m) / d), 0, kNmax) : 0;
}

inline void pack_nibbles(const int* codes, std::uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<std::uint8_t>((codes[j] & 0xF) | (codes[j + 16] & 0xF) << 4);
}
inline void pack_fifth_bits(const int* codes, std::uint8_t* qh) {
  std::uint32_t h = 0;
  for (int i = 0; i < 32; ++i) h |= static_cast<std::uint32_t>((codes[i] >> 4) & 1) << i;
  for (int i = 0; i < 4; ++i) qh[i] = static_cast<std::uint8_t>(h >> (8 * i));
}

inline void quantize_block(const float* x, BlockQ4_0& b) {
  int c[32];
  quantize_symmetric32<8>(x, b.d, c);
  pack_nibbles(c, b.qs);
}
inline void quantize_block(const float* x, BlockQ5_0& b) {
  int c[32];
  quantize_symmetric32<16>(x, b.d, c);
  pack_nibbles(c, b.qs);
  pack_fifth_bits(c, b.qh);
}
inline void quantize_block(const float* x, BlockQ4_1& b) {
  int c[32];
  quantize_asymmetric32<15>(x, b.d, b.m, c);
  pack_nibbles(c, b.qs);
}
inline void quantize_block(const float* x, BlockQ5_1& b) {
  int c[32];
  quantize_asymmetric32<31>(x, b.d, b.m, c);
  pack_nibbles(c, b.qs);
  pack_fifth_bits(c, b.qh);
}

/// Packs 2-bit codes L[0..256) into q2_K/q3_K's qs layout (see two_bit_code()).
inline void pack_two_bits(const std::uint8_t* L, std::uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const std::uint8_t* p = L + 128 * h + l;
      qs[32 * h + l] = static_cast<std::uint8_t>((p[0] & 3) | (p[32] & 3) << 2 | (p[64] & 3) << 4 | (p[96] & 3) << 6);
    }
}

inline void quantize_block(const float* x, BlockQ2_K& b) {
  std::uint8_t L[256];
  float scales[16], mins[16], w[16];
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 16; ++s) {
    for (int i = 0; i < 16; ++i) w[i] = std::fabs(x[16 * s + i]);
    scales[s] = search_asymmetric(16, 3, x + 16 * s, w, L + 16 * s, mins[s], -0.5f, 0.1f, 15);
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }
  for (int s = 0; s < 16; ++s) {
    const int ls = max_scale > 0 ? std::clamp(nearest_int(15.f / max_scale * scales[s]), 0, 15) : 0;
    const int lm = max_min > 0 ? std::clamp(nearest_int(15.f / max_min * mins[s]), 0, 15) : 0;
    b.scales[s] = static_cast<std::uint8_t>(ls | lm << 4);
  }
  b.d = fp32_to_fp16(max_scale > 0 ? max_scale / 15.f : 0.f);
  b.dmin = fp32_to_fp16(max_min > 0 ? max_min / 15.f : 0.f);
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(b.scales[s] & 0xF), ml = dmin * static_cast<float>(b.scales[s] >> 4);
    for (int i = 16 * s; i < 16 * s + 16; ++i)
      L[i] = static_cast<std::uint8_t>(dl != 0 ? std::clamp(nearest_int((x[i] + ml) / dl), 0, 3) : 0);
  }
  pack_two_bits(L, b.qs);
}

inline void quantize_block(const float* x, BlockQ3_K& b) {
  std::int8_t L[256];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int s = 0; s < 16; ++s) {
    scales[s] = search_q3(16, 4, x + 16 * s, L + 16 * s);
    if (std::fabs(scales[s]) > amax) amax = std::fabs(scales[s]), max_scale = scales[s];
  }
  std::memset(b.scales, 0, sizeof b.scales);
  if (max_scale != 0) {
    const float iscale = -32.f / max_scale;
    for (int s = 0; s < 16; ++s) {
      const int l = std::clamp(nearest_int(iscale * scales[s]), -32, 31) + 32;
      if (s < 8)
        b.scales[s] = static_cast<std::uint8_t>(l & 0xF);
      else
        b.scales[s - 8] = static_cast<std::uint8_t>(b.scales[s - 8] | (l & 0xF) << 4);
      b.scales[8 + s % 4] = static_cast<std::uint8_t>(b.scales[8 + s % 4] | (l >> 4) << (2 * (s / 4)));
    }
    b.d = fp32_to_fp16(1.f / iscale);
  } else {
    b.d = fp32_to_fp16(0.f);
  }
  const float d = fp16_to_fp32(b.d);
  std::uint8_t U[256];
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(q3k_scale(b.scales, s));
    for (int i = 16 * s; i < 16 * s + 16; ++i)
      U[i] = static_cast<std::uint8_t>((dl != 0 ? std::clamp(nearest_int(x[i] / dl), -4, 3) : 0) + 4);
  }
  std::memset(b.hmask, 0, sizeof b.hmask);
  for (int i = 0; i < 256; ++i)
    if (U[i] > 3) {
      b.hmask[i % 32] = static_cast<std::uint8_t>(b.hmask[i % 32] | 1 << (i / 32));
      U[i] = static_cast<std::uint8_t>(U[i] - 4);
    }
  pack_two_bits(U, b.qs);
}

/// q4_K/q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; returns the codes in L.
template <int kNmax>
inline void quantize_k4_scales(const float* x, std::uint16_t& d16, std::uint16_t& dmin16, std::uint8_t* packed,
                               std::uint8_t* L, float rmin, int nstep) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float sum_x2 = 0;
    for (int i = 0; i < 32; ++i) sum_x2 += xs[i] * xs[i];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int i = 0; i < 32; ++i) w[i] = av_x + std::fabs(xs[i]);
    scales[s] = search_asymmetric(32, kNmax, xs, w, L + 32 * s, mins[s], rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(packed, 0, 12);
  for (int s = 0; s < 8; ++s) {
    const int ls = std::clamp(nearest_int(inv_scale * scales[s]), 0, 63);
    const int lm = std::clamp(nearest_int(inv_min * mins[s]), 0, 63);
    if (s < 4) {
      packed[s] = static_cast<std::uint8_t>(ls);
      packed[s + 4] = static_cast<std::uint8_t>(lm);
    } else {
      packed[s + 4] = static_cast<std::uint8_t>((ls & 0xF) | (lm & 0xF) << 4);
      packed[s - 4] = static_cast<std::uint8_t>(packed[s - 4] | (ls >> 4) << 6);
      packed[s] = static_cast<std::uint8_t>(packed[s] | (lm >> 4) << 6);
    }
  }
  d16 = fp32_to_fp16(max_scale / 63.f);
  dmin16 = fp32_to_fp16(max_min / 63.f);
  const float d = fp16_to_fp32(d16), dmin = fp16_to_fp32(dmin16);
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    k4_scale_min(s, packed, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    for (int i = 32 * s; i < 32 * s + 32; ++i)
      L[i] = static_cast<std::uint8_t>(d1 != 0 ? std::clamp(nearest_int((x[i] + m1) / d1), 0, kNmax) : 0);
  }
}

inline void quantize_block(const float* x, BlockQ4_K& b) {
  std::uint8_t L[256];
  quantize_k4_scales<15>(x, b.d, b.dmin, b.scales, L, -1.f, 20);
  for (int h = 0; h < 4; ++h)
    for (int l = 0; l < 32; ++l) b.qs[32 * h + l] = static_cast<std::uint8_t>(L[64 * h + l] | L[64 * h + 32 + l] << 4);
}

inline void quantize_block(const float* x, BlockQ5_K& b) {
  std::uint8_t L[256];
  quantize_k4_scales<31>(x, b.d, b.dmin, b.scales, L, -0.5f, 15);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int i = 0; i < 256; ++i)
    if (L[i] > 15) b.qh[i % 32] = static_cast<std::uint8_t>(b.qh[i % 32] | 1 << (i / 32));
  for (int h = 0; h < 4; ++h)
    for (int l = 0; l < 32; ++l)
      b.qs[32 * h + l] = static_cast<std::uint8_t>((L[64 * h + l] & 0xF) | (L[64 * h + 32 + l] & 0xF) << 4);
}

inline void quantize_block(const float* x, BlockQ6_K& b) {
  std::int8_t L[256];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int s = 0; s < 16; ++s) {
    scales[s] = search_symmetric(16, 32, x + 16 * s, nullptr, L + 16 * s);
    if (std::fabs(scales[s]) > amax) amax = std::fabs(scales[s]), max_scale = scales[s];
  }
  std::memset(&b, 0, sizeof b);
  if (amax < kGroupMaxEps) return;  // all zero: d = 0
  const float iscale = -128.f / max_scale;
  b.d = fp32_to_fp16(1.f / iscale);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[s])));
  const float d = fp16_to_fp32(b.d);
  std::uint8_t U[256];
  for (int s = 0; s < 16; ++s) {
    const float ds = d * static_cast<float>(b.scales[s]);
    for (int i = 16 * s; i < 16 * s + 16; ++i)
      U[i] = static_cast<std::uint8_t>((ds != 0 ? std::clamp(nearest_int(x[i] / ds), -32, 31) : 0) + 32);
  }
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const std::uint8_t* u = U + 128 * h + l;
      b.ql[64 * h + l] = static_cast<std::uint8_t>((u[0] & 0xF) | (u[64] & 0xF) << 4);
      b.ql[64 * h + 32 + l] = static_cast<std::uint8_t>((u[32] & 0xF) | (u[96] & 0xF) << 4);
      b.qh[32 * h + l] = static_cast<std::uint8_t>(u[0] >> 4 | (u[32] >> 4) << 2 | (u[64] >> 4) << 4 | (u[96] >> 4) << 6);
    }
}

template <class Block, int kBlockValues>
inline void quantize_blocks(const float* src, unsigned char* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n / kBlockValues; ++i) {
    Block b;
    std::memset(&b, 0, sizeof b);
    quantize_block(src + i * kBlockValues, b);
    std::memcpy(dst + i * sizeof(Block), &b, sizeof b);
  }
}

/// Stores src[0..n) as weight_row_bytes(t, n) bytes of type t at dst: block
/// types through the reference quantizers above, f16/bf16 rounded to nearest
/// even as ggml rounds them, f32 copied. Throws ConfigError (dst untouched) if t
/// cannot be produced here or n is not a multiple of its block size.
inline void quantize_row(WeightType t, const float* src, void* dst, std::int64_t n) {
  check_row(t, n, false);
  auto* p = static_cast<unsigned char*>(dst);
  switch (t) {
    case WeightType::kF32: std::memcpy(p, src, static_cast<std::size_t>(n) * 4); return;
    case WeightType::kF16:
    case WeightType::kBF16:
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint16_t h = t == WeightType::kF16 ? fp32_to_fp16(src[i]) : fp32_to_bf16(src[i]);
        p[2 * i] = static_cast<unsigned char>(h & 0xFF);
        p[2 * i + 1] = static_cast<unsigned char>(h >> 8);
      }
      return;
    case WeightType::kQ8_0: return quantize_blocks<BlockQ8_0, kQK>(src, p, n);
    case WeightType::kQ4_0: return quantize_blocks<BlockQ4_0, kQK>(src, p, n);
    case WeightType::kQ4_1: return quantize_blocks<BlockQ4_1, kQK>(src, p, n);
    case WeightType::kQ5_0: return quantize_blocks<BlockQ5_0, kQK>(src, p, n);
    case WeightType::kQ5_1: return quantize_blocks<BlockQ5_1, kQK>(src, p, n);
    case WeightType::kQ2_K: return quantize_blocks<BlockQ2_K, kQK_K>(src, p, n);
    case WeightType::kQ3_K: return quantize_blocks<BlockQ3_K, kQK_K>(src, p, n);
    case WeightType::kQ4_K: return quantize_blocks<BlockQ4_K, kQK_K>(src, p, n);
    case WeightType::kQ5_K: return quantize_blocks<BlockQ5_K, kQK_K>(src, p, n);
    case WeightType::kQ6_K: return quantize_blocks<BlockQ6_K, kQK_K>(src, p, n);
    default: break;
  }
}

}  // namespace kvd::detail
