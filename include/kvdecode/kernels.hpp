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
// memory and reloads it, which is exact whatever the block length. Copying
// input rows into a packed buffer is exact. Threads split output columns or
// rows, never k. Hence the result of a row depends only on that row's inputs,
// and every tile shape, block size and thread split below is free to depend on
// M (the tests compare every path with a plain scalar loop, bit for bit).
//
// Weights are packed once, at load time, into panels of 16 output columns:
//   panel p, element (k, j) = W[16p + j][k]      (K x 16, k-major)
// so the kernel streams each weight byte exactly once per call, contiguously.
//
// Two paths, chosen by M (rows):
//  * small M (decode, batched decode; M <= 16 for float on AVX-512): one
//    register tile holds all the rows (up to 3 rows x 8 panels, ..., 8 x 3,
//    14 x 2) and runs over the whole of k, so the weights are read once, from
//    memory, for all rows; 15 or 16 rows take two tiles that share each k
//    block of weights through L1. Each thread takes a contiguous range of
//    panels and prefetches 4 KiB ahead in each panel stream. Nothing is
//    allocated.
//  * large M (prefill): GotoBLAS-style blocking with a 14 x 2-panel register
//    tile (28 of the 32 zmm registers accumulate; 95% of the FMA peak when its
//    operands are in L1) and k blocks of 256. Up to 512 rows at a time are
//    packed once into a buffer the threads share; the threads then take
//    chunks of (up to 256 rows) x (128 to 512 columns) dynamically, each over
//    the whole of k.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kvdecode/detail/profile.hpp"
#include "kvdecode/detail/quant_layout.hpp"
#include "kvdecode/dispatch.hpp"
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

}  // namespace detail

/// Work a product's caller wants done on the input rows just before the product
/// reads them (for example: add the residual, then normalise): fn(ctx, r0, r1)
/// prepares rows [r0, r1) of x. The prefill path runs it inside its parallel
/// region, each thread on the rows it is about to pack, which saves a parallel
/// region and its barrier per call; otherwise it runs once for all rows before
/// the product. Every row is prepared by exactly one call that covers it, so
/// the split never changes a result. It must touch only those rows' data.
struct RowPrologue {
  void (*fn)(void* ctx, long r0, long r1) = nullptr;
  void* ctx = nullptr;
  explicit operator bool() const { return fn != nullptr; }
  void operator()(long r0, long r1) const { fn(ctx, r0, r1); }
};

/// A RowPrologue calling f(r0, r1); f must outlive it.
template <class F>
RowPrologue row_prologue(F& f) {
  return {[](void* c, long r0, long r1) { (*static_cast<F*>(c))(r0, r1); }, static_cast<void*>(&f)};
}

namespace detail {
/// Raw 16-bit weight elements inside packed panels (IEEE binary16, bfloat16).
struct F16Bits { std::uint16_t bits; };
struct BF16Bits { std::uint16_t bits; };

/// 16 packed weights of element type W at p, as a vector of the compute type.
/// Every conversion is exact, so the fma chain sees the stored values themselves.
template <class V, class W, class T>
inline V load_weights(const W* p) {
  if constexpr (std::is_same_v<W, T>) return V::load(p);
  else if constexpr (std::is_same_v<W, F16Bits>) return V::load_f16(reinterpret_cast<const std::uint16_t*>(p));
  else return V::load_bf16(reinterpret_cast<const std::uint16_t*>(p));
}
}  // namespace detail

/// A weight matrix W (n_out x n_in, y = W x) packed into 16-column panels for the
/// kernels. The packed storage type is the matrix's own (PackedMatrix<float> may
/// hold f32, f16 or bf16 panels); PackedMatrix<double> always holds double.
///
/// Several matrices with the same n_in may be stacked into one (their outputs
/// concatenated, e.g. wq|wk|wv). Consecutive parts of one storage type share
/// panels row by row; a part of another type starts a new *segment* on a fresh
/// panel, so its first output column (part_col) is rounded up to 16. Callers
/// find each part's columns with part_col(i).
///
/// Layout of a segment of element type W, panel p:
///   element (k, j) = W[16p + j][k]      (K x 16, k-major, sizeof(W) bytes each)
///
/// Adding a storage type means: a packed element layout here (pack_segment) and
/// a case in kvd::matmul's dispatch that runs the kernels with it.
template <class T>
class PackedMatrix {
 public:
  /// A run of panels in one packed storage type.
  struct Segment {
    WeightType type = WeightType::kF32;  ///< packed element type (kF32/kF64 = T itself, kF16, kBF16)
    long panel0 = 0, n_panels = 0;       ///< panels [panel0, panel0 + n_panels)
    std::uint64_t byte0 = 0;             ///< offset of its first panel in the packed bytes
    std::uint64_t panel_bytes = 0;       ///< bytes of one panel (K x 16 elements)
  };

  PackedMatrix() = default;

