// QuantMatrix: a weight matrix kept in one of ggml's block types (q8_0, q4_0,
// q4_1, q5_0, q5_1, q2_K .. q6_K), repacked once for the kernels, and the
// matrix product with it.
//
// NUMERICS. Within a sub-block of S values (32 for q8_0..q5_1, q4_K and q5_K;
// 16 for q2_K, q3_K and q6_K) every weight is w = c * D + N: c a small integer
// code, D the sub-block's scale, N its offset (only q4_1, q5_1, q2_K, q4_K and
// q5_K have one), D and N computed as ggml computes them, so c * D + N is
// ggml's dequantized value bit for bit (weights/blocks.hpp's factored form).
// The product factors D and N out of each sub-block's partial sum:
//   for each sub-block j of row n, in increasing k:
//     t   = fma(x[m][k_last], c[n][k_last], ... fma(x[m][k_first], c[n][k_first], 0) ...)
//     acc = fma(t, D[n][j], acc)
//     acc = fma(xs[m][j], N[n][j], acc)     (types with an offset; xs = the
//                                           sub-block's x added in increasing k from +0)
//   y[m][n] = acc (from +0)
// This is a fixed, row-local sequence of float operations, so the result is
// the same bits whatever M, the path, the tiling or the thread count. It is
// not the fma chain over the dequantized weights (that is dense_kernels.hpp's rule
// for float matrices): decoding a code is one instruction cheaper than
// decoding a weight, which is what decode speed is made of here. Accuracy is
// the same kind: tests compare with a float64 forward on the dequantized weights.
//
// LAYOUT. Rows are grouped in panels of 16 (dense_kernels.hpp's output panels). For
// each panel and each block of k, the 16 rows' blocks are stored together,
// field by field, with the 16 rows' copies of each field element side by side
// ("panel block"): e.g. for q4_K, 16 f16 d, 16 f16 dmin, then for each of the
// 12 scale bytes the 16 rows' bytes, then for each of the 128 code bytes the
// 16 rows' bytes. One 16-byte load then holds one code byte of 16 outputs,
// which widen to one 16-lane vector. The repacked matrix has exactly the
// file's bytes plus the zero rows that pad the last panel to 16.
//
// PATHS (all give the same bits):
//  * small M (decode, M <= 8) on AVX-512: a register tile of up to 8 rows x 4
//    panels decodes each k's 16-lane code vectors in registers from the
//    streamed panel blocks and runs the sub-block chains.
//  * small M on AVX2 (no AVX-512): the same with 8-lane decoders on half
//    panels, tiles of up to 8 rows x 4 half panels (shapes per decoder).
//    With more than one row, both read the rows interleaved (x'[k][r], copied
//    once per product by interleave_tile_rows()).
//  * otherwise: a k block of a tile of panels is factored into per-thread
//    buffers (codes, scales, offsets) and a micro-kernel with dense_kernels.hpp's
//    tile shapes runs over them (large M: with dense_kernels.hpp's GotoBLAS
//    blocking; the buffers are reused by every row of a row block, so their
//    cost vanishes as M grows). The factoring runs through the AVX-512 or AVX2
//    decoders, or the scalar code where the build has neither.
// The rows' sub-block sums xs are computed once per product into a per-thread
// buffer (allocated at its first use on each thread).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/core/isa.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/matmul/dense_kernels.hpp"
#include "kvdecode/weights/weight_type.hpp"

namespace kvd {

/// A weight matrix W (n_out x n_in, y = W x) of one ggml block type, repacked
/// into panel blocks (see the top of this file). Move-only.
class QuantMatrix {
 public:
  /// Rows of one part: `n_out` consecutive rows in ggml's bytes
  /// (weight_row_bytes(type, n_in) each), as a GGUF tensor stores them.
  struct Part {
    const unsigned char* rows;
    long n_out;
  };

  QuantMatrix() = default;

  /// Repacks `parts` stacked (their outputs concatenated, e.g. wq|wk|wv), all of
  /// type t with rows of n_in values. `name` names the matrix in errors.
  /// Throws ConfigError naming the matrix and the type if t is not a block type
  /// kvdecode computes with, or n_in is not a multiple of its block size.
  QuantMatrix(WeightType t, long n_in, std::initializer_list<Part> parts, const std::string& name = "matrix") {
    if (!detail::is_quant_block_type(t))
      throw ConfigError(detail::msg(name, ": weight type ", weight_type_name(t), " is not supported for matrices"));
    const auto tr = weight_type_traits(t);
    if (n_in <= 0 || n_in % tr.block_size != 0)
      throw ConfigError(detail::msg(name, ": rows of ", n_in, " values are not a multiple of ", tr.name,
                                    "'s block size ", tr.block_size));
    type_ = t;
    n_in_ = n_in;
    for (const Part& p : parts) n_out_ += p.n_out;
    n_panels_ = detail::round_up_lanes(n_out_) / detail::kLanes;
    n_blocks_ = n_in / tr.block_size;
    block_bytes_ = tr.block_bytes;
    block_size_ = tr.block_size;
    data_.resize(static_cast<std::size_t>(n_panels_) * n_blocks_ * panel_block_bytes());  // zeroed: padding rows are 0
    const std::size_t row_bytes = static_cast<std::size_t>(n_blocks_) * block_bytes_;
    long row = 0;
    for (const Part& p : parts)
      for (long r = 0; r < p.n_out; ++r, ++row)
        for (long b = 0; b < n_blocks_; ++b)
          detail::scatter_block(t, p.rows + r * row_bytes + b * block_bytes_, static_cast<int>(row % detail::kLanes),
                                mutable_panel_block(row / detail::kLanes, b));
  }

  /// One part: W's n_out rows of n_in values of type t.
  QuantMatrix(WeightType t, long n_out, long n_in, const unsigned char* rows, const std::string& name = "matrix")
      : QuantMatrix(t, n_in, {Part{rows, n_out}}, name) {}

  WeightType type() const { return type_; }
  long n_out() const { return n_out_; }                                 ///< N: output columns
  long n_in() const { return n_in_; }                                   ///< K: reduction length
  long n_out_padded() const { return n_panels_ * detail::kLanes; }      ///< N rounded up to 16
  long n_panels() const { return n_panels_; }
  long n_blocks() const { return n_blocks_; }                           ///< blocks per row
  long block_size() const { return block_size_; }                       ///< values per block
  std::size_t panel_block_bytes() const { return static_cast<std::size_t>(detail::kLanes) * block_bytes_; }
  std::uint64_t bytes() const { return data_.size(); }                  ///< repacked bytes held
  /// Panel p's block b: the 16 rows' blocks over k in [b * block_size, (b+1) * block_size).
  const unsigned char* panel_block(long p, long b) const {
    return data_.data() + (static_cast<std::size_t>(p) * n_blocks_ + b) * panel_block_bytes();
  }

