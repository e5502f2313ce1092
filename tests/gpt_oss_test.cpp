// The gpt-oss architecture: the clamped SwiGLU against its formula, sinks in the
// softmax, YaRN's RoPE table against its formulas; the tiny gpt-oss file
// (tests/data/gpt-oss-tiny-F32.gguf, written by tools/write-tiny-model.cpp) against
// ik_llama.cpp's logits and the float64 oracle, and every path on it bit for bit
// (reference, prefill, prefill then decode, chunked, batched, paged; 1 and 2 threads);
// a round trip through kvdecode's GGUF writer; and each kind of bad gpt-oss input
// refused with a typed error naming the key or tensor; Hugging Face GptOssForCausalLM
// folders (F32 experts and OpenAI's MXFP4 blocks) against the GGUF bit for bit, and
// their bad fields and tensors. The exactness suites of transformer_test.cpp also run
// a gpt-oss shape (GptOss_E6_K3_Window5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kvdecode/cache/cache_io.hpp"
#include "kvdecode/cache/paged_cache.hpp"
#include "kvdecode/convert/quantize.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "test_util.hpp"

using namespace kvd;

namespace {

const std::string kData = std::string(KVDECODE_TEST_DATA_DIR) + "/";
const std::string kTinyPath = kData + "gpt-oss-tiny-F32.gguf";
// ../shared/reference/gguf/prompt.ids, the prompt of every GGUF reference (40 tokens:
// longer than the tiny model's window of 19, so its local layers slide).
const std::vector<int> kPromptIds = {1,   300, 436, 102, 468, 497, 279, 476, 186, 242, 27,  342, 260, 112,
                                     311, 116, 472, 150, 251, 357, 403, 111, 171, 500, 227, 39,  133, 101,
                                     85,  48,  230, 397, 278, 190, 101, 244, 405, 169, 125, 329};

ModelConfig tiny_gpt_oss() {
  // four layers (local, full, local, full), window 3, 6 experts, 3 per token
  ModelConfig c = kvd_test::small_config(4, 2, 16, 32, 4, 24, 40, 24);
  c.norm_eps = 0x1p-17;  // a float: GGUF stores it as f32, so the file's model is this one exactly
  c.rope_theta = 150000.0;
  c.shared_classifier = false;
  return kvd_test::gpt_oss_like(c, 6, 3, 3, 32.0, 4096);
}

std::shared_ptr<const ModelWeights<float>> tiny_weights(std::uint64_t seed = 5) {
  return std::make_shared<const ModelWeights<float>>(ModelWeights<float>::random(tiny_gpt_oss(), seed));
}

// Validates c and expects a ConfigError whose message holds `part`.
void expect_config_error(const ModelConfig& c, const std::string& part) {
  try {
    c.validate();
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// The file of w with `tweak` applied to the writer, then loaded: expects a FormatError naming `parts`.
void expect_tweak_error(const std::function<void(GGUFWriter&)>& tweak, const std::vector<std::string>& parts) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), tweak);
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), parts);
}

// The file of the tiny weights without tensor `name`: refused naming it as missing.
void expect_missing_tensor(const std::string& name) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), {}, [&](const std::string& t) { return t != name; });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"tensor '" + name + "' is missing"});
}

// The file of the tiny weights with tensor `name` written as shape `ne`: refused naming
// it, `ne` and the shape expected.
void expect_misshapen_tensor(const std::string& name, const std::vector<std::uint64_t>& ne, const std::string& parts) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), {}, {}, [&](const std::string& t, std::vector<std::uint64_t>& shape) {
    if (t == name) shape = ne;
  });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"tensor '" + name + "' has shape " + parts});
}

}  // namespace

// swiglu_oai: min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1), to float rounding;
// the gate clamped above only, the up both ways.
TEST(SwigluOai, MatchesTheFormulaAndClamps) {
  std::vector<float> g, u;
  for (int i = -300; i <= 300; ++i) {
    g.push_back(static_cast<float>(i) / 25.0f);
    u.push_back(static_cast<float>(300 - i) / 30.0f - 10.0f);
  }
  for (float v : {-1e30f, -50.0f, 50.0f, 1e30f}) {
    g.push_back(v);
    u.push_back(-v);
  }
  std::vector<float> out(g.size()), scratch(g.size());
  swiglu_oai_array(g.data(), u.data(), out.data(), scratch.data(), static_cast<long>(g.size()));
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double gc = std::min<double>(g[i], 7.0), uc = std::clamp<double>(u[i], -7.0, 7.0);
    const double want = gc / (1.0 + std::exp(-1.702 * gc)) * (uc + 1.0);
    ASSERT_FALSE(std::isnan(out[i])) << "g = " << g[i];
    EXPECT_NEAR(out[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << "g = " << g[i] << " u = " << u[i];
  }
  // gated_array picks it, and out may be scratch.
  std::vector<float> same(g.size());
  gated_array(Activation::kSwigluOai, g.data(), u.data(), same.data(), same.data(), static_cast<long>(g.size()));
  EXPECT_TRUE(kvd_test::same_bits(same.data(), out.data(), static_cast<long>(g.size())));
}

// A sink joins the denominator only: with sink s the weights are the plain softmax's
// times sum / (sum + exp(s - m)); -inf is no sink, bit for bit.
TEST(AttentionSinks, JoinTheDenominatorOnly) {
  const int n = 16;
  std::vector<float> base(n);
  for (int i = 0; i < n; ++i) base[i] = std::sin(0.7f * i) * 3.0f;
  std::vector<float> plain = base, none = base, sunk = base;
  detail::softmax_blocks(plain.data(), 0, 1, 0, 12);
  detail::softmax_blocks(none.data(), 0, 1, 0, 12, -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(kvd_test::same_bits(plain.data(), none.data(), n));
  const float sink = 2.5f;
  detail::softmax_blocks(sunk.data(), 0, 1, 0, 12, sink);
  double mx = sink, sum = 0;
  for (int i = 0; i <= 12; ++i) mx = std::max<double>(mx, base[i]);
  for (int i = 0; i <= 12; ++i) sum += std::exp(base[i] - mx);
  sum += std::exp(sink - mx);
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const double want = i <= 12 ? std::exp(base[i] - mx) / sum : 0.0;
    EXPECT_NEAR(sunk[i], want, 1e-6) << i;
    total += sunk[i];
  }
  EXPECT_LT(total, 1.0 - 1e-3) << "the sink takes its share";
}

// YaRN's table: pairs below the ramp turn as unscaled, pairs above it as divided by the
// factor, and every cos/sin carries 1 + 0.1 ln(factor) (ggml's rope_yarn).
TEST(YarnRope, TableFollowsTheRampAndTheMagnitude) {
  const int Dh = 16, S = 64;
  RopeScalingParams p;
  p.type = RopeScaling::kYarn;
  p.factor = 32.0;
  p.orig_ctx = 4096;
  RoPE<double> yarn(Dh, S, 150000.0, RopeStyle::kHalves, 0, Vector<double>(), p);
  // d(b) = 16 ln(4096 / (2 pi b)) / (2 ln 150000): lo = floor(d(32)) = 2, hi = ceil(d(1)) = 5
  const double m = 1.0 + 0.1 * std::log(32.0);
  for (int pos : {1, 7, 40}) {
    std::vector<double> x(Dh, 0.0);
    for (int i = 0; i < Dh / 2; ++i) x[i] = 1.0;  // each pair (x[i], x[i + 8]) = (1, 0)
    yarn.apply(x.data(), 1, pos);
    for (int i = 0; i < Dh / 2; ++i) {
      const double f = std::pow(150000.0, -2.0 * i / Dh);
      const double r = 1.0 - std::clamp((i - 2.0) / 3.0, 0.0, 1.0);
      const double a = pos * f * (r + (1 - r) / 32.0);
      EXPECT_NEAR(x[i], m * std::cos(a), 1e-12) << "pair " << i << " pos " << pos;
      EXPECT_NEAR(x[i + Dh / 2], m * std::sin(a), 1e-12) << "pair " << i << " pos " << pos;
    }
  }
  // Factor 1 under YaRN is plain RoPE.
  p.factor = 1.0;
  RoPE<double> one(Dh, S, 150000.0, RopeStyle::kHalves, 0, Vector<double>(), p), plain(Dh, S, 150000.0, RopeStyle::kHalves);
  std::vector<double> a(Dh, 0.5), b(Dh, 0.5);
  one.apply(a.data(), 1, 9);
  plain.apply(b.data(), 1, 9);
  EXPECT_TRUE(kvd_test::same_bits(a.data(), b.data(), Dh));
}

// Local and full layers alternate, both scaled; the options show in the summary and
// the fingerprint.
TEST(GptOssConfig, LayerKindsAndFingerprint) {
  const ModelConfig c = tiny_gpt_oss();
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(c.layer_local(l), l % 2 == 0) << l;
    EXPECT_EQ(c.layer_window(l), l % 2 == 0 ? 3 : 0) << l;
    EXPECT_EQ(c.layer_rope_theta(l), 150000.0) << l;
    EXPECT_EQ(c.layer_rope_scale(l), 32.0) << l;
  }
  EXPECT_NE(c.summary().find("sinks"), std::string::npos) << c.summary();
  EXPECT_NE(c.summary().find("yarn(4096)"), std::string::npos) << c.summary();
  for (auto change : std::vector<std::function<void(ModelConfig&)>>{
           [](ModelConfig& m) { m.attn_sinks = false; }, [](ModelConfig& m) { m.attn_out_bias = false; },
           [](ModelConfig& m) { m.moe_bias = false; }, [](ModelConfig& m) { m.yarn_orig_ctx = 2048; },
           [](ModelConfig& m) { m.yarn_beta_fast = 16; }, [](ModelConfig& m) { m.yarn_beta_slow = 2; },
           [](ModelConfig& m) { m.rope_scaling = RopeScaling::kLinear; }, [](ModelConfig& m) { m.rope_scale_local = false; }}) {
    ModelConfig other = c;
    change(other);
    EXPECT_NE(config_fingerprint(other), config_fingerprint(c));
    EXPECT_NE(other, c);
  }
  EXPECT_EQ(tiny_gpt_oss().n_params(), tensor_param_count(tiny_gpt_oss()));
}

