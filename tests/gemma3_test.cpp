// The gemma3 architecture (Gemma 3, text): GeGLU by tanh against its textbook
// formula; the tiny gemma3 file (tests/data/gemma3-tiny-F32.gguf, written by
// tools/write-tiny-model.cpp) against ik_llama.cpp's logits and the float64 oracle,
// and every path on it bit for bit (reference, prefill, prefill then decode,
// chunked, batched, paged; 1 and 2 threads); a round trip through kvdecode's GGUF
// writer; Hugging Face Gemma3ForCausalLM folders; and each kind of bad gemma3 input
// refused with a typed error naming the key or tensor. The exactness suites of
// transformer_test.cpp also run a gemma3 shape (Gemma3_LocalGlobalLocal_Window5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kvdecode/cache/cache_io.hpp"
#include "kvdecode/cache/paged_cache.hpp"
#include "kvdecode/convert/quantize.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/io/hf_model.hpp"
#include "test_util.hpp"

using namespace kvd;

namespace {

const std::string kData = std::string(KVDECODE_TEST_DATA_DIR) + "/";
const std::string kTinyPath = kData + "gemma3-tiny-F32.gguf";
// ../shared/reference/gguf/prompt.ids, the prompt of every GGUF reference (40 tokens:
// longer than the tiny model's window of 19, so its local layers slide).
const std::vector<int> kPromptIds = {1,   300, 436, 102, 468, 497, 279, 476, 186, 242, 27,  342, 260, 112,
                                     311, 116, 472, 150, 251, 357, 403, 111, 171, 500, 227, 39,  133, 101,
                                     85,  48,  230, 397, 278, 190, 101, 244, 405, 169, 125, 329};

ModelConfig tiny_gemma3() {
  // six layers, five local (window 3) then one global, as GGUF gemma3 implies
  ModelConfig c = kvd_test::gemma3_like(kvd_test::small_config(4, 2, 16, 32, 6, 32, 40, 24), 6, 3, 8.0);
  c.norm_eps = 0x1p-20;  // a float: GGUF stores it as f32, so the file's model is this one exactly
  c.rope_theta = 1e6;
  c.query_pre_attn_scalar = c.head_dim;
  return c;
}

std::shared_ptr<const ModelWeights<float>> tiny_weights(std::uint64_t seed = 5) {
  return std::make_shared<const ModelWeights<float>>(ModelWeights<float>::random(tiny_gemma3(), seed));
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

}  // namespace

// GeGLU's GELU is the tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// to float rounding; far out it gives x and -0, never NaN.
TEST(GeluTanh, MatchesTheTanhFormulaAndSaturates) {
  std::vector<float> x, up;
  for (int i = -400; i <= 400; ++i) x.push_back(static_cast<float>(i) / 40.0f);
  for (float v : {-1e30f, -200.0f, -20.0f, 20.0f, 200.0f, 1e30f}) x.push_back(v);
  up.assign(x.size(), 1.0f);
  std::vector<float> out(x.size()), scratch(x.size());
  geglu_array(x.data(), up.data(), out.data(), scratch.data(), static_cast<long>(x.size()));
  const double kPi = 3.14159265358979323846;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double g = x[i];
    const double want = std::fabs(g) > 1e10 ? (g > 0 ? g : 0.0)
                                            : 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (g + 0.044715 * g * g * g)));
    ASSERT_FALSE(std::isnan(out[i])) << "x = " << x[i];
    EXPECT_NEAR(out[i], want, 4e-7 * std::max(1.0, std::fabs(want))) << "x = " << x[i];
  }
  // The double form, to double rounding.
  std::vector<double> xd(x.begin(), x.begin() + 801), ud(801, 2.0), od(801), sd(801);
  geglu_array(xd.data(), ud.data(), od.data(), sd.data(), 801);
  for (std::size_t i = 0; i < xd.size(); ++i) {
    const double g = xd[i];
    EXPECT_NEAR(od[i], 2.0 * 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (g + 0.044715 * g * g * g))), 1e-14);
  }
}

