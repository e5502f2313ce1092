// A model from a Hugging Face folder: the hyperparameters from config.json, the
// weights from its safetensors file(s) (see safetensors.hpp), for the
// architectures kvdecode runs:
//   LlamaForCausalLM, MistralForCausalLM  RoPE on halves (HF's rotate_half: q_proj
//                     and k_proj rows are used as stored, no permutation);
//                     optional rope_scaling "llama3" or "linear"
//   Qwen2ForCausalLM  as llama with q/k/v biases (attention_bias defaults to true)
//   Qwen3ForCausalLM  per-head RMSNorm of q and k before RoPE; head_dim may differ
//                     from hidden_size / num_attention_heads
//   Qwen3MoeForCausalLM  Qwen3 with a mixture of experts in every layer (num_experts,
//                     num_experts_per_tok, moe_intermediate_size, norm_topk_prob; the
//                     router mlp.gate and mlp.experts.E.{gate,up,down}_proj, which
//                     are copied into one matrix per kind)
//   Gemma3ForCausalLM (gemma3_text)  Qwen3's attention with post norms
//                     (pre_feedforward_layernorm is the FFN's pre-norm,
//                     post_attention_layernorm and post_feedforward_layernorm the
//                     post norms), GeGLU (hidden_activation gelu_pytorch_tanh),
//                     embeddings scaled by sqrt(hidden_size), scores over
//                     sqrt(query_pre_attn_scalar), local layers (sliding_window,
//                     rope_local_base_freq) and global ones (rope_theta, linear
//                     rope_scaling) as sliding_window_pattern or layer_types say,
//                     tied output by default; every norm weight w applied as 1 + w
//                     (added at load, in T, as Gemma3RMSNorm does in float32)
// Anything else is refused by name. The architectures and the tensor names are
// the rows of architecture.hpp.
//
// HF matrices are stored [out, in] row-major: shape [rows, cols] in our terms
// (y = W x, W rows x cols). Every tensor's shape is checked against the config;
// a mismatch or an absent tensor is a FormatError naming it. Matrices stay in
// their storage type (F32, F16, BF16) and in place when their data pointer is
// aligned to the element size; an unaligned one (safetensors headers need not
// keep data aligned) is copied once. Norms and biases are converted to T.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvdecode/weights/architecture.hpp"
#include "kvdecode/core/config.hpp"
#include "kvdecode/io/file.hpp"
#include "kvdecode/io/json.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/io/load_options.hpp"
#include "kvdecode/io/safetensors.hpp"
#include "kvdecode/weights/weight_matrix.hpp"
#include "kvdecode/weights/model_weights.hpp"