  /// The kernels' view of the panels.
  detail::QuantPanels panels() const { return {type_, data_.data(), n_panels_, n_in_}; }

  /// Row n in ggml's bytes (weight_row_bytes(type, n_in) of them), e.g. to write it back to a file.
  void row_bytes(long n, unsigned char* out) const {
    for (long b = 0; b < n_blocks_; ++b)
      detail::gather_block(type_, panel_block(n / detail::kLanes, b), static_cast<int>(n % detail::kLanes),
                           out + b * block_bytes_);
  }
  /// Row n dequantized exactly as ggml does (n_in floats).
  void dequantize_row(long n, float* out) const {
    std::vector<unsigned char> row(static_cast<std::size_t>(n_blocks_) * block_bytes_);
    row_bytes(n, row.data());
    detail::dequantize_row(type_, row.data(), out, n_in_);
  }

 private:
  unsigned char* mutable_panel_block(long p, long b) {
    return data_.data() + (static_cast<std::size_t>(p) * n_blocks_ + b) * panel_block_bytes();
  }

  WeightType type_ = WeightType::kQ8_0;
  long n_out_ = 0, n_in_ = 0, n_panels_ = 0, n_blocks_ = 0;
  std::uint32_t block_bytes_ = 0, block_size_ = 0;
  detail::AlignedBuffer<unsigned char> data_;  // (n_panels, n_blocks, panel block)
};

namespace detail {

/// Calls f(std::integral_constant<int, i>) for i = 0 .. N-1 (compile-time k inside
/// a sub-block), inlined: f's own body should be KVD_ALWAYS_INLINE too.
template <int N, class F, int... I>
KVD_ALWAYS_INLINE inline void static_for_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
KVD_ALWAYS_INLINE inline void static_for(F&& f) {
  static_for_impl<N>(f, std::make_integer_sequence<int, N>{});
}

/// Most rows of the fused small-M paths.
inline constexpr long kQuantFusedMaxM = 8;

/// The fused tiles' input: x (M rows, stride ldx, K values) split into row tiles of
/// mr_max rows (the last may be shorter), each tile's rows interleaved:
/// out[m0 * K + k * mr + r] = x[m0 + r][k] for the tile of mr rows starting at m0.
/// A broadcast of row r at k is then one base register plus a constant; with one
/// pointer per row, GCC kept each of a tile's MR x 32 addresses in a stack slot and
/// loaded it before its broadcast (AVX2 q8_0, 5 rows: 18 against 36 G multiply-adds/s
/// per core in L2). M = 1 needs no copy and returns x. Otherwise the copy goes to a
/// per-thread buffer, allocated at its first use on the calling thread, and stays
/// valid until that thread's next call.
inline const float* interleave_tile_rows(const float* x, long ldx, long M, long K, long mr_max) {
  if (M == 1) return x;
  static thread_local AlignedBuffer<float> buf;
  buf.reserve(static_cast<std::size_t>(M * K));
  for (long m0 = 0; m0 < M; m0 += mr_max) {
    const long mr = std::min(mr_max, M - m0);
    float* dst = buf.data() + m0 * K;
    for (long r = 0; r < mr; ++r)
      for (long k = 0; k < K; ++k) dst[k * mr + r] = x[(m0 + r) * ldx + k];
  }
  return buf.data();
}

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
template <int kk>
inline __m512i qk_nibble(const unsigned char* words) {
  const __m512i v = _mm512_loadu_si512(words + 64 * (kk / 8));
  if constexpr (kk % 8 == 7) return _mm512_srli_epi32(v, 28);
  return _mm512_and_si512(_mm512_srli_epi32(v, 4 * (kk % 8)), _mm512_set1_epi32(15));
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

/// q5_0 / q5_1: code = nibble | bit kk of the row's qh << 4, looked up in a
/// 32-float table (q5_0: code - 16, then * d; q5_1: code, then fma with d and m).
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
  template <int kk>
  __m512 code() const {
    const float o = kMin ? 0.f : -16.f;
    const __m512 lo = _mm512_add_ps(qk_iota16(), _mm512_set1_ps(o)), hi = _mm512_add_ps(qk_iota16(), _mm512_set1_ps(o + 16));
    return _mm512_permutex2var_ps(lo, qk_five_bit_index<kk>(q, qh), hi);
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

/// q4_K (kHigh = false) and q5_K (true): 8 sub-blocks of 32, y = fma(code, d sc, -(dmin m)).
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
    q = pb + (kFive ? 768 : 256) + 256 * s;
    if constexpr (kFive) hw = _mm512_loadu_si512(pb + 256 + 64 * s);
  }
  template <int kk>
  __m512 code() const {
    if constexpr (!kFive) {
      return qk_nibble_float<kk>(q);
    } else {
      return _mm512_permutex2var_ps(qk_iota16(), qk_five_bit_index<kk>(q, hw),
                                    _mm512_add_ps(qk_iota16(), _mm512_set1_ps(16.f)));
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
/// Value 16 s + kk: low 4 bits in low word 2 s + kk / 8, high 2 bits in high word s.
/// code - 32 comes out of the bit merge directly: with the upper bit of every
/// high pair inverted once per sub-block, an arithmetic shift puts bit 4 in place
/// and copies the inverted bit 5 into bits 5..31, which is the two's complement
/// of code - 32.
struct DecodeQ6_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = false;
  const unsigned char* ql;
  __m512i hw;
  __m512 D, N;
  void begin(const unsigned char* pb, int s) {
    D = _mm512_mul_ps(qk_f16x16(pb), _mm512_cvtepi32_ps(qk_i8x16(pb + 32 + 16 * s)));
    ql = pb + 288 + 128 * s;
    hw = _mm512_xor_si512(_mm512_loadu_si512(pb + 2336 + 64 * s), _mm512_set1_epi32(static_cast<int>(0xAAAAAAAAu)));
  }
  template <int kk>
  __m512 code() const {
    const __m512i v = _mm512_loadu_si512(ql + 64 * (kk / 8));
    const __m512i lo = kk % 8 == 0 ? v : _mm512_srli_epi32(v, 4 * (kk % 8));
    // the 2 high bits to the top, then arithmetically down to bits 4..5 (sign above)
    const __m512i hi = _mm512_srai_epi32(kk == 15 ? hw : _mm512_slli_epi32(hw, 30 - 2 * kk), 26);
    const __m512i code_minus_32 = _mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi32(15), 0xE4);
    return _mm512_cvtepi32_ps(code_minus_32);
  }
};
template <>
struct Avx512DecoderOf<BlockTypeQ6_K> {
  using type = DecodeQ6_K;
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
  if (!visit_block_type(t, [&](auto row) { f(typename Avx512DecoderOf<decltype(row)>::type{}); })) KVD_ASSERT(false);
}

// The fused small-M kernels: 23 register tiles per block type, each unrolled over
// a sub-block. Sanitized builds (KVDECODE_NO_FUSED_QUANT, set by the project's
// ASan and fuzz builds) leave them out, because instrumenting them takes longer
// than the rest of the build (over 12 minutes for this file with GCC
// -fsanitize=address,undefined); products then take the buffered path, which
// gives the same bits (tests/quant_matrix_test.cpp compares every path).
#if defined(KVDECODE_QUANT_FUSED)
/// Small-M register tile (AVX-512, float): MR rows x NP panels over all of k,
/// the codes decoded in registers, in the factored order (top of this file).
/// xp = the MR rows interleaved, xp[k * MR + r] = x[r][k] (interleave_tile_rows()).
/// xs (MR x K / kSub, row stride ldxs) = the rows' sub-block sums (types with a min).
/// y rows get all 16 NP columns.
template <class Dec, int MR, int NP>
inline void quant_tile_fused(const float* xp, const float* xs, long ldxs, const QuantPanels& w, long p0, float* y,
                             long ldy) {
  // The running sums stay in registers when they fit beside the sub-block sums,
  // else in y (read and written once per sub-block; exact either way).
  constexpr bool kInRegisters = 2 * MR * NP + 3 * NP + 2 <= 32;
  __m512 acc[kInRegisters ? MR : 1][kInRegisters ? NP : 1];
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(4) for (int p = 0; p < NP; ++p) {
      if constexpr (kInRegisters)
        acc[r][p] = _mm512_setzero_ps();
      else
        _mm512_storeu_ps(y + r * ldy + (p0 + p) * kLanes, _mm512_setzero_ps());
    }
  const long nb = w.n_blocks();
  const std::size_t pbb = w.panel_block_bytes();
  constexpr int kSubs = Dec::kBlock / Dec::kSub;
  for (long b = 0; b < nb; ++b) {
    const unsigned char* pb[NP];
    KVD_UNROLL(4) for (int p = 0; p < NP; ++p) pb[p] = w.panel_block(p0 + p, b);
    for (int s = 0; s < kSubs; ++s) {
      const float* xk = xp + (b * Dec::kBlock + s * Dec::kSub) * MR;
      Dec dec[NP];
      KVD_UNROLL(4) for (int p = 0; p < NP; ++p) {
        dec[p].begin(pb[p], s);
        // Two blocks ahead in each panel stream, a share per sub-block (never faults).
        const std::size_t line0 = pbb * s / kSubs / 64, line1 = (pbb * (s + 1) / kSubs + 63) / 64;
        for (std::size_t l = line0; l < line1; ++l) prefetch_read_at(pb[p], 2 * pbb + 64 * l);
      }
      __m512 t[MR][NP];
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(4) for (int p = 0; p < NP; ++p) t[r][p] = _mm512_setzero_ps();
      static_for<Dec::kSub>([&](auto kk) KVD_ALWAYS_INLINE {
        __m512 cv[NP];
        KVD_UNROLL(4) for (int p = 0; p < NP; ++p) cv[p] = dec[p].template code<kk>();
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
          const __m512 xv = _mm512_set1_ps(xk[kk * MR + r]);
          KVD_UNROLL(4) for (int p = 0; p < NP; ++p) t[r][p] = _mm512_fmadd_ps(xv, cv[p], t[r][p]);
        }
      });
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
        const __m512 xsv = Dec::kMin ? _mm512_set1_ps(xs[r * ldxs + b * kSubs + s]) : _mm512_setzero_ps();
        KVD_UNROLL(4) for (int p = 0; p < NP; ++p) {
          float* yp = y + r * ldy + (p0 + p) * kLanes;
          __m512 a;
          if constexpr (kInRegisters)
            a = acc[r][p];
          else
            a = _mm512_loadu_ps(yp);
          a = _mm512_fmadd_ps(t[r][p], dec[p].D, a);
          if constexpr (Dec::kMin) a = _mm512_fmadd_ps(xsv, dec[p].N, a);
          if constexpr (kInRegisters)
            acc[r][p] = a;
          else
            _mm512_storeu_ps(yp, a);
        }
      }
    }
  }
  if constexpr (kInRegisters) {
    KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(4) for (int p = 0; p < NP; ++p) _mm512_storeu_ps(y + r * ldy + (p0 + p) * kLanes, acc[r][p]);
  }
}

/// Panels per fused tile for m rows (register budget: m * NP partial sums, NP codes, 2 NP scale vectors;
/// 5 to 8 rows take one panel, which keeps the running sums in registers: 15-25% faster at M = 8
/// than two panels with them in y).
constexpr int quant_fused_panels(int m) { return m <= 3 ? 4 : m == 4 ? 3 : 1; }

template <class Dec, int MR, int NP = quant_fused_panels(MR)>
inline void quant_tile_fused_np(int np, const float* xp, const float* xs, long ldxs, const QuantPanels& w, long p0,
                                float* y, long ldy) {
  if constexpr (NP >= 1) {
    if (np == NP) return quant_tile_fused<Dec, MR, NP>(xp, xs, ldxs, w, p0, y, ldy);
    return quant_tile_fused_np<Dec, MR, NP - 1>(np, xp, xs, ldxs, w, p0, y, ldy);
  }
}

template <class Dec, int MR = static_cast<int>(kQuantFusedMaxM)>
inline void quant_tile_fused_any(int mr, int np, const float* xp, const float* xs, long ldxs, const QuantPanels& w,
                                 long p0, float* y, long ldy) {
  if constexpr (MR >= 1) {
    if (mr == MR) return quant_tile_fused_np<Dec, MR>(np, xp, xs, ldxs, w, p0, y, ldy);
    return quant_tile_fused_any<Dec, MR - 1>(mr, np, xp, xs, ldxs, w, p0, y, ldy);
  }
}

/// Small M (<= kQuantFusedMaxM), AVX-512: one row tile; threads take contiguous ranges of column tiles.
/// A template (T = float only) so that its tiles are instantiated where matmul_quant_with
/// is, once in the kernel-instance library, not in every file that includes this header.
template <class T>
void matmul_quant_fused(const T* x, long ldx, long M, const T* xs, long ldxs, const QuantPanels& w, T* y, long ldy,
                        bool parallel) {
  static_assert(std::is_same_v<T, float>, "the fused tiles are float-only");
  const int mr = static_cast<int>(M);
  const int np_max = quant_fused_panels(mr);
  const long P = w.n_panels(), n_ctiles = (P + np_max - 1) / np_max;
  const float* xp = interleave_tile_rows(x, ldx, M, w.n_in(), M);
  with_decoder(w.type(), [&](auto dec) {
    using Dec = decltype(dec);
    parallel_parts(n_ctiles, parallel, [&](long c0, long c1) {
      for (long c = c0; c < c1; ++c) {
        const long p0 = c * np_max;
        const int np = static_cast<int>(std::min<long>(np_max, P - p0));
        quant_tile_fused_any<Dec>(mr, np, xp, xs, ldxs, w, p0, y, ldy);
      }
    });
  });
}
#endif  // fused tiles
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // AVX-512

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
// converted exactly; D and N are the same float operations as the scalar
// factoring (weights/blocks.hpp), so the same bits. Half h of a field sits at
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
/// Bits shift .. shift + width - 1 of each lane of v, at bit 0.
template <int kShift, int kWidth>
inline __m256i q2_bits(__m256i v) {
  if constexpr (kShift + kWidth == 32) return _mm256_srli_epi32(v, kShift);
  const __m256i s = kShift == 0 ? v : _mm256_srli_epi32(v, kShift);
  return _mm256_and_si256(s, _mm256_set1_epi32((1 << kWidth) - 1));
}
/// Bit kBit of each lane of v, moved to bit kTo (the other bits 0).
template <int kBit, int kTo>
inline __m256i q2_bit_to(__m256i v) {
  const __m256i s = kBit == kTo ? v : kBit > kTo ? _mm256_srli_epi32(v, kBit - kTo) : _mm256_slli_epi32(v, kTo - kBit);
  return _mm256_and_si256(s, _mm256_set1_epi32(1 << kTo));
}
inline __m256 q2_neg(__m256 v) { return _mm256_sub_ps(_mm256_set1_ps(-0.f), v); }  // -v exactly, zeros included

/// The AVX2 decoder of a block type's row (weights/block_types.hpp): `type`,
/// specialised after each decoder below.
template <class Row>
struct Avx2DecoderOf;

struct Avx2DecodeQ8_0 {
  static constexpr int kBlock = 32, kSub = 32;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = false;
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
  const unsigned char* q;
  __m256 D, N;
  void begin(const unsigned char* pb, int, int h) {
    D = q2_f16x8(pb + 16 * h);
    N = kMin ? q2_f16x8(pb + 32 + 16 * h) : _mm256_setzero_ps();
    q = pb + (kMin ? 64 : 32) + 32 * h;
  }
  template <int kk>
  __m256 code() const {
    const __m256i c = q2_bits<4 * (kk % 8), 4>(q2_words(q + 64 * (kk / 8)));
    return _mm256_cvtepi32_ps(kMin ? c : _mm256_sub_epi32(c, _mm256_set1_epi32(8)));
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
    const __m256i c = _mm256_or_si256(q2_bits<4 * (kk % 8), 4>(q2_words(q + 64 * (kk / 8))), q2_bit_to<kk, 4>(qh));
    return _mm256_cvtepi32_ps(kMin ? c : _mm256_sub_epi32(c, _mm256_set1_epi32(16)));
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

/// q2_K: 16 sub-blocks of 16, sub-block s = code word s; D = d (sc & 15), N = -(dmin (sc >> 4)).
struct Avx2DecodeQ2_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = true;
  static constexpr bool kHeavy = false;
  __m256i words;
  __m256 D, N;
  void begin(const unsigned char* pb, int s, int h) {
    const __m256i sc = q2_u8x8(pb + 64 + 16 * s + 8 * h);
    D = _mm256_mul_ps(q2_f16x8(pb + 16 * h), _mm256_cvtepi32_ps(_mm256_and_si256(sc, _mm256_set1_epi32(15))));
    N = q2_neg(_mm256_mul_ps(q2_f16x8(pb + 32 + 16 * h), _mm256_cvtepi32_ps(_mm256_srli_epi32(sc, 4))));
    words = q2_words(pb + 320 + 64 * s + 32 * h);
  }
  template <int kk>
  __m256 code() const { return _mm256_cvtepi32_ps(q2_bits<2 * kk, 2>(words)); }
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
  __m256i lw, hw;
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
    lw = q2_words(pb + 736 + 64 * s + 32 * h);
    // high bits of values 16 s .. 16 s + 15: word s / 2, from bit 16 (s % 2)
    hw = _mm256_srl_epi32(q2_words(pb + 224 + 64 * (s / 2) + 32 * h), _mm_cvtsi32_si128(16 * (s % 2)));
  }
  template <int kk>
  __m256 code() const {
    const __m256i idx = _mm256_or_si256(q2_bits<2 * kk, 2>(lw), q2_bit_to<kk, 2>(hw));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(idx, _mm256_set1_epi32(4)));
  }
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
  const unsigned char* q;
  __m256 D, N;
  __m256i hw;
  void begin(const unsigned char* pb, int s, int h) {
    __m256i sc, mn;
    q2_k4_scale_min(pb + 64 + 8 * h, s, sc, mn);
    D = _mm256_mul_ps(q2_f16x8(pb + 16 * h), _mm256_cvtepi32_ps(sc));
    N = q2_neg(_mm256_mul_ps(q2_f16x8(pb + 32 + 16 * h), _mm256_cvtepi32_ps(mn)));
    q = pb + (kFive ? 768 : 256) + 256 * s + 32 * h;
    hw = kFive ? q2_words(pb + 256 + 64 * s + 32 * h) : _mm256_setzero_si256();
  }
  template <int kk>
  __m256 code() const {
    const __m256i c = q2_bits<4 * (kk % 8), 4>(q2_words(q + 64 * (kk / 8)));
    if constexpr (!kFive) return _mm256_cvtepi32_ps(c);
    return _mm256_cvtepi32_ps(_mm256_or_si256(c, q2_bit_to<kk, 4>(hw)));
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
/// bits in low word 2 s + kk / 8, high 2 bits in high word s (bits 2 kk, 2 kk + 1).
/// As in the AVX-512 decoder, the upper high bit is inverted once per sub-block and
/// an arithmetic shift turns the two high bits into (high - 2) << 4, the two's
/// complement of the code's high part minus 32.
struct Avx2DecodeQ6_K {
  static constexpr int kBlock = 256, kSub = 16;
  static constexpr bool kMin = false;
  static constexpr bool kHeavy = true;
  const unsigned char* ql;
  __m256i hw;
  __m256 D, N;
  void begin(const unsigned char* pb, int s, int h) {
    D = _mm256_mul_ps(q2_f16x8(pb + 16 * h), _mm256_cvtepi32_ps(q2_i8x8(pb + 32 + 16 * s + 8 * h)));
    N = _mm256_setzero_ps();
    ql = pb + 288 + 128 * s + 32 * h;
    hw = _mm256_xor_si256(q2_words(pb + 2336 + 64 * s + 32 * h), _mm256_set1_epi32(static_cast<int>(0xAAAAAAAAu)));
  }
  template <int kk>
  __m256 code() const {
    const __m256i lo = q2_bits<4 * (kk % 8), 4>(q2_words(ql + 64 * (kk / 8)));
    // the 2 high bits to the top, then arithmetically down to bits 4..5 (sign above), low bits cleared
    const __m256i hi = _mm256_slli_epi32(_mm256_srai_epi32(kk == 15 ? hw : _mm256_slli_epi32(hw, 30 - 2 * kk), 30), 4);
    return _mm256_cvtepi32_ps(_mm256_or_si256(lo, hi));
  }
};
template <>
struct Avx2DecoderOf<BlockTypeQ6_K> {
  using type = Avx2DecodeQ6_K;
};

/// Calls f(Dec{}) with the AVX2 decoder of block type t (one look-up per call:
/// call it outside the tiles). Asserts that t is a block type.
template <class F>
inline void with_decoder_avx2(WeightType t, F&& f) {
  if (!visit_block_type(t, [&](auto row) { f(typename Avx2DecoderOf<decltype(row)>::type{}); })) KVD_ASSERT(false);
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

/// Prefetches two panel blocks ahead in a panel stream, sub-block s's share of
/// n_subs (never faults); half h takes the even lines, the other half the odd ones.
inline void prefetch_half_panel_share(const unsigned char* pb, std::size_t pbb, int s, int n_subs, long h) {
  const std::size_t line0 = pbb * s / n_subs / 64, line1 = (pbb * (s + 1) / n_subs + 63) / 64;
  for (std::size_t l = line0 + static_cast<std::size_t>(h); l < line1; l += 2) prefetch_read_at(pb, 2 * pbb + 64 * l);
}

#if defined(KVDECODE_QUANT_FUSED_AVX2)
/// Small-M register tile (AVX2, float): MR rows x NH half panels (8 outputs each,
/// half panel i = lanes 8 (i % 2) .. of panel i / 2) over all of k, the codes
/// decoded in registers, in the factored order (top of this file). The running
/// sums live in y (read and written once per sub-block), the sub-block's partial
/// sums in registers: MR NH of them, beside the NH code vectors and one broadcast.
/// xp = the MR rows interleaved, xp[k * MR + r] = x[r][k] (interleave_tile_rows()).
/// xs (MR x K / kSub, row stride ldxs) = the rows' sub-block sums (types with a min).
template <class Dec, int MR, int NH>
inline void quant_tile_fused_avx2(const float* xp, const float* xs, long ldxs, const QuantPanels& w, long h0, float* y,
                                  long ldy) {
  KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(8) for (int i = 0; i < NH; ++i) _mm256_storeu_ps(y + r * ldy + (h0 + i) * 8, _mm256_setzero_ps());
  const long nb = w.n_blocks();
  const std::size_t pbb = w.panel_block_bytes();
  constexpr int kSubs = Dec::kBlock / Dec::kSub;
  for (long b = 0; b < nb; ++b) {
    const unsigned char* pb[NH];
    KVD_UNROLL(8) for (int i = 0; i < NH; ++i) pb[i] = w.panel_block((h0 + i) / 2, b);
    for (int s = 0; s < kSubs; ++s) {
      const float* xk = xp + (b * Dec::kBlock + s * Dec::kSub) * MR;
      Dec dec[NH];
      KVD_UNROLL(8) for (int i = 0; i < NH; ++i) {
        dec[i].begin(pb[i], s, static_cast<int>((h0 + i) % 2));
        prefetch_half_panel_share(pb[i], pbb, s, kSubs, (h0 + i) % 2);
      }
      __m256 t[MR][NH];
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r)
        KVD_UNROLL(8) for (int i = 0; i < NH; ++i) t[r][i] = _mm256_setzero_ps();
      static_for<Dec::kSub>([&](auto kk) KVD_ALWAYS_INLINE {
        __m256 cv[NH];
        KVD_UNROLL(8) for (int i = 0; i < NH; ++i) cv[i] = dec[i].template code<kk>();
        KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
          const __m256 xb = _mm256_broadcast_ss(xk + kk * MR + r);
          KVD_UNROLL(8) for (int i = 0; i < NH; ++i) t[r][i] = _mm256_fmadd_ps(xb, cv[i], t[r][i]);
        }
      });
      KVD_UNROLL(8) for (int r = 0; r < MR; ++r) {
        KVD_UNROLL(8) for (int i = 0; i < NH; ++i) {
          float* yp = y + r * ldy + (h0 + i) * 8;
          __m256 a = _mm256_fmadd_ps(t[r][i], dec[i].D, _mm256_loadu_ps(yp));
          if constexpr (Dec::kMin) a = _mm256_fmadd_ps(_mm256_broadcast_ss(xs + r * ldxs + b * kSubs + s), dec[i].N, a);
          _mm256_storeu_ps(yp, a);
        }
      }
    }
  }
}

/// The AVX2 fused tiles' shapes (16 ymm registers: MR NH partial sums, NH code
/// vectors, a broadcast, the decoders' constants and, for a heavy decoder, one
/// code word per half panel). Measured per core in L2 (2048-long rows, Zen 3,
/// interleaved rows), best of NH = 1, 2, 4 (G multiply-adds/s): light decoders
/// take 4 half panels for 1 or 2 rows and 2 for 3 to 6 (q8_0: 3 rows 28.9, 4
/// rows 33.6, 5 rows 35.5, 6 rows 37.5); 7 or 8 rows are split into two tiles
/// (two 4 x 2 tiles 33.6 against 33.4 for one 8 x 1). Heavy decoders take 2 half
/// panels up to 5 rows (3 rows: 16.5-22.7 against 14.5-17.4 with one; 5 rows:
/// 19.9-27.3 against 19.2-23.2) and 1 for 6 to 8, with up to 8 rows per tile
/// (q5_K 8 x 1: 28.1).
template <class Dec>
constexpr int quant_fused_rows_avx2(int m) { return Dec::kHeavy || m <= 6 ? m : (m + 1) / 2; }
template <class Dec>
constexpr int quant_fused_halves_avx2(int mr) {
  if constexpr (Dec::kHeavy) return mr <= 5 ? 2 : 1;
  return mr <= 2 ? 4 : 2;
}

template <class Dec, int MR, int NH = quant_fused_halves_avx2<Dec>(MR)>
inline void quant_tile_fused_avx2_nh(int nh, const float* xp, const float* xs, long ldxs, const QuantPanels& w, long h0,
                                     float* y, long ldy) {
  if constexpr (NH >= 1) {
    if (nh == NH) return quant_tile_fused_avx2<Dec, MR, NH>(xp, xs, ldxs, w, h0, y, ldy);
    return quant_tile_fused_avx2_nh<Dec, MR, NH - 1>(nh, xp, xs, ldxs, w, h0, y, ldy);
  }
}

/// The most rows of any AVX2 tile of decoder Dec.
template <class Dec>
constexpr int quant_fused_max_rows_avx2() {
  int most = 0;
  for (int m = 1; m <= static_cast<int>(kQuantFusedMaxM); ++m) most = std::max(most, quant_fused_rows_avx2<Dec>(m));
  return most;
}

template <class Dec, int MR = quant_fused_max_rows_avx2<Dec>()>
inline void quant_tile_fused_avx2_any(int mr, int nh, const float* xp, const float* xs, long ldxs, const QuantPanels& w,
                                      long h0, float* y, long ldy) {
  if constexpr (MR >= 1) {
    if (mr == MR) return quant_tile_fused_avx2_nh<Dec, MR>(nh, xp, xs, ldxs, w, h0, y, ldy);
    return quant_tile_fused_avx2_any<Dec, MR - 1>(mr, nh, xp, xs, ldxs, w, h0, y, ldy);
  }
}

/// Small M (<= kQuantFusedMaxM), AVX2: one or two row tiles; threads take contiguous
/// ranges of column tiles (a template for the same reason as matmul_quant_fused).
/// The rows of each row tile are interleaved first (interleave_tile_rows()).
template <class T>
void matmul_quant_fused_avx2(const T* x, long ldx, long M, const T* xs, long ldxs, const QuantPanels& w, T* y, long ldy,
                             bool parallel) {
  static_assert(std::is_same_v<T, float>, "the fused tiles are float-only");
  with_decoder_avx2(w.type(), [&](auto dec) {
    using Dec = decltype(dec);
    const int mr_max = quant_fused_rows_avx2<Dec>(static_cast<int>(M));
    const int nh_max = quant_fused_halves_avx2<Dec>(mr_max);
    const long K = w.n_in();
    const float* xp = interleave_tile_rows(x, ldx, M, K, mr_max);  // row tile m0 at xp + m0 * K
    const long H = 2 * w.n_panels(), n_ctiles = (H + nh_max - 1) / nh_max;
    parallel_parts(n_ctiles, parallel, [&](long c0, long c1) {
      for (long c = c0; c < c1; ++c) {
        const long h0 = c * nh_max;
        const int nh = static_cast<int>(std::min<long>(nh_max, H - h0));
        for (long m0 = 0; m0 < M; m0 += mr_max) {
          const int mr = static_cast<int>(std::min<long>(mr_max, M - m0));
          quant_tile_fused_avx2_any<Dec>(mr, nh, xp + m0 * K, xs ? xs + m0 * ldxs : nullptr, ldxs, w, h0, y + m0 * ldy,
                                         ldy);
        }
      }
    });
  });
}
#endif  // fused tiles
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // AVX2

/// How a panel block becomes floats: kPortable (scalar, weights/blocks.hpp),
/// kAvx2 or kAvx512 (the decoders above). All give the same bits. A request for
/// decoders the build lacks takes the next one it has (AVX-512, then AVX2, then
/// the scalar code); kQuantDequantBest is the fastest the build has.
enum class QuantDequant { kPortable, kAvx2, kAvx512 };
#if defined(KVDECODE_QUANT_AVX512)
inline constexpr QuantDequant kQuantDequantBest = QuantDequant::kAvx512;
#elif defined(KVDECODE_QUANT_AVX2)
inline constexpr QuantDequant kQuantDequantBest = QuantDequant::kAvx2;
#else
inline constexpr QuantDequant kQuantDequantBest = QuantDequant::kPortable;
#endif

/// The k block of the buffered paths: 256 values, a whole number of blocks of every type.
inline constexpr long kQuantKc = 256;

/// The factored form of panels [p0, p0 + np) over k in [k0, k0 + kc): codes c
/// (kc x 16 per panel, panels kc * 16 apart), scales D and offsets N (kc / sub
/// x 16 per panel, panels kc / sub * 16 apart; N only for types with a min).
template <class T>
inline void factor_panels(const QuantPanels& w, long p0, int np, long k0, long kc, T* c, T* D, T* N, QuantDequant how) {
  const long bs = w.block_size(), sub = quant_factoring(w.type()).sub;
  for (int p = 0; p < np; ++p)
    for (long k = k0; k < k0 + kc; k += bs) {
      const unsigned char* pb = w.panel_block(p0 + p, k / bs);
      T* co = c + (p * kc + (k - k0)) * kLanes;
      const long so = (p * (kc / sub) + (k - k0) / sub) * kLanes;
      T* Do = D + so;
      T* No = N ? N + so : nullptr;
#if defined(KVDECODE_QUANT_AVX512)
      if constexpr (std::is_same_v<T, float>) {
        if (how == QuantDequant::kAvx512) {
          with_decoder(w.type(), [&](auto dec) { factor_panel_block_avx512<decltype(dec)>(pb, co, Do, No); });
          continue;
        }
      }
#endif
#if defined(KVDECODE_QUANT_AVX2)
      if constexpr (std::is_same_v<T, float>) {
        if (how != QuantDequant::kPortable) {
          with_decoder_avx2(w.type(), [&](auto dec) { factor_panel_block_avx2<decltype(dec)>(pb, co, Do, No); });
          continue;
        }
      }
#endif
      (void)how;
      factor_panel_block_portable<T>(w.type(), pb, co, Do, No);
    }
}

/// xs[m * (K / sub) + j] = the sum of row m's values in sub-block j, added in
/// increasing k from +0 (the one definition every path uses). Sixteen sub-blocks
/// are summed side by side (k outer, sub-block inner), so that sixteen independent
/// chains hide the add latency; each chain is still the same sequence of adds.
template <class T>
inline void sub_block_sums_rows(const T* x, long ldx, long m0, long m1, long K, long sub, T* xs) {
  constexpr long kChains = 16;
  const long n = K / sub;
  for (long m = m0; m < m1; ++m) {
    const T* row = x + m * ldx;
    for (long j0 = 0; j0 < n; j0 += kChains) {
      const long nj = std::min(kChains, n - j0);
      T s[kChains] = {};
      for (long k = 0; k < sub; ++k)
        for (long j = 0; j < nj; ++j) s[j] += row[(j0 + j) * sub + k];
      std::copy(s, s + nj, xs + m * n + j0);
    }
  }
}

/// sub_block_sums_rows() over all M rows, split by rows between threads when parallel.
template <class T>
inline void sub_block_sums(const T* x, long ldx, long M, long K, long sub, T* xs, bool parallel = false) {
#if defined(_OPENMP)
#pragma omp parallel if (parallel && M > 1)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    long m0, m1;
    split_range(M, t, nt, m0, m1);
    sub_block_sums_rows(x, ldx, m0, m1, K, sub, xs);
  }
}

