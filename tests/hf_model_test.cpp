// Hugging Face model folders end to end: the real stories260K in HF Llama layout
// (F32 single file; BF16 over two shards) against float64 reference logits
// computed outside kvdecode, greedy decoding against llama2.c's ids, the
// exactness contract on a folder-loaded model, and one test per way config.json
// (or a tensor shape it implies) can be wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "json_reader.hpp"
#include "kvdecode/generate/generate.hpp"
#include "kvdecode/io/hf_model.hpp"
#include "kvdecode/model/transformer.hpp"
#include "test_util.hpp"

using namespace kvd;
namespace fs = std::filesystem;

namespace {

const std::string kShared = KVDECODE_SHARED_DIR;
const std::string kHF = kShared + "/models/hf/";
const std::string kRef = kShared + "/reference/hf/";

#define SKIP_IF_MISSING(path) \
  if (!fs::exists(path)) GTEST_SKIP() << "shared test file not found: " << (path) << " (needs ../shared beside the checkout)"

std::vector<int> read_ids(const std::string& path) {
  std::ifstream in(path);
  std::vector<int> ids;
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// A scratch folder holding config.json = `text` (and, optionally, a link to real weights).
struct ScratchFolder {
  explicit ScratchFolder(const std::string& text, const std::string& weights = "") {
    dir = fs::temp_directory_path() / ("kvd_hf_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                       "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << text;
    if (!weights.empty()) fs::create_symlink(weights, dir / "model.safetensors");
  }
  ~ScratchFolder() { fs::remove_all(dir); }
  std::string path() const { return dir.string(); }
  fs::path dir;
};

const char* kLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 172,
  "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 512,
  "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": true
})";

nlohmann::json base_config() { return nlohmann::json::parse(kLlamaConfig); }

// The message of the FormatError that hf_model_config throws for config `j`.
std::string config_error(const nlohmann::json& j) {
  ScratchFolder f(j.dump());
  try {
    hf_model_config(f.path());
  } catch (const FormatError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no FormatError for " << j.dump();
  return "";
}

}  // namespace

// ---- Reference logits -------------------------------------------------------

class HFReference : public ::testing::TestWithParam<const char*> {};

TEST_P(HFReference, LogitsMatchReference) {
  const std::string name = GetParam();
  SKIP_IF_MISSING(kHF + name);
  SKIP_IF_MISSING(kRef + "hf-" + name + ".logits");
  Transformer<float> model(load_hf_model<float>(kHF + name));
  const auto ids = read_ids(kRef + "prompt.ids");
  const auto ref = read_floats(kRef + "hf-" + name + ".logits");
  const int V = model.config().vocab_size;
  ASSERT_EQ(V, 512);
  ASSERT_EQ(ref.size(), ids.size() * V);
  KVCache<float> cache(model.config(), static_cast<int>(ids.size()));
  const RowMatrix<float> got = model.prefill(ids, cache, true);
  double worst = 0;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    double max_abs = 0, max_err = 0;
    for (int v = 0; v < V; ++v) {
      max_abs = std::max(max_abs, std::abs(double(ref[t * V + v])));
      max_err = std::max(max_err, std::abs(double(ref[t * V + v]) - got(t, v)));
    }
    EXPECT_LE(max_err, 1e-4 * max_abs) << name << " position " << t;
    worst = std::max(worst, max_err / max_abs);
  }
  std::cout << "  " << name << ": largest error " << worst << " of the largest logit\n";
}