  /// Packs dense matrices of the compute type (tests, benchmarks, random models).
  /// Throws ConfigError if the matrices have different n_in.
  explicit PackedMatrix(std::initializer_list<const RowMatrix<T>*> parts) {
    std::vector<WeightMatrix> owned;
    for (const auto* p : parts) owned.push_back(WeightMatrix::from_dense(*p));
    std::vector<const WeightMatrix*> ptrs;
    for (const auto& w : owned) ptrs.push_back(&w);
    build(ptrs);
  }

  /// Packs weight matrices in their own storage types. Throws ConfigError if the
  /// matrices have different n_in or a type cannot be computed with.
  explicit PackedMatrix(std::initializer_list<const WeightMatrix*> parts) { build(std::vector<const WeightMatrix*>(parts)); }
  explicit PackedMatrix(const std::vector<const WeightMatrix*>& parts) { build(parts); }

  long n_out() const { return n_out_; }      ///< N: output rows of all parts
  long n_in() const { return n_in_; }        ///< K: reduction length
  long n_out_padded() const { return n_panels_ * detail::kLanes; }  ///< output columns written (16 per panel)
  long n_panels() const { return n_panels_; }
  long part_col(std::size_t i) const { return part_col_[i]; }  ///< first output column of part i
  const std::vector<Segment>& segments() const { return segments_; }
  /// The packed type of a single-segment matrix (the first segment's otherwise).
  WeightType type() const { return segments_.empty() ? WeightType::kF32 : segments_[0].type; }
  /// Panel p as elements of its segment's type W: (K x 16).
  template <class W>
  const W* panel_as(long p) const {
    const Segment& s = segment_of(p);
    return reinterpret_cast<const W*>(data_.data() + s.byte0 + static_cast<std::uint64_t>(p - s.panel0) * s.panel_bytes);
  }
  /// Panel p of a dense (compute-type) segment: (K x 16). Precondition (asserted): dense.
  const T* panel(long p) const {
    KVD_ASSERT(segment_of(p).type == kDense);
    return panel_as<T>(p);
  }
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(data_.size()); }

  /// Fast mode: products with this matrix's block-type segments but q8_0 round
  /// the activations to int8 blocks (fast_matmul.hpp), with its f16 and bf16
  /// segments to bf16 where the CPU has AVX512-BF16 (fast_bf16.hpp). Off by
  /// default; other segments keep the default numerics either way.
  void set_fast_matmul(bool on) { fast_ = on; }
  bool fast_matmul() const { return fast_; }

  /// W[n][k] for output column n (as numbered by part_col), read back from the
  /// packed layout (for tests and the reference).
  T at(long n, long k) const {
    const long p = n / detail::kLanes, j = n % detail::kLanes;
    const std::uint64_t e = static_cast<std::uint64_t>(k) * detail::kLanes + j;
    if (detail::is_quant_block_type(segment_of(p).type)) {  // dequantize the panel block holding (n, k)
      const Segment& s = segment_of(p);
      const detail::QuantPanels q{s.type, data_.data() + s.byte0, s.n_panels, n_in_};
      std::vector<T> block(static_cast<std::size_t>(q.block_size() * detail::kLanes));
      detail::dequantize_panel_block_portable<T>(s.type, q.panel_block(p - s.panel0, k / q.block_size()), block.data());
      return block[static_cast<std::size_t>((k % q.block_size()) * detail::kLanes + j)];
    }
    switch (segment_of(p).type) {
      case WeightType::kF16: return static_cast<T>(detail::half_bits_to_float(panel_as<std::uint16_t>(p)[e]));
      case WeightType::kBF16: return static_cast<T>(detail::bf16_bits_to_float(panel_as<std::uint16_t>(p)[e]));
      default: return panel_as<T>(p)[e];
    }
  }

 private:
  static constexpr WeightType kDense = std::is_same_v<T, float> ? WeightType::kF32 : WeightType::kF64;

  /// The packed element type a matrix of storage type t gets.
  static WeightType packed_type(WeightType t) {
    if (detail::is_quant_block_type(t)) return t;  // kept in its blocks (detail/quant_layout.hpp's panel blocks)
    if constexpr (std::is_same_v<T, float>) {
      if (t == WeightType::kF16 || t == WeightType::kBF16) return t;
    }
    return kDense;  // everything else is converted exactly to T (block types dequantised)
  }
  static std::uint64_t element_bytes(WeightType packed) {
    return packed == WeightType::kF16 || packed == WeightType::kBF16 ? 2 : sizeof(T);
  }

  const Segment& segment_of(long p) const {
    std::size_t i = 0;
    while (i + 1 < segments_.size() && p >= segments_[i + 1].panel0) ++i;
    return segments_[i];
  }

  void build(const std::vector<const WeightMatrix*>& parts) {
    n_in_ = parts.empty() ? 0 : parts[0]->cols();
    for (const auto* p : parts)
      if (p->cols() != n_in_)
        throw ConfigError(detail::msg("cannot stack matrices with ", p->cols(), " and ", n_in_, " input columns"));
    // Plan segments: maximal runs of parts with one packed type.
    struct Run { WeightType type; std::size_t first, last; long rows; };
    std::vector<Run> runs;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const WeightType t = packed_type(parts[i]->type());
      if (runs.empty() || runs.back().type != t) runs.push_back({t, i, i, 0});
      runs.back().last = i;
      runs.back().rows += parts[i]->rows();
    }
    std::uint64_t total = 0;
    long panels = 0;
    n_out_ = 0;
    part_col_.assign(parts.size(), 0);
    segments_.clear();
    for (const Run& r : runs) {
      Segment s;
      s.type = r.type;
      s.panel0 = panels;
      s.n_panels = detail::round_up_lanes(r.rows) / detail::kLanes;
      if (detail::is_quant_block_type(r.type)) {
        const auto tr = weight_type_traits(r.type);
        if (n_in_ % tr.block_size != 0)
          throw ConfigError(detail::msg("rows of ", n_in_, " values are not a multiple of ", tr.name, "'s block size ",
                                        tr.block_size));
        s.panel_bytes = detail::QuantPanels{r.type, nullptr, 0, n_in_}.panel_bytes();
      } else {
        s.panel_bytes = static_cast<std::uint64_t>(n_in_) * detail::kLanes * element_bytes(r.type);
      }
      s.byte0 = total;
      long col = panels * detail::kLanes;
      for (std::size_t i = r.first; i <= r.last; ++i) {
        part_col_[i] = col;
        col += parts[i]->rows();
      }
      total += s.panel_bytes * static_cast<std::uint64_t>(s.n_panels);
      panels += s.n_panels;
      n_out_ += r.rows;
      segments_.push_back(s);
    }
    n_panels_ = panels;
    data_.resize(static_cast<std::size_t>(total));
    std::vector<T> row_buf(static_cast<std::size_t>(n_in_));  // one row converted to T
    for (std::size_t si = 0; si < runs.size(); ++si) {
      long row = 0;  // row inside the segment
      for (std::size_t i = runs[si].first; i <= runs[si].last; ++i)
        for (long r = 0; r < parts[i]->rows(); ++r, ++row) pack_row(segments_[si], *parts[i], r, row, row_buf);
    }
  }

  // Writes row r of m as column `row` of segment s (panel row / 16, lane row % 16).
  void pack_row(const Segment& s, const WeightMatrix& m, long r, long row, std::vector<T>& row_buf) {
    unsigned char* panel = data_.data() + s.byte0 + static_cast<std::uint64_t>(row / detail::kLanes) * s.panel_bytes;
    const long j = row % detail::kLanes, K = n_in_;
    if (detail::is_quant_block_type(s.type)) {  // the row's blocks, as they are, into lane j of its panel blocks
      detail::pack_quant_row(s.type, K, m.row_data(r), static_cast<int>(j), panel);
      return;
    }
    if (s.type == WeightType::kF16 || s.type == WeightType::kBF16) {  // 16-bit bits copied as they are
      const unsigned char* src = m.row_data(r);
      auto* dst = reinterpret_cast<std::uint16_t*>(panel);
      for (long k = 0; k < K; ++k) std::memcpy(dst + k * detail::kLanes + j, src + 2 * k, 2);
      return;
    }
    m.dequantize_row(r, row_buf.data());
    T* dst = reinterpret_cast<T*>(panel);
    for (long k = 0; k < K; ++k) dst[k * detail::kLanes + j] = row_buf[k];
  }

  long n_out_ = 0, n_in_ = 0, n_panels_ = 0;
  std::vector<long> part_col_;
  std::vector<Segment> segments_;
  detail::AlignedBuffer<unsigned char> data_;  // segments' panels back to back
  bool fast_ = false;                          // set_fast_matmul()
};