/// One register tile of the buffered paths: MR rows x NP panels over k in [0, kc),
/// in the factored order. Input row r at k is a[r * lda + k] (lda = kLda when
/// kLda > 0); panel p's codes at k are c[p * cstride + 16 k ..), its scales and
/// offsets of sub-block j at D / N[p * dstride + 16 j ..) (N null: no min); xs[r *
/// ldxs + j] the row's sum over sub-block j. `first` starts y at +0, otherwise the
/// tile continues the running sums stored in y.
template <class T, class V, int MR, int NP, long kLda>
inline void quant_tile(const T* a, long lda, const T* c, long cstride, long kc, long sub, const T* D, const T* N,
                       long dstride, const T* xs, long ldxs, T* y, long ldy, bool first) {
  if constexpr (kLda > 0) lda = kLda;
  // The running sums stay in registers when they fit beside the partial sums
  // (the prefill tiles, quant_large_rows), else in y (once per sub-block).
  constexpr bool kInRegisters = 2 * MR * NP <= V::kLargeAccumulators;
  V acc[kInRegisters ? MR : 1][kInRegisters ? NP : 1];
  KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(8) for (int p = 0; p < NP; ++p) {
      if constexpr (kInRegisters)
        acc[r][p] = first ? V::zero() : V::load(y + r * ldy + p * kLanes);
      else if (first)
        V::zero().store(y + r * ldy + p * kLanes);
    }
  for (long s0 = 0, j = 0; s0 < kc; s0 += sub, ++j) {
    V t[MR][NP];
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) t[r][p] = V::zero();
    for (long k = s0; k < s0 + sub; ++k) {
      V bv[NP];
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) bv[p] = V::load(c + p * cstride + k * kLanes);
      KVD_UNROLL(16) for (int r = 0; r < MR; ++r) {
        const V av = V::broadcast(a[r * lda + k]);
        KVD_UNROLL(8) for (int p = 0; p < NP; ++p) t[r][p].fma(av, bv[p]);
      }
    }
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) {
        V a;
        if constexpr (kInRegisters)
          a = acc[r][p];
        else
          a = V::load(y + r * ldy + p * kLanes);
        a.fma(t[r][p], V::load(D + p * dstride + j * kLanes));
        if (N) a.fma(V::broadcast(xs[r * ldxs + j]), V::load(N + p * dstride + j * kLanes));
        if constexpr (kInRegisters)
          acc[r][p] = a;
        else
          a.store(y + r * ldy + p * kLanes);
      }
  }
  if constexpr (kInRegisters) {
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p].store(y + r * ldy + p * kLanes);
  }
}

