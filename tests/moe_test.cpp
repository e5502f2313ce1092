// The mixture-of-experts FFN (model/moe.hpp) and the qwen3moe architecture: the
// router's one order (ranks, ties, normalisation), the bytes a decode step reads,
// quantized experts on every path bit for bit, a qwen3moe GGUF written by kvdecode's
// writer and read back, and each kind of bad MoE input refused with a typed error
// naming the key or tensor. The exactness suites run on MoE shapes in
// transformer_test.cpp (Qwen3Moe_E8_K2, Moe_E5_K3_TopKSoftmax_F16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include "kvdecode/convert/quantize.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/io/hf_model.hpp"
#include "kvdecode/cache/planner.hpp"
#include "kvdecode/load/model_loader.hpp"
#include "test_util.hpp"

using namespace kvd;

namespace {

ModelConfig tiny_moe(int experts = 4, int used = 2) {
  ModelConfig c = kvd_test::qwen3moe_like(kvd_test::small_config(4, 2, 8, 32, 2, 16, 40, 24), experts, used);
  c.norm_eps = 0x1p-17;  // a float: GGUF stores it as f32, so the file's model is this one exactly
  return c;
}

std::shared_ptr<const ModelWeights<float>> tiny_weights(std::uint64_t seed = 3) {
  return std::make_shared<const ModelWeights<float>>(ModelWeights<float>::random(tiny_moe(), seed));
}

}  // namespace

// Softmax then top-k: the experts by rank (highest first, ties to the lower index),
// their probabilities, then normalised to sum 1.
TEST(MoeRouter, SoftmaxTopKRanksByWeightTiesToTheLowerIndex) {
  const float logits[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  float scratch[5], w[3];
  int e[3];
  detail::route_row(logits, 5, 3, RouterOrder::kSoftmaxTopK, false, scratch, e, w);
  EXPECT_EQ(e[0], 1);
  EXPECT_EQ(e[1], 3);
  EXPECT_EQ(e[2], 4);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - 2.0);
  EXPECT_NEAR(w[0], 1.0 / sum, 1e-6);
  EXPECT_EQ(w[0], w[1]);
  EXPECT_NEAR(w[2], std::exp(-1.0) / sum, 1e-6);
  detail::route_row(logits, 5, 3, RouterOrder::kSoftmaxTopK, true, scratch, e, w);
  EXPECT_NEAR(static_cast<double>(w[0]) + w[1] + w[2], 1.0, 1e-6);
  EXPECT_NEAR(w[2] / w[0], std::exp(-1.0), 1e-6);
}

// Top-k then softmax (gpt-oss): the weights are a softmax over the K chosen logits.
TEST(MoeRouter, TopKSoftmaxIsASoftmaxOverTheChosenLogits) {
  const double logits[4] = {0.0, 3.0, 1.0, 2.0};
  double scratch[4], w[2];
  int e[2];
  detail::route_row(logits, 4, 2, RouterOrder::kTopKSoftmax, false, scratch, e, w);
  EXPECT_EQ(e[0], 1);
  EXPECT_EQ(e[1], 3);
  EXPECT_NEAR(w[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-15);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-15);
}

// NaN logits are never chosen over numbers, and a row of NaNs still picks K experts.
TEST(MoeRouter, NaNLogitsPickValidExperts) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float logits[4] = {nan, nan, nan, nan};
  float scratch[4], w[2];
  int e[2];
  detail::route_row(logits, 4, 2, RouterOrder::kTopKSoftmax, false, scratch, e, w);
  EXPECT_EQ(e[0], 0);
  EXPECT_EQ(e[1], 1);
}