// Local and global layers: the per-layer window and RoPE base are the config's data.
TEST(Gemma3Config, LayerKindsFollowThePattern) {
  ModelConfig c = tiny_gemma3();
  c.local_window = 7;
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(c.layer_local(l), l != 5) << l;
    EXPECT_EQ(c.layer_window(l), l == 5 ? 0 : 7) << l;
    EXPECT_EQ(c.layer_rope_theta(l), l == 5 ? 1e6 : 10000.0) << l;
    EXPECT_EQ(c.layer_rope_scale(l), l == 5 ? 8.0 : 1.0) << l;
  }
  EXPECT_EQ(c.attention_scalar(), c.head_dim);
  EXPECT_EQ(CacheShape::of(c).sliding_window, 0) << "the cache keeps every position for the global layers";
  EXPECT_NE(c.summary().find("post_norms"), std::string::npos) << c.summary();
}

// A cache file's model id tells Gemma's options apart (the K and V they give differ).
TEST(Gemma3Config, FingerprintCoversGemmasOptions) {
  const ModelConfig c = tiny_gemma3();
  for (auto change : std::vector<std::function<void(ModelConfig&)>>{
           [](ModelConfig& m) { m.swa_pattern = 5; }, [](ModelConfig& m) { m.local_window = 4; },
           [](ModelConfig& m) { m.rope_theta_local = 20000; }, [](ModelConfig& m) { m.rope_scale = 4; },
           [](ModelConfig& m) { m.embed_scale = false; }, [](ModelConfig& m) { m.query_pre_attn_scalar = 24; }}) {
    ModelConfig other = c;
    change(other);
    EXPECT_NE(config_fingerprint(other), config_fingerprint(c));
  }
}

// The tiny gemma3 file: what its keys say, and its tied output.
TEST(Gemma3Gguf, TinyFileLoadsAsGemma3) {
  ASSERT_TRUE(std::filesystem::exists(kTinyPath)) << kTinyPath;
  const GGUFModelInfo info = gguf_model_info(GGUFFile::open(kTinyPath));
  const ModelConfig& c = info.config;
  EXPECT_EQ(info.architecture, "gemma3");
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.swa_pattern, 6);
  EXPECT_EQ(c.local_window, 19);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_theta_local, 10000.0);
  EXPECT_EQ(c.rope_scale, 8.0);
  EXPECT_EQ(c.query_pre_attn_scalar, c.head_dim);
  EXPECT_TRUE(c.embed_scale);
  EXPECT_TRUE(c.post_norms);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.ffn_activation, Activation::kGeluTanh);
  EXPECT_EQ(c.rope_style, RopeStyle::kHalves);
}

// Every path on the tiny gemma3 file gives the same bits as the cache-free reference:
// prefill of the whole prompt, prefill then decode steps, chunked prefill, batched
// decode and a paged cache, with 1 and 2 threads (and the two thread counts agree).
TEST(Gemma3Exactness, EveryPathSameBitsOnTheTinyFile) {
  ASSERT_TRUE(std::filesystem::exists(kTinyPath)) << kTinyPath;
  kvd_test::expect_every_path_same_bits(load_gguf_model<float>(kTinyPath), kPromptIds);
}

// The same on a prompt of 150 tokens: longer than the local layers' rings (19 + 64
// positions in 7 blocks by default, 19 + 4 in 3 with max_append 5), so every ring
// wraps, in prefill, decode, chunked and batched paths.
TEST(Gemma3Exactness, EveryPathSameBitsWhenTheLocalRingsWrap) {
  const ModelWeights<float> w = load_gguf_model<float>(kTinyPath);
  kvd_test::expect_every_path_same_bits(w, kvd_test::make_tokens(150, w.config.vocab_size, 11));
}

// The tiny gemma3 file's cache keeps a ring of the window in each local layer: fewer
// bytes than every position (the planner's count), rewinds as far as the rings hold
// and no further, and cache files refuse a wrapped ring (test_util.hpp, expect_local_rings).
TEST(Gemma3Cache, LocalLayersKeepARingOfTheirWindow) {
  const ModelWeights<float> w = load_gguf_model<float>(kTinyPath);
  kvd_test::expect_local_rings(w, kvd_test::make_tokens(150, w.config.vocab_size, 12));
}

