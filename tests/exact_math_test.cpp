// core/exact_math.hpp: exp, log, pow and sincos without the C library. Their results
// are compared with glibc's over the arguments the model's tables use (the RoPE
// frequencies theta^(-2i/rot) and angles pos * freq, YaRN's logarithms) and over
// random arguments. Where glibc differs, it is glibc that is not correctly rounded:
// a reference (libquadmath's 113 bits where the build has it, else long double) must
// put ours on the correct side of the midpoint, and both must round to the same float
// (what the RoPE table stores). A
// hash of results over a fixed argument set pins the bits on every platform.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

// The build finds libquadmath (tests/CMakeLists.txt); a compiler without __float128
// (aarch64, whose long double is already IEEE quad) falls back to long double.
#if defined(KVDECODE_TEST_QUADMATH) && defined(__SIZEOF_FLOAT128__) && __has_include(<quadmath.h>)
#define KVD_TEST_QUAD 1
#include <quadmath.h>
#endif

#include "kvdecode/core/exact_math.hpp"
#include "kvdecode/model/ops.hpp"

using namespace kvd::detail;

namespace {

const double kThetas[] = {1e4, 5e5, 1e6, 1.5e5, 1e7};
const int kRots[] = {64, 80, 96, 128, 256};

std::uint64_t bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// The reference: libquadmath's 113 bits decide all but the closest cases; long
// double's 64 bits (x86) leave undecided those within 2^-8 ulp of the midpoint.
#if defined(KVD_TEST_QUAD)
using Ref = __float128;
Ref ref_sin(double x) { return sinq(x); }
Ref ref_cos(double x) { return cosq(x); }
Ref ref_log(double x) { return logq(x); }
Ref ref_exp(double x) { return expq(x); }
Ref ref_pow(double x, double y) { return powq(x, y); }
constexpr bool kHaveRef = true;
const Ref kRefMargin = static_cast<Ref>(0x1p-40);
#else
using Ref = long double;
Ref ref_sin(double x) { return ref_sin(x); }
Ref ref_cos(double x) { return ref_cos(x); }
Ref ref_log(double x) { return ref_log(x); }
Ref ref_exp(double x) { return ref_exp(x); }
Ref ref_pow(double x, double y) { return ref_pow(x, y); }
constexpr bool kHaveRef = LDBL_MANT_DIG >= 64;
const Ref kRefMargin = 0x1p-8L;
#endif
Ref ref_abs(Ref v) { return v < 0 ? -v : v; }

/// Tallies our results against glibc's and, where they differ, against the
/// reference: `wrong` counts differences where the reference decides against us.
struct Tally {
  long n = 0, differ = 0, undecided = 0, wrong = 0, float_differ = 0;
  /// `reference()` gives the reference value (called only where ours and glibc's differ).
  template <class Reference>
  void add(double ours, double libc, Reference reference, const char* what, double arg) {
    ++n;
    if (bits(ours) == bits(libc)) return;
    ++differ;
    const Ref ref = reference();
    if (static_cast<float>(ours) != static_cast<float>(libc)) {
      ++float_differ;
      ADD_FAILURE() << what << "(" << std::hexfloat << arg << "): ours " << ours << ", glibc " << libc
                    << " round to different floats";
    }
    // ours and glibc's are neighbours; the midpoint decides, unless the reference is
    // too close to it to tell.
    const Ref mid = (static_cast<Ref>(ours) + static_cast<Ref>(libc)) / 2;
    const Ref ulp = ref_abs(static_cast<Ref>(ours) - static_cast<Ref>(libc));
    if (!kHaveRef || ref_abs(ref - mid) < ulp * kRefMargin) {
      ++undecided;
    } else if (ref_abs(ref - static_cast<Ref>(ours)) > ref_abs(ref - static_cast<Ref>(libc))) {
      ++wrong;
      ADD_FAILURE() << what << "(" << std::hexfloat << arg << "): ours " << ours << ", glibc " << libc
                    << ", reference " << static_cast<double>(ref) << " (glibc is the correctly rounded one)";
    }
  }
  void report(const char* what) const {
    std::printf("%s: %ld arguments, %ld differ from glibc (ours correctly rounded: %ld, undecided: %ld)\n", what, n,
                differ, differ - wrong - undecided, undecided);
    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(float_differ, 0);
  }
};

std::vector<double> rope_frequencies() {
  std::vector<double> f;
  for (double theta : kThetas)
    for (int rot : kRots)
      for (int i = 0; i < rot / 2; ++i) f.push_back(exact_pow(theta, -2.0 * i / rot));
  return f;
}

#if defined(__GLIBC__)

TEST(ExactMath, PowEqualsGlibcOnRopeFrequencies) {
  Tally t;
  for (double theta : kThetas)
    for (int rot : kRots)
      for (int i = 0; i < rot / 2; ++i) {
        const double y = -2.0 * i / rot;
        t.add(exact_pow(theta, y), std::pow(theta, y), [&] { return ref_pow(theta, y); },
              "pow", y);
        // and llama2.c's form, 1 / theta^(2i/rot)
        t.add(exact_pow(theta, -y), std::pow(theta, -y), [&] { return ref_pow(theta, -y); },
              "pow", -y);
      }
  t.report("pow(theta, -+2i/rot)");
}

TEST(ExactMath, PowRandom) {
  Tally t;
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> lx(-40, 40), uy(-4, 4);
  for (int k = 0; k < 300000; ++k) {
    const double x = std::exp2(lx(g));
    const double y = uy(g);
    t.add(exact_pow(x, y), std::pow(x, y), [&] { return ref_pow(x, y); }, "pow", x);
  }
  t.report("pow random");
}

TEST(ExactMath, SinCosEqualsGlibcOnRopeAngles) {
  Tally ts, tc;
  const std::vector<double> freqs = rope_frequencies();
  std::mt19937_64 g(5);
  for (double f : freqs) {
    // every position below 2^12, then a sample up to 2^20
    for (int pos = 0; pos < (1 << 20); pos += pos < (1 << 12) ? 1 : 1 + static_cast<int>(g() % 2048)) {
      const double x = pos * f;
      double s, c;
      exact_sincos(x, &s, &c);
      ts.add(s, std::sin(x), [&] { return ref_sin(x); }, "sin", x);
      tc.add(c, std::cos(x), [&] { return ref_cos(x); }, "cos", x);
    }
  }
  ts.report("sin(pos * freq)");
  tc.report("cos(pos * freq)");
  EXPECT_GT(ts.n, 2000000);
}

TEST(ExactMath, SinCosRandomAndNearMultiplesOfPi) {
  Tally ts, tc;
  std::mt19937_64 g(3);
  std::uniform_real_distribution<double> u(-30, 22);
  for (int k = 0; k < 500000; ++k) {
    const double e = u(g);
    const double x = (g() & 1) ? std::exp2(e) : -std::exp2(e);
    double s, c;
    exact_sincos(x, &s, &c);
    ts.add(s, std::sin(x), [&] { return ref_sin(x); }, "sin", x);
    tc.add(c, std::cos(x), [&] { return ref_cos(x); }, "cos", x);
  }
  // the doubles nearest to multiples of pi/2 and pi/256: the reduction's hard cases
  const long double kPiL = 3.141592653589793238462643383279502884L;
  for (int k = 1; k < 200000; ++k) {
    const std::int64_t m = static_cast<std::int64_t>(g() % (std::int64_t(1) << 30)) + 1;
    const double x = k < 100000 ? static_cast<double>(k * (kPiL / 2)) : static_cast<double>(m * (kPiL / 256));
    double s, c;
    exact_sincos(x, &s, &c);
    ts.add(s, std::sin(x), [&] { return ref_sin(x); }, "sin", x);
    tc.add(c, std::cos(x), [&] { return ref_cos(x); }, "cos", x);
  }
  ts.report("sin random");
  tc.report("cos random");
}

TEST(ExactMath, LogEqualsGlibcOnYarnArguments) {
  Tally t;
  const double kPi = 3.14159265358979323846;
  for (int orig : {2048, 4096, 8192, 16384, 32768, 65536, 131072})
    for (double b : {32.0, 1.0, 16.0, 0.5, 4.0, 2.0, 64.0}) {
      const double a = orig / (b * 2 * kPi);
      t.add(exact_log(a), std::log(a), [&] { return ref_log(a); }, "log", a);
    }
  for (double theta : kThetas) t.add(exact_log(theta), std::log(theta), [&] { return ref_log(theta); }, "log", theta);
  for (int i = 1; i <= 4096; ++i) {  // scaling factors
    const double s = i / 64.0;
    t.add(exact_log(s), std::log(s), [&] { return ref_log(s); }, "log", s);
  }
  std::mt19937_64 g(9);
  std::uniform_real_distribution<double> u(-1074, 1024);
  for (int k = 0; k < 1000000; ++k) {
    const double x = std::exp2(u(g));
    if (x == 0 || std::isinf(x)) continue;
    t.add(exact_log(x), std::log(x), [&] { return ref_log(x); }, "log", x);
  }
  t.report("log");
}

TEST(ExactMath, ExpRandom) {
  Tally t;
  std::mt19937_64 g(13);
  std::uniform_real_distribution<double> u(-708, 709), v(-1, 1);
  for (int k = 0; k < 1000000; ++k) {
    const double x = (k & 1) ? u(g) : v(g);
    t.add(exact_exp(x), std::exp(x), [&] { return ref_exp(x); }, "exp", x);
  }
  t.report("exp");
}

/// The RoPE table (float) is the one glibc's double functions give, entry for entry.
TEST(ExactMath, RopeTableEqualsGlibcTable) {
  for (double theta : {1e4, 5e5}) {
    const int rot = 64, len = 1 << 13;
    kvd::RoPE<float> rope(rot, len, theta, kvd::RopeStyle::kAdjacent);
    std::vector<float> x(rot);
    for (int pos = 0; pos < len; ++pos) {
      for (int i = 0; i < rot; ++i) x[i] = i % 2 == 0 ? 1.0f : 0.0f;
      rope.apply(x.data(), 1, pos);  // pair i becomes (cos, sin)
      for (int i = 0; i < rot / 2; ++i) {
        const double angle = pos * std::pow(theta, -2.0 * i / rot);
        ASSERT_EQ(x[2 * i], static_cast<float>(std::cos(angle))) << theta << " " << pos << " " << i;
        ASSERT_EQ(x[2 * i + 1], static_cast<float>(std::sin(angle))) << theta << " " << pos << " " << i;
      }
    }
  }
}

#endif  // __GLIBC__

TEST(ExactMath, SpecialValues) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  double s, c;
  exact_sincos(0.0, &s, &c);
  EXPECT_EQ(bits(s), bits(0.0));
  EXPECT_EQ(c, 1.0);
  exact_sincos(-0.0, &s, &c);
  EXPECT_EQ(bits(s), bits(-0.0));
  EXPECT_EQ(c, 1.0);
  for (double tiny : {1e-300, 4.9e-324, 0x1p-28, -0x1.fffffffffffffp-28}) {
    exact_sincos(tiny, &s, &c);
    EXPECT_EQ(s, tiny);
    EXPECT_EQ(c, 1.0);
  }
  exact_sincos(kSinCosMaxArg, &s, &c);
  EXPECT_TRUE(std::isfinite(s) && std::isfinite(c));
  EXPECT_LE(std::fabs(s * s + c * c - 1), 1e-15);
  for (double bad : {std::nextafter(kSinCosMaxArg, inf), -2 * kSinCosMaxArg, inf, -inf, nan}) {
    exact_sincos(bad, &s, &c);
    EXPECT_TRUE(std::isnan(s) && std::isnan(c)) << bad;
  }
  EXPECT_EQ(bits(exact_log(1.0)), bits(0.0));
  EXPECT_EQ(exact_log(0.0), -inf);
  EXPECT_TRUE(std::isnan(exact_log(-1.0)));
  EXPECT_TRUE(std::isnan(exact_log(nan)));
  EXPECT_EQ(exact_log(inf), inf);
  EXPECT_EQ(exact_log(2.0), 0x1.62e42fefa39efp-1);
  EXPECT_EQ(exact_exp(0.0), 1.0);
  EXPECT_EQ(exact_exp(710.0), inf);
  EXPECT_EQ(exact_exp(inf), inf);
  EXPECT_EQ(exact_exp(-750.0), 0.0);
  EXPECT_EQ(exact_exp(-inf), 0.0);
  EXPECT_TRUE(std::isnan(exact_exp(nan)));
  EXPECT_EQ(exact_pow(5e5, 0.0), 1.0);
  EXPECT_EQ(exact_pow(1.0, 123.5), 1.0);
  EXPECT_EQ(exact_pow(4.0, 0.5), 2.0);
  EXPECT_EQ(exact_pow(4.0, -0.5), 0.5);
  EXPECT_EQ(exact_pow(2.0, 10.0), 1024.0);
  EXPECT_EQ(exact_pow(1e4, 0.5), 100.0);
  EXPECT_EQ(exact_pow(2.0, -1074.0), 4.9406564584124654e-324);
  EXPECT_EQ(exact_pow(2.0, 1024.0), inf);
  EXPECT_TRUE(std::isnan(exact_pow(0.0, 1.0)));
  EXPECT_TRUE(std::isnan(exact_pow(-2.0, 2.0)));
  EXPECT_TRUE(std::isnan(exact_pow(2.0, inf)));
#if defined(__GLIBC__)
  for (double x : {4.9e-324, 2.2250738585072014e-308, 1.7976931348623157e308}) EXPECT_EQ(exact_log(x), std::log(x)) << x;
  for (double x : {709.78, -708.39, 1e-10, -1e-10}) EXPECT_EQ(exact_exp(x), std::exp(x)) << x;
#endif
}

