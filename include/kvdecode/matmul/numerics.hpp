// Numerics: which products of a model round their input rows, and to what
// (docs/fast-mode.md). Every mode keeps the exactness contract within itself: one
// fixed sequence of operations per output, so every path, thread count, chunking
// and CPU gives the same bits. The modes differ from one another in those bits.
#pragma once

#include <cstdint>
#include <string>

#include "kvdecode/error.hpp"

namespace kvd {

/// A model's numerics mode. The codes are frozen (they name the mode in
/// kvdecode-generate --json and in model fingerprints).
enum class Numerics : std::uint8_t {
  /// Float activations everywhere: every weight is widened to float and multiplied
  /// by the float input row (`--exact-activations`).
  kExact = 0,
  /// Block-type matrices (q4_0 ... q8_0, iq4, mxfp4) round each input row to int8
  /// blocks of 32 with a float scale and use integer dot products (fast_int8.hpp),
  /// as llama.cpp does; f32, f16 and bf16 matrices keep float activations, with the
  /// same bits on every CPU. What open_model() loads by default.
  kInt8Blocks = 1,
  /// kInt8Blocks, and f16/bf16 matrices round their input rows to bf16 and use bf16
  /// dot products on CPUs with AVX512-BF16 (fast_bf16.hpp; `--fast-matmul`). Those
  /// matrices' bits then depend on whether the CPU has AVX512-BF16.
  kFast = 2,
};

/// "exact", "int8-blocks" or "fast". Never fails.
inline const char* numerics_name(Numerics n) {
  switch (n) {
    case Numerics::kExact: return "exact";
    case Numerics::kInt8Blocks: return "int8-blocks";
    case Numerics::kFast: return "fast";
  }
  return "?";
}

/// The mode numerics_name() calls `name`. Throws ConfigError naming the value and
/// the accepted names otherwise.
inline Numerics parse_numerics(const std::string& name) {
  for (Numerics n : {Numerics::kExact, Numerics::kInt8Blocks, Numerics::kFast})
    if (name == numerics_name(n)) return n;
  throw ConfigError(detail::msg("numerics '", name, "' is not one of exact, int8-blocks, fast"));
}

}  // namespace kvd
