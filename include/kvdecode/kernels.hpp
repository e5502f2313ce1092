// Matrix-product kernels that give the same bits for an output element
// whatever the number of rows processed together, the tiling and the thread
// count. They are what makes prefill, decode, chunked prefill and batched
// decode bit-identical.
//
// THE REDUCTION-ORDER RULE (every kernel in kvdecode obeys it):
//   y[m][n] = fma(x[m][K-1], W[n][K-1], ... fma(x[m][1], W[n][1], fma(x[m][0], W[n][0], 0)) ...)
// i.e. one accumulator per output element, starting from +0, updated by one
// fused multiply-add per k in increasing k. Vectors hold 16 *different output
// columns*, never 16 parts of one sum, so the vector width changes nothing.
// Tiling over rows (MR) and columns (NP panels) only changes which outputs are
// computed together; blocking over k (KC) stores the running accumulator to
// memory and reloads it, which is exact. Threads split output columns, never
// k. Hence the result of a row depends only on that row's inputs.
//
// Weights are packed once, at load time, into panels of 16 output columns:
//   panel p, element (k, j) = W[16p + j][k]      (K x 16, k-major)
// so the kernel streams each weight byte exactly once per call, contiguously.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "kvdecode/detail/simd.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/weights.hpp"

namespace kvd {

/// Threads used by kvdecode's OpenMP loops (the OpenMP default unless set).
inline int num_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// Sets the thread count for subsequent calls. Results do not depend on it.
/// Throws ArgumentError for n < 1.
inline void set_num_threads(int n) {
  if (n < 1) throw ArgumentError(detail::msg("thread count ", n, " must be >= 1"));
#if defined(_OPENMP)
  omp_set_num_threads(n);
#endif
}

namespace detail {

/// A heap buffer aligned to 64 bytes (one cache line, one AVX-512 vector).
template <class T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n) { resize(n); }
  /// Reallocates to exactly n zeroed elements (contents are not preserved).
  void resize(std::size_t n) {
    if (n == size_) return;
    if (n == 0) { data_.reset(); size_ = 0; return; }
    const std::size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    T* p = static_cast<T*>(::operator new[](bytes, std::align_val_t(64)));
    std::memset(static_cast<void*>(p), 0, bytes);
    data_.reset(p);
    size_ = n;
  }
  /// Grows to at least n elements; never shrinks. Contents are not preserved on growth.
  void reserve(std::size_t n) { if (n > size_) resize(n); }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return data_.get()[i]; }
  const T& operator[](std::size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<T, Free> data_;
  std::size_t size_ = 0;
};

/// Rows per register tile of the matmul micro-kernel.
template <class T> inline constexpr int kMatmulRows = 8;
template <> inline constexpr int kMatmulRows<double> = 4;
/// Inner-dimension block: a KC x 32 weight tile (32 KiB of float) stays in L1 while row tiles pass over it.
inline constexpr int kMatmulKc = 256;
/// Below this many multiply-adds a product runs on one thread (the result is the same either way).
inline constexpr std::int64_t kParallelThreshold = 1 << 15;

}  // namespace detail

/// A weight matrix W (n_out x n_in, y = W x) packed into 16-column panels for the kernels.
template <class T>
class PackedMatrix {
 public:
  PackedMatrix() = default;

  /// Packs W (n_out x n_in, row-major). Several matrices with the same n_in may be
  /// stacked into one (their outputs concatenated), e.g. wq|wk|wv.
  /// Throws ConfigError if the matrices have different n_in.
  explicit PackedMatrix(std::initializer_list<const RowMatrix<T>*> parts) {
    long n_out = 0;
    n_in_ = parts.size() ? (*parts.begin())->cols() : 0;
    for (const auto* p : parts) {
      if (p->cols() != n_in_)
        throw ConfigError(detail::msg("cannot stack matrices with ", p->cols(), " and ", n_in_, " input columns"));
      n_out += p->rows();
    }
    n_out_ = n_out;
    n_panels_ = detail::round_up_lanes(n_out_) / detail::kLanes;
    data_.resize(static_cast<std::size_t>(n_panels_) * n_in_ * detail::kLanes);
    long row = 0;
    for (const auto* p : parts) {
      for (long r = 0; r < p->rows(); ++r, ++row) {
        T* panel = data_.data() + (row / detail::kLanes) * n_in_ * detail::kLanes;
        const long j = row % detail::kLanes;
        for (long k = 0; k < n_in_; ++k) panel[k * detail::kLanes + j] = (*p)(r, k);
      }
    }
  }

