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
//   GptOssForCausalLM (gpt_oss)  q/k/v/o biases (attention_bias true), attention sinks
//                     (self_attn.sinks), local layers (sliding_window) alternating with
//                     full ones as layer_types says (even layers local), YaRN RoPE on
//                     every layer (rope_scaling yarn: factor, beta_fast, beta_slow,
//                     original_max_position_embeddings, truncate), a mixture of experts
//                     (num_local_experts, num_experts_per_tok or experts_per_token,
//                     intermediate_size) routed top-k then softmax by mlp.router with a
//                     bias, the clamped SwiGLU (swiglu_limit 7). Each layer's experts are
//                     one tensor per kind, stored [E, in, out] (transposed) with gate and up
//                     interleaved in one gate_up_proj (gate the even columns, up the odd):
//                     copied once into kvdecode's [E * out, in] matrices in their storage
//                     type; or, as OpenAI's release stores them, MXFP4 as <name>_blocks
//                     (U8 [E, out, in / 32, 16]) and <name>_scales (U8 [E, out, in / 32]),
//                     repacked into ggml's mxfp4 blocks (HF packs values 2j and 2j + 1 in
//                     byte j's low and high nibble, ggml values j and j + 16), bit-exact
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
#include <cstring>
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
#include "kvdecode/core/exact_math.hpp"
#include "kvdecode/io/file.hpp"
#include "kvdecode/io/json.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/io/load_options.hpp"
#include "kvdecode/io/safetensors.hpp"
#include "kvdecode/weights/block_formats.hpp"
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
    const double freq = detail::exact_pow(theta, -2.0 * i / rot);  // the C library's pow may differ
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

/// config.json's rope_scaling: "" when absent or null, else its rope_type (or the
/// older "type"), with `rs` pointing at the object. Throws FormatError naming the
/// field when it is not an object or names no type.
inline std::string hf_rope_scaling(const nlohmann::json& j, const std::string& file, const nlohmann::json*& rs) {
  const auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return std::string();
  if (!it->is_object()) hf_fail(file, msg("field 'rope_scaling' = ", json_value_text(*it), " is not an object"));
  rs = &*it;
  for (const char* k : {"rope_type", "type"})
    if (const auto t = it->find(k); t != it->end() && t->is_string() && !t->get<std::string>().empty())
      return t->get<std::string>();
  hf_fail(file, "field 'rope_scaling.rope_type' is missing");
}

