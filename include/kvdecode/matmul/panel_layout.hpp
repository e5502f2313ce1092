// The panel-block layout of quantized weight matrices (see quant_kernels.hpp):
// which fields of ggml's blocks go where, the 32-bit code words, packing and
// unpacking of one row, the QuantPanels view the kernels read, and the portable
// (scalar) dequantization of a panel block. Kept apart from the kernels so that
// packed_matrix.hpp's PackedMatrix can hold block-type segments without a cycle.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kvdecode/core/simd.hpp"
#include "kvdecode/weights/block_types.hpp"
#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/weights/weight_type.hpp"

namespace kvd::detail {

/// How the fast mode's tiles (fast_tiles.hpp, fast_planes.hpp, fast_tiles_neon.hpp)
/// read a decoder's codes as bytes: each AVX2 and NEON decoder's kFastCodes, with
/// kFastOffset the offset its codes carry in that ISA's tiles (subtracted after the
/// integer sums as offset * Q_s).
enum class FastCodes {
  kNone,     ///< not computed in fast mode
  kBytes,    ///< signed 8-bit codes, one byte per value (q8_0); rows of order 4
  kNibbles,  ///< 4-bit codes in nibble planes (q4_0, q4_1, q4_K)
  kFive,     ///< nibble planes plus one high bit per value from a word of high bits (q5_0, q5_1, q5_K)
  kCrumbs,   ///< 2-bit codes, 16 to a word (q2_K); rows of order 16
  kCrumbs3,  ///< 2-bit codes plus one high bit per value (q3_K); rows of order 16
  kSix,      ///< nibble planes plus two high bits per value (q6_K)
  kLevels    ///< nibble planes whose codes index 16 int8 levels (iq4_nl, iq4_xs, mxfp4)
};

/// Whether a decoder's fast codes fit its row's rounded-row order (kFastOrder,
/// weights/block_types.hpp): none for 0, bytes for 4, 2-bit codes for 16.
template <class Row, class Dec>
constexpr bool fast_codes_fit_row() {
  constexpr FastCodes c = Dec::kFastCodes;
  return (Row::kFastOrder != 0) == (c != FastCodes::kNone) &&
         (Row::kFastOrder == 16) == (c == FastCodes::kCrumbs || c == FastCodes::kCrumbs3) &&
         (Row::kFastOrder == 4) == (c == FastCodes::kBytes);
}

/// Panel-block field order of block type t: its row's kLayout
/// (weights/block_types.hpp); no fields for a type that is not a block type.
/// The kernels read the panel block at the offsets this order implies. Never throws.
inline QuantLayout quant_layout(WeightType t) {
  QuantLayout l;
  visit_block_type(t, [&](auto row) { l = decltype(row)::kLayout; });
  return l;
}

/// True for the block types the kernels compute with (they have a row).
inline bool is_quant_block_type(WeightType t) { return is_block_type(t); }

/// Bits per code of a code field.
inline int code_bits(QuantFieldKind k) {
  switch (k) {
    case QuantFieldKind::kHighBits256: return 1;
    case QuantFieldKind::kCrumbs256:
    case QuantFieldKind::kQ6High256: return 2;
    default: return 4;
  }
}

/// q6_K's high pairs in their code word (one sub-block of 16 values, one output):
/// byte n holds the pairs of values 2 n, 2 n + 1, 8 + 2 n and 9 + 2 n at bits 0, 2,
/// 4 and 6. The fast mode's code vectors of group g (values 8 g + 2 n and 8 g + 2 n
/// + 1 in byte n, fast_tiles.hpp) then take their pairs with one shift and one mask.
constexpr int q6_high_shift(int j) { return 8 * ((j % 8) / 2) + 4 * (j / 8) + 2 * (j % 2); }

/// The bit of its code word where code j (0 .. 32 / b - 1) of a word starts: b j,
/// except q6_K's high pairs (q6_high_shift()).
inline int code_word_shift(QuantFieldKind k, int j) {
  return k == QuantFieldKind::kQ6High256 ? q6_high_shift(j) : code_bits(k) * j;
}

/// Where value i's code sits in ggml's field bytes: byte index and bit shift.
inline void code_position(QuantFieldKind k, int i, int& byte, int& shift) {
  switch (k) {
    case QuantFieldKind::kNibbles32: byte = 16 * (i / 32) + i % 16, shift = (i % 32) < 16 ? 0 : 4; return;
    case QuantFieldKind::kNibbles256: byte = 32 * (i / 64) + i % 32, shift = (i % 64) < 32 ? 0 : 4; return;
    case QuantFieldKind::kHighBits256: byte = i % 32, shift = i / 32; return;
    case QuantFieldKind::kCrumbs256: byte = 32 * (i / 128) + i % 32, shift = 2 * ((i % 128) / 32); return;
    case QuantFieldKind::kQ6Low256: {
      const int h = i / 128, r = (i % 128) / 32;
      byte = 64 * h + i % 32 + 32 * (r & 1), shift = r >= 2 ? 4 : 0;
      return;
    }
    case QuantFieldKind::kQ6High256: byte = 32 * (i / 128) + i % 32, shift = 2 * ((i % 128) / 32); return;
    default: byte = shift = 0;
  }
}

/// A code field of ggml's bytes -> its code words (count * 8 / 32 of them), and back.
inline void field_to_words(const QuantField& q, const unsigned char* field, std::uint32_t* words) {
  const int b = code_bits(q.kind), n = q.count * 8 / b, per_word = 32 / b;
  std::fill(words, words + q.count / 4, 0u);
  for (int i = 0; i < n; ++i) {
    int byte, shift;
    code_position(q.kind, i, byte, shift);
    const std::uint32_t code = (field[byte] >> shift) & ((1u << b) - 1);
    words[i / per_word] |= code << code_word_shift(q.kind, i % per_word);
  }
}
inline void words_to_field(const QuantField& q, const std::uint32_t* words, unsigned char* field) {
  const int b = code_bits(q.kind), n = q.count * 8 / b, per_word = 32 / b;
  std::memset(field, 0, static_cast<std::size_t>(q.count));
  for (int i = 0; i < n; ++i) {
    int byte, shift;
    code_position(q.kind, i, byte, shift);
    const std::uint32_t code = (words[i / per_word] >> code_word_shift(q.kind, i % per_word)) & ((1u << b) - 1);
    field[byte] = static_cast<unsigned char>(field[byte] | code << shift);
  }
}

/// Copies row r's block (ggml bytes) into its place in a panel block.
inline void scatter_block(WeightType t, const unsigned char* block, int r, unsigned char* pb) {
  const QuantLayout l = quant_layout(t);
  long base = 0;
  for (int f = 0; f < l.n_fields; ++f) {
    const QuantField& q = l.fields[f];
    if (q.kind == QuantFieldKind::kPlain) {
      for (int e = 0; e < q.count; ++e)
        std::memcpy(pb + base + (e * kLanes + r) * q.width, block + q.offset + e * q.width,
                    static_cast<std::size_t>(q.width));
    } else {
      std::uint32_t words[32];
      field_to_words(q, block + q.offset, words);
      for (int w = 0; w < q.count / 4; ++w) std::memcpy(pb + base + (w * kLanes + r) * 4, &words[w], 4);
    }
    base += static_cast<long>(kLanes) * q.width * q.count;
  }
}

/// The inverse: row r's block (ggml bytes) out of a panel block.
inline void gather_block(WeightType t, const unsigned char* pb, int r, unsigned char* block) {
  const QuantLayout l = quant_layout(t);
  long base = 0;
  for (int f = 0; f < l.n_fields; ++f) {
    const QuantField& q = l.fields[f];
    if (q.kind == QuantFieldKind::kPlain) {
      for (int e = 0; e < q.count; ++e)
        std::memcpy(block + q.offset + e * q.width, pb + base + (e * kLanes + r) * q.width,
                    static_cast<std::size_t>(q.width));
    } else {
      std::uint32_t words[32];
      for (int w = 0; w < q.count / 4; ++w) std::memcpy(&words[w], pb + base + (w * kLanes + r) * 4, 4);
      words_to_field(q, words, block + q.offset);
    }
    base += static_cast<long>(kLanes) * q.width * q.count;
  }
}

/// The kernels' view of panel blocks: n_panels panels of n_blocks blocks of
/// type t over k, panel p's block b at data + (p * n_blocks + b) * 16 * block
/// bytes. QuantMatrix holds one; a PackedMatrix segment of a block type is one.
struct QuantPanels {
  WeightType t = WeightType::kQ8_0;
  const unsigned char* data = nullptr;
  long panels = 0, K = 0;