/// RoPE's angles must stay within exact_sincos's range: frequency factors that push
/// (max_seq_len - 1) * freq past 2^40 are a ConfigError naming the pair.
TEST(ExactMath, RopeRejectsAnglesBeyondSinCosRange) {
  kvd::Vector<float> factors(32);
  factors.setConstant(1e-13f);  // freq of pair 0 = 1e13 > 2^40
  EXPECT_THROW(kvd::RoPE<float>(64, 2, 1e4, kvd::RopeStyle::kAdjacent, 0, factors), kvd::ConfigError);
  factors.setConstant(1.0f);
  EXPECT_NO_THROW(kvd::RoPE<float>(64, 2, 1e4, kvd::RopeStyle::kAdjacent, 0, factors));
}

/// Same bits on every platform and compiler: a hash over fixed arguments (generated
/// from integers, so that the arguments themselves are the same everywhere).
TEST(ExactMath, PinnedBits) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](double d) { h = (h ^ bits(d)) * 1099511628211ull; };
  for (double f : rope_frequencies()) {
    mix(f);
    for (int pos = 1; pos < (1 << 20); pos += 4093) {
      double s, c;
      exact_sincos(pos * f, &s, &c);
      mix(s);
      mix(c);
    }
  }
  std::mt19937_64 g(1);
  for (int k = 0; k < 20000; ++k) {
    const std::uint64_t m = g() >> 12;
    const int e = static_cast<int>(g() % 64) - 32;
    const double x = std::ldexp(static_cast<double>(m | (std::uint64_t(1) << 52)), e - 52);  // in [2^e, 2^(e+1))
    mix(exact_log(x));
    mix(exact_exp(std::ldexp(x, -27)));
    mix(exact_pow(x, std::ldexp(x, -30)));
  }
  EXPECT_EQ(h, 0x8c48cb996d35e4f6ull) << std::hex << h;
}

}  // namespace
