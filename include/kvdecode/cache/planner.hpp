// Capacity planning for an exact KV cache: how many bytes one token and one
// sequence occupy, how many sequences fit in a card's memory once the weights
// are loaded, and the memory-bandwidth bound on decode speed. The cache, not
// compute, is what limits concurrency at long context, so this is the
// arithmetic to do before choosing a cache dtype, context length or GPU.
//
//   bytes per token    = 2 (K and V) * L * Hk * bytes(Dh values of the cache dtype)
//   bytes per sequence = bytes per token * tokens per sequence, where a layer that
//                        attends to a window keeps only its ring (kv_cache.hpp):
//                        bytes per token / L * ((L - Lw) * tokens + Lw * min(tokens, ring))
//                        for Lw such layers (Gemma 3's and gpt-oss's local layers)
//   KV budget          = memory - weight bytes
//   max sequences      = floor(KV budget / bytes per sequence)
//
// Decode is memory-bandwidth bound: each step streams every weight once plus
// each sequence's whole KV cache, so with a batch of B sequences at full
// context the aggregate rate is at most B * bandwidth / (W + B * KV per sequence).
// These are upper bounds (no activations, no fragmentation, no compute time),
// not predictions.
//
// Units: "GB" is 10^9 bytes and "GB/s" is 10^9 bytes per second throughout,
// matching vendor data sheets. Byte counts use exact integer arithmetic and
// throw ArgumentError rather than wrap on overflow.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "kvdecode/core/config.hpp"
#include "kvdecode/core/dtype.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/cache/kv_cache.hpp"  // detail::window_ring_blocks, the ring-size rule

namespace kvd {

/// One accelerator's nominal capacity. `memory_gb` is the advertised memory
/// size taken as 10^9 bytes and `bandwidth_gb_s` the advertised peak memory
/// bandwidth in 10^9 bytes/s, both from vendor data sheets. Real usable memory
/// is lower (the runtime, the framework and activations take a share) and
/// achieved bandwidth is typically 70-90% of peak.
struct GpuSpec {
  const char* name;       ///< canonical name, e.g. "H100-SXM-80GB"
  double memory_gb;       ///< advertised device memory, 10^9 bytes
  double bandwidth_gb_s;  ///< advertised peak memory bandwidth, 10^9 bytes/s
};

/// The built-in table of common cards, in a fixed order (NVIDIA datacenter,
/// NVIDIA workstation/consumer, AMD). Figures are nominal vendor numbers; see GpuSpec.
/// Never fails; the returned reference lives for the whole program.
inline const std::vector<GpuSpec>& gpu_table() {
  static const std::vector<GpuSpec> table = {
      {"V100-32GB", 32, 900},        // SXM2 and PCIe, HBM2
      {"T4", 16, 320},               // GDDR6
      {"A10", 24, 600},              // GDDR6
      {"A10G", 24, 600},             // AWS variant of A10
      {"A100-40GB", 40, 1555},       // HBM2
      {"A100-80GB", 80, 2039},       // SXM, HBM2e (the PCIe card is 1935 GB/s)
      {"H100-SXM-80GB", 80, 3350},   // HBM3
      {"H100-PCIe-80GB", 80, 2000},  // HBM2e
      {"H200", 141, 4800},           // HBM3e
      {"L4", 24, 300},               // GDDR6
      {"L40S", 48, 864},             // GDDR6
      {"RTX-A6000", 48, 768},        // GDDR6
      {"RTX-3090", 24, 936},         // GDDR6X
      {"RTX-4090", 24, 1008},        // GDDR6X
      {"MI300X", 192, 5300},         // AMD Instinct, HBM3
  };
  return table;
}

namespace detail {

/// Lower-case alphanumerics only, with vendor words dropped:
/// "NVIDIA H100-80GB" -> "h10080gb", "GeForce RTX 4090" -> "rtx4090".
inline std::string gpu_key(const std::string& name) {
  std::string key;
  for (unsigned char c : name)
    if (std::isalnum(c)) key += static_cast<char>(std::tolower(c));
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const char* prefix : {"nvidia", "amd", "geforce", "tesla", "instinct", "radeon"}) {
      const std::string p(prefix);
      if (key.size() > p.size() && key.compare(0, p.size(), p) == 0) {
        key.erase(0, p.size());
        stripped = true;
      }
    }
  }
  return key;
}