namespace kvd {

/// Options for reading a Hugging Face model folder (load_options.hpp; the old name is kept).
using HFLoadOptions = WeightLoadOptions;

/// The planned context may demand (RoPE tables + a float32 KV cache) at most this
/// many times the bytes of the folder's .safetensors files, or kHFSeqBytesFloor if
/// larger: as for llama2.c checkpoints (checkpoint.hpp). Lower max_seq_len to load more.
inline constexpr std::uint64_t kHFSeqBytesFileFactor = 2;
inline constexpr std::uint64_t kHFSeqBytesFloor = std::uint64_t{64} << 20;  // 64 MiB
/// The longest context any format may plan for (GGUF's limit too).
inline constexpr std::uint64_t kHFMaxContext = std::uint64_t{1} << 20;

/// What a folder's config.json says about its model.
struct HFModelInfo {
  std::string architecture;               ///< e.g. "LlamaForCausalLM"
  ModelConfig config;                     ///< validated; vocab_size from config.json (checked against the embedding at load)
  std::uint64_t file_context = 0;         ///< max_position_embeddings as stored
  bool tied = false;                      ///< tie_word_embeddings
  bool vocab_in_config = false;           ///< config.json gives vocab_size (else the embedding's rows do)
  std::vector<double> rope_freq_factors;  ///< (rotary_dim/2) each frequency is divided by its factor; empty = none
  // Filled by hf_model_weights_info() (from the safetensors headers); hf_model_info() leaves them empty.
  std::uint64_t weight_bytes = 0;  ///< bytes of every tensor the model uses, as stored
  std::uint64_t expert_bytes = 0;  ///< of which expert tensors (ModelConfig::active_weight_bytes)
  /// (type, bytes) of the tensors the model uses, one entry per storage type present.
  std::vector<std::pair<WeightType, std::uint64_t>> bytes_by_type;
  /// Tensors of the folder the model does not use, by name order (only with allow_unused_tensors).
  std::vector<std::string> unused_tensors;
};

namespace detail {

[[noreturn]] inline void hf_fail(const std::string& file, const std::string& what) {
  throw FormatError(msg(file, ": ", what));
}

/// A small JSON file of a folder (config.json, generation_config.json) as an object.
/// Throws FileError when it is missing, unreadable or over 16 MB (checked before
/// reading), FormatError when it is not JSON or not an object.
inline nlohmann::json hf_read_json(const std::string& file) {
  const std::string text = read_text_file(file, 16u << 20);
  const nlohmann::json j = parse_json_text(std::string_view(text), file, JsonLimits{16u << 20});
  if (!j.is_object()) hf_fail(file, "is not a JSON object");
  return j;
}

/// Reads config.json's positive integer `key` (def < 0: required), bounded by 2^20.
inline int hf_dim(const nlohmann::json& j, const std::string& file, const char* key, std::int64_t def = -1) {
  constexpr std::int64_t kLimit = 1 << 20;
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (def < 0) hf_fail(file, msg("field '", key, "' is missing"));
    return static_cast<int>(def);
  }
  if (!it->is_number_integer()) hf_fail(file, msg("field '", key, "' = ", json_value_text(*it), " is not an integer"));
  const std::int64_t v = it->get<std::int64_t>();
  if (v <= 0 || v > kLimit) hf_fail(file, msg("field '", key, "' = ", v, " must be in [1, ", kLimit, "]"));
  return static_cast<int>(v);
}

inline double hf_number(const nlohmann::json& j, const std::string& file, const std::string& key, double def,
                        bool required = false) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) hf_fail(file, msg("field '", key, "' is missing"));
    return def;
  }
  if (!it->is_number()) hf_fail(file, msg("field '", key, "' = ", json_value_text(*it), " is not a number"));
  const double v = it->get<double>();
  if (!std::isfinite(v) || v <= 0) hf_fail(file, msg("field '", key, "' = ", v, " must be positive and finite"));
  return v;
}

inline bool hf_bool(const nlohmann::json& j, const std::string& file, const char* key, bool def) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) hf_fail(file, msg("field '", key, "' = ", json_value_text(*it), " is not a boolean"));
  return it->get<bool>();
}

/// HF's _compute_llama3_parameters, expressed as a divisor of each frequency
/// theta^(-2i/rot): `factor` for long wavelengths, 1 for short ones, and
/// 1 / ((1 - s) / factor + s) between, s = (old_ctx / wavelen - low) / (high - low).
inline std::vector<double> llama3_freq_factors(double theta, int rot, double factor, double low, double high,
                                               double old_ctx) {
  const double kPi = 3.14159265358979323846;
  const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  std::vector<double> out(static_cast<std::size_t>(rot / 2));
  for (int i = 0; i < rot / 2; ++i) {
    const double freq = std::pow(theta, -2.0 * i / rot);
    const double wavelen = 2 * kPi / freq;
    if (wavelen < high_wavelen) {
      out[i] = 1.0;
    } else if (wavelen > low_wavelen) {
      out[i] = factor;
    } else {
      const double s = (old_ctx / wavelen - low) / (high - low);
      out[i] = 1.0 / ((1 - s) / factor + s);
    }
  }
  return out;
}

/// A SafetensorsModel as the owner of the weight views into its mappings.
class HFOwner : public ByteOwner {
 public:
  explicit HFOwner(SafetensorsModel m) : model(std::move(m)) {}
  SafetensorsModel model;
};