  WeightType type() const { return t; }
  long n_panels() const { return panels; }
  long n_in() const { return K; }
  long n_out_padded() const { return panels * kLanes; }
  long block_size() const { return weight_type_traits(t).block_size; }
  long n_blocks() const { return K / block_size(); }
  std::size_t panel_block_bytes() const { return static_cast<std::size_t>(kLanes) * weight_type_traits(t).block_bytes; }
  std::size_t panel_bytes() const { return panel_block_bytes() * static_cast<std::size_t>(n_blocks()); }
  const unsigned char* panel_block(long p, long b) const {
    return data + (static_cast<std::size_t>(p) * n_blocks() + b) * panel_block_bytes();
  }
};

/// Writes one row (ggml bytes, n_in values of type t) as lane j of panel `panel`
/// (panel_bytes() bytes, n_in / block size panel blocks). The panel's other lanes are untouched.
inline void pack_quant_row(WeightType t, long n_in, const unsigned char* row, int j, unsigned char* panel) {
  const auto tr = weight_type_traits(t);
  const long nb = n_in / tr.block_size;
  for (long b = 0; b < nb; ++b)
    scatter_block(t, row + b * tr.block_bytes, j, panel + b * static_cast<std::size_t>(kLanes) * tr.block_bytes);
}


// ---- Portable dequantization of panel blocks -----------------------------------

/// out (block_size x 16, k-major: out[k * 16 + j] = w[16p + j][k0 + k]) = panel
/// block pb dequantized, through weights/blocks.hpp's scalar code.
template <class T>
inline void dequantize_panel_block_portable(WeightType t, const unsigned char* pb, T* out) {
  const auto tr = weight_type_traits(t);
  unsigned char block[256];
  float vals[256];
  for (int j = 0; j < kLanes; ++j) {
    gather_block(t, pb, j, block);
    dequantize_row(t, block, vals, tr.block_size);
    for (std::uint32_t k = 0; k < tr.block_size; ++k) out[k * kLanes + j] = static_cast<T>(vals[k]);
  }
}


/// Panel block pb in the factored form (weights/blocks.hpp), through its scalar
/// code: c (block_size x 16, k-major like the above) the codes, D and N
/// (block_size / sub x 16, sub-block-major) the scales and offsets (N only for
/// types with a min).
template <class T>
inline void factor_panel_block_portable(WeightType t, const unsigned char* pb, T* c, T* D, T* N) {
  const auto tr = weight_type_traits(t);
  const QuantFactoring f = quant_factoring(t);
  const int n_sub = static_cast<int>(tr.block_size) / f.sub;
  unsigned char block[256];
  float cv[256], dv[16], nv[16];
  for (int j = 0; j < kLanes; ++j) {
    gather_block(t, pb, j, block);
    factor_row(t, block, cv, dv, f.has_min ? nv : nullptr, tr.block_size);
    for (std::uint32_t k = 0; k < tr.block_size; ++k) c[k * kLanes + j] = static_cast<T>(cv[k]);
    for (int s = 0; s < n_sub; ++s) {
      D[s * kLanes + j] = static_cast<T>(dv[s]);
      if (f.has_min) N[s * kLanes + j] = static_cast<T>(nv[s]);
    }
  }
}


/// The product with quantized panels (defined in kvdecode/matmul/quant_kernels.hpp):
/// y (M x 16 n_panels) = x (M x K) * W^T with the reduction-order rule on W's
/// dequantized values, V the float vector implementation of the buffered paths.
template <class T, class V>
void matmul_quant_panels(const T* x, long ldx, long M, const QuantPanels& w, T* y, long ldy);

}  // namespace kvd::detail
