// The table of block types: one row per ggml block type kvdecode computes with,
// and visit_block_type(), the one switch that maps a run-time WeightType to its
// row. A row is a tag type holding everything the weights floor knows of the
// type: its block struct (whose codecs, dequantize_block(), factor_block() and
// quantize_block(), are overloads on that struct in block_formats.hpp and
// block_quantize.hpp), values per block, the factored form's sub-block length
// and offset flag, the fields of the block in the order the panel blocks store
// them, the fast mode's row order and the type the quantizer falls back to.
// Every other switch over block types is a call through visit_block_type() and a
// look-up in the row; the matrix kernels key their per-ISA decoders by the row
// (matmul/quant_decode_avx512.hpp, matmul/quant_decode_avx2.hpp,
// matmul/quant_decode_neon.hpp) through visit_block_column().
#pragma once

#include <cstdint>

#include "kvdecode/error.hpp"
#include "kvdecode/weights/block_formats.hpp"
#include "kvdecode/weights/weight_type.hpp"

namespace kvd::detail {

/// How a field is stored in a panel block.
enum class QuantFieldKind {
  kPlain,       ///< element e of the 16 rows side by side: (e, row) -> width bytes
  kNibbles32,   ///< runs of 32 4-bit codes in 16 bytes each: q4_0/q4_1/q5_x/iq4_nl/mxfp4's one run, iq4_xs's 8
  kNibbles256,  ///< q4_K/q5_K's 128 code bytes: 256 4-bit codes
  kHighBits256, ///< q5_K's qh, q3_K's hmask (32 bytes): 256 1-bit codes (value i: byte i % 32, bit i / 32)
  kCrumbs256,   ///< q2_K/q3_K's 64 code bytes: 256 2-bit codes
  kQ6Low256,    ///< q6_K's ql (128 bytes): the low 4 bits of 256 codes
  kQ6High256    ///< q6_K's qh (64 bytes): the high 2 bits of 256 codes (in their words: matmul/panel_layout.hpp's q6_high_shift)
};

/// One field of a block: `count` elements of `width` bytes at byte `offset` of
/// ggml's block. Code fields (every kind but kPlain) are rewritten as 32-bit
/// code words: word w of a row holds the b-bit codes of values (32/b) w + j at
/// bits b j (b = 4, 1 or 2; q6_K's high pairs in the order of
/// matmul/panel_layout.hpp's q6_high_shift()), and the 16 rows' words w are side by side. One
/// 64-byte load then holds the codes of 32/b consecutive k for 16 outputs, and
/// each code comes out with one shift. The bytes are the same in number.
struct QuantField {
  int offset = 0, width = 0, count = 0;
  QuantFieldKind kind = QuantFieldKind::kPlain;
};

/// The fields of a block in the order the panel block stores them.
struct QuantLayout {
  int n_fields = 0;
  QuantField fields[5] = {};
};

// ---- The rows -------------------------------------------------------------------
// Fields of every row:
//   Block       the block struct (block_formats.hpp); its codecs are overloads on it
//   kType       the WeightType (ggml's code)
//   kValues     values per block (weight_type_traits(kType).block_size)
//   kSub, kMin  the factored form: sub-block length, whether it has an offset N
//   kLayout     the panel block's fields (offsets are ggml's); the kernels read the
//               panel block at the offsets this order implies
//   kFastOrder  the fast mode's rounded-row order (matmul/fast_int8.hpp): 8 or 16
//               (groups reordered), 4 (values in their order); 0 if the fast mode
//               keeps the default numerics for the type
//   kFallback   the type the quantizer writes when a row is no whole number of
//               blocks (convert/quantize.hpp)

struct BlockTypeQ8_0 {
  using Block = BlockQ8_0;
  static constexpr WeightType kType = WeightType::kQ8_0;
  static constexpr int kValues = kQK, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr QuantLayout kLayout = {2, {{0, 2, 1}, {2, 1, 32}}};
  static constexpr int kFastOrder = 4;
  static constexpr WeightType kFallback = WeightType::kF16;
};

struct BlockTypeQ4_0 {
  using Block = BlockQ4_0;
  static constexpr WeightType kType = WeightType::kQ4_0;
  static constexpr int kValues = kQK, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr QuantLayout kLayout = {2, {{0, 2, 1}, {2, 1, 16, QuantFieldKind::kNibbles32}}};
  static constexpr int kFastOrder = 8;
  static constexpr WeightType kFallback = WeightType::kF16;
};

struct BlockTypeQ4_1 {
  using Block = BlockQ4_1;
  static constexpr WeightType kType = WeightType::kQ4_1;
  static constexpr int kValues = kQK, kSub = 32;
  static constexpr bool kMin = true;
  static constexpr QuantLayout kLayout = {3, {{0, 2, 1}, {2, 2, 1}, {4, 1, 16, QuantFieldKind::kNibbles32}}};
  static constexpr int kFastOrder = 8;
  static constexpr WeightType kFallback = WeightType::kF16;
};

struct BlockTypeQ5_0 {
  using Block = BlockQ5_0;
  static constexpr WeightType kType = WeightType::kQ5_0;
  static constexpr int kValues = kQK, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr QuantLayout kLayout = {3, {{0, 2, 1}, {2, 4, 1}, {6, 1, 16, QuantFieldKind::kNibbles32}}};
  static constexpr int kFastOrder = 8;
  static constexpr WeightType kFallback = WeightType::kF16;
};

struct BlockTypeQ5_1 {
  using Block = BlockQ5_1;
  static constexpr WeightType kType = WeightType::kQ5_1;
  static constexpr int kValues = kQK, kSub = 32;
  static constexpr bool kMin = true;
  static constexpr QuantLayout kLayout = {4, {{0, 2, 1}, {2, 2, 1}, {4, 4, 1}, {8, 1, 16, QuantFieldKind::kNibbles32}}};
  static constexpr int kFastOrder = 8;
  static constexpr WeightType kFallback = WeightType::kF16;
};

struct BlockTypeQ2_K {
  using Block = BlockQ2_K;
  static constexpr WeightType kType = WeightType::kQ2_K;
  static constexpr int kValues = kQK_K, kSub = 16;
  static constexpr bool kMin = true;
  static constexpr QuantLayout kLayout = {4, {{80, 2, 1}, {82, 2, 1}, {0, 1, 16}, {16, 1, 64, QuantFieldKind::kCrumbs256}}};
  static constexpr int kFastOrder = 16;
  static constexpr WeightType kFallback = WeightType::kQ4_0;
};

struct BlockTypeQ3_K {
  using Block = BlockQ3_K;
  static constexpr WeightType kType = WeightType::kQ3_K;
  static constexpr int kValues = kQK_K, kSub = 16;
  static constexpr bool kMin = false;
  static constexpr QuantLayout kLayout = {
      4, {{108, 2, 1}, {96, 1, 12}, {0, 1, 32, QuantFieldKind::kHighBits256}, {32, 1, 64, QuantFieldKind::kCrumbs256}}};
  static constexpr int kFastOrder = 16;
  static constexpr WeightType kFallback = WeightType::kQ4_0;
};

struct BlockTypeQ4_K {
  using Block = BlockQ4_K;
  static constexpr WeightType kType = WeightType::kQ4_K;
  static constexpr int kValues = kQK_K, kSub = 32;
  static constexpr bool kMin = true;
  static constexpr QuantLayout kLayout = {4, {{0, 2, 1}, {2, 2, 1}, {4, 1, 12}, {16, 1, 128, QuantFieldKind::kNibbles256}}};
  static constexpr int kFastOrder = 8;
  static constexpr WeightType kFallback = WeightType::kQ5_0;
};

struct BlockTypeQ5_K {
  using Block = BlockQ5_K;
  static constexpr WeightType kType = WeightType::kQ5_K;
  static constexpr int kValues = kQK_K, kSub = 32;
  static constexpr bool kMin = true;
  static constexpr QuantLayout kLayout = {5,
                                          {{0, 2, 1},
                                           {2, 2, 1},
                                           {4, 1, 12},
                                           {16, 1, 32, QuantFieldKind::kHighBits256},
                                           {48, 1, 128, QuantFieldKind::kNibbles256}}};
  static constexpr int kFastOrder = 8;
  static constexpr WeightType kFallback = WeightType::kQ5_1;
};

struct BlockTypeQ6_K {
  using Block = BlockQ6_K;
  static constexpr WeightType kType = WeightType::kQ6_K;
  static constexpr int kValues = kQK_K, kSub = 16;
  static constexpr bool kMin = false;
  static constexpr QuantLayout kLayout = {
      4, {{208, 2, 1}, {192, 1, 16}, {0, 1, 128, QuantFieldKind::kQ6Low256}, {128, 1, 64, QuantFieldKind::kQ6High256}}};
  static constexpr int kFastOrder = 8;
  static constexpr WeightType kFallback = WeightType::kQ8_0;
};

// iq4_nl, iq4_xs and mxfp4: codes are levels of a table of int8 (block_formats.hpp),
// which the fast mode multiplies with the rounded rows as they are (exact integers).

struct BlockTypeIQ4_NL {
  using Block = BlockIQ4_NL;
  static constexpr WeightType kType = WeightType::kIQ4_NL;
  static constexpr int kValues = kQK, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr QuantLayout kLayout = {2, {{0, 2, 1}, {2, 1, 16, QuantFieldKind::kNibbles32}}};
  static constexpr int kFastOrder = 8;
  static constexpr WeightType kFallback = WeightType::kF16;
};

struct BlockTypeIQ4_XS {
  using Block = BlockIQ4_XS;
  static constexpr WeightType kType = WeightType::kIQ4_XS;
  static constexpr int kValues = kQK_K, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr QuantLayout kLayout = {4, {{0, 2, 1}, {2, 2, 1}, {4, 1, 4}, {8, 1, 128, QuantFieldKind::kNibbles32}}};
  static constexpr int kFastOrder = 8;
  static constexpr WeightType kFallback = WeightType::kIQ4_NL;
};

struct BlockTypeMXFP4 {
  using Block = BlockMXFP4;
  static constexpr WeightType kType = WeightType::kMXFP4;
  static constexpr int kValues = kQK, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr QuantLayout kLayout = {2, {{0, 1, 1}, {1, 1, 16, QuantFieldKind::kNibbles32}}};
  static constexpr int kFastOrder = 8;
  static constexpr WeightType kFallback = WeightType::kF16;
};

/// Whether Row agrees with weight_type.hpp's table and its own layout: the block
/// struct's size and values per block, and fields that tile the block exactly.
template <class Row>
constexpr bool block_type_row_consistent() {
  const WeightTypeTraits tr = weight_type_traits(Row::kType);
  int bytes = 0;
  for (int f = 0; f < Row::kLayout.n_fields; ++f) bytes += Row::kLayout.fields[f].width * Row::kLayout.fields[f].count;
  return tr.supported && tr.block_size == static_cast<std::uint32_t>(Row::kValues) &&
         tr.block_bytes == sizeof(typename Row::Block) && bytes == static_cast<int>(sizeof(typename Row::Block)) &&
         Row::kValues % Row::kSub == 0 &&
         (Row::kFastOrder == 0 || Row::kFastOrder == 4 || Row::kFastOrder == 8 || Row::kFastOrder == 16);
}

template <class Row, class F>
inline bool visit_row(F& f) {
  static_assert(block_type_row_consistent<Row>(), "a block type's row disagrees with weight_type.hpp or its layout");
  f(Row{});
  return true;
}

/// Calls f(Row{}) with the row of block type t and returns true; returns false
/// (f not called) if t is not a block type kvdecode computes with. Never throws
/// by itself. This is the one switch over block types: a new type is one case here
/// and one in weight_type.hpp. Call it once per product or per row, outside any
/// tile loop: f is instantiated once per row.
template <class F>
inline bool visit_block_type(WeightType t, F&& f) {
  switch (t) {
    case WeightType::kQ8_0: return visit_row<BlockTypeQ8_0>(f);
    case WeightType::kQ4_0: return visit_row<BlockTypeQ4_0>(f);
    case WeightType::kQ4_1: return visit_row<BlockTypeQ4_1>(f);
    case WeightType::kQ5_0: return visit_row<BlockTypeQ5_0>(f);
    case WeightType::kQ5_1: return visit_row<BlockTypeQ5_1>(f);
    case WeightType::kQ2_K: return visit_row<BlockTypeQ2_K>(f);
    case WeightType::kQ3_K: return visit_row<BlockTypeQ3_K>(f);
    case WeightType::kQ4_K: return visit_row<BlockTypeQ4_K>(f);
    case WeightType::kQ5_K: return visit_row<BlockTypeQ5_K>(f);
    case WeightType::kQ6_K: return visit_row<BlockTypeQ6_K>(f);
    case WeightType::kIQ4_NL: return visit_row<BlockTypeIQ4_NL>(f);
    case WeightType::kIQ4_XS: return visit_row<BlockTypeIQ4_XS>(f);
    case WeightType::kMXFP4: return visit_row<BlockTypeMXFP4>(f);
    default: return false;
  }
}

/// Calls f(Of<Row>::type{}) with column Of of block type t's row (a per-ISA decoder,
/// matmul/quant_decode_*.hpp: Avx512DecoderOf, Avx2DecoderOf, NeonDecoderOf). One
/// look-up per call: call it outside the tiles. Asserts that t is a block type.
template <template <class> class Of, class F>
inline void visit_block_column(WeightType t, F&& f) {
  if (!visit_block_type(t, [&](auto row) { f(typename Of<decltype(row)>::type{}); })) KVD_ASSERT(false);
}

/// True if t is a block type kvdecode computes with (it has a row). Never throws.
inline bool is_block_type(WeightType t) {
  return visit_block_type(t, [](auto) {});
}

/// The type the quantizer writes instead of t when a row of t is no whole number
/// of t's blocks: the row's kFallback, f16 for a type without a row. Never throws.
inline WeightType block_type_fallback(WeightType t) {
  WeightType out = WeightType::kF16;
  visit_block_type(t, [&](auto row) { out = decltype(row)::kFallback; });
  return out;
}

}  // namespace kvd::detail