// A decode step reads the router and K of the E experts: the model's active bytes
// are the dense part plus K experts per layer, its total bytes hold all E.
TEST(MoeBytes, DecodeReadsKExpertsOfE) {
  const ModelConfig c = tiny_moe(8, 2);
  const Model<float> m(ModelWeights<float>::random(c, 1));
  const auto& moe = m.blocks()[0].moe();
  const std::uint64_t expert = (moe.bytes() - moe.router().bytes()) / 8;
  EXPECT_EQ(moe.active_bytes(), moe.router().bytes() + 2 * expert);
  EXPECT_EQ(m.weight_bytes() - m.weight_bytes_per_token(),
            m.embedding().bytes() - m.embedding().row_bytes() + c.n_layers * 6 * expert -
                sizeof(float) * (c.d_model * (2ull * c.n_layers + 1)));
}

// Experts in q8_0 and q4_K (and an f32 router): the reference, one prefill, prefill
// then decode, chunked prefill, batched decode and the paged cache give the same
// bits, with 1 and 2 threads.
TEST(MoeExactness, QuantizedExpertsSameBitsOnEveryPath) {
  ModelConfig c = kvd_test::qwen3moe_like(kvd_test::small_config(4, 2, 16, 256, 2, 256, 50, 40), 6, 2);
  ModelWeights<float> w = ModelWeights<float>::random(c, 9);
  auto quantize = [](WeightMatrix& m, WeightType t) {
    WeightMatrix q = WeightMatrix::zeros(t, m.rows(), m.cols());
    std::vector<float> row(static_cast<std::size_t>(m.cols()));
    for (long r = 0; r < m.rows(); ++r) {
      m.dequantize_row(r, row.data());
      detail::quantize_row(t, row.data(), const_cast<unsigned char*>(q.row_data(r)), m.cols());
    }
    m = q;
  };
  for (auto& l : w.layers) {
    quantize(l.experts_gate, WeightType::kQ4_K);
    quantize(l.experts_up, WeightType::kQ8_0);
    quantize(l.experts_down, WeightType::kQ4_K);
  }
  kvd_test::expect_every_path_same_bits(w, kvd_test::make_tokens(c.max_seq_len, c.vocab_size, 5));
}

// A qwen3moe model through kvdecode's GGUF writer and loader: the same config, and
// logits bit-identical to the in-memory model's.
TEST(Qwen3MoeGguf, RoundTripsThroughKvdecodesWriter) {
  kvd_test::TempDir dir;
  const auto w = tiny_weights();
  const std::string path = dir.file("moe.gguf");
  kvd_test::write_gguf_f32(path, w);
  const GGUFModelInfo info = gguf_model_info(GGUFFile::open(path));
  EXPECT_EQ(info.architecture, "qwen3moe");
  EXPECT_EQ(info.config, w->config);
  Transformer<float> a(*w), b(load_gguf_model<float>(path));
  const auto tokens = kvd_test::make_tokens(10, w->config.vocab_size, 2);
  const RowMatrix<float> la = a.forward_reference(tokens), lb = b.forward_reference(tokens);
  EXPECT_TRUE(kvd_test::same_bits(la.data(), lb.data(), la.size()));
}

TEST(Qwen3MoeBadInput, ZeroExpertCountIsRefusedNamingTheKey) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), [](GGUFWriter& g) { g.set_u32("qwen3moe.expert_count", 0); });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"qwen3moe.expert_count' = 0", "must be in [1, "});
}

TEST(Qwen3MoeBadInput, TopKAboveTheExpertCountIsRefusedNamingTheKey) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), [](GGUFWriter& g) { g.set_u32("qwen3moe.expert_used_count", 5); });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"qwen3moe.expert_used_count' = 5", "expert_count = 4"});
}

