// Element-wise and per-row operations against simple references: the one exp
// (accuracy against std::exp, and bit-identity of its scalar and vector forms),
// SiLU, RMSNorm and RoPE against double-precision textbook formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "test_util.hpp"

using namespace kvd;

namespace {

template <class T>
std::vector<T> exp_inputs() {
  using C = detail::ExpConstants<T>;
  std::vector<T> v = {T(0), T(-0.0), T(1), T(-1), T(0.5), C::hi, std::nextafter(C::hi, T(0)), C::lo,
                      std::nextafter(C::lo, T(0)), std::nextafter(C::lo, T(-1000)), T(-87.5), T(-100), T(-120),
                      std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                      std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::denorm_min(), T(1e-30)};
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> wide(static_cast<double>(C::lo) - 5, static_cast<double>(C::hi) + 5), narrow(-10, 10);
  for (int i = 0; i < 20000; ++i) v.push_back(static_cast<T>(i % 2 ? wide(rng) : narrow(rng)));
  return v;
}

template <class T>
void check_exp() {
  const auto x = exp_inputs<T>();
  std::vector<T> vec(x.size());
  detail::exp_array(x.data(), vec.data(), static_cast<long>(x.size()));
  double worst_ulps = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T s = exp_(x[i]);
    ASSERT_EQ(std::memcmp(&s, &vec[i], sizeof(T)), 0) << "scalar and vector forms differ at x=" << x[i];
    const T want = static_cast<T>(std::exp(static_cast<long double>(x[i])));
    if (std::isnan(want)) { EXPECT_TRUE(std::isnan(s)); continue; }
    if (std::isinf(want) || want == 0) { EXPECT_EQ(s, want) << x[i]; continue; }
    const T ulp = std::nextafter(want, std::numeric_limits<T>::infinity()) - want;
    worst_ulps = std::max(worst_ulps, std::abs(static_cast<double>(s - want)) / static_cast<double>(ulp));
  }
  EXPECT_LE(worst_ulps, 2.0);
}

}  // namespace

TEST(Exp, FloatScalarEqualsVectorAndWithin2Ulp) { check_exp<float>(); }
TEST(Exp, DoubleScalarEqualsVectorAndWithin2Ulp) { check_exp<double>(); }

TEST(Exp, SwigluArrayEqualsScalarSilu) {
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0, 4);
  std::vector<float> g(1001), u(1001), out(1001), scratch(1001);
  for (auto& x : g) x = d(rng);
  for (auto& x : u) x = d(rng);
  g[0] = -200.f;  // exp(200) overflows: silu -> -0
  g[1] = 200.f;
  swiglu_array(g.data(), u.data(), out.data(), scratch.data(), 1001);
  for (int i = 0; i < 1001; ++i) {
    const float want = silu(g[i]) * u[i];
    ASSERT_EQ(std::memcmp(&want, &out[i], 4), 0) << i;
    EXPECT_NEAR(out[i], g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i], 1e-5 * (1 + std::abs(out[i])));
  }
}

TEST(RMSNorm, MatchesDoubleFormula) {
  std::mt19937 rng(3);
  std::normal_distribution<double> d(0, 2);
  const int n = 37;
  Vector<float> w(n);
  std::vector<float> x(n), out(n);
  for (int i = 0; i < n; ++i) { w[i] = static_cast<float>(d(rng)); x[i] = static_cast<float>(d(rng)); }
  RMSNorm<float> norm(w, 1e-5);
  norm.apply(x.data(), n, 1, out.data(), n);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(out[i], w[i] * x[i] * scale, 1e-5 * (1 + std::abs(out[i])));
}

TEST(RoPE, RotatesConsecutivePairsLikeLlama2c) {
  const int head_dim = 10, heads = 3;
  RoPE<double> rope(head_dim, 64, 10000.0);
  std::vector<double> x(head_dim * heads), y;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1 * static_cast<double>(i) - 1;
  for (int pos : {0, 1, 17, 63}) {
    y = x;
    rope.apply(y.data(), heads, pos);
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < head_dim / 2; ++i) {
        const double a = pos * std::pow(10000.0, -2.0 * i / head_dim);
        const double x0 = x[h * head_dim + 2 * i], x1 = x[h * head_dim + 2 * i + 1];
        EXPECT_NEAR(y[h * head_dim + 2 * i], x0 * std::cos(a) - x1 * std::sin(a), 1e-12);
        EXPECT_NEAR(y[h * head_dim + 2 * i + 1], x0 * std::sin(a) + x1 * std::cos(a), 1e-12);
      }
  }
}
