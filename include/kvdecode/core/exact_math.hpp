// exp, log, pow and sincos in double that do not depend on the C library: the
// numbers the model's tables are built from (the RoPE frequencies theta^(-2i/rot),
// their cos and sin at every position, YaRN's logarithms, Llama 3's frequency
// factors). glibc's functions are almost always correctly rounded; macOS's and
// MSVC's need not give the same last bit, and one table entry rounding to another
// float changes every logit. These functions compute in double-double arithmetic
// (a value is hi + lo, about 106 bits) from + - * / and fma only, which IEEE 754
// rounds exactly on every machine, so their results are the same bits everywhere;
// and since the double-double value is accurate to about 2^-100 relative, its
// rounding to double is the correctly rounded result except for arguments whose
// true value lies within that distance of a rounding boundary, which for these
// functions are astronomically rare. glibc's results agree except where glibc is the
// one not correctly rounded (about 0.1% of RoPE's sines and cosines, one ulp, never a
// different float; tests/exact_math_test.cpp).
//
// The constants are the values rounded to double, hi = RN(v), lo = RN(v - hi) (and
// further pieces the same way), computed with mpmath at 400 bits.
//
// Contraction: GCC may fuse a product into a later addition across statements
// (-ffp-contract=fast, its default for GNU C++) unless the product has a use other
// than an addition. Every product here is either an explicit fma or the first half
// of two_prod, whose other use is an fma argument; so the bits do not depend on
// -ffp-contract. -ffast-math is refused elsewhere (core/simd.hpp) and would break
// double-double arithmetic.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace kvd {
namespace detail {

/// A double-double value hi + lo with |lo| <= ulp(hi) / 2 (hi = RN(hi + lo)).
struct DD {
  double hi = 0, lo = 0;
};

/// a + b = s + e exactly (Knuth's TwoSum; any magnitudes).
inline DD two_sum(double a, double b) {
  const double s = a + b;
  const double bb = s - a;
  const double e = (a - (s - bb)) + (b - bb);
  return {s, e};
}

/// a + b = s + e exactly when |a| >= |b| (or a is 0).
inline DD fast_two_sum(double a, double b) {
  const double s = a + b;
  return {s, b - (s - a)};
}

/// a * b = p + e exactly (barring underflow), with the fma.
inline DD two_prod(double a, double b) {
  const double p = a * b;
  return {p, std::fma(a, b, -p)};
}

inline DD dd_add(const DD& a, const DD& b) {
  DD s = two_sum(a.hi, b.hi);
  const DD t = two_sum(a.lo, b.lo);
  s = fast_two_sum(s.hi, s.lo + t.hi);
  return fast_two_sum(s.hi, s.lo + t.lo);
}

inline DD dd_add(const DD& a, double b) {
  const DD s = two_sum(a.hi, b);
  return fast_two_sum(s.hi, s.lo + a.lo);
}

/// a + b when |a| >= |b| and they do not nearly cancel (a series' next term).
inline DD dd_add_big(const DD& a, const DD& b) {
  const DD s = fast_two_sum(a.hi, b.hi);
  return fast_two_sum(s.hi, s.lo + (a.lo + b.lo));
}

/// a + b when |a| >= |b| and they do not nearly cancel, b a double.
inline DD dd_add_big(const DD& a, double b) {
  const DD s = fast_two_sum(a.hi, b);
  return fast_two_sum(s.hi, s.lo + a.lo);
}

inline DD dd_mul(const DD& a, const DD& b) {
  const DD p = two_prod(a.hi, b.hi);
  return fast_two_sum(p.hi, std::fma(a.hi, b.lo, std::fma(a.lo, b.hi, p.lo)));
}

inline DD dd_mul(const DD& a, double b) {
  const DD p = two_prod(a.hi, b);
  return fast_two_sum(p.hi, std::fma(a.lo, b, p.lo));
}

/// a / b for a double a and a double-double b.
inline DD dd_div(double a, const DD& b) {
  const double q1 = a / b.hi;
  const DD p = two_prod(q1, b.hi);
  const double r = std::fma(-q1, b.lo, (a - p.hi) - p.lo);  // a - q1 * b, a - p.hi exact (Sterbenz)
  return fast_two_sum(q1, r / b.hi);
}

// ln 2 in three pieces, and 1 / ln 2 rounded.
constexpr double kLn2[3] = {0x1.62e42fefa39efp-1, 0x1.abc9e3b39803fp-56, 0x1.7b57a079a1934p-111};
constexpr double kInvLn2 = 0x1.71547652b82fep+0;

// 1 / n! for n = 0..26.
constexpr DD kExpCoef[27] = {
    {0x1.0000000000000p+0, 0x0.0p+0},  {0x1.0000000000000p+0, 0x0.0p+0},
    {0x1.0000000000000p-1, 0x0.0p+0},  {0x1.5555555555555p-3, 0x1.5555555555555p-57},
    {0x1.5555555555555p-5, 0x1.5555555555555p-59},  {0x1.1111111111111p-7, 0x1.1111111111111p-63},
    {0x1.6c16c16c16c17p-10, -0x1.f49f49f49f49fp-65},  {0x1.a01a01a01a01ap-13, 0x1.a01a01a01a01ap-73},
    {0x1.a01a01a01a01ap-16, 0x1.a01a01a01a01ap-76},  {0x1.71de3a556c734p-19, -0x1.c154f8ddc6c00p-73},
    {0x1.27e4fb7789f5cp-22, 0x1.cbbc05b4fa99ap-76},  {0x1.ae64567f544e4p-26, -0x1.c062e06d1f209p-80},
    {0x1.1eed8eff8d898p-29, -0x1.2aec959e14c06p-83},  {0x1.6124613a86d09p-33, 0x1.f28e0cc748ebep-87},
    {0x1.93974a8c07c9dp-37, 0x1.05d6f8a2efd1fp-92},  {0x1.ae7f3e733b81fp-41, 0x1.1d8656b0ee8cbp-97},
    {0x1.ae7f3e733b81fp-45, 0x1.1d8656b0ee8cbp-101},  {0x1.952c77030ad4ap-49, 0x1.ac981465ddc6cp-103},
    {0x1.6827863b97d97p-53, 0x1.eec01221a8b0bp-107},  {0x1.2f49b46814157p-57, 0x1.2650f61dbdcb4p-112},
    {0x1.e542ba4020225p-62, 0x1.ea72b4afe3c2fp-120},  {0x1.71b8ef6dcf572p-66, -0x1.d043ae40c4647p-120},
    {0x1.0ce396db7f853p-70, -0x1.aebcdbd20331cp-124},  {0x1.761b41316381ap-75, -0x1.3423c7d91404fp-130},
    {0x1.f2cf01972f578p-80, -0x1.9ada5fcc1ab14p-135},  {0x1.3f3ccdd165fa9p-84, -0x1.58ddadf344487p-139},
    {0x1.88e85fc6a4e5ap-89, -0x1.71c37ebd16540p-143},
};

// 1 / (2j + 1) for j = 1..23.
constexpr DD kLogCoef[23] = {
    {0x1.5555555555555p-2, 0x1.5555555555555p-56},  {0x1.999999999999ap-3, -0x1.999999999999ap-57},
    {0x1.2492492492492p-3, 0x1.2492492492492p-57},  {0x1.c71c71c71c71cp-4, 0x1.c71c71c71c71cp-58},
    {0x1.745d1745d1746p-4, -0x1.745d1745d1746p-59},  {0x1.3b13b13b13b14p-4, -0x1.3b13b13b13b14p-58},
    {0x1.1111111111111p-4, 0x1.1111111111111p-60},  {0x1.e1e1e1e1e1e1ep-5, 0x1.e1e1e1e1e1e1ep-61},
    {0x1.af286bca1af28p-5, 0x1.af286bca1af28p-59},  {0x1.8618618618618p-5, 0x1.8618618618618p-59},
    {0x1.642c8590b2164p-5, 0x1.642c8590b2164p-60},  {0x1.47ae147ae147bp-5, -0x1.eb851eb851eb8p-61},
    {0x1.2f684bda12f68p-5, 0x1.2f684bda12f68p-59},  {0x1.1a7b9611a7b96p-5, 0x1.1a7b9611a7b96p-61},
    {0x1.0842108421084p-5, 0x1.0842108421084p-60},  {0x1.f07c1f07c1f08p-6, -0x1.f07c1f07c1f08p-61},
    {0x1.d41d41d41d41dp-6, 0x1.0750750750750p-60},  {0x1.bacf914c1bad0p-6, -0x1.bacf914c1bad0p-60},
    {0x1.a41a41a41a41ap-6, 0x1.0690690690690p-60},  {0x1.8f9c18f9c18fap-6, -0x1.f3831f3831f38p-61},
    {0x1.7d05f417d05f4p-6, 0x1.7d05f417d05f4p-62},  {0x1.6c16c16c16c17p-6, -0x1.f49f49f49f49fp-61},
    {0x1.5c9882b931057p-6, 0x1.310572620ae4cp-61},
};

/// e^(y.hi + y.lo), about 2^-100 relative for results in the normal range. Results
/// below 2^-1022 are rounded twice (the double-double, then to the subnormal), so
/// they may be one subnormal step off; beyond the range: +inf or 0.
inline DD exp_dd(const DD& y) {
  if (std::isnan(y.hi)) return {y.hi, 0};
  if (y.hi > 710) return {std::numeric_limits<double>::infinity(), 0};
  if (y.hi < -746) return {0, 0};
  // y = k ln2 + r, |r| <= ln2 / 2 (a little more from k's rounding): r = y - k ln2 with
  // k ln2's pieces exact products, y.hi - k ln2[0] exact (Sterbenz, k != 0).
  const double k = std::nearbyint(y.hi * kInvLn2);
  const DD p0 = two_prod(k, kLn2[0]);
  DD r = two_sum(y.hi, -p0.hi);
  r = dd_add(r, y.lo - p0.lo);
  r = dd_add(r, dd_mul(DD{kLn2[1], kLn2[2]}, -k));
  // Taylor series: terms from 1/14! on are below 2^-57 relative, so in double.
  double t = kExpCoef[26].hi;
  for (int n = 25; n >= 14; --n) t = std::fma(t, r.hi, kExpCoef[n].hi);
  DD p{t, 0};
  for (int n = 13; n >= 0; --n) p = dd_add(kExpCoef[n], dd_mul(p, r));
  const int e = static_cast<int>(k);
  return {std::ldexp(p.hi, e), std::ldexp(p.lo, e)};
}

/// ln x for finite x > 0 (subnormal too), about 2^-104 relative, near x = 1 as well
/// (the series works on m - 1, exact).
inline DD log_dd(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1): exact
  if (m < 0x1.6a09e667f3bcdp-1) {  // sqrt(1/2): m in [sqrt(1/2), sqrt(2))
    m *= 2;
    --e;
  }
  // ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1) / (m + 1), |s| <= 0.172;
  // m - 1 is exact (Sterbenz), m + 1 a double-double.
  const DD s = dd_div(m - 1, two_sum(m, 1.0));
  const DD z = dd_mul(s, s);
  // Terms from s^20/21 on are below 2^-55 relative: in double.
  double t = kLogCoef[22].hi;
  for (int j = 21; j >= 9; --j) t = std::fma(t, z.hi, kLogCoef[j].hi);
  DD p{t, 0};
  for (int j = 8; j >= 0; --j) p = dd_add(kLogCoef[j], dd_mul(p, z));
  const DD lm = dd_mul(dd_add(s, dd_mul(dd_mul(s, z), p)), 2.0);
  if (e == 0) return lm;
  // e ln 2 + ln m; |ln m| <= ln2 / 2, so no cancellation.
  const double de = e;
  const DD p0 = two_prod(de, kLn2[0]);
  DD r = dd_add(p0, dd_mul(DD{kLn2[1], kLn2[2]}, de));
  return dd_add(r, lm);
}