/// gpt-oss's fields of config.json into c (arch is the gpt-oss row): its block's options,
/// the window, layer_types, the RoPE base and YaRN. FormatError naming the field (and,
/// for layer_types, the entry) for a value kvdecode does not run.
inline void hf_gpt_oss_options(const nlohmann::json& j, const std::string& file, const Architecture& arch,
                               std::uint64_t file_context, ModelConfig& c) {
  c.attn_sinks = true;
  c.attn_out_bias = true;
  c.moe_bias = true;
  c.ffn_activation = Activation::kSwigluOai;
  if (!c.qkv_bias)
    hf_fail(file, "field 'attention_bias' = false is not supported for GptOssForCausalLM (its q/k/v/o projections have biases: true)");
  // The clamp of kSwigluOai is 7 (config.hpp); HF's GptOssExperts reads swiglu_limit.
  if (const auto it = j.find("swiglu_limit"); it != j.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 7.0))
    hf_fail(file, msg("field 'swiglu_limit' = ", json_value_text(*it), " is not supported (7.0)"));
  c.local_window = hf_dim(j, file, "sliding_window");
  c.swa_pattern = arch.swa_pattern;
  c.rope_theta = hf_number(j, file, "rope_theta", 150000.0);  // GptOssConfig's default
  c.rope_theta_local = c.rope_theta;
  c.rope_scale_local = true;
  // layer_types: layer l is "sliding_attention" for even l, "full_attention" for odd l
  // (HF's default, and the only pattern gpt-oss files hold).
  if (const auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->size() != static_cast<std::size_t>(c.n_layers))
      hf_fail(file, msg("field 'layer_types' = ", json_value_text(*it), " is not a list of num_hidden_layers = ", c.n_layers,
                        " entries"));
    for (std::size_t l = 0; l < it->size(); ++l) {
      const auto& v = (*it)[l];
      if (v != "sliding_attention" && v != "full_attention")
        hf_fail(file, msg("field 'layer_types[", l, "]' = ", json_value_text(v),
                          " is not a layer type kvdecode knows (sliding_attention, full_attention)"));
      if ((v == "sliding_attention") != c.layer_local(static_cast<int>(l)))
        hf_fail(file, msg("field 'layer_types[", l, "]' = ", json_value_text(v), " breaks gpt-oss's pattern (",
                          "sliding_attention on even layers, full_attention on odd ones)"));
    }
  }
  const nlohmann::json* rs = nullptr;
  const std::string type = hf_rope_scaling(j, file, rs);
  if (type.empty() || type == "default") return;
  if (type != "yarn")
    hf_fail(file, msg("field 'rope_scaling.rope_type' = '", type, "' is not supported for GptOssForCausalLM (yarn)"));
  const double factor = hf_number(*rs, file, "factor", 0, true);
  if (factor < 1.0 || factor > 1e6) hf_fail(file, msg("field 'rope_scaling.factor' = ", factor, " must be in [1, 1e6]"));
  c.rope_scale = factor;
  c.rope_scaling = RopeScaling::kYarn;
  // HF's defaults: the context of max_position_embeddings, beta_fast 32, beta_slow 1, truncate true.
  const double orig = hf_number(*rs, file, "original_max_position_embeddings", static_cast<double>(file_context));
  if (orig != std::floor(orig) || orig > (1 << 20))
    hf_fail(file, msg("field 'rope_scaling.original_max_position_embeddings' = ", orig, " must be an integer in [1, ",
                      1 << 20, "]"));
  c.yarn_orig_ctx = static_cast<int>(orig);
  c.yarn_beta_fast = hf_number(*rs, file, "beta_fast", 32.0);
  c.yarn_beta_slow = hf_number(*rs, file, "beta_slow", 1.0);
  if (!(c.yarn_beta_fast > c.yarn_beta_slow) || c.yarn_beta_fast > 1e6)
    hf_fail(file, msg("fields 'rope_scaling.beta_fast' = ", c.yarn_beta_fast, " and 'rope_scaling.beta_slow' = ",
                      c.yarn_beta_slow, " must satisfy 0 < beta_slow < beta_fast <= 1e6"));
  c.yarn_truncate = hf_bool(*rs, file, "truncate", true);
  // kvdecode's YaRN magnitude is HF's default, 1 + 0.1 ln(factor): other magnitudes are refused.
  for (const char* k : {"attention_factor", "mscale", "mscale_all_dim"})
    if (const auto it = rs->find(k); it != rs->end() && !it->is_null())
      hf_fail(file, msg("field 'rope_scaling.", k, "' = ", json_value_text(*it),
                        " is not supported (kvdecode scales YaRN's cos and sin by 1 + 0.1 ln(factor): null)"));
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
    const char* count_key = arch->hf_expert_count;
    c.n_experts = hf_dim(j, file, count_key);
    if (c.n_experts > ModelConfig::kMaxExperts)
      hf_fail(file, msg("field '", count_key, "' = ", c.n_experts, " exceeds the limit ", ModelConfig::kMaxExperts));
    // top-k: num_experts_per_tok, or experts_per_token (OpenAI's name), equal when both are given.
    const bool has_k = j.contains("num_experts_per_tok") && !j["num_experts_per_tok"].is_null();
    const bool has_alias = j.contains("experts_per_token") && !j["experts_per_token"].is_null();
    const char* k_key = has_k || !has_alias ? "num_experts_per_tok" : "experts_per_token";
    c.n_experts_used = hf_dim(j, file, k_key);
    if (has_k && has_alias && hf_dim(j, file, "experts_per_token") != c.n_experts_used)
      hf_fail(file, msg("field 'experts_per_token' = ", detail::json_value_text(j["experts_per_token"]),
                        " disagrees with num_experts_per_tok = ", c.n_experts_used));
    if (c.n_experts_used > c.n_experts)
      hf_fail(file, msg("field '", k_key, "' = ", c.n_experts_used, " exceeds ", count_key, " = ", c.n_experts,
                        " (top-k must be at most the expert count)"));
    c.hidden_dim = hf_dim(j, file, arch->hf_expert_width);
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
  // GptOssConfig's head_dim defaults to 64, not hidden_size / num_attention_heads.
  if (!has_head_dim && !arch->gpt_oss && c.d_model % c.n_heads != 0)
    hf_fail(file, msg("field 'num_attention_heads' = ", c.n_heads, " does not divide hidden_size = ", c.d_model,
                      " and head_dim is absent"));
  c.head_dim = hf_dim(j, file, "head_dim", arch->gpt_oss ? 64 : c.d_model / c.n_heads);
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
  if (arch->gpt_oss) detail::hf_gpt_oss_options(j, file, *arch, info.file_context, c);

  // Sliding window: Mistral applies a non-null sliding_window; others only with use_sliding_window.
  const bool use_window = !arch->gemma && !arch->gpt_oss && detail::hf_bool(j, file, "use_sliding_window", false);
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
  const nlohmann::json* rs = nullptr;
  if (const std::string type = arch->gpt_oss ? std::string() : detail::hf_rope_scaling(j, file, rs); !type.empty()) {
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
  bool expert;  ///< one expert's part of an expert tensor, or a fused one (fused > 0)
  /// gpt-oss: a tensor of every expert, `fused` of them ([E, cols, rows] transposed, or
  /// MXFP4 blocks and scales [E, rows, ...]; a vector [E, cols]), each expert's rows
  /// (a vector's values) at the out indices hf_fused_index gives; 0: a plain tensor.
  std::uint64_t fused = 0;
  int half = -1;  ///< with fused: TensorSpec::hf_gpt_oss_half
};