/// Refuses a planned context whose RoPE tables and float32 KV cache would take more
/// than max(kHFSeqBytesFileFactor x the folder's .safetensors bytes, kHFSeqBytesFloor)
/// (issue 33: a 1 MB folder with max_position_embeddings 2^20 took 1.38 GB).
/// FormatError naming the field, the demand and the limit.
inline void hf_check_context_demand(const std::string& folder, const std::string& file, const ModelConfig& c) {
  namespace fs = std::filesystem;
  std::uint64_t weights = 0;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->path().extension() == ".safetensors" && it->is_regular_file(e2)) {
      const std::uint64_t n = it->file_size(e2);
      if (!e2) weights = n > ~std::uint64_t{0} - weights ? ~std::uint64_t{0} : weights + n;
    }
  }
  // Every factor is below 2^21 (ModelConfig's bounds) and S <= 2^20: no overflow in 64 bits.
  const std::uint64_t S = static_cast<std::uint64_t>(c.max_seq_len);
  const std::uint64_t rope = S * static_cast<std::uint64_t>(c.head_dim) * 4;  // cos and sin, (S, Dh/2) each
  const std::uint64_t per_pos = 2ull * static_cast<std::uint64_t>(c.n_layers) * static_cast<std::uint64_t>(c.kv_dim()) * 4;
  const std::uint64_t demand = rope + S * per_pos;
  const std::uint64_t limit = std::max(kHFSeqBytesFloor, weights > ~std::uint64_t{0} / kHFSeqBytesFileFactor
                                                             ? ~std::uint64_t{0}
                                                             : kHFSeqBytesFileFactor * weights);
  if (demand > limit)
    hf_fail(file, msg("a context of ", S, " positions (max_position_embeddings, capped by max_seq_len) demands ", demand,
                      " bytes of RoPE tables and float32 KV cache (", per_pos, " bytes per position), more than the limit of ",
                      limit, " bytes a folder of ", weights, " bytes of weights may demand (the larger of ",
                      kHFSeqBytesFileFactor, " x its .safetensors bytes and ", kHFSeqBytesFloor,
                      "); pass a smaller max_seq_len / -c"));
}
}  // namespace detail