  long n_out() const { return n_out_; }      ///< N: output columns
  long n_in() const { return n_in_; }        ///< K: reduction length
  long n_out_padded() const { return n_panels_ * detail::kLanes; }  ///< N rounded up to 16
  long n_panels() const { return n_panels_; }
  const T* panel(long p) const { return data_.data() + p * n_in_ * detail::kLanes; }  ///< (K x 16)
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(data_.size()) * sizeof(T); }

  /// W[n][k], read back from the packed layout (for tests and the reference).
  T at(long n, long k) const { return panel(n / detail::kLanes)[k * detail::kLanes + n % detail::kLanes]; }

 private:
  long n_out_ = 0, n_in_ = 0, n_panels_ = 0;
  detail::AlignedBuffer<T> data_;  // (n_panels, K, 16)
};

namespace detail {

// One register tile: MR rows x NP panels (16 columns each), over k in [0, kc).
// `first` starts the accumulators at +0; otherwise they continue from y.
template <class T, int MR, int NP>
inline void matmul_tile(const T* x, long ldx, const T* b, long panel_stride, int kc, T* y, long ldy, bool first) {
  Vec16<T> acc[MR][NP];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = first ? Vec16<T>::zero() : Vec16<T>::load(y + r * ldy + p * kLanes);
  for (int k = 0; k < kc; ++k) {
    Vec16<T> bv[NP];
    for (int p = 0; p < NP; ++p) bv[p] = Vec16<T>::load(b + p * panel_stride + k * kLanes);
    for (int r = 0; r < MR; ++r) {
      const Vec16<T> a = Vec16<T>::broadcast(x[r * ldx + k]);
      for (int p = 0; p < NP; ++p) acc[r][p].fma(a, bv[p]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p].store(y + r * ldy + p * kLanes);
}

template <class T, int NP, int MR = kMatmulRows<T>>
inline void matmul_rows(int mr, const T* x, long ldx, const T* b, long panel_stride, int kc, T* y, long ldy,
                        bool first) {
  if constexpr (MR > 0) {
    if (mr == MR) return matmul_tile<T, MR, NP>(x, ldx, b, panel_stride, kc, y, ldy, first);
    return matmul_rows<T, NP, MR - 1>(mr, x, ldx, b, panel_stride, kc, y, ldy, first);
  }
}

}  // namespace detail

/// y (M x Npad, row stride ldy) = x (M x K, row stride ldx) * W^T.
/// Writes all n_out_padded() columns of each row (the padding columns get 0s),
/// so ldy must be >= w.n_out_padded(). Every y[m][n] follows the reduction-order
/// rule above, so it is bit-identical for any M, tiling or thread count.
/// Preconditions (asserted): x and y do not overlap; ldx >= K.
template <class T>
void matmul(const T* x, long ldx, long M, const PackedMatrix<T>& w, T* y, long ldy) {
  using namespace detail;
  const long K = w.n_in();
  const long panel_stride = K * kLanes;
  KVD_ASSERT(ldy >= w.n_out_padded() && ldx >= K);
  const long n_tiles = (w.n_panels() + 1) / 2;  // tiles of 2 panels (32 columns)
  const bool parallel = M * w.n_out_padded() * K >= kParallelThreshold && n_tiles > 1;
  constexpr int MR = kMatmulRows<T>;
  if (K == 0) {
    for (long m = 0; m < M; ++m) std::fill(y + m * ldy, y + m * ldy + w.n_out_padded(), T(0));
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (parallel)
#endif
  for (long t = 0; t < n_tiles; ++t) {
    const long p0 = 2 * t;
    const int np = static_cast<int>(std::min<long>(2, w.n_panels() - p0));
    for (long k0 = 0; k0 < K; k0 += kMatmulKc) {
      const int kc = static_cast<int>(std::min<long>(kMatmulKc, K - k0));
      const T* b = w.panel(p0) + k0 * kLanes;
      for (long m0 = 0; m0 < M; m0 += MR) {
        const int mr = static_cast<int>(std::min<long>(MR, M - m0));
        const T* xa = x + m0 * ldx + k0;
        T* ya = y + m0 * ldy + p0 * kLanes;
        if (np == 2)
          matmul_rows<T, 2>(mr, xa, ldx, b, panel_stride, kc, ya, ldy, k0 == 0);
        else
          matmul_rows<T, 1>(mr, xa, ldx, b, panel_stride, kc, ya, ldy, k0 == 0);
      }
    }
  }
  (void)parallel;
}

}  // namespace kvd
