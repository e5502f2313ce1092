// A model from a GGUF file: the hyperparameters from its metadata, the weights
// from its tensor table, for the architectures kvdecode runs:
//   llama  Llama 2/3, TinyLlama, SmolLM, Mistral: RoPE on adjacent pairs (the
//          converter permutes q/k rows for it), optional rope_freqs (Llama 3.1+)
//   qwen2  Qwen2/2.5: q/k/v biases, RoPE on halves ("NEOX")
//   qwen3  Qwen3: as qwen2 without biases, per-head RMSNorm of q and k before
//          RoPE; head_dim (attention.key_length) may differ from d_model / n_heads
//   qwen3moe  Qwen3-MoE: qwen3's attention, a mixture-of-experts FFN (expert_count,
//          expert_used_count, expert_feed_forward_length; the router ffn_gate_inp
//          and the 3-D expert tensors ffn_{gate,up,down}_exps)
//   gemma3 Gemma 3 (text): qwen3's attention with post norms (post_attention_norm,
//          post_ffw_norm), GeGLU, embeddings scaled by sqrt(d_model), local layers
//          (attention.sliding_window, RoPE base 10000) and global ones (rope.freq_base,
//          linear rope.scaling) at 5:1 (or attention.sliding_window_pattern), tied
//          output; norm weights stored as 1 + w by the converter, so applied as stored
//   gpt-oss  gpt-oss: q/k/v/o biases, attention sinks (attn_sinks), local layers
//          (attention.sliding_window) alternating with full ones, the even layers local,
//          YaRN RoPE on every layer (rope.scaling.type yarn, factor,
//          original_context_length; optional yarn_beta_fast, yarn_beta_slow), a mixture
//          of experts routed top-k then softmax with biases on the router and experts
//          (ffn_{gate_inp,gate_exps,up_exps,down_exps}.bias), the clamped SwiGLU, the
//          FFN pre-norm named post_attention_norm, a separate output
// Anything else is refused by name. The architectures and the tensor names are
// the rows of architecture.hpp.
//
// Matrices stay in the file's storage types and in place: each WeightMatrix is a
// view into the mapped file, kept alive by a shared owner, and Transformer's
// packing releases each tensor's pages once packed, so loading an F16 model
// costs about its file size in memory, not twice that. Norms and biases are
// converted to the compute type.
//
// GGUF shapes list ne[0] first, the row length: a matrix W (rows x cols, y = W x)
// is stored with ne = [cols, rows]. Every tensor's type and shape is checked
// against the config; a mismatch is a FormatError naming the tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "kvdecode/weights/architecture.hpp"
#include "kvdecode/core/config.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/io/gguf.hpp"
#include "kvdecode/io/load_options.hpp"
#include "kvdecode/weights/weight_matrix.hpp"
#include "kvdecode/weights/model_weights.hpp"

