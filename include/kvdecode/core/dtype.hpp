// Storage element types for weights and the KV cache. Compute is always in the
// model's scalar (float or double); these types only say how values are stored.
// Conversions go through Eigen's bfloat16/half, which round to nearest even.
// The block types q8_0 and q4_0 (KV caches only) store 32 values as one f16
// scale and 32 integers; CacheQ8_0 and CacheQ4_0 name them as storage types.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kvdecode/error.hpp"

namespace kvd {

/// How a tensor's elements are stored. Frozen on-disk values: cache files
/// (cache_io.hpp, header byte 36) record them; never renumber a value.
enum class DType : std::uint8_t {
  kF32 = 0,   ///< IEEE binary32
  kF64 = 1,   ///< IEEE binary64 (double-precision caches of double models)
  kBF16 = 2,  ///< bfloat16 (8-bit exponent, 7-bit mantissa)
  kF16 = 3,   ///< IEEE binary16
  kQ8 = 4,    ///< 8-bit integers with one f16 scale per group of 32 (q8_0); 34 bytes per 32 values
  kQ4 = 5,    ///< 4-bit integers with one f16 scale per group of 32 (q4_0); 18 bytes per 32 values
};

/// Bytes per element (for kQ8: the average, 34/32 = 1.0625, so use dtype_bytes_for()).
inline double dtype_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4.0;
    case DType::kF64: return 8.0;
    case DType::kBF16: return 2.0;
    case DType::kF16: return 2.0;
    case DType::kQ8: return 34.0 / 32.0;
    case DType::kQ4: return 18.0 / 32.0;
  }
  return 0.0;
}

/// Exact bytes needed to store `n` elements of type `t` (q8 and q4 groups of 32 rounded up).
inline std::uint64_t dtype_bytes_for(DType t, std::uint64_t n) {
  switch (t) {
    case DType::kF32: return 4 * n;
    case DType::kF64: return 8 * n;
    case DType::kBF16: return 2 * n;
    case DType::kF16: return 2 * n;
    case DType::kQ8: return 34 * ((n + 31) / 32);
    case DType::kQ4: return 18 * ((n + 31) / 32);
  }
  return 0;
}

/// Short lower-case name: "f32", "f64", "bf16", "f16", "q8", "q4".
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kQ8: return "q8";
    case DType::kQ4: return "q4";
  }
  return "?";
}

/// Parses a name accepted by dtype_name() (also "fp32", "float32", "fp16", "float16", "int8", "q8_0", "q4_0").
/// Throws ArgumentError naming the text and the accepted names.
inline DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::kF32;
  if (s == "f64" || s == "fp64" || s == "float64") return DType::kF64;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::kF16;
  if (s == "q8" || s == "q8_0" || s == "int8" || s == "i8") return DType::kQ8;
  if (s == "q4" || s == "q4_0") return DType::kQ4;
  throw ArgumentError(detail::msg("unknown dtype '", s, "'; expected one of f32, f64, bf16, f16, q8_0, q4_0"));
}

/// Storage-type tags for the KV cache's block types: 32 values along the head
/// dimension as one f16 scale d and 32 integers q, each value read as float(q) * float(d).
struct CacheQ8_0 {};  ///< q in [-127, 127], 8 bits each
struct CacheQ4_0 {};  ///< q in [-8, 7], 4 bits each

/// The DType that stores values of C++ type T exactly as T.
template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kF64; };
template <> struct DTypeOf<Eigen::bfloat16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<Eigen::half> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<CacheQ8_0> { static constexpr DType value = DType::kQ8; };
template <> struct DTypeOf<CacheQ4_0> { static constexpr DType value = DType::kQ4; };

/// Calls f(S()) with the C++ type S that stores `t` (float, double,
/// Eigen::bfloat16 or Eigen::half) and returns what f returns: a cache type chosen
/// at run time, with every branch compiled, for example
///   kvd::visit_dtype(kvd::parse_dtype(name), [&](auto s) { kvd::KVCache<float, decltype(s)> c(config); ... });
/// Throws ArgumentError for a type with no element type of its own (q8, whose
/// values are stored in blocks), before calling f.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::kF32: return f(float());
    case DType::kF64: return f(double());
    case DType::kBF16: return f(Eigen::bfloat16());
    case DType::kF16: return f(Eigen::half());
    case DType::kQ8: break;
    case DType::kQ4: break;
  }
  throw ArgumentError(detail::msg("dtype ", dtype_name(t), " has no element type to store a KV cache in; expected f32, f64, bf16 or f16"));
}

/// visit_dtype() restricted to the storage types Ts, so that a program compiles
/// only those: calls f(S()) with the S among Ts that stores `t`, and returns what
/// f returns (the same type for every S). Throws ArgumentError naming `t` and the
/// types Ts when none stores it, before calling f. For example
///   kvd::visit_dtype_among<float, Eigen::bfloat16, Eigen::half>(t, [&](auto s) { ... });
template <class First, class... Rest, class F>
decltype(auto) visit_dtype_among(DType t, F&& f) {
  if (t == DTypeOf<First>::value) return f(First());
  if constexpr (sizeof...(Rest) > 0) {
    if (((t == DTypeOf<Rest>::value) || ...)) return visit_dtype_among<Rest...>(t, std::forward<F>(f));
  }
  std::string names = dtype_name(DTypeOf<First>::value);
  ((names += std::string(", ") + dtype_name(DTypeOf<Rest>::value)), ...);
  throw ArgumentError(detail::msg("dtype ", dtype_name(t), " is not one of the storage types here: ", names));
}

}  // namespace kvd