namespace detail {
/// Gemma 3's fields of config.json into c (arch is a gemma row): the activation, the
/// attention scalar, the window, the layer pattern and the local RoPE base. FormatError
/// naming the field for a value kvdecode does not run.
inline void hf_gemma_options(const nlohmann::json& j, const std::string& file, const Architecture& arch, ModelConfig& c) {
  c.embed_scale = true;
  c.post_norms = true;
  c.ffn_activation = Activation::kGeluTanh;
  for (const char* k : {"hidden_activation", "hidden_act"})
    if (const auto it = j.find(k); it != j.end() && !it->is_null() && *it != "gelu_pytorch_tanh")
      hf_fail(file, msg("field '", k, "' = ", json_value_text(*it), " is not supported (gelu_pytorch_tanh)"));
  for (const char* k : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (const auto it = j.find(k); it != j.end() && !it->is_null())
      hf_fail(file, msg("field '", k, "' = ", json_value_text(*it), " is not supported (Gemma 3 has none: null)"));
  c.query_pre_attn_scalar = hf_dim(j, file, "query_pre_attn_scalar", c.head_dim);
  c.local_window = hf_dim(j, file, "sliding_window");
  c.rope_theta = hf_number(j, file, "rope_theta", 1000000.0);
  c.rope_theta_local = hf_number(j, file, "rope_local_base_freq", 10000.0);
  c.swa_pattern = arch.swa_pattern;
  if (j.contains("sliding_window_pattern") && !j["sliding_window_pattern"].is_null())
    c.swa_pattern = hf_dim(j, file, "sliding_window_pattern");
  // layer_types (newer configs): each layer "sliding_attention" or "full_attention";
  // kvdecode runs the pattern with every N-th layer global, N the first full layer + 1.
  if (const auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    bool ok = it->is_array() && it->size() == static_cast<std::size_t>(c.n_layers);
    int pattern = 0;
    for (std::size_t l = 0; ok && l < it->size(); ++l) {
      const auto& v = (*it)[l];
      ok = v == "sliding_attention" || v == "full_attention";
      if (ok && v == "full_attention" && pattern == 0) pattern = static_cast<int>(l) + 1;
    }
    if (ok && pattern == 0) pattern = c.n_layers + 1;  // every layer local: no layer l with (l + 1) % N == 0
    for (std::size_t l = 0; ok && l < it->size(); ++l)
      ok = ((*it)[l] == "sliding_attention") == ((static_cast<int>(l) + 1) % pattern != 0);
    if (!ok)
      hf_fail(file, msg("field 'layer_types' = ", json_value_text(*it), " is not a sliding-window pattern kvdecode knows (",
                        "num_hidden_layers = ", c.n_layers, " entries of sliding_attention with every N-th full_attention)"));
    c.swa_pattern = pattern;
  }
}
}  // namespace detail

/// Reads `folder`/config.json. Throws FileError when it is missing or unreadable,
/// FormatError naming the field for invalid JSON, an unsupported architecture (by
/// name), a missing, mistyped or out-of-range field, heads that do not divide, or
/// an unsupported rope_scaling; ConfigError if the result fails ModelConfig::validate().
inline HFModelInfo hf_model_info(const std::string& folder, const HFLoadOptions& options = {}) {
  using detail::hf_dim;
  using detail::hf_fail;
  using detail::msg;
  const std::string file = (std::filesystem::path(folder) / "config.json").string();
  const nlohmann::json j = detail::hf_read_json(file);

  HFModelInfo info;
  const auto arch_it = j.find("architectures");
  if (arch_it == j.end()) hf_fail(file, "field 'architectures' is missing");
  if (!arch_it->is_array() || arch_it->size() != 1 || !(*arch_it)[0].is_string())
    hf_fail(file, msg("field 'architectures' = ", detail::json_value_text(*arch_it), " must be an array of one string"));
  info.architecture = (*arch_it)[0].get<std::string>();
  const Architecture* arch = find_hf_architecture(info.architecture);
  if (!arch)
    hf_fail(file, msg("architecture '", info.architecture, "' is not supported (kvdecode runs ",
                      supported_architectures(false), ")"));

  ModelConfig& c = info.config;
  c.d_model = hf_dim(j, file, "hidden_size");
  c.n_layers = hf_dim(j, file, "num_hidden_layers");
  if (arch->moe) {
    // Every layer a mixture of experts: intermediate_size (the dense width) is unused.
    c.n_experts = hf_dim(j, file, "num_experts");
    if (c.n_experts > ModelConfig::kMaxExperts)
      hf_fail(file, msg("field 'num_experts' = ", c.n_experts, " exceeds the limit ", ModelConfig::kMaxExperts));
    c.n_experts_used = hf_dim(j, file, "num_experts_per_tok");
    if (c.n_experts_used > c.n_experts)
      hf_fail(file, msg("field 'num_experts_per_tok' = ", c.n_experts_used, " exceeds num_experts = ", c.n_experts,
                        " (top-k must be at most the expert count)"));
    c.hidden_dim = hf_dim(j, file, "moe_intermediate_size");
    c.router_order = arch->router_order;
    c.norm_topk_prob = detail::hf_bool(j, file, "norm_topk_prob", arch->norm_topk_prob);
    if (const auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null() && !(it->is_array() && it->empty()))
      hf_fail(file, msg("field 'mlp_only_layers' = ", detail::json_value_text(*it),
                        " makes some layers dense (kvdecode supports experts in every layer: [])"));
    if (j.contains("decoder_sparse_step") && hf_dim(j, file, "decoder_sparse_step", 1) != 1)
      hf_fail(file, msg("field 'decoder_sparse_step' = ", detail::json_value_text(j["decoder_sparse_step"]),
                        " puts experts in only some layers (kvdecode supports 1: every layer)"));
  } else {
    c.hidden_dim = hf_dim(j, file, "intermediate_size");
  }
  c.n_heads = hf_dim(j, file, "num_attention_heads");
  c.n_kv_heads = hf_dim(j, file, "num_key_value_heads", c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    hf_fail(file, msg("field 'num_key_value_heads' = ", c.n_kv_heads, " does not divide num_attention_heads = ",
                      c.n_heads));
  const bool has_head_dim = j.contains("head_dim") && !j["head_dim"].is_null();
  if (!has_head_dim && c.d_model % c.n_heads != 0)
    hf_fail(file, msg("field 'num_attention_heads' = ", c.n_heads, " does not divide hidden_size = ", c.d_model,
                      " and head_dim is absent"));
  c.head_dim = hf_dim(j, file, "head_dim", c.d_model / c.n_heads);
  if (c.head_dim % 2 != 0) hf_fail(file, msg("field 'head_dim' = ", c.head_dim, " must be even for RoPE"));
  // vocab_size is optional: the embedding's rows decide; when present they must agree.
  info.vocab_in_config = j.contains("vocab_size") && !j["vocab_size"].is_null();
  c.vocab_size = hf_dim(j, file, "vocab_size", c.vocab_size);
  info.file_context = static_cast<std::uint64_t>(hf_dim(j, file, "max_position_embeddings"));
  std::uint64_t ctx = info.file_context;
  if (options.max_seq_len > 0 && static_cast<std::uint64_t>(options.max_seq_len) < ctx) ctx = options.max_seq_len;
  if (ctx > kHFMaxContext)
    hf_fail(file, msg("field 'max_position_embeddings' = ", ctx, " exceeds the limit ", kHFMaxContext,
                      " (pass a smaller max_seq_len / -c)"));
  c.max_seq_len = static_cast<int>(ctx);
  c.norm_eps = detail::hf_number(j, file, "rms_norm_eps", 0, true);
  c.rope_theta = detail::hf_number(j, file, "rope_theta", 10000.0);
  c.rope_style = RopeStyle::kHalves;
  c.rope_dim = 0;
  c.qkv_bias = detail::hf_bool(j, file, "attention_bias", arch->qkv_bias);
  c.qk_norm = arch->qk_norm;
  info.tied = detail::hf_bool(j, file, "tie_word_embeddings", arch->gemma);
  if (arch->gemma) detail::hf_gemma_options(j, file, *arch, c);

  // Sliding window: Mistral applies a non-null sliding_window; others only with use_sliding_window.
  const bool use_window = !arch->gemma && detail::hf_bool(j, file, "use_sliding_window", false);
  const bool has_window = j.contains("sliding_window") && !j["sliding_window"].is_null();
  if (use_window || (arch->hf_window_always && has_window)) {
    if (!has_window) hf_fail(file, "field 'sliding_window' is missing but use_sliding_window is true");
    const int window = hf_dim(j, file, "sliding_window");
    bool all_layers = true;
    if (!arch->hf_window_always && j.contains("max_window_layers") && !j["max_window_layers"].is_null()) {
      // HF Qwen: layers i >= max_window_layers slide; kvdecode has one window for all layers.
      const std::int64_t mwl = j["max_window_layers"].is_number_integer() ? j["max_window_layers"].get<std::int64_t>() : -1;
      if (mwl < 0) hf_fail(file, msg("field 'max_window_layers' = ", detail::json_value_text(j["max_window_layers"]), " is not a non-negative integer"));
      if (mwl >= c.n_layers)
        all_layers = false;
      else if (mwl > 0)
        hf_fail(file, msg("field 'max_window_layers' = ", mwl, " windows only some of the ", c.n_layers,
                          " layers (kvdecode supports all or none)"));
    }
    if (all_layers) c.sliding_window = window;
  }

  // rope_scaling: llama3 or linear.
  if (const auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
    if (!rs->is_object()) hf_fail(file, msg("field 'rope_scaling' = ", detail::json_value_text(*rs), " is not an object"));
    std::string type;
    for (const char* k : {"rope_type", "type"})
      if (const auto t = rs->find(k); t != rs->end() && t->is_string()) {
        type = t->get<std::string>();
        break;
      }
    if (type.empty()) hf_fail(file, "field 'rope_scaling.rope_type' is missing");
    const double factor = detail::hf_number(*rs, file, "factor", 0, true);
    const int half = c.rotary_dim() / 2;
    if (arch->gemma && (type == "linear" || type == "default")) {
      if (type == "linear" && factor < 1.0)
        hf_fail(file, msg("field 'rope_scaling.factor' = ", factor, " must be at least 1"));
      c.rope_scale = type == "linear" ? factor : 1.0;  // Gemma scales its global layers only
    } else if (arch->gemma) {
      hf_fail(file, msg("field 'rope_scaling.rope_type' = '", type, "' is not supported for ", info.architecture,
                        " (linear)"));
    } else if (type == "linear") {
      info.rope_freq_factors.assign(static_cast<std::size_t>(half), factor);
    } else if (type == "llama3") {
      const double low = detail::hf_number(*rs, file, "low_freq_factor", 0, true);
      const double high = detail::hf_number(*rs, file, "high_freq_factor", 0, true);
      const double old_ctx = detail::hf_number(*rs, file, "original_max_position_embeddings", 0, true);
      if (!(high > low))
        hf_fail(file, msg("field 'rope_scaling.high_freq_factor' = ", high, " must exceed low_freq_factor = ", low));
      info.rope_freq_factors = detail::llama3_freq_factors(c.rope_theta, c.rotary_dim(), factor, low, high, old_ctx);
    } else if (type != "default") {
      hf_fail(file, msg("field 'rope_scaling.rope_type' = '", type, "' is not supported (llama3, linear)"));
    }
  }
  c.shared_classifier = info.tied;  // refined at load: an absent lm_head.weight also means tied
  c.validate();
  detail::hf_check_context_demand(folder, file, c);
  return info;
}


/// True if `path` is a directory holding config.json (a Hugging Face model folder). Never throws.
inline bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) && std::filesystem::is_regular_file(std::filesystem::path(path) / "config.json", ec);
}