/// Rows of a prefill (large-M) tile. With 32 vector registers (AVX-512): half the
/// float tiles' rows, so that the running sums fit in registers beside the
/// partial sums (7 x 2 panels: 14 partial sums). With 16 (AVX2, one panel of 2
/// ymm): all the float tile's rows, the running sums in y (read and written once
/// per sub-block). Halving there left 6 partial-sum chains, fewer than the 8 that
/// two fma pipes of latency 4 need: Q8_0 prefill ran at 58% of the FMA peak
/// against f32's 87% (Zen 3).
template <class V>
inline constexpr int kQuantLargeRows = kLargePanels<V> >= 2 ? std::max(1, kLargeRows<V> / 2) : kLargeRows<V>;

// Runtime (mr, np) -> the matching compiled tile (the shapes of dense_kernels.hpp's float tiles).
template <class T, class V, long kLda, int NP, int MR = max_tile_rows<V, kLda>(NP)>
inline void quant_tile_rows(int mr, const T* a, long lda, const T* c, long cstride, long kc, long sub, const T* D,
                            const T* N, long dstride, const T* xs, long ldxs, T* y, long ldy, bool first) {
  if constexpr (MR >= 1) {
    if (mr == MR) return quant_tile<T, V, MR, NP, kLda>(a, lda, c, cstride, kc, sub, D, N, dstride, xs, ldxs, y, ldy, first);
    return quant_tile_rows<T, V, kLda, NP, MR - 1>(mr, a, lda, c, cstride, kc, sub, D, N, dstride, xs, ldxs, y, ldy, first);
  }
}
template <class T, class V, long kLda, int NP = (kLda > 0 ? kLargePanels<V> : kMaxTilePanels)>
inline void quant_tile_any(int mr, int np, const T* a, long lda, const T* c, long cstride, long kc, long sub, const T* D,
                           const T* N, long dstride, const T* xs, long ldxs, T* y, long ldy, bool first) {
  if constexpr (NP >= 1) {
    if (np == NP) return quant_tile_rows<T, V, kLda, NP>(mr, a, lda, c, cstride, kc, sub, D, N, dstride, xs, ldxs, y, ldy, first);
    return quant_tile_any<T, V, kLda, NP - 1>(mr, np, a, lda, c, cstride, kc, sub, D, N, dstride, xs, ldxs, y, ldy, first);
  }
}