INSTANTIATE_TEST_SUITE_P(SharedFolders, HFReference, ::testing::Values("stories260K", "stories260K-bf16-sharded"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(HFModel, ConfigFromConfigJson) {
  SKIP_IF_MISSING(kHF + "stories260K");
  const HFModelInfo info = hf_model_info(kHF + "stories260K");
  const ModelConfig& c = info.config;
  EXPECT_EQ(info.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_EQ(c.rope_style, RopeStyle::kHalves);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_TRUE(info.rope_freq_factors.empty());
}

TEST(HFModel, GreedyFromBosMatchesLlama2c) {
  SKIP_IF_MISSING(kHF + "stories260K");
  SKIP_IF_MISSING(kShared + "/reference/stories260K_greedy.json");
  const auto ref = kvd_test::read_json(kShared + "/reference/stories260K_greedy.json");
  std::vector<int> want;
  for (const auto& v : ref.at("greedy_ids").array) want.push_back(static_cast<int>(v.number));
  ASSERT_EQ(want.size(), 256u);
  Transformer<float> model(load_hf_model<float>(kHF + "stories260K"));
  KVCache<float> cache(model.config());
  GenerateOptions opt;
  opt.max_new_tokens = 256;
  EXPECT_EQ(generate(model, {1}, cache, opt).tokens, want);
}

// reference == prefill == prefill + decode == chunked == batched, bit for bit, 1 and 2 threads.
class HFExactness : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(HFExactness, EveryPathIdentical) {
  const std::string name = std::get<0>(GetParam());
  SKIP_IF_MISSING(kHF + name);
  const int saved = num_threads();
  set_num_threads(std::get<1>(GetParam()));
  HFLoadOptions o;
  o.max_seq_len = 40;
  Transformer<float> model(load_hf_model<float>(kHF + name, o));
  const ModelConfig& c = model.config();
  const auto ids = read_ids(kRef + "prompt.ids");
  const int n = static_cast<int>(ids.size()), V = c.vocab_size;
  ASSERT_LE(n, 40);
  const RowMatrix<float> ref = model.forward_reference(ids);
  {
    KVCache<float> cache(c);
    const RowMatrix<float> all = model.prefill(ids, cache, true);
    for (int t = 0; t < n; ++t) EXPECT_ROW_BITS_EQ(all.row(t).data(), ref.row(t).data(), V) << "prefill row " << t;
  }
  for (int k : {1, 7, 16, 33}) {
    KVCache<float> cache(c);
    model.prefill(std::vector<int>(ids.begin(), ids.begin() + k), cache);
    for (int t = k; t < n; ++t) {
      auto row = model.decode_step(ids[t], cache);
      ASSERT_TRUE(kvd_test::same_bits(row.row(0).data(), ref.row(t).data(), V)) << "prefill " << k << ", decode at " << t;
    }
  }
  {
    KVCache<float> cache(c);
    int pos = 0;
    for (int len : {3, 1, 13, 5, 18}) {
      if (pos + len > n) break;
      auto rows = model.prefill(std::vector<int>(ids.begin() + pos, ids.begin() + pos + len), cache, true);
      for (int i = 0; i < len; ++i)
        EXPECT_ROW_BITS_EQ(rows.row(i).data(), ref.row(pos + i).data(), V) << "chunk at " << pos << " row " << i;
      pos += len;
    }
  }
  {  // three sequences at different lengths, decoded together
    std::vector<KVCache<float>> caches;
    for (int len : {4, 9, 20}) {
      caches.emplace_back(c);
      model.prefill(std::vector<int>(ids.begin(), ids.begin() + len), caches.back());
    }
    std::vector<KVCache<float>*> ptrs;
    for (auto& cc : caches) ptrs.push_back(&cc);
    for (int step = 0; step < 5; ++step) {
      std::vector<int> toks, pos;
      for (auto* p : ptrs) toks.push_back(ids[p->length()]);
      for (auto* p : ptrs) pos.push_back(p->length());
      const RowMatrix<float> rows = model.decode_batch(toks, ptrs);
      for (int b = 0; b < 3; ++b) EXPECT_ROW_BITS_EQ(rows.row(b).data(), ref.row(pos[b]).data(), V) << "batch row " << b;
    }
  }
  set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(SharedFolders, HFExactness,
                         ::testing::Combine(::testing::Values("stories260K", "stories260K-bf16-sharded"),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param);
                           for (auto& ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s + "_threads" + std::to_string(std::get<1>(info.param));
                         });

// ---- config.json parsing (no shared files needed) ---------------------------

TEST(HFConfig, ValidConfigParses) {
  ScratchFolder f(kLlamaConfig);
  const ModelConfig c = hf_model_config(f.path());
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.sliding_window, 0);
}

TEST(HFConfig, KvHeadsDefaultToHeads) {
  auto j = base_config();
  j.erase("num_key_value_heads");
  ScratchFolder f(j.dump());
  EXPECT_EQ(hf_model_config(f.path()).n_kv_heads, 8);
}

TEST(HFConfig, MissingConfigIsFileError) {
  const fs::path dir = fs::temp_directory_path() / "kvd_hf_test_no_config";
  fs::create_directories(dir);
  EXPECT_THROW(hf_model_config(dir.string()), FileError);
  fs::remove_all(dir);
}

TEST(HFConfig, InvalidJsonNamed) {
  ScratchFolder f("{\"architectures\": [");
  try {
    hf_model_config(f.path());
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

TEST(HFConfig, MissingFieldNamed) {
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "rms_norm_eps",
                          "max_position_embeddings", "architectures"}) {
    auto j = base_config();
    j.erase(key);
    const std::string e = config_error(j);
    EXPECT_NE(e.find(std::string("'") + key + "' is missing"), std::string::npos) << key << ": " << e;
  }
}

TEST(HFConfig, UnknownArchitectureNamed) {
  auto j = base_config();
  j["architectures"] = {"GPT2LMHeadModel"};
  const std::string e = config_error(j);
  EXPECT_NE(e.find("GPT2LMHeadModel"), std::string::npos) << e;
  EXPECT_NE(e.find("not supported"), std::string::npos) << e;
}

TEST(HFConfig, KvHeadsNotDividingHeadsNamed) {
  auto j = base_config();
  j["num_key_value_heads"] = 3;
  const std::string e = config_error(j);
  EXPECT_NE(e.find("num_key_value_heads"), std::string::npos) << e;
  EXPECT_NE(e.find("does not divide"), std::string::npos) << e;
}

TEST(HFConfig, HeadsNotDividingHiddenWithoutHeadDimNamed) {
  auto j = base_config();
  j["num_attention_heads"] = 12;
  j["num_key_value_heads"] = 4;
  const std::string e = config_error(j);
  EXPECT_NE(e.find("num_attention_heads"), std::string::npos) << e;
  EXPECT_NE(e.find("head_dim is absent"), std::string::npos) << e;
}

TEST(HFConfig, WrongTypeNamed) {
  auto j = base_config();
  j["hidden_size"] = "64";
  const std::string e = config_error(j);
  EXPECT_NE(e.find("'hidden_size'"), std::string::npos) << e;
  EXPECT_NE(e.find("not an integer"), std::string::npos) << e;
}

TEST(HFConfig, ZeroOrHugeDimensionNamed) {
  for (long v : {0L, -4L, 1L << 30}) {
    auto j = base_config();
    j["intermediate_size"] = v;
    const std::string e = config_error(j);
    EXPECT_NE(e.find("'intermediate_size'"), std::string::npos) << v << ": " << e;
  }
}

TEST(HFConfig, UnsupportedRopeScalingNamed) {
  auto j = base_config();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  const std::string e = config_error(j);
  EXPECT_NE(e.find("yarn"), std::string::npos) << e;
}

TEST(HFConfig, Llama3RopeScalingMissingFieldNamed) {
  auto j = base_config();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}};
  const std::string e = config_error(j);
  EXPECT_NE(e.find("original_max_position_embeddings"), std::string::npos) << e;
}

// HF's _compute_llama3_parameters, evaluated independently here in its own form
// (where on the frequency, then the divisor), for Llama 3.1's settings.
TEST(HFConfig, Llama3RopeFactorsMatchHfFormula) {
  auto j = base_config();
  j["hidden_size"] = 1024;
  j["num_attention_heads"] = 8;  // head_dim 128
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  ScratchFolder f(j.dump());
  const HFModelInfo info = hf_model_info(f.path());
  ASSERT_EQ(info.rope_freq_factors.size(), 64u);
  const double kPi = 3.14159265358979323846;
  int n_low = 0, n_high = 0, n_mid = 0;
  for (int i = 0; i < 64; ++i) {
    const double inv_freq = 1.0 / std::pow(500000.0, (2.0 * i) / 128);
    const double wavelen = 2 * kPi / inv_freq;
    double scaled = wavelen > 8192.0 / 1.0 ? inv_freq / 8.0 : inv_freq;
    const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
    const bool medium = !(wavelen < 8192.0 / 4.0) && !(wavelen > 8192.0 / 1.0);
    if (medium) scaled = (1 - smooth) * scaled / 8.0 + smooth * scaled;
    n_low += wavelen > 8192.0;
    n_high += wavelen < 2048.0;
    n_mid += medium;
    EXPECT_NEAR(inv_freq / info.rope_freq_factors[i], scaled, 1e-12 * inv_freq) << "frequency " << i;
  }
  EXPECT_GT(n_low, 0);
  EXPECT_GT(n_high, 0);
  EXPECT_GT(n_mid, 0);
}

TEST(HFConfig, LinearRopeScalingIsUniform) {
  auto j = base_config();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ScratchFolder f(j.dump());
  const HFModelInfo info = hf_model_info(f.path());
  ASSERT_EQ(info.rope_freq_factors.size(), 4u);
  for (double v : info.rope_freq_factors) EXPECT_EQ(v, 2.0);
}

TEST(HFConfig, SlidingWindowRules) {
  {  // Mistral: a non-null sliding_window applies
    auto j = base_config();
    j["architectures"] = {"MistralForCausalLM"};
    j["sliding_window"] = 16;
    ScratchFolder f(j.dump());
    EXPECT_EQ(hf_model_config(f.path()).sliding_window, 16);
  }
  {  // Qwen2: only with use_sliding_window
    auto j = base_config();
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["sliding_window"] = 16;
    j["use_sliding_window"] = false;
    ScratchFolder f(j.dump());
    const ModelConfig c = hf_model_config(f.path());
    EXPECT_EQ(c.sliding_window, 0);
    EXPECT_TRUE(c.qkv_bias);  // qwen2's default
  }
  {  // Llama with null sliding_window: none
    auto j = base_config();
    j["sliding_window"] = nullptr;
    ScratchFolder f(j.dump());
    EXPECT_EQ(hf_model_config(f.path()).sliding_window, 0);
  }
}

TEST(HFConfig, Qwen3HeadDimAndNorms) {
  auto j = base_config();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 16;
  ScratchFolder f(j.dump());
  const ModelConfig c = hf_model_config(f.path());
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
}

// ---- config.json disagreeing with the real weights ---------------------------

TEST(HFModelBadInput, TensorShapeMismatchNamed) {
  SKIP_IF_MISSING(kHF + "stories260K/model.safetensors");
  auto j = base_config();
  j["intermediate_size"] = 176;
  ScratchFolder f(j.dump(), kHF + "stories260K/model.safetensors");
  try {
    load_hf_model<float>(f.path());
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << e.what();
  }
}

TEST(HFModelBadInput, VocabMismatchNamed) {
  SKIP_IF_MISSING(kHF + "stories260K/model.safetensors");
  auto j = base_config();
  j["vocab_size"] = 1000;
  ScratchFolder f(j.dump(), kHF + "stories260K/model.safetensors");
  try {
    load_hf_model<float>(f.path());
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos) << e.what();
  }
}

