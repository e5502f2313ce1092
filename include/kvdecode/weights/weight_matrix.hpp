// WeightMatrix: one weight matrix as a file stores it, before any packing for
// the kernels. A type tag, a shape and bytes (gemma.cpp's MatPtr idea): the
// storage type is a property of each matrix, never of the model's compute
// type, so one Transformer<float> may hold F16 projections, a Q6_K classifier
// and F32 norms at once.
//
// Layout: rows x cols, y = W x, row-major; each row is cols / block_size
// blocks of the type (for plain types one value per block). This is the layout
// of llama2.c checkpoints, GGUF tensors (ne[0] = cols) and safetensors.
//
// The bytes are immutable once built and shared between copies (copying a
// WeightMatrix copies a pointer). They are either owned (an aligned heap
// buffer) or a view into a mapped file, kept alive by the same shared owner; a
// view can tell the owner that its pages are no longer needed (release_pages),
// which is how loading an F16 file keeps its peak memory near the file size.
//
// Every conversion to the compute type is exact: f16 and bf16 are subsets of
// float, and block types are dequantised to the very floats ggml produces
// (weights/blocks.hpp), so a model computes with exactly the file's values.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "kvdecode/error.hpp"
#include "kvdecode/weights/weight_type.hpp"
#include "kvdecode/weights/blocks.hpp"

namespace kvd {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// Whatever keeps a WeightMatrix's bytes alive: an owned buffer or a mapped file.
class ByteOwner {
 public:
  virtual ~ByteOwner() = default;
  /// The bytes [p, p + n) will not be read again soon (a mapped file may drop
  /// their pages; they stay readable). Default: nothing. Never throws.
  virtual void release(const unsigned char* /*p*/, std::uint64_t /*n*/) const noexcept {}
};

namespace detail {

/// An owned, 64-byte aligned, zero-initialised byte buffer.
class OwnedBytes : public ByteOwner {
 public:
  explicit OwnedBytes(std::uint64_t n) : size_(n) {
    const std::size_t bytes = static_cast<std::size_t>((n + 63) / 64 * 64);
    data_ = static_cast<unsigned char*>(::operator new[](bytes ? bytes : 64, std::align_val_t(64)));
    std::memset(data_, 0, bytes);
  }
  ~OwnedBytes() override { ::operator delete[](data_, std::align_val_t(64)); }
  OwnedBytes(const OwnedBytes&) = delete;
  OwnedBytes& operator=(const OwnedBytes&) = delete;
  unsigned char* data() const { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  unsigned char* data_ = nullptr;
  std::uint64_t size_ = 0;
};

/// IEEE binary16 bits -> float, exactly (every half is a float).
inline float f16_to_f32(std::uint16_t h) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(h)); }
/// bfloat16 bits -> float, exactly (a bfloat16 is the top half of a float).
inline float bf16_to_f32(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Converts one row of n values of plain type t (f32, f64, f16, bf16) at src to T.
/// Returns false for block types (they go through dequantize_blocks_f32).
template <class T>
bool convert_plain_row(WeightType t, const unsigned char* src, T* dst, long n) {
  switch (t) {
    case WeightType::kF32:
      for (long i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, src + 4 * i, 4);
        dst[i] = static_cast<T>(v);
      }
      return true;
    case WeightType::kF64:
      for (long i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        dst[i] = static_cast<T>(v);
      }
      return true;
    case WeightType::kF16:
    case WeightType::kBF16:
      for (long i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = static_cast<T>(t == WeightType::kF16 ? f16_to_f32(h) : bf16_to_f32(h));
      }
      return true;
    default:
      return false;
  }
}

/// Block types: dequantises n values (a multiple of the block size) of type t at
/// src into dst exactly as ggml does (weights/blocks.hpp). Throws ConfigError
/// naming a type that has no dequantisation.
inline void dequantize_blocks_f32(WeightType t, const unsigned char* src, float* dst, long n) {
  dequantize_row(t, src, dst, n);
}

}  // namespace detail

/// One weight matrix (rows x cols, y = W x) in one storage type. Cheap to copy
/// (the bytes are shared and immutable).
class WeightMatrix {
 public:
  WeightMatrix() = default;

