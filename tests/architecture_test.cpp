// The tensor table and the architecture table (architecture.hpp): every row is
// visited once per layer under each architecture's flags, names are unique, the
// on-disk orders list each row once, the table's counts agree with the config's,
// the look-ups and "not supported" messages come from the rows, and a model of
// every architecture row goes through kvdecode's GGUF writer and loader unchanged.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kvdecode/weights/architecture.hpp"
#include "kvdecode/io/checkpoint.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/io/hf_model.hpp"
#include "kvdecode/convert/quantize.hpp"
#include "test_util.hpp"

using namespace kvd;
namespace fs = std::filesystem;

namespace {

/// A tiny model with the flags of architecture row `a` (RoPE pairing as its GGUF files store it).
ModelConfig config_of(const Architecture& a, bool shared_classifier = true) {
  ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 64, 32);
  c.rope_style = a.gguf_rope;
  c.qkv_bias = a.qkv_bias;
  c.qk_norm = a.qk_norm;
  c.shared_classifier = shared_classifier;
  if (a.gemma) {  // Gemma's block, with a pattern that fits two layers (local, then global)
    c = kvd_test::gemma3_like(c, 2, 4);
    c.query_pre_attn_scalar = c.head_dim;
  }
  if (a.gpt_oss) c = kvd_test::gpt_oss_like(c, 4, 2, 4, 4.0, 16);  // gpt-oss's block: local, then full
  return c;
}

template <class Slot>
std::pair<long, long> shape_of(const Slot& s) {
  return s.matrix ? std::make_pair(static_cast<long>(s.matrix->rows()), static_cast<long>(s.matrix->cols()))
                  : std::make_pair(static_cast<long>(s.vector->rows()), 1L);
}

TEST(ArchitectureTable, EveryLayerRowIsVisitedOncePerLayerForEachArchitecture) {
  for (const Architecture& a : kArchitectures) {
    SCOPED_TRACE(a.hf_class);
    const ModelConfig c = config_of(a);
    const ModelWeights<float> w = ModelWeights<float>::random(c, 1);
    for (int l = 0; l < c.n_layers; ++l) {
      std::map<int, int> seen;
      for_each_tensor(w.layers[static_cast<std::size_t>(l)], c, [&](const TensorSpec& s, auto slot) {
        ++seen[static_cast<int>(s.id)];
        EXPECT_TRUE(s.per_layer) << s.name;
        EXPECT_EQ(s.matrix, slot.matrix != nullptr) << s.name;
        EXPECT_EQ(shape_of(slot), std::make_pair(static_cast<long>(tensor_rows(s, c)), static_cast<long>(tensor_cols(s, c))))
            << s.name;
      });
      for (const TensorSpec& s : kTensors)
        EXPECT_EQ(seen[static_cast<int>(s.id)], s.per_layer && tensor_required(s, c) ? 1 : 0) << s.name;
    }
    // The model visitor: every (row, layer) once, model-level rows with layer -1.
    std::set<std::pair<int, int>> visited;
    std::size_t visits = 0;
    for_each_tensor(w, [&](const TensorSpec& s, int layer, auto slot) {
      ++visits;
      visited.insert({static_cast<int>(s.id), layer});
      EXPECT_EQ(s.per_layer, layer >= 0) << s.name;
      EXPECT_EQ(s.matrix, slot.matrix != nullptr) << s.name;
    });
    EXPECT_EQ(visits, visited.size());
    std::size_t per_layer = 0, model = 0;
    for (const TensorSpec& s : kTensors)
      if (tensor_required(s, c)) ++(s.per_layer ? per_layer : model);
    EXPECT_EQ(visits, model + per_layer * static_cast<std::size_t>(c.n_layers));
  }
}