// The tiny gpt-oss file: what its keys say.
TEST(GptOssGguf, TinyFileLoadsAsGptOss) {
  ASSERT_TRUE(std::filesystem::exists(kTinyPath)) << kTinyPath;
  const GGUFModelInfo info = gguf_model_info(GGUFFile::open(kTinyPath));
  const ModelConfig& c = info.config;
  EXPECT_EQ(info.architecture, "gpt-oss");
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.swa_pattern, 2);
  EXPECT_EQ(c.local_window, 19);
  EXPECT_EQ(c.rope_theta, 150000.0);
  EXPECT_EQ(c.rope_theta_local, 150000.0);
  EXPECT_EQ(c.rope_scale, 32.0);
  EXPECT_TRUE(c.rope_scale_local);
  EXPECT_EQ(c.rope_scaling, RopeScaling::kYarn);
  EXPECT_EQ(c.yarn_orig_ctx, 4096);
  EXPECT_EQ(c.yarn_beta_fast, 32.0);
  EXPECT_EQ(c.yarn_beta_slow, 1.0);
  EXPECT_TRUE(c.attn_sinks && c.attn_out_bias && c.moe_bias && c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.shared_classifier);
  EXPECT_EQ(c.n_experts, 8);
  EXPECT_EQ(c.n_experts_used, 4);
  EXPECT_EQ(c.router_order, RouterOrder::kTopKSoftmax);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.ffn_activation, Activation::kSwigluOai);
  EXPECT_EQ(c.rope_style, RopeStyle::kHalves);
}

// Every path on the tiny gpt-oss file gives the same bits as the cache-free reference:
// prefill of the whole prompt, prefill then decode steps, chunked prefill, batched
// decode and a paged cache, with 1 and 2 threads (and the two thread counts agree).
TEST(GptOssExactness, EveryPathSameBitsOnTheTinyFile) {
  ASSERT_TRUE(std::filesystem::exists(kTinyPath)) << kTinyPath;
  kvd_test::expect_every_path_same_bits(load_gguf_model<float>(kTinyPath), kPromptIds);
}

// The same on a prompt of 150 tokens: longer than the local layers' rings (19 + 64
// positions in 7 blocks by default, 19 + 4 in 3 with max_append 5), so every ring
// wraps, in prefill, decode, chunked and batched paths.
TEST(GptOssExactness, EveryPathSameBitsWhenTheLocalRingsWrap) {
  const ModelWeights<float> w = load_gguf_model<float>(kTinyPath);
  kvd_test::expect_every_path_same_bits(w, kvd_test::make_tokens(150, w.config.vocab_size, 11));
}

// The tiny gpt-oss file's cache keeps a ring of the window in each local layer: fewer
// bytes than every position (the planner's count), rewinds as far as the rings hold
// and no further, and cache files refuse a wrapped ring (test_util.hpp, expect_local_rings).
TEST(GptOssCache, LocalLayersKeepARingOfTheirWindow) {
  const ModelWeights<float> w = load_gguf_model<float>(kTinyPath);
  kvd_test::expect_local_rings(w, kvd_test::make_tokens(150, w.config.vocab_size, 12));
}

// The tiny file against the independent float64 forward of test_util.hpp (textbook
// loops, YaRN, sinks and the clamped SwiGLU written from their formulas): the float
// model with an f32 cache lands within 1e-5 of the largest logit at each of the 40 positions.
TEST(GptOssReference, WithinOneInHundredThousandOfTheFloat64Oracle) {
  kvd_test::expect_near_oracle(kTinyPath, kPromptIds);
}

// The tiny file against ik_llama.cpp (tools/ik_reference.cpp steps: one token per
// decode, the f16 KV cache it needs without flash attention): kvdecode with an f16
// cache lands within 1e-4 of the largest logit at each of the 40 positions.
TEST(GptOssReference, WithinOneInTenThousandOfIkLlamaCpp) {
  kvd_test::expect_near_ik(kTinyPath, kData + "gpt-oss-tiny-F32.ik.logits", kPromptIds);
}