/// The per-thread buffers of the buffered paths: codes, scales, offsets for np panels x kQuantKc.
template <class T>
struct QuantBuffers {
  AlignedBuffer<T> c, D, N;
  void reserve(long np) {
    c.reserve(static_cast<std::size_t>(np) * kQuantKc * kLanes);
    D.reserve(static_cast<std::size_t>(np) * kQuantKc * kLanes / 16);  // sub >= 16
    N.reserve(static_cast<std::size_t>(np) * kQuantKc * kLanes / 16);
  }
};

/// Buffered small M: per column tile and k block of kQuantKc, the tile's panels
/// are factored into a per-thread buffer and every row tile runs quant_tile over
/// it, continuing each output's running sum where the last k block left it.
template <class T, class V>
void matmul_quant_small(const T* x, long ldx, long M, const T* xs, long ldxs, const QuantPanels& w, T* y, long ldy,
                        bool parallel, QuantDequant how) {
  const long K = w.n_in(), P = w.n_panels();
  const QuantFactoring f = quant_factoring(w.type());
  const long n_rtiles = M <= kLargeRows<V> ? 1 : (M + kSmallRows<V> - 1) / kSmallRows<V>;
  const int mr_max = static_cast<int>((M + n_rtiles - 1) / n_rtiles);
  const int np_max = small_panels<V>(mr_max);
  const long n_ctiles = (P + np_max - 1) / np_max;
#if defined(_OPENMP)
#pragma omp parallel if (parallel)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    static thread_local QuantBuffers<T> buf;
    buf.reserve(kMaxTilePanels);
    long c0, c1;
    split_range(n_ctiles, t, nt, c0, c1);
    for (long c = c0; c < c1; ++c) {
      const long p0 = c * np_max;
      const int np = static_cast<int>(std::min<long>(np_max, P - p0));
      for (long k0 = 0; k0 < K; k0 += kQuantKc) {
        const long kc = std::min(kQuantKc, K - k0);
        T* N = f.has_min ? buf.N.data() : nullptr;
        factor_panels(w, p0, np, k0, kc, buf.c.data(), buf.D.data(), N, how);
        for (long m0 = 0; m0 < M; m0 += mr_max) {
          const int mr = static_cast<int>(std::min<long>(mr_max, M - m0));
          quant_tile_any<T, V, 0>(mr, np, x + m0 * ldx + k0, ldx, static_cast<const T*>(buf.c.data()), kc * kLanes, kc,
                                  f.sub, static_cast<const T*>(buf.D.data()), static_cast<const T*>(N), kc / f.sub * kLanes,
                                  xs ? xs + m0 * ldxs + k0 / f.sub : nullptr, ldxs, y + m0 * ldy + p0 * kLanes, ldy, k0 == 0);
        }
      }
    }
  }
}