namespace detail {

#define KVD_PRAGMA_(x) _Pragma(#x)
#if defined(__clang__)
#define KVD_UNROLL(n) KVD_PRAGMA_(unroll n)
#elif defined(__GNUC__)
#define KVD_UNROLL(n) KVD_PRAGMA_(GCC unroll n)
#else
#define KVD_UNROLL(n)
#endif

// ---- Tile shapes -----------------------------------------------------------
// A register tile is MR rows x NP panels: MR * NP accumulators that stay in
// registers for a whole run over k. Which tile computes an output never
// changes that output's fma chain, so shapes are chosen freely by M and by the
// vector implementation V (Vec16<T>, or a narrower one in the tests).

/// Most panels per tile: 8 panels (128 columns) give a decode step 8 weight streams.
inline constexpr int kMaxTilePanels = 8;

/// Large-M tile (prefill): kLargeRows x kLargePanels, 14 x 2 for float on AVX-512.
template <class V>
inline constexpr int kLargePanels = V::kLargeAccumulators >= 8 ? 2 : 1;
template <class V>
inline constexpr int kLargeRows = V::kLargeAccumulators / kLargePanels<V>;

/// Small-M tiles (decode, batched decode): up to kSmallRows rows with as many
/// panels as fit (M = 1: 8 panels), or up to kLargeRows rows with kLargePanels.
template <class V>
inline constexpr int kSmallRows = V::kAccumulators >= 3 ? V::kAccumulators / 3 : 1;
/// The small-M path serves M <= kSmallMaxM (16 for float on AVX-512): one row
/// tile up to kLargeRows rows, else two.
template <class V>
inline constexpr long kSmallMaxM = std::max(2L * kSmallRows<V>, static_cast<long>(kLargeRows<V>));
/// Panels per tile for a small-M row tile of mr rows.
template <class V>
constexpr int small_panels(int mr) {
  return mr <= kSmallRows<V> ? std::min(kMaxTilePanels, std::max(1, V::kAccumulators / mr)) : kLargePanels<V>;
}

/// Small-M tiles that stream weights from memory prefetch each panel this many
/// bytes ahead (4 KiB per stream, 64 k of float; measured better than 1 or 16 KiB).
inline constexpr std::size_t kPrefetchBytes = 4096;
/// k block of the small-M path when it has more than one row tile.
inline constexpr long kSmallKc = 128;

/// Large-M cache blocks: a KC x (2 panels) weight tile (32 KiB of float) stays
/// in L1 while the row tiles of an MC x KC block of packed inputs (in L2) pass over it.
inline constexpr long kMatmulKc = 256;
inline constexpr long kMatmulMc = 384;
/// Row stride of packed input rows: KC plus one cache line, so that the rows of
/// a tile do not all fall in the same cache sets.
inline constexpr long kPackStride = kMatmulKc + 16;
/// Below this many multiply-adds a product runs on one thread (the result is the same either way).
inline constexpr std::int64_t kMatmulParallelThreshold = 1 << 18;

// ---- Micro-kernel ----------------------------------------------------------

/// One register tile: MR rows x NP panels over k in [0, kc). Input row r at k
/// is a[r * lda + k], with lda = kLda when kLda > 0 (packed rows: with a
/// compile-time stride one base register serves every row). Panel p at k is
/// b[p * bstride + 16 k .. +16).
/// `first` starts every accumulator at +0, otherwise at the value in y: a k
/// block continues the same fma chain exactly where the previous one stored it.
template <class T, class V, class W, int MR, int NP, long kLda, bool kPrefetch = false>
inline void matmul_tile(const T* a, long lda, const W* b, long bstride, long kc, T* y, long ldy, bool first) {
  if constexpr (kLda > 0) lda = kLda;
  V acc[MR][NP];
  if (first) {
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p] = V::zero();
  } else {
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p] = V::load(y + r * ldy + p * kLanes);
  }
  for (long k = 0; k < kc; ++k) {
    V bv[NP];
    KVD_UNROLL(8) for (int p = 0; p < NP; ++p) bv[p] = load_weights<V, W, T>(b + p * bstride + k * kLanes);
    if constexpr (kPrefetch) {
      // (may point past the end of the weights: a prefetch never faults)
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) prefetch_read_at(b + p * bstride + k * kLanes, kPrefetchBytes);
    }
    KVD_UNROLL(16) for (int r = 0; r < MR; ++r) {
      const V av = V::broadcast(a[r * lda + k]);
      KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p].fma(av, bv[p]);
    }
  }
  KVD_UNROLL(16) for (int r = 0; r < MR; ++r)
    KVD_UNROLL(8) for (int p = 0; p < NP; ++p) acc[r][p].store(y + r * ldy + p * kLanes);
}