/// e^x, correctly rounded except in astronomically rare cases (and subnormal
/// results, see exp_dd); NaN gives NaN, overflow +inf.
inline double exact_exp(double x) { return exp_dd(DD{x, 0}).hi; }

/// ln x, correctly rounded except in astronomically rare cases; ln 0 = -inf, ln of a
/// negative value or NaN is NaN, ln +inf = +inf.
inline double exact_log(double x) {
  if (std::isnan(x) || x < 0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return -std::numeric_limits<double>::infinity();
  if (std::isinf(x)) return x;
  return log_dd(x).hi;
}

/// x^y for x > 0 and finite y, correctly rounded except in astronomically rare cases
/// (an exact result halfway between two doubles, like (2^27 - 1)^2, may round either
/// way; subnormal results, see exp_dd). x <= 0, infinities or NaN give NaN (not C's
/// pow special cases, which the model never needs); x^0 = 1^y = 1.
inline double exact_pow(double x, double y) {
  if (!(x > 0) || !std::isfinite(x) || !std::isfinite(y)) return std::numeric_limits<double>::quiet_NaN();
  if (y == 0 || x == 1) return 1.0;
  const DD l = log_dd(x);
  const DD p = two_prod(y, l.hi);
  return exp_dd(fast_two_sum(p.hi, std::fma(y, l.lo, p.lo))).hi;
}

// pi/256 in three pieces, and 256/pi rounded.
constexpr double kPi256[3] = {0x1.921fb54442d18p-7, 0x1.1a62633145c07p-61, -0x1.f1976b7ed8fbcp-117};
constexpr double kInvPi256 = 0x1.45f306dc9c883p+6;

// sin(j pi/256) for j = 0..128 (cos(j pi/256) = sin((128 - j) pi/256)).
constexpr DD kSinPi256[129] = {
    {0x0.0p+0, 0x0.0p+0}, {0x1.921d1fcdec784p-7, 0x1.9878ebe836d9dp-61},
    {0x1.92155f7a3667ep-6, -0x1.b1d63091a0130p-64}, {0x1.2d865759455cdp-5, 0x1.686f65ba93ac0p-61},
    {0x1.91f65f10dd814p-5, -0x1.912bd0d569a90p-61}, {0x1.f656e79f820e0p-5, -0x1.2e1ebe392bffep-61},
    {0x1.2d52092ce19f6p-4, -0x1.9a088a8bf6b2cp-59}, {0x1.5f6d00a9aa419p-4, -0x1.f4022d03f6c9ap-59},
    {0x1.917a6bc29b42cp-4, -0x1.e2718d26ed688p-60}, {0x1.c3785c79ec2d5p-4, -0x1.4f39df133fb21p-61},
    {0x1.f564e56a9730ep-4, 0x1.a2704729ae56dp-59}, {0x1.139f0cedaf577p-3, -0x1.523434d1b3cfap-57},
    {0x1.2c8106e8e613ap-3, 0x1.13000a89a11e0p-58}, {0x1.45576b1293e5ap-3, -0x1.285a24119f7b1p-58},
    {0x1.5e214448b3fc6p-3, 0x1.531ff779ddac6p-57}, {0x1.76dd9de50bf31p-3, 0x1.1d5eeec501b2fp-57},
    {0x1.8f8b83c69a60bp-3, -0x1.26d19b9ff8d82p-57}, {0x1.a82a025b00451p-3, -0x1.87905ffd084adp-57},
    {0x1.c0b826a7e4f63p-3, -0x1.af1439e521935p-62}, {0x1.d934fe5454311p-3, 0x1.75b92277107adp-57},
    {0x1.f19f97b215f1bp-3, -0x1.42deef11da2c4p-57}, {0x1.04fb80e37fdaep-2, -0x1.412cdb72583ccp-63},
    {0x1.111d262b1f677p-2, 0x1.824c20ab7aa9ap-56}, {0x1.1d3443f4cdb3ep-2, -0x1.720d41c13519ep-57},
    {0x1.294062ed59f06p-2, -0x1.5d28da2c4612dp-56}, {0x1.35410c2e18152p-2, -0x1.3cb002f96e062p-56},
    {0x1.4135c94176601p-2, 0x1.0c97c4afa2518p-56}, {0x1.4d1e24278e76ap-2, 0x1.2417218792858p-57},
    {0x1.58f9a75ab1fddp-2, -0x1.efdc0d58cf620p-62}, {0x1.64c7ddd3f27c6p-2, 0x1.10d2b4a664121p-58},
    {0x1.7088530fa459fp-2, -0x1.44b19e0864c5dp-56}, {0x1.7c3a9311dcce7p-2, 0x1.9a3f21ef3e8d9p-62},
    {0x1.87de2a6aea963p-2, -0x1.72cedd3d5a610p-57}, {0x1.9372a63bc93d7p-2, 0x1.684319e5ad5b1p-57},
    {0x1.9ef7943a8ed8ap-2, 0x1.6da81290bdbabp-57}, {0x1.aa6c82b6d3fcap-2, -0x1.d5f106ee5ccf7p-56},
    {0x1.b5d1009e15cc0p-2, 0x1.5b362cb974183p-57}, {0x1.c1249d8011ee7p-2, -0x1.813aabb515206p-56},
    {0x1.cc66e9931c45ep-2, 0x1.6850e59c37f8fp-58}, {0x1.d79775b86e389p-2, 0x1.550ec87bc0575p-56},
    {0x1.e2b5d3806f63bp-2, 0x1.e0d891d3c6841p-58}, {0x1.edc1952ef78d6p-2, -0x1.dd0f7c33edee6p-56},
    {0x1.f8ba4dbf89abap-2, -0x1.2ec1fc1b776b8p-60}, {0x1.01cfc874c3eb7p-1, -0x1.34a35e7c2368cp-56},
    {0x1.073879922ffeep-1, -0x1.a5a014347406cp-55}, {0x1.0c9704d5d898fp-1, -0x1.8d3d7de6ee9b2p-55},
    {0x1.11eb3541b4b23p-1, -0x1.ef23b69abe4f1p-55}, {0x1.1734d63dedb49p-1, -0x1.7eef2ccc50575p-55},
    {0x1.1c73b39ae68c8p-1, 0x1.b25dd267f6600p-55}, {0x1.21a799933eb59p-1, -0x1.3a7b177c68fb2p-55},
    {0x1.26d054cdd12dfp-1, -0x1.5da743ef3770cp-55}, {0x1.2bedb25faf3eap-1, -0x1.14981c796ee46p-58},
    {0x1.30ff7fce17035p-1, -0x1.efcc626f74a6fp-57}, {0x1.36058b10659f3p-1, -0x1.1fcb3a35857e7p-55},
    {0x1.3affa292050b9p-1, 0x1.e3e25e3954964p-56}, {0x1.3fed9534556d4p-1, 0x1.36916608c5061p-55},
    {0x1.44cf325091dd6p-1, 0x1.8076a2cfdc6b3p-57}, {0x1.49a449b9b0939p-1, -0x1.27ee16d719b94p-55},
    {0x1.4e6cabbe3e5e9p-1, 0x1.3c293edceb327p-57}, {0x1.5328292a35596p-1, -0x1.a12eb89da0257p-56},
    {0x1.57d69348ceca0p-1, -0x1.75720992bfbb2p-55}, {0x1.5c77bbe65018cp-1, 0x1.069ea9c0bc32ap-55},
    {0x1.610b7551d2cdfp-1, -0x1.251b352ff2a37p-56}, {0x1.6591925f0783dp-1, 0x1.c3d64fbf5de23p-55},
    {0x1.6a09e667f3bcdp-1, -0x1.bdd3413b26456p-55}, {0x1.6e74454eaa8afp-1, -0x1.dbc03c84e226ep-55},
    {0x1.72d0837efff96p-1, 0x1.0d4ef0f1d915cp-55}, {0x1.771e75f037261p-1, 0x1.5cfce8d84068fp-56},
    {0x1.7b5df226aafafp-1, -0x1.0f537acdf0ad7p-56}, {0x1.7f8ece3571771p-1, -0x1.9c8d8ce93c917p-55},
    {0x1.83b0e0bff976ep-1, -0x1.6f420f8ea3475p-56}, {0x1.87c400fba2ebfp-1, -0x1.2dabc0c3f64cdp-55},
    {0x1.8bc806b151741p-1, -0x1.2c5e12ed1336dp-55}, {0x1.8fbcca3ef940dp-1, -0x1.6dfa99c86f2f1p-57},
    {0x1.93a22499263fbp-1, 0x1.3d419a920df0bp-55}, {0x1.9777ef4c7d742p-1, -0x1.15479a240665ep-55},
    {0x1.9b3e047f38741p-1, -0x1.30ee286712474p-55}, {0x1.9ef43ef29af94p-1, 0x1.b1dfcb60445c2p-56},
    {0x1.a29a7a0462782p-1, -0x1.128bb015df175p-56}, {0x1.a63091b02fae2p-1, -0x1.e911152248d10p-56},
    {0x1.a9b66290ea1a3p-1, 0x1.9f630e8b6dac8p-60}, {0x1.ad2bc9e21d511p-1, -0x1.47fbe07bea548p-55},
    {0x1.b090a58150200p-1, -0x1.926da300ffccep-55}, {0x1.b3e4d3ef55712p-1, -0x1.eb6b8bf11a493p-55},
    {0x1.b728345196e3ep-1, -0x1.bc69f324e6d61p-55}, {0x1.ba5aa673590d2p-1, 0x1.7ea4e370753b6p-55},
    {0x1.bd7c0ac6f952ap-1, -0x1.825a732ac700ap-55}, {0x1.c08c426725549p-1, 0x1.b157fd80e2946p-58},
    {0x1.c38b2f180bdb1p-1, -0x1.6e0b1757c8d07p-56}, {0x1.c678b3488739bp-1, 0x1.d86cac7c5ff5bp-57},
    {0x1.c954b213411f5p-1, -0x1.2fb761e946603p-58}, {0x1.cc1f0f3fcfc5cp-1, 0x1.e57613b68f6abp-56},
    {0x1.ced7af43cc773p-1, -0x1.e7b6bb5ab58aep-58}, {0x1.d17e7743e35dcp-1, -0x1.101da3540130ap-58},
    {0x1.d4134d14dc93ap-1, -0x1.4ef5295d25af2p-55}, {0x1.d696173c9e68bp-1, -0x1.e8c61c6393d55p-56},
    {0x1.d906bcf328d46p-1, 0x1.457e610231ac2p-56}, {0x1.db6526238a09bp-1, -0x1.adee7eae69460p-56},
    {0x1.ddb13b6ccc23cp-1, 0x1.83c37c6107db3p-55}, {0x1.dfeae622dbe2bp-1, -0x1.514ea88425567p-55},
    {0x1.e212104f686e5p-1, -0x1.014c76c126527p-55}, {0x1.e426a4b2bc17ep-1, 0x1.a873889744882p-55},
    {0x1.e6288ec48e112p-1, -0x1.16b56f2847754p-57}, {0x1.e817bab4cd10dp-1, -0x1.d0afe686b5e0ap-56},
    {0x1.e9f4156c62ddap-1, 0x1.760b1e2e3f81ep-55}, {0x1.ebbd8c8df0b74p-1, 0x1.c6c8c615e7277p-56},
    {0x1.ed740e7684963p-1, 0x1.e82c791f59cc2p-56}, {0x1.ef178a3e473c2p-1, 0x1.6310a67fe774fp-55},
    {0x1.f0a7efb9230d7p-1, 0x1.52c7adc6b4989p-56}, {0x1.f2252f7763adap-1, -0x1.20cb81c8d94abp-55},
    {0x1.f38f3ac64e589p-1, -0x1.d7bafb51f72e6p-56}, {0x1.f4e603b0b2f2dp-1, -0x1.8ee01e695ac05p-56},
    {0x1.f6297cff75cb0p-1, 0x1.562172a361fd3p-56}, {0x1.f7599a3a12077p-1, 0x1.84f31d743195cp-55},
    {0x1.f8764fa714ba9p-1, 0x1.ab256778ffcb6p-56}, {0x1.f97f924c9099bp-1, -0x1.e2ae0eea5963bp-55},
    {0x1.fa7557f08a517p-1, -0x1.7a0a8ca13571fp-55}, {0x1.fb5797195d741p-1, 0x1.1bfac7397cc08p-56},
    {0x1.fc26470e19fd3p-1, 0x1.1ec8668ecaceep-55}, {0x1.fce15fd6da67bp-1, -0x1.5dd6f830d4c09p-56},
    {0x1.fd88da3d12526p-1, -0x1.87df6378811c7p-55}, {0x1.fe1cafcbd5b09p-1, 0x1.a23e3202a884ep-57},
    {0x1.fe9cdad01883ap-1, 0x1.521ecd0c67e35p-57}, {0x1.ff095658e71adp-1, 0x1.01a8ce18a4b9ep-55},
    {0x1.ff621e3796d7ep-1, -0x1.c57bc2e24aa15p-57}, {0x1.ffa72effef75dp-1, -0x1.8b4cdcdb25956p-55},
    {0x1.ffd886084cd0dp-1, -0x1.1354d4556e4cbp-55}, {0x1.fff62169b92dbp-1, 0x1.5dda3c81fbd0dp-55},
    {0x1.0000000000000p+0, 0x0.0p+0},
};

// (-1)^j / (2j+1)! and (-1)^j / (2j)! for j = 1..4.
constexpr DD kSinCoef[4] = {
    {-0x1.5555555555555p-3, -0x1.5555555555555p-57}, {0x1.1111111111111p-7, 0x1.1111111111111p-63},
    {-0x1.a01a01a01a01ap-13, -0x1.a01a01a01a01ap-73}, {0x1.71de3a556c734p-19, -0x1.c154f8ddc6c00p-73},
};
constexpr DD kCosCoef[4] = {
    {-0x1.0000000000000p-1, 0x0.0p+0}, {0x1.5555555555555p-5, 0x1.5555555555555p-59},
    {-0x1.6c16c16c16c17p-10, 0x1.f49f49f49f49fp-65}, {0x1.a01a01a01a01ap-16, 0x1.a01a01a01a01ap-76},
};

/// The largest |x| exact_sincos accepts: 2^40 (RoPE angles are pos * freq).
constexpr double kSinCosMaxArg = 0x1p40;

/// *s = sin x, *c = cos x, each correctly rounded except in astronomically rare
/// cases, for |x| <= kSinCosMaxArg; beyond it, and for infinities and NaN, both NaN.
inline void exact_sincos(double x, double* s, double* c) {
  const double ax = std::fabs(x);
  if (!(ax <= kSinCosMaxArg)) {
    *s = *c = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  if (ax < 0x1p-27) {  // sin x = x (1 - x^2/6 ...) and cos x = 1 - x^2/2 round to x and 1
    *s = x;
    *c = 1.0;
    return;
  }
  // x = k pi/256 + r, |r| <= pi/512 (a little more from k's rounding), k rounded with
  // the 1.5 2^52 shift (|x 256/pi| < 2^51). k pi/256 is a sum of exact products
  // (|k| < 2^49); x - k kPi256[0] is exact (Sterbenz, k != 0), and the rest, far
  // smaller, is summed from its large end: r has an absolute error of about 2^-158 |x|,
  // so 2^-110 relative or better unless x lies within 2^-48 |x| of a multiple of pi/256.
  const double k = std::fma(x, kInvPi256, 0x1.8p52) - 0x1.8p52;
  DD r{x, 0};
  if (k != 0) {
    const DD p0 = two_prod(k, kPi256[0]), p1 = two_prod(k, kPi256[1]);
    const DD tail = dd_add(two_sum(p0.lo, p1.hi), std::fma(k, kPi256[2], p1.lo));
    const DD h = two_sum(x - p0.hi, -tail.hi);
    r = fast_two_sum(h.hi, h.lo - tail.lo);
  }
  // sin r = r + r^3 (S1 + r^2 (S2 + ...)), cos r = 1 + r^2 (C1 + r^2 (C2 + ...)); the
  // terms from r^6 on are below 2^-53 relative (|r| <= 0.0062), so in double. Each
  // addition has its larger term first (dd_add_big).
  const DD r2 = dd_mul(r, r);
  const double ts = std::fma(kSinCoef[3].hi, r2.hi, kSinCoef[2].hi);
  const double tc = std::fma(kCosCoef[3].hi, r2.hi, kCosCoef[2].hi);
  const DD ps = dd_add_big(kSinCoef[0], dd_mul(dd_add_big(kSinCoef[1], dd_mul(r2, ts)), r2));
  const DD pc = dd_add_big(kCosCoef[0], dd_mul(dd_add_big(kCosCoef[1], dd_mul(r2, tc)), r2));
  const DD sr = dd_add_big(r, dd_mul(dd_mul(r, r2), ps));  // sin r
  const DD cr = dd_add_big(DD{1.0, 0}, dd_mul(r2, pc));    // cos r
  // sin(a + r), cos(a + r) with a = i pi/256, i = k mod 128, then the quadrant
  // (k / 128) mod 4. For i != 0, |sin a cos r| > |cos a sin r| and |cos a cos r| >
  // |sin a sin r|: no cancellation.
  const std::int64_t ki = static_cast<std::int64_t>(k);
  const int j = static_cast<int>(ki & 511), i = j & 127, q = j >> 7;
  DD sv = sr, cv = cr;
  if (i != 0) {
    const DD& sa = kSinPi256[i];
    const DD& ca = kSinPi256[128 - i];
    sv = dd_add_big(dd_mul(sa, cr), dd_mul(ca, sr));
    const DD ss = dd_mul(sa, sr);
    cv = dd_add_big(dd_mul(ca, cr), DD{-ss.hi, -ss.lo});
  }
  switch (q) {
    case 0: *s = sv.hi; *c = cv.hi; break;
    case 1: *s = cv.hi; *c = -sv.hi; break;
    case 2: *s = -sv.hi; *c = -cv.hi; break;
    default: *s = -cv.hi; *c = sv.hi; break;
  }
}

}  // namespace detail
}  // namespace kvd
