// A 16-lane vector of float or double with exactly the operations the kernels
// need: load, store, broadcast, and fused multiply-add. Four implementations
// of the same struct: AVX-512, AVX2+FMA, NEON (aarch64) and portable scalar.
// Vec16<T> names the widest one the compiler flags of the including translation
// unit allow; the narrower ones stay available by name (PortableVec16 always,
// Avx2Vec16 whenever AVX2+FMA is enabled) so that tests can run every path in
// one program and compare their bits.
//
// Why all four give the same bits: each lane is an independent value and
// every arithmetic operation here is either exact (load/store/broadcast) or a
// single correctly rounded IEEE fma. A lane never mixes with another lane, so
// the result of a lane depends only on the sequence of fma calls made on it,
// never on the vector width. The scalar fallback calls std::fma, which the C++
// standard defines as the same correctly rounded operation.
//
// Each implementation also states how many Vec16 accumulators a register tile
// of the matmul kernel may hold: kAccumulators for the small-M (decode) tiles,
// about 3/4 of the vector registers, and kLargeAccumulators for the prefill
// tile, all but the few registers that hold the weights and the broadcast
// input. They only shape tiles, never results.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kvdecode/core/isa.hpp"

#if defined(KVDECODE_VEC_AVX512) || defined(KVDECODE_VEC_AVX2)
#include <immintrin.h>
#endif
#if defined(KVDECODE_VEC_NEON)
#include <arm_neon.h>
#endif

// Floating-point flags that break the exactness contract. The library is
// header-only, so the flags of every translation unit that includes it apply.
// What the compilers say about each flag (predefined macros, GCC 12 and clang 14):
//   flag                          GCC 12                    clang 14
//   -ffast-math, -Ofast           __FAST_MATH__             __FAST_MATH__ (also -ffp-model=fast)
//   -fassociative-math (*)        __ASSOCIATIVE_MATH__      nothing
//   -funsafe-math-optimizations   __ASSOCIATIVE_MATH__ ...  nothing
//   -freciprocal-math             __RECIPROCAL_MATH__       nothing
//   -ffinite-math-only            __FINITE_MATH_ONLY__ 1    __FINITE_MATH_ONLY__ 1
//   -fno-signed-zeros             __NO_SIGNED_ZEROS__       nothing
//   (*) with -fno-signed-zeros -fno-trapping-math, without which GCC ignores it.
// Each macro below stops the build. What no macro shows (clang's
// -fassociative-math, -freciprocal-math, -fno-signed-zeros, -fapprox-func, and
// `#pragma clang fp reassociate(on)` or `float_control` around the include) is
// caught, where it reorders sums, by the run-time probe at the end of this file;
// the probe cannot see every transformation such flags allow, so they remain
// unsupported. -ffp-contract is harmless: every multiply-add is an explicit fma.
#if defined(__FAST_MATH__)
#error "kvdecode refuses -ffast-math: it reorders floating-point sums and breaks the bit-exactness contract. Compile without -ffast-math (and without -fassociative-math)."
#endif
#if defined(__ASSOCIATIVE_MATH__)
#error "kvdecode refuses -fassociative-math (also implied by -funsafe-math-optimizations): it reorders floating-point sums and breaks the bit-exactness contract. Compile without it."
#endif
#if defined(__RECIPROCAL_MATH__)
#error "kvdecode refuses -freciprocal-math (also implied by -funsafe-math-optimizations): x / y as x * (1 / y) rounds twice and breaks the bit-exactness contract. Compile without it."
#endif
#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "kvdecode refuses -ffinite-math-only: attention masks with -infinity and exp saturates to infinity. Compile without it."
#endif
#if defined(__NO_SIGNED_ZEROS__)
#error "kvdecode refuses -fno-signed-zeros: it lets the compiler drop additions of zero, which changes the sign bit of zero results. Compile without it."
#endif