TEST(Qwen3MoeBadInput, MissingExpertKeyIsRefusedNamingIt) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("full.gguf"), tiny_weights());
  {
    // The same file without the key.
    const GGUFFile f = GGUFFile::open(dir.file("full.gguf"));
    GGUFWriter g;
    for (const auto& [k, v] : f.metadata())
      if (k != "qwen3moe.expert_feed_forward_length" && k != "general.alignment") g.set(k, v);
    for (const GGUFTensorInfo& t : f.tensors())
      g.add_tensor_ref(t.name, t.type, std::vector<std::uint64_t>(t.ne, t.ne + t.n_dims), f.tensor_data(t), t.n_bytes);
    g.write(dir.file("m.gguf"));
  }
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"qwen3moe.expert_feed_forward_length"});
}

TEST(Qwen3MoeBadInput, MissingRouterIsRefusedNamingTheTensor) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), {}, [](const std::string& n) { return n != "blk.1.ffn_gate_inp.weight"; });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"tensor 'blk.1.ffn_gate_inp.weight' is missing"});
}

TEST(Qwen3MoeBadInput, MissingExpertTensorIsRefusedNamingIt) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), {}, [](const std::string& n) { return n != "blk.0.ffn_down_exps.weight"; });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"tensor 'blk.0.ffn_down_exps.weight' is missing"});
}

// An expert tensor whose experts are another width than the others' (and than
// expert_feed_forward_length) is refused naming it and the shape expected.
TEST(Qwen3MoeBadInput, InconsistentExpertShapeIsRefusedNamingTheTensor) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), {}, {}, [](const std::string& n, std::vector<std::uint64_t>& ne) {
    if (n == "blk.1.ffn_up_exps.weight") ne = {ne[0], ne[1] * 2, ne[2] / 2};
  });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"tensor 'blk.1.ffn_up_exps.weight' has shape [32,32,2]", "expected [32,16,4]"});
}

// A 2-D tensor where the experts' 3-D one belongs is refused, naming it.
TEST(Qwen3MoeBadInput, FlatExpertTensorIsRefusedNamingIt) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), {}, {}, [](const std::string& n, std::vector<std::uint64_t>& ne) {
    if (n == "blk.0.ffn_gate_exps.weight") ne = {ne[0], ne[1] * ne[2]};
  });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"tensor 'blk.0.ffn_gate_exps.weight' has shape [32,64]", "expected [32,16,4]"});
}

TEST(MoeConfig, TopKAboveTheExpertCountIsAConfigErrorNamingTheLimit) {
  ModelConfig c = tiny_moe(4, 2);
  c.n_experts_used = 5;
  try {
    c.validate();
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("n_experts_used = 5 must be in [1, n_experts = 4]"), std::string::npos) << e.what();
  }
}

TEST(MoeConfig, TooManyExpertsIsAConfigErrorNamingTheLimit) {
  ModelConfig c = tiny_moe(4, 2);
  c.n_experts = ModelConfig::kMaxExperts + 1;
  try {
    c.validate();
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("must be in [0, 1024]"), std::string::npos) << e.what();
  }
}

// Weights whose experts disagree with the config are refused naming the member.
TEST(MoeConfig, ExpertWeightsOfTheWrongShapeAreRefusedNamingThem) {
  ModelWeights<float> w = ModelWeights<float>::random(tiny_moe(), 4);
  w.layers[1].experts_down = w.layers[1].experts_down.row_block(0, 3 * 32);
  try {
    w.validate();
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("experts_down[layer 1] has shape 96x16, expected 128x16"), std::string::npos)
        << e.what();
  }
}