// The tiny file against the independent float64 forward of test_util.hpp (textbook
// loops, GELU through std::tanh, RoPE and windows per layer): the float model with an
// f32 cache lands within 1e-5 of the largest logit at each of the 40 positions.
TEST(Gemma3Reference, WithinOneInHundredThousandOfTheFloat64Oracle) {
  kvd_test::expect_near_oracle(kTinyPath, kPromptIds);
}

// The tiny file against ik_llama.cpp (tools/ik_reference.cpp steps: one token per
// decode, the f16 KV cache it needs without flash attention): kvdecode with an f16
// cache lands within 1e-4 of the largest logit at each of the 40 positions.
TEST(Gemma3Reference, WithinOneInTenThousandOfIkLlamaCpp) {
  kvd_test::expect_near_ik(kTinyPath, kData + "gemma3-tiny-F32.ik.logits", kPromptIds);
}

// A gemma3 model through kvdecode's GGUF writer and loader: the same config, and
// logits bit-identical to the in-memory model's; the file has no output tensor (tied).
TEST(Gemma3Gguf, RoundTripsThroughKvdecodesWriter) {
  kvd_test::TempDir dir;
  const auto w = tiny_weights();
  const std::string path = dir.file("gemma3.gguf");
  kvd_test::write_gguf_f32(path, w);
  const GGUFFile f = GGUFFile::open(path);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  EXPECT_NE(f.find_tensor("blk.0.post_attention_norm.weight"), nullptr);
  EXPECT_NE(f.find_tensor("blk.5.post_ffw_norm.weight"), nullptr);
  const GGUFModelInfo info = gguf_model_info(f);
  EXPECT_EQ(info.architecture, "gemma3");
  EXPECT_EQ(info.config, w->config);
  Transformer<float> a(*w), b(load_gguf_model<float>(path));
  const auto tokens = kvd_test::make_tokens(12, w->config.vocab_size, 2);
  const RowMatrix<float> la = a.forward_reference(tokens), lb = b.forward_reference(tokens);
  EXPECT_TRUE(kvd_test::same_bits(la.data(), lb.data(), la.size()));
}

// ---- Bad input: each new key and tensor ----

TEST(Gemma3BadInput, ZeroSlidingWindowIsRefusedNamingTheKey) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), [](GGUFWriter& g) { g.set_u32("gemma3.attention.sliding_window", 0); });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"gemma3.attention.sliding_window' = 0"});
}

TEST(Gemma3BadInput, SlidingWindowOfTheWrongTypeIsRefusedNamingTheKey) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(),
             [](GGUFWriter& g) { g.set_string("gemma3.attention.sliding_window", "1024"); });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"gemma3.attention.sliding_window"});
}

TEST(Gemma3BadInput, UnknownSlidingWindowPatternIsRefusedNamingTheKey) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), [](GGUFWriter& g) { g.set_u32("gemma3.attention.sliding_window_pattern", 0); });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"gemma3.attention.sliding_window_pattern' = 0", "every N-th layer global"});
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(),
             [](GGUFWriter& g) { g.set_string("gemma3.attention.sliding_window_pattern", "5:1"); });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"gemma3.attention.sliding_window_pattern"});
}

// A pattern longer than the model: every layer local (what llama.cpp's fixed 6 gives a
// model of fewer layers), as a GGUF key too.
TEST(Gemma3Gguf, PatternBeyondTheLayersMakesEveryLayerLocal) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), [](GGUFWriter& g) { g.set_u32("gemma3.attention.sliding_window_pattern", 9); });
  const ModelConfig c = gguf_model_info(GGUFFile::open(dir.file("m.gguf"))).config;
  EXPECT_EQ(c.swa_pattern, 9);
  for (int l = 0; l < c.n_layers; ++l) EXPECT_TRUE(c.layer_local(l)) << l;
}

TEST(Gemma3BadInput, BadRopeScalingFactorIsRefusedNamingTheKey) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), [](GGUFWriter& g) { g.set_f32("gemma3.rope.scaling.factor", 0.5f); });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"gemma3.rope.scaling.factor' = 0.5"});
}

TEST(Gemma3BadInput, MissingPostNormIsRefusedNamingTheTensor) {
  kvd_test::TempDir dir;
  kvd_test::write_gguf_f32(dir.file("m.gguf"), tiny_weights(), {}, [](const std::string& n) { return n != "blk.3.post_ffw_norm.weight"; });
  kvd_test::expect_gguf_load_error(dir.file("m.gguf"), {"tensor 'blk.3.post_ffw_norm.weight' is missing"});
}

