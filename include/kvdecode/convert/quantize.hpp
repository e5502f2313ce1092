// Quantizing a model into a GGUF file (kvdecode-quantize): read a llama2.c
// checkpoint, a GGUF file of any supported type or a Hugging Face folder, choose
// each tensor's storage type the way llama.cpp's llama_tensor_get_type does, store
// every row with the reference quantizers of weights/blocks.hpp and write a GGUF v3
// file that kvdecode and llama.cpp both load.
//
// Type choice (choose_tensor_type, a pure function of the scheme, the tensor's name
// and shape and a few model facts):
//   * 1-D tensors (norms, biases, rope_freqs) stay f32.
//   * F32 / F16 / BF16: every matrix in that type.
//   * The classifier (output.weight, or token_embd.weight when the model has no
//     separate output.weight) gets q6_K, or q8_0 when the scheme is Q8_0 or its row
//     is not a multiple of 256.
//   * Q2_K: attn_v q4_K (q3_K with fewer than 4 query heads per KV head),
//     attn_output and ffn_down q3_K.
//   * Q3_K_M: attn_v q5_K on layers 0 and 1, else q4_K; attn_output q4_K; ffn_down
//     q5_K on the first 1/16 of the layers, else q4_K.
//   * Q4_K_M, Q5_K_M: attn_v and ffn_down q6_K on the layers use_more_bits picks
//     (the first 1/8, the last 1/8 and every third between).
//   * Q3_K, Q4_K, Q5_K ("plain"), Q6_K, IQ4_NL, IQ4_XS, MXFP4 and the legacy types:
//     every matrix in that type, the classifier as above.
//   * A row length that is not a multiple of the chosen type's block falls back as
//     llama.cpp does: q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, iq4_xs -> iq4_nl;
//     q2_K / q3_K -> q4_0 (llama.cpp uses iq4_nl there; kvdecode keeps q4_0, which
//     has its 4.5 bits and block of 32, as before it stored iq4_nl); and if the row
//     is not a multiple of 32 either -> f16.
//
// Layout: tensors are written in GGUF's llama convention (ne = [cols, rows], RoPE on
// adjacent pairs). llama2.c checkpoints already rotate adjacent pairs; Hugging Face
// Llama folders rotate halves, so their q and k rows are permuted per head as
// llama.cpp's convert_hf_to_gguf.py permutes them (row h*Dh + 2i + j of the output
// is row h*Dh + j*Dh/2 + i of the input). Which tensors are written, their names
// and their order are the rows of architecture.hpp (kGgufFileLayerOrder: llama.cpp's
// order), the architecture name its table's row for the model's flags.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kvdecode/weights/architecture.hpp"
#include "kvdecode/io/checkpoint.hpp"
#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/io/gguf.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/io/hf_model.hpp"
#include "kvdecode/io/model_format.hpp"
#include "kvdecode/text/llama2c_tokenizer.hpp"
#include "kvdecode/text/tokenizer_loader.hpp"
#include "kvdecode/convert/vocab_writer.hpp"
#include "kvdecode/weights/weight_type.hpp"
#include "kvdecode/weights/model_weights.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace kvd {

/// What kvdecode-quantize can produce (a storage type, possibly with llama.cpp's mix).
enum class QuantScheme {
  kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ2_K,
  kQ3_K, kQ3_K_M, kQ4_K, kQ4_K_M, kQ5_K, kQ5_K_M, kQ6_K, kIQ4_NL, kIQ4_XS, kMXFP4,
};

/// llama.cpp's `enum llama_ftype`, the value of general.file_type. Frozen: on disk.
enum class LlamaFileType : std::uint32_t {
  kAllF32 = 0,
  kMostlyF16 = 1,
  kMostlyQ4_0 = 2,
  kMostlyQ4_1 = 3,
  kMostlyQ8_0 = 7,
  kMostlyQ5_0 = 8,
  kMostlyQ5_1 = 9,
  kMostlyQ2_K = 10,
  kMostlyQ3_K_S = 11,
  kMostlyQ3_K_M = 12,
  kMostlyQ3_K_L = 13,
  kMostlyQ4_K_S = 14,
  kMostlyQ4_K_M = 15,
  kMostlyQ5_K_S = 16,
  kMostlyQ5_K_M = 17,
  kMostlyQ6_K = 18,
  kMostlyIQ4_NL = 25,
  kMostlyIQ4_XS = 30,
  kMostlyMXFP4 = 38,  ///< mainline llama.cpp's code for MXFP4 (its name there: MXFP4_MOE); ik_llama.cpp's too
  kMostlyBF16 = 32,
};