namespace {

// Writes w as a Hugging Face Qwen3MoeForCausalLM folder: config.json and one F32
// model.safetensors holding every tensor of the table under its Hugging Face name
// (each expert tensor as one tensor per expert), written byte by byte here.
// `extra` is appended to config.json's fields.
void write_hf_moe(const std::filesystem::path& dir, const ModelWeights<float>& w, const std::string& extra = "",
                  const std::string& skip = "") {
  const ModelConfig& c = w.config;
  std::vector<kvd_test::F32Tensor> ts;
  for_each_tensor(w, [&](const TensorSpec& s, int layer, auto slot) {
    if (!s.hf) return;
    if (!slot.matrix) {
      const auto& v = *slot.vector;
      ts.push_back({hf_tensor_name(s, layer), {static_cast<std::uint64_t>(v.size())},
                    std::vector<float>(v.data(), v.data() + v.size())});
      return;
    }
    const WeightMatrix& m = *slot.matrix;
    const long n = static_cast<long>(tensor_experts(s, c)), rows = m.rows() / n;
    for (long e = 0; e < n; ++e) {
      kvd_test::F32Tensor t{s.experts == Dim::kOne ? hf_tensor_name(s, layer) : hf_expert_tensor_name(s, layer, static_cast<int>(e)),
               {static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(m.cols())}, {}};
      t.data.resize(static_cast<std::size_t>(rows * m.cols()));
      for (long r = 0; r < rows; ++r) m.dequantize_row(e * rows + r, t.data.data() + r * m.cols());
      if (t.name != skip) ts.push_back(std::move(t));
    }
  });
  kvd_test::write_safetensors_f32(dir / "model.safetensors", ts);
  std::ofstream cfg(dir / "config.json");
  cfg << "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":" << c.d_model
      << ",\"intermediate_size\":" << 3 * c.hidden_dim << ",\"moe_intermediate_size\":" << c.hidden_dim
      << ",\"num_experts\":" << c.n_experts << ",\"num_experts_per_tok\":" << c.n_experts_used
      << ",\"norm_topk_prob\":" << (c.norm_topk_prob ? "true" : "false")
      << ",\"decoder_sparse_step\":1,\"mlp_only_layers\":[],\"num_hidden_layers\":" << c.n_layers
      << ",\"num_attention_heads\":" << c.n_heads << ",\"num_key_value_heads\":" << c.n_kv_heads
      << ",\"head_dim\":" << c.head_dim << ",\"vocab_size\":" << c.vocab_size
      << ",\"max_position_embeddings\":" << c.max_seq_len << ",\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0"
      << ",\"tie_word_embeddings\":" << (c.shared_classifier ? "true" : "false") << extra << "}";
}

ModelWeights<float> hf_like_weights() {
  ModelConfig c = tiny_moe(4, 2);
  c.rope_theta = 1e6;
  c.norm_eps = 1e-6;
  return ModelWeights<float>::random(c, 12);
}

}  // namespace

// A Qwen3MoeForCausalLM folder loads as the weights it holds, and kvdecode-quantize
// turns it into a qwen3moe GGUF that computes the same bits.
TEST(Qwen3MoeHf, FolderLoadsAndQuantizesToTheSameBits) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = hf_like_weights();
  std::filesystem::create_directories(dir.path() / "hf");
  write_hf_moe(dir.path() / "hf", w);
  const ModelWeights<float> hf = load_hf_model<float>((dir.path() / "hf").string());
  EXPECT_EQ(hf.config, w.config);
  const std::string out = dir.file("q.gguf");
  quantize_model((dir.path() / "hf").string(), out, QuantScheme::kF32);
  EXPECT_EQ(GGUFFile::open(out).get_string("general.architecture"), "qwen3moe");
  Transformer<float> a(w), b(hf), g(load_gguf_model<float>(out));
  const std::vector<int> ids = {1, 5, 17, 33, 3, 8, 9};
  const RowMatrix<float> la = a.forward_reference(ids), lb = b.forward_reference(ids), lg = g.forward_reference(ids);
  EXPECT_TRUE(kvd_test::same_bits(la.data(), lb.data(), la.size()));
  EXPECT_TRUE(kvd_test::same_bits(la.data(), lg.data(), la.size()));
}