/// The out index (column of HF's [E, in, out] tensor, row of its MXFP4 form) that
/// holds row r of a fused expert tensor's `half`: HF interleaves gate (half 0, the
/// even columns) and up (half 1, the odd ones) in gate_up_proj; -1 (down_proj): r.
/// The one de-interleaving rule. Never fails.
inline std::uint64_t hf_fused_index(std::uint64_t r, int half) {
  return half < 0 ? r : 2 * r + static_cast<std::uint64_t>(half);
}
/// The out width of a fused tensor holding `rows` of `half` (2 x rows for gate_up). Never fails.
inline std::uint64_t hf_fused_width(std::uint64_t rows, int half) { return half < 0 ? rows : 2 * rows; }

/// The ggml mxfp4 block (block_formats.hpp) of one HF MXFP4 block: e8m0 `scale` and
/// 16 bytes `hf` whose byte j holds value 2j in its low nibble and 2j + 1 in its high
/// one; ggml's byte j holds value j low and j + 16 high. The e2m1 codes and the scale
/// are the same numbers (value = e2m1 x 2^(scale - 127) in both). Never fails.
inline BlockMXFP4 mxfp4_block_from_hf(std::uint8_t scale, const std::uint8_t* hf) {
  BlockMXFP4 b{};
  b.e = scale;
  auto code = [&](int i) { return (hf[i / 2] >> (4 * (i % 2))) & 0xF; };  // HF's value i
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(code(j) | (code(j + 16) << 4));
  return b;
}

/// The fused gpt-oss tensor behind expert row `s` (s.hf_gpt_oss set, s.experts not kOne)
/// in `layer`: E experts of rows x cols (a vector: cols values each). Never fails.
inline HFTensorSpec hf_fused_spec(const TensorSpec& s, int layer, const ModelConfig& c) {
  const std::uint64_t e_count = tensor_experts(s, c);
  return {hf_tensor_name(s, layer, false, true), s.matrix ? tensor_rows(s, c) / e_count : 0,
          s.matrix ? tensor_cols(s, c) : tensor_rows(s, c) / e_count, true, e_count, s.hf_gpt_oss_half};
}