/// Extra spellings, already in gpu_key() form, mapped to canonical names.
/// A bare family name ("a100", "h100") means the larger / SXM variant.
struct GpuAlias {
  const char* key;
  const char* name;
};
inline const std::vector<GpuAlias>& gpu_aliases() {
  static const std::vector<GpuAlias> aliases = {
      {"v100", "V100-32GB"},           {"v10032g", "V100-32GB"},          {"v100sxm2", "V100-32GB"},
      {"a10040g", "A100-40GB"},        {"a100sxm40gb", "A100-40GB"},      {"a100pcie40gb", "A100-40GB"},
      {"a100", "A100-80GB"},           {"a10080g", "A100-80GB"},          {"a100sxm", "A100-80GB"},
      {"a100sxm80gb", "A100-80GB"},    {"h100", "H100-SXM-80GB"},         {"h10080gb", "H100-SXM-80GB"},
      {"h10080g", "H100-SXM-80GB"},    {"h100sxm", "H100-SXM-80GB"},      {"h100sxm5", "H100-SXM-80GB"},
      {"h100sxm580gb", "H100-SXM-80GB"}, {"h100pcie", "H100-PCIe-80GB"},  {"h100pcie80g", "H100-PCIe-80GB"},
      {"h200141gb", "H200"},           {"h200sxm", "H200"},               {"l40s48gb", "L40S"},
      {"l424gb", "L4"},                {"t416gb", "T4"},                  {"a6000", "RTX-A6000"},
      {"rtx3090", "RTX-3090"},         {"3090", "RTX-3090"},              {"rtx4090", "RTX-4090"},
      {"4090", "RTX-4090"},            {"mi300", "MI300X"},
  };
  return aliases;
}

/// a * b, or ArgumentError naming `what` if the product does not fit in 64 bits.
inline std::uint64_t checked_arg_mul(std::uint64_t a, std::uint64_t b, const char* what) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a)
    throw ArgumentError(msg(what, ": ", a, " x ", b, " overflows 64 bits (limit ",
                            std::numeric_limits<std::uint64_t>::max(), ")"));
  return a * b;
}

}  // namespace detail

/// Looks up a card by name, ignoring case, spaces, dashes and vendor words
/// ("NVIDIA", "GeForce", "Tesla", "AMD", "Instinct"), and accepting common
/// aliases: "h100" and "H100-80GB" are the SXM card, "a100" the 80 GB card,
/// "4090" the RTX 4090. Returns a pointer into gpu_table(), or nullptr when
/// nothing matches (never throws).
inline const GpuSpec* find_gpu(const std::string& name) {
  const std::string key = detail::gpu_key(name);
  if (key.empty()) return nullptr;
  const auto& table = gpu_table();
  for (const GpuSpec& g : table)
    if (detail::gpu_key(g.name) == key) return &g;
  for (const detail::GpuAlias& a : detail::gpu_aliases())
    if (key == a.key)
      for (const GpuSpec& g : table)
        if (std::string(g.name) == a.name) return &g;
  return nullptr;
}

/// What to plan for: the cache shape and element type, the context each
/// sequence reaches, and the device. Dimension words as in config.hpp.
struct PlanInput {
  int n_layers = 0;                     ///< L
  int n_kv_heads = 0;                   ///< Hk
  int head_dim = 0;                     ///< Dh
  DType dtype = DType::kF16;            ///< cache element type (of the keys, and of the values unless value_dtype)
  std::optional<DType> value_dtype;     ///< the values' type when it differs from the keys' (q8 and q4 included)
  std::uint64_t tokens_per_sequence = 0;  ///< positions each sequence holds at full context
  double memory_gb = 0;                 ///< device memory, 10^9 bytes
  std::uint64_t weight_bytes = 0;       ///< resident weight bytes; 0 = unknown (treated as none)
  /// Weight bytes one decode step reads, when fewer than weight_bytes (a mixture of
  /// experts reads K of its E experts: ModelConfig::active_weight_bytes); 0 = weight_bytes.
  std::uint64_t active_weight_bytes = 0;
  double bandwidth_gb_s = 0;            ///< memory bandwidth, 10^9 bytes/s; 0 = unknown
  /// Of the n_layers, those that attend to a window and keep only a ring of
  /// window_positions (ModelConfig::layer_window > 0: Gemma 3's and gpt-oss's local
  /// layers, or every layer with a sliding_window); 0 = every layer keeps every position.
  int window_layers = 0;
  std::uint64_t window_positions = 0;   ///< positions each of those layers keeps (its ring)

  /// Largest memory_gb accepted (10^9 GB = 10^18 bytes), so memory bytes fit in 64 bits.
  static constexpr double kMaxMemoryGb = 1e9;
  /// Largest bandwidth_gb_s accepted.
  static constexpr double kMaxBandwidthGbS = 1e9;

