// A 16-lane vector of float or double with exactly the operations the kernels
// need: load, store, broadcast, and fused multiply-add. One struct, three
// implementations (AVX-512, AVX2+FMA, portable scalar), chosen by the compiler
// flags of the translation unit that includes kvdecode.
//
// Why all three give the same bits: each lane is an independent value and
// every arithmetic operation here is either exact (load/store/broadcast) or a
// single correctly rounded IEEE fma. A lane never mixes with another lane, so
// the result of a lane depends only on the sequence of fma calls made on it,
// never on the vector width. The scalar fallback calls std::fma, which the C++
// standard defines as the same correctly rounded operation.
#pragma once

#include <cmath>
#include <cstddef>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#if defined(__FAST_MATH__)
#error "kvdecode refuses -ffast-math: it reorders floating-point sums and breaks the bit-exactness contract. Compile without -ffast-math (and without -fassociative-math)."
#endif

namespace kvd::detail {

/// Number of lanes in every kernel vector, whatever the instruction set.
inline constexpr int kLanes = 16;

template <class T>
struct Vec16;

#if defined(__AVX512F__)
inline constexpr const char* kSimdName = "avx512";

template <>
struct Vec16<float> {
  __m512 v;
  static Vec16 zero() { return {_mm512_setzero_ps()}; }
  static Vec16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Vec16 broadcast(float a) { return {_mm512_set1_ps(a)}; }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  /// this = a * b + this, one rounding per lane.
  void fma(const Vec16& a, const Vec16& b) { v = _mm512_fmadd_ps(a.v, b.v, v); }
};

template <>
struct Vec16<double> {
  __m512d lo, hi;
  static Vec16 zero() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
  static Vec16 load(const double* p) { return {_mm512_loadu_pd(p), _mm512_loadu_pd(p + 8)}; }
  static Vec16 broadcast(double a) { return {_mm512_set1_pd(a), _mm512_set1_pd(a)}; }
  void store(double* p) const { _mm512_storeu_pd(p, lo); _mm512_storeu_pd(p + 8, hi); }
  void fma(const Vec16& a, const Vec16& b) { lo = _mm512_fmadd_pd(a.lo, b.lo, lo); hi = _mm512_fmadd_pd(a.hi, b.hi, hi); }
};

#elif defined(__AVX2__) && defined(__FMA__)
inline constexpr const char* kSimdName = "avx2";

template <>
struct Vec16<float> {
  __m256 lo, hi;
  static Vec16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static Vec16 broadcast(float a) { return {_mm256_set1_ps(a), _mm256_set1_ps(a)}; }
  void store(float* p) const { _mm256_storeu_ps(p, lo); _mm256_storeu_ps(p + 8, hi); }
  void fma(const Vec16& a, const Vec16& b) { lo = _mm256_fmadd_ps(a.lo, b.lo, lo); hi = _mm256_fmadd_ps(a.hi, b.hi, hi); }
};

template <>
struct Vec16<double> {
  __m256d v[4];
  static Vec16 zero() { Vec16 r; for (auto& x : r.v) x = _mm256_setzero_pd(); return r; }
  static Vec16 load(const double* p) { Vec16 r; for (int i = 0; i < 4; ++i) r.v[i] = _mm256_loadu_pd(p + 4 * i); return r; }
  static Vec16 broadcast(double a) { Vec16 r; for (auto& x : r.v) x = _mm256_set1_pd(a); return r; }
  void store(double* p) const { for (int i = 0; i < 4; ++i) _mm256_storeu_pd(p + 4 * i, v[i]); }
  void fma(const Vec16& a, const Vec16& b) { for (int i = 0; i < 4; ++i) v[i] = _mm256_fmadd_pd(a.v[i], b.v[i], v[i]); }
};

#else
inline constexpr const char* kSimdName = "scalar";
#endif

#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__))
template <class T>
struct Vec16 {
  T v[kLanes];
  static Vec16 zero() { Vec16 r; for (auto& x : r.v) x = T(0); return r; }
  static Vec16 load(const T* p) { Vec16 r; for (int i = 0; i < kLanes; ++i) r.v[i] = p[i]; return r; }
  static Vec16 broadcast(T a) { Vec16 r; for (auto& x : r.v) x = a; return r; }
  void store(T* p) const { for (int i = 0; i < kLanes; ++i) p[i] = v[i]; }
  void fma(const Vec16& a, const Vec16& b) { for (int i = 0; i < kLanes; ++i) v[i] = std::fma(a.v[i], b.v[i], v[i]); }
};
#endif

/// Rounds n up to a multiple of kLanes.
constexpr long round_up_lanes(long n) { return (n + kLanes - 1) / kLanes * kLanes; }

}  // namespace kvd::detail