/// Buffered large M (prefill): dense_kernels.hpp's matmul_large blocking (k blocks of
/// kMatmulKc = kQuantKc, row blocks of up to kMatmulMc packed rows) with 7 x
/// 2-panel tiles (kQuantLargeRows), each k block of a panel tile factored into a per-thread
/// buffer once per row block.
template <class T, class V>
void matmul_quant_large(const T* x, long ldx, long M, const T* xs, long ldxs, const QuantPanels& w, T* y, long ldy,
                        bool parallel, QuantDequant how) {
  static_assert(kMatmulKc == kQuantKc, "the packed-row stride assumes k blocks of kMatmulKc");
  constexpr int MR = kQuantLargeRows<V>, NP = kLargePanels<V>;
  const long K = w.n_in(), P = w.n_panels();
  const QuantFactoring f = quant_factoring(w.type());
  const long n_ctiles = (P + NP - 1) / NP;
#if defined(_OPENMP)
#pragma omp parallel if (parallel)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    long c0 = 0, c1 = n_ctiles, m_begin = 0, m_end = M;
    if (M >= 4L * MR * nt || n_ctiles < 2L * nt)
      split_range(M, t, nt, m_begin, m_end);
    else
      split_range(n_ctiles, t, nt, c0, c1);
    T* xp = matmul_pack_buffer<T>();
    static thread_local QuantBuffers<T> buf;
    buf.reserve(NP);
    const long n_mblocks = (m_end - m_begin + kMatmulMc - 1) / kMatmulMc;
    for (long k0 = 0; k0 < K; k0 += kQuantKc) {
      const long kc = std::min(kQuantKc, K - k0);
      for (long ib = 0; ib < n_mblocks; ++ib) {
        long mb, me;
        split_range(m_end - m_begin, static_cast<int>(ib), static_cast<int>(n_mblocks), mb, me);
        mb += m_begin;
        me += m_begin;
        for (long r = mb; r < me; ++r) std::copy(x + r * ldx + k0, x + r * ldx + k0 + kc, xp + (r - mb) * kPackStride);
        const long n_rtiles = (me - mb + MR - 1) / MR;
        for (long c = c0; c < c1; ++c) {
          const long p0 = c * NP;
          const int np = static_cast<int>(std::min<long>(NP, P - p0));
          T* N = f.has_min ? buf.N.data() : nullptr;
          factor_panels(w, p0, np, k0, kc, buf.c.data(), buf.D.data(), N, how);
          for (long i = 0; i < n_rtiles; ++i) {
            long r0, r1;
            split_range(me - mb, static_cast<int>(i), static_cast<int>(n_rtiles), r0, r1);
            quant_tile_any<T, V, kPackStride>(static_cast<int>(r1 - r0), np, static_cast<const T*>(xp + r0 * kPackStride),
                                              kPackStride, static_cast<const T*>(buf.c.data()), kc * kLanes, kc, f.sub,
                                              static_cast<const T*>(buf.D.data()), static_cast<const T*>(N),
                                              kc / f.sub * kLanes, xs ? xs + (mb + r0) * ldxs + k0 / f.sub : nullptr, ldxs,
                                              y + (mb + r0) * ldy + p0 * kLanes, ldy, k0 == 0);
          }
        }
      }
    }
  }
}