/// Most rows of a tile with np panels: large-M (packed, kLda > 0) or small-M (kLda = 0).
template <class V, long kLda>
constexpr int max_tile_rows(int np) {
  if (kLda > 0 || np <= kLargePanels<V>) return std::min(kLargeRows<V>, V::kLargeAccumulators / np);
  return std::min(kSmallRows<V>, V::kAccumulators / np);
}

// Runtime (mr, np) -> the matching compiled tile. Only shapes that fit the
// register budget exist; callers never ask for others.
template <class T, class V, class W, long kLda, int NP, int MR = max_tile_rows<V, kLda>(NP)>
inline void matmul_tile_rows(int mr, const T* a, long lda, const W* b, long bstride, long kc, T* y, long ldy,
                             bool first, bool prefetch) {
  if constexpr (MR >= 1) {
    if (mr == MR) {
      if (kLda == 0 && prefetch) return matmul_tile<T, V, W, MR, NP, kLda, true>(a, lda, b, bstride, kc, y, ldy, first);
      return matmul_tile<T, V, W, MR, NP, kLda>(a, lda, b, bstride, kc, y, ldy, first);
    }
    return matmul_tile_rows<T, V, W, kLda, NP, MR - 1>(mr, a, lda, b, bstride, kc, y, ldy, first, prefetch);
  }
}

template <class T, class V, class W, long kLda, int NP = (kLda > 0 ? kLargePanels<V> : kMaxTilePanels)>
inline void matmul_tile_any(int mr, int np, const T* a, long lda, const W* b, long bstride, long kc, T* y, long ldy,
                            bool first, bool prefetch = false) {
  if constexpr (NP >= 1) {
    if (np == NP) return matmul_tile_rows<T, V, W, kLda, NP>(mr, a, lda, b, bstride, kc, y, ldy, first, prefetch);
    return matmul_tile_any<T, V, W, kLda, NP - 1>(mr, np, a, lda, b, bstride, kc, y, ldy, first, prefetch);
  }
}

