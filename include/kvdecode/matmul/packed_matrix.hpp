// PackedMatrix: a weight matrix packed once, at load time, into panels of 16
// output columns for the kernels (several matrices may be stacked into one), and
// RowPrologue, the work a product's caller may run on its input rows first.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/matmul/numerics.hpp"
#include "kvdecode/matmul/panel_layout.hpp"
#include "kvdecode/weights/model_weights.hpp"

namespace kvd {

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

  /// The numerics of products with this matrix (numerics.hpp): from
  /// Numerics::kInt8Blocks on, its block-type segments round the activations to
  /// int8 blocks (fast_int8.hpp); at Numerics::kFast its f16 and bf16 segments also
  /// round them to bf16 where the CPU has AVX512-BF16 (fast_bf16.hpp). kExact by
  /// default; f32 segments keep float activations in every mode. Never fails.
  void set_numerics(Numerics n) { numerics_ = n; }
  Numerics numerics() const { return numerics_; }
  /// set_numerics(on ? kFast : kExact).
  void set_fast_matmul(bool on) { numerics_ = on ? Numerics::kFast : Numerics::kExact; }
  bool fast_matmul() const { return numerics_ == Numerics::kFast; }

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
  Numerics numerics_ = Numerics::kExact;       // set_numerics()
};

namespace detail {
/// Which code computes a fast product (the tests force each; all give the same bits).
enum class FastPath { kAuto, kPortable };
}  // namespace detail

}  // namespace kvd
