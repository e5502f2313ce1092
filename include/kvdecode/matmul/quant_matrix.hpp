// QuantMatrix: one stand-alone weight matrix of a ggml block type, repacked into
// panel blocks, and kvd::matmul / kvd::matmul_fast with it. Test and benchmark
// support, not part of the library's API: the library's matrices are
// PackedMatrix segments (packed_matrix.hpp), and neither matmul.hpp nor
// kvdecode.hpp includes this header. tests/quant_matrix_test.cpp,
// tests/fast_matmul_test.cpp and bench/quant_bench.cpp use it to run each path
// of quant_kernels.hpp and fast_int8.hpp on one matrix.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/matmul/fast_int8.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/matmul/quant_kernels.hpp"
#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/weights/weight_type.hpp"

namespace kvd {

/// A weight matrix W (n_out x n_in, y = W x) of one ggml block type, repacked
/// into panel blocks (see the top of quant_kernels.hpp). Move-only.
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

/// The same for a QuantMatrix.
template <class T, class V>
void matmul_quant_with(const T* x, long ldx, long M, const QuantMatrix& w, T* y, long ldy,
                       QuantPath path = QuantPath::kAuto, QuantDequant how = kQuantDequantBest) {
  matmul_quant_with<T, V>(x, ldx, M, w.panels(), y, ldy, path, how);
}

}  // namespace detail

/// y (M x Npad, row stride ldy) = x (M x K, row stride ldx) * W^T for a quantized W,
/// in the factored order (top of quant_kernels.hpp): the same bits for every M, path,
/// tiling and thread count; writes all n_out_padded() columns (padding columns
/// get 0). Uses per-thread buffers allocated at their first use on each thread.
/// Preconditions (asserted): x and y do not overlap; ldx >= K; ldy >= n_out_padded().
template <class T>
void matmul(const T* x, long ldx, long M, const QuantMatrix& w, T* y, long ldy) {
  detail::matmul_quant_with<T, detail::Vec16<T>>(x, ldx, M, w.panels(), y, ldy);
}

/// y (M x Npad, row stride ldy) = x (M x K) * W^T in the fast mode (top of
/// fast_int8.hpp): the same bits for every M, tiling and thread count. Throws ConfigError
/// naming the type if the fast mode does not compute W's type (fast_matmul_type()).
inline void matmul_fast(const float* x, long ldx, long M, const QuantMatrix& w, float* y, long ldy) {
  if (!detail::fast_matmul_type(w.type()))
    throw ConfigError(detail::msg("fast matmul: weight type ", weight_type_name(w.type()), " is not computed in fast mode"));
  detail::matmul_fast_with(x, ldx, M, w.panels(), y, ldy);
}

}  // namespace kvd
