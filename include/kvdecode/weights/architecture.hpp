// Architecture: the one list of a model's tensors and the one table of the
// architectures kvdecode runs. Loaders, writers, the quantizer and the byte counts
// walk these lists instead of naming tensors themselves (gemma.cpp's ForEachTensor,
// llama.cpp's LLM_TENSOR_NAMES):
//   * kTensors: every tensor of ModelWeights (model-level rows) and of LayerWeights
//     (per-layer rows), with kvdecode's member name, its shape as dimension
//     expressions of ModelConfig, when a model has it, its GGUF and Hugging Face
//     names and how ModelWeights::random() fills it. Row i has TensorId i.
//   * tensor_slot / for_each_tensor: the member behind a row, and a visitor over
//     every tensor a layer or a model holds, each with its row.
//   * The on-disk orders that differ from the table's (llama.cpp's GGUF order,
//     llama2.c's by kind across layers) as lists of TensorIds.
//   * kArchitectures: one row per architecture (GGUF general.architecture, Hugging
//     Face class, RoPE pairing, biases, q/k norms, mixture-of-experts routing). An
//     architecture that differs from another only in flags is one more row.
// A mixture of experts stores each expert tensor as one matrix, every expert's rows
// stacked (expert e's rows are [e * rows / E, (e + 1) * rows / E)): GGUF's 3-D
// tensors [cols, rows / E, E] as they lie in the file, Hugging Face's E tensors
// one after the other.
// weights.hpp includes this header: the table sits below the weights it describes.
// How to add an architecture: docs/development.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kvdecode/core/config.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/weights/weight_matrix.hpp"