TEST(Qwen3MoeHfBadInput, TopKAboveTheExpertCountIsRefusedNamingTheField) {
  kvd_test::TempDir dir;
  std::filesystem::create_directories(dir.path() / "hf");
  ModelWeights<float> w = hf_like_weights();
  write_hf_moe(dir.path() / "hf", w);
  std::string cfg;
  {
    std::ifstream in(dir.path() / "hf" / "config.json");
    std::getline(in, cfg);
  }
  const std::string from = "\"num_experts_per_tok\":2";
  cfg.replace(cfg.find(from), from.size(), "\"num_experts_per_tok\":9");
  std::ofstream(dir.path() / "hf" / "config.json") << cfg;
  try {
    hf_model_info((dir.path() / "hf").string());
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("field 'num_experts_per_tok' = 9 exceeds num_experts = 4"), std::string::npos)
        << e.what();
  }
}

TEST(Qwen3MoeHfBadInput, MissingExpertTensorIsRefusedNamingIt) {
  kvd_test::TempDir dir;
  std::filesystem::create_directories(dir.path() / "hf");
  write_hf_moe(dir.path() / "hf", hf_like_weights(), "", "model.layers.1.mlp.experts.2.up_proj.weight");
  try {
    load_hf_model<float>((dir.path() / "hf").string());
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.experts.2.up_proj.weight"), std::string::npos) << e.what();
  }
}