TEST(ArchitectureTable, EveryRowHasItsIdAndItsMember) {
  ModelWeights<float> w = ModelWeights<float>::random(config_of(kArchitectures[0]), 2);
  std::set<const void*> members;
  for (std::size_t i = 0; i < kTensorCount; ++i) {
    const TensorSpec& s = kTensors[i];
    EXPECT_EQ(static_cast<std::size_t>(s.id), i);
    EXPECT_EQ(&tensor_spec(s.id), &s);
    const auto slot = tensor_slot(w, s.id, 0);
    EXPECT_EQ(s.matrix, slot.matrix != nullptr) << s.name;
    EXPECT_EQ(!s.matrix, slot.vector != nullptr) << s.name;
    members.insert(slot.matrix ? static_cast<const void*>(slot.matrix) : static_cast<const void*>(slot.vector));
    EXPECT_EQ(s.matrix, s.cols != Dim::kOne) << s.name;
  }
  EXPECT_EQ(members.size(), kTensorCount);  // no two rows share a member
}

TEST(ArchitectureTable, GgufHfAndMemberNamesAreUnique) {
  std::set<std::string> gguf, member;
  for (const TensorSpec& s : kTensors)
    for (int layer : {0, 1}) {
      if (!s.per_layer && layer == 1) continue;
      const int l = s.per_layer ? layer : -1;
      EXPECT_TRUE(gguf.insert(gguf_tensor_name(s, l)).second) << gguf_tensor_name(s, l);
      if (!s.hf) {
        EXPECT_EQ(hf_tensor_name(s, l), "");
      }
      if (layer == 0) {
        EXPECT_TRUE(member.insert(s.name).second) << s.name;
      }
    }
  // Hugging Face names are unique among the rows one model may hold: without post
  // norms, and with them (Gemma names the FFN's pre-norm otherwise).
  for (bool post : {false, true}) {
    std::set<std::string> hf;
    std::size_t hf_rows = 0;
    for (const TensorSpec& s : kTensors)
      for (int layer : {0, 1}) {
        if ((!s.per_layer && layer == 1) || !s.hf || (!post && s.presence == Presence::kPostNorms)) continue;
        const int l = s.per_layer ? layer : -1;
        ++hf_rows;
        EXPECT_TRUE(hf.insert(hf_tensor_name(s, l, post)).second) << hf_tensor_name(s, l, post);
      }
    EXPECT_EQ(hf.size(), hf_rows);
  }
  // gpt-oss names its router and fused experts otherwise; gate and up share gate_up_proj
  // (hf_gpt_oss_half tells them apart), as their biases share gate_up_proj_bias.
  std::map<std::string, std::set<int>> oss;
  for (const TensorSpec& s : kTensors)
    if (s.hf_gpt_oss) {
      EXPECT_TRUE(oss[hf_tensor_name(s, 0, false, true)].insert(s.hf_gpt_oss_half).second) << s.name;
      EXPECT_EQ(s.experts != Dim::kOne || s.id == TensorId::kRouter, true) << s.name;
    }
  EXPECT_EQ(oss.size(), 5u);
  EXPECT_EQ(oss["model.layers.0.mlp.experts.gate_up_proj"], (std::set<int>{0, 1}));
  EXPECT_EQ(oss["model.layers.0.mlp.experts.gate_up_proj_bias"], (std::set<int>{0, 1}));
  EXPECT_EQ(hf_tensor_name(tensor_spec(TensorId::kRouter), 1, false, true), "model.layers.1.mlp.router.weight");
  EXPECT_EQ(hf_tensor_name(tensor_spec(TensorId::kRouter), 1), "model.layers.1.mlp.gate.weight");
  EXPECT_EQ(hf_tensor_name(tensor_spec(TensorId::kSinks), 1, false, true), "model.layers.1.self_attn.sinks");
  EXPECT_EQ(hf_tensor_name(tensor_spec(TensorId::kFfnNorm), 2, true), "model.layers.2.pre_feedforward_layernorm.weight");
  EXPECT_EQ(hf_tensor_name(tensor_spec(TensorId::kAttnPostNorm), 2, true), "model.layers.2.post_attention_layernorm.weight");
  EXPECT_EQ(gguf_tensor_name(tensor_spec(TensorId::kWq), 3), "blk.3.attn_q.weight");
  EXPECT_EQ(hf_tensor_name(tensor_spec(TensorId::kW2), 3), "model.layers.3.mlp.down_proj.weight");
  EXPECT_EQ(gguf_tensor_name(tensor_spec(TensorId::kClassifier), -1), "output.weight");
}

