// The fast mode of 16-bit weights (fast_bf16.hpp): activations rounded to bf16,
// bf16 dot products. The rounding and the product equal, bit for bit, the
// definition at the top of fast_bf16.hpp written out here on its own, on every
// path (AVX512-BF16 tiles and scalar), every M from 1 to 40 and 1 or 2 threads;
// the CPU's vdpbf16ps is that definition; kvd::matmul takes the mode per
// segment; and the result is measured against a float64 product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "kvdecode/matmul/fast_bf16.hpp"
#include "kvdecode/matmul/matmul.hpp"
#include "quant_rows.hpp"
#include "test_util.hpp"

namespace {
using namespace kvd;

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool subnormal(float f) { return f != 0.f && std::fabs(f) < std::numeric_limits<float>::min(); }

/// The rounding of the definition, written out: subnormal -> signed zero, NaN ->
/// quiet NaN of the top bits, else the top 16 bits rounded to nearest, ties to even.
std::uint16_t spec_round(float v) {
  const std::uint32_t u = bits_of(v);
  if (subnormal(v)) return static_cast<std::uint16_t>(u >> 31 << 15);
  if (std::isnan(v)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  const std::uint32_t low = u & 0xFFFF, top = u >> 16;
  const bool up = low > 0x8000 || (low == 0x8000 && (top & 1));
  return static_cast<std::uint16_t>(top + (up ? 1 : 0));
}
float spec_bf16(std::uint16_t b) { return float_of(static_cast<std::uint32_t>(b) << 16); }
float spec_flush(float v) { return subnormal(v) ? (std::signbit(v) ? -0.f : 0.f) : v; }
/// One half of a vdpbf16ps lane: fused, inputs and result flushed.
float spec_step(float acc, std::uint16_t a, std::uint16_t b) {
  return spec_flush(std::fma(spec_flush(spec_bf16(a)), spec_flush(spec_bf16(b)), spec_flush(acc)));
}

/// Random 16-bit weights of type t (n x k, row-major bits): mostly normal values
/// of a model's scale, and for bf16 some subnormals and zeros of both signs.
std::vector<std::uint16_t> weights16(WeightType t, long n, long k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<std::uint16_t> w(static_cast<std::size_t>(n * k));
  for (auto& b : w) {
    const float v = nd(rng);
    if (t == WeightType::kF16) {
      b = detail::fp32_to_fp16(v);
    } else {
      const unsigned r = rng() % 64;
      b = r == 0 ? static_cast<std::uint16_t>((rng() & 0x8000) | (1 + rng() % 0x7F))  // subnormal bf16
          : r == 1 ? static_cast<std::uint16_t>(rng() & 0x8000)                       // +-0
                   : detail::fp32_to_bf16(v);
    }
  }
  return w;
}

/// Activations with the cases the rounding must get right: ties, subnormals, zeros of both signs.
std::vector<float> activations16(long M, long K, unsigned seed) {
  std::vector<float> x = kvd_test::activations(M, K, seed);
  std::mt19937 rng(seed + 1);
  for (auto& v : x) {
    const unsigned r = rng() % 40;
    if (r == 0) v = float_of((bits_of(v) & 0xFFFF0000u) | 0x8000u);                  // a tie
    else if (r == 1) v = float_of((rng() & 0x80000000u) | (1 + rng() % 0x7FFFFF));    // subnormal
    else if (r == 2) v = (rng() & 1) ? -0.f : 0.f;
  }
  return x;
}

/// The fast product as fast_bf16.hpp's comment defines it (y: M x ldy, padding columns 0).
std::vector<float> spec_product(const std::vector<float>& x, long M, const std::vector<std::uint16_t>& w, WeightType t,
                                long N, long K, long ldy) {
  std::vector<float> y(static_cast<std::size_t>(M * ldy), 0.f);
  std::vector<std::uint16_t> xr(static_cast<std::size_t>(K)), wr(static_cast<std::size_t>(K));
  for (long m = 0; m < M; ++m) {
    for (long k = 0; k < K; ++k) xr[k] = spec_round(x[m * K + k]);
    for (long n = 0; n < N; ++n) {
      for (long k = 0; k < K; ++k) {
        const std::uint16_t b = w[n * K + k];
        wr[k] = t == WeightType::kF16 ? spec_round(detail::half_bits_to_float(b)) : b;
      }
      float acc = 0.f;
      for (long k = 0; k < K; k += 2) {
        acc = spec_step(acc, xr[k + 1], wr[k + 1]);
        acc = spec_step(acc, xr[k], wr[k]);
      }
      y[m * ldy + n] = acc;
    }
  }
  return y;
}

WeightMatrix matrix16(WeightType t, long n, long k, const std::vector<std::uint16_t>& w) {
  return WeightMatrix::copy_of(t, n, k, w.data(), w.size() * 2);
}

const WeightType k16[] = {WeightType::kF16, WeightType::kBF16};

TEST(FastBf16, RoundingIsTheDefinitionOnEveryPath) {
  // values written out: 1, the tie 1 + 2^-8 (to even: 1), 1 + 3 * 2^-8 (to even: up),
  // the largest subnormal (a zero of its sign), a signalling NaN (made quiet), infinity
  EXPECT_EQ(detail::fast_bf16_round(1.f), 0x3F80);
  EXPECT_EQ(detail::fast_bf16_round(float_of(0x3F808000u)), 0x3F80);
  EXPECT_EQ(detail::fast_bf16_round(float_of(0x3F818000u)), 0x3F82);
  EXPECT_EQ(detail::fast_bf16_round(float_of(0x807FFFFFu)), 0x8000);
  EXPECT_EQ(detail::fast_bf16_round(float_of(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(detail::fast_bf16_round(std::numeric_limits<float>::infinity()), 0x7F80);
  const long M = 7, K = 86;  // 86: five vectors of 16 and a scalar tail
  const std::vector<float> x = activations16(M, K, 3);
  for (bool portable : {false, true}) {
    detail::FastBf16Rows rows;
    rows.reserve(M, K);
    detail::fast_bf16_round_rows(x.data(), K, 0, M, rows, portable);
    for (long m = 0; m < M; ++m)
      for (long k = 0; k < K; ++k)
        ASSERT_EQ(rows.row(m)[k], spec_round(x[m * K + k])) << "row " << m << " value " << k << " (" << x[m * K + k]
                                                           << ") portable " << portable;
  }
}

// The CPU's vdpbf16ps against two steps of the definition, odd element first, on
// lanes with subnormal inputs and results; the two other plausible readings (even
// first; both products added with one rounding) must each differ somewhere, or the
// data could not tell them apart.
TEST(FastBf16, HardwareStepIsTheDefinition) {
#if !defined(KVDECODE_FAST_BF16)
  GTEST_SKIP() << "built without AVX512-BF16: the fast mode keeps 16-bit matrices in the default numerics";
#else
  std::mt19937 rng(5);
  auto value16 = [&](bool tiny) {
    const unsigned e = tiny ? rng() % 3 : 100 + rng() % 56;
    return static_cast<std::uint16_t>((rng() & 0x8000) | (e << 7) | (rng() & 0x7F));
  };
  long lanes = 0, differ_even_first = 0, differ_one_rounding = 0;
  for (int it = 0; it < 200000; ++it) {
    alignas(64) std::uint16_t a[32], b[32];
    alignas(64) float acc[16], out[16];
    const bool tiny_a = rng() % 8 == 0, tiny_b = rng() % 8 == 0;
    for (int i = 0; i < 32; ++i) a[i] = value16(tiny_a && rng() % 2), b[i] = value16(tiny_b && rng() % 2);
    for (float& v : acc) v = float_of((rng() & 0x80000000u) | ((rng() % 6 == 0 ? rng() % 3 : 110 + rng() % 40) << 23) | (rng() & 0x7FFFFF));
    const __m512 r = _mm512_dpbf16_ps(_mm512_load_ps(acc), reinterpret_cast<__m512bh>(_mm512_load_si512(a)),
                                      reinterpret_cast<__m512bh>(_mm512_load_si512(b)));
    _mm512_store_ps(out, r);
    for (int j = 0; j < 16; ++j, ++lanes) {
      const float want = spec_step(spec_step(acc[j], a[2 * j + 1], b[2 * j + 1]), a[2 * j], b[2 * j]);
      ASSERT_EQ(bits_of(out[j]), bits_of(want)) << "lane " << lanes << ": acc " << acc[j] << " a " << spec_bf16(a[2 * j])
                                                << ", " << spec_bf16(a[2 * j + 1]) << " b " << spec_bf16(b[2 * j]) << ", "
                                                << spec_bf16(b[2 * j + 1]) << ": hardware " << out[j] << ", definition " << want;
      ASSERT_EQ(bits_of(detail::fast_bf16_step(detail::fast_bf16_step(acc[j], a[2 * j + 1], b[2 * j + 1]), a[2 * j], b[2 * j])),
                bits_of(want));
      const float even = spec_step(spec_step(acc[j], a[2 * j], b[2 * j]), a[2 * j + 1], b[2 * j + 1]);
      const double p = double(spec_flush(spec_bf16(a[2 * j]))) * spec_flush(spec_bf16(b[2 * j])) +
                       double(spec_flush(spec_bf16(a[2 * j + 1]))) * spec_flush(spec_bf16(b[2 * j + 1]));
      const float one = spec_flush(static_cast<float>(p + double(spec_flush(acc[j]))));
      differ_even_first += bits_of(even) != bits_of(want);
      differ_one_rounding += bits_of(one) != bits_of(want);
    }
  }
  EXPECT_GT(differ_even_first, 0);
  EXPECT_GT(differ_one_rounding, 0);
  std::cout << "  " << lanes << " lanes: vdpbf16ps is the definition; even-first would differ in " << differ_even_first
            << ", one rounding in " << differ_one_rounding << "\n";
#endif
}

TEST(FastBf16, EveryPathMAndThreadCountIsTheDefinition) {
  const long N = 83, Mmax = 40;
  const int saved = num_threads();
  for (WeightType t : k16)
    for (long K : {512L, 66L}) {
      const std::vector<std::uint16_t> w = weights16(t, N, K, 3);
      const WeightMatrix wm = matrix16(t, N, K, w);
      const PackedMatrix<float> pm({&wm});
      const long ldy = pm.n_out_padded();
      const std::uint16_t* panels = pm.panel_as<std::uint16_t>(0);
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        for (long M = 1; M <= Mmax; M += (M < 14 ? 1 : 7)) {
          // fresh activations for every product: nothing left in a buffer by the last one can pass for a result
          const std::vector<float> x = activations16(M, K, static_cast<unsigned>(11 + M + 100 * threads + K));
          const std::vector<float> want = spec_product(x, M, w, t, N, K, ldy);
          for (auto path : {detail::FastPath::kAuto, detail::FastPath::kPortable}) {
            if (path == detail::FastPath::kAuto && !detail::fast_bf16_type(t, K)) continue;
            std::vector<float> y(static_cast<std::size_t>(M * ldy), -1.f);
            detail::matmul_fast_bf16_with(x.data(), K, M, t, panels, pm.n_panels(), K, y.data(), ldy, path);
            for (long m = 0; m < M; ++m) {
              ASSERT_TRUE(kvd_test::same_bits(&y[m * ldy], &want[m * ldy], ldy))
                  << weight_type_name(t) << " K " << K << " M " << M << " row " << m << " threads " << threads
                  << " portable " << (path == detail::FastPath::kPortable) << ": "
                  << kvd_test::first_difference(&y[m * ldy], &want[m * ldy], ldy);
            }
          }
        }
      }
    }
  set_num_threads(saved);
}

// Through kvd::matmul with a PackedMatrix stacking f16, bf16, q4_K and f32 parts:
// in fast mode the 16-bit parts give the definition (where the CPU computes them in
// bf16; elsewhere their default bits), the f32 part its default bits, with and
// without a RowPrologue; off gives the default mode back.
TEST(FastBf16, PackedMatrixFlagSelectsTheModePerSegment) {
  const long K = 256, M = 5;
  const std::vector<std::uint16_t> wh = weights16(WeightType::kF16, 40, K, 1), wb = weights16(WeightType::kBF16, 24, K, 2);
  const WeightMatrix mh = matrix16(WeightType::kF16, 40, K, wh), mb = matrix16(WeightType::kBF16, 24, K, wb);
  const kvd_test::QuantRows wq = kvd_test::make_rows(WeightType::kQ4_K, 16, K, 5);
  const WeightMatrix mq = WeightMatrix::copy_of(WeightType::kQ4_K, 16, K, wq.bytes.data(), wq.bytes.size());
  const RowMatrix<float> dense = RowMatrix<float>::Random(24, K);
  const WeightMatrix mf = WeightMatrix::from_dense(dense);
  PackedMatrix<float> pm({&mh, &mb, &mq, &mf});
  const long ldy = pm.n_out_padded();
  const std::vector<float> x = activations16(M, K, 9);
  std::vector<float> def(static_cast<std::size_t>(M * ldy)), fast(def.size()), fast_pre(def.size());
  matmul(x.data(), K, M, pm, def.data(), ldy);
  pm.set_fast_matmul(true);
  matmul(x.data(), K, M, pm, fast.data(), ldy);
  // the prologue doubles the rows first: the same product as matmul of 2x
  std::vector<float> x2 = x, twice(x.size());
  for (std::size_t i = 0; i < twice.size(); ++i) twice[i] = 2.f * x[i];
  auto double_rows = [&](long r0, long r1) { for (long i = r0 * K; i < r1 * K; ++i) x2[i] = 2.f * x[i]; };
  std::fill(x2.begin(), x2.end(), 0.f);
  matmul(x2.data(), K, M, pm, fast_pre.data(), ldy, row_prologue(double_rows));
  std::vector<float> fast_twice(def.size());
  matmul(twice.data(), K, M, pm, fast_twice.data(), ldy);
  EXPECT_ROW_BITS_EQ(fast_pre.data(), fast_twice.data(), static_cast<long>(def.size()));
  const std::vector<float> want_h = spec_product(x, M, wh, WeightType::kF16, 40, K, 40);
  const std::vector<float> want_b = spec_product(x, M, wb, WeightType::kBF16, 24, K, 24);
  const bool bf16 = detail::fast_bf16_type(WeightType::kF16, K);
  for (long m = 0; m < M; ++m) {
    const float* f = &fast[m * ldy];
    const float* d = &def[m * ldy];
    if (bf16) {
      EXPECT_ROW_BITS_EQ(f + pm.part_col(0), &want_h[m * 40], 40);
      EXPECT_ROW_BITS_EQ(f + pm.part_col(1), &want_b[m * 24], 24);
      EXPECT_FALSE(kvd_test::same_bits(f + pm.part_col(0), d + pm.part_col(0), 40)) << "the fast mode should round to bf16";
    } else {
      EXPECT_ROW_BITS_EQ(f + pm.part_col(0), d + pm.part_col(0), 40);
      EXPECT_ROW_BITS_EQ(f + pm.part_col(1), d + pm.part_col(1), 24);
    }
    EXPECT_FALSE(kvd_test::same_bits(f + pm.part_col(2), d + pm.part_col(2), 16)) << "q4_K: int8 activations";
    EXPECT_ROW_BITS_EQ(f + pm.part_col(3), d + pm.part_col(3), 24);
  }
  pm.set_fast_matmul(false);
  std::vector<float> again(def.size());
  matmul(x.data(), K, M, pm, again.data(), ldy);
  EXPECT_ROW_BITS_EQ(again.data(), def.data(), static_cast<long>(def.size()));
}

// Accuracy against a float64 product of the exact activations and the stored
// weights: bf16 keeps 8 significant bits, so each product carries up to 2^-9
// relative error from x (and from an f16 weight, re-rounded); over 2048 random
// terms that stays well under 1% of the largest output (measured here: printed).
TEST(FastBf16, AccurateAgainstFloat64) {
  const long N = 64, K = 2048, M = 4;
  for (WeightType t : k16) {
    const std::vector<std::uint16_t> w = weights16(t, N, K, 7);
    const WeightMatrix wm = matrix16(t, N, K, w);
    const PackedMatrix<float> pm({&wm});
    const long ldy = pm.n_out_padded();
    const std::vector<float> x = kvd_test::activations(M, K, 13);
    std::vector<float> y(static_cast<std::size_t>(M * ldy));
    detail::matmul_fast_bf16_with(x.data(), K, M, t, pm.panel_as<std::uint16_t>(0), pm.n_panels(), K, y.data(), ldy,
                                  detail::fast_bf16_type(t, K) ? detail::FastPath::kAuto : detail::FastPath::kPortable);
    double worst = 0, largest = 0;
    for (long m = 0; m < M; ++m)
      for (long n = 0; n < N; ++n) {
        double s = 0;
        for (long k = 0; k < K; ++k) {
          const std::uint16_t b = w[n * K + k];
          s += double(x[m * K + k]) * (t == WeightType::kF16 ? detail::half_bits_to_float(b) : spec_bf16(b));
        }
        worst = std::max(worst, std::fabs(s - y[m * ldy + n]));
        largest = std::max(largest, std::fabs(s));
      }
    EXPECT_LT(worst, 0.01 * largest) << weight_type_name(t);
    std::cout << "  " << weight_type_name(t) << ": largest error " << worst / largest << " of the largest output\n";
  }
}

}  // namespace