  /// Throws ArgumentError naming the first bad field, its value and the limit:
  /// n_layers, n_kv_heads, head_dim and tokens_per_sequence must be positive;
  /// memory_gb finite in (0, kMaxMemoryGb]; bandwidth_gb_s finite in [0, kMaxBandwidthGbS].
  void validate() const {
    auto positive = [](const char* name, long long v) {
      if (v <= 0) throw ArgumentError(detail::msg("PlanInput.", name, " = ", v, " must be positive (> 0)"));
    };
    positive("n_layers", n_layers);
    positive("n_kv_heads", n_kv_heads);
    positive("head_dim", head_dim);
    if (window_layers < 0 || window_layers > n_layers)
      throw ArgumentError(detail::msg("PlanInput.window_layers = ", window_layers, " must be in [0, n_layers = ", n_layers, "]"));
    if (window_layers > 0 && window_positions == 0)
      throw ArgumentError(detail::msg("PlanInput.window_positions = 0 must be positive with window_layers = ", window_layers));
    if (tokens_per_sequence == 0)
      throw ArgumentError("PlanInput.tokens_per_sequence = 0 must be positive (> 0)");
    if (!std::isfinite(memory_gb) || !(memory_gb > 0) || memory_gb > kMaxMemoryGb)
      throw ArgumentError(detail::msg("PlanInput.memory_gb = ", memory_gb, " must be in (0, ", kMaxMemoryGb, "]"));
    if (!std::isfinite(bandwidth_gb_s) || bandwidth_gb_s < 0 || bandwidth_gb_s > kMaxBandwidthGbS)
      throw ArgumentError(detail::msg("PlanInput.bandwidth_gb_s = ", bandwidth_gb_s, " must be in [0, ",
                                      kMaxBandwidthGbS, "] (0 = unknown)"));
  }
};

/// Sets in.window_layers and in.window_positions from `config`'s layers
/// (ModelConfig::layer_window: its local layers, or every layer with a
/// sliding_window): the rings KVCache builds with its default max_append for a
/// sequence of in.tokens_per_sequence positions. A layer whose ring would hold the
/// whole sequence counts as keeping every position. Only config.n_layers,
/// sliding_window, swa_pattern and local_window are read. Never throws.
inline void set_window_layers(PlanInput& in, const ModelConfig& config) {
  in.window_layers = 0;
  in.window_positions = 0;
  constexpr int kBlock = 16;  // the cache's block of positions (kv_cache.hpp)
  // Sequences beyond 2^30 positions: their rings are what 2^30 gives (no int overflow).
  const int capacity = static_cast<int>(std::min<std::uint64_t>(in.tokens_per_sequence, std::uint64_t{1} << 30));
  if (capacity <= 0) return;
  for (int l = 0; l < config.n_layers; ++l) {
    const int w = config.layer_window(l);
    if (w <= 0) continue;
    const std::uint64_t ring = static_cast<std::uint64_t>(
        detail::window_ring_blocks(w, std::min(capacity, detail::kDefaultWindowChunk), capacity, kBlock)) * kBlock;
    if (ring >= in.tokens_per_sequence) continue;  // the ring would hold the whole sequence
    in.window_layers += 1;
    in.window_positions = ring;  // one window for every windowed layer
  }
}

/// A PlanInput with the cache shape of `config` (n_layers, n_kv_heads,
/// head_dim, and the layers that keep a window ring: set_window_layers()),
/// tokens_per_sequence = config.max_seq_len and the given cache dtype;
/// memory_gb, weight_bytes and bandwidth_gb_s are left for the caller
/// (memory_gb must be set before plan_memory()). Never throws; plan_memory()
/// validates the result.
inline PlanInput plan_input_for(const ModelConfig& config, DType dtype) {
  PlanInput in;
  in.n_layers = config.n_layers;
  in.n_kv_heads = config.n_kv_heads;
  in.head_dim = config.head_dim;
  in.dtype = dtype;
  in.tokens_per_sequence = config.max_seq_len > 0 ? static_cast<std::uint64_t>(config.max_seq_len) : 0;
  set_window_layers(in, config);
  return in;
}