namespace kvd {

/// Options for reading a GGUF model (load_options.hpp; the old name is kept).
using GGUFLoadOptions = WeightLoadOptions;

/// What a GGUF file's metadata says about its model.
struct GGUFModelInfo {
  std::string architecture;   ///< general.architecture ("llama", "qwen2", "qwen3")
  std::string name;           ///< general.name, or empty
  ModelConfig config;         ///< validated
  std::uint64_t file_context = 0;   ///< context_length as stored
  std::uint64_t weight_bytes = 0;   ///< bytes of every tensor the model uses, as stored
  std::uint64_t expert_bytes = 0;   ///< of which expert tensors (ModelConfig::active_weight_bytes)
  std::uint64_t file_bytes = 0;     ///< size of the file
  /// (type, bytes) of the tensors the model uses, one entry per storage type present.
  std::vector<std::pair<WeightType, std::uint64_t>> bytes_by_type;
  /// Tensors of the file that the model does not use, in file order (only with
  /// GGUFLoadOptions::allow_unused_tensors; otherwise the file is refused).
  std::vector<std::string> unused_tensors;
};

namespace detail {

/// A parsed GGUF file as the owner of the weight views into its mapping.
class GGUFOwner : public ByteOwner {
 public:
  explicit GGUFOwner(GGUFFile f) : file(std::move(f)) {}
  void release(const unsigned char* p, std::uint64_t n) const noexcept override {
    file.file().release(static_cast<std::uint64_t>(p - file.file().data()), n);
  }
  GGUFFile file;
};

[[noreturn]] inline void gguf_model_fail(const GGUFFile& f, const std::string& what) {
  throw FormatError(msg(f.path(), ": ", what));
}

/// One positive integer hyperparameter, bounded by ModelConfig's limits.
inline int gguf_dim(const GGUFFile& f, const std::string& key, std::int64_t def = -1) {
  const std::uint64_t v = def >= 0 ? f.get_u64_or(key, static_cast<std::uint64_t>(def)) : f.get_u64(key);
  constexpr std::uint64_t kLimit = 1u << 20;
  if (v == 0 || v > kLimit) gguf_model_fail(f, msg("key '", key, "' = ", v, " must be in [1, ", kLimit, "]"));
  return static_cast<int>(v);
}

/// The tensor called `name` with shape ne = [cols, rows] (rows = 0: a vector of
/// `cols`; experts > 0: ne = [cols, rows / experts, experts], an expert tensor, or
/// for a vector ne = [cols / experts, experts]), or nullptr when absent and optional.
/// FormatError naming the tensor when its shape differs.
inline const GGUFTensorInfo* gguf_tensor(const GGUFFile& f, const std::string& name, std::uint64_t cols,
                                         std::uint64_t rows, bool optional = false, std::uint64_t experts = 0) {
  const GGUFTensorInfo* t = f.find_tensor(name);
  if (!t) {
    if (optional) return nullptr;
    gguf_model_fail(f, msg("tensor '", name, "' is missing"));
  }
  const bool vector_ok = rows == 0 && experts == 0 && t->ne[0] == cols && t->rows() == 1;
  const bool expert_vector_ok = rows == 0 && experts > 0 && t->n_dims == 2 && t->ne[0] == cols / experts &&
                                t->ne[1] == experts;
  const bool matrix_ok = rows > 0 && experts == 0 && t->n_dims <= 2 && t->ne[0] == cols && t->rows() == rows;
  const bool experts_ok = rows > 0 && experts > 0 && t->n_dims == 3 && t->ne[0] == cols && t->ne[1] == rows / experts &&
                          t->ne[2] == experts;
  if (!vector_ok && !matrix_ok && !experts_ok && !expert_vector_ok)
    gguf_model_fail(f, msg("tensor '", name, "' has shape ", t->shape_string(), ", expected [",
                           rows == 0 && experts ? msg(cols / experts, ",", experts)
                           : experts            ? msg(cols, ",", rows / experts, ",", experts)
                           : rows               ? msg(cols, ",", rows)
                                                : msg(cols),
                           "] for this model's config"));
  if (!weight_type_traits(t->type).supported)
    gguf_model_fail(f, msg("tensor '", name, "' has type ", weight_type_name(t->type),
                           ", which kvdecode does not support (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                           "q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, mxfp4)"));
  return t;
}

}  // namespace detail

/// Reads the model's hyperparameters from a parsed GGUF file. Throws FormatError
/// naming the key (or tensor) for a missing or out-of-range value, an
/// architecture kvdecode does not run (naming it), or a config that fails
/// ModelConfig::validate() (as ConfigError).
inline GGUFModelInfo gguf_model_info(const GGUFFile& f, const GGUFLoadOptions& options = {}) {
  using detail::gguf_dim;
  GGUFModelInfo info;
  info.architecture = f.get_string("general.architecture");
  info.name = f.get_string_or("general.name", "");
  info.file_bytes = f.file_size();
  const Architecture* arch = find_gguf_architecture(info.architecture);
  if (!arch)
    detail::gguf_model_fail(f, detail::msg("architecture '", info.architecture, "' is not supported (kvdecode runs ",
                                           supported_architectures(true), ")"));
  const std::string a = info.architecture + ".";
  ModelConfig& c = info.config;
  c.d_model = gguf_dim(f, a + "embedding_length");
  c.n_layers = gguf_dim(f, a + "block_count");
  // A mixture of experts: its FFN width is each expert's (hidden_dim), and the dense
  // feed_forward_length, which its files may also hold, is unused.
  if (arch->moe) {
    c.n_experts = gguf_dim(f, a + "expert_count");
    if (c.n_experts > ModelConfig::kMaxExperts)
      detail::gguf_model_fail(f, detail::msg("key '", a, "expert_count' = ", c.n_experts, " exceeds the limit ",
                                     ModelConfig::kMaxExperts));
    c.n_experts_used = gguf_dim(f, a + "expert_used_count");
    if (c.n_experts_used > c.n_experts)
      detail::gguf_model_fail(f, detail::msg("key '", a, "expert_used_count' = ", c.n_experts_used, " exceeds ", a,
                                     "expert_count = ", c.n_experts, " (top-k must be at most the expert count)"));
    c.hidden_dim = gguf_dim(f, a + "expert_feed_forward_length");
    c.router_order = arch->router_order;
    c.norm_topk_prob = arch->norm_topk_prob;
  } else {
    c.hidden_dim = gguf_dim(f, a + "feed_forward_length");
  }
  c.n_heads = gguf_dim(f, a + "attention.head_count");
  c.n_kv_heads = gguf_dim(f, a + "attention.head_count_kv", c.n_heads);
  if (c.d_model % c.n_heads != 0 && !f.find(a + "attention.key_length"))
    detail::gguf_model_fail(f, detail::msg("embedding_length ", c.d_model, " is not a multiple of head_count ", c.n_heads,
                                           " and attention.key_length is absent"));
  c.head_dim = gguf_dim(f, a + "attention.key_length", c.d_model / c.n_heads);
  if (const auto* v = f.find(a + "attention.value_length"); v && f.get_u64(a + "attention.value_length") != static_cast<std::uint64_t>(c.head_dim))
    detail::gguf_model_fail(f, detail::msg("attention.value_length ", f.get_u64(a + "attention.value_length"),
                                           " differs from key_length ", c.head_dim, " (unsupported) at offset ", v->file_offset));
  info.file_context = f.get_u64(a + "context_length");
  if (info.file_context == 0)
    detail::gguf_model_fail(f, detail::msg("key '", a, "context_length' = 0 must be positive"));
  std::uint64_t ctx = info.file_context;
  if (options.max_seq_len > 0 && static_cast<std::uint64_t>(options.max_seq_len) < ctx) ctx = options.max_seq_len;
  if (ctx > (1u << 20))
    detail::gguf_model_fail(f, detail::msg("context_length ", ctx, " exceeds the limit ", 1u << 20,
                                           " (pass a smaller max_seq_len / -c)"));
  c.max_seq_len = static_cast<int>(ctx);
  c.norm_eps = f.get_f64(a + "attention.layer_norm_rms_epsilon");
  c.rope_theta = f.get_f64_or(a + "rope.freq_base", 10000.0);
  const std::uint64_t rot = f.get_u64_or(a + "rope.dimension_count", static_cast<std::uint64_t>(c.head_dim));
  if (rot == 0 || rot > static_cast<std::uint64_t>(c.head_dim) || rot % 2 != 0)
    detail::gguf_model_fail(f, detail::msg("rope.dimension_count ", rot, " must be even and in [2, head_dim = ", c.head_dim, "]"));
  c.rope_dim = rot == static_cast<std::uint64_t>(c.head_dim) ? 0 : static_cast<int>(rot);
  const std::string scaling = f.get_string_or(a + "rope.scaling.type", "none");
  if (scaling != "none" && scaling != "linear" && !(arch->gpt_oss && scaling == "yarn"))
    detail::gguf_model_fail(f, detail::msg("rope.scaling.type '", scaling, "' is not supported (none or linear",
                                           arch->gpt_oss ? ", or yarn" : "", ")"));
  c.rope_style = arch->gguf_rope;
  c.qkv_bias = arch->qkv_bias;
  // llama.cpp's llama applies q/k/v biases when the file has them; so does kvdecode
  // (all three in every layer, or the load fails naming the missing one).
  if (!c.qkv_bias && arch->qkv_bias_if_stored && f.find_tensor(gguf_tensor_name(tensor_spec(TensorId::kBq), 0)))
    c.qkv_bias = true;
  c.qk_norm = arch->qk_norm;
  if (scaling == "linear" || scaling == "yarn") {
    const double factor = f.get_f64(a + "rope.scaling.factor");
    if (!(factor >= 1.0) || factor > 1e6)
      detail::gguf_model_fail(f, detail::msg("key '", a, "rope.scaling.factor' = ", factor, " must be in [1, 1e6]"));
    if (arch->gemma || arch->gpt_oss) c.rope_scale = factor;
    else if (factor != 1.0)
      detail::gguf_model_fail(f, detail::msg("key '", a, "rope.scaling.factor' = ", factor, " is not supported for ",
                                             info.architecture, " (only 1)"));
  }
  if (arch->gemma) {
    c.embed_scale = true;
    c.post_norms = true;
    c.ffn_activation = Activation::kGeluTanh;
    c.local_window = gguf_dim(f, a + "attention.sliding_window");
    // The pattern: every swa_pattern-th layer global (llama.cpp's gemma3: 6, fixed).
    const std::string pk = a + "attention.sliding_window_pattern";
    const std::uint64_t pattern = f.find(pk) ? f.get_u64(pk) : static_cast<std::uint64_t>(arch->swa_pattern);
    if (pattern == 0 || pattern > (1u << 20))
      detail::gguf_model_fail(f, detail::msg("key '", pk, "' = ", pattern, " is not a sliding-window pattern kvdecode knows (",
                                             "every N-th layer global, N in [1, ", 1u << 20, "])"));
    c.swa_pattern = static_cast<int>(pattern);
    c.rope_theta_local = 10000.0;
    c.query_pre_attn_scalar = gguf_gemma_attention_scalar(c.n_layers, c.d_model, c.n_heads, c.head_dim);
  }
  if (arch->gpt_oss) {
    c.attn_sinks = true;
    c.attn_out_bias = true;
    c.moe_bias = true;
    c.ffn_activation = Activation::kSwigluOai;
    // Local and full layers alternate, the even ones local: ik_llama.cpp's fixed
    // pattern (it reads no pattern key for gpt-oss, so a file's other pattern is refused).
    c.local_window = gguf_dim(f, a + "attention.sliding_window");
    const std::string pk = a + "attention.sliding_window_pattern";
    if (f.find(pk) && f.get_u64(pk) != static_cast<std::uint64_t>(arch->swa_pattern))
      detail::gguf_model_fail(f, detail::msg("key '", pk, "' = ", f.get_u64(pk), " is not a sliding-window pattern kvdecode ",
                                             "knows for gpt-oss (", arch->swa_pattern, ": local and full layers alternate)"));
    c.swa_pattern = arch->swa_pattern;
    c.rope_theta_local = c.rope_theta;
    c.rope_scale_local = true;
    if (scaling == "yarn") {
      c.rope_scaling = RopeScaling::kYarn;
      // ggml's defaults: the context the file was trained at, beta_fast 32, beta_slow 1.
      const std::string ok = a + "rope.scaling.original_context_length";
      const std::uint64_t orig = f.get_u64_or(ok, info.file_context);
      if (orig == 0 || orig > (1u << 20))
        detail::gguf_model_fail(f, detail::msg("key '", ok, "' = ", orig, " must be in [1, ", 1u << 20, "]"));
      c.yarn_orig_ctx = static_cast<int>(orig);
      c.yarn_beta_fast = f.get_f64_or(a + "rope.scaling.yarn_beta_fast", 32.0);
      c.yarn_beta_slow = f.get_f64_or(a + "rope.scaling.yarn_beta_slow", 1.0);
      // ggml multiplies YaRN's magnitude by rope.scaling.attn_factor; gpt-oss files hold none.
      const std::string fk = a + "rope.scaling.attn_factor";
      if (f.find(fk) && f.get_f64(fk) != 1.0)
        detail::gguf_model_fail(f, detail::msg("key '", fk, "' = ", f.get_f64(fk), " is not supported (only 1)"));
      if (!(c.yarn_beta_slow > 0.0) || !(c.yarn_beta_fast > c.yarn_beta_slow) || c.yarn_beta_fast > 1e6)
        detail::gguf_model_fail(f, detail::msg("keys '", a, "rope.scaling.yarn_beta_fast' = ", c.yarn_beta_fast, " and '", a,
                                               "rope.scaling.yarn_beta_slow' = ", c.yarn_beta_slow,
                                               " must satisfy 0 < beta_slow < beta_fast <= 1e6"));
    }
  }
  const std::string emb_name = tensor_spec(TensorId::kTokenEmbedding).gguf;
  const GGUFTensorInfo* emb = f.find_tensor(emb_name);
  if (!emb) detail::gguf_model_fail(f, detail::msg("tensor '", emb_name, "' is missing"));
  if (emb->n_dims != 2 || emb->ne[0] != static_cast<std::uint64_t>(c.d_model) || emb->ne[1] == 0 || emb->ne[1] > (1u << 20))
    detail::gguf_model_fail(f, detail::msg("tensor '", emb_name, "' has shape ", emb->shape_string(), ", expected [",
                                           c.d_model, ", vocab_size <= ", 1u << 20, "]"));
  c.vocab_size = static_cast<int>(emb->ne[1]);
  // A vocabulary shorter than the embedding would fail mid-generation, after part of the text.
  if (const auto* tv = f.find("tokenizer.ggml.tokens")) {
    const std::uint64_t n_tokens = f.get_string_array("tokenizer.ggml.tokens").size();
    if (n_tokens < emb->ne[1])
      detail::gguf_model_fail(f, detail::msg("tokenizer.ggml.tokens (at offset ", tv->file_offset, ") holds ", n_tokens,
                                             " tokens, fewer than ", emb_name, "'s ", emb->ne[1],
                                             " rows (vocab_size); the model could produce ids without text"));
  }
  if (const auto* v = f.find(a + "vocab_size"); v && f.get_u64(a + "vocab_size") != emb->ne[1])
    detail::gguf_model_fail(f, detail::msg("key '", a, "vocab_size' = ", f.get_u64(a + "vocab_size"),
                                           " disagrees with ", emb_name, "'s ", emb->ne[1], " rows"));
  c.shared_classifier = f.find_tensor(tensor_spec(TensorId::kClassifier).gguf) == nullptr;
  c.validate();

  // Every tensor the model uses (the rows of architecture.hpp), checked for shape and type.
  std::vector<const GGUFTensorInfo*> used;
  for_each_tensor_spec(c, [&](const TensorSpec& s, int layer) {
    // GGUF lists ne[0] (the row length) first: a matrix is [cols, rows], a vector [length].
    const std::uint64_t rows = tensor_rows(s, c), cols = tensor_cols(s, c);
    const GGUFTensorInfo* t = detail::gguf_tensor(f, gguf_tensor_name(s, layer, c.attn_sinks), s.matrix ? cols : rows,
                                                  s.matrix ? rows : 0, s.presence == Presence::kIfStored,
                                                  s.experts == Dim::kOne ? 0 : tensor_experts(s, c));
    if (t) used.push_back(t);
    if (t && s.experts != Dim::kOne) info.expert_bytes += t->n_bytes;
  });
  // Every tensor must be used: llama.cpp refuses or applies what kvdecode would ignore
  // (a bias, a layer beyond block_count, an unknown tensor).
  std::unordered_set<const GGUFTensorInfo*> used_set(used.begin(), used.end());
  for (const GGUFTensorInfo& t : f.tensors()) {
    if (used_set.count(&t)) continue;
    if (!options.allow_unused_tensors)
      detail::gguf_model_fail(f, detail::msg("tensor '", t.name, "' (record at offset ", t.info_offset,
                                             ") is not used by a ", info.architecture, " model of ", c.n_layers,
                                             " layers (block_count); ", f.tensors().size() - used.size(), " of the file's ",
                                             f.tensors().size(), " tensors are unused, the limit is 0 (pass "
                                             "allow_unused_tensors / --allow-unused-tensors to load it anyway)"));
    info.unused_tensors.push_back(t.name);
  }
  for (const GGUFTensorInfo* t : used) {
    info.weight_bytes += t->n_bytes;
    auto it = info.bytes_by_type.begin();
    while (it != info.bytes_by_type.end() && it->first != t->type) ++it;
    if (it == info.bytes_by_type.end())
      info.bytes_by_type.emplace_back(t->type, t->n_bytes);
    else
      it->second += t->n_bytes;
  }
  return info;
}

/// Builds the model's weights from a parsed GGUF file, which the returned
/// matrices keep alive and view in place. Throws as gguf_model_info() does.
template <class T>
ModelWeights<T> load_gguf_weights(std::shared_ptr<const detail::GGUFOwner> owner, const GGUFLoadOptions& options = {}) {
  const GGUFFile& f = owner->file;
  const GGUFModelInfo info = gguf_model_info(f, options);
  const ModelConfig& c = info.config;
  if (options.unused_tensors)
    options.unused_tensors->insert(options.unused_tensors->end(), info.unused_tensors.begin(), info.unused_tensors.end());
  ModelWeights<T> w;
  w.config = c;
  auto matrix = [&](const std::string& name) {
    const GGUFTensorInfo* t = f.find_tensor(name);
    try {
      detail::check_blocks(t->type, f.tensor_data(*t), static_cast<std::int64_t>(t->rows()),
                           static_cast<std::int64_t>(t->ne[0]), name);
    } catch (const FormatError& e) {
      detail::gguf_model_fail(f, e.what());
    }
    return WeightMatrix::view(t->type, static_cast<long>(t->rows()), static_cast<long>(t->ne[0]), f.tensor_data(*t), owner);
  };
  auto vec = [&](const std::string& name) {  // every row, one after the other (an expert vector: [F, E])
    const GGUFTensorInfo* t = f.find_tensor(name);
    const WeightMatrix m = matrix(name);
    Vector<T> v(static_cast<long>(t->ne[0] * t->rows()));
    for (long r = 0; r < m.rows(); ++r) m.dequantize_row(r, v.data() + r * m.cols());
    return v;
  };
  w.layers.resize(static_cast<std::size_t>(c.n_layers));
  for_each_tensor_spec(c, [&](const TensorSpec& s, int layer) {
    const std::string name = gguf_tensor_name(s, layer, c.attn_sinks);
    if (s.presence == Presence::kIfStored && !f.find_tensor(name)) return;
    const auto slot = tensor_slot(w, s.id, layer);
    if (slot.matrix)
      *slot.matrix = matrix(name);
    else
      *slot.vector = vec(name);
  });
  w.validate();
  return w;
}

/// Opens, parses and loads a GGUF model file. Throws FileError (missing,
/// unreadable), FormatError (a malformed file, a missing or misshapen tensor,
/// an unsupported architecture or type; the message names it) or ConfigError.
template <class T>
ModelWeights<T> load_gguf_model(const std::string& path, const GGUFLoadOptions& options = {}) {
  auto owner = std::make_shared<const detail::GGUFOwner>(GGUFFile::open(path));
  return load_gguf_weights<T>(std::move(owner), options);
}

}  // namespace kvd
