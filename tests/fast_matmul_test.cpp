// The fast mode (fast_int8.hpp): activations rounded to int8 blocks of 32 and
// integer dot products. The rounding and the product equal, bit for bit, the
// definition at the top of fast_int8.hpp written out here from ggml's bytes, on
// every path (AVX2 and scalar), every M from 1 to 40 and 1 or 2 threads; a row's
// result never depends on the rows beside it; the float steps are accurate (a
// float64 product of the same rounded activations); and the rounding's own error
// is measured against the exact activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/matmul/fast_int8.hpp"
#include "kvdecode/matmul/quant_matrix.hpp"
#include "quant_rows.hpp"
#include "test_util.hpp"

namespace {
using namespace kvd;

const WeightType kFastTypes[] = {WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ4_K, WeightType::kQ5_0, WeightType::kQ5_1,
                                 WeightType::kQ5_K, WeightType::kQ2_K, WeightType::kQ3_K, WeightType::kQ6_K, WeightType::kQ8_0,
                                 WeightType::kIQ4_NL, WeightType::kIQ4_XS, WeightType::kMXFP4};

using kvd_test::activations;
using kvd_test::make_rows;
using Rows = kvd_test::QuantRows;

/// The rounding of one block, as fast_int8.hpp's comment defines it.
float spec_round(const float* x, int* q, int* qsum) {
  float amax = 0.f;
  for (int k = 0; k < 32; ++k)
    if (std::fabs(x[k]) > amax) amax = std::fabs(x[k]);
  const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
  *qsum = 0;
  for (int k = 0; k < 32; ++k) {
    const float v = std::nearbyint(x[k] * id);
    q[k] = std::isnan(v) ? 0 : static_cast<int>(std::min(127.f, std::max(-127.f, v)));
    *qsum += q[k];
  }
  return d;
}

/// The fast product, as fast_int8.hpp's comment defines it (y: M x ldy).
std::vector<float> spec_product(const std::vector<float>& x, long M, const Rows& w, WeightType t, long N, long K, long ldy) {
  const bool has_min = detail::quant_factoring(t).has_min;
  const long sub = detail::quant_factoring(t).sub;
  std::vector<float> y(static_cast<std::size_t>(M * ldy), 0.f);
  std::vector<int> q(static_cast<std::size_t>(K)), qs(static_cast<std::size_t>(K / 32));
  std::vector<float> d(static_cast<std::size_t>(K / 32));
  for (long m = 0; m < M; ++m) {
    for (long j = 0; j < K / 32; ++j) d[j] = spec_round(&x[m * K + 32 * j], &q[32 * j], &qs[j]);
    for (long n = 0; n < N; ++n) {
      float acc = 0.f;
      for (long s = 0; s < K / sub; ++s) {
        const long j = s * sub / 32;
        std::int32_t I = 0;
        std::int32_t Q = 0;  // the sub-block's sum of q
        for (long k = s * sub; k < (s + 1) * sub; ++k) I += static_cast<std::int32_t>(w.c[n * K + k]) * q[k], Q += q[k];
        acc = std::fma(static_cast<float>(I) * d[j], w.D[n * (K / sub) + s], acc);
        if (has_min) acc = std::fma(d[j] * static_cast<float>(Q), w.N[n * (K / sub) + s], acc);
      }
      y[m * ldy + n] = acc;
    }
  }
  return y;
}

TEST(FastMatmul, RoundingIsTheDefinitionOnEveryPath) {
  const long M = 3, K = 256;
  std::vector<float> x = activations(M, K, 7);
  // Special blocks: zeros, a NaN, an infinity, ties (x / d = n + 0.5), a subnormal amax.
  for (int k = 0; k < 32; ++k) x[k] = 0.f;
  x[40] = std::numeric_limits<float>::quiet_NaN();
  x[70] = std::numeric_limits<float>::infinity();
  for (int k = 0; k < 32; ++k) x[96 + k] = (k - 16) * 0.5f;  // amax 8: d = 8/127, values 63.5 d .. ties after rounding
  x[96] = 127.f / 127.f * 8.f;
  for (int k = 0; k < 32; ++k) x[128 + k] = k % 2 ? 1e-40f : -3e-41f;
  for (int order : {4, 8, 16})
  for (bool portable : {false, true}) {
    detail::FastRows rows;
    rows.reserve(M, K, order);
    detail::fast_round_rows(x.data(), K, 0, M, rows, portable);
    for (long m = 0; m < M; ++m)
      for (long j = 0; j < K / 32; ++j) {
        int q[32], qs;
        const float d = spec_round(&x[m * K + 32 * j], q, &qs);
        const long e = m * (K / 32) + j;
        ASSERT_TRUE(kvd_test::same_bits(&d, rows.d.data() + e, 1)) << "row " << m << " block " << j << " portable " << portable;
        ASSERT_EQ(rows.qsum.data()[e], qs) << "row " << m << " block " << j;
        const float xq = d * static_cast<float>(qs);
        ASSERT_TRUE(kvd_test::same_bits(&xq, rows.xq.data() + e, 1));
        int half0 = 0, half1 = 0;
        for (int k = 0; k < 16; ++k) half0 += q[k], half1 += q[16 + k];
        ASSERT_EQ(rows.qsum16.data()[2 * e], half0);
        ASSERT_EQ(rows.qsum16.data()[2 * e + 1], half1);
        const float xq0 = d * static_cast<float>(half0), xq1 = d * static_cast<float>(half1);
        ASSERT_TRUE(kvd_test::same_bits(&xq0, rows.xq16.data() + 2 * e, 1));
        ASSERT_TRUE(kvd_test::same_bits(&xq1, rows.xq16.data() + 2 * e + 1, 1));
        for (int k = 0; k < 32; ++k) {
          // order 8: each group of 8 as 0, 2, 4, 6, 1, 3, 5, 7; order 16: each group of 16 as 0, 4, 8, 12, 1, 5, ...;
          // order 4: in order
          const int slot = order == 4   ? k
                           : order == 8 ? (k & ~7) + (k % 2 ? 4 + (k & 7) / 2 : (k & 7) / 2)
                                        : (k & ~15) + 4 * (k % 4) + (k & 15) / 4;
          ASSERT_EQ(rows.q.data()[m * K + 32 * j + slot], q[k])
              << "row " << m << " block " << j << " value " << k << " order " << order << " portable " << portable;
        }
      }
  }
}

TEST(FastMatmul, EveryPathMAndThreadCountIsTheDefinition) {
  const long N = 99, K = 512, Mmax = 40;  // 7 panels, the last padded: an odd one out of the 512-bit planes' pairs
  const int saved = num_threads();
  for (WeightType t : kFastTypes) {
    const Rows w = make_rows(t, N, K, 3);
    const QuantMatrix qm(t, N, K, w.bytes.data(), "w");
    const long ldy = qm.n_out_padded();
    // threads 1 and 2; with 2, the 512-bit tiles' shapes of both kinds of CPU (fast_tiles_512.hpp)
    for (int run : {1, 2, 3}) {
      const int threads = run == 1 ? 1 : 2;
      set_num_threads(threads);
      detail::fast_halves_choice() = run == 1 ? -1 : run - 2;
      for (long M = 1; M <= Mmax; M += (M < 10 ? 1 : 7)) {
        // fresh activations for every product: nothing left in a buffer by the last one can pass for a result
        const std::vector<float> x = activations(M, K, static_cast<unsigned>(11 + M + 100 * threads));
        const std::vector<float> want = spec_product(x, M, w, t, N, K, ldy);
        for (auto path : {detail::FastPath::kAuto, detail::FastPath::kPortable}) {
          std::vector<float> y(static_cast<std::size_t>(M * ldy), -1.f);
          detail::matmul_fast_with(x.data(), K, M, qm.panels(), y.data(), ldy, path);
          for (long m = 0; m < M; ++m) {
            ASSERT_TRUE(kvd_test::same_bits(&y[m * ldy], &want[m * ldy], N))
                << weight_type_name(t) << " M " << M << " row " << m << " threads " << threads << " halves "
                << detail::fast_halves_choice() << " portable "
                << (path == detail::FastPath::kPortable) << ": " << kvd_test::first_difference(&y[m * ldy], &want[m * ldy], N);
            for (long n = N; n < ldy; ++n) ASSERT_EQ(y[m * ldy + n], 0.f) << "padding column " << n;
          }
        }
      }
    }
  }
  detail::fast_halves_choice() = -1;
  set_num_threads(saved);
}

// Through kvd::matmul with a PackedMatrix: fast mode on a q4_K segment, default
// numerics on an f32 segment of the same stacked matrix; off gives the default mode.
TEST(FastMatmul, PackedMatrixFlagSelectsTheModePerSegment) {
  const long N = 40, K = 256, M = 5;
  const Rows w = make_rows(WeightType::kQ4_K, N, K, 5);
  const WeightMatrix wq = WeightMatrix::copy_of(WeightType::kQ4_K, N, K, w.bytes.data(), w.bytes.size());
  RowMatrix<float> dense = RowMatrix<float>::Random(24, K);
  const WeightMatrix wf = WeightMatrix::from_dense(dense);
  PackedMatrix<float> pm({&wq, &wf});
  const std::vector<float> x = activations(M, K, 9);
  const long ldy = pm.n_out_padded();
  std::vector<float> def(static_cast<std::size_t>(M * ldy)), fast(def.size());
  matmul(x.data(), K, M, pm, def.data(), ldy);
  pm.set_fast_matmul(true);
  matmul(x.data(), K, M, pm, fast.data(), ldy);
  const std::vector<float> want = spec_product(x, M, w, WeightType::kQ4_K, N, K, N);
  for (long m = 0; m < M; ++m) {
    EXPECT_ROW_BITS_EQ(&fast[m * ldy], &want[m * N], N);
    EXPECT_FALSE(kvd_test::same_bits(&fast[m * ldy], &def[m * ldy], N)) << "the fast mode should round activations";
    EXPECT_ROW_BITS_EQ(&fast[m * ldy + pm.part_col(1)], &def[m * ldy + pm.part_col(1)], 24);
  }
  pm.set_fast_matmul(false);
  std::vector<float> again(def.size());
  matmul(x.data(), K, M, pm, again.data(), ldy);
  EXPECT_ROW_BITS_EQ(again.data(), def.data(), static_cast<long>(def.size()));
}

// The float steps are accurate: within a few float roundings of a float64 product
// of the same rounded activations; and the rounding itself, against the exact
// activations, stays within 3% of the largest output (1.2% measured here; it is
// llama.cpp's rounding, which moved its logits 1.2-1.8% of the largest).
TEST(FastMatmul, AccurateAgainstFloat64) {
  const long N = 64, K = 2048, M = 4;
  for (WeightType t : kFastTypes) {
    const Rows w = make_rows(t, N, K, 21);
    const QuantMatrix qm(t, N, K, w.bytes.data());
    const std::vector<float> x = activations(M, K, 23);
    std::vector<float> y(static_cast<std::size_t>(M * qm.n_out_padded()));
    matmul_fast(x.data(), K, M, qm, y.data(), qm.n_out_padded());
    {
      const std::vector<float> want = spec_product(x, M, w, t, N, K, qm.n_out_padded());
      for (long m = 0; m < M; ++m)
        EXPECT_ROW_BITS_EQ(&y[m * qm.n_out_padded()], &want[m * qm.n_out_padded()], N) << "the definition";
    }
    double worst_rounded = 0, worst_exact = 0;
    for (long m = 0; m < M; ++m) {
      std::vector<int> q(static_cast<std::size_t>(K));
      std::vector<double> xr(static_cast<std::size_t>(K));
      for (long j = 0; j < K / 32; ++j) {
        int qs;
        const float d = spec_round(&x[m * K + 32 * j], &q[32 * j], &qs);
        for (long k = 32 * j; k < 32 * j + 32; ++k) xr[k] = double(d) * q[k];
      }
      double ymax = 0;
      std::vector<double> ref_r(N), ref_x(N), mag(N);
      for (long n = 0; n < N; ++n) {
        for (long k = 0; k < K; ++k) {
          ref_r[n] += double(w.w[n * K + k]) * xr[k];
          ref_x[n] += double(w.w[n * K + k]) * x[m * K + k];
          mag[n] += std::abs(double(w.w[n * K + k]) * xr[k]);
        }
        ymax = std::max(ymax, std::abs(ref_x[n]));
      }
      for (long n = 0; n < N; ++n) {
        const double got = y[m * qm.n_out_padded() + n];
        EXPECT_LE(std::abs(got - ref_r[n]), 1e-5 * mag[n]) << weight_type_name(t) << " row " << m << " col " << n;
        worst_rounded = std::max(worst_rounded, std::abs(got - ref_r[n]) / mag[n]);
        worst_exact = std::max(worst_exact, std::abs(got - ref_x[n]) / ymax);
      }
    }
    EXPECT_LE(worst_exact, 0.03) << weight_type_name(t);
    std::cout << "  " << weight_type_name(t) << ": float steps " << worst_rounded
              << " of the sum of |terms|; rounding " << worst_exact << " of the largest output\n";
  }
}

// q8_0's extreme codes: -128 (no int8 negation: vpsignb moves its sign onto the
// activation, vpdpbusd takes it as 0 after the + 128) and 127 against activations
// rounded to +-127, in the small-M tiles and the large-M planes.
TEST(FastMatmul, Q8_0ExtremeCodesAreTheDefinition) {
  const long N = 40, K = 256;
  Rows w = make_rows(WeightType::kQ8_0, N, K, 31);
  const std::size_t rb = weight_row_bytes(WeightType::kQ8_0, K), block = 34;  // f16 scale, 32 codes
  for (long n = 0; n < N; ++n)
    for (long k = 0; k < K; k += 3) {
      const std::size_t at = n * rb + (k / 32) * block + 2 + k % 32;
      w.bytes[at] = static_cast<unsigned char>((n + k) % 2 ? 0x80 : 0x7F);  // -128 or 127
    }
  kvd_test::factor_rows(WeightType::kQ8_0, N, K, w);
  const QuantMatrix qm(WeightType::kQ8_0, N, K, w.bytes.data(), "w");
  const long ldy = qm.n_out_padded();
  for (long M : {1L, 4L, 7L, 8L, 40L}) {
    std::vector<float> x = activations(M, K, 41);
    for (long i = 0; i < M * K; i += 5) x[i] = (i % 2 ? 1.f : -1.f) * 100.f;  // rounds to +-127
    const std::vector<float> want = spec_product(x, M, w, WeightType::kQ8_0, N, K, ldy);
    for (auto path : {detail::FastPath::kAuto, detail::FastPath::kPortable}) {
      std::vector<float> y(static_cast<std::size_t>(M * ldy), -1.f);
      detail::matmul_fast_with(x.data(), K, M, qm.panels(), y.data(), ldy, path);
      for (long m = 0; m < M; ++m)
        ASSERT_TRUE(kvd_test::same_bits(&y[m * ldy], &want[m * ldy], N))
            << "M " << M << " row " << m << " portable " << (path == detail::FastPath::kPortable) << ": "
            << kvd_test::first_difference(&y[m * ldy], &want[m * ldy], N);
    }
  }
}

}  // namespace