namespace kvd::detail {

/// Number of lanes in every kernel vector, whatever the instruction set.
inline constexpr int kLanes = 16;

/// bfloat16 bits -> float: the bits are the top half of a float, so this is exact.
inline float bf16_bits_to_float(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// IEEE binary16 bits -> float, exactly (every half value is a float), in plain
/// integer arithmetic: normals, subnormals, infinities and NaNs (payload kept).
inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do { man <<= 1; ++e; } while ((man & 0x400u) == 0);
    u = sign | static_cast<std::uint32_t>(112 - e) << 23 | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Portable scalar lanes: an array of 16 values, each updated by std::fma.
template <class T>
struct PortableVec16 {
  static constexpr int kAccumulators = sizeof(T) <= 4 ? 6 : 3;
  static constexpr int kLargeAccumulators = kAccumulators;
  T v[kLanes];
  static PortableVec16 zero() { PortableVec16 r; for (auto& x : r.v) x = T(0); return r; }
  static PortableVec16 load(const T* p) { PortableVec16 r; for (int i = 0; i < kLanes; ++i) r.v[i] = p[i]; return r; }
  static PortableVec16 broadcast(T a) { PortableVec16 r; for (auto& x : r.v) x = a; return r; }
  /// 16 IEEE binary16 / bfloat16 values (raw bits), converted exactly.
  static PortableVec16 load_f16(const std::uint16_t* p) { PortableVec16 r; for (int i = 0; i < kLanes; ++i) r.v[i] = static_cast<T>(half_bits_to_float(p[i])); return r; }
  static PortableVec16 load_bf16(const std::uint16_t* p) { PortableVec16 r; for (int i = 0; i < kLanes; ++i) r.v[i] = static_cast<T>(bf16_bits_to_float(p[i])); return r; }
  void store(T* p) const { for (int i = 0; i < kLanes; ++i) p[i] = v[i]; }
  /// this = a * b + this, one rounding per lane.
  void fma(const PortableVec16& a, const PortableVec16& b) {
    for (int i = 0; i < kLanes; ++i) v[i] = std::fma(a.v[i], b.v[i], v[i]);
  }
  /// Lane by lane std::max(a, b), that is a < b ? b : a (a NaN in b gives a, in a gives a).
  static PortableVec16 max(const PortableVec16& a, const PortableVec16& b) {
    PortableVec16 r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = std::max(a.v[i], b.v[i]);
    return r;
  }
};

#if defined(KVDECODE_VEC_AVX2)
template <class T>
struct Avx2Vec16;

/// AVX2: two ymm registers (16 registers in all: 12 accumulators = 6 Vec16).
template <>
struct Avx2Vec16<float> {
  static constexpr int kAccumulators = 6;
  static constexpr int kLargeAccumulators = 6;
  __m256 lo, hi;
  static Avx2Vec16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Avx2Vec16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static Avx2Vec16 broadcast(float a) { return {_mm256_set1_ps(a), _mm256_set1_ps(a)}; }
  static Avx2Vec16 load_f16(const std::uint16_t* p) {
#if defined(KVDECODE_VEC_F16C)
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
#else
    float t[kLanes];
    for (int i = 0; i < kLanes; ++i) t[i] = half_bits_to_float(p[i]);
    return load(t);
#endif
  }
  static Avx2Vec16 load_bf16(const std::uint16_t* p) {
    const __m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(a, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(b, 16))};
  }
  void store(float* p) const { _mm256_storeu_ps(p, lo); _mm256_storeu_ps(p + 8, hi); }
  void fma(const Avx2Vec16& a, const Avx2Vec16& b) {
    lo = _mm256_fmadd_ps(a.lo, b.lo, lo);
    hi = _mm256_fmadd_ps(a.hi, b.hi, hi);
  }
  /// Lane by lane std::max(a, b): maxps(b, a) is b > a ? b : a, the same choice.
  static Avx2Vec16 max(const Avx2Vec16& a, const Avx2Vec16& b) {
    return {_mm256_max_ps(b.lo, a.lo), _mm256_max_ps(b.hi, a.hi)};
  }
};

template <>
struct Avx2Vec16<double> {
  static constexpr int kAccumulators = 3;
  static constexpr int kLargeAccumulators = 3;
  __m256d v[4];
  static Avx2Vec16 zero() { Avx2Vec16 r; for (auto& x : r.v) x = _mm256_setzero_pd(); return r; }
  static Avx2Vec16 load(const double* p) {
    Avx2Vec16 r;
    for (int i = 0; i < 4; ++i) r.v[i] = _mm256_loadu_pd(p + 4 * i);
    return r;
  }
  static Avx2Vec16 broadcast(double a) { Avx2Vec16 r; for (auto& x : r.v) x = _mm256_set1_pd(a); return r; }
  void store(double* p) const { for (int i = 0; i < 4; ++i) _mm256_storeu_pd(p + 4 * i, v[i]); }
  void fma(const Avx2Vec16& a, const Avx2Vec16& b) {
    for (int i = 0; i < 4; ++i) v[i] = _mm256_fmadd_pd(a.v[i], b.v[i], v[i]);
  }
  static Avx2Vec16 max(const Avx2Vec16& a, const Avx2Vec16& b) {
    Avx2Vec16 r;
    for (int i = 0; i < 4; ++i) r.v[i] = _mm256_max_pd(b.v[i], a.v[i]);
    return r;
  }
};
#endif

#if defined(KVDECODE_VEC_AVX512)
template <class T>
struct Avx512Vec16;

/// AVX-512: one zmm register (32 registers in all: 24 accumulators, 28 in the
/// prefill tile whose 2 weight vectors and 1 broadcast fill the rest).
template <>
struct Avx512Vec16<float> {
  static constexpr int kAccumulators = 24;
  static constexpr int kLargeAccumulators = 28;
  __m512 v;
  static Avx512Vec16 zero() { return {_mm512_setzero_ps()}; }
  static Avx512Vec16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Avx512Vec16 broadcast(float a) { return {_mm512_set1_ps(a)}; }
  // The maskz forms with an all-ones mask compile to the plain instructions; the
  // plain intrinsics start from _mm512_undefined_*(), which GCC 12 reports as
  // -Wmaybe-uninitialized once per inlined tile (thousands of lines per file).
  static Avx512Vec16 load_f16(const std::uint16_t* p) {
    return {_mm512_maskz_cvtph_ps(__mmask16(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  static Avx512Vec16 load_bf16(const std::uint16_t* p) {
    const __m512i w = _mm512_maskz_cvtepu16_epi32(__mmask16(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return {_mm512_castsi512_ps(_mm512_maskz_slli_epi32(__mmask16(0xFFFF), w, 16))};
  }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  void fma(const Avx512Vec16& a, const Avx512Vec16& b) { v = _mm512_fmadd_ps(a.v, b.v, v); }
  /// Lane by lane std::max(a, b): maxps(b, a) is b > a ? b : a, the same choice.
  static Avx512Vec16 max(const Avx512Vec16& a, const Avx512Vec16& b) {
    return {_mm512_maskz_max_ps(__mmask16(0xFFFF), b.v, a.v)};
  }
};

template <>
struct Avx512Vec16<double> {
  static constexpr int kAccumulators = 12;
  static constexpr int kLargeAccumulators = 14;
  __m512d lo, hi;
  static Avx512Vec16 zero() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
  static Avx512Vec16 load(const double* p) { return {_mm512_loadu_pd(p), _mm512_loadu_pd(p + 8)}; }
  static Avx512Vec16 broadcast(double a) { return {_mm512_set1_pd(a), _mm512_set1_pd(a)}; }
  void store(double* p) const { _mm512_storeu_pd(p, lo); _mm512_storeu_pd(p + 8, hi); }
  void fma(const Avx512Vec16& a, const Avx512Vec16& b) {
    lo = _mm512_fmadd_pd(a.lo, b.lo, lo);
    hi = _mm512_fmadd_pd(a.hi, b.hi, hi);
  }
  static Avx512Vec16 max(const Avx512Vec16& a, const Avx512Vec16& b) {
    return {_mm512_maskz_max_pd(__mmask8(0xFF), b.lo, a.lo), _mm512_maskz_max_pd(__mmask8(0xFF), b.hi, a.hi)};
  }
};
#endif

#if defined(KVDECODE_VEC_NEON)
template <class T>
struct NeonVec16;

/// NEON (aarch64): four q registers of 4 floats (32 registers in all: 6
/// accumulators take 24, one weight vector 4 and the broadcast input 1, in the
/// decode and the prefill tiles alike, as AVX2's 16 registers hold half as much).
/// vfmaq_f32 is one correctly rounded fma per lane, like vfmadd and std::fma.
template <>
struct NeonVec16<float> {
  static constexpr int kAccumulators = 6;
  static constexpr int kLargeAccumulators = 6;
  float32x4_t v[4];
  static NeonVec16 zero() { NeonVec16 r; for (auto& x : r.v) x = vdupq_n_f32(0.0f); return r; }
  static NeonVec16 load(const float* p) {
    NeonVec16 r;
    for (int i = 0; i < 4; ++i) r.v[i] = vld1q_f32(p + 4 * i);
    return r;
  }
  static NeonVec16 broadcast(float a) { NeonVec16 r; for (auto& x : r.v) x = vdupq_n_f32(a); return r; }
  /// fcvtl: every half value is a float, so exact (subnormals too: Linux runs
  /// with FPCR.FZ16 and FPCR.FZ off); a signalling NaN comes out quiet.
  static NeonVec16 load_f16(const std::uint16_t* p) {
    const uint16x8_t a = vld1q_u16(p), b = vld1q_u16(p + 8);
    return {{vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(a))), vcvt_high_f32_f16(vreinterpretq_f16_u16(a)),
             vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(b))), vcvt_high_f32_f16(vreinterpretq_f16_u16(b))}};
  }
  /// shll #16: the bf16 bits become the top half of each float lane.
  static NeonVec16 load_bf16(const std::uint16_t* p) {
    const uint16x8_t a = vld1q_u16(p), b = vld1q_u16(p + 8);
    return {{vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16)), vreinterpretq_f32_u32(vshll_high_n_u16(a, 16)),
             vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16)), vreinterpretq_f32_u32(vshll_high_n_u16(b, 16))}};
  }
  void store(float* p) const { for (int i = 0; i < 4; ++i) vst1q_f32(p + 4 * i, v[i]); }
  void fma(const NeonVec16& a, const NeonVec16& b) {
    for (int i = 0; i < 4; ++i) v[i] = vfmaq_f32(v[i], a.v[i], b.v[i]);
  }
  /// Lane by lane std::max(a, b) = a < b ? b : a (fmax would pass NaNs differently).
  static NeonVec16 max(const NeonVec16& a, const NeonVec16& b) {
    NeonVec16 r;
    for (int i = 0; i < 4; ++i) r.v[i] = vbslq_f32(vcltq_f32(a.v[i], b.v[i]), b.v[i], a.v[i]);
    return r;
  }
};