TEST(HFModelBadInput, MissingBiasNamed) {
  SKIP_IF_MISSING(kHF + "stories260K/model.safetensors");
  auto j = base_config();
  j["attention_bias"] = true;
  ScratchFolder f(j.dump(), kHF + "stories260K/model.safetensors");
  try {
    load_hf_model<float>(f.path());
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.q_proj.bias"), std::string::npos) << e.what();
  }
}

TEST(HFConfig, IsHfFolder) {
  ScratchFolder f(kLlamaConfig);
  EXPECT_TRUE(is_hf_folder(f.path()));
  EXPECT_FALSE(is_hf_folder((f.dir / "config.json").string()));  // a file, not a folder
  EXPECT_FALSE(is_hf_folder((f.dir / "nonexistent").string()));
  EXPECT_FALSE(is_hf_folder(fs::temp_directory_path().string() + "/kvd_hf_test_surely_absent_dir"));
}

// ---- generation_config.json: the EOS ids generation stops at ----------------

TEST(HFGenerationConfig, EosIdsSingleListOrAbsent) {
  ScratchFolder f(kLlamaConfig);
  EXPECT_TRUE(hf_generation_eos_ids(f.path()).empty()) << "no generation_config.json";
  std::ofstream(f.dir / "generation_config.json") << R"({"bos_token_id": 1, "eos_token_id": 2})";
  EXPECT_EQ(hf_generation_eos_ids(f.path()), std::vector<int>({2}));
  // Llama 3.1 lists <|end_of_text|>, <|eom_id|> and <|eot_id|>.
  std::ofstream(f.dir / "generation_config.json") << R"({"eos_token_id": [128001, 128008, 128009]})";
  EXPECT_EQ(hf_generation_eos_ids(f.path()), std::vector<int>({128001, 128008, 128009}));
  std::ofstream(f.dir / "generation_config.json") << R"({"do_sample": true})";
  EXPECT_TRUE(hf_generation_eos_ids(f.path()).empty()) << "no eos_token_id";
}