namespace detail {
struct QuantSchemeInfo {
  QuantScheme scheme;
  const char* name;
  WeightType base;
  LlamaFileType file_type;
};
inline const std::vector<QuantSchemeInfo>& quant_schemes() {
  // The plain K types have no llama_ftype of their own: they carry the _S code,
  // the nearest (llama.cpp reads general.file_type for display only).
  static const std::vector<QuantSchemeInfo> k = {
      {QuantScheme::kF32, "F32", WeightType::kF32, LlamaFileType::kAllF32},
      {QuantScheme::kF16, "F16", WeightType::kF16, LlamaFileType::kMostlyF16},
      {QuantScheme::kBF16, "BF16", WeightType::kBF16, LlamaFileType::kMostlyBF16},
      {QuantScheme::kQ8_0, "Q8_0", WeightType::kQ8_0, LlamaFileType::kMostlyQ8_0},
      {QuantScheme::kQ4_0, "Q4_0", WeightType::kQ4_0, LlamaFileType::kMostlyQ4_0},
      {QuantScheme::kQ4_1, "Q4_1", WeightType::kQ4_1, LlamaFileType::kMostlyQ4_1},
      {QuantScheme::kQ5_0, "Q5_0", WeightType::kQ5_0, LlamaFileType::kMostlyQ5_0},
      {QuantScheme::kQ5_1, "Q5_1", WeightType::kQ5_1, LlamaFileType::kMostlyQ5_1},
      {QuantScheme::kQ2_K, "Q2_K", WeightType::kQ2_K, LlamaFileType::kMostlyQ2_K},
      {QuantScheme::kQ3_K, "Q3_K", WeightType::kQ3_K, LlamaFileType::kMostlyQ3_K_S},
      {QuantScheme::kQ3_K_M, "Q3_K_M", WeightType::kQ3_K, LlamaFileType::kMostlyQ3_K_M},
      {QuantScheme::kQ4_K, "Q4_K", WeightType::kQ4_K, LlamaFileType::kMostlyQ4_K_S},
      {QuantScheme::kQ4_K_M, "Q4_K_M", WeightType::kQ4_K, LlamaFileType::kMostlyQ4_K_M},
      {QuantScheme::kQ5_K, "Q5_K", WeightType::kQ5_K, LlamaFileType::kMostlyQ5_K_S},
      {QuantScheme::kQ5_K_M, "Q5_K_M", WeightType::kQ5_K, LlamaFileType::kMostlyQ5_K_M},
      {QuantScheme::kQ6_K, "Q6_K", WeightType::kQ6_K, LlamaFileType::kMostlyQ6_K},
      {QuantScheme::kIQ4_NL, "IQ4_NL", WeightType::kIQ4_NL, LlamaFileType::kMostlyIQ4_NL},
      {QuantScheme::kIQ4_XS, "IQ4_XS", WeightType::kIQ4_XS, LlamaFileType::kMostlyIQ4_XS},
      {QuantScheme::kMXFP4, "MXFP4", WeightType::kMXFP4, LlamaFileType::kMostlyMXFP4},
  };
  return k;
}
inline const QuantSchemeInfo& quant_scheme_info(QuantScheme s) {
  for (const auto& i : quant_schemes())
    if (i.scheme == s) return i;
  throw ArgumentError(msg("undefined QuantScheme ", static_cast<int>(s)));
}
}  // namespace detail

/// The accepted scheme names, comma-separated ("F32, F16, ..."). Never fails.
inline std::string quant_scheme_names() {
  std::string s;
  for (const auto& i : detail::quant_schemes()) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

/// The scheme called `name` (case-insensitive: "Q4_K_M", "q8_0"). Throws
/// ArgumentError naming the text and listing the accepted names.
inline QuantScheme parse_quant_scheme(const std::string& name) {
  std::string up = name;
  for (auto& c : up) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  for (const auto& i : detail::quant_schemes())
    if (up == i.name) return i.scheme;
  throw ArgumentError(detail::msg("unknown quantization type '", name, "' (accepted: ", quant_scheme_names(), ")"));
}

/// "Q4_K_M" etc. Throws ArgumentError for a value outside the enum.
inline const char* quant_scheme_name(QuantScheme s) { return detail::quant_scheme_info(s).name; }
/// The scheme's main storage type (q4_K for Q4_K_M). Throws as quant_scheme_name.
inline WeightType quant_scheme_type(QuantScheme s) { return detail::quant_scheme_info(s).base; }
/// The general.file_type written for the scheme. Throws as quant_scheme_name.
inline LlamaFileType quant_scheme_file_type(QuantScheme s) { return detail::quant_scheme_info(s).file_type; }

/// The kind of a llama-convention tensor name and its layer ("blk.3.attn_v.weight"
/// -> kind "attn_v", layer 3; "output.weight" -> "output", -1). Unknown names give
/// their stem ("rope_freqs"). Never fails.
struct TensorKind {
  std::string kind;
  int layer = -1;
};
inline TensorKind tensor_kind(const std::string& name) {
  TensorKind k;
  std::string rest = name;
  if (rest.rfind("blk.", 0) == 0) {
    const std::size_t dot = rest.find('.', 4);
    if (dot != std::string::npos) {
      const std::string num = rest.substr(4, dot - 4);
      bool digits = !num.empty() && num.size() < 8;
      for (char c : num) digits = digits && c >= '0' && c <= '9';
      if (digits) {
        k.layer = std::stoi(num);
        rest = rest.substr(dot + 1);
      }
    }
  }
  const std::size_t dot = rest.find('.');
  k.kind = dot == std::string::npos ? rest : rest.substr(0, dot);
  return k;
}

/// What the type choice needs to know of the model.
struct TypeChoiceContext {
  int n_layers = 1;       ///< blocks (attn_v / ffn_down counts)
  int n_heads = 1;        ///< query heads
  int n_kv_heads = 1;     ///< key/value heads (n_heads / n_kv_heads = llama.cpp's n_gqa)
  bool has_output = true; ///< the file holds output.weight (else token_embd is the classifier)
};

namespace detail {
/// The kind of a row's GGUF name (TensorId::kWv -> "attn_v"). Never fails.
inline std::string gguf_kind(TensorId id) { return tensor_kind(tensor_spec(id).gguf).kind; }

/// llama.cpp's use_more_bits: the first 1/8 of the layers, the last 1/8, and every third between.
inline bool use_more_bits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}
}  // namespace detail