template <std::size_t N>
std::multiset<int> ids_of(const TensorId (&order)[N]) {
  std::multiset<int> out;
  for (TensorId id : order) out.insert(static_cast<int>(id));
  return out;
}

TEST(ArchitectureTable, FileOrdersListEachRowOnce) {
  std::multiset<int> layer_rows;
  for (const TensorSpec& s : kTensors)
    if (s.per_layer) layer_rows.insert(static_cast<int>(s.id));
  EXPECT_EQ(ids_of(kGgufFileLayerOrder), layer_rows);
  // llama2.c: the same tensors in both layouts, each once; no biases, no q/k norms.
  const std::multiset<int> v1 = ids_of(kLlama2cV1Order);
  EXPECT_EQ(v1.size(), std::set<int>(v1.begin(), v1.end()).size());
  std::multiset<int> legacy = ids_of(kLlama2cLegacyOrder);
  legacy.erase(static_cast<int>(TensorId::kRopeFreqs));  // the legacy RoPE tables' place
  EXPECT_EQ(legacy, v1);
  for (int id : legacy) {
    const TensorSpec& s = tensor_spec(static_cast<TensorId>(id));
    EXPECT_TRUE(s.presence == Presence::kAlways || s.id == TensorId::kClassifier) << s.name;
  }
}

TEST(ArchitectureTable, ParamCountIsTheConfigsForEveryArchitecture) {
  for (const Architecture& a : kArchitectures)
    for (bool shared : {true, false}) {
      const ModelConfig c = config_of(a, shared);
      EXPECT_EQ(tensor_param_count(c), c.n_params()) << a.hf_class << " shared=" << shared;
    }
}

TEST(ArchitectureTable, LookupsReturnTheRow) {
  const Architecture* q2 = find_gguf_architecture("qwen2");
  ASSERT_NE(q2, nullptr);
  EXPECT_STREQ(q2->hf_class, "Qwen2ForCausalLM");
  EXPECT_TRUE(q2->qkv_bias);
  const Architecture* mistral = find_hf_architecture("MistralForCausalLM");
  ASSERT_NE(mistral, nullptr);
  EXPECT_STREQ(mistral->gguf_name, "llama");
  EXPECT_TRUE(mistral->hf_window_always);
  EXPECT_STREQ(find_gguf_architecture("llama")->hf_class, "LlamaForCausalLM");  // the first llama row
  EXPECT_EQ(find_gguf_architecture("gpt2"), nullptr);
  EXPECT_EQ(find_hf_architecture("llama"), nullptr);
  EXPECT_EQ(supported_architectures(true), "llama, qwen2, qwen3, qwen3moe, gemma3 and gpt-oss");
  EXPECT_EQ(supported_architectures(false),
            "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
            "Gemma3ForCausalLM and GptOssForCausalLM");
  const Architecture* gemma = find_gguf_architecture("gemma3");
  ASSERT_NE(gemma, nullptr);
  EXPECT_STREQ(gemma->hf_class, "Gemma3ForCausalLM");
  EXPECT_TRUE(gemma->gemma && gemma->qk_norm);
  EXPECT_EQ(gemma->swa_pattern, 6);
  const Architecture* oss = find_gguf_architecture("gpt-oss");
  ASSERT_NE(oss, nullptr);
  EXPECT_TRUE(oss->gpt_oss && oss->moe && oss->qkv_bias && !oss->qk_norm);
  EXPECT_EQ(find_hf_architecture("GptOssForCausalLM"), oss);
  EXPECT_STREQ(oss->hf_expert_count, "num_local_experts");
  EXPECT_STREQ(oss->hf_expert_width, "intermediate_size");
  EXPECT_STREQ(find_gguf_architecture("qwen3moe")->hf_expert_count, "num_experts");
  EXPECT_EQ(oss->router_order, RouterOrder::kTopKSoftmax);
  EXPECT_EQ(oss->swa_pattern, 2);
  EXPECT_EQ(gguf_tensor_name(tensor_spec(TensorId::kFfnNorm), 1, true), "blk.1.post_attention_norm.weight");
  EXPECT_EQ(gguf_tensor_name(tensor_spec(TensorId::kFfnNorm), 1), "blk.1.ffn_norm.weight");
}

