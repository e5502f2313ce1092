// static_for: a loop over a compile-time range, fully inlined, so that each step
// sees its index as a constant (the decoders' code<kk>() and the tiles' unrolled
// sub-blocks). Shared by the quantized and fast-mode kernels.
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

}  // namespace kvd::detail
