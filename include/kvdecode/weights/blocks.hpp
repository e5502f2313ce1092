// ggml's weight block formats, row by row: dequantize_row() (bit for bit the
// floats ggml's dequantize_row_* gives), factor_row() (the factored form the
// matrix kernels compute with), quantize_row() (the reference quantizers), for
// every block type and the plain f32/f16/bf16 types. Each block type is looked up
// once per row through visit_block_type() (block_types.hpp); the per-block codecs
// are in block_formats.hpp (layouts, dequantization, factoring) and
// block_quantize.hpp (quantizers). This header includes all three, so a file
// that includes it sees everything it saw when the codecs lived here.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "kvdecode/error.hpp"
#include "kvdecode/weights/block_formats.hpp"
#include "kvdecode/weights/block_quantize.hpp"
#include "kvdecode/weights/block_types.hpp"
#include "kvdecode/weights/weight_type.hpp"

namespace kvd::detail {

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
  const bool ok = t == WeightType::kF32 || t == WeightType::kF16 || t == WeightType::kBF16 || is_block_type(t) ||
                  (t == WeightType::kF64 && dequantize);
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
  const bool block = visit_block_type(t, [&](auto row) {
    using Row = decltype(row);
    dequantize_blocks<typename Row::Block, Row::kValues>(p, dst, n);
  });
  if (block) return;
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
    default: break;
  }
}

/// Sub-block length and whether the type has an offset N (block_formats.hpp's
/// factored form).
struct QuantFactoring {
  int sub = 0;
  bool has_min = false;
};
/// The factoring of block type t (its row's kSub and kMin); {0, false} for a
/// type that is not a block type. Never throws.
inline QuantFactoring quant_factoring(WeightType t) {
  QuantFactoring f;
  visit_block_type(t, [&](auto row) { f = {decltype(row)::kSub, decltype(row)::kMin}; });
  return f;
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
  if (!is_block_type(t)) throw ConfigError(msg("weight type ", weight_type_name(t), " has no factored form"));
  check_row(t, n, true);
  const auto* p = static_cast<const unsigned char*>(src);
  visit_block_type(t, [&](auto row) {
    using Row = decltype(row);
    factor_blocks<typename Row::Block, Row::kValues>(p, c, D, N, n, Row::kSub);
  });
}

/// Checks every block of a `rows` x `cols` matrix of type t at src (rows of
/// weight_row_bytes(t, cols) bytes) with block_valid() (block_formats.hpp). Throws
/// FormatError naming `tensor`, the row, the block, its byte offset from src and
/// why, at the first bad block. Types without a check (kBlockChecked) pass
/// unread; the others' blocks are all read. Touches nothing.
inline void check_blocks(WeightType t, const void* src, std::int64_t rows, std::int64_t cols, const std::string& tensor) {
  const auto* p = static_cast<const unsigned char*>(src);
  visit_block_type(t, [&](auto row) {
    using Row = decltype(row);
    using Block = typename Row::Block;
    if constexpr (!kBlockChecked<Block>) return;
    const std::int64_t per_row = cols / Row::kValues;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t b = 0; b < per_row; ++b) {
        const std::size_t at = static_cast<std::size_t>(r * per_row + b) * sizeof(Block);
        const Block blk = load_block<Block>(p + at);
        if (block_valid(blk)) continue;
        std::string why;
        block_valid(blk, &why);
        throw FormatError(msg("tensor '", tensor, "' (", weight_type_name(t), "): row ", r, " block ", b,
                              " (byte ", at, " of the tensor's data): ", why));
      }
  });
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
/// types through the reference quantizers (block_quantize.hpp), f16/bf16 rounded
/// to nearest even as ggml rounds them, f32 copied. Throws ConfigError (dst
/// untouched) if t cannot be produced here or n is not a multiple of its block size.
inline void quantize_row(WeightType t, const float* src, void* dst, std::int64_t n) {
  check_row(t, n, false);
  auto* p = static_cast<unsigned char*>(dst);
  const bool block = visit_block_type(t, [&](auto row) {
    using Row = decltype(row);
    quantize_blocks<typename Row::Block, Row::kValues>(src, p, n);
  });
  if (block) return;
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
    default: break;
  }
}

}  // namespace kvd::detail
