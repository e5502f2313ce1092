// The fixed rotation of a KV cache's heads (ModelConfig::kv_rotation, --cache-rotate):
// the normalised Walsh-Hadamard transform H / sqrt(n) of each head's n = head_dim
// values, n a power of two. H is symmetric with H H = n I, so the transform is
// orthonormal and its own inverse: rotating q and k alike leaves q.k unchanged in
// exact arithmetic, and rotating v and then the attention output undoes itself.
// What it buys: it spreads a head's outlying dimensions over all of them before the
// cache quantizes them, which makes q4_0 keys usable (ik_llama.cpp PR #1034).
//
// Every path (the cached forward pass, the cache-free reference, the tests' oracle)
// rotates the same rows with this one function, one fixed sequence of operations
// per head, so the exactness suites hold bit for bit with rotation on:
//   butterflies: for len = 1, 2, 4, ..., n / 2, for each i in [0, n) with i & len == 0,
//                in increasing i: (a, b) = (x[i], x[i + len]); x[i] = a + b; x[i + len] = a - b
//   scale:       x[i] = x[i] * s for each i, s = T(1) / sqrt(T(n)) (one correctly rounded
//                division of a correctly rounded square root)
#pragma once

#include <cmath>

#include "kvdecode/core/config.hpp"

namespace kvd {

namespace detail {

/// Rotates n_heads consecutive heads of width head_dim (a power of two) in x, in
/// place, by the normalised Walsh-Hadamard transform, in the order stated above.
/// Precondition (the caller's config was validated): head_dim is a power of two.
template <class T>
inline void hadamard_rotate(T* x, int n_heads, int head_dim) {
  const T s = T(1) / std::sqrt(static_cast<T>(head_dim));
  for (int h = 0; h < n_heads; ++h) {
    T* v = x + static_cast<long>(h) * head_dim;
    for (int len = 1; len < head_dim; len *= 2)
      for (int i = 0; i < head_dim; i += 2 * len)
        for (int j = i; j < i + len; ++j) {
          const T a = v[j], b = v[j + len];
          v[j] = a + b;
          v[j + len] = a - b;
        }
    for (int i = 0; i < head_dim; ++i) v[i] = v[i] * s;
  }
}

}  // namespace detail

}  // namespace kvd