// What the references hold us to matters: without the window, the sinks, YaRN or the
// clamp, the tiny file's logits leave ik_llama.cpp's by far more than 1e-4 of the
// largest logit somewhere in the prompt.
TEST(GptOssReference, EachOptionMovesTheLogits) {
  const std::vector<float> ik = kvd_test::read_f32_file(kData + "gpt-oss-tiny-F32.ik.logits");
  const ModelWeights<float> w = load_gguf_model<float>(kTinyPath);
  const int V = w.config.vocab_size;
  for (auto change : std::vector<std::function<void(ModelWeights<float>&)>>{
           [](ModelWeights<float>& m) { m.config.local_window = 64; },
           [](ModelWeights<float>& m) {
             for (auto& l : m.layers) l.attn_sinks.setConstant(-1e30f);
           },
           [](ModelWeights<float>& m) { m.config.rope_scaling = RopeScaling::kLinear; },
           [](ModelWeights<float>& m) { m.config.ffn_activation = Activation::kSilu; }}) {
    ModelWeights<float> v = w.cast<float>();
    change(v);
    Transformer<float> model(std::move(v));
    KVCache<float> cache(model.config());
    const RowMatrix<float> got = model.prefill(kPromptIds, cache, true);
    double worst = 0;
    for (long t = 0; t < got.rows(); ++t) {
      double max_abs = 0, max_err = 0;
      for (int j = 0; j < V; ++j) {
        const double r = ik[static_cast<std::size_t>(t * V + j)];
        max_abs = std::max(max_abs, std::fabs(r));
        max_err = std::max(max_err, std::fabs(r - got(t, j)));
      }
      worst = std::max(worst, max_err / max_abs);
    }
    EXPECT_GT(worst, 1e-2);
  }
}

// A gpt-oss model through kvdecode's GGUF writer and loader: the same config, and
// logits bit-identical to the in-memory model's; gpt-oss's names and shapes in the file.
TEST(GptOssGguf, RoundTripsThroughKvdecodesWriter) {
  kvd_test::TempDir dir;
  const auto w = tiny_weights();
  const std::string path = dir.file("gpt-oss.gguf");
  kvd_test::write_gguf_f32(path, w);
  const GGUFFile f = GGUFFile::open(path);
  EXPECT_NE(f.find_tensor("output.weight"), nullptr);
  EXPECT_NE(f.find_tensor("blk.0.post_attention_norm.weight"), nullptr) << "the FFN pre-norm's gpt-oss name";
  EXPECT_EQ(f.find_tensor("blk.0.ffn_norm.weight"), nullptr);
  const GGUFTensorInfo* sinks = f.find_tensor("blk.3.attn_sinks.weight");
  ASSERT_NE(sinks, nullptr);
  EXPECT_EQ(sinks->shape_string(), "[4]");
  const GGUFTensorInfo* gb = f.find_tensor("blk.1.ffn_gate_exps.bias");
  ASSERT_NE(gb, nullptr);
  EXPECT_EQ(gb->shape_string(), "[24,6]");
  EXPECT_EQ(f.find_tensor("blk.1.ffn_down_exps.bias")->shape_string(), "[32,6]");
  EXPECT_NE(f.find_tensor("blk.2.attn_output.bias"), nullptr);
  EXPECT_NE(f.find_tensor("blk.2.ffn_gate_inp.bias"), nullptr);
  const GGUFModelInfo info = gguf_model_info(f);
  EXPECT_EQ(info.architecture, "gpt-oss");
  EXPECT_EQ(info.config, w->config);
  Transformer<float> a(*w), b(load_gguf_model<float>(path));
  const auto tokens = kvd_test::make_tokens(12, w->config.vocab_size, 2);
  const RowMatrix<float> la = a.forward_reference(tokens), lb = b.forward_reference(tokens);
  EXPECT_TRUE(kvd_test::same_bits(la.data(), lb.data(), la.size()));
}

// Quantizing a gpt-oss file keeps every bias f32 (the expert biases are 2-D).
TEST(GptOssGguf, QuantizingKeepsTheBiasesF32) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights());
  quantize_model(dir.file("m.gguf"), dir.file("q.gguf"), QuantScheme::kQ8_0);
  const GGUFFile f = GGUFFile::open(dir.file("q.gguf"));
  for (const char* n : {"blk.0.ffn_gate_exps.bias", "blk.0.ffn_up_exps.bias", "blk.0.ffn_down_exps.bias",
                        "blk.0.ffn_gate_inp.bias", "blk.0.attn_sinks.weight", "blk.0.attn_output.bias"})
    EXPECT_EQ(f.find_tensor(n)->type, WeightType::kF32) << n;
  Transformer<float> model(load_gguf_model<float>(dir.file("q.gguf")));
  KVCache<float> cache(model.config());
  EXPECT_TRUE(std::isfinite(model.prefill({1, 2, 3}, cache)(0, 0)));
}

// ---- Bad input: each new key and tensor ----

TEST(GptOssBadInput, ZeroSlidingWindowIsRefusedNamingTheKey) {
  expect_tweak_error([](GGUFWriter& g) { g.set_u32("gpt-oss.attention.sliding_window", 0); },
                     {"gpt-oss.attention.sliding_window' = 0"});
}

TEST(GptOssBadInput, SlidingWindowOfTheWrongTypeIsRefusedNamingTheKey) {
  expect_tweak_error([](GGUFWriter& g) { g.set_string("gpt-oss.attention.sliding_window", "128"); },
                     {"gpt-oss.attention.sliding_window"});
}

TEST(GptOssBadInput, OtherSlidingWindowPatternIsRefusedNamingTheKey) {
  expect_tweak_error([](GGUFWriter& g) { g.set_u32("gpt-oss.attention.sliding_window_pattern", 3); },
                     {"gpt-oss.attention.sliding_window_pattern' = 3", "alternate"});
}

TEST(GptOssBadInput, BadYarnFactorIsRefusedNamingTheKey) {
  expect_tweak_error([](GGUFWriter& g) { g.set_f32("gpt-oss.rope.scaling.factor", 0.5f); },
                     {"gpt-oss.rope.scaling.factor' = 0.5"});
}

TEST(GptOssBadInput, ZeroYarnOriginalContextIsRefusedNamingTheKey) {
  expect_tweak_error([](GGUFWriter& g) { g.set_u32("gpt-oss.rope.scaling.original_context_length", 0); },
                     {"gpt-oss.rope.scaling.original_context_length' = 0"});
}

TEST(GptOssBadInput, YarnBetasOutOfOrderAreRefusedNamingTheKeys) {
  expect_tweak_error([](GGUFWriter& g) { g.set_f32("gpt-oss.rope.scaling.yarn_beta_fast", 0.5f); },
                     {"gpt-oss.rope.scaling.yarn_beta_fast' = 0.5", "yarn_beta_slow' = 1"});
  expect_tweak_error([](GGUFWriter& g) { g.set_f32("gpt-oss.rope.scaling.yarn_beta_slow", -1.0f); },
                     {"gpt-oss.rope.scaling.yarn_beta_slow' = -1"});
}