  /// An owned copy of a dense matrix, stored as f32 (T = float) or f64 (T = double).
  template <class T>
  static WeightMatrix from_dense(const RowMatrix<T>& m) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "dense weights are float or double");
    WeightMatrix w = zeros(std::is_same_v<T, float> ? WeightType::kF32 : WeightType::kF64, m.rows(), m.cols());
    if (m.size()) std::memcpy(w.owned_->data(), m.data(), static_cast<std::size_t>(m.size()) * sizeof(T));
    return w;
  }

  /// An owned matrix of zero bytes (all values +0 for plain and block types alike).
  /// Throws ConfigError if cols is not a multiple of the type's block size or t is undefined.
  static WeightMatrix zeros(WeightType t, long rows, long cols) {
    WeightMatrix w;
    w.set_shape(t, rows, cols);
    auto owned = std::make_shared<detail::OwnedBytes>(w.bytes());
    w.data_ = owned->data();
    w.owned_ = owned;
    w.owner_ = std::move(owned);
    return w;
  }

  /// An owned matrix copied from `bytes` (exactly rows * row_bytes of them).
  /// Throws ConfigError if the size or the shape does not fit the type.
  static WeightMatrix copy_of(WeightType t, long rows, long cols, const void* bytes, std::uint64_t n_bytes) {
    WeightMatrix w = zeros(t, rows, cols);
    if (n_bytes != w.bytes())
      throw ConfigError(detail::msg("a ", weight_type_name(t), " matrix of ", rows, " x ", cols, " takes ", w.bytes(),
                                    " bytes, not ", n_bytes));
    if (n_bytes) std::memcpy(w.owned_->data(), bytes, static_cast<std::size_t>(n_bytes));
    return w;
  }

  /// A view of rows * row_bytes bytes at `data`, kept alive by `owner` (a mapped file).
  /// Throws ConfigError if cols is not a multiple of the type's block size.
  static WeightMatrix view(WeightType t, long rows, long cols, const unsigned char* data,
                           std::shared_ptr<const ByteOwner> owner) {
    WeightMatrix w;
    w.set_shape(t, rows, cols);
    w.data_ = data;
    w.owner_ = std::move(owner);
    return w;
  }

  /// Rows [r0, r0 + n) of this matrix as a view sharing its bytes (one expert of
  /// a stacked expert tensor). Throws ArgumentError naming the range and the row
  /// count when it does not fit.
  WeightMatrix row_block(long r0, long n) const {
    if (r0 < 0 || n < 0 || r0 > rows_ - n)
      throw ArgumentError(detail::msg("rows [", r0, ", ", r0 + n, ") are outside a matrix of ", rows_, " rows"));
    WeightMatrix w = *this;
    w.rows_ = n;
    w.data_ = row_data(r0);
    return w;
  }

  WeightType type() const { return type_; }
  long rows() const { return rows_; }  ///< n_out
  long cols() const { return cols_; }  ///< n_in
  bool empty() const { return rows_ == 0 || cols_ == 0; }
  std::uint64_t row_bytes() const { return row_bytes_; }
  std::uint64_t bytes() const { return row_bytes_ * static_cast<std::uint64_t>(rows_); }
  const unsigned char* data() const { return data_; }
  const unsigned char* row_data(long r) const { return data_ + row_bytes_ * static_cast<std::uint64_t>(r); }
  /// True for f32/f64 storage: values are the compute type's own.
  bool is_dense() const { return type_ == WeightType::kF32 || type_ == WeightType::kF64; }

  /// Writable values of an owned dense matrix while it is being built (a loader
  /// filling it). Precondition (asserted): owned, and T matches the storage type.
  template <class T>
  T* mutable_dense() {
    KVD_ASSERT(owned_ && type_ == (std::is_same_v<T, float> ? WeightType::kF32 : WeightType::kF64));
    return reinterpret_cast<T*>(owned_->data());
  }

  /// Row r converted exactly to T: out[0 .. cols). Throws ConfigError for a block
  /// type that has no dequantisation yet.
  template <class T>
  void dequantize_row(long r, T* out) const {
    if (detail::convert_plain_row(type_, row_data(r), out, cols_)) return;
    if constexpr (std::is_same_v<T, float>) {
      detail::dequantize_blocks_f32(type_, row_data(r), out, cols_);
    } else {
      std::vector<float> tmp(static_cast<std::size_t>(cols_));
      detail::dequantize_blocks_f32(type_, row_data(r), tmp.data(), cols_);
      for (long i = 0; i < cols_; ++i) out[i] = static_cast<T>(tmp[i]);
    }
  }

  /// W[r][c] as a double (exact for every storage type). Slow: for tests and tools.
  double operator()(long r, long c) const {
    const auto tr = weight_type_traits(type_);
    std::vector<float> block(tr.block_size);
    const long b = c / tr.block_size;
    if (type_ == WeightType::kF64) {
      double v;
      std::memcpy(&v, row_data(r) + 8 * c, 8);
      return v;
    }
    if (!detail::convert_plain_row(type_, row_data(r) + b * tr.block_bytes, block.data(), tr.block_size))
      detail::dequantize_blocks_f32(type_, row_data(r) + b * tr.block_bytes, block.data(), tr.block_size);
    return block[c % tr.block_size];
  }

  /// The whole matrix converted exactly to T (rows x cols).
  template <class T>
  RowMatrix<T> to_dense() const {
    RowMatrix<T> m(rows_, cols_);
    for (long r = 0; r < rows_; ++r) dequantize_row(r, m.data() + r * cols_);
    return m;
  }

  /// Tells the owner (a mapped file) that these bytes will not be read again soon. Never throws.
  void release_pages() const noexcept {
    if (owner_ && !owned_) owner_->release(data_, bytes());
  }

  /// The same values stored as type t: for f32/f64/f16/bf16 targets each value is
  /// rounded to nearest even (exact when it already fits). Throws ConfigError for
  /// a block-type target (quantisation lives in weights/blocks.hpp).
  WeightMatrix converted_to(WeightType t) const {
    if (t == type_) return *this;
    WeightMatrix out = zeros(t, rows_, cols_);
    std::vector<double> row(static_cast<std::size_t>(cols_));
    for (long r = 0; r < rows_; ++r) {
      dequantize_row(r, row.data());
      unsigned char* dst = out.owned_->data() + out.row_bytes_ * static_cast<std::uint64_t>(r);
      for (long c = 0; c < cols_; ++c) {
        const float f = static_cast<float>(row[c]);
        switch (t) {
          case WeightType::kF32: std::memcpy(dst + 4 * c, &f, 4); break;
          case WeightType::kF64: std::memcpy(dst + 8 * c, &row[c], 8); break;
          case WeightType::kF16: {
            const std::uint16_t h = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(f));
            std::memcpy(dst + 2 * c, &h, 2);
            break;
          }
          case WeightType::kBF16: {
            const std::uint16_t h = Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(f));
            std::memcpy(dst + 2 * c, &h, 2);
            break;
          }
          default:
            throw ConfigError(detail::msg("converting weights to ", weight_type_name(t), " needs the quantiser"));
        }
      }
    }
    return out;
  }

  /// The same matrix with dense storage converted to type U (f32 <-> f64); other
  /// storage types are returned unchanged (storage is the matrix's, not the model's).
  template <class U>
  WeightMatrix with_dense_type() const {
    constexpr WeightType want = std::is_same_v<U, float> ? WeightType::kF32 : WeightType::kF64;
    if (rows_ == 0 || !is_dense() || type_ == want) return *this;
    return from_dense<U>(to_dense<U>());
  }

 private:
  void set_shape(WeightType t, long rows, long cols) {
    if (rows < 0 || cols < 0) throw ConfigError(detail::msg("weight matrix shape ", rows, " x ", cols, " is negative"));
    type_ = t;
    rows_ = rows;
    cols_ = cols;
    row_bytes_ = weight_row_bytes(t, static_cast<std::uint64_t>(cols));
  }

  WeightType type_ = WeightType::kF32;
  long rows_ = 0, cols_ = 0;
  std::uint64_t row_bytes_ = 0;
  const unsigned char* data_ = nullptr;
  std::shared_ptr<const ByteOwner> owner_;        // keeps data_ alive
  std::shared_ptr<detail::OwnedBytes> owned_;     // set when the bytes are our own
};

}  // namespace kvd
