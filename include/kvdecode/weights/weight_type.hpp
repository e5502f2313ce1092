// WeightType: how one weight matrix is stored, in ggml's own type codes (the
// numbers GGUF files carry, so they are frozen: never renumber a value).
// Storage type is a property of each matrix, not of the model's compute type:
// a Transformer<float> may hold F16 projections, a Q6_K classifier and F32
// norms at once. Block types store `block_size` consecutive values of a row in
// `block_bytes` bytes; a row's length must be a multiple of block_size.
#pragma once

#include <cstdint>
#include <string>

#include "kvdecode/error.hpp"

namespace kvd {

/// ggml's type codes (ggml.h `enum ggml_type`). Frozen on-disk values.
enum class WeightType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,  ///< mainline ggml's code, which ik_llama.cpp shares; files in the wild come from mainline
};

/// What a WeightType is: its name, block size (values per block) and block bytes.
struct WeightTypeTraits {
  const char* name = nullptr;   ///< ggml's name, e.g. "q4_K"; nullptr for a code ggml does not define
  std::uint32_t block_size = 0; ///< values per block (1 for plain types)
  std::uint32_t block_bytes = 0;///< bytes per block
  bool supported = false;       ///< kvdecode can compute with matrices of this type
};

/// The traits of code `t`. Codes that ggml does not define give name == nullptr. Never throws.
/// (The block types' rows in block_types.hpp are checked against this table at compile time.)
constexpr WeightTypeTraits weight_type_traits(WeightType t) {
  switch (t) {
    case WeightType::kF32: return {"f32", 1, 4, true};
    case WeightType::kF16: return {"f16", 1, 2, true};
    case WeightType::kQ4_0: return {"q4_0", 32, 18, true};
    case WeightType::kQ4_1: return {"q4_1", 32, 20, true};
    case WeightType::kQ5_0: return {"q5_0", 32, 22, true};
    case WeightType::kQ5_1: return {"q5_1", 32, 24, true};
    case WeightType::kQ8_0: return {"q8_0", 32, 34, true};
    case WeightType::kQ8_1: return {"q8_1", 32, 36, false};
    case WeightType::kQ2_K: return {"q2_K", 256, 84, true};
    case WeightType::kQ3_K: return {"q3_K", 256, 110, true};
    case WeightType::kQ4_K: return {"q4_K", 256, 144, true};
    case WeightType::kQ5_K: return {"q5_K", 256, 176, true};
    case WeightType::kQ6_K: return {"q6_K", 256, 210, true};
    case WeightType::kQ8_K: return {"q8_K", 256, 292, false};
    case WeightType::kIQ2_XXS: return {"iq2_xxs", 256, 66, false};
    case WeightType::kIQ2_XS: return {"iq2_xs", 256, 74, false};
    case WeightType::kIQ3_XXS: return {"iq3_xxs", 256, 98, false};
    case WeightType::kIQ1_S: return {"iq1_s", 256, 50, false};
    case WeightType::kIQ4_NL: return {"iq4_nl", 32, 18, true};
    case WeightType::kIQ3_S: return {"iq3_s", 256, 110, false};
    case WeightType::kIQ2_S: return {"iq2_s", 256, 82, false};
    case WeightType::kIQ4_XS: return {"iq4_xs", 256, 136, true};
    case WeightType::kI8: return {"i8", 1, 1, false};
    case WeightType::kI16: return {"i16", 1, 2, false};
    case WeightType::kI32: return {"i32", 1, 4, false};
    case WeightType::kI64: return {"i64", 1, 8, false};
    case WeightType::kF64: return {"f64", 1, 8, true};
    case WeightType::kIQ1_M: return {"iq1_m", 256, 56, false};
    case WeightType::kBF16: return {"bf16", 1, 2, true};
    case WeightType::kTQ1_0: return {"tq1_0", 256, 54, false};
    case WeightType::kTQ2_0: return {"tq2_0", 256, 66, false};
    case WeightType::kMXFP4: return {"mxfp4", 32, 17, true};
  }
  return {};
}

/// True if `code` is a type ggml defines (whether or not kvdecode computes with it).
inline bool is_known_weight_type(std::uint32_t code) {
  return weight_type_traits(static_cast<WeightType>(code)).name != nullptr;
}

/// ggml's name of t ("q4_K"), or "type<code>" for an undefined code. Never throws.
inline std::string weight_type_name(WeightType t) {
  const auto tr = weight_type_traits(t);
  return tr.name ? std::string(tr.name) : "type" + std::to_string(static_cast<std::uint32_t>(t));
}

/// Bits per weight of type t (block bytes * 8 / block size), e.g. 4.5 for q4_K; 0 if undefined.
inline double weight_type_bits(WeightType t) {
  const auto tr = weight_type_traits(t);
  return tr.block_size ? 8.0 * tr.block_bytes / tr.block_size : 0.0;
}

/// Bytes of one row of `n` values of type t. Throws ConfigError if n is not a
/// multiple of the block size or t is undefined.
inline std::uint64_t weight_row_bytes(WeightType t, std::uint64_t n) {
  const auto tr = weight_type_traits(t);
  if (!tr.name) throw ConfigError(detail::msg("undefined weight type code ", static_cast<std::uint32_t>(t)));
  if (n % tr.block_size != 0)
    throw ConfigError(detail::msg("a row of ", n, " values is not a multiple of ", tr.name, "'s block size ", tr.block_size));
  return n / tr.block_size * tr.block_bytes;
}

/// Parses a ggml type name, case-insensitive ("Q4_K", "q8_0", "BF16", "f32").
/// Throws ArgumentError naming the text.
inline WeightType parse_weight_type(const std::string& s) {
  auto lower = [](std::string x) {
    for (auto& c : x) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return x;
  };
  const std::string want = lower(s);
  for (std::uint32_t code = 0; code < 64; ++code) {
    const auto tr = weight_type_traits(static_cast<WeightType>(code));
    if (tr.name && lower(tr.name) == want) return static_cast<WeightType>(code);
  }
  throw ArgumentError(detail::msg("unknown weight type '", s, "' (expected a ggml type name such as f32, f16, bf16, q8_0, q4_K)"));
}

}  // namespace kvd