TEST(GptOssBadInput, YarnAttentionFactorIsRefusedNamingTheKey) {
  expect_tweak_error([](GGUFWriter& g) { g.set_f32("gpt-oss.rope.scaling.attn_factor", 1.5f); },
                     {"gpt-oss.rope.scaling.attn_factor' = 1.5", "only 1"});
}

TEST(GptOssBadInput, UnknownRopeScalingTypeIsRefusedNamingIt) {
  expect_tweak_error([](GGUFWriter& g) { g.set_string("gpt-oss.rope.scaling.type", "longrope"); },
                     {"rope.scaling.type 'longrope'", "yarn"});
}

TEST(GptOssBadInput, YarnOnAnotherArchitectureIsRefused) {
  kvd_test::TempDir dir;
  ModelConfig c = kvd_test::qwen3moe_like(kvd_test::small_config(4, 2, 16, 32, 2, 24, 40, 24), 4, 2);
  auto w = std::make_shared<const ModelWeights<float>>(ModelWeights<float>::random(c, 3));
  kvd_test::write_gguf_f32(dir.file("m.gguf"), w, [](GGUFWriter& g) {
    g.set_string("qwen3moe.rope.scaling.type", "yarn");
    g.set_f32("qwen3moe.rope.scaling.factor", 4.0f);
  });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"rope.scaling.type 'yarn' is not supported"});
}

TEST(GptOssBadInput, MissingSinksAreRefusedNamingTheTensor) { expect_missing_tensor("blk.2.attn_sinks.weight"); }

TEST(GptOssBadInput, SinksOfTheWrongShapeAreRefusedNamingTheTensor) {
  expect_misshapen_tensor("blk.1.attn_sinks.weight", {2, 2}, "[2,2], expected [4]");
}

TEST(GptOssBadInput, ExpertBiasOfTheWrongShapeIsRefusedNamingTheTensor) {
  expect_misshapen_tensor("blk.0.ffn_up_exps.bias", {144}, "[144], expected [24,6]");
  expect_misshapen_tensor("blk.0.ffn_down_exps.bias", {16, 12}, "[16,12], expected [32,6]");
}

TEST(GptOssBadInput, MissingRouterBiasIsRefusedNamingTheTensor) { expect_missing_tensor("blk.0.ffn_gate_inp.bias"); }

TEST(GptOssBadInput, MissingExpertBiasesAreRefusedNamingTheTensor) {
  expect_missing_tensor("blk.1.ffn_gate_exps.bias");
  expect_missing_tensor("blk.3.ffn_down_exps.bias");
}

TEST(GptOssBadInput, MissingAttentionBiasesAreRefusedNamingTheTensor) {
  expect_missing_tensor("blk.2.attn_output.bias");
  expect_missing_tensor("blk.0.attn_q.bias");
}

TEST(GptOssBadInput, BadYarnConfigIsAConfigErrorNamingIt) {
  ModelConfig c = tiny_gpt_oss();
  c.yarn_orig_ctx = 0;
  expect_config_error(c, "ModelConfig.yarn_orig_ctx = 0");
  c = tiny_gpt_oss();
  c.yarn_beta_fast = 1.0;
  expect_config_error(c, "ModelConfig.yarn_beta_fast = 1");
  c = tiny_gpt_oss();
  c.moe_bias = true;
  c.n_experts = 0;
  c.n_experts_used = 0;
  expect_config_error(c, "moe_bias");
  c = tiny_gpt_oss();
  c.swa_pattern = 0;
  c.local_window = 0;
  expect_config_error(c, "rope_scale_local");
}

// Part of gpt-oss's block is not a GGUF architecture: the writer refuses it.
TEST(GptOssBadInput, PartOfGptOssBlockCannotBeWrittenAsGguf) {
  ModelConfig c = tiny_gpt_oss();
  EXPECT_EQ(detail::gguf_arch_for(c), "gpt-oss");
  c.moe_bias = false;
  EXPECT_THROW(detail::gguf_arch_for(c), ConfigError);
  c = tiny_gpt_oss();
  c.ffn_activation = Activation::kSilu;
  EXPECT_THROW(detail::gguf_arch_for(c), ConfigError);
  c = tiny_gpt_oss();
  c.swa_pattern = 3;
  EXPECT_THROW(detail::gguf_arch_for(c), ConfigError);
  c = tiny_gpt_oss();
  c.attn_sinks = false;
  EXPECT_THROW(detail::gguf_arch_for(c), ConfigError);
}

// The GGUF fuzz corpus's gpt-oss seed (tests/fuzz/make_corpus.cpp) loads and runs.
TEST(GptOssFuzzSeeds, ValidSeedRuns) {
  const std::string path = kData + "../fuzz/corpus/gguf/tiny-gpt-oss-q8_0";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  Transformer<float> model(load_gguf_model<float>(path));
  EXPECT_TRUE(model.config().attn_sinks);
  KVCache<float> cache(model.config());
  const RowMatrix<float> l = model.prefill({1, 2, 3, 4, 5, 6}, cache);
  EXPECT_TRUE(std::isfinite(l(0, 0)));
}

// YaRN without truncation (Hugging Face's rope_scaling.truncate false, gpt-oss's release):
// the ramp's ends keep their fractions, d(32) and d(1) themselves.
TEST(YarnRope, UntruncatedRampKeepsTheFractions) {
  const int Dh = 16, S = 64;
  RopeScalingParams p;
  p.type = RopeScaling::kYarn;
  p.factor = 32.0;
  p.orig_ctx = 4096;
  p.truncate = false;
  RoPE<double> yarn(Dh, S, 150000.0, RopeStyle::kHalves, 0, Vector<double>(), p);
  const double kPi = 3.14159265358979323846;
  auto d = [&](double b) { return Dh * std::log(4096.0 / (2 * kPi * b)) / (2 * std::log(150000.0)); };
  const double lo = d(32.0), hi = d(1.0), m = 1.0 + 0.1 * std::log(32.0);
  ASSERT_NE(lo, std::floor(lo));
  for (int pos : {1, 7, 40}) {
    std::vector<double> x(Dh, 0.0);
    for (int i = 0; i < Dh / 2; ++i) x[i] = 1.0;
    yarn.apply(x.data(), 1, pos);
    for (int i = 0; i < Dh / 2; ++i) {
      const double f = std::pow(150000.0, -2.0 * i / Dh);
      const double r = 1.0 - std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
      const double a = pos * f * (r + (1 - r) / 32.0);
      EXPECT_NEAR(x[i], m * std::cos(a), 1e-12) << "pair " << i << " pos " << pos;
      EXPECT_NEAR(x[i + Dh / 2], m * std::sin(a), 1e-12) << "pair " << i << " pos " << pos;
    }
  }
}

// ---- Hugging Face folders (GptOssForCausalLM, model_type gpt_oss) ----