/// Every tensor a model of config `c` reads, in the order the loader checks them:
/// the one list load_hf_model() and hf_model_weights_info() walk.
inline std::vector<HFTensorSpec> hf_tensor_specs(const ModelConfig& c) {
  std::vector<HFTensorSpec> out;
  for_each_tensor_spec(c, [&](const TensorSpec& s, int layer) {
    // not stored as a tensor (rope_freqs: config.json's rope_scaling; gpt-oss's expert biases elsewhere)
    if (!s.hf && !(c.attn_sinks && s.hf_gpt_oss)) return;
    const std::uint64_t rows = tensor_rows(s, c), cols = tensor_cols(s, c);
    if (s.experts == Dim::kOne) {
      out.push_back({hf_tensor_name(s, layer, c.post_norms, c.attn_sinks), s.matrix ? rows : 0, s.matrix ? cols : rows,
                     false});
      return;
    }
    if (c.attn_sinks && s.hf_gpt_oss) {  // gpt-oss: one tensor of every expert (gate and up share one)
      out.push_back(hf_fused_spec(s, layer, c));
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
  auto count = [&](const SafetensorsTensor& t, WeightType type, bool expert) {
    info.weight_bytes += t.n_bytes;
    if (expert) info.expert_bytes += t.n_bytes;
    auto it = info.bytes_by_type.begin();
    while (it != info.bytes_by_type.end() && it->first != type) ++it;
    if (it == info.bytes_by_type.end())
      info.bytes_by_type.emplace_back(type, t.n_bytes);
    else
      it->second += t.n_bytes;
  };
  auto check_shape = [&](const SafetensorsTensor& t, const std::vector<std::uint64_t>& want, const char* what) {
    if (t.shape != want) {
      std::string w = "[";
      for (std::size_t d = 0; d < want.size(); ++d) w += msg(d ? "," : "", want[d]);
      throw FormatError(msg(folder, ": tensor '", t.name, "' (in ", t.file, ") has shape ", t.shape_string(),
                            ", expected ", w, "] ", what, " for this model's config"));
    }
  };
  auto check_weights = [&](const SafetensorsTensor& t) {  // a tensor read as numbers, not bytes
    if (t.bytes)
      throw FormatError(msg(folder, ": tensor '", t.name, "' (in ", t.file, ") has dtype U8, expected F32, F16 or BF16"));
  };
  auto check_bytes = [&](const SafetensorsTensor& t) {
    if (!t.bytes)
      throw FormatError(msg(folder, ": tensor '", t.name, "' (in ", t.file, ") has dtype ", weight_type_name(t.type),
                            ", expected U8 (MXFP4 blocks or scales)"));
  };
  for (const HFTensorSpec& s : hf_tensor_specs(c)) {
    if (s.fused > 0) {
      // gpt-oss: gate and up share gate_up_proj; the tensor is checked and counted once.
      const std::uint64_t out = hf_fused_width(s.rows ? s.rows : s.cols, s.half);
      const std::string blocks = s.name + "_blocks", scales = s.name + "_scales";
      const SafetensorsTensor* t = m.find(s.name);
      if (s.rows == 0 || t) {  // a bias [E, out], or the matrix as numbers [E, in, out]
        if (!t) t = &m.get(s.name);
        check_weights(*t);
        if (s.rows == 0) check_shape(*t, {s.fused, out}, "(experts, out)");
        else check_shape(*t, {s.fused, s.cols, out}, "(experts, in, out)");
        if (used.insert(s.name).second) count(*t, t->type, true);
        continue;
      }
      if (!m.find(blocks))
        throw FormatError(msg(folder, ": tensor '", s.name, "' is missing, and so is its MXFP4 form '", blocks, "' and '",
                              scales, "'"));
      if (s.cols % 32 != 0)
        throw FormatError(msg(folder, ": tensor '", blocks, "' is MXFP4, whose blocks hold 32 values, but its rows hold ",
                              s.cols, " (not a multiple of 32)"));
      const SafetensorsTensor& b = m.get(blocks);
      const SafetensorsTensor* sc = m.find(scales);
      if (!sc) throw FormatError(msg(folder, ": tensor '", scales, "' is missing (the scales of '", blocks, "')"));
      check_bytes(b);
      check_bytes(*sc);
      check_shape(b, {s.fused, out, s.cols / 32, 16}, "(experts, out, in / 32, 16)");
      check_shape(*sc, {s.fused, out, s.cols / 32}, "(experts, out, in / 32)");
      if (used.insert(blocks).second) {
        used.insert(scales);
        count(b, WeightType::kMXFP4, true);
        count(*sc, WeightType::kMXFP4, true);
      }
      continue;
    }
    used.insert(s.name);
    const SafetensorsTensor& t = m.get(s.name);
    const bool ok = s.rows == 0 ? (t.shape.size() == 1 && t.shape[0] == s.cols)
                                : (t.shape.size() == 2 && t.shape[0] == s.rows && t.shape[1] == s.cols);
    if (!ok)
      throw FormatError(msg(folder, ": tensor '", s.name, "' (in ", t.file, ") has shape ", t.shape_string(),
                            ", expected [", s.rows ? msg(s.rows, ",") : std::string(), s.cols,
                            "] for this model's config"));
    check_weights(t);
    count(t, t.type, s.expert);
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

/// gpt-oss's fused expert matrix `s` (hf_tensor_specs; checked by hf_check_tensors) as
/// kvdecode's [E * rows, cols]: expert e's row r is out index hf_fused_index(r, s.half)
/// of its part. From [E, in, out] numbers: transposed, in the storage type (F32, F16,
/// BF16, bit for bit); from <name>_blocks and <name>_scales: ggml mxfp4 blocks
/// (mxfp4_block_from_hf). FormatError naming the scales tensor and the block [e, out,
/// block] for an e8m0 scale of 0xff (NaN) or one that overflows (block_valid).
inline WeightMatrix hf_fused_expert_matrix(const std::string& folder, const SafetensorsModel& m, const HFTensorSpec& s) {
  const std::uint64_t E = s.fused, rows = s.rows, cols = s.cols, out = hf_fused_width(rows, s.half);
  if (const SafetensorsTensor* t = m.find(s.name)) {  // [E, in, out]
    const std::size_t es = t->type == WeightType::kF32 ? 4 : 2;
    std::vector<unsigned char> bytes(static_cast<std::size_t>(E * rows * cols) * es);
    for (std::uint64_t e = 0; e < E; ++e)
      for (std::uint64_t i = 0; i < cols; ++i) {
        const unsigned char* src = t->data + static_cast<std::size_t>((e * cols + i) * out) * es;
        for (std::uint64_t r = 0; r < rows; ++r)
          std::memcpy(bytes.data() + static_cast<std::size_t>((e * rows + r) * cols + i) * es,
                      src + static_cast<std::size_t>(hf_fused_index(r, s.half)) * es, es);
      }
    return WeightMatrix::copy_of(t->type, static_cast<long>(E * rows), static_cast<long>(cols), bytes.data(), bytes.size());
  }
  const SafetensorsTensor& blocks = m.get(s.name + "_blocks");  // [E, out, G, 16]
  const SafetensorsTensor& scales = m.get(s.name + "_scales");  // [E, out, G]
  const std::uint64_t G = cols / 32;
  std::vector<unsigned char> bytes(static_cast<std::size_t>(E * rows * G) * sizeof(BlockMXFP4));
  for (std::uint64_t e = 0; e < E; ++e)
    for (std::uint64_t r = 0; r < rows; ++r) {
      const std::uint64_t o = hf_fused_index(r, s.half);
      for (std::uint64_t g = 0; g < G; ++g) {
        const std::uint64_t at = (e * out + o) * G + g;
        const BlockMXFP4 b = mxfp4_block_from_hf(scales.data[at], blocks.data + at * 16);
        std::string why;
        if (!block_valid(b, &why))
          throw FormatError(msg(folder, ": tensor '", scales.name, "' (in ", scales.file, ") [", e, ",", o, ",", g,
                                "] (expert, out, block): ", why));
        std::memcpy(bytes.data() + static_cast<std::size_t>((e * rows + r) * G + g) * sizeof(BlockMXFP4), &b,
                    sizeof(BlockMXFP4));
      }
    }
  return WeightMatrix::copy_of(WeightType::kMXFP4, static_cast<long>(E * rows), static_cast<long>(cols), bytes.data(),
                               bytes.size());
}

/// gpt-oss's fused expert bias `s` ([E, out]) as kvdecode's vector of E x s.cols values,
/// expert e's value r at out index hf_fused_index(r, s.half). Never fails once checked.
template <class T>
Vector<T> hf_fused_expert_vector(const SafetensorsModel& m, const HFTensorSpec& s) {
  const SafetensorsTensor& t = m.get(s.name);
  const long E = static_cast<long>(s.fused), len = static_cast<long>(s.cols);
  const long out = static_cast<long>(hf_fused_width(s.cols, s.half));
  const WeightMatrix all = WeightMatrix::copy_of(t.type, E, out, t.data, t.n_bytes);
  Vector<T> row(out), v(E * len);
  for (long e = 0; e < E; ++e) {
    all.dequantize_row(e, row.data());
    for (long r = 0; r < len; ++r) v[e * len + r] = row[static_cast<long>(hf_fused_index(static_cast<std::uint64_t>(r), s.half))];
  }
  return v;
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
    if (!s.hf && !(c.attn_sinks && s.hf_gpt_oss)) return;
    const auto slot = tensor_slot(w, s.id, layer);
    if (c.attn_sinks && s.hf_gpt_oss && s.experts != Dim::kOne) {  // gpt-oss: one tensor of every expert
      const detail::HFTensorSpec f = detail::hf_fused_spec(s, layer, c);
      if (slot.matrix)
        *slot.matrix = detail::hf_fused_expert_matrix(folder, m, f);
      else
        *slot.vector = detail::hf_fused_expert_vector<T>(m, f);
    } else if (s.experts != Dim::kOne) {
      *slot.matrix = experts(s, layer);
    } else if (slot.matrix) {
      *slot.matrix = matrix(hf_tensor_name(s, layer, c.post_norms, c.attn_sinks));
    } else {
      *slot.vector = vec(hf_tensor_name(s, layer, c.post_norms, c.attn_sinks));
    }
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
