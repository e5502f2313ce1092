// kvd::matmul, the one product every layer calls: y = x W^T for a PackedMatrix,
// each segment on the kernels of its storage type (dense_kernels.hpp for float,
// f16 and bf16 panels, quant_kernels.hpp for block types, fast_int8.hpp and
// fast_bf16.hpp in the fast mode), and, with KVDECODE_DISPATCH, on the dispatch
// level picked for the running CPU (dispatch.hpp). The reduction-order rule that
// makes every path give the same bits is stated in dense_kernels.hpp.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kvdecode/core/profile.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/matmul/dense_kernels.hpp"
#include "kvdecode/matmul/dispatch.hpp"
#include "kvdecode/matmul/fast_bf16.hpp"
#include "kvdecode/matmul/fast_int8.hpp"
#include "kvdecode/matmul/instances_list.hpp"
#include "kvdecode/matmul/packed_matrix.hpp"
#include "kvdecode/matmul/quant_kernels.hpp"

namespace kvd {
namespace detail {

/// Whether segment s of w runs a fast-mode kernel (fast_int8.hpp, fast_bf16.hpp).
template <class T>
bool fast_segment(const PackedMatrix<T>& w, const typename PackedMatrix<T>::Segment& s) {
  if constexpr (std::is_same_v<T, float>)
    return is_quant_block_type(s.type) ? w.numerics() != Numerics::kExact && fast_matmul_type(s.type)
                                       : w.numerics() == Numerics::kFast && fast_bf16_type(s.type, w.n_in());
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
    if (is_quant_block_type(s.type)) {  // quant_kernels.hpp's kernels (fast_int8.hpp's in fast mode)
      if constexpr (std::is_same_v<T, float>) {
        if (fast_segment(w, s)) {
          matmul_fast_with(x, ldx, M, QuantPanels{s.type, w.template panel_as<unsigned char>(s.panel0), s.n_panels, K},
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