/// The end-of-sequence ids of `folder`/generation_config.json: its eos_token_id,
/// a single id or a list (Llama 3 lists several). Empty when the file or the key is
/// absent. Throws FileError if the file exists but cannot be read, FormatError
/// naming the file and key for invalid JSON, an id that is not an integer in
/// [0, 2^31), or a list of more than 1024 ids.
inline std::vector<int> hf_generation_eos_ids(const std::string& folder) {
  using detail::hf_fail;
  using detail::msg;
  const std::string file = (std::filesystem::path(folder) / "generation_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return {};
  const nlohmann::json j = detail::hf_read_json(file);
  const auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return {};
  // A single id or a list, read in place (a copy of a file's value could be deep).
  const std::size_t count = it->is_array() ? it->size() : 1;
  if (count > 1024) hf_fail(file, msg("eos_token_id lists ", count, " ids, more than the limit of 1024"));
  std::vector<int> ids;
  for (std::size_t i = 0; i < count; ++i) {
    const auto& v = it->is_array() ? (*it)[i] : *it;
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 0x7FFFFFFF)
      hf_fail(file, msg("eos_token_id", it->is_array() ? msg("[", i, "]") : std::string(), " = ", detail::json_value_text(v),
                        " is not an integer id in [0, 2^31)"));
    ids.push_back(static_cast<int>(v.get<std::int64_t>()));
  }
  return ids;
}