TEST(Gemma3BadInput, NegativeQueryPreAttnScalarIsAConfigErrorNamingIt) {
  ModelConfig c = tiny_gemma3();
  c.query_pre_attn_scalar = -4;
  expect_config_error(c, "ModelConfig.query_pre_attn_scalar = -4");
}

TEST(Gemma3BadInput, NegativePatternIsAConfigErrorNamingIt) {
  ModelConfig c = tiny_gemma3();
  c.swa_pattern = -1;
  expect_config_error(c, "ModelConfig.swa_pattern = -1");
}

TEST(Gemma3BadInput, PatternWithoutAWindowIsAConfigErrorNamingIt) {
  ModelConfig c = tiny_gemma3();
  c.local_window = 0;
  expect_config_error(c, "ModelConfig.local_window = 0");
}

TEST(Gemma3BadInput, LocalRopeBaseOutOfRangeIsAConfigErrorNamingIt) {
  ModelConfig c = tiny_gemma3();
  c.rope_theta_local = 0.5;
  expect_config_error(c, "ModelConfig.rope_theta_local = 0.5");
}

// Gemma's block is one GGUF architecture: a model with only part of it cannot be written as one.
TEST(Gemma3BadInput, PartOfGemmasBlockCannotBeWrittenAsGguf) {
  ModelConfig c = tiny_gemma3();
  c.embed_scale = false;
  EXPECT_THROW(detail::gguf_arch_for(c), ConfigError);
  c = tiny_gemma3();
  c.query_pre_attn_scalar = 24;
  EXPECT_THROW(detail::gguf_arch_for(c), ConfigError);
}

// The GGUF fuzz corpus's gemma3 seeds (tests/fuzz/make_corpus.cpp): the valid one
// loads and runs, each bad one is refused naming its key or tensor.
TEST(Gemma3FuzzSeeds, ValidSeedRunsAndEachDefectIsNamed) {
  const std::string dir = kData + "../fuzz/corpus/gguf/";
  ASSERT_TRUE(std::filesystem::exists(dir + "tiny-gemma3-q8_0")) << dir;
  Transformer<float> model(load_gguf_model<float>(dir + "tiny-gemma3-q8_0"));
  EXPECT_TRUE(model.config().post_norms);
  EXPECT_EQ(model.config().local_window, 4);
  KVCache<float> cache(model.config());
  const RowMatrix<float> l = model.prefill({1, 2, 3, 4, 5, 6}, cache);
  EXPECT_TRUE(std::isfinite(l(0, 0)));
  kvd_test::expect_gguf_load_error(dir + "gemma3-zero-window-pattern", {"gemma3.attention.sliding_window_pattern' = 0"});
  kvd_test::expect_gguf_load_error(dir + "gemma3-missing-post-norm", {"tensor 'blk.0.post_ffw_norm.weight' is missing"});
}

// ---- Hugging Face folders (Gemma3ForCausalLM, model_type gemma3_text) ----