namespace {

// One tensor of a safetensors file: dtype, shape, bytes.
struct RawTensor {
  std::string name, dtype;
  std::vector<std::uint64_t> shape;
  std::vector<unsigned char> bytes;
};

void write_safetensors(const std::filesystem::path& path, const std::vector<RawTensor>& ts) {
  std::string h = "{";
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    h += detail::msg(i ? "," : "", "\"", ts[i].name, "\":{\"dtype\":\"", ts[i].dtype, "\",\"shape\":[");
    for (std::size_t d = 0; d < ts[i].shape.size(); ++d) h += detail::msg(d ? "," : "", ts[i].shape[d]);
    h += detail::msg("],\"data_offsets\":[", offset, ",", offset + ts[i].bytes.size(), "]}");
    offset += ts[i].bytes.size();
  }
  h += "}";
  std::ofstream st(path, std::ios::binary);
  const std::uint64_t hn = h.size();
  for (int b = 0; b < 8; ++b) st.put(static_cast<char>((hn >> (8 * b)) & 0xff));
  st << h;
  for (const RawTensor& t : ts) st.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

RawTensor f32_tensor(const std::string& name, std::vector<std::uint64_t> shape, const std::vector<float>& v) {
  RawTensor t{name, "F32", std::move(shape), std::vector<unsigned char>(v.size() * 4)};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

std::vector<float> matrix_values(const WeightMatrix& m) {
  std::vector<float> v(static_cast<std::size_t>(m.rows() * m.cols()));
  for (long r = 0; r < m.rows(); ++r) m.dequantize_row(r, v.data() + r * m.cols());
  return v;
}

// A double as JSON text that reads back as the same double.
std::string json_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

using Fields = std::vector<std::pair<std::string, std::string>>;

// config.json's fields for config c (a gpt-oss config), in order, each as its JSON text.
Fields hf_gpt_oss_fields(const ModelConfig& c) {
  auto s = [](auto v) { return detail::msg(v); };
  std::string types = "[";
  for (int l = 0; l < c.n_layers; ++l) types += detail::msg(l ? "," : "", c.layer_local(l) ? "\"sliding_attention\"" : "\"full_attention\"");
  types += "]";
  return {{"architectures", "[\"GptOssForCausalLM\"]"}, {"model_type", "\"gpt_oss\""},
          {"hidden_size", s(c.d_model)}, {"intermediate_size", s(c.hidden_dim)},
          {"num_hidden_layers", s(c.n_layers)}, {"num_attention_heads", s(c.n_heads)},
          {"num_key_value_heads", s(c.n_kv_heads)}, {"head_dim", s(c.head_dim)}, {"vocab_size", s(c.vocab_size)},
          {"num_local_experts", s(c.n_experts)}, {"num_experts_per_tok", s(c.n_experts_used)},
          {"max_position_embeddings", s(c.max_seq_len)}, {"rms_norm_eps", json_double(c.norm_eps)},
          {"rope_theta", json_double(c.rope_theta)}, {"sliding_window", s(c.local_window)}, {"layer_types", types},
          {"rope_scaling", detail::msg("{\"rope_type\":\"yarn\",\"factor\":", json_double(c.rope_scale),
                                       ",\"beta_fast\":", json_double(c.yarn_beta_fast), ",\"beta_slow\":",
                                       json_double(c.yarn_beta_slow), ",\"original_max_position_embeddings\":",
                                       c.yarn_orig_ctx, ",\"truncate\":true}")},
          {"swiglu_limit", "7.0"}, {"hidden_act", "\"silu\""}, {"attention_bias", "true"},
          {"tie_word_embeddings", "false"}};
}

Fields with(Fields fields, const std::string& key, const std::string& value) {
  auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == key; });
  if (it == fields.end()) fields.emplace_back(key, value);
  else if (value.empty()) fields.erase(it);
  else it->second = value;
  return fields;
}

// How write_hf_gpt_oss stores the experts.
enum class ExpertForm { kF32, kMxfp4 };

// HF's MXFP4 block (scale, 16 bytes: value 2j in byte j's low nibble, 2j + 1 in its
// high one) of ggml's mxfp4 block `b` (value j in byte j's low nibble, j + 16 in its
// high one): written here from the two layouts, not with the loader's function.
void hf_block_of(const unsigned char* b, unsigned char* scale, unsigned char* out16) {
  *scale = b[0];
  const unsigned char* qs = b + 1;
  int codes[32];
  for (int j = 0; j < 16; ++j) {
    codes[j] = qs[j] & 0xF;
    codes[j + 16] = qs[j] >> 4;
  }
  for (int j = 0; j < 16; ++j) out16[j] = static_cast<unsigned char>(codes[2 * j] | (codes[2 * j + 1] << 4));
}

// A GptOssForCausalLM folder holding w (F32 everything; the experts F32 as [E, in, out]
// with gate and up interleaved, or, when they are mxfp4 matrices, as HF's MXFP4 blocks
// and scales [E, out, in / 32, (16)]) and config.json from `fields`. `skip` drops a
// tensor by name; `edit` may change any tensor before writing.
void write_hf_gpt_oss(const std::filesystem::path& dir, const ModelWeights<float>& w, const Fields& fields,
                      const std::string& skip = "", const std::function<void(std::vector<RawTensor>&)>& edit = {}) {
  std::filesystem::create_directories(dir);
  const ModelConfig& c = w.config;
  const std::uint64_t E = c.n_experts, F = c.hidden_dim, D = c.d_model;
  std::vector<RawTensor> ts;
  for_each_tensor(w, [&](const TensorSpec& s, int layer, auto slot) {
    if (s.experts != Dim::kOne) return;  // below, per layer
    const std::string name = hf_tensor_name(s, layer, false, true);
    if (slot.matrix) {
      const WeightMatrix& m = *slot.matrix;
      ts.push_back(f32_tensor(name, {static_cast<std::uint64_t>(m.rows()), static_cast<std::uint64_t>(m.cols())}, matrix_values(m)));
    } else {
      ts.push_back(f32_tensor(name, {static_cast<std::uint64_t>(slot.vector->size())},
                              std::vector<float>(slot.vector->data(), slot.vector->data() + slot.vector->size())));
    }
  });
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights<float>& L = w.layers[static_cast<std::size_t>(l)];
    const std::string p = detail::msg("model.layers.", l, ".mlp.experts.");
    // biases: gate_up [E, 2F] interleaved, down [E, D]
    std::vector<float> gub(E * 2 * F), db(E * D);
    for (std::uint64_t e = 0; e < E; ++e) {
      for (std::uint64_t r = 0; r < F; ++r) {
        gub[e * 2 * F + 2 * r] = L.experts_gate_bias[static_cast<long>(e * F + r)];
        gub[e * 2 * F + 2 * r + 1] = L.experts_up_bias[static_cast<long>(e * F + r)];
      }
      for (std::uint64_t r = 0; r < D; ++r) db[e * D + r] = L.experts_down_bias[static_cast<long>(e * D + r)];
    }
    ts.push_back(f32_tensor(p + "gate_up_proj_bias", {E, 2 * F}, gub));
    ts.push_back(f32_tensor(p + "down_proj_bias", {E, D}, db));
    {
      // [E, out, G, 16] and [E, out, G]: gate_up's out rows interleave gate and up rows.
      auto mx = [&](const std::string& name, const std::vector<const WeightMatrix*>& parts, std::uint64_t rows,
                    std::uint64_t cols) {
        const std::uint64_t G = cols / 32, out = rows * parts.size();
        RawTensor b{name + "_blocks", "U8", {E, out, G, 16}, std::vector<unsigned char>(E * out * G * 16)};
        RawTensor sc{name + "_scales", "U8", {E, out, G}, std::vector<unsigned char>(E * out * G)};
        for (std::uint64_t e = 0; e < E; ++e)
          for (std::uint64_t o = 0; o < out; ++o) {
            const WeightMatrix& m = *parts[o % parts.size()];
            const unsigned char* row = m.row_data(static_cast<long>(e * rows + o / parts.size()));
            for (std::uint64_t g = 0; g < G; ++g)
              hf_block_of(row + g * 17, &sc.bytes[(e * out + o) * G + g], &b.bytes[((e * out + o) * G + g) * 16]);
          }
        ts.push_back(std::move(b));
        ts.push_back(std::move(sc));
      };
      if (L.experts_gate.type() == WeightType::kMXFP4) {
        mx(p + "gate_up_proj", {&L.experts_gate, &L.experts_up}, F, D);
      } else {
        const std::vector<float> g = matrix_values(L.experts_gate), u = matrix_values(L.experts_up);
        std::vector<float> gu(E * D * 2 * F);
        for (std::uint64_t e = 0; e < E; ++e)
          for (std::uint64_t i = 0; i < D; ++i)
            for (std::uint64_t r = 0; r < F; ++r) {
              gu[(e * D + i) * 2 * F + 2 * r] = g[(e * F + r) * D + i];
              gu[(e * D + i) * 2 * F + 2 * r + 1] = u[(e * F + r) * D + i];
            }
        ts.push_back(f32_tensor(p + "gate_up_proj", {E, D, 2 * F}, gu));
      }
      if (L.experts_down.type() == WeightType::kMXFP4) {
        mx(p + "down_proj", {&L.experts_down}, D, F);
      } else {
        const std::vector<float> dn = matrix_values(L.experts_down);
        std::vector<float> dt(E * F * D);
        for (std::uint64_t e = 0; e < E; ++e)
          for (std::uint64_t i = 0; i < F; ++i)
            for (std::uint64_t r = 0; r < D; ++r) dt[(e * F + i) * D + r] = dn[(e * D + r) * F + i];
        ts.push_back(f32_tensor(p + "down_proj", {E, F, D}, dt));
      }
    }
  }
  ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const RawTensor& t) { return t.name == skip; }), ts.end());
  if (edit) edit(ts);
  write_safetensors(dir / "model.safetensors", ts);
  std::ofstream cfg(dir / "config.json");
  cfg << "{";
  for (std::size_t i = 0; i < fields.size(); ++i) cfg << (i ? "," : "") << "\"" << fields[i].first << "\":" << fields[i].second;
  cfg << "}";
}