/// The panels of one segment as the kernels see them: P panels of K x 16 elements of W.
template <class W>
struct PanelRange {
  const W* data = nullptr;  // panel p starts at data + p * K * 16
  long n_panels = 0, K = 0;
  const W* panel(long p) const { return data + p * K * kLanes; }
};

// ---- Work split ------------------------------------------------------------

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

/// Small M (decode, batched decode): no packing, nothing allocated. Each thread
/// takes a contiguous range of column tiles, so the threads stream disjoint
/// contiguous parts of the packed weights, each byte once from memory; a second
/// row tile, if any, rereads each k block of weights from L1.
template <class T, class V, class W>
void matmul_small(const T* x, long ldx, long M, const PanelRange<W>& w, T* y, long ldy, bool parallel) {
  const long K = w.K, P = w.n_panels, bstride = K * kLanes;
  const long n_rtiles = M <= kLargeRows<V> ? 1 : (M + kSmallRows<V> - 1) / kSmallRows<V>;
  const int mr_max = static_cast<int>((M + n_rtiles - 1) / n_rtiles);
  const int np_max = small_panels<V>(mr_max);
  const long n_ctiles = (P + np_max - 1) / np_max;
  // One row tile streams the weights once, over all of k. Several row tiles
  // take k in blocks, so that each block of weights is still in L1 when the
  // next row tile reads it.
  const long kc_max = n_rtiles == 1 ? K : kSmallKc;
  parallel_parts(n_ctiles, parallel, [&](long c0, long c1) {
    for (long c = c0; c < c1; ++c) {
      const long p0 = c * np_max;
      const int np = static_cast<int>(std::min<long>(np_max, P - p0));
      for (long k0 = 0; k0 < K; k0 += kc_max) {
        const long kc = std::min(kc_max, K - k0);
        for (long m0 = 0; m0 < M; m0 += mr_max) {
          const int mr = static_cast<int>(std::min<long>(mr_max, M - m0));
          matmul_tile_any<T, V, W, 0>(mr, np, x + m0 * ldx + k0, ldx, w.panel(p0) + k0 * kLanes, bstride, kc,
                                      y + m0 * ldy + p0 * kLanes, ldy, k0 == 0, m0 == 0);
        }
      }
    }
  });
}

/// Per-thread scratch for packed input rows, allocated once per thread at its
/// fixed size (kMatmulMc rows of kPackStride) and reused by every later call.
template <class T>
inline T* matmul_pack_buffer() {
  static thread_local AlignedBuffer<T> buf(static_cast<std::size_t>(kMatmulMc) * kPackStride);
  return buf.data();
}

/// Large-M work split (prefill): up to kMatmulSuperRows rows at a time are
/// packed once, by all threads together, into a buffer they share; the product
/// of those rows is then cut into chunks of (up to kMatmulChunkRows rows) x
/// (chunk_panels panels, see below) that the threads take dynamically. A chunk
/// computes its outputs over the whole of k, so each output's chain is whole,
/// whichever thread took it.
/// A chunk's column block is as wide as leaves about kMatmulChunksPerThread
/// chunks per thread, within [kMatmulChunkPanels, kMatmulChunkMaxPanels] panels
/// (even): wide chunks reuse each packed row block from L2 across more weight
/// tiles, many chunks keep the threads balanced.
inline constexpr long kMatmulSuperRows = 512;
inline constexpr long kMatmulChunkRows = 256;
inline constexpr long kMatmulChunkPanels = 8;
inline constexpr long kMatmulChunkMaxPanels = 32;
inline constexpr long kMatmulChunksPerThread = 8;

/// The shared packed-row buffer of the calling thread (grown on demand, never shrunk):
/// n_kb k blocks x `rows` rows x kPackStride.
template <class T>
inline T* matmul_shared_pack_buffer(std::size_t n) {
  static thread_local AlignedBuffer<T> buf;
  buf.reserve(n);
  return buf.data();
}