namespace {

// config.json's fields for config c, in order, each as its JSON text.
std::vector<std::pair<std::string, std::string>> hf_gemma_fields(const ModelConfig& c) {
  auto s = [](auto v) { return kvd::detail::msg(v); };
  return {{"architectures", "[\"Gemma3ForCausalLM\"]"}, {"model_type", "\"gemma3_text\""},
          {"hidden_size", s(c.d_model)}, {"intermediate_size", s(c.hidden_dim)},
          {"num_hidden_layers", s(c.n_layers)}, {"num_attention_heads", s(c.n_heads)},
          {"num_key_value_heads", s(c.n_kv_heads)}, {"head_dim", s(c.head_dim)}, {"vocab_size", s(c.vocab_size)},
          {"max_position_embeddings", s(c.max_seq_len)}, {"rms_norm_eps", "9.5367431640625e-07"},
          {"rope_theta", "1000000.0"}, {"rope_local_base_freq", "10000.0"}, {"sliding_window", s(c.local_window)},
          {"sliding_window_pattern", s(c.swa_pattern)}, {"query_pre_attn_scalar", s(c.attention_scalar())},
          {"hidden_activation", "\"gelu_pytorch_tanh\""}, {"rope_scaling", "{\"rope_type\":\"linear\",\"factor\":8.0}"},
          {"final_logit_softcapping", "null"}, {"attn_logit_softcapping", "null"}, {"tie_word_embeddings", "true"}};
}

// A Gemma3ForCausalLM folder holding w: every tensor under its Hugging Face name, each
// norm weight stored as w - 1 (Gemma's RMSNorm multiplies by 1 + w), and config.json
// from `fields` (hf_gemma_fields, edited by the caller). `skip` drops a tensor by name.
void write_hf_gemma(const std::filesystem::path& dir, const ModelWeights<float>& w,
                    const std::vector<std::pair<std::string, std::string>>& fields, const std::string& skip = "") {
  std::filesystem::create_directories(dir);
  std::vector<kvd_test::F32Tensor> ts;
  for_each_tensor(w, [&](const TensorSpec& s, int layer, auto slot) {
    if (!s.hf) return;
    const std::string name = hf_tensor_name(s, layer, true);
    if (name == skip) return;
    if (!slot.matrix) {
      std::vector<float> v(slot.vector->data(), slot.vector->data() + slot.vector->size());
      if (tensor_is_rmsnorm(s.id))
        for (float& x : v) x = x - 1.0f;  // exact for weights in [0.5, 2] (Sterbenz), so 1 + (w - 1) == w
      ts.push_back({name, {static_cast<std::uint64_t>(v.size())}, v});
      return;
    }
    const WeightMatrix& m = *slot.matrix;
    kvd_test::F32Tensor t{name, {static_cast<std::uint64_t>(m.rows()), static_cast<std::uint64_t>(m.cols())}, {}};
    t.data.resize(static_cast<std::size_t>(m.rows() * m.cols()));
    for (long r = 0; r < m.rows(); ++r) m.dequantize_row(r, t.data.data() + r * m.cols());
    ts.push_back(std::move(t));
  });
  kvd_test::write_safetensors_f32(dir / "model.safetensors", ts);
  std::ofstream cfg(dir / "config.json");
  cfg << "{";
  for (std::size_t i = 0; i < fields.size(); ++i) cfg << (i ? "," : "") << "\"" << fields[i].first << "\":" << fields[i].second;
  cfg << "}";
}

// fields with `key` set to `value` (appended when absent; removed when value is empty).
std::vector<std::pair<std::string, std::string>> with(std::vector<std::pair<std::string, std::string>> fields,
                                                      const std::string& key, const std::string& value) {
  auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == key; });
  if (it == fields.end()) fields.emplace_back(key, value);
  else if (value.empty()) fields.erase(it);
  else it->second = value;
  return fields;
}

ModelWeights<float> hf_gemma_weights() { return ModelWeights<float>::random(tiny_gemma3(), 12); }


}  // namespace

// A Gemma3ForCausalLM folder loads as the weights it holds (norms as 1 + w), the same
// config as the GGUF path, and kvdecode-quantize turns it into a gemma3 GGUF that
// computes the same bits.
TEST(Gemma3Hf, FolderLoadsAsItsWeightsAndQuantizesToTheSameBits) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = hf_gemma_weights();
  write_hf_gemma(dir.path() / "hf", w, hf_gemma_fields(w.config));
  const ModelWeights<float> hf = load_hf_model<float>((dir.path() / "hf").string());
  EXPECT_EQ(hf.config, w.config);
  EXPECT_EQ(hf.layers[2].ffn_norm, w.layers[2].ffn_norm) << "pre_feedforward_layernorm is the FFN's pre-norm";
  EXPECT_EQ(hf.layers[2].attn_post_norm, w.layers[2].attn_post_norm);
  const std::string out = dir.file("q.gguf");
  quantize_model((dir.path() / "hf").string(), out, QuantScheme::kF32);
  EXPECT_EQ(GGUFFile::open(out).get_string("general.architecture"), "gemma3");
  Transformer<float> a(w), b(hf), g(load_gguf_model<float>(out));
  EXPECT_EQ(g.config(), w.config);
  const std::vector<int> ids = {1, 5, 17, 33, 3, 8, 9, 2, 4, 6};
  const RowMatrix<float> la = a.forward_reference(ids), lb = b.forward_reference(ids), lg = g.forward_reference(ids);
  EXPECT_TRUE(kvd_test::same_bits(la.data(), lb.data(), la.size()));
  EXPECT_TRUE(kvd_test::same_bits(la.data(), lg.data(), la.size()));
}