// w with every expert matrix whose rows are whole mxfp4 blocks quantized to mxfp4
// (kvdecode's quantizer): the tiny file's gate and up (d_model 64), not its down (16).
ModelWeights<float> with_mxfp4_experts(const ModelWeights<float>& w) {
  ModelWeights<float> q = w.cast<float>();
  for (auto& L : q.layers)
    for (WeightMatrix* m : {&L.experts_gate, &L.experts_up, &L.experts_down}) {
      if (m->cols() % 32 != 0) continue;
      const std::vector<float> v = matrix_values(*m);
      const std::uint64_t rb = weight_row_bytes(WeightType::kMXFP4, static_cast<std::uint64_t>(m->cols()));
      std::vector<unsigned char> bytes(static_cast<std::size_t>(rb * m->rows()));
      for (long r = 0; r < m->rows(); ++r)
        detail::quantize_row(WeightType::kMXFP4, v.data() + r * m->cols(), bytes.data() + r * rb, m->cols());
      *m = WeightMatrix::copy_of(WeightType::kMXFP4, m->rows(), m->cols(), bytes.data(), bytes.size());
    }
  return q;
}


// Logits of every prompt position, cache-free and through prefill.
std::vector<float> prompt_logits(const ModelWeights<float>& w) {
  Transformer<float> model(w);
  const RowMatrix<float> ref = model.forward_reference(kPromptIds);
  KVCache<float> cache(model.config());
  const RowMatrix<float> pre = model.prefill(kPromptIds, cache, true);
  std::vector<float> out(ref.data(), ref.data() + ref.size());
  out.insert(out.end(), pre.data(), pre.data() + pre.size());
  return out;
}

}  // namespace

// The tiny gpt-oss file written as a GptOssForCausalLM folder (F32, experts [E, in, out]
// with gate and up interleaved) loads as the same config and computes the GGUF's
// logits bit for bit over the 40-token prompt (cache-free and prefill).
TEST(GptOssHf, F32FolderComputesTheGgufsLogitsBitForBit) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = load_gguf_model<float>(kTinyPath);
  write_hf_gpt_oss(dir.path() / "hf", w, hf_gpt_oss_fields(w.config));
  const HFModelInfo info = hf_model_weights_info((dir.path() / "hf").string());
  EXPECT_EQ(info.architecture, "GptOssForCausalLM");
  EXPECT_EQ(info.config, w.config) << info.config.summary() << "\n" << w.config.summary();
  EXPECT_GT(info.expert_bytes, 0u);
  const ModelWeights<float> hf = load_hf_model<float>((dir.path() / "hf").string());
  ASSERT_EQ(hf.config, w.config);
  EXPECT_EQ(hf.layers[1].experts_gate.type(), WeightType::kF32);
  const std::vector<float> a = prompt_logits(w), b = prompt_logits(hf);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << kvd_test::first_difference(a.data(), b.data(), static_cast<long>(a.size()));
  // The interleave matters: gate and up swapped is another model.
  write_hf_gpt_oss(dir.path() / "swapped", w, hf_gpt_oss_fields(w.config), "", [&](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == "model.layers.0.mlp.experts.gate_up_proj")
        for (std::size_t k = 0; k + 8 <= t.bytes.size(); k += 8)
          std::swap_ranges(t.bytes.begin() + static_cast<long>(k), t.bytes.begin() + static_cast<long>(k + 4),
                           t.bytes.begin() + static_cast<long>(k + 4));
  });
  const std::vector<float> c = prompt_logits(load_hf_model<float>((dir.path() / "swapped").string()));
  EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
}

