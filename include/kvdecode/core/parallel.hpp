// Threads and memory for the kernels and the model: the thread count, 64-byte
// aligned buffers, and the split of n items over an OpenMP team. Every split
// here gives each item to exactly one thread, so results never depend on it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kvdecode/error.hpp"

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

/// A zeroed heap buffer aligned to 64 bytes (one cache line, one AVX-512
/// vector); buffers of 2 MiB or more are aligned to 2 MiB and backed by
/// transparent huge pages where Linux offers them (measured 1-3% faster decode).
/// Move-only.
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
    // Large buffers (packed weights) start on a 2 MiB boundary and ask Linux for
    // transparent huge pages: streaming them then costs far fewer TLB misses.
    const bool huge = bytes >= kHugeBytes;
    const std::size_t align = huge ? kHugeBytes : 64;
    T* p = static_cast<T*>(::operator new[](bytes, std::align_val_t(align)));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge) ::madvise(static_cast<void*>(p), bytes / kHugeBytes * kHugeBytes, MADV_HUGEPAGE);
#endif
    std::memset(static_cast<void*>(p), 0, bytes);
    data_ = std::unique_ptr<T, Free>(p, Free{align});
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
  static constexpr std::size_t kHugeBytes = std::size_t(2) << 20;
  struct Free {
    std::size_t align = 64;
    void operator()(T* p) const { ::operator delete[](p, std::align_val_t(align)); }
  };
  std::unique_ptr<T, Free> data_;
  std::size_t size_ = 0;
};

/// Below this many multiply-adds a loop runs on one thread (the result is the same either way).
inline constexpr std::int64_t kParallelThreshold = 1 << 15;

/// Values (rows x width) at or above which per-row work (norms, RoPE, SiLU, residual
/// adds) is split over threads by rows. Each row is computed by one thread in full,
/// so the split changes nothing.
inline constexpr long kParallelElements = 1 << 16;

/// This thread's index t and the team size nt inside an OpenMP parallel region (0 and 1 outside one).
inline void this_thread(int& t, int& nt) {
#if defined(_OPENMP)
  t = omp_get_thread_num();
  nt = omp_get_num_threads();
#else
  t = 0;
  nt = 1;
#endif
}

/// The part [begin, end) of n items that thread t of nt gets: contiguous, balanced.
inline void split_range(long n, int t, int nt, long& begin, long& end) {
  begin = n * t / nt;
  end = n * (t + 1) / nt;
}

/// f(begin, end) on each thread of one parallel region (when `parallel`; else on
/// the calling thread with [0, n)), with that thread's split_range() part of n items.
template <class F>
inline void parallel_parts(long n, bool parallel, F&& f) {
#if defined(_OPENMP)
#pragma omp parallel if (parallel)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    long begin, end;
    split_range(n, t, nt, begin, end);
    f(begin, end);
  }
  (void)parallel;
}

}  // namespace detail
}  // namespace kvd