/// Eight q registers of 2 doubles: 3 accumulators (24 registers), as AVX2 double.
template <>
struct NeonVec16<double> {
  static constexpr int kAccumulators = 3;
  static constexpr int kLargeAccumulators = 3;
  float64x2_t v[8];
  static NeonVec16 zero() { NeonVec16 r; for (auto& x : r.v) x = vdupq_n_f64(0.0); return r; }
  static NeonVec16 load(const double* p) {
    NeonVec16 r;
    for (int i = 0; i < 8; ++i) r.v[i] = vld1q_f64(p + 2 * i);
    return r;
  }
  static NeonVec16 broadcast(double a) { NeonVec16 r; for (auto& x : r.v) x = vdupq_n_f64(a); return r; }
  void store(double* p) const { for (int i = 0; i < 8; ++i) vst1q_f64(p + 2 * i, v[i]); }
  void fma(const NeonVec16& a, const NeonVec16& b) {
    for (int i = 0; i < 8; ++i) v[i] = vfmaq_f64(v[i], a.v[i], b.v[i]);
  }
  static NeonVec16 max(const NeonVec16& a, const NeonVec16& b) {
    NeonVec16 r;
    for (int i = 0; i < 8; ++i) r.v[i] = vbslq_f64(vcltq_f64(a.v[i], b.v[i]), b.v[i], a.v[i]);
    return r;
  }
};
#endif