// The same weights with mxfp4 experts, written as OpenAI's release stores them (MXFP4
// blocks and scales, [E, out, in / 32, 16], HF's nibble order): the experts load as
// mxfp4 matrices holding the same blocks, and the logits are those of the in-memory
// model bit for bit. The values are HF's: e2m1 of each nibble (value 2j low, 2j + 1
// high) times 2^(scale - 127), as transformers' dequantizer computes them.
TEST(GptOssHf, Mxfp4FolderComputesTheSameBitsAsItsBlocks) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = with_mxfp4_experts(load_gguf_model<float>(kTinyPath));
  write_hf_gpt_oss(dir.path() / "hf", w, hf_gpt_oss_fields(w.config));
  const HFModelInfo info = hf_model_weights_info((dir.path() / "hf").string());
  bool has_mxfp4 = false;
  for (const auto& [t, n] : info.bytes_by_type) has_mxfp4 = has_mxfp4 || (t == WeightType::kMXFP4 && n > 0);
  EXPECT_TRUE(has_mxfp4);
  const ModelWeights<float> hf = load_hf_model<float>((dir.path() / "hf").string());
  ASSERT_EQ(hf.config, w.config);
  for (std::size_t l = 0; l < w.layers.size(); ++l)
    for (auto mm : {&LayerWeights<float>::experts_gate, &LayerWeights<float>::experts_up, &LayerWeights<float>::experts_down}) {
      const WeightMatrix &a = w.layers[l].*mm, &b = hf.layers[l].*mm;
      ASSERT_EQ(b.type(), a.type());
      ASSERT_EQ(a.bytes(), b.bytes());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0) << "layer " << l;
    }
  // HF's values from the folder's bytes, by transformers' formula, against the loaded matrix.
  const SafetensorsModel m = SafetensorsModel::open((dir.path() / "hf").string());
  const SafetensorsTensor& blocks = m.get("model.layers.2.mlp.experts.gate_up_proj_blocks");
  const SafetensorsTensor& scales = m.get("model.layers.2.mlp.experts.gate_up_proj_scales");
  const double kFp4[16] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};
  const long E = w.config.n_experts, F = w.config.hidden_dim, D = w.config.d_model, G = D / 32;
  std::vector<float> row(static_cast<std::size_t>(D));
  for (long e = 0; e < E; ++e)
    for (long o = 0; o < 2 * F; ++o) {  // out row o: gate row o / 2 (even o) or up row o / 2 (odd o)
      const WeightMatrix& mat = o % 2 == 0 ? hf.layers[2].experts_gate : hf.layers[2].experts_up;
      mat.dequantize_row(e * F + o / 2, row.data());
      for (long i = 0; i < D; ++i) {
        const long g = i / 32, k = i % 32;
        const unsigned char byte = blocks.data[((e * 2 * F + o) * G + g) * 16 + k / 2];
        const double want = std::ldexp(kFp4[k % 2 ? byte >> 4 : byte & 0xF], scales.data[(e * 2 * F + o) * G + g] - 127);
        ASSERT_EQ(static_cast<double>(row[static_cast<std::size_t>(i)]), want) << "expert " << e << " out " << o << " in " << i;
      }
    }
  EXPECT_EQ(hf.layers[0].experts_gate.type(), WeightType::kMXFP4);
  EXPECT_EQ(hf.layers[0].experts_down.type(), WeightType::kF32) << "16 columns: no whole mxfp4 block";
  const std::vector<float> a = prompt_logits(w), b = prompt_logits(hf);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << kvd_test::first_difference(a.data(), b.data(), static_cast<long>(a.size()));
}

// Every expert matrix MXFP4 (gate_up and down, as OpenAI's release; an expert width of
// 32): the folder loads the same blocks and computes the in-memory model's bits.
TEST(GptOssHf, AllMxfp4ExpertsComputeTheSameBits) {
  kvd_test::TempDir dir;
  ModelConfig c = tiny_gpt_oss();
  c.hidden_dim = 32;
  const ModelWeights<float> w = with_mxfp4_experts(ModelWeights<float>::random(c, 17));
  ASSERT_EQ(w.layers[0].experts_down.type(), WeightType::kMXFP4);
  write_hf_gpt_oss(dir.path() / "hf", w, hf_gpt_oss_fields(w.config));
  const ModelWeights<float> hf = load_hf_model<float>((dir.path() / "hf").string());
  ASSERT_EQ(hf.config, w.config);
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const WeightMatrix &a = w.layers[l].experts_down, &b = hf.layers[l].experts_down;
    ASSERT_EQ(b.type(), WeightType::kMXFP4);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0) << "layer " << l;
  }
  Transformer<float> ma(w), mb(hf);
  const auto tokens = kvd_test::make_tokens(20, c.vocab_size, 3);
  const RowMatrix<float> la = ma.forward_reference(tokens), lb = mb.forward_reference(tokens);
  EXPECT_TRUE(kvd_test::same_bits(la.data(), lb.data(), la.size()));
}

// OpenAI's experts_per_token names top-k too; rope_scaling.truncate false keeps YaRN's
// ramp fractional (another model: other logits, and no GGUF can hold it).
TEST(GptOssHf, ExpertsPerTokenAndUntruncatedYarn) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = load_gguf_model<float>(kTinyPath);
  const Fields base = hf_gpt_oss_fields(w.config);
  write_hf_gpt_oss(dir.path() / "alias", w, with(with(base, "num_experts_per_tok", ""), "experts_per_token", "4"));
  EXPECT_EQ(hf_model_info((dir.path() / "alias").string()).config, w.config);
  write_hf_gpt_oss(dir.path() / "both", w, with(base, "experts_per_token", "3"));
  kvd_test::expect_hf_error(dir.path() / "both", "field 'experts_per_token' = 3 disagrees with num_experts_per_tok = 4");
  const std::string untruncated = detail::msg("{\"rope_type\":\"yarn\",\"factor\":32.0,\"original_max_position_embeddings\":",
                                              w.config.yarn_orig_ctx, ",\"truncate\":false}");
  write_hf_gpt_oss(dir.path() / "untrunc", w, with(base, "rope_scaling", untruncated));
  const ModelWeights<float> u = load_hf_model<float>((dir.path() / "untrunc").string());
  EXPECT_FALSE(u.config.yarn_truncate);
  ModelConfig c = w.config;
  c.yarn_truncate = false;
  EXPECT_EQ(u.config, c);
  EXPECT_NE(config_fingerprint(u.config), config_fingerprint(w.config));
  const std::vector<float> a = prompt_logits(w), b = prompt_logits(u);
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_THROW(detail::gguf_arch_for(u.config), ConfigError);
  // head_dim defaults to GptOssConfig's 64, not hidden_size / num_attention_heads.
  write_hf_gpt_oss(dir.path() / "nohead", w, with(base, "head_dim", ""));
  EXPECT_EQ(hf_model_info((dir.path() / "nohead").string()).config.head_dim, 64);
  // No rope_scaling (or "default"): plain RoPE.
  write_hf_gpt_oss(dir.path() / "plain", w, with(base, "rope_scaling", "{\"rope_type\":\"default\"}"));
  EXPECT_EQ(hf_model_info((dir.path() / "plain").string()).config.rope_scale, 1.0);
}

// ---- Bad input: each field and tensor of a gpt-oss folder ----

namespace {
void expect_field_error(const std::string& key, const std::string& value, const std::string& part) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = load_gguf_model<float>(kTinyPath);
  write_hf_gpt_oss(dir.path() / "hf", w, with(hf_gpt_oss_fields(w.config), key, value));
  kvd_test::expect_hf_error(dir.path() / "hf", part);
}
void expect_tensor_error(const std::string& skip, const std::function<void(std::vector<RawTensor>&)>& edit,
                         const std::string& part, bool mxfp4 = false) {
  kvd_test::TempDir dir;
  ModelWeights<float> w = load_gguf_model<float>(kTinyPath);
  if (mxfp4) w = with_mxfp4_experts(w);
  write_hf_gpt_oss(dir.path() / "hf", w, hf_gpt_oss_fields(w.config), skip, edit);
  kvd_test::expect_hf_error(dir.path() / "hf", part);
}
}  // namespace