// An architecture that differs from the others only in flags is one more row: the
// look-ups, the writer's choice and the supported lists find it without other code.
TEST(ArchitectureTable, SyntheticRowThatDiffersOnlyInFlags) {
  const Architecture rows[] = {
      kArchitectures[0], kArchitectures[1], kArchitectures[2], kArchitectures[3],
      {"qwen2norm", "Qwen2NormForCausalLM", RopeStyle::kHalves, true, false, true, false},
  };
  const ArchitectureTable table{rows, std::size(rows)};
  const Architecture* g = find_gguf_architecture("qwen2norm", table);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g, &rows[4]);
  EXPECT_EQ(find_hf_architecture("Qwen2NormForCausalLM", table), &rows[4]);
  ModelConfig c = config_of(rows[4]);
  EXPECT_TRUE(c.qkv_bias && c.qk_norm);
  EXPECT_EQ(gguf_architecture_for(c, table), &rows[4]);
  EXPECT_EQ(gguf_architecture_for(c), nullptr);  // not in kvdecode's table
  EXPECT_EQ(supported_architectures(true, table), "llama, qwen2, qwen3 and qwen2norm");
  // Its tensors are the table's rows for its flags: biases and q/k norms both.
  const ModelWeights<float> w = ModelWeights<float>::random(c, 3);
  EXPECT_NO_THROW(w.validate());
  int vectors = 0;
  for_each_tensor(w.layers[0], c, [&](const TensorSpec& s, auto) { vectors += s.matrix ? 0 : 1; });
  EXPECT_EQ(vectors, 7);  // attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm
}

TEST(ArchitectureTable, GgufUnsupportedMessageListsEveryRow) {
  kvd_test::TempDir dir;
  GGUFWriter g;
  g.set_string("general.architecture", "gpt2");
  g.write(dir.file("gpt2.gguf"));
  try {
    gguf_model_info(GGUFFile::open(dir.file("gpt2.gguf")));
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("architecture 'gpt2' is not supported (kvdecode runs"), std::string::npos) << m;
    for (const Architecture& a : kArchitectures) EXPECT_NE(m.find(a.gguf_name), std::string::npos) << a.gguf_name << ": " << m;
  }
}

TEST(ArchitectureTable, HfUnsupportedMessageListsEveryRow) {
  kvd_test::TempDir dir;
  std::ofstream(dir.file("config.json")) << R"({"architectures": ["GPT2LMHeadModel"]})";
  try {
    hf_model_info(dir.str());
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("architecture 'GPT2LMHeadModel' is not supported (kvdecode runs"), std::string::npos) << m;
    for (const Architecture& a : kArchitectures)
      if (a.hf_class[0] != '\0') {
        EXPECT_NE(m.find(a.hf_class), std::string::npos) << a.hf_class << ": " << m;
      }
    EXPECT_EQ(find_hf_architecture(""), nullptr) << "an empty class is no Hugging Face loader";
  }
}

// Weights missing a row the config asks for are refused, naming the row's member,
// its layer and the shape the table gives.
TEST(ArchitectureTable, WeightsMissingARowAreRefusedNamingIt) {
  ModelWeights<float> w = ModelWeights<float>::random(config_of(*find_gguf_architecture("qwen3")), 4);
  w.layers[1].k_norm = Vector<float>();
  try {
    w.validate();
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("k_norm[layer 1] has shape 0x1, expected 8x1"), std::string::npos) << m;
  }
}