/// The ModelConfig of `folder`/config.json. Throws as hf_model_info() does.
inline ModelConfig hf_model_config(const std::string& folder, const HFLoadOptions& options = {}) {
  return hf_model_info(folder, options).config;
}

namespace detail {

/// One tensor a model of a given config reads from a folder: its name and shape
/// [rows, cols] (rows = 0: a vector of cols).
struct HFTensorSpec {
  std::string name;
  std::uint64_t rows, cols;
  bool expert;  ///< one expert's part of an expert tensor
};

/// Every tensor a model of config `c` reads, in the order the loader checks them:
/// the one list load_hf_model() and hf_model_weights_info() walk.
inline std::vector<HFTensorSpec> hf_tensor_specs(const ModelConfig& c) {
  std::vector<HFTensorSpec> out;
  for_each_tensor_spec(c, [&](const TensorSpec& s, int layer) {
    if (!s.hf) return;  // not stored as a tensor (rope_freqs: config.json's rope_scaling)
    const std::uint64_t rows = tensor_rows(s, c), cols = tensor_cols(s, c);
    if (s.experts == Dim::kOne) {
      out.push_back({hf_tensor_name(s, layer, c.post_norms), s.matrix ? rows : 0, s.matrix ? cols : rows, false});
      return;
    }
    // An expert tensor: one tensor per expert, each its share of the rows.
    const std::uint64_t e_count = tensor_experts(s, c);
    for (std::uint64_t e = 0; e < e_count; ++e)
      out.push_back({hf_expert_tensor_name(s, layer, static_cast<int>(e)), rows / e_count, cols, true});
  });
  return out;
}

/// Completes `info` from the folder's tensors without reading their data: vocab_size
/// from the embedding when config.json omits it, shared_classifier when lm_head.weight
/// is absent, the bytes of every tensor the model reads (by storage type), and the
/// unused tensors (refused unless options.allow_unused_tensors). Throws FormatError
/// naming the tensor for an absent or misshapen one, or the first unused one.
inline void hf_check_tensors(const std::string& folder, const SafetensorsModel& m, HFModelInfo& info,
                             const HFLoadOptions& options) {
  ModelConfig& c = info.config;
  const char* emb_name = tensor_spec(TensorId::kTokenEmbedding).hf;
  const SafetensorsTensor& emb = m.get(emb_name);
  if (!info.vocab_in_config && emb.shape.size() == 2 && emb.shape[0] > 0 && emb.shape[0] <= (1u << 20))
    c.vocab_size = static_cast<int>(emb.shape[0]);
  if (emb.shape.size() != 2 || emb.shape[1] != static_cast<std::uint64_t>(c.d_model) ||
      emb.shape[0] != static_cast<std::uint64_t>(c.vocab_size))
    throw FormatError(msg(folder, ": tensor '", emb_name, "' has shape ", emb.shape_string(), ", expected [",
                          c.vocab_size, ",", c.d_model, "] (vocab_size, hidden_size)"));
  c.shared_classifier = info.tied || m.find(tensor_spec(TensorId::kClassifier).hf) == nullptr;
  c.validate();

  std::unordered_set<std::string> used;
  info.weight_bytes = 0;
  info.expert_bytes = 0;
  info.bytes_by_type.clear();
  info.unused_tensors.clear();
  for (const HFTensorSpec& s : hf_tensor_specs(c)) {
    used.insert(s.name);
    const SafetensorsTensor& t = m.get(s.name);
    const bool ok = s.rows == 0 ? (t.shape.size() == 1 && t.shape[0] == s.cols)
                                : (t.shape.size() == 2 && t.shape[0] == s.rows && t.shape[1] == s.cols);
    if (!ok)
      throw FormatError(msg(folder, ": tensor '", s.name, "' (in ", t.file, ") has shape ", t.shape_string(),
                            ", expected [", s.rows ? msg(s.rows, ",") : std::string(), s.cols,
                            "] for this model's config"));
    info.weight_bytes += t.n_bytes;
    if (s.expert) info.expert_bytes += t.n_bytes;
    auto it = info.bytes_by_type.begin();
    while (it != info.bytes_by_type.end() && it->first != t.type) ++it;
    if (it == info.bytes_by_type.end())
      info.bytes_by_type.emplace_back(t.type, t.n_bytes);
    else
      it->second += t.n_bytes;
  }
  // Every tensor must be used: what kvdecode would ignore (o_proj's bias, a layer
  // beyond num_hidden_layers, an unknown tensor) means another model than it runs.
  const std::vector<const SafetensorsTensor*> all = m.tensors();
  for (const SafetensorsTensor* t : all) {
    if (used.count(t->name)) continue;
    if (!options.allow_unused_tensors)
      throw FormatError(msg(folder, ": tensor '", t->name, "' (in ", t->file, ") is not used by a ", info.architecture,
                            " of ", c.n_layers, " layers (num_hidden_layers); ", all.size() - used.size(), " of the ",
                            all.size(), " tensors are unused, the limit is 0 (pass allow_unused_tensors / "
                            "--allow-unused-tensors to load it anyway)"));
    info.unused_tensors.push_back(t->name);
  }
}

}  // namespace detail