TEST(GptOssHfBadInput, TopKOfZeroOrAboveTheExpertCountIsRefusedNamingTheField) {
  expect_field_error("num_experts_per_tok", "0", "field 'num_experts_per_tok' = 0 must be in [1,");
  expect_field_error("num_experts_per_tok", "9", "field 'num_experts_per_tok' = 9 exceeds num_local_experts = 8");
  expect_field_error("num_local_experts", "0", "field 'num_local_experts' = 0 must be in [1,");
}

TEST(GptOssHfBadInput, UnknownLayerTypeIsRefusedNamingTheEntry) {
  expect_field_error("layer_types", "[\"sliding_attention\",\"full_attention\",\"chunked_attention\",\"full_attention\"]",
                     "field 'layer_types[2]' = \"chunked_attention\" is not a layer type");
  expect_field_error("layer_types", "[\"full_attention\",\"sliding_attention\",\"sliding_attention\",\"full_attention\"]",
                     "field 'layer_types[0]' = \"full_attention\" breaks gpt-oss's pattern");
  expect_field_error("layer_types", "[\"sliding_attention\"]", "field 'layer_types'");
}

TEST(GptOssHfBadInput, BadRopeScalingIsRefusedNamingTheField) {
  expect_field_error("rope_scaling", "{\"rope_type\":\"llama3\",\"factor\":8.0}",
                     "field 'rope_scaling.rope_type' = 'llama3' is not supported for GptOssForCausalLM (yarn)");
  expect_field_error("rope_scaling", "{\"rope_type\":\"yarn\"}", "field 'factor' is missing");
  expect_field_error("rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":32.0,\"beta_fast\":1.0,\"beta_slow\":2.0}",
                     "'rope_scaling.beta_fast' = 1");
  expect_field_error("rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":32.0,\"attention_factor\":1.5}",
                     "field 'rope_scaling.attention_factor' = 1.5 is not supported");
  expect_field_error("rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":32.0,\"truncate\":\"no\"}", "field 'truncate'");
}

TEST(GptOssHfBadInput, OtherSwigluLimitOrNoBiasesAreRefusedNamingTheField) {
  expect_field_error("swiglu_limit", "10.0", "field 'swiglu_limit' = 10.0 is not supported (7.0)");
  expect_field_error("attention_bias", "false", "field 'attention_bias' = false is not supported");
  expect_field_error("sliding_window", "", "field 'sliding_window' is missing");
}

TEST(GptOssHfBadInput, MissingSinksRouterOrExpertTensorsAreRefusedNamingThem) {
  for (const char* name : {"model.layers.1.self_attn.sinks", "model.layers.0.mlp.router.weight",
                           "model.layers.3.mlp.router.bias", "model.layers.2.mlp.experts.gate_up_proj_bias",
                           "model.layers.0.mlp.experts.down_proj_bias", "model.layers.1.self_attn.o_proj.bias"})
    expect_tensor_error(name, {}, std::string("tensor '") + name + "' is missing");
  expect_tensor_error("model.layers.2.mlp.experts.down_proj", {},
                      "tensor 'model.layers.2.mlp.experts.down_proj' is missing, and so is its MXFP4 form");
  expect_tensor_error("model.layers.1.mlp.experts.gate_up_proj_scales", {},
                      "tensor 'model.layers.1.mlp.experts.gate_up_proj_scales' is missing", true);
}

TEST(GptOssHfBadInput, InconsistentExpertShapesAreRefusedNamingTheTensor) {
  // gate_up_proj holding gate alone, down_proj stored [out, in] (nn.Linear's order, not the experts')
  expect_tensor_error("", [](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == "model.layers.1.mlp.experts.gate_up_proj") {
        t.shape[2] /= 2;
        t.bytes.resize(t.bytes.size() / 2);
      }
  }, "tensor 'model.layers.1.mlp.experts.gate_up_proj' (in ");
  expect_tensor_error("", [](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == "model.layers.0.mlp.experts.down_proj") std::swap(t.shape[1], t.shape[2]);
  }, "tensor 'model.layers.0.mlp.experts.down_proj' (in ");
  expect_tensor_error("", [](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == "model.layers.3.mlp.experts.gate_up_proj_bias") {
        t.shape = {t.shape[0] * 2, t.shape[1] / 2};
      }
  }, "tensor 'model.layers.3.mlp.experts.gate_up_proj_bias' (in ");
  expect_tensor_error("", [](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == "model.layers.2.mlp.experts.gate_up_proj_blocks") t.shape = {t.shape[0], t.shape[1] / 2, t.shape[2] * 2, 16};
  }, "tensor 'model.layers.2.mlp.experts.gate_up_proj_blocks' (in ", true);
}

TEST(GptOssHfBadInput, Mxfp4ScaleOfNaNOrBytesAsWeightsAreRefusedNamingTheTensor) {
  expect_tensor_error("", [](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == "model.layers.3.mlp.experts.gate_up_proj_scales") t.bytes[5] = 0xFF;
  }, "tensor 'model.layers.3.mlp.experts.gate_up_proj_scales' (in ", true);
  expect_tensor_error("", [](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == "model.layers.0.self_attn.sinks") {
        t.dtype = "U8";
        t.bytes.resize(t.shape[0]);
      }
  }, "tensor 'model.layers.0.self_attn.sinks' (in ", false);
  expect_tensor_error("", [](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == "model.layers.0.self_attn.sinks") {
        t.dtype = "U8";
        t.bytes.resize(t.shape[0]);
      }
  }, "has dtype U8, expected F32, F16 or BF16", false);
}

// The hf-folder fuzz corpus's gpt-oss seeds (tests/fuzz/make_corpus.cpp: config.json \0
// generation_config.json \0 model.safetensors) load and run: F32 experts and MXFP4 ones.
TEST(GptOssFuzzSeeds, HfFolderSeedsRun) {
  for (const char* seed : {"gpt-oss-f32", "gpt-oss-mxfp4"}) {
    SCOPED_TRACE(seed);
    const std::string path = kData + "../fuzz/corpus/hf-folder/" + seed;
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in.good()) << path;
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t a = bytes.find('\0'), b = bytes.find('\0', a + 1);
    ASSERT_NE(b, std::string::npos);
    kvd_test::TempDir dir;
    std::ofstream(dir.file("config.json"), std::ios::binary) << bytes.substr(0, a);
    std::ofstream(dir.file("generation_config.json"), std::ios::binary) << bytes.substr(a + 1, b - a - 1);
    std::ofstream(dir.file("model.safetensors"), std::ios::binary) << bytes.substr(b + 1);
    Transformer<float> model(load_hf_model<float>(dir.str()));
    EXPECT_TRUE(model.config().attn_sinks);
    EXPECT_FALSE(model.config().yarn_truncate);
    KVCache<float> cache(model.config());
    const RowMatrix<float> l = model.prefill({1, 2, 3, 4, 5, 6}, cache);
    EXPECT_TRUE(std::isfinite(l(0, 0)));
  }
}