TEST(HFGenerationConfig, BadEosIdsNamed) {
  ScratchFolder f(kLlamaConfig);
  const std::pair<const char*, const char*> cases[] = {
      {R"({"eos_token_id": -1})", "eos_token_id = -1"},
      {R"({"eos_token_id": "2"})", "eos_token_id = \"2\""},
      {R"({"eos_token_id": [2, 3.5]})", "eos_token_id[1] = 3.5"},
      {R"({"eos_token_id": 4294967296})", "eos_token_id = 4294967296"},
      {R"({"eos_token_id": [)", "invalid JSON"},
      {R"([2])", "not a JSON object"},
  };
  for (const auto& [text, want] : cases) {
    std::ofstream(f.dir / "generation_config.json") << text;
    try {
      hf_generation_eos_ids(f.path());
      ADD_FAILURE() << "no error for " << text;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("generation_config.json"), std::string::npos) << e.what();
    }
  }
  std::string many = "{\"eos_token_id\": [";
  for (int i = 0; i < 1025; ++i) many += (i ? ", " : "") + std::to_string(i);
  std::ofstream(f.dir / "generation_config.json") << many << "]}";
  try {
    hf_generation_eos_ids(f.path());
    ADD_FAILURE() << "no error for 1025 ids";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("1025 ids, more than the limit of 1024"), std::string::npos) << e.what();
  }
}