namespace kvd {

// Defined in weights.hpp, which walks this table (validate, random, release_pages).
template <class T>
struct LayerWeights;
template <class T>
struct ModelWeights;

/// A tensor dimension as an expression of ModelConfig (dimension legend: config.hpp).
enum class Dim : std::uint8_t {
  kOne = 0,       ///< 1: the second dimension of a vector
  kDModel = 1,    ///< D
  kQDim = 2,      ///< H * Dh
  kKvDim = 3,     ///< Hk * Dh
  kHidden = 4,    ///< F
  kHeadDim = 5,   ///< Dh
  kVocab = 6,     ///< V
  kRopeHalf = 7,  ///< rotary_dim / 2 (one RoPE frequency factor per rotated pair)
  kExperts = 8,   ///< E
  kExpertsHidden = 9,  ///< E * F: every expert's gate (or up) rows stacked
  kExpertsDModel = 10, ///< E * D: every expert's down rows stacked
  kHeads = 11,    ///< H (one value per query head)
};

/// The value of `d` for config `c`, in 64 bits (each factor is an int, so no
/// product overflows). `c` need not be validated. Never fails.
inline std::uint64_t dim_value(Dim d, const ModelConfig& c) {
  auto u = [](int v) { return v > 0 ? static_cast<std::uint64_t>(v) : std::uint64_t{0}; };
  switch (d) {
    case Dim::kOne: return 1;
    case Dim::kDModel: return u(c.d_model);
    case Dim::kQDim: return u(c.n_heads) * u(c.head_dim);
    case Dim::kKvDim: return u(c.n_kv_heads) * u(c.head_dim);
    case Dim::kHidden: return u(c.hidden_dim);
    case Dim::kHeadDim: return u(c.head_dim);
    case Dim::kVocab: return u(c.vocab_size);
    case Dim::kRopeHalf: return u(c.rotary_dim()) / 2;
    case Dim::kExperts: return u(c.n_experts);
    case Dim::kExpertsHidden: return u(c.n_experts) * u(c.hidden_dim);
    case Dim::kExpertsDModel: return u(c.n_experts) * u(c.d_model);
    case Dim::kHeads: return u(c.n_heads);
  }
  return 0;
}

/// When a model has a tensor.
enum class Presence : std::uint8_t {
  kAlways = 0,              ///< every model (the dense FFN rows: every model without experts, see dense_ffn)
  kQkvBias = 1,             ///< when config.qkv_bias
  kQkNorm = 2,              ///< when config.qk_norm
  kSeparateClassifier = 3,  ///< when !config.shared_classifier
  kIfStored = 4,            ///< optional: when its source holds it (rope_freqs)
  kMoe = 5,                 ///< when config.moe(): the router and the experts
  kPostNorms = 6,           ///< when config.post_norms (Gemma 3's norms after attention and FFN)
  kSinks = 7,               ///< when config.attn_sinks (gpt-oss)
  kOutBias = 8,             ///< when config.attn_out_bias (gpt-oss)
  kMoeBias = 9,             ///< when config.moe() and config.moe_bias (gpt-oss's router and expert biases)
};

/// How ModelWeights::random() fills a tensor.
enum class RandomInit : std::uint8_t {
  kUnit = 0,       ///< N(0, 1) (the embedding)
  kFanIn = 1,      ///< N(0, 1 / sqrt(cols))
  kHalfFanIn = 2,  ///< N(0, 0.5 / sqrt(cols)): the projections that write into the residual stream
  kNearOne = 3,    ///< 1 + 0.1 N(0, 1) (norms)
  kSmall = 4,      ///< 0.5 N(0, 1) (biases)
  kNone = 5,       ///< left empty
};

/// Every tensor kvdecode knows; the value is the row of kTensors. Explicit values:
/// frozen (the on-disk orders below and the tests name them).
enum class TensorId : std::uint8_t {
  kTokenEmbedding = 0,
  kFinalNorm = 1,
  kClassifier = 2,
  kRopeFreqs = 3,
  kAttnNorm = 4,
  kWq = 5,
  kWk = 6,
  kWv = 7,
  kWo = 8,
  kFfnNorm = 9,
  kW1 = 10,
  kW2 = 11,
  kW3 = 12,
  kBq = 13,
  kBk = 14,
  kBv = 15,
  kQNorm = 16,
  kKNorm = 17,
  kRouter = 18,
  kExpertsGate = 19,
  kExpertsDown = 20,
  kExpertsUp = 21,
  kAttnPostNorm = 22,
  kFfnPostNorm = 23,
  kBo = 24,
  kSinks = 25,
  kRouterBias = 26,
  kExpertsGateBias = 27,
  kExpertsDownBias = 28,
  kExpertsUpBias = 29,
};

/// One row of the tensor table.
struct TensorSpec {
  TensorId id;
  const char* name;     ///< kvdecode's name: the ModelWeights / LayerWeights member
  bool per_layer;       ///< a LayerWeights member (one per layer), else a ModelWeights member
  bool matrix;          ///< a WeightMatrix in its storage type, else a Vector<T> of the compute type
  Dim rows, cols;       ///< y = W x with W rows x cols; a vector holds `rows` values (cols = kOne)
  Presence presence;
  const char* gguf;     ///< GGUF name; per layer the part after "blk.<layer>."
  const char* hf;       ///< Hugging Face name; per layer the part after "model.layers.<layer>."; nullptr: none
                        ///< (with config.post_norms, hf_post_norms when set: Gemma's names)
  RandomInit init;
  /// The experts the rows are split in (kOne: a plain tensor). GGUF stores such a
  /// tensor as [cols, rows / E, E] (a vector: [rows / E, E]); Hugging Face as E
  /// tensors, `hf` with "{e}" for the expert's index.
  Dim experts = Dim::kOne;
  /// A row of the one dense SwiGLU (w1, w2, w3): a mixture of experts has none of
  /// them, whatever its presence says (which describes dense models).
  bool dense_ffn = false;
  /// The Hugging Face name in a model with post norms (Gemma 3), where it differs
  /// from `hf` (Gemma calls the FFN's pre-norm pre_feedforward_layernorm); nullptr: `hf`.
  const char* hf_post_norms = nullptr;
  /// The GGUF name in a gpt-oss file, where it differs from `gguf` (its FFN pre-norm
  /// is post_attention_norm); nullptr: `gguf`.
  const char* gguf_gpt_oss = nullptr;
  /// The Hugging Face name in a gpt-oss folder (GptOssForCausalLM), where it differs
  /// from `hf`: the router mlp.router.weight, and the expert rows, each one tensor of
  /// every expert ([E, in, out], or MXFP4 as <name>_blocks and <name>_scales [E, out, ...]:
  /// hf_model.hpp); nullptr: `hf`.
  const char* hf_gpt_oss = nullptr;
  /// With hf_gpt_oss on an expert row: the half of the fused tensor's out dimension
  /// it takes (HF interleaves gate and up: 0 = the even columns, gate; 1 = the odd
  /// ones, up); -1: the whole tensor.
  int hf_gpt_oss_half = -1;
};

/// The tensor table: model-level rows, then one layer's rows, each group in the
/// order the GGUF and Hugging Face loaders check them (and random() draws them).
inline constexpr TensorSpec kTensors[] = {
    {TensorId::kTokenEmbedding, "token_embedding", false, true, Dim::kVocab, Dim::kDModel, Presence::kAlways,
     "token_embd.weight", "model.embed_tokens.weight", RandomInit::kUnit},
    {TensorId::kFinalNorm, "final_norm", false, false, Dim::kDModel, Dim::kOne, Presence::kAlways,
     "output_norm.weight", "model.norm.weight", RandomInit::kNearOne},
    {TensorId::kClassifier, "classifier", false, true, Dim::kVocab, Dim::kDModel, Presence::kSeparateClassifier,
     "output.weight", "lm_head.weight", RandomInit::kFanIn},
    // Hugging Face folders give RoPE scaling in config.json (rope_scaling), not as a tensor.
    {TensorId::kRopeFreqs, "rope_freq_factors", false, false, Dim::kRopeHalf, Dim::kOne, Presence::kIfStored,
     "rope_freqs.weight", nullptr, RandomInit::kNone},
    {TensorId::kAttnNorm, "attn_norm", true, false, Dim::kDModel, Dim::kOne, Presence::kAlways, "attn_norm.weight",
     "input_layernorm.weight", RandomInit::kNearOne},
    {TensorId::kWq, "wq", true, true, Dim::kQDim, Dim::kDModel, Presence::kAlways, "attn_q.weight",
     "self_attn.q_proj.weight", RandomInit::kFanIn},
    {TensorId::kWk, "wk", true, true, Dim::kKvDim, Dim::kDModel, Presence::kAlways, "attn_k.weight",
     "self_attn.k_proj.weight", RandomInit::kFanIn},
    {TensorId::kWv, "wv", true, true, Dim::kKvDim, Dim::kDModel, Presence::kAlways, "attn_v.weight",
     "self_attn.v_proj.weight", RandomInit::kFanIn},
    {TensorId::kWo, "wo", true, true, Dim::kDModel, Dim::kQDim, Presence::kAlways, "attn_output.weight",
     "self_attn.o_proj.weight", RandomInit::kHalfFanIn},
    {TensorId::kFfnNorm, "ffn_norm", true, false, Dim::kDModel, Dim::kOne, Presence::kAlways, "ffn_norm.weight",
     "post_attention_layernorm.weight", RandomInit::kNearOne, Dim::kOne, false, "pre_feedforward_layernorm.weight",
     "post_attention_norm.weight"},
    {TensorId::kW1, "w1", true, true, Dim::kHidden, Dim::kDModel, Presence::kAlways, "ffn_gate.weight",
     "mlp.gate_proj.weight", RandomInit::kFanIn, Dim::kOne, true},
    {TensorId::kW2, "w2", true, true, Dim::kDModel, Dim::kHidden, Presence::kAlways, "ffn_down.weight",
     "mlp.down_proj.weight", RandomInit::kHalfFanIn, Dim::kOne, true},
    {TensorId::kW3, "w3", true, true, Dim::kHidden, Dim::kDModel, Presence::kAlways, "ffn_up.weight",
     "mlp.up_proj.weight", RandomInit::kFanIn, Dim::kOne, true},
    {TensorId::kBq, "bq", true, false, Dim::kQDim, Dim::kOne, Presence::kQkvBias, "attn_q.bias",
     "self_attn.q_proj.bias", RandomInit::kSmall},
    {TensorId::kBk, "bk", true, false, Dim::kKvDim, Dim::kOne, Presence::kQkvBias, "attn_k.bias",
     "self_attn.k_proj.bias", RandomInit::kSmall},
    {TensorId::kBv, "bv", true, false, Dim::kKvDim, Dim::kOne, Presence::kQkvBias, "attn_v.bias",
     "self_attn.v_proj.bias", RandomInit::kSmall},
    {TensorId::kQNorm, "q_norm", true, false, Dim::kHeadDim, Dim::kOne, Presence::kQkNorm, "attn_q_norm.weight",
     "self_attn.q_norm.weight", RandomInit::kNearOne},
    {TensorId::kKNorm, "k_norm", true, false, Dim::kHeadDim, Dim::kOne, Presence::kQkNorm, "attn_k_norm.weight",
     "self_attn.k_norm.weight", RandomInit::kNearOne},
    {TensorId::kRouter, "router", true, true, Dim::kExperts, Dim::kDModel, Presence::kMoe, "ffn_gate_inp.weight",
     "mlp.gate.weight", RandomInit::kFanIn, Dim::kOne, false, nullptr, nullptr, "mlp.router.weight"},
    {TensorId::kExpertsGate, "experts_gate", true, true, Dim::kExpertsHidden, Dim::kDModel, Presence::kMoe,
     "ffn_gate_exps.weight", "mlp.experts.{e}.gate_proj.weight", RandomInit::kFanIn, Dim::kExperts, false, nullptr,
     nullptr, "mlp.experts.gate_up_proj", 0},
    {TensorId::kExpertsDown, "experts_down", true, true, Dim::kExpertsDModel, Dim::kHidden, Presence::kMoe,
     "ffn_down_exps.weight", "mlp.experts.{e}.down_proj.weight", RandomInit::kHalfFanIn, Dim::kExperts, false, nullptr,
     nullptr, "mlp.experts.down_proj"},
    {TensorId::kExpertsUp, "experts_up", true, true, Dim::kExpertsHidden, Dim::kDModel, Presence::kMoe,
     "ffn_up_exps.weight", "mlp.experts.{e}.up_proj.weight", RandomInit::kFanIn, Dim::kExperts, false, nullptr,
     nullptr, "mlp.experts.gate_up_proj", 1},
    {TensorId::kAttnPostNorm, "attn_post_norm", true, false, Dim::kDModel, Dim::kOne, Presence::kPostNorms,
     "post_attention_norm.weight", "post_attention_layernorm.weight", RandomInit::kNearOne},
    {TensorId::kFfnPostNorm, "ffn_post_norm", true, false, Dim::kDModel, Dim::kOne, Presence::kPostNorms,
     "post_ffw_norm.weight", "post_feedforward_layernorm.weight", RandomInit::kNearOne},
    // gpt-oss: the output projection's bias, the sinks (one logit per query head) and
    // the biases of the router and of every expert's gate, down and up, stacked as
    // the expert matrices' rows are (GGUF [F, E] and [D, E]).
    {TensorId::kBo, "bo", true, false, Dim::kDModel, Dim::kOne, Presence::kOutBias, "attn_output.bias",
     "self_attn.o_proj.bias", RandomInit::kSmall},
    {TensorId::kSinks, "attn_sinks", true, false, Dim::kHeads, Dim::kOne, Presence::kSinks, "attn_sinks.weight",
     "self_attn.sinks", RandomInit::kSmall},
    {TensorId::kRouterBias, "router_bias", true, false, Dim::kExperts, Dim::kOne, Presence::kMoeBias,
     "ffn_gate_inp.bias", "mlp.router.bias", RandomInit::kSmall},
    {TensorId::kExpertsGateBias, "experts_gate_bias", true, false, Dim::kExpertsHidden, Dim::kOne, Presence::kMoeBias,
     "ffn_gate_exps.bias", nullptr, RandomInit::kSmall, Dim::kExperts, false, nullptr, nullptr,
     "mlp.experts.gate_up_proj_bias", 0},
    {TensorId::kExpertsDownBias, "experts_down_bias", true, false, Dim::kExpertsDModel, Dim::kOne, Presence::kMoeBias,
     "ffn_down_exps.bias", nullptr, RandomInit::kSmall, Dim::kExperts, false, nullptr, nullptr,
     "mlp.experts.down_proj_bias"},
    {TensorId::kExpertsUpBias, "experts_up_bias", true, false, Dim::kExpertsHidden, Dim::kOne, Presence::kMoeBias,
     "ffn_up_exps.bias", nullptr, RandomInit::kSmall, Dim::kExperts, false, nullptr, nullptr,
     "mlp.experts.gate_up_proj_bias", 1},
};
inline constexpr std::size_t kTensorCount = sizeof(kTensors) / sizeof(kTensors[0]);

namespace detail {
constexpr bool tensor_rows_in_id_order() {
  for (std::size_t i = 0; i < kTensorCount; ++i)
    if (static_cast<std::size_t>(kTensors[i].id) != i) return false;
  return true;
}
static_assert(tensor_rows_in_id_order(), "kTensors[i].id must be i");
}  // namespace detail

/// The row of `id`. Precondition: `id` is a TensorId value (asserted at compile time
/// for the table; any other value is undefined).
inline const TensorSpec& tensor_spec(TensorId id) { return kTensors[static_cast<std::size_t>(id)]; }

/// Rows and columns of the tensor for config `c` (a vector: its length x 1). Never fails.
inline std::uint64_t tensor_rows(const TensorSpec& s, const ModelConfig& c) { return dim_value(s.rows, c); }
inline std::uint64_t tensor_cols(const TensorSpec& s, const ModelConfig& c) { return dim_value(s.cols, c); }

/// True when every model of config `c` holds the tensor; false for the optional
/// (kIfStored) rows, which a source may or may not hold. Never fails.
inline bool tensor_required(const TensorSpec& s, const ModelConfig& c) {
  if (s.dense_ffn && c.moe()) return false;
  switch (s.presence) {
    case Presence::kAlways: return true;
    case Presence::kQkvBias: return c.qkv_bias;
    case Presence::kQkNorm: return c.qk_norm;
    case Presence::kSeparateClassifier: return !c.shared_classifier;
    case Presence::kIfStored: return false;
    case Presence::kMoe: return c.moe();
    case Presence::kPostNorms: return c.post_norms;
    case Presence::kSinks: return c.attn_sinks;
    case Presence::kOutBias: return c.attn_out_bias;
    case Presence::kMoeBias: return c.moe() && c.moe_bias;
  }
  return false;
}

/// True for the RMSNorm weight rows (attn_norm, ffn_norm, q_norm, k_norm, the post
/// norms, final_norm): the ones Hugging Face Gemma applies as (1 + w). Never fails.
inline bool tensor_is_rmsnorm(TensorId id) {
  switch (id) {
    case TensorId::kAttnNorm: case TensorId::kFfnNorm: case TensorId::kQNorm: case TensorId::kKNorm:
    case TensorId::kAttnPostNorm: case TensorId::kFfnPostNorm: case TensorId::kFinalNorm: return true;
    default: return false;
  }
}

/// The GGUF name of the tensor in `layer` (-1 for a model-level row), e.g.
/// "blk.3.attn_q.weight". `gpt_oss`: the name in a gpt-oss file (the one architecture
/// with attention sinks, so callers pass config.attn_sinks). Never fails.
inline std::string gguf_tensor_name(const TensorSpec& s, int layer, bool gpt_oss = false) {
  const char* g = gpt_oss && s.gguf_gpt_oss ? s.gguf_gpt_oss : s.gguf;
  // Plain concatenation, not detail::msg: the loaders name every tensor of every layer.
  return s.per_layer ? "blk." + std::to_string(layer) + "." + g : std::string(g);
}

/// The Hugging Face name of the tensor in `layer` (-1 for a model-level row), e.g.
/// "model.layers.3.self_attn.q_proj.weight"; empty when Hugging Face folders do not
/// store it as a tensor. `post_norms`: the name in a model with post norms (Gemma 3),
/// which differs for ffn_norm; `gpt_oss`: the name in a gpt-oss folder (the one
/// architecture with attention sinks, so callers pass config.attn_sinks). Never fails.
inline std::string hf_tensor_name(const TensorSpec& s, int layer, bool post_norms = false, bool gpt_oss = false) {
  const char* hf = gpt_oss && s.hf_gpt_oss ? s.hf_gpt_oss : post_norms && s.hf_post_norms ? s.hf_post_norms : s.hf;
  if (!hf) return std::string();
  return s.per_layer ? "model.layers." + std::to_string(layer) + "." + hf : std::string(hf);
}

/// The experts tensor `s` splits its rows in for config `c` (1 for a plain tensor). Never fails.
inline std::uint64_t tensor_experts(const TensorSpec& s, const ModelConfig& c) { return dim_value(s.experts, c); }

/// The GGUF shape of the tensor, ne[0] (the row length) first: [length] for a
/// vector, [cols, rows] for a matrix, [cols, rows / E, E] for an expert tensor,
/// [length / E, E] for an expert vector (gpt-oss's expert biases). Never fails.
inline std::vector<std::uint64_t> gguf_tensor_ne(const TensorSpec& s, const ModelConfig& c) {
  const std::uint64_t e = tensor_experts(s, c);
  if (!s.matrix) return s.experts == Dim::kOne ? std::vector<std::uint64_t>{tensor_rows(s, c)}
                                               : std::vector<std::uint64_t>{e ? tensor_rows(s, c) / e : 0, e};
  if (s.experts == Dim::kOne) return {tensor_cols(s, c), tensor_rows(s, c)};
  return {tensor_cols(s, c), e ? tensor_rows(s, c) / e : 0, e};
}

/// The Hugging Face name of expert `e`'s part of an expert tensor in `layer`, e.g.
/// "model.layers.3.mlp.experts.7.gate_proj.weight" ("{e}" replaced). Never fails.
inline std::string hf_expert_tensor_name(const TensorSpec& s, int layer, int e) {
  std::string n = hf_tensor_name(s, layer);
  const std::size_t at = n.find("{e}");
  if (at != std::string::npos) n.replace(at, 3, std::to_string(e));
  return n;
}

/// Values of every tensor a model of config `c` holds (the optional rope_freqs
/// excluded): the table's count of ModelConfig::n_params(). Never fails for a valid config.
inline std::uint64_t tensor_param_count(const ModelConfig& c) {
  std::uint64_t per_layer = 0, model = 0;
  for (const TensorSpec& s : kTensors)
    if (tensor_required(s, c)) (s.per_layer ? per_layer : model) += tensor_rows(s, c) * tensor_cols(s, c);
  return model + static_cast<std::uint64_t>(c.n_layers > 0 ? c.n_layers : 0) * per_layer;
}

/// Calls f(spec, layer) for every tensor a model of config `c` may hold: the
/// model-level rows (layer -1), then each layer's rows, in table order. Optional
/// (kIfStored) rows are included: the caller asks its source whether it holds them.
template <class F>
void for_each_tensor_spec(const ModelConfig& c, F&& f) {
  for (const TensorSpec& s : kTensors)
    if (!s.per_layer && (tensor_required(s, c) || s.presence == Presence::kIfStored)) f(s, -1);
  for (int l = 0; l < c.n_layers; ++l)
    for (const TensorSpec& s : kTensors)
      if (s.per_layer && tensor_required(s, c)) f(s, l);
}

/// The member behind a row: exactly one of `matrix` and `vector` is set (both null
/// for a row of the other level: a model-level id asked of a layer, or the reverse).
template <class M, class V>
struct TensorSlot {
  M* matrix = nullptr;
  V* vector = nullptr;
};

namespace detail {
template <class Slot, class Layer>
Slot layer_slot(Layer& l, TensorId id) {
  Slot s;
  switch (id) {
    case TensorId::kAttnNorm: s.vector = &l.attn_norm; break;
    case TensorId::kWq: s.matrix = &l.wq; break;
    case TensorId::kWk: s.matrix = &l.wk; break;
    case TensorId::kWv: s.matrix = &l.wv; break;
    case TensorId::kWo: s.matrix = &l.wo; break;
    case TensorId::kFfnNorm: s.vector = &l.ffn_norm; break;
    case TensorId::kW1: s.matrix = &l.w1; break;
    case TensorId::kW2: s.matrix = &l.w2; break;
    case TensorId::kW3: s.matrix = &l.w3; break;
    case TensorId::kBq: s.vector = &l.bq; break;
    case TensorId::kBk: s.vector = &l.bk; break;
    case TensorId::kBv: s.vector = &l.bv; break;
    case TensorId::kQNorm: s.vector = &l.q_norm; break;
    case TensorId::kKNorm: s.vector = &l.k_norm; break;
    case TensorId::kRouter: s.matrix = &l.router; break;
    case TensorId::kExpertsGate: s.matrix = &l.experts_gate; break;
    case TensorId::kExpertsDown: s.matrix = &l.experts_down; break;
    case TensorId::kExpertsUp: s.matrix = &l.experts_up; break;
    case TensorId::kAttnPostNorm: s.vector = &l.attn_post_norm; break;
    case TensorId::kFfnPostNorm: s.vector = &l.ffn_post_norm; break;
    case TensorId::kBo: s.vector = &l.bo; break;
    case TensorId::kSinks: s.vector = &l.attn_sinks; break;
    case TensorId::kRouterBias: s.vector = &l.router_bias; break;
    case TensorId::kExpertsGateBias: s.vector = &l.experts_gate_bias; break;
    case TensorId::kExpertsDownBias: s.vector = &l.experts_down_bias; break;
    case TensorId::kExpertsUpBias: s.vector = &l.experts_up_bias; break;
    default: break;  // a model-level id
  }
  return s;
}
template <class Slot, class Model>
Slot model_slot(Model& w, TensorId id) {
  Slot s;
  switch (id) {
    case TensorId::kTokenEmbedding: s.matrix = &w.token_embedding; break;
    case TensorId::kFinalNorm: s.vector = &w.final_norm; break;
    case TensorId::kClassifier: s.matrix = &w.classifier; break;
    case TensorId::kRopeFreqs: s.vector = &w.rope_freq_factors; break;
    default: break;  // a per-layer id
  }
  return s;
}
}  // namespace detail

/// The member of layer `l` that row `id` describes (empty slot for a model-level id). Never fails.
template <class T>
TensorSlot<WeightMatrix, Vector<T>> tensor_slot(LayerWeights<T>& l, TensorId id) {
  return detail::layer_slot<TensorSlot<WeightMatrix, Vector<T>>>(l, id);
}
template <class T>
TensorSlot<const WeightMatrix, const Vector<T>> tensor_slot(const LayerWeights<T>& l, TensorId id) {
  return detail::layer_slot<TensorSlot<const WeightMatrix, const Vector<T>>>(l, id);
}

/// The member of `w` that row `id` describes in `layer` (ignored for model-level
/// rows). Precondition: 0 <= layer < w.layers.size() for a per-layer id.
template <class T>
TensorSlot<WeightMatrix, Vector<T>> tensor_slot(ModelWeights<T>& w, TensorId id, int layer) {
  using Slot = TensorSlot<WeightMatrix, Vector<T>>;
  if (tensor_spec(id).per_layer) return tensor_slot(w.layers[static_cast<std::size_t>(layer)], id);
  return detail::model_slot<Slot>(w, id);
}
template <class T>
TensorSlot<const WeightMatrix, const Vector<T>> tensor_slot(const ModelWeights<T>& w, TensorId id, int layer) {
  using Slot = TensorSlot<const WeightMatrix, const Vector<T>>;
  if (tensor_spec(id).per_layer) return tensor_slot(w.layers[static_cast<std::size_t>(layer)], id);
  return detail::model_slot<Slot>(w, id);
}

/// Calls f(spec, slot) for every tensor layer `l` holds under config `c`, in table order.
template <class T, class F>
void for_each_tensor(LayerWeights<T>& l, const ModelConfig& c, F&& f) {
  for (const TensorSpec& s : kTensors)
    if (s.per_layer && tensor_required(s, c)) f(s, tensor_slot(l, s.id));
}
template <class T, class F>
void for_each_tensor(const LayerWeights<T>& l, const ModelConfig& c, F&& f) {
  for (const TensorSpec& s : kTensors)
    if (s.per_layer && tensor_required(s, c)) f(s, tensor_slot(l, s.id));
}

namespace detail {
template <class W, class F>
void for_each_model_tensor(W& w, F& f) {
  for_each_tensor_spec(w.config, [&](const TensorSpec& s, int layer) {
    if (layer >= static_cast<int>(w.layers.size())) return;
    const auto slot = tensor_slot(w, s.id, layer);
    if (s.presence == Presence::kIfStored && (slot.matrix ? slot.matrix->rows() : slot.vector->size()) == 0) return;
    f(s, layer, slot);
  });
}
}  // namespace detail

/// Calls f(spec, layer, slot) for every tensor `w` holds under w.config: the
/// model-level ones (layer -1; an optional one only when non-empty), then each
/// layer's, in table order. Layers beyond w.layers.size() are skipped.
template <class T, class F>
void for_each_tensor(ModelWeights<T>& w, F&& f) {
  detail::for_each_model_tensor(w, f);
}
template <class T, class F>
void for_each_tensor(const ModelWeights<T>& w, F&& f) {
  detail::for_each_model_tensor(w, f);
}

/// The order llama.cpp's converter (and so kvdecode-quantize) writes one layer's
/// GGUF tensors; model-level tensors come first, in table order. Every per-layer row
/// appears once (tested).
inline constexpr TensorId kGgufFileLayerOrder[] = {
    TensorId::kWq, TensorId::kWk, TensorId::kWv, TensorId::kWo,    TensorId::kAttnNorm, TensorId::kBq, TensorId::kBk,
    TensorId::kBv, TensorId::kQNorm, TensorId::kKNorm, TensorId::kW1, TensorId::kW2, TensorId::kW3, TensorId::kFfnNorm,
    TensorId::kRouter, TensorId::kExpertsGate, TensorId::kExpertsDown, TensorId::kExpertsUp,
    TensorId::kAttnPostNorm, TensorId::kFfnPostNorm, TensorId::kBo, TensorId::kSinks, TensorId::kRouterBias,
    TensorId::kExpertsGateBias, TensorId::kExpertsDownBias, TensorId::kExpertsUpBias,
};

/// Calls f(spec, layer) for every tensor a model of config `c` may hold, in the
/// GGUF file order of kGgufFileLayerOrder (optional rows included, as for_each_tensor_spec).
template <class F>
void for_each_gguf_file_tensor(const ModelConfig& c, F&& f) {
  for (const TensorSpec& s : kTensors)
    if (!s.per_layer && (tensor_required(s, c) || s.presence == Presence::kIfStored)) f(s, -1);
  for (int l = 0; l < c.n_layers; ++l)
    for (TensorId id : kGgufFileLayerOrder)
      if (tensor_required(tensor_spec(id), c)) f(tensor_spec(id), l);
}

/// llama2.c's on-disk orders: each entry is one model-level tensor or one kind of
/// layer tensor for every layer in turn. kRopeFreqs marks where the legacy format
/// stores its two RoPE tables (freqs_cos, freqs_sin; not kvdecode's rope_freq_factors);
/// kClassifier is stored only when the classifier is separate. llama2.c has no
/// biases and no q/k norms.
inline constexpr TensorId kLlama2cLegacyOrder[] = {
    TensorId::kTokenEmbedding, TensorId::kAttnNorm, TensorId::kWq, TensorId::kWk,        TensorId::kWv,
    TensorId::kWo,             TensorId::kFfnNorm,  TensorId::kW1, TensorId::kW2,        TensorId::kW3,
    TensorId::kFinalNorm,      TensorId::kRopeFreqs, TensorId::kClassifier,
};
inline constexpr TensorId kLlama2cV1Order[] = {
    TensorId::kAttnNorm, TensorId::kFfnNorm, TensorId::kFinalNorm, TensorId::kTokenEmbedding,
    TensorId::kWq,       TensorId::kWk,      TensorId::kWv,        TensorId::kWo,
    TensorId::kW1,       TensorId::kW2,      TensorId::kW3,        TensorId::kClassifier,
};

/// One architecture kvdecode runs: what its files call it and what it implies.
struct Architecture {
  const char* gguf_name;    ///< GGUF general.architecture (several rows may share one)
  const char* hf_class;     ///< Hugging Face config.json architectures[0]; "": no Hugging Face loader
  RopeStyle gguf_rope;      ///< how its GGUF files pair RoPE dimensions (Hugging Face folders always rotate halves)
  bool qkv_bias;            ///< q/k/v biases (Hugging Face: the default of config.json's attention_bias)
  bool qkv_bias_if_stored;  ///< GGUF: biases also when the file holds the first layer's q bias (llama.cpp's llama)
  bool qk_norm;             ///< per-head RMSNorm of q and k before RoPE
  bool hf_window_always;    ///< Hugging Face: a non-null sliding_window applies to every layer without
                            ///< use_sliding_window, and max_window_layers is ignored (Mistral)
  bool moe = false;         ///< a mixture-of-experts FFN (GGUF <arch>.expert_count, expert_used_count,
                            ///< expert_feed_forward_length; Hugging Face num_experts, num_experts_per_tok,
                            ///< moe_intermediate_size)
  RouterOrder router_order = RouterOrder::kSoftmaxTopK;  ///< with moe: how the router picks and weighs
  bool norm_topk_prob = false;  ///< with moe: GGUF's fixed choice (Hugging Face: config.json's norm_topk_prob)
  /// Gemma 3's block: embeddings scaled by sqrt(d_model), post norms (ModelConfig::post_norms),
  /// GeGLU, attention scores over sqrt(query_pre_attn_scalar), local and global layers
  /// (GGUF: attention.sliding_window, the pattern below, local RoPE base 10000;
  /// Hugging Face: sliding_window, sliding_window_pattern or layer_types, rope_local_base_freq),
  /// and Hugging Face norm weights w applied as (1 + w) (GGUF files store 1 + w).
  bool gemma = false;
  int swa_pattern = 0;  ///< with gemma or gpt_oss: the layer pattern when the file gives none (ModelConfig::swa_pattern)
  /// gpt-oss's block: attention sinks, biases on the output projection, the router and
  /// the experts, the clamped SwiGLU, local (attention.sliding_window) and full layers
  /// alternating (pattern 2: even layers local), one RoPE base and YaRN scaling
  /// (rope.scaling.*) on every layer, the FFN pre-norm named post_attention_norm.
  bool gpt_oss = false;
  /// With moe: Hugging Face config.json's keys for the expert count and each expert's width.
  const char* hf_expert_count = "num_experts";
  const char* hf_expert_width = "moe_intermediate_size";
};

/// The architecture table. The first row of a GGUF name is the one GGUF files load as.
inline constexpr Architecture kArchitectures[] = {
    {"llama", "LlamaForCausalLM", RopeStyle::kAdjacent, false, true, false, false},
    {"llama", "MistralForCausalLM", RopeStyle::kAdjacent, false, true, false, true},
    {"qwen2", "Qwen2ForCausalLM", RopeStyle::kHalves, true, false, false, false},
    {"qwen3", "Qwen3ForCausalLM", RopeStyle::kHalves, false, false, true, false},
    {"qwen3moe", "Qwen3MoeForCausalLM", RopeStyle::kHalves, false, false, true, false, true, RouterOrder::kSoftmaxTopK,
     true},
    {"gemma3", "Gemma3ForCausalLM", RopeStyle::kHalves, false, false, true, false, false, RouterOrder::kSoftmaxTopK, false,
     true, 6},
    {"gpt-oss", "GptOssForCausalLM", RopeStyle::kHalves, true, false, false, false, true, RouterOrder::kTopKSoftmax,
     false, false, 2, true, "num_local_experts", "intermediate_size"},
};

/// What a Gemma 3 GGUF file's attention scores are divided by the square root of
/// (ModelConfig::query_pre_attn_scalar): GGUF stores no key for it, and llama.cpp and
/// ik_llama.cpp derive it as Hugging Face's configs set it: d_model / n_heads for the
/// 62-layer model (Gemma 3 27B), head_dim for every other. Never fails (n_heads > 0).
inline int gguf_gemma_attention_scalar(int n_layers, int d_model, int n_heads, int head_dim) {
  return n_layers == 62 ? d_model / n_heads : head_dim;
}

/// A range of architecture rows: kArchitectures by default, or a caller's table (tests).
struct ArchitectureTable {
  const Architecture* first = kArchitectures;
  std::size_t size = sizeof(kArchitectures) / sizeof(kArchitectures[0]);
  const Architecture* begin() const { return first; }
  const Architecture* end() const { return first + size; }
};

/// The first row whose GGUF name is `name`, or nullptr. Never fails.
inline const Architecture* find_gguf_architecture(const std::string& name, ArchitectureTable table = {}) {
  for (const Architecture& a : table)
    if (name == a.gguf_name) return &a;
  return nullptr;
}

/// The row whose Hugging Face class is `name`, or nullptr. Never fails.
inline const Architecture* find_hf_architecture(const std::string& name, ArchitectureTable table = {}) {
  for (const Architecture& a : table)
    if (a.hf_class[0] != '\0' && name == a.hf_class) return &a;
  return nullptr;
}

/// Every distinct GGUF name (gguf = true) or Hugging Face class of the table, in
/// row order, as "a, b and c": what the "not supported" messages list. Never fails.
inline std::string supported_architectures(bool gguf, ArchitectureTable table = {}) {
  std::vector<std::string> names;
  for (const Architecture& a : table) {
    const std::string n = gguf ? a.gguf_name : a.hf_class;
    if (n.empty()) continue;  // a row without a Hugging Face loader
    bool seen = false;
    for (const std::string& m : names) seen = seen || m == n;
    if (!seen) names.push_back(n);
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

/// The row a GGUF writer stores config `c` as: the first whose qkv_bias and qk_norm
/// are c's and which is a mixture of experts with c's routing exactly when c is
/// (llama, qwen2, qwen3, qwen3moe), which has Gemma's block exactly when c has post
/// norms (gemma3) and gpt-oss's exactly when c has sinks, or nullptr when none is.
/// Never fails.
inline const Architecture* gguf_architecture_for(const ModelConfig& c, ArchitectureTable table = {}) {
  for (const Architecture& a : table)
    if (a.qkv_bias == c.qkv_bias && a.qk_norm == c.qk_norm && a.moe == c.moe() && a.gemma == c.post_norms &&
        a.gpt_oss == c.attn_sinks &&
        (!a.moe || (a.router_order == c.router_order && a.norm_topk_prob == c.norm_topk_prob)))
      return &a;
  return nullptr;
}

}  // namespace kvd