// llama2.c files hold no biases and no q/k norms: such weights are refused by name
// instead of being written without them.
TEST(ArchitectureTable, Llama2cCheckpointRefusesRowsItCannotHold) {
  kvd_test::TempDir dir;
  ModelConfig c = config_of(*find_gguf_architecture("qwen2"));
  c.n_heads = c.n_kv_heads = 4;
  c.rope_style = RopeStyle::kAdjacent;
  const ModelWeights<float> w = ModelWeights<float>::random(c, 5);
  try {
    save_checkpoint(w, dir.file("m.bin"), CheckpointFormat::kLlama2cV1);
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tensor bq (config.qkv_bias = true"), std::string::npos) << m;
    EXPECT_NE(m.find("cannot be stored in a llama2.c checkpoint"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(dir.file("m.bin")));
}

// Every architecture row through kvdecode's GGUF writer (the quantizer's sources and
// keys, stored f32) and back through the GGUF loader: the same config and tensors.
TEST(ArchitectureTable, EveryArchitectureRoundTripsThroughGguf) {
  kvd_test::TempDir dir;
  for (const Architecture& a : kArchitectures) {
    for (bool shared : {true, false}) {
      SCOPED_TRACE(std::string(a.hf_class) + (shared ? " tied" : " separate"));
      const ModelConfig c = config_of(a, shared);
      auto w = std::make_shared<const ModelWeights<float>>(ModelWeights<float>::random(c, 6));
      GGUFWriter g;
      detail::write_model_keys(g, c, "tiny");
      for (const detail::QuantSource& s : detail::sources_from_weights(w)) {
        std::uint64_t rows = 1;
        for (std::size_t d = 1; d < s.ne.size(); ++d) rows *= s.ne[d];
        std::vector<float> data(static_cast<std::size_t>(rows * s.ne[0]));
        for (std::uint64_t r = 0; r < rows; ++r) s.row(r, data.data() + r * s.ne[0]);
        g.add_tensor(s.name, WeightType::kF32, s.ne, data.data(), data.size() * 4);
      }
      const std::string path = dir.file("m.gguf");
      g.write(path);
      const ModelWeights<float> back = load_gguf_model<float>(path);
      EXPECT_EQ(back.config.qkv_bias, c.qkv_bias);
      EXPECT_EQ(back.config.qk_norm, c.qk_norm);
      EXPECT_EQ(back.config.rope_style, c.rope_style);
      EXPECT_EQ(back.config.shared_classifier, c.shared_classifier);
      EXPECT_EQ(back.config.post_norms, c.post_norms);
      EXPECT_EQ(back.config.swa_pattern, c.swa_pattern);
      EXPECT_EQ(back.config.local_window, c.local_window);
      EXPECT_EQ(back.config.embed_scale, c.embed_scale);
      EXPECT_EQ(back.config.ffn_activation, c.ffn_activation);
      EXPECT_EQ(back.config.attention_scalar(), c.attention_scalar());
      EXPECT_EQ(back.config.attn_sinks, c.attn_sinks);
      EXPECT_EQ(back.config.moe_bias, c.moe_bias);
      EXPECT_EQ(back.config.rope_scaling, c.rope_scaling);
      EXPECT_EQ(back.config.rope_scale, c.rope_scale);
      EXPECT_EQ(back.config.yarn_orig_ctx, c.yarn_orig_ctx);
      std::size_t compared = 0;
      for_each_tensor(*w, [&](const TensorSpec& s, int layer, auto slot) {
        const auto other = tensor_slot(back, s.id, layer);
        ++compared;
        if (slot.matrix) {
          ASSERT_EQ(slot.matrix->rows(), other.matrix->rows()) << s.name;
          std::vector<float> x(static_cast<std::size_t>(slot.matrix->cols())), y(x.size());
          for (long r = 0; r < slot.matrix->rows(); ++r) {
            slot.matrix->dequantize_row(r, x.data());
            other.matrix->dequantize_row(r, y.data());
            ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0) << s.name << " layer " << layer << " row " << r;
          }
        } else {
          ASSERT_EQ(*slot.vector, *other.vector) << s.name << " layer " << layer;
        }
      });
      const std::size_t per_layer = 6 + (c.moe() ? 4 : 3) + (c.qkv_bias ? 3 : 0) + (c.qk_norm ? 2 : 0) +
                                    (c.post_norms ? 2 : 0) + (c.attn_sinks ? 1 : 0) + (c.attn_out_bias ? 1 : 0) +
                                    (c.moe_bias ? 4 : 0);
      EXPECT_EQ(compared, (c.shared_classifier ? 2 : 3) + per_layer * 2);
    }
  }
}

}  // namespace