/// What `folder` says about its model, tensors included but not their data: as
/// hf_model_info(), then vocab_size, the classifier, weight_bytes, bytes_by_type and
/// unused_tensors from the safetensors headers (the files are mapped, their data
/// pages never touched). The config is the one load_hf_model() gives. Throws as
/// load_hf_model() does, before any tensor is read.
inline HFModelInfo hf_model_weights_info(const std::string& folder, const HFLoadOptions& options = {}) {
  HFModelInfo info = hf_model_info(folder, options);
  const SafetensorsModel m = SafetensorsModel::open(folder);
  detail::hf_check_tensors(folder, m, info, options);
  return info;
}

/// Loads a Hugging Face model folder (config.json + safetensors, single or sharded).
/// Throws FileError (missing config or weights), FormatError (a malformed file, an
/// unsupported architecture, a missing or misshapen tensor, an unsupported dtype;
/// the message names it) or ConfigError.
template <class T>
ModelWeights<T> load_hf_model(const std::string& folder, const HFLoadOptions& options = {}) {
  HFModelInfo info = hf_model_info(folder, options);
  auto owner = std::make_shared<const detail::HFOwner>(SafetensorsModel::open(folder));
  const SafetensorsModel& m = owner->model;
  detail::hf_check_tensors(folder, m, info, options);  // every shape checked before any data is read
  if (options.unused_tensors)
    options.unused_tensors->insert(options.unused_tensors->end(), info.unused_tensors.begin(), info.unused_tensors.end());
  const ModelConfig& c = info.config;

  auto matrix = [&](const std::string& name) {
    const SafetensorsTensor& t = m.get(name);
    const long rows = static_cast<long>(t.shape[0]), cols = static_cast<long>(t.shape[1]);
    const std::uint64_t elem = t.type == WeightType::kF32 ? 4 : 2;
    if (reinterpret_cast<std::uintptr_t>(t.data) % elem != 0)
      return WeightMatrix::copy_of(t.type, rows, cols, t.data, t.n_bytes);
    return WeightMatrix::view(t.type, rows, cols, t.data, owner);
  };
  auto vec = [&](const std::string& name) {
    const SafetensorsTensor& t = m.get(name);
    const long n = static_cast<long>(t.shape[0]);
    // copy_of: a vector is one row; copying sidesteps alignment.
    const WeightMatrix row = WeightMatrix::copy_of(t.type, 1, n, t.data, t.n_bytes);
    Vector<T> v(n);
    row.dequantize_row(0, v.data());
    return v;
  };

  // The E tensors of an expert tensor, copied one after the other into one matrix;
  // FormatError naming the first expert whose storage type differs from expert 0's.
  auto experts = [&](const TensorSpec& s, int layer) {
    const int n = static_cast<int>(tensor_experts(s, c));
    const SafetensorsTensor& first = m.get(hf_expert_tensor_name(s, layer, 0));
    std::vector<unsigned char> bytes;
    bytes.reserve(static_cast<std::size_t>(first.n_bytes) * static_cast<std::size_t>(n));
    for (int e = 0; e < n; ++e) {
      const std::string name = hf_expert_tensor_name(s, layer, e);
      const SafetensorsTensor& t = m.get(name);
      if (t.type != first.type)
        throw FormatError(detail::msg(folder, ": tensor '", name, "' (in ", t.file, ") has type ", weight_type_name(t.type),
                              ", expert 0 has ", weight_type_name(first.type), " (one expert tensor holds one type)"));
      bytes.insert(bytes.end(), t.data, t.data + t.n_bytes);
    }
    return WeightMatrix::copy_of(first.type, static_cast<long>(tensor_rows(s, c)), static_cast<long>(tensor_cols(s, c)),
                                 bytes.data(), bytes.size());
  };

  const bool info_gemma = find_hf_architecture(info.architecture)->gemma;
  ModelWeights<T> w;
  w.config = c;
  w.layers.resize(static_cast<std::size_t>(c.n_layers));
  for_each_tensor_spec(c, [&](const TensorSpec& s, int layer) {
    if (!s.hf) return;
    const auto slot = tensor_slot(w, s.id, layer);
    if (s.experts != Dim::kOne)
      *slot.matrix = experts(s, layer);
    else if (slot.matrix)
      *slot.matrix = matrix(hf_tensor_name(s, layer, c.post_norms));
    else
      *slot.vector = vec(hf_tensor_name(s, layer, c.post_norms));
    // Gemma's RMSNorm multiplies by (1 + w); kvdecode's by its weight: add the 1 here.
    if (info_gemma && slot.vector && tensor_is_rmsnorm(s.id))
      for (long i = 0; i < slot.vector->size(); ++i) (*slot.vector)[i] = T(1) + (*slot.vector)[i];
  });
  if (!info.rope_freq_factors.empty()) {
    w.rope_freq_factors = Vector<T>(static_cast<long>(info.rope_freq_factors.size()));
    for (std::size_t i = 0; i < info.rope_freq_factors.size(); ++i)
      w.rope_freq_factors[static_cast<long>(i)] = static_cast<T>(info.rope_freq_factors[i]);
  }
  w.validate();
  return w;
}

}  // namespace kvd