/// The result of plan_memory(). All byte counts are exact.
struct MemoryPlan {
  std::uint64_t bytes_per_token = 0;     ///< 2 * L * Hk * bytes(Dh cache values)
  std::uint64_t bytes_per_sequence = 0;  ///< bytes_per_token * tokens_per_sequence, less what window rings drop
  std::uint64_t weight_bytes = 0;        ///< as given (0 = unknown)
  std::uint64_t active_weight_bytes = 0; ///< read per decode step: as given, else weight_bytes
  std::uint64_t memory_bytes = 0;        ///< memory_gb * 10^9, rounded to nearest
  std::uint64_t kv_budget_bytes = 0;     ///< memory_bytes - weight_bytes, or 0 if weights do not fit
  std::uint64_t max_sequences = 0;       ///< floor(kv_budget_bytes / bytes_per_sequence)
  double decode_tokens_per_second_bound = 0;   ///< one sequence at full context; 0 if bandwidth unknown or none fits
  double batched_tokens_per_second_bound = 0;  ///< all max_sequences together; 0 if bandwidth unknown or none fits

  /// True when the weights fit in memory (and so kv_budget_bytes means something).
  bool weights_fit() const { return weight_bytes <= memory_bytes; }
};

/// Upper bound on aggregate decode tokens/s for `batch` sequences whose caches
/// hold `kv_bytes_per_sequence` bytes each: every step reads all weights once
/// and every cache once, producing `batch` tokens, so the bound is
/// batch * bandwidth / (weight_bytes + batch * kv_bytes_per_sequence).
/// Returns 0 when bandwidth_gb_s is 0 (unknown), batch is 0, or nothing is read.
/// Throws ArgumentError if bandwidth_gb_s is negative or not finite.
inline double decode_bound_tokens_per_second(double bandwidth_gb_s, std::uint64_t weight_bytes,
                                             std::uint64_t kv_bytes_per_sequence, std::uint64_t batch) {
  if (!std::isfinite(bandwidth_gb_s) || bandwidth_gb_s < 0)
    throw ArgumentError(detail::msg("bandwidth_gb_s = ", bandwidth_gb_s, " must be finite and >= 0"));
  // Doubles here: B * KV can exceed 2^64 for absurd batches, and the result is an estimate anyway.
  const double bytes_per_step =
      static_cast<double>(weight_bytes) + static_cast<double>(batch) * static_cast<double>(kv_bytes_per_sequence);
  if (bandwidth_gb_s == 0 || batch == 0 || bytes_per_step == 0) return 0.0;
  return static_cast<double>(batch) * bandwidth_gb_s * 1e9 / bytes_per_step;
}

/// KV cache bytes one token occupies: 2 * n_layers * n_kv_heads * dtype_bytes_for(dtype, head_dim).
/// q8 rounds each head vector up to whole groups of 32 (34 bytes per group), as
/// a cache that quantises per head vector stores it; for Dh a multiple of 32
/// this equals ModelConfig::kv_bytes_per_token. Throws ArgumentError if a
/// dimension is not positive or the product overflows 64 bits.
inline std::uint64_t kv_bytes_per_token(int n_layers, int n_kv_heads, int head_dim, DType dtype) {
  auto positive = [](const char* name, int v) {
    if (v <= 0) throw ArgumentError(detail::msg(name, " = ", v, " must be positive (> 0)"));
  };
  positive("n_layers", n_layers);
  positive("n_kv_heads", n_kv_heads);
  positive("head_dim", head_dim);
  const std::uint64_t per_head = dtype_bytes_for(dtype, static_cast<std::uint64_t>(head_dim));
  std::uint64_t b = detail::checked_arg_mul(2ull * static_cast<std::uint64_t>(n_layers),
                                        static_cast<std::uint64_t>(n_kv_heads), "2 * n_layers * n_kv_heads");
  return detail::checked_arg_mul(b, per_head, "bytes per token");
}

/// The same with keys stored as `dtype` and values as `value_dtype`:
/// n_layers * n_kv_heads * (dtype_bytes_for(dtype, head_dim) + dtype_bytes_for(value_dtype, head_dim)).
/// Throws ArgumentError if a dimension is not positive or the product overflows 64 bits.
inline std::uint64_t kv_bytes_per_token(int n_layers, int n_kv_heads, int head_dim, DType dtype, DType value_dtype) {
  kv_bytes_per_token(n_layers, n_kv_heads, head_dim, dtype);  // the checks, and keys alone fit
  const std::uint64_t per_head = dtype_bytes_for(dtype, static_cast<std::uint64_t>(head_dim)) +
                                 dtype_bytes_for(value_dtype, static_cast<std::uint64_t>(head_dim));
  const std::uint64_t b = detail::checked_arg_mul(static_cast<std::uint64_t>(n_layers),
                                                  static_cast<std::uint64_t>(n_kv_heads), "n_layers * n_kv_heads");
  return detail::checked_arg_mul(b, per_head, "bytes per token");
}