/// Which path a quantized product takes (the tests force each one; all give the same bits).
enum class QuantPath { kAuto, kFused, kSmall, kLarge };

/// matmul_quant() with an explicit float vector V, dequantizer and path.
/// kFused needs AVX-512 or AVX2 (`how` picks which, as for the decoders), T =
/// float and M <= kQuantFusedMaxM (else it falls back to kAuto).
template <class T, class V>
void matmul_quant_with(const T* x, long ldx, long M, const QuantPanels& w, T* y, long ldy,
                       QuantPath path = QuantPath::kAuto, QuantDequant how = kQuantDequantBest) {
  KVD_ASSERT(ldy >= w.n_out_padded() && ldx >= w.n_in());
  if (M <= 0) return;
  const bool parallel = M * w.n_out_padded() * w.n_in() >= kMatmulParallelThreshold;
  // The rows' sub-block sums, for the offsets of the types with a min (computed
  // once here, shared by every thread and tile).
  const QuantFactoring f = quant_factoring(w.type());
  const long ldxs = w.n_in() / f.sub;
  static thread_local AlignedBuffer<T> xs_buf;
  const T* xs = nullptr;
  if (f.has_min) {
    xs_buf.reserve(static_cast<std::size_t>(M * ldxs));
    sub_block_sums(x, ldx, M, w.n_in(), f.sub, xs_buf.data(), parallel);
    xs = xs_buf.data();
  }
  if constexpr (std::is_same_v<T, float>) {
    if ((path == QuantPath::kAuto || path == QuantPath::kFused) && M <= kQuantFusedMaxM) {
#if defined(KVDECODE_QUANT_FUSED)
      if (how == QuantDequant::kAvx512) return matmul_quant_fused<T>(x, ldx, M, xs, ldxs, w, y, ldy, parallel);
#endif
#if defined(KVDECODE_QUANT_FUSED_AVX2)
      if (how != QuantDequant::kPortable) return matmul_quant_fused_avx2<T>(x, ldx, M, xs, ldxs, w, y, ldy, parallel);
#endif
    }
  }
  if (path == QuantPath::kSmall || ((path == QuantPath::kAuto || path == QuantPath::kFused) && M <= kSmallMaxM<V>))
    return matmul_quant_small<T, V>(x, ldx, M, xs, ldxs, w, y, ldy, parallel, how);
  matmul_quant_large<T, V>(x, ldx, M, xs, ldxs, w, y, ldy, parallel, how);
}

