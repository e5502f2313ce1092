// Test helpers for quantized matrices: random rows quantized by the library's
// reference quantizers, with their dequantized values and factored form, and
// random activations. Shared by quant_matrix_test.cpp and fast_matmul_test.cpp.
#pragma once

#include <random>
#include <vector>

#include "kvdecode/matmul/quant_kernels.hpp"

namespace kvd_test {
using kvd::WeightType;
namespace detail = kvd::detail;

/// n_out rows of n_in values quantized to t (ggml bytes, rows consecutive), their
/// dequantized floats and their factored form (weights/blocks.hpp).
struct QuantRows {
  std::vector<unsigned char> bytes;
  std::vector<float> w;     // (n_out, n_in)
  std::vector<float> c;     // (n_out, n_in) codes
  std::vector<float> D, N;  // (n_out, n_in / sub) scales, offsets (N: types with a min, else empty)
};

/// Fills q.c, q.D, q.N from q.bytes.
inline void factor_rows(WeightType t, long n_out, long n_in, QuantRows& q) {
  const auto f = detail::quant_factoring(t);
  const std::size_t rb = kvd::weight_row_bytes(t, static_cast<std::uint64_t>(n_in));
  q.c.assign(static_cast<std::size_t>(n_out * n_in), 0.f);
  q.D.assign(static_cast<std::size_t>(n_out * n_in / f.sub), 0.f);
  q.N.assign(f.has_min ? q.D.size() : 0, 0.f);
  for (long r = 0; r < n_out; ++r)
    detail::factor_row(t, q.bytes.data() + r * rb, q.c.data() + r * n_in, q.D.data() + r * (n_in / f.sub),
                       f.has_min ? q.N.data() + r * (n_in / f.sub) : nullptr, n_in);
}

inline QuantRows make_rows(WeightType t, long n_out, long n_in, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<float> src(static_cast<std::size_t>(n_out * n_in));
  for (auto& v : src) v = nd(rng);
  // Some rows with an offset (exercises the mins) and one zero row.
  for (long k = 0; k < n_in; ++k) src[static_cast<std::size_t>(n_in + k)] += 0.1f;
  for (long k = 0; k < n_in; ++k) src[static_cast<std::size_t>(2 * n_in + k)] = 0.f;
  const std::size_t rb = kvd::weight_row_bytes(t, static_cast<std::uint64_t>(n_in));
  QuantRows q;
  q.bytes.resize(rb * static_cast<std::size_t>(n_out));
  q.w.resize(src.size());
  for (long r = 0; r < n_out; ++r) {
    detail::quantize_row(t, src.data() + r * n_in, q.bytes.data() + r * rb, n_in);
    detail::dequantize_row(t, q.bytes.data() + r * rb, q.w.data() + r * n_in, n_in);
  }
  factor_rows(t, n_out, n_in, q);
  return q;
}

inline std::vector<float> activations(long M, long K, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<std::size_t>(M * K));
  for (auto& v : x) v = nd(rng);
  return x;
}

}  // namespace kvd_test