#if defined(KVDECODE_VEC_AVX512)
inline constexpr const char* kSimdName = "avx512";
template <class T>
using Vec16 = Avx512Vec16<T>;
#elif defined(KVDECODE_VEC_AVX2)
inline constexpr const char* kSimdName = "avx2";
template <class T>
using Vec16 = Avx2Vec16<T>;
#elif defined(KVDECODE_VEC_NEON)
inline constexpr const char* kSimdName = "neon";
template <class T>
using Vec16 = NeonVec16<T>;
#else
inline constexpr const char* kSimdName = "scalar";
template <class T>
using Vec16 = PortableVec16<T>;
#endif

// Cache hints: they move data earlier, never change a result. Always inlined: GCC
// finds a non-inlined hint free of side effects and deletes a call to it from an
// always-inline caller, which a plain inline function becomes (GCC 12 -O2).
/// The cache line at p will be read soon: fetch it into L1.
KVD_ALWAYS_INLINE inline void prefetch_read(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 3);
#else
  (void)p;
#endif
}
/// The cache line `bytes` after p will be read soon: fetch it into L1. The
/// address is formed as an integer, so it may lie past the end of p's array.
KVD_ALWAYS_INLINE inline void prefetch_read_at(const void* p, std::size_t bytes) {
  prefetch_read(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + bytes));
}
/// The cache line at p will be read after a while: fetch it into L2.
KVD_ALWAYS_INLINE inline void prefetch_l2(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 2);
#else
  (void)p;