// layer_types (newer configs) gives the same pattern as sliding_window_pattern; a list
// that is no such pattern is refused naming the field.
TEST(Gemma3Hf, LayerTypesGiveThePattern) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = hf_gemma_weights();
  const std::string s = "\"sliding_attention\"", f = "\"full_attention\"";
  auto fields = with(hf_gemma_fields(w.config), "sliding_window_pattern", "");
  fields = with(fields, "layer_types", "[" + s + "," + s + "," + s + "," + s + "," + s + "," + f + "]");
  write_hf_gemma(dir.path() / "hf", w, fields);
  EXPECT_EQ(hf_model_info((dir.path() / "hf").string()).config, w.config);
  write_hf_gemma(dir.path() / "bad", w, with(fields, "layer_types", "[" + s + "," + f + "," + s + "," + s + "," + s + "," + f + "]"));
  kvd_test::expect_hf_error(dir.path() / "bad", "field 'layer_types'");
}

TEST(Gemma3HfBadInput, BadQueryPreAttnScalarIsRefusedNamingTheField) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = hf_gemma_weights();
  write_hf_gemma(dir.path() / "zero", w, with(hf_gemma_fields(w.config), "query_pre_attn_scalar", "0"));
  kvd_test::expect_hf_error(dir.path() / "zero", "field 'query_pre_attn_scalar' = 0");
  write_hf_gemma(dir.path() / "text", w, with(hf_gemma_fields(w.config), "query_pre_attn_scalar", "\"256\""));
  kvd_test::expect_hf_error(dir.path() / "text", "field 'query_pre_attn_scalar'");
}

TEST(Gemma3HfBadInput, UnknownActivationIsRefusedNamingTheField) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = hf_gemma_weights();
  write_hf_gemma(dir.path() / "hf", w, with(hf_gemma_fields(w.config), "hidden_activation", "\"gelu\""));
  kvd_test::expect_hf_error(dir.path() / "hf", "field 'hidden_activation' = \"gelu\" is not supported");
}

TEST(Gemma3HfBadInput, LogitSoftcappingIsRefusedNamingTheField) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = hf_gemma_weights();
  write_hf_gemma(dir.path() / "hf", w, with(hf_gemma_fields(w.config), "final_logit_softcapping", "30.0"));
  kvd_test::expect_hf_error(dir.path() / "hf", "field 'final_logit_softcapping'");
}

TEST(Gemma3HfBadInput, UnknownSlidingWindowPatternIsRefusedNamingTheField) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = hf_gemma_weights();
  write_hf_gemma(dir.path() / "hf", w, with(hf_gemma_fields(w.config), "sliding_window_pattern", "0"));
  kvd_test::expect_hf_error(dir.path() / "hf", "field 'sliding_window_pattern' = 0");
}

TEST(Gemma3HfBadInput, MissingSlidingWindowIsRefusedNamingTheField) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = hf_gemma_weights();
  write_hf_gemma(dir.path() / "hf", w, with(hf_gemma_fields(w.config), "sliding_window", ""));
  kvd_test::expect_hf_error(dir.path() / "hf", "field 'sliding_window' is missing");
}

TEST(Gemma3HfBadInput, UnsupportedRopeScalingIsRefusedNamingTheField) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = hf_gemma_weights();
  write_hf_gemma(dir.path() / "hf", w,
                 with(hf_gemma_fields(w.config), "rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":8.0}"));
  kvd_test::expect_hf_error(dir.path() / "hf", "field 'rope_scaling.rope_type' = 'yarn'");
}

TEST(Gemma3HfBadInput, MissingPostNormIsRefusedNamingTheTensor) {
  kvd_test::TempDir dir;
  const ModelWeights<float> w = hf_gemma_weights();
  write_hf_gemma(dir.path() / "hf", w, hf_gemma_fields(w.config), "model.layers.1.post_feedforward_layernorm.weight");
  kvd_test::expect_hf_error(dir.path() / "hf", "model.layers.1.post_feedforward_layernorm.weight");
}