/// Large M (prefill). For each super-block of up to kMatmulSuperRows rows:
///  1. the threads run the caller's RowPrologue on its rows, if any, and copy
///     them into the shared packed buffer (exact copies):
///     k block kb of row r at xp[(kb * rows + r) * kPackStride], so the rows of a
///     tile sit at a fixed stride that spreads them over the cache sets;
///  2. the threads take chunks dynamically (a thread the OS delays does not hold
///     the other up). Chunks run column block by column block, their row blocks
///     next to each other, so the threads read the same weights at the same time
///     (from memory once, through the shared L3). Inside a chunk, for each k block
///     (kMatmulKc), each KC x (kLargePanels panels) weight slice (in L1) meets the
///     chunk's row tiles in turn; row tiles have balanced sizes (13 and 14 rather
///     than 14 and a small remainder).
/// Every output's chain runs over k in order within one chunk, on one thread.
template <class T, class V, class W>
void matmul_large(const T* x, long ldx, long M, const PanelRange<W>& w, T* y, long ldy, bool parallel,
                  const RowPrologue& pre = RowPrologue()) {
  constexpr int MR = kLargeRows<V>, NP = kLargePanels<V>;
  const long K = w.K, P = w.n_panels, bstride = K * kLanes;
  const long n_kb = (K + kMatmulKc - 1) / kMatmulKc;
  const long rblocks_max = (std::min(M, kMatmulSuperRows) + kMatmulChunkRows - 1) / kMatmulChunkRows;
  const long chunk_panels =
      std::clamp(P * rblocks_max / (kMatmulChunksPerThread * (parallel ? num_threads() : 1)) / 2 * 2, kMatmulChunkPanels,
                 kMatmulChunkMaxPanels);
  const long n_cblocks = (P + chunk_panels - 1) / chunk_panels;
  T* const xp = matmul_shared_pack_buffer<T>(static_cast<std::size_t>(std::min(M, kMatmulSuperRows) * n_kb * kPackStride));
  PhaseTimes* const prof = phase_profile();
#if defined(_OPENMP)
#pragma omp parallel if (parallel)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    double pre_s = 0, pack_s = 0, wait_s = 0;
    for (long s0 = 0; s0 < M; s0 += kMatmulSuperRows) {
      const long sm = std::min(kMatmulSuperRows, M - s0);
      {  // 1. prepare (the caller's prologue) and pack this thread's share of the rows
        const double tp = prof ? profile_now() : 0;
        long r0, r1;
        split_range(sm, t, nt, r0, r1);
        if (pre && r1 > r0) pre(s0 + r0, s0 + r1);
        const double tq = prof ? profile_now() : 0;
        if (prof) pre_s += tq - tp;
        for (long r = r0; r < r1; ++r)
          for (long kb = 0; kb < n_kb; ++kb) {
            const long k0 = kb * kMatmulKc, kc = std::min(kMatmulKc, K - k0);
            const T* src = x + (s0 + r) * ldx + k0;
            std::copy(src, src + kc, xp + (kb * sm + r) * kPackStride);
          }
        if (prof) pack_s += profile_now() - tq;
        const double tw = prof ? profile_now() : 0;
#if defined(_OPENMP)
#pragma omp barrier
#endif
        if (prof) wait_s += profile_now() - tw;
      }
      // 2. the chunks
      const long n_rblocks = (sm + kMatmulChunkRows - 1) / kMatmulChunkRows;
      const long n_chunks = n_rblocks * n_cblocks;
#if defined(_OPENMP)
#pragma omp for schedule(dynamic, 1) nowait
#endif
      for (long ch = 0; ch < n_chunks; ++ch) {
        const long cb = ch / n_rblocks, rb = ch % n_rblocks;
        long mb, me;
        split_range(sm, static_cast<int>(rb), static_cast<int>(n_rblocks), mb, me);
        const long pc0 = cb * chunk_panels, pc1 = std::min(P, pc0 + chunk_panels);
        const long n_rtiles = (me - mb + MR - 1) / MR;
        auto rows_of = [&](long i, long& r0, long& r1) {
          split_range(me - mb, static_cast<int>(i), static_cast<int>(n_rtiles), r0, r1);
        };
        T* const yc = y + (s0 + mb) * ldy;
        for (long kb = 0; kb < n_kb; ++kb) {
          const long k0 = kb * kMatmulKc, kc = std::min(kMatmulKc, K - k0);
          const T* const xa = xp + (kb * sm + mb) * kPackStride;
          for (long p0 = pc0; p0 < pc1; p0 += NP) {
            const int np = static_cast<int>(std::min<long>(NP, pc1 - p0));
            const W* b = w.panel(p0) + k0 * kLanes;
            // The weight slice that comes next: the chunk's next panel tile, or its
            // first one in the next k block.
            long pn = p0 + NP, kn = k0;
            if (pn >= pc1) pn = pc0, kn = k0 + kMatmulKc;
            const bool next = kn < K;
            const long npn = std::min<long>(NP, pc1 - pn), kcn = next ? std::min(kMatmulKc, K - kn) : 0;
            for (long i = 0; i < n_rtiles; ++i) {
              long r0, r1;
              rows_of(i, r0, r1);
              // Cache hints (they never change a result): the output tile the next
              // row tile reloads (after the first k block), and a share of the next
              // weight slice, into L2.
              if (k0 > 0 && i + 1 < n_rtiles) {
                long q0, q1;
                rows_of(i + 1, q0, q1);
                for (long q = q0; q < q1; ++q)
                  for (long j = p0; j < p0 + np; ++j) prefetch_read(yc + q * ldy + j * kLanes);
              }
              if (next) {
                const long lines = npn * kcn, l1 = lines * (i + 1) / n_rtiles;
                const W* bn = w.panel(pn) + kn * kLanes;
                for (long l = lines * i / n_rtiles; l < l1; ++l) prefetch_l2(bn + (l % npn) * bstride + (l / npn) * kLanes);
              }
              matmul_tile_any<T, V, W, kPackStride>(static_cast<int>(r1 - r0), np, xa + r0 * kPackStride, kPackStride, b,
                                                    bstride, kc, yc + r0 * ldy + p0 * kLanes, ldy, k0 == 0);
            }
          }
        }
      }
      // Everyone is done with this super-block before its buffer is packed again
      // (the region's own end waits after the last one, unless profiling times it here).
      if (s0 + kMatmulSuperRows < M || prof) {
        const double tw = prof ? profile_now() : 0;
#if defined(_OPENMP)
#pragma omp barrier
#endif
        if (prof) wait_s += profile_now() - tw;
      }
    }
    if (prof) {
#if defined(_OPENMP)
#pragma omp critical(kvd_profile)
#endif
      {
        prof->prologue_thread_seconds += pre_s;
        prof->pack_thread_seconds += pack_s;
        prof->wait_thread_seconds += wait_s;
      }
    }
  }
}