// A qwen3moe GGUF carries Qwen3's tokenizer and chat template: open_model() gives
// the tokenizer and template of ../shared's vocab-qwen3.gguf, on llama.cpp's qwen2
// tokenizer cases and a conversation.
TEST(Qwen3MoeGguf, CarriesQwen3sTokenizerAndChatTemplate) {
  const std::string shared = KVDECODE_SHARED_DIR;
  const std::string vocab = shared + "/models/vocab/vocab-qwen3.gguf";
  const std::string cases = shared + "/reference/vocab/ggml-vocab-qwen2.gguf.inp";
  if (!std::filesystem::exists(vocab) || !std::filesystem::exists(cases))
    GTEST_SKIP() << "shared test file not found: " << vocab << " (../shared absent?)";
  kvd_test::TempDir dir;
  const GGUFFile v = GGUFFile::open(vocab);
  ModelConfig c = tiny_moe();
  c.d_model = 8; c.n_heads = 2; c.n_kv_heads = 1; c.head_dim = 4; c.hidden_dim = 8; c.n_layers = 1;
  c.vocab_size = static_cast<int>(v.get_string_array("tokenizer.ggml.tokens").size());
  c.shared_classifier = true;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), std::make_shared<const ModelWeights<float>>(ModelWeights<float>::random(c, 5)),
             [&](GGUFWriter& g) {
               for (const auto& [k, val] : v.metadata())
                 if (k.rfind("tokenizer.", 0) == 0) g.set(k, val);
             });
  const LoadedModel m = open_model(dir.file("m.gguf"));
  EXPECT_EQ(m.info.architecture, "qwen3moe");
  ASSERT_TRUE(m.tokenizer);
  const auto want_tok = load_tokenizer(vocab);
  std::ifstream in(cases);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string sep = "\n__ggml_vocab_test__\n";
  int n = 0;
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = std::min(all.find(sep, at), all.size());
    const std::string text = all.substr(at, end - at);
    EXPECT_EQ(m.tokenizer->encode(text, false), want_tok->encode(text, false)) << "case " << n;
    ++n;
    at = end + sep.size();
  }
  EXPECT_GT(n, 10);
  ASSERT_TRUE(m.chat_template.has_value());
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "2+2?"}};
  EXPECT_EQ(m.chat_template->render(msgs, true), load_chat_template(vocab).render(msgs, true));
  EXPECT_EQ(m.chat_template->render({{"user", "Hi"}}, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// Each token reads K of the E experts' bytes and every other tensor whole.
TEST(MoePlan, ActiveWeightBytesCountKOfEExperts) {
  const ModelConfig c = tiny_moe(8, 2);
  EXPECT_EQ(c.active_weight_bytes(1000, 800), 200u + 2 * 100);
  EXPECT_EQ(kvd_test::small_config(4, 2, 8, 32, 2, 16, 40, 24).active_weight_bytes(1000, 0), 1000u);
}

// The planner holds every weight in memory and bounds decode speed by the active ones.
TEST(MoePlan, DecodeBoundReadsTheActiveWeightsMemoryHoldsAll) {
  PlanInput in;
  in.n_layers = 48; in.n_kv_heads = 4; in.head_dim = 128; in.tokens_per_sequence = 4096;
  in.memory_gb = 64; in.bandwidth_gb_s = 100;
  in.weight_bytes = 18'000'000'000ull;
  in.active_weight_bytes = 2'000'000'000ull;
  const MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.kv_budget_bytes, 64'000'000'000ull - in.weight_bytes);
  EXPECT_EQ(p.active_weight_bytes, in.active_weight_bytes);
  EXPECT_DOUBLE_EQ(p.decode_tokens_per_second_bound,
                   decode_bound_tokens_per_second(100, in.active_weight_bytes, p.bytes_per_sequence, 1));
  in.active_weight_bytes = 0;  // unknown: every weight is read
  EXPECT_DOUBLE_EQ(plan_memory(in).decode_tokens_per_second_bound,
                   decode_bound_tokens_per_second(100, in.weight_bytes, p.bytes_per_sequence, 1));
}

TEST(MoePlan, ActiveBytesAboveTheTotalAreAnArgumentErrorNamingThem) {
  PlanInput in;
  in.n_layers = 2; in.n_kv_heads = 1; in.head_dim = 8; in.tokens_per_sequence = 16; in.memory_gb = 1;
  in.weight_bytes = 100;
  in.active_weight_bytes = 101;
  try {
    plan_memory(in);
    FAIL() << "no throw";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("active_weight_bytes = 101 exceeds weight_bytes = 100"), std::string::npos) << e.what();
  }
}

// A qwen3moe file's info counts its expert tensors, and the active bytes from them.
TEST(MoePlan, GgufInfoCountsExpertBytes) {
  kvd_test::TempDir dir;
  const auto w = tiny_weights();
  kvd_test::write_gguf_f32(dir.file("m.gguf"), w);
  const ModelInfo info = read_model_info(dir.file("m.gguf"));
  const ModelConfig& c = w->config;
  const std::uint64_t experts = static_cast<std::uint64_t>(c.n_layers) * 3 * c.n_experts * c.hidden_dim * c.d_model * 4;
  EXPECT_EQ(info.expert_bytes, experts);
  EXPECT_EQ(info.active_weight_bytes(), info.weight_bytes - experts + experts / c.n_experts * c.n_experts_used);
}

// ---- Reference: ik_llama.cpp's logits on a qwen3moe file written by kvdecode ----

namespace {

const std::string kData = std::string(KVDECODE_TEST_DATA_DIR) + "/";
// ../shared/reference/gguf/prompt.ids, the prompt of every GGUF reference.
const std::vector<int> kPromptIds = {1,   300, 436, 102, 468, 497, 279, 476, 186, 242, 27,  342, 260, 112,
                                     311, 116, 472, 150, 251, 357, 403, 111, 171, 500, 227, 39,  133, 101,
                                     85,  48,  230, 397, 278, 190, 101, 244, 405, 169, 125, 329};

}  // namespace

// tests/data/qwen3moe-tiny-F32.gguf (tools/write-tiny-model.cpp qwen3moe) run by ik_llama.cpp
// (tools/ik_reference.cpp steps: one token per decode, an f16 KV cache as it needs without
// flash attention): kvdecode with an f16 cache lands within 1e-4 of the largest logit
// at each of the 40 positions. The tighter oracle is kvdecode's own float64
// cache-free forward: the float model with an f32 cache lands within 1e-5 of it.
// (float64 against ik_llama.cpp differs by ik's f16 rounding of K and V, 1.5e-4.)
TEST(Qwen3MoeReference, WithinOneInTenThousandOfIkLlamaCppAndTheFloat64Forward) {
  const std::string model_path = kData + "qwen3moe-tiny-F32.gguf", ref_path = kData + "qwen3moe-tiny-F32.ik.logits";
  ASSERT_TRUE(std::filesystem::exists(model_path)) << model_path;
  ASSERT_TRUE(std::filesystem::exists(ref_path)) << ref_path;
  const std::vector<float> ref = kvd_test::read_f32_file(ref_path);
  ModelWeights<float> w = load_gguf_model<float>(model_path);
  const int V = w.config.vocab_size;
  ASSERT_EQ(ref.size(), kPromptIds.size() * static_cast<std::size_t>(V));
  Transformer<double> oracle(w.cast<double>());
  Transformer<float> model(std::move(w));
  KVCache<float, Eigen::half> f16_cache(model.config());
  const auto ref_at = [&](long t, int v) { return static_cast<double>(ref[static_cast<std::size_t>(t * V + v)]); };
  const double vs_ik =
      kvd_test::check_near(ref_at, model.prefill(kPromptIds, f16_cache, true), V, 1e-4, "f16 cache vs ik_llama.cpp");
  const RowMatrix<double> exact = oracle.forward_reference(kPromptIds);
  KVCache<float> cache(model.config());
  const auto exact_at = [&](long t, int v) { return exact(t, v); };
  const double vs_f64 = kvd_test::check_near(exact_at, model.prefill(kPromptIds, cache, true), V, 1e-5, "f32 cache vs float64");
  std::printf("largest error: %.3g of the largest logit against ik_llama.cpp (f16 cache), %.3g against float64 "
              "(f32 cache)\n", vs_ik, vs_f64);
}

// The GGUF fuzz corpus's qwen3moe seeds (tests/fuzz/make_corpus.cpp): the valid one
// loads and runs, each bad one is refused naming its key or tensor.
TEST(MoeFuzzSeeds, ValidSeedRunsAndEachDefectIsNamed) {
  const std::string dir = kData + "../fuzz/corpus/gguf/";
  ASSERT_TRUE(std::filesystem::exists(dir + "tiny-qwen3moe-q8_0")) << dir;
  Transformer<float> model(load_gguf_model<float>(dir + "tiny-qwen3moe-q8_0"));
  EXPECT_EQ(model.config().n_experts, 4);
  KVCache<float> cache(model.config());
  const RowMatrix<float> l = model.prefill({1, 2, 3}, cache);
  EXPECT_TRUE(std::isfinite(l(0, 0)));
  kvd_test::expect_gguf_load_error(dir + "qwen3moe-zero-experts", {"qwen3moe.expert_count' = 0"});
  kvd_test::expect_gguf_load_error(dir + "qwen3moe-topk-above-count", {"qwen3moe.expert_used_count' = 5", "expert_count = 4"});
  kvd_test::expect_gguf_load_error(dir + "qwen3moe-missing-router", {"tensor 'blk.0.ffn_gate_inp.weight' is missing"});
  kvd_test::expect_gguf_load_error(dir + "qwen3moe-ragged-experts", {"tensor 'blk.0.ffn_up_exps.weight' has shape [32,128,2]"});
}

// kvdecode-plan's --weight-dtype bytes: in f32 every tensor takes 4 bytes a value, and
// the expert tensors' share is theirs alone.
TEST(MoePlan, SchemeBytesCountEveryTensorOnceAndTheExpertsApart) {
  const ModelConfig c = tiny_moe(4, 2);
  const SchemeBytes b = scheme_weight_bytes(c, QuantScheme::kF32);
  EXPECT_EQ(b.total, 4 * c.n_params());
  EXPECT_EQ(b.experts, 4ull * c.n_layers * 3 * c.n_experts * c.hidden_dim * c.d_model);
}