#endif
}
/// prefetch_l2 of the line `bytes` past p, which may lie outside any object (never faults).
KVD_ALWAYS_INLINE inline void prefetch_l2_at(const void* p, std::size_t bytes) {
  prefetch_l2(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + bytes));
}

/// Rounds n up to a multiple of kLanes.
constexpr long round_up_lanes(long n) { return (n + kLanes - 1) / kLanes * kLanes; }

}  // namespace kvd::detail

namespace kvd::detail {

/// The run-time half of the flag guard at the top of this file: true if float
/// sums compiled with this translation unit's flags keep their written order.
/// It adds 2^24 and then 255 ones in index order, which gives exactly 2^24 (each
/// 2^24 + 1 rounds back to 2^24, ties to even); a compiler allowed to reassociate
/// (clang's -fassociative-math, which sets no macro) vectorises the loop into
/// partial sums and gets more. The input passes through volatiles so that the
/// sum happens at run time. A heuristic: an optimiser that reorders sums
/// elsewhere but not here, or a program whose translation units were compiled
/// with different flags, goes unseen.
inline bool float_sums_keep_their_order() {
  constexpr int kN = 256;
  volatile float big = 16777216.0f, one = 1.0f;
  volatile int n_volatile = kN;
  const int n = n_volatile;  // a run-time trip count: the loop is vectorised, not unrolled away
  float x[kN];
  x[0] = big;
  for (int i = 1; i < kN; ++i) x[i] = one;
  float s = 0.0f;
  for (int i = 0; i < n && i < kN; ++i) s += x[i];
  return s == 16777216.0f;
}

/// Runs the probe once per program, before main(): a build that reorders float
/// sums stops with this message (like the #errors above) instead of silently
/// producing logits that differ from every other build. Not in a dispatch level's
/// files (dispatch_level.hpp): their code may not run before the CPU is known, so
/// the dispatch runs their probe when it picks the level (dispatch.hpp).
#if !defined(KVDECODE_DISPATCH_LEVEL)
inline const bool kFloatOrderChecked = [] {
  if (!float_sums_keep_their_order()) {
    std::fputs("kvdecode: this program was compiled with flags that reorder floating-point sums "
               "(-fassociative-math, -funsafe-math-optimizations, -ffast-math or a reassociation pragma); "
               "that breaks kvdecode's bit-exactness contract. Recompile without them.\n",
               stderr);
    std::abort();
  }
  return true;
}();
#endif

}  // namespace kvd::detail