/// One segment's product with an explicit vector implementation V and packed
/// element type W: y[:, 0 .. 16 * w.n_panels) for the segment's panels.
/// Runs pre on rows [0, M) of a K-wide input, split over threads when large enough.
inline void run_prologue(const RowPrologue& pre, long M, long K) {
  if (!pre || M <= 0) return;
#if defined(_OPENMP)
#pragma omp parallel if (M * std::max(K, 1L) >= kParallelElements)
#endif
  {
    int t = 0, nt = 1;
    this_thread(t, nt);
    long r0, r1;
    split_range(M, t, nt, r0, r1);
    if (r1 > r0) pre(r0, r1);
  }
}

/// `pre` (optional) prepares the input rows first (see RowPrologue).
template <class T, class V, class W>
void matmul_panels(const T* x, long ldx, long M, const PanelRange<W>& w, T* y, long ldy, const RowPrologue& pre) {
  const long K = w.K;
  if (M <= 0) return;
  if (K == 0) {
    run_prologue(pre, M, K);
    for (long m = 0; m < M; ++m) std::fill(y + m * ldy, y + m * ldy + w.n_panels * kLanes, T(0));
    return;
  }
  const bool parallel = M * w.n_panels * kLanes * K >= kMatmulParallelThreshold;
  if (M <= kSmallMaxM<V>) {
    run_prologue(pre, M, K);
    matmul_small<T, V, W>(x, ldx, M, w, y, ldy, parallel);
  } else {
    matmul_large<T, V, W>(x, ldx, M, w, y, ldy, parallel, pre);
  }
}

// fast_matmul.hpp and fast_bf16.hpp (included at the end of this file).
/// Which code computes a fast product (the tests force each; all give the same bits).
enum class FastPath { kAuto, kPortable };
inline bool fast_matmul_type(WeightType t);
inline void matmul_fast_panels(const float* x, long ldx, long M, const QuantPanels& w, float* y, long ldy);
inline bool fast_bf16_type(WeightType t, long K);
inline void matmul_fast_bf16_panels(const float* x, long ldx, long M, WeightType t, const std::uint16_t* panels,
                                    long n_panels, long K, float* y, long ldy);

/// Whether segment s of w runs a fast-mode kernel (fast_matmul.hpp, fast_bf16.hpp).
template <class T>
bool fast_segment(const PackedMatrix<T>& w, const typename PackedMatrix<T>::Segment& s) {
  if constexpr (std::is_same_v<T, float>)
    return w.fast_matmul() && (is_quant_block_type(s.type) ? fast_matmul_type(s.type) : fast_bf16_type(s.type, w.n_in()));
  return false;
}

