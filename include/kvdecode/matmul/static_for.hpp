// static_for: a loop over a compile-time range, fully inlined, so that each step
// sees its index as a constant (the decoders' code<kk>() and the tiles' unrolled
// sub-blocks), and with_tile_shape, a tile's run-time shape as constants. Shared by
// the quantized and fast-mode kernels.
#pragma once

#include <type_traits>
#include <utility>

#include "kvdecode/core/isa.hpp"

namespace kvd::detail {

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

template <int MR, int NH, class F>
inline void with_tile_halves(int nh, F&& f) {
  if constexpr (NH >= 1) {
    if (nh == NH) return f(std::integral_constant<int, MR>{}, std::integral_constant<int, NH>{});
    return with_tile_halves<MR, NH - 1>(nh, f);
  }
}
/// Calls f(std::integral_constant<int, mr>, std::integral_constant<int, nh>) for a
/// register tile's run-time shape: mr rows (1 .. Shape::kMaxRows) and nh column
/// parts (1 .. Shape::halves(mr)); nothing for a shape out of those ranges.
template <class Shape, int MR = Shape::kMaxRows, class F>
inline void with_tile_shape(int mr, int nh, F&& f) {
  if constexpr (MR >= 1) {
    if (mr == MR) return with_tile_halves<MR, Shape::halves(MR)>(nh, f);
    return with_tile_shape<Shape, MR - 1>(mr, nh, f);
  }
}

}  // namespace kvd::detail
