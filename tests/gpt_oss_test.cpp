// The gpt-oss architecture: the clamped SwiGLU against its formula, sinks in the
// softmax, YaRN's RoPE table against its formulas; the tiny gpt-oss file
// (tests/data/gpt-oss-tiny-F32.gguf, written by tools/write-tiny-model.cpp) against
// ik_llama.cpp's logits and the float64 oracle, and every path on it bit for bit
// (reference, prefill, prefill then decode, chunked, batched, paged; 1 and 2 threads);
// a round trip through kvdecode's GGUF writer; and each kind of bad gpt-oss input
// refused with a typed error naming the key or tensor. The exactness suites of
// transformer_test.cpp also run a gpt-oss shape (GptOss_E6_K3_Window5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
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