/// matmul() with an explicit vector implementation V (Vec16<T> in the library;
/// the tests also run PortableVec16<T> and Avx2Vec16<T> and compare bits).
/// The one dispatch on storage type: each segment runs the kernels with its
/// packed element type.
/// `pre` (optional) prepares the input rows first: inside the first segment's
/// product when that is a float-kernel one, else once before everything.
template <class T, class V>
void matmul_with(const T* x, long ldx, long M, const PackedMatrix<T>& w, T* y, long ldy,
                 const RowPrologue& pre_in = RowPrologue()) {
  KVD_ASSERT(ldy >= w.n_out_padded() && ldx >= w.n_in());
  RowPrologue pre = pre_in;
  if (pre && (w.segments().empty() || is_quant_block_type(w.segments()[0].type) || fast_segment(w, w.segments()[0]))) {
    run_prologue(pre, M, w.n_in());
    pre = RowPrologue();
  }
  for (const auto& s : w.segments()) {
    T* ys = y + s.panel0 * kLanes;
    const long K = w.n_in();
    const RowPrologue p = pre;
    pre = RowPrologue();  // the first product prepares the rows, the others read them
    if constexpr (std::is_same_v<T, float>) {
      if (fast_segment(w, s) && !is_quant_block_type(s.type)) {  // f16 or bf16 in bf16 (fast_bf16.hpp)
        matmul_fast_bf16_panels(x, ldx, M, s.type, w.template panel_as<std::uint16_t>(s.panel0), s.n_panels, K, ys, ldy);
        continue;
      }
      if (s.type == WeightType::kF16) {
        matmul_panels<T, V, F16Bits>(x, ldx, M, {w.template panel_as<F16Bits>(s.panel0), s.n_panels, K}, ys, ldy, p);
        continue;
      }
      if (s.type == WeightType::kBF16) {
        matmul_panels<T, V, BF16Bits>(x, ldx, M, {w.template panel_as<BF16Bits>(s.panel0), s.n_panels, K}, ys, ldy, p);
        continue;
      }
    }
    if (is_quant_block_type(s.type)) {  // quant_matrix.hpp's kernels (fast_matmul.hpp's in fast mode)
      if constexpr (std::is_same_v<T, float>) {
        if (fast_segment(w, s)) {
          matmul_fast_panels(x, ldx, M, QuantPanels{s.type, w.template panel_as<unsigned char>(s.panel0), s.n_panels, K},
                             ys, ldy);
          continue;
        }
      }
      matmul_quant_panels<T, V>(x, ldx, M, QuantPanels{s.type, w.template panel_as<unsigned char>(s.panel0), s.n_panels, K},
                                ys, ldy);
      continue;
    }
    matmul_panels<T, V, T>(x, ldx, M, {w.template panel_as<T>(s.panel0), s.n_panels, K}, ys, ldy, p);
  }
}

/// The sizes of everything a dispatch level's entry receives by pointer
/// (dispatch.hpp), folded into one number: a level compiled from other headers than
/// the baseline's is refused, not run.
inline constexpr std::uint64_t kDispatchLayout =
    (static_cast<std::uint64_t>(sizeof(PackedMatrix<float>)) << 48) ^
    (static_cast<std::uint64_t>(sizeof(PackedMatrix<double>)) << 40) ^
    (static_cast<std::uint64_t>(sizeof(typename PackedMatrix<float>::Segment)) << 32) ^
    (static_cast<std::uint64_t>(sizeof(RowPrologue)) << 24) ^ (static_cast<std::uint64_t>(sizeof(PhaseTimes)) << 12) ^
    (static_cast<std::uint64_t>(alignof(PackedMatrix<float>)) << 4) ^ sizeof(void*);

/// The product on the kernels of this translation unit's flags, or (with
/// KVDECODE_DISPATCH) of the dispatch level picked for the running CPU.
template <class T>
void matmul_entry(const T* x, long ldx, long M, const PackedMatrix<T>& w, T* y, long ldy, const RowPrologue& pre) {
#if defined(KVDECODE_DISPATCH) && !defined(KVDECODE_DISPATCH_LEVEL)
  if (const kvd_isa::LevelKernels* k = dispatch(kDispatchLayout).kernels) {
    if constexpr (std::is_same_v<T, float>) return k->matmul_f32(x, ldx, M, &w, y, ldy, &pre, phase_profile());
    else return k->matmul_f64(x, ldx, M, &w, y, ldy, &pre, phase_profile());
  }
#endif
  matmul_with<T, Vec16<T>>(x, ldx, M, w, y, ldy, pre);
}

}  // namespace detail
/// y (M x Npad, row stride ldy) = x (M x K, row stride ldx) * W^T.
/// Writes all n_out_padded() columns of each row (the padding columns get 0s),
/// so ldy must be >= w.n_out_padded(). Every y[m][n] follows the reduction-order
/// rule above, so it is bit-identical for any M, tiling or thread count.
/// Allocates nothing for M <= detail::kSmallMaxM (16 for float on AVX-512); larger
/// M use a per-thread packing buffer allocated once, at the first such call on
/// each thread.
/// Preconditions (asserted): x and y do not overlap; ldx >= K.
template <class T>
void matmul(const T* x, long ldx, long M, const PackedMatrix<T>& w, T* y, long ldy) {
  detail::matmul_entry<T>(x, ldx, M, w, y, ldy, RowPrologue());
}

/// matmul() that first runs `pre` on the input rows (see RowPrologue): for
/// example, the block's residual add and RMSNorm go inside the product's
/// parallel region instead of their own. The product is the same as running
/// pre(0, M) and then matmul(). A quantized first segment runs pre before it.
template <class T>
void matmul(const T* x, long ldx, long M, const PackedMatrix<T>& w, T* y, long ldy, const RowPrologue& pre) {
  detail::matmul_entry<T>(x, ldx, M, w, y, ldy, pre);
}

}  // namespace kvd

// The quantized kernels behind matmul_quant_panels (they use the float kernels
// above). quant_matrix.hpp ends with fast_matmul.hpp and, with
// KVDECODE_EXTERN_KERNELS, the declarations of the kernel instances
// (detail/kernel_instances.hpp), so that each of the three headers compiles
// on its own, whichever a program includes first.
#include "kvdecode/quant_matrix.hpp"