template <class T, class V>
void matmul_quant_panels(const T* x, long ldx, long M, const QuantPanels& w, T* y, long ldy) {
  matmul_quant_with<T, V>(x, ldx, M, w, y, ldy);
}

/// The same for a QuantMatrix.
template <class T, class V>
void matmul_quant_with(const T* x, long ldx, long M, const QuantMatrix& w, T* y, long ldy,
                       QuantPath path = QuantPath::kAuto, QuantDequant how = kQuantDequantBest) {
  matmul_quant_with<T, V>(x, ldx, M, w.panels(), y, ldy, path, how);
}

}  // namespace detail

/// y (M x Npad, row stride ldy) = x (M x K, row stride ldx) * W^T for a quantized W,
/// in the factored order (top of this file): the same bits for every M, path,
/// tiling and thread count; writes all n_out_padded() columns (padding columns
/// get 0). Uses per-thread buffers allocated at their first use on each thread.
/// Preconditions (asserted): x and y do not overlap; ldx >= K; ldy >= n_out_padded().
template <class T>
void matmul(const T* x, long ldx, long M, const QuantMatrix& w, T* y, long ldy) {
  detail::matmul_quant_with<T, detail::Vec16<T>>(x, ldx, M, w.panels(), y, ldy);
}

}  // namespace kvd