// ---- Issue 33: the context is capped and checked; every tensor is used ---------

TEST(HFModelContext, DemandOfAHugeContextIsRefusedAndMaxSeqLenHonoured) {
  SKIP_IF_MISSING(kHF + "stories260K/model.safetensors");
  auto j = base_config();
  j["max_position_embeddings"] = 1 << 20;  // 1.34 GB of KV cache for a 1 MB model
  ScratchFolder f(j.dump(), kHF + "stories260K/model.safetensors");
  try {
    load_hf_model<float>(f.path());
    FAIL() << "no error";
  } catch (const FormatError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("a context of 1048576 positions"), std::string::npos) << m;
    EXPECT_NE(m.find("the limit of " + std::to_string(kHFSeqBytesFloor) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("max_seq_len / -c"), std::string::npos) << m;
  }
  HFLoadOptions lo;
  lo.max_seq_len = 64;
  const ModelWeights<float> w = load_hf_model<float>(f.path(), lo);
  EXPECT_EQ(w.config.max_seq_len, 64);
}

TEST(HFModelUnusedTensors, LayersBeyondNumHiddenLayersAreRefusedUnlessAllowed) {
  SKIP_IF_MISSING(kHF + "stories260K/model.safetensors");
  auto j = base_config();
  j["num_hidden_layers"] = 4;  // the weights hold 5 layers
  ScratchFolder f(j.dump(), kHF + "stories260K/model.safetensors");
  try {
    load_hf_model<float>(f.path());
    FAIL() << "no error";
  } catch (const FormatError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tensor 'model.layers.4.input_layernorm.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find("4 layers (num_hidden_layers)"), std::string::npos) << m;
    EXPECT_NE(m.find("the limit is 0"), std::string::npos) << m;
  }
  HFLoadOptions lo;
  std::vector<std::string> unused;
  lo.allow_unused_tensors = true;
  lo.unused_tensors = &unused;
  const ModelWeights<float> w = load_hf_model<float>(f.path(), lo);
  EXPECT_EQ(w.config.n_layers, 4);
  EXPECT_EQ(unused.size(), 9u);  // a llama layer's nine tensors
}