/// The storage type of tensor `name` with shape `ne` (ne[0] = row length) under
/// `scheme` (see the rules at the top of this file). Pure; never fails for a
/// non-empty ne. The result always divides ne[0] into whole blocks.
inline WeightType choose_tensor_type(QuantScheme scheme, const std::string& name, const std::vector<std::uint64_t>& ne,
                                     const TypeChoiceContext& ctx) {
  std::uint64_t rows = 1;
  for (std::size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
  const bool is_norm = name.size() >= 12 && name.compare(name.size() - 12, 12, "_norm.weight") == 0;
  // Biases stay f32 whatever their shape (llama.cpp quantizes only ".weight" tensors):
  // gpt-oss's expert biases are 2-D ([F, E]).
  const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  if (ne.size() < 2 || rows <= 1 || is_norm || is_bias) return WeightType::kF32;
  const WeightType base = quant_scheme_type(scheme);
  if (weight_type_traits(base).block_size == 1) return base;  // F32, F16, BF16: no mix
  const TensorKind k = tensor_kind(name);
  const std::uint64_t nx = ne[0];
  const int L = std::max(ctx.n_layers, 1), layer = std::max(k.layer, 0);
  const int n_gqa = ctx.n_kv_heads > 0 ? ctx.n_heads / ctx.n_kv_heads : 1;
  const bool m_mix = scheme == QuantScheme::kQ4_K_M || scheme == QuantScheme::kQ5_K_M;
  WeightType t = base;
  // llama.cpp keeps the router of a mixture of experts in f32.
  if (k.kind == detail::gguf_kind(TensorId::kRouter)) return WeightType::kF32;
  if (name == tensor_spec(TensorId::kClassifier).gguf ||
      (!ctx.has_output && name == tensor_spec(TensorId::kTokenEmbedding).gguf)) {
    if (nx % detail::kQK_K != 0) t = WeightType::kQ8_0;
    else if (base != WeightType::kQ8_0) t = WeightType::kQ6_K;
  } else if (k.kind == detail::gguf_kind(TensorId::kWv)) {
    if (scheme == QuantScheme::kQ2_K) t = n_gqa >= 4 ? WeightType::kQ4_K : WeightType::kQ3_K;
    else if (scheme == QuantScheme::kQ3_K_M) t = layer < 2 ? WeightType::kQ5_K : WeightType::kQ4_K;
    else if (m_mix && detail::use_more_bits(layer, L)) t = WeightType::kQ6_K;
  } else if (k.kind == detail::gguf_kind(TensorId::kW2)) {
    if (scheme == QuantScheme::kQ2_K) t = WeightType::kQ3_K;
    else if (scheme == QuantScheme::kQ3_K_M) t = layer < L / 16 ? WeightType::kQ5_K : WeightType::kQ4_K;
    else if (m_mix && detail::use_more_bits(layer, L)) t = WeightType::kQ6_K;
  } else if (k.kind == detail::gguf_kind(TensorId::kWo)) {
    if (scheme == QuantScheme::kQ2_K) t = WeightType::kQ3_K;
    else if (scheme == QuantScheme::kQ3_K_M) t = WeightType::kQ4_K;
  }
  if (nx % weight_type_traits(t).block_size != 0) {
    t = detail::block_type_fallback(t);
    if (nx % weight_type_traits(t).block_size != 0) t = WeightType::kF16;
  }
  return t;
}

/// The bytes of a model of config `c` stored as `scheme`, by storage type: every
/// tensor of the GGUF llama layout, each of the type choose_tensor_type() gives it
/// (norms, biases and RoPE factors f32). What kvdecode-plan --weight-dtype uses.
struct SchemeBytes {
  std::uint64_t total = 0;
  std::vector<std::pair<WeightType, std::uint64_t>> by_type;  ///< in order of first use in the GGUF file
  std::uint64_t experts = 0;  ///< of total, the expert tensors' (ModelConfig::active_weight_bytes)
};

/// Throws ConfigError if c is invalid or a byte count overflows 64 bits.
inline SchemeBytes scheme_weight_bytes(const ModelConfig& c, QuantScheme scheme) {
  c.validate();
  TypeChoiceContext ctx;
  ctx.n_layers = c.n_layers; ctx.n_heads = c.n_heads; ctx.n_kv_heads = c.n_kv_heads;
  ctx.has_output = !c.shared_classifier;
  SchemeBytes out;
  auto add = [&](WeightType t, std::uint64_t rows, std::uint64_t cols) {
    const std::uint64_t b = detail::checked_mul(weight_row_bytes(t, cols), rows, "scheme_weight_bytes");
    out.total = detail::checked_add(out.total, b, "scheme_weight_bytes");
    for (auto& e : out.by_type)
      if (e.first == t) { e.second += b; return; }
    out.by_type.emplace_back(t, b);
  };
  // Every tensor of the GGUF file kvdecode-quantize writes, in its order (rope_freqs,
  // which a config does not tell, excluded).
  for_each_gguf_file_tensor(c, [&](const TensorSpec& s, int layer) {
    if (s.presence == Presence::kIfStored) return;
    const std::uint64_t rows = tensor_rows(s, c), cols = tensor_cols(s, c);
    const std::uint64_t before = out.total;
    if (s.matrix)
      add(choose_tensor_type(scheme, gguf_tensor_name(s, layer, c.attn_sinks), {cols, rows}, ctx), rows, cols);
    else
      add(WeightType::kF32, 1, rows);
    if (s.experts != Dim::kOne) out.experts += out.total - before;
  });
  return out;
}

/// One tensor as written, for progress and the summary.
struct QuantizedTensorReport {
  std::string name;
  std::vector<std::uint64_t> ne;
  WeightType source_type = WeightType::kF32;
  WeightType type = WeightType::kF32;
  std::uint64_t bytes = 0;
  double rel_rmse = 0;  ///< sqrt(sum (x - q(x))^2 / sum x^2) over the tensor (0 for an all-zero tensor)
  std::uint64_t n_elements() const {
    std::uint64_t n = 1;
    for (auto d : ne) n *= d;
    return n;
  }
};

/// Options of quantize_model().
struct QuantizeOptions {
  /// The vocabulary written as tokenizer.ggml.* for a checkpoint or Hugging Face
  /// input: a Hugging Face tokenizer.json (any name) or its folder, a llama2.c
  /// tokenizer.bin, or a GGUF file whose tokenizer.* keys are copied ("" = none, or
  /// for a Hugging Face folder its own tokenizer.json when it has one). Ignored (the
  /// vocabulary is copied) for GGUF input.
  std::string tokenizer;
  int threads = 0;  ///< OpenMP threads for quantizing rows; 0 = OpenMP's default. Bytes are the same for any count.
  /// A Hugging Face input holding tensors its config does not use is refused unless
  /// this is set; they are then left out of the output and named in QuantizeResult::unused_tensors.
  bool allow_unused_tensors = false;
  /// Called after each tensor is quantized (progress output).
  std::function<void(const QuantizedTensorReport&)> progress;
};

/// What quantize_model() wrote.
struct QuantizeResult {
  std::string input_format;  ///< "gguf", "llama2.c legacy", "llama2.c v1", "hf"
  std::vector<QuantizedTensorReport> tensors;
  std::uint64_t file_bytes = 0;
  bool wrote_vocabulary = false;
  std::vector<std::string> unused_tensors;  ///< Hugging Face input tensors left out (allow_unused_tensors)
  /// Bits per weight over the matrices (2-D tensors): their bytes * 8 / their values.
  double bits_per_weight() const {
    std::uint64_t b = 0, n = 0;
    for (const auto& t : tensors)
      if (t.ne.size() >= 2) {
        b += t.bytes;
        n += t.n_elements();
      }
    return n ? 8.0 * static_cast<double>(b) / static_cast<double>(n) : 0.0;
  }
};

namespace detail {

/// A tensor to write: its GGUF name and shape and a reader of its rows as floats.
struct QuantSource {
  std::string name;
  std::vector<std::uint64_t> ne;
  WeightType type;
  std::function<void(std::uint64_t row, float* out)> row;
};

/// The GGUF architecture that expresses config c, as llama.cpp's converter names it:
/// "llama" (no biases, no q/k norms; RoPE on adjacent pairs, HF halves permuted),
/// "qwen2" (q/k/v biases) or "qwen3" (q/k norms), both rotating halves ("NEOX") as stored.
/// Throws ConfigError for what none of them expresses (both biases and norms, a qwen
/// shape rotating adjacent pairs, a sliding window).
inline std::string gguf_arch_for(const ModelConfig& c) {
  if (c.sliding_window != 0)
    throw ConfigError(msg("cannot write this model as GGUF: sliding_window = ", c.sliding_window, " (GGUF ",
                          supported_architectures(true), " have no sliding window)"));
  const Architecture* arch = gguf_architecture_for(c);
  if (!arch && c.qkv_bias && c.qk_norm)
    throw ConfigError("cannot write this model as GGUF: it has both q/k/v biases (qwen2) and q/k norms (qwen3)");
  if (!arch)
    throw ConfigError(msg("cannot write this model as GGUF: no architecture of ", supported_architectures(true),
                          " has qkv_bias = ", c.qkv_bias, " and qk_norm = ", c.qk_norm));
  // An architecture that rotates adjacent pairs takes halves permuted (sources_from_weights);
  // one that rotates halves cannot express adjacent pairs.
  // Gemma's block is one bundle in GGUF; anything else of it is not expressible.
  if (arch->gemma != c.embed_scale || arch->gemma != (c.ffn_activation == Activation::kGeluTanh) ||
      (arch->gemma || arch->gpt_oss) != (c.swa_pattern > 0) ||
      (!arch->gemma && !arch->gpt_oss && (c.rope_scale != 1.0 || c.query_pre_attn_scalar != 0)))
    throw ConfigError(msg("cannot write this model as GGUF ", arch->gguf_name, ": post_norms = ", c.post_norms,
                          ", embed_scale = ", c.embed_scale, ", ffn_activation = ", activation_name(c.ffn_activation),
                          ", swa_pattern = ", c.swa_pattern, ", rope_scale = ", c.rope_scale, " and query_pre_attn_scalar = ",
                          c.query_pre_attn_scalar, " are not one architecture's"));
  if (arch->gemma && (c.attention_scalar() != gguf_gemma_attention_scalar(c.n_layers, c.d_model, c.n_heads, c.head_dim) ||
                      c.rope_theta_local != 10000.0))
    throw ConfigError(msg("cannot write this model as GGUF ", arch->gguf_name, ": query_pre_attn_scalar = ",
                          c.attention_scalar(), " and rope_theta_local = ", c.rope_theta_local, " (GGUF implies ",
                          gguf_gemma_attention_scalar(c.n_layers, c.d_model, c.n_heads, c.head_dim), " and 10000)"));
  // gpt-oss's block is one bundle too, its layer pattern and RoPE fixed.
  if (arch->gpt_oss != (c.attn_out_bias && c.moe_bias && c.ffn_activation == Activation::kSwigluOai) ||
      arch->gpt_oss != (c.rope_scaling == RopeScaling::kYarn || c.rope_scale_local) ||
      (arch->gpt_oss && (c.swa_pattern != arch->swa_pattern || c.rope_theta_local != c.rope_theta || !c.rope_scale_local ||
                         c.query_pre_attn_scalar != 0)))
    throw ConfigError(msg("cannot write this model as GGUF ", arch->gguf_name, ": attn_sinks = ", c.attn_sinks,
                          ", attn_out_bias = ", c.attn_out_bias, ", moe_bias = ", c.moe_bias, ", ffn_activation = ",
                          activation_name(c.ffn_activation), ", swa_pattern = ", c.swa_pattern, ", rope_scale_local = ",
                          c.rope_scale_local, " and YaRN = ", c.rope_scaling == RopeScaling::kYarn,
                          " are not one architecture's (gpt-oss: all of its options, pattern 2, one RoPE base)"));
  if (c.rope_scaling == RopeScaling::kYarn && !c.yarn_truncate)
    throw ConfigError(msg("cannot write this model as GGUF ", arch->gguf_name, ": yarn_truncate = false (Hugging Face's ",
                          "rope_scaling.truncate false): GGUF has no key for it, and ggml rounds YaRN's ramp to whole pairs"));
  if (arch->gguf_rope == RopeStyle::kHalves && c.rope_style != RopeStyle::kHalves)
    throw ConfigError(msg("cannot write this model as GGUF ", arch->gguf_name,
                          ": it rotates adjacent pairs, the architecture rotates halves"));
  return arch->gguf_name;
}

/// GGUF tensors from ModelWeights<float> for gguf_arch_for(config): for llama, q/k rows
/// permuted from halves to adjacent pairs when the weights rotate halves; qwen2/qwen3
/// keep their rows and add the biases or the q/k norms. Throws ConfigError as
/// gguf_arch_for does, or for partial RoPE on halves under llama.
inline std::vector<QuantSource> sources_from_weights(std::shared_ptr<const ModelWeights<float>> w) {
  const ModelConfig& c = w->config;
  const Architecture* arch = find_gguf_architecture(gguf_arch_for(c));
  const bool halves = arch->gguf_rope == RopeStyle::kAdjacent && c.rope_style == RopeStyle::kHalves;
  if (halves && c.rope_dim != 0 && c.rope_dim != c.head_dim)
    throw ConfigError(msg("cannot permute q/k for partial RoPE (rope_dim ", c.rope_dim, " < head_dim ", c.head_dim, ")"));
  std::vector<QuantSource> out;
  auto mat = [&](const std::string& name, const std::vector<std::uint64_t>& ne, const WeightMatrix* m, bool permute) {
    const long Dh = c.head_dim;
    out.push_back({name, ne, m->type(),
                   [w, m, permute, Dh](std::uint64_t r, float* y) {
                     long src = static_cast<long>(r);
                     if (permute) {  // output row h*Dh + 2i + j <- input row h*Dh + j*Dh/2 + i
                       const long h = src / Dh, within = src % Dh, i = within / 2, j = within % 2;
                       src = h * Dh + j * (Dh / 2) + i;
                     }
                     m->dequantize_row(src, y);
                   }});
  };
  // A vector as one row, or an expert vector as E rows of size / E ([size / E, E]).
  auto vec = [&](const std::string& name, const std::vector<std::uint64_t>& ne, const Vector<float>* v) {
    out.push_back({name, ne, WeightType::kF32, [w, v, n = ne[0]](std::uint64_t r, float* y) {
                     std::copy(v->data() + r * n, v->data() + (r + 1) * n, y);
                   }});
  };
  for_each_gguf_file_tensor(c, [&](const TensorSpec& s, int layer) {
    const auto slot = tensor_slot(*w, s.id, layer);
    const std::string name = gguf_tensor_name(s, layer, c.attn_sinks);
    if (slot.matrix)
      mat(name, gguf_tensor_ne(s, c), slot.matrix, halves && (s.id == TensorId::kWq || s.id == TensorId::kWk));
    else if (s.presence != Presence::kIfStored || slot.vector->size() != 0)
      vec(name, s.presence == Presence::kIfStored ? std::vector<std::uint64_t>{static_cast<std::uint64_t>(slot.vector->size())}
                                                  : gguf_tensor_ne(s, c),
          slot.vector);
  });
  return out;
}

/// The <arch>.* keys for config c under gguf_arch_for(c) (and general.*). Throws as it does.
inline void write_model_keys(GGUFWriter& g, const ModelConfig& c, const std::string& name) {
  const std::string arch = gguf_arch_for(c);
  auto key = [&](const char* k) { return arch + "." + k; };
  g.set_string("general.architecture", arch);
  g.set_string("general.name", name);
  g.set_u32(key("context_length"), static_cast<std::uint32_t>(c.max_seq_len));
  g.set_u32(key("embedding_length"), static_cast<std::uint32_t>(c.d_model));
  g.set_u32(key("block_count"), static_cast<std::uint32_t>(c.n_layers));
  g.set_u32(key(c.moe() ? "expert_feed_forward_length" : "feed_forward_length"), static_cast<std::uint32_t>(c.hidden_dim));
  if (c.moe()) {
    g.set_u32(key("expert_count"), static_cast<std::uint32_t>(c.n_experts));
    g.set_u32(key("expert_used_count"), static_cast<std::uint32_t>(c.n_experts_used));
  }
  g.set_u32(key("attention.head_count"), static_cast<std::uint32_t>(c.n_heads));
  g.set_u32(key("attention.head_count_kv"), static_cast<std::uint32_t>(c.n_kv_heads));
  if (c.head_dim * c.n_heads != c.d_model) {
    g.set_u32(key("attention.key_length"), static_cast<std::uint32_t>(c.head_dim));
    g.set_u32(key("attention.value_length"), static_cast<std::uint32_t>(c.head_dim));
  }
  g.set_f32(key("attention.layer_norm_rms_epsilon"), static_cast<float>(c.norm_eps));
  g.set_f32(key("rope.freq_base"), static_cast<float>(c.rope_theta));
  g.set_u32(key("rope.dimension_count"), static_cast<std::uint32_t>(c.rotary_dim()));
  g.set_u32(key("vocab_size"), static_cast<std::uint32_t>(c.vocab_size));
  if (c.post_norms) {  // gemma3 (gguf_arch_for checked the rest of Gemma's block)
    g.set_u32(key("attention.sliding_window"), static_cast<std::uint32_t>(c.local_window));
    if (c.swa_pattern != find_gguf_architecture(arch)->swa_pattern)
      g.set_u32(key("attention.sliding_window_pattern"), static_cast<std::uint32_t>(c.swa_pattern));
    if (c.rope_scale != 1.0) {
      g.set_string(key("rope.scaling.type"), "linear");
      g.set_f32(key("rope.scaling.factor"), static_cast<float>(c.rope_scale));
    }
  }
  if (c.attn_sinks) {  // gpt-oss (gguf_arch_for checked the rest of its block)
    g.set_u32(key("attention.sliding_window"), static_cast<std::uint32_t>(c.local_window));
    if (c.rope_scaling == RopeScaling::kYarn) {
      g.set_string(key("rope.scaling.type"), "yarn");
      g.set_f32(key("rope.scaling.factor"), static_cast<float>(c.rope_scale));
      g.set_u32(key("rope.scaling.original_context_length"), static_cast<std::uint32_t>(c.yarn_orig_ctx));
      if (c.yarn_beta_fast != 32.0) g.set_f32(key("rope.scaling.yarn_beta_fast"), static_cast<float>(c.yarn_beta_fast));
      if (c.yarn_beta_slow != 1.0) g.set_f32(key("rope.scaling.yarn_beta_slow"), static_cast<float>(c.yarn_beta_slow));
    } else if (c.rope_scale != 1.0) {
      g.set_string(key("rope.scaling.type"), "linear");
      g.set_f32(key("rope.scaling.factor"), static_cast<float>(c.rope_scale));
    }
  }
}

/// tokenizer.ggml.* from a llama2.c tokenizer.bin, as llama.cpp's converter stores it.
inline void write_llama2c_vocab(GGUFWriter& g, const std::string& path, int vocab_size) {
  const Llama2cTokenizer tok = Llama2cTokenizer::load(path, vocab_size);
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<std::int32_t> types;
  for (int i = 0; i < tok.vocab_size(); ++i) {
    std::string p;
    // llama2.c writes the control pieces as "\n<s>\n" / "\n</s>\n"; SentencePiece (and
    // llama.cpp's converter) name them <unk>, <s>, </s>.
    if (i == Llama2cTokenizer::kUnkId || i == Llama2cTokenizer::kBosId || i == Llama2cTokenizer::kEosId) {
      tokens.push_back(i == Llama2cTokenizer::kUnkId ? "<unk>" : i == Llama2cTokenizer::kBosId ? "<s>" : "</s>");
      scores.push_back(tok.score(i));
      types.push_back(i == Llama2cTokenizer::kUnkId ? 2 : 3);
      continue;
    }
    for (char ch : tok.piece(i)) p += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
    tokens.push_back(std::move(p));
    scores.push_back(tok.score(i));
    std::int32_t t = 1;  // normal
    if (i == Llama2cTokenizer::kUnkId) t = 2;
    else if (i == Llama2cTokenizer::kBosId || i == Llama2cTokenizer::kEosId) t = 3;
    else if (i >= Llama2cTokenizer::kByteOffset && i < Llama2cTokenizer::kByteOffset + 256) t = 6;
    types.push_back(t);
  }
  g.set_string("tokenizer.ggml.model", "llama");
  g.set_string_array("tokenizer.ggml.tokens", std::move(tokens));
  g.set_f32_array("tokenizer.ggml.scores", scores);
  g.set_i32_array("tokenizer.ggml.token_type", types);
  g.set_u32("tokenizer.ggml.unknown_token_id", Llama2cTokenizer::kUnkId);
  g.set_u32("tokenizer.ggml.bos_token_id", Llama2cTokenizer::kBosId);
  g.set_u32("tokenizer.ggml.eos_token_id", Llama2cTokenizer::kEosId);
}

/// The vocabulary of the tokenizer at `path` (any format load_tokenizer reads) as
/// tokenizer.* keys for a model of `vocab_size` rows. A GGUF file's tokenizer.* keys
/// are copied; its token count must be vocab_size. Throws FileError/FormatError
/// naming the file, ConfigError for a vocabulary that does not fit the model or
/// that GGUF cannot express (write_tokenizer_json_vocab). `g` is unchanged on throw.
inline void write_vocab(GGUFWriter& g, const std::string& path, int vocab_size) {
  std::string file;
  switch (detect_tokenizer_format(path, &file)) {
    case TokenizerFormat::kTokenizerJson: write_tokenizer_json_vocab(g, file, vocab_size); return;
    case TokenizerFormat::kGguf: {
      const GGUFFile f = GGUFFile::open(file);
      const std::uint64_t n = f.get_string_array("tokenizer.ggml.tokens").size();
      if (n != static_cast<std::uint64_t>(vocab_size))
        throw ConfigError(msg(file, ": tokenizer.ggml.tokens has ", n, " tokens but the model's vocab_size is ", vocab_size));
      for (const auto& [k, v] : f.metadata())
        if (k.rfind("tokenizer.", 0) == 0) g.set(k, v);
      return;
    }
    case TokenizerFormat::kLlama2c: write_llama2c_vocab(g, file, vocab_size); return;
  }
}

/// Throws FormatError naming row `row` and the first weight of x[0, n) that is NaN or
/// infinite: such a weight has no quantized form (its block's scale would be NaN).
inline void require_finite_row(const float* x, std::uint64_t n, long long row) {
  for (std::uint64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      throw FormatError(msg("row ", row, ": weight [", i, "] = ", x[i], " is not finite (NaN and infinity cannot be quantized)"));
}

/// Throws FormatError naming row `row` when its dequantized values y[0, n) are not all
/// finite although its weights x are: the weights are too large for type t's f16
/// scales (or for f16 itself), whose largest finite value is 65504.
inline void require_representable_row(const float* x, const float* y, std::uint64_t n, long long row, WeightType t) {
  for (std::uint64_t i = 0; i < n; ++i)
    if (!std::isfinite(y[i])) {
      float amax = 0;
      for (std::uint64_t k = 0; k < n; ++k) amax = std::max(amax, std::fabs(x[k]));
      const std::string what = t == WeightType::kF16 ? std::string("f16")
                                                      : msg("the f16 scales of ", weight_type_name(t));
      throw FormatError(msg("row ", row, ": weights up to |", amax, "| overflow ", what,
                            " (largest finite f16: 65504); value [", i, "] quantizes to ", y[i]));
    }
}

}  // namespace detail

/// Quantizes the model at `in` (a GGUF file, a Hugging Face folder or a llama2.c
/// checkpoint, told apart by content) into a GGUF file at `out` with `scheme`.
/// GGUF input: every metadata key is copied (general.file_type replaced) and every
/// tensor re-stored from its dequantized values. Other inputs: written as GGUF
/// llama with the llama.* keys and the vocabulary of options.tokenizer or, for a
/// Hugging Face folder without one, of the folder's tokenizer.json if it has one.
/// Throws FileError naming the path if `in` is missing or `out` cannot be written or
/// exists and is not a regular file (checked first; `out` is written beside and renamed,
/// detail::write_file_atomically); FormatError naming the path if `in` is none of the
/// three formats (with the checkpoint reader's reason), or naming a tensor of a type
/// that cannot be dequantized, or naming the tensor, the target type and the row of a
/// weight that is NaN or infinite or too large for the type's f16 scales; ConfigError
/// for a model GGUF cannot express (gguf_arch_for) or a vocabulary that does not fit
/// it (detail::write_vocab). `out` is written only once every tensor is quantized.
inline QuantizeResult quantize_model(const std::string& in, const std::string& out, QuantScheme scheme,
                                     const QuantizeOptions& options = {}) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(in, ec)) throw FileError(detail::msg("'", in, "': no such file or folder"));
  // Refused before any work; write_file_atomically checks again when it writes.
  if (const std::string kind = detail::non_regular_kind(out); !kind.empty())
    throw FileError(detail::msg("'", out, "' is ", kind, ", not a regular file: refusing to replace it"));
  QuantizeResult result;
  GGUFWriter g;
  std::vector<detail::QuantSource> sources;
  TypeChoiceContext ctx;
  std::shared_ptr<const GGUFFile> gguf;
  std::shared_ptr<const ModelWeights<float>> weights;
  std::string name = fs::path(in).filename().string();
  if (name.empty()) name = fs::path(in).parent_path().filename().string();
  if (const auto dot = name.rfind('.'); dot != std::string::npos && dot > 0 && !fs::is_directory(in, ec))
    name = name.substr(0, dot);

  const ModelFormat format = detect_model_format(in);  // FormatError for none of the formats
  if (format == ModelFormat::kGguf) {
    result.input_format = "gguf";
    gguf = std::make_shared<const GGUFFile>(GGUFFile::open(in));
    for (const auto& [k, v] : gguf->metadata()) {
      if (k == "general.alignment" || k == "general.file_type" || k == "general.quantization_version") continue;
      g.set(k, v);
    }
    const std::string arch = gguf->get_string_or("general.architecture", "llama");
    ctx.n_layers = static_cast<int>(gguf->get_u64_or(arch + ".block_count", 1));
    ctx.n_heads = static_cast<int>(gguf->get_u64_or(arch + ".attention.head_count", 1));
    ctx.n_kv_heads = static_cast<int>(gguf->get_u64_or(arch + ".attention.head_count_kv", ctx.n_heads));
    ctx.has_output = gguf->find_tensor(tensor_spec(TensorId::kClassifier).gguf) != nullptr;
    result.wrote_vocabulary = gguf->find("tokenizer.ggml.tokens") != nullptr;
    for (const GGUFTensorInfo& t : gguf->tensors()) {
      std::vector<std::uint64_t> ne(t.ne, t.ne + std::max(t.n_dims, 1));
      const GGUFTensorInfo* tp = &t;
      const std::uint64_t row_bytes = t.rows() ? t.n_bytes / t.rows() : 0;
      sources.push_back({t.name, ne, t.type, [gguf, tp, row_bytes](std::uint64_t r, float* y) {
                           detail::dequantize_row(tp->type, gguf->tensor_data(*tp) + r * row_bytes, y,
                                                  static_cast<std::int64_t>(tp->ne[0]));
                         }});
      // Refuse a type we cannot read before any work, naming the tensor.
      try {
        detail::check_row(t.type, static_cast<std::int64_t>(t.ne[0]), true);
      } catch (const ConfigError& e) {
        throw FormatError(detail::msg(in, ": tensor '", t.name, "': ", e.what()));
      }
    }
  } else {
    // A Hugging Face folder or a llama2.c checkpoint. No context is planned here: a
    // folder is read for one position, which passes the context demand check (a
    // checkpoint keeps its own, as load_checkpoint applies it), and the model's own
    // context is what the output records.
    WeightLoadOptions lo;
    lo.max_seq_len = format == ModelFormat::kHfFolder ? 1 : 0;
    lo.allow_unused_tensors = options.allow_unused_tensors;
    lo.unused_tensors = &result.unused_tensors;
    ModelInfo info;
    try {
      info = read_model_info(in, lo);
    } catch (const FileError& e) {
      if (format != ModelFormat::kLlama2c) throw;
      throw FormatError(detail::msg("'", in, "' is neither a GGUF file, a Hugging Face folder nor a llama2.c checkpoint (",
                                    e.what(), ")"));
    }
    result.input_format = format == ModelFormat::kHfFolder ? "hf" : info.description;
    ModelWeights<float> w = load_model_weights<float>(in, lo);
    w.config.max_seq_len = static_cast<int>(std::min<std::uint64_t>(info.file_context, kMaxModelContext));
    const ModelConfig c = w.config;
    weights = std::make_shared<const ModelWeights<float>>(std::move(w));
    sources = detail::sources_from_weights(weights);
    detail::write_model_keys(g, c, name);
    std::string tokenizer = options.tokenizer;
    if (tokenizer.empty() && result.input_format == "hf" && fs::is_regular_file(fs::path(in) / "tokenizer.json", ec))
      tokenizer = (fs::path(in) / "tokenizer.json").string();
    if (!tokenizer.empty()) {
      detail::write_vocab(g, tokenizer, c.vocab_size);
      result.wrote_vocabulary = true;
    }
    ctx.n_layers = c.n_layers;
    ctx.n_heads = c.n_heads;
    ctx.n_kv_heads = c.n_kv_heads;
    ctx.has_output = !c.shared_classifier;
  }
  g.set_u32("general.file_type", static_cast<std::uint32_t>(quant_scheme_file_type(scheme)));
  if (weight_type_traits(quant_scheme_type(scheme)).block_size > 1) g.set_u32("general.quantization_version", 2);

  for (const detail::QuantSource& s : sources) {
    const WeightType t = choose_tensor_type(scheme, s.name, s.ne, ctx);
    const std::uint64_t n = s.ne[0];
    std::uint64_t rows = 1;
    for (std::size_t d = 1; d < s.ne.size(); ++d) rows = detail::checked_mul(rows, s.ne[d], "tensor rows");
    const std::uint64_t row_bytes = weight_row_bytes(t, n);
    std::vector<unsigned char> data(static_cast<std::size_t>(detail::checked_mul(row_bytes, rows, "tensor bytes")));
    std::vector<double> err(static_cast<std::size_t>(rows)), ref(static_cast<std::size_t>(rows));
    const long long R = static_cast<long long>(rows);
    long long failed_row = R;  // the lowest row that failed (R: none), so the message does not depend on threads
    std::string failure;
    bool out_of_memory = false;
#if defined(_OPENMP)
    const int nt = options.threads > 0 ? options.threads : omp_get_max_threads();
#pragma omp parallel num_threads(nt)
#endif
    {
      std::vector<float> x(static_cast<std::size_t>(n)), y(static_cast<std::size_t>(n));
#if defined(_OPENMP)
#pragma omp for schedule(static)
#endif
      for (long long r = 0; r < R; ++r) {
        try {
          s.row(static_cast<std::uint64_t>(r), x.data());
          detail::require_finite_row(x.data(), n, r);
          unsigned char* dst = data.data() + static_cast<std::size_t>(r) * row_bytes;
          detail::quantize_row(t, x.data(), dst, static_cast<std::int64_t>(n));
          detail::dequantize_row(t, dst, y.data(), static_cast<std::int64_t>(n));
          detail::require_representable_row(x.data(), y.data(), n, r, t);
          double e = 0, a = 0;
          for (std::uint64_t i = 0; i < n; ++i) {
            const double d = static_cast<double>(x[i]) - y[i];
            e += d * d;
            a += static_cast<double>(x[i]) * x[i];
          }
          err[static_cast<std::size_t>(r)] = e;
          ref[static_cast<std::size_t>(r)] = a;
        } catch (const std::exception& ex) {  // nothing may leave an OpenMP region
          const bool oom = dynamic_cast<const std::bad_alloc*>(&ex) != nullptr;
#if defined(_OPENMP)
#pragma omp critical(kvd_quantize_failure)
#endif
          {
            if (oom) out_of_memory = true;
            if (r < failed_row) {
              failed_row = r;
              failure = ex.what();
            }
          }
        }
      }
    }
    if (out_of_memory) throw std::bad_alloc();
    if (failed_row < R) throw FormatError(detail::msg(in, ": tensor '", s.name, "' as ", weight_type_name(t), ": ", failure));
    double e = 0, a = 0;
    for (std::size_t r = 0; r < err.size(); ++r) {
      e += err[r];
      a += ref[r];
    }
    QuantizedTensorReport rep;
    rep.name = s.name;
    rep.ne = s.ne;
    rep.source_type = s.type;
    rep.type = t;
    rep.bytes = data.size();
    rep.rel_rmse = a > 0 ? std::sqrt(e / a) : 0.0;
    g.add_tensor(s.name, t, s.ne, data.data(), data.size());
    if (options.progress) options.progress(rep);
    result.tensors.push_back(std::move(rep));
  }
  g.write(out);
  result.file_bytes = static_cast<std::uint64_t>(fs::file_size(out, ec));
  return result;
}

}  // namespace kvd
