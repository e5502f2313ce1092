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

// exp_array's vectors whose lanes are all in range skip the range fix-up: sweep every
// 991st float of [lo, hi) in order, so nearly every vector takes that path.
TEST(Exp, FloatInRangeVectorsEqualScalar) {
  using C = detail::ExpConstants<float>;
  std::vector<float> x;
  for (float v = C::lo; v < C::hi; ) {
    x.push_back(v);
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    u = v < 0 ? (u > 991u + 0x80000000u ? u - 991 : 0u) : u + 991;
    std::memcpy(&v, &u, 4);
  }
  std::vector<float> vec(x.size());
  detail::exp_array(x.data(), vec.data(), static_cast<long>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float s = exp_(x[i]);
    ASSERT_EQ(std::memcmp(&s, &vec[i], 4), 0) << "x=" << x[i];
  }
  EXPECT_GT(x.size(), 2000000u);
}

// Vec16::max is std::max lane by lane: a < b ? b : a, NaNs and signed zeros included.
TEST(Vec16, MaxIsStdMaxLaneByLane) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float a[16] = {1, 2, -0.0f, 0.0f, nan, 3, nan, -inf, inf, -1, 5, 5, 1e-45f, -1e-45f, 7, -7};
  const float b[16] = {2, 1, 0.0f, -0.0f, 3, nan, nan, -1, 0, -inf, 5, -5, 0.0f, 0.0f, -7, 7};
  float got[16];
  detail::Vec16<float>::max(detail::Vec16<float>::load(a), detail::Vec16<float>::load(b)).store(got);
  for (int i = 0; i < 16; ++i) {
    const float want = std::max(a[i], b[i]);
    EXPECT_EQ(std::memcmp(&want, &got[i], 4), 0) << "lane " << i << ": " << a[i] << ", " << b[i];
  }
}

// The softmax's division by its sum: every quotient as IEEE division gives it, including
// the subnormal quotients that fall exactly halfway between two floats, which a
// product by the reciprocal in double cannot round the same way on its own.
TEST(Softmax, DivisionBySumIsCorrectlyRounded) {
  std::mt19937_64 rng(3);
  std::vector<std::pair<float, float>> cases;  // (dividend, divisor)
  std::uniform_real_distribution<float> unit(0, 1), sums(1, 9000);
  for (int i = 0; i < 400000; ++i) cases.push_back({unit(rng), sums(rng)});
  std::uniform_int_distribution<std::uint32_t> bits(0, 0xffffffffu);
  for (int i = 0; i < 400000; ++i) {  // any two floats
    std::uint32_t u = bits(rng), w = bits(rng);
    float e, d;
    std::memcpy(&e, &u, 4);
    std::memcpy(&d, &w, 4);
    cases.push_back({e, d});
  }
  // Exact halfway subnormal quotients, (m * b * 2^(j-149)) / (b * 2^(j+1)) = m * 2^-150 for
  // odd m and b: about 3% of them round the other way in double alone (b = 49, m = 3).
  for (std::uint32_t b = 3; b < 200; b += 2)
    for (std::uint32_t m = 1; m < 400; m += 2)
      for (int j = 0; j < 2; ++j)
        cases.push_back({std::ldexp(static_cast<float>(m * b), j - 149), std::ldexp(static_cast<float>(b), j + 1)});
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float e : {0.0f, -0.0f, 1.0f, inf, -inf, nan, 1e-45f, 3e-39f, 3.4e38f})
    for (float d : {1.0f, 3.0f, -3.0f, 0.0f, -0.0f, inf, nan, 1e-45f, 1e-40f, 3e-38f, 7e37f,
                    8.0f, -0.125f, 0x1p-126f, 0x1p-149f, 0x1p127f})  // powers of two multiply when 1/d is finite
      cases.push_back({e, d});
  for (int i = 0; i < 16; ++i) cases.push_back({std::ldexp(1.0f, -140 + i), 3.0f});  // the FLT_MIN boundary
  for (int i = 0; i < 20000; ++i) {  // the score divisors of head_dim 64 and 256, and their reciprocals
    std::uint32_t u = bits(rng);
    float e;
    std::memcpy(&e, &u, 4);
    cases.push_back({e, std::ldexp(1.0f, (i % 4 < 2 ? 1 : -1) * (3 + i % 2))});
  }
  // Each case's dividend sits in a row of 16 (one vector) beside 15 others of the same
  // divisor, then one more value that the scalar tail divides.
  std::size_t checked = 0;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const float d = cases[c].second;
    float s[17], got[17];
    for (int i = 0; i < 17; ++i) s[i] = cases[(c * 7 + static_cast<std::size_t>(i) * 104729) % cases.size()].first;
    s[c % 17] = cases[c].first;
    std::memcpy(got, s, sizeof s);
    detail::divide_by(got, 17, d);
    for (int i = 0; i < 17; ++i) {
      volatile float num = s[i], den = d;
      const float want = num / den;
      ASSERT_EQ(std::memcmp(&want, &got[i], 4), 0) << s[i] << " / " << d << ": " << got[i] << " instead of " << want;
      ++checked;
    }
  }
  EXPECT_GT(checked, 13000000u);
}