// The shared weights with F32 vectors appended under new names, written to `dst`.
void write_with_vectors(const std::string& src, const fs::path& dst,
                        const std::vector<std::pair<std::string, std::size_t>>& extra) {
  std::ifstream in(src, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t n = 0;
  for (int k = 0; k < 8; ++k) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(b[k])) << (8 * k);
  nlohmann::json h = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  std::vector<char> data(b.begin() + 8 + static_cast<std::ptrdiff_t>(n), b.end());
  for (const auto& [name, count] : extra) {
    const std::size_t at = data.size();
    h[name] = {{"dtype", "F32"}, {"shape", {count}}, {"data_offsets", {at, at + 4 * count}}};
    const float v = 0.125f;
    for (std::size_t i = 0; i < count; ++i) data.insert(data.end(), reinterpret_cast<const char*>(&v), reinterpret_cast<const char*>(&v) + 4);
  }
  const std::string header = h.dump();
  std::ofstream out(dst, std::ios::binary);
  for (int k = 0; k < 8; ++k) out.put(static_cast<char>(static_cast<std::uint64_t>(header.size()) >> (8 * k)));
  out << header;
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

TEST(HFModelUnusedTensors, LlamaAttentionBiasesApplyQkvAndRefuseOutput) {
  SKIP_IF_MISSING(kHF + "stories260K/model.safetensors");
  auto j = base_config();
  j["attention_bias"] = true;  // HF Llama then has q/k/v/o biases; kvdecode has no o bias
  ScratchFolder f(j.dump());
  std::vector<std::pair<std::string, std::size_t>> biases;
  for (int l = 0; l < 5; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    biases.push_back({p + "q_proj.bias", 64});
    biases.push_back({p + "k_proj.bias", 32});
    biases.push_back({p + "v_proj.bias", 32});
  }
  write_with_vectors(kHF + "stories260K/model.safetensors", f.dir / "model.safetensors", biases);
  const ModelWeights<float> w = load_hf_model<float>(f.path());
  EXPECT_TRUE(w.config.qkv_bias);
  EXPECT_EQ(w.layers[4].bv[31], 0.125f);
  biases.push_back({"model.layers.0.self_attn.o_proj.bias", 64});
  write_with_vectors(kHF + "stories260K/model.safetensors", f.dir / "model.safetensors", biases);
  try {
    load_hf_model<float>(f.path());
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'model.layers.0.self_attn.o_proj.bias'"), std::string::npos) << e.what();
  }
}