/// Plans KV cache capacity for `in` (see the formulas at the top of this file).
/// If the weights exceed memory the plan is still returned, with
/// kv_budget_bytes = 0 and max_sequences = 0, so callers can report it.
/// The tokens/s bounds are 0 when bandwidth is unknown or no sequence fits;
/// with weight_bytes = 0 they count KV reads only (an even looser bound).
/// Throws ArgumentError (from PlanInput::validate() or on 64-bit overflow of a byte count).
inline MemoryPlan plan_memory(const PlanInput& in) {
  in.validate();
  MemoryPlan p;
  p.bytes_per_token = in.value_dtype ? kv_bytes_per_token(in.n_layers, in.n_kv_heads, in.head_dim, in.dtype, *in.value_dtype)
                                     : kv_bytes_per_token(in.n_layers, in.n_kv_heads, in.head_dim, in.dtype);
  if (in.window_layers == 0) {
    p.bytes_per_sequence = detail::checked_arg_mul(p.bytes_per_token, in.tokens_per_sequence, "bytes per sequence");
  } else {  // bytes_per_token is a whole multiple of n_layers
    const std::uint64_t per_layer = p.bytes_per_token / static_cast<std::uint64_t>(in.n_layers);
    const std::uint64_t ring = std::min(in.tokens_per_sequence, in.window_positions);
    const std::uint64_t full = detail::checked_arg_mul(static_cast<std::uint64_t>(in.n_layers - in.window_layers),
                                                       in.tokens_per_sequence, "layer positions");
    const std::uint64_t rings = detail::checked_arg_mul(static_cast<std::uint64_t>(in.window_layers), ring, "layer positions");
    if (full > std::numeric_limits<std::uint64_t>::max() - rings)
      throw ArgumentError(detail::msg("layer positions: ", full, " + ", rings, " overflows 64 bits"));
    p.bytes_per_sequence = detail::checked_arg_mul(per_layer, full + rings, "bytes per sequence");
  }
  p.weight_bytes = in.weight_bytes;
  if (in.active_weight_bytes > in.weight_bytes)
    throw ArgumentError(detail::msg("PlanInput.active_weight_bytes = ", in.active_weight_bytes, " exceeds weight_bytes = ",
                                    in.weight_bytes));
  p.active_weight_bytes = in.active_weight_bytes ? in.active_weight_bytes : in.weight_bytes;
  // memory_gb <= kMaxMemoryGb keeps this below 2^63, so the conversion is exact to the nearest byte.
  p.memory_bytes = static_cast<std::uint64_t>(std::llround(in.memory_gb * 1e9));
  p.kv_budget_bytes = p.weights_fit() ? p.memory_bytes - p.weight_bytes : 0;
  p.max_sequences = p.kv_budget_bytes / p.bytes_per_sequence;
  // Memory holds every weight; a step reads the active ones (for a batch, at least
  // those: its sequences may all pick the same experts).
  if (p.max_sequences > 0) {
    p.decode_tokens_per_second_bound =
        decode_bound_tokens_per_second(in.bandwidth_gb_s, p.active_weight_bytes, p.bytes_per_sequence, 1);
    p.batched_tokens_per_second_bound =
        decode_bound_tokens_per_second(in.bandwidth_gb_s, p.active_weight_bytes, p.bytes_per_sequence, p.max_sequences);
  }
  return p;
}

/// Decimal byte size with two decimals and the largest unit keeping the value
/// below 1000: 512 -> "512 B", 327680 -> "327.68 kB", 2621440000 -> "2.62 GB".
/// Units are B, kB, MB, GB, TB, PB, EB (powers of 10^3). Never throws.
inline std::string format_bytes(std::uint64_t bytes) {
  if (bytes < 1000) return std::to_string(bytes) + " B";
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  // Step up while the value would print as 1000.00 or more (999.995 rounds up).
  while (v >= 999.995 && unit < 6) {
    v /= 1000.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  return buf;
}

/// An integer with comma thousands separators: 327680 -> "327,680", 0 -> "0". Never throws.
inline std::string format_count(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  const std::size_t lead = digits.size() % 3 == 0 ? 3 : digits.size() % 3;
  out.append(digits, 0, lead);
  for (std::size_t i = lead; i < digits.size(); i += 3) {
    out += ',';
    out.append(digits, i, 3);
  }
  return out;
}

}  // namespace kvd
