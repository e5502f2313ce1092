// GGUF models end to end: files written by llama.cpp's own converter and
// quantizer (../shared/models/gguf) against reference logits computed outside
// kvdecode (a float64 forward on ggml's own dequantisation; llama.cpp itself for
// qwen2arch), the F32 GGUF against the llama2.c checkpoint of the same weights
// (byte-identical logits), the exactness contract on a real GGUF model of each
// RoPE style, and one test per way a model's metadata or tensors can be wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "kvdecode/io/checkpoint.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "test_util.hpp"

using namespace kvd;
namespace fs = std::filesystem;

namespace {

const std::string kShared = KVDECODE_SHARED_DIR;
const std::string kGGUF = kShared + "/models/gguf/";
const std::string kRef = kShared + "/reference/gguf/";

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

/// Every position's logits for the reference prompt, through one prefill.
RowMatrix<float> prompt_logits(Transformer<float>& model, const std::vector<int>& ids) {
  KVCache<float> cache(model.config(), static_cast<int>(ids.size()));
  return model.prefill(ids, cache, true);
}

// ---- Reference logits -------------------------------------------------------

/// Expects every position's largest |ref - got| within tol * its largest |ref|;
/// returns the largest of those ratios.
double check_near_reference(const std::vector<float>& ref, const RowMatrix<float>& got, std::size_t n, int V, double tol,
                            const std::string& name) {
  double worst = 0;
  for (std::size_t t = 0; t < n; ++t) {
    double max_abs = 0, max_err = 0;
    for (int v = 0; v < V; ++v) {
      max_abs = std::max(max_abs, std::abs(double(ref[t * V + v])));
      max_err = std::max(max_err, std::abs(double(ref[t * V + v]) - got(t, v)));
    }
    EXPECT_LE(max_err, tol * max_abs) << name << " position " << t;
    worst = std::max(worst, max_err / max_abs);
  }
  return worst;
}

// A shared file's model, the reference prompt and the reference logits (ids x V).
struct ReferenceRun {
  Transformer<float> model;
  std::vector<int> ids;
  std::vector<float> ref;
  int V;
};
ReferenceRun load_reference_run(const std::string& name) {
  Transformer<float> model(load_gguf_model<float>(kGGUF + name + ".gguf"));
  const int V = model.config().vocab_size;
  return {std::move(model), read_ids(kRef + "prompt.ids"), read_floats(kRef + name + ".logits"), V};
}

class GGUFReference : public ::testing::TestWithParam<const char*> {};

// Every file's logits within 1e-4 of the largest reference logit, at every position.
TEST_P(GGUFReference, LogitsMatchReference) {
  const std::string name = GetParam();
  SKIP_IF_MISSING(kGGUF + name + ".gguf");
  auto [model, ids, ref, V] = load_reference_run(name);
  ASSERT_EQ(ref.size(), ids.size() * V);
  const RowMatrix<float> got = prompt_logits(model, ids);
  const double worst = check_near_reference(ref, got, ids.size(), V, 1e-4, name);
  std::cout << "  " << name << ": largest error " << worst << " of the largest logit\n";
}

INSTANTIATE_TEST_SUITE_P(SharedFiles, GGUFReference,
                         ::testing::Values("stories260K-F32", "stories260K-F16", "stories260K-BF16", "rand256-F32",
                                           "rand256-F16", "rand256-BF16", "qwen2arch-F32", "stories260K-Q4_K_M",
                                           "stories260K-Q6_K", "rand256-Q8_0", "rand256-Q4_0", "rand256-Q4_1",
                                           "rand256-Q5_0", "rand256-Q5_1", "rand256-Q2_K", "rand256-Q3_K_M",
                                           "rand256-Q4_K_M", "rand256-Q5_K_M", "rand256-Q6_K"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// The F32 GGUF holds the same weights as the llama2.c checkpoint: same logits, bit for bit.
TEST(GGUFModel, F32GGUFEqualsLlama2cCheckpoint) {
  SKIP_IF_MISSING(kGGUF + "stories260K-F32.gguf");
  SKIP_IF_MISSING(kShared + "/models/stories260K.bin");
  Transformer<float> a(load_gguf_model<float>(kGGUF + "stories260K-F32.gguf"));
  Transformer<float> b(load_checkpoint<float>(kShared + "/models/stories260K.bin"));
  const auto ids = read_ids(kRef + "prompt.ids");
  const RowMatrix<float> la = prompt_logits(a, ids), lb = prompt_logits(b, ids);
  ASSERT_EQ(la.rows(), lb.rows());
  for (long t = 0; t < la.rows(); ++t) EXPECT_ROW_BITS_EQ(la.row(t).data(), lb.row(t).data(), la.cols()) << "position " << t;
}

// 16-bit weights stay 16-bit in memory: half the packed bytes of the F32 model.
TEST(GGUFModel, SixteenBitWeightsStaySixteenBit) {
  SKIP_IF_MISSING(kGGUF + "rand256-F16.gguf");
  Transformer<float> f32(load_gguf_model<float>(kGGUF + "rand256-F32.gguf"));
  for (const char* name : {"rand256-F16", "rand256-BF16"}) {
    Transformer<float> m(load_gguf_model<float>(kGGUF + std::string(name) + ".gguf"));
    const auto& qkv = m.blocks()[0].attention().wqkv();
    EXPECT_EQ(qkv.bytes() * 2, f32.blocks()[0].attention().wqkv().bytes()) << name;
    EXPECT_EQ(m.classifier().bytes() * 2, f32.classifier().bytes()) << name;
    EXPECT_LT(m.weight_bytes_per_token(), f32.weight_bytes_per_token() * 6 / 10) << name;
  }
}

// A 16-bit model computes exactly what the f32 model holding the same (widened) weights computes.
TEST(GGUFModel, F16EqualsF32ModelOfTheSameValues) {
  SKIP_IF_MISSING(kGGUF + "rand256-F16.gguf");
  auto w16 = load_gguf_model<float>(kGGUF + "rand256-F16.gguf");
  auto w32 = w16;
  w32.token_embedding = w32.token_embedding.converted_to(WeightType::kF32);
  if (!w32.config.shared_classifier) w32.classifier = w32.classifier.converted_to(WeightType::kF32);
  for (auto& l : w32.layers)
    for (WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) *m = m->converted_to(WeightType::kF32);
  Transformer<float> a(std::move(w16)), b(std::move(w32));
  const auto ids = read_ids(kRef + "prompt.ids");
  const RowMatrix<float> la = prompt_logits(a, ids), lb = prompt_logits(b, ids);
  for (long t = 0; t < la.rows(); ++t) EXPECT_ROW_BITS_EQ(la.row(t).data(), lb.row(t).data(), la.cols()) << "position " << t;
}

// The metadata becomes the config the file describes.
TEST(GGUFModel, ConfigFromMetadata) {
  SKIP_IF_MISSING(kGGUF + "qwen2arch-F32.gguf");
  const GGUFModelInfo s = gguf_model_info(GGUFFile::open(kGGUF + "stories260K-F32.gguf"));
  EXPECT_EQ(s.architecture, "llama");
  EXPECT_EQ(s.config.d_model, 64);
  EXPECT_EQ(s.config.n_layers, 5);
  EXPECT_EQ(s.config.n_heads, 8);
  EXPECT_EQ(s.config.n_kv_heads, 4);
  EXPECT_EQ(s.config.vocab_size, 512);
  EXPECT_EQ(s.config.hidden_dim, 172);
  EXPECT_EQ(s.config.rope_style, RopeStyle::kAdjacent);
  const GGUFModelInfo q = gguf_model_info(GGUFFile::open(kGGUF + "qwen2arch-F32.gguf"));
  EXPECT_EQ(q.architecture, "qwen2");
  EXPECT_EQ(q.config.rope_style, RopeStyle::kHalves);
  EXPECT_TRUE(q.config.qkv_bias);
  EXPECT_EQ(q.config.d_model, 128);
  const GGUFModelInfo r = gguf_model_info(GGUFFile::open(kGGUF + "rand256-F16.gguf"));
  EXPECT_FALSE(r.config.shared_classifier);
  EXPECT_EQ(r.weight_bytes, r.bytes_by_type.size() == 2 ? r.bytes_by_type[0].second + r.bytes_by_type[1].second : 0);
  // max_seq_len caps the file's context
  GGUFLoadOptions o;
  o.max_seq_len = 16;
  EXPECT_EQ(gguf_model_info(GGUFFile::open(kGGUF + "rand256-F16.gguf"), o).config.max_seq_len, 16);
}

// ---- The exactness contract on real GGUF models -------------------------------

class GGUFExactness : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

// tests/data/ik: ik_llama.cpp's llama-quantize's copies of rand256-F32 in the table
// types, with ik's logits and dequantized-float hashes (tools/ik_reference.cpp).
const std::string kIkData = std::string(KVDECODE_TEST_DATA_DIR) + "/ik/";

/// A shared file's name ("rand256-Q4_0") or "ik/<name>" for tests/data/ik -> its path.
std::string gguf_path(const std::string& name) {
  return name.rfind("ik/", 0) == 0 ? kIkData + name.substr(3) + ".gguf" : kGGUF + name + ".gguf";
}

// reference == prefill == prefill + decode == chunked == batched == paged, bit for
// bit, with `threads` threads, in the default mode or the fast mode (fast_int8.hpp).
void check_every_path(const std::string& name, int threads, bool fast) {
  const int saved = num_threads();
  set_num_threads(threads);
  GGUFLoadOptions o;
  o.max_seq_len = 40;
  Transformer<float> model(load_gguf_model<float>(gguf_path(name), o));
  model.set_fast_matmul(fast);
  const ModelConfig& c = model.config();
  const auto ids = read_ids(kRef + "prompt.ids");
  const int n = static_cast<int>(ids.size()), V = c.vocab_size;
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
      std::vector<int> toks;
      for (auto* p : ptrs) toks.push_back(ids[p->length()]);
      std::vector<int> pos;
      for (auto* p : ptrs) pos.push_back(p->length());
      const RowMatrix<float> rows = model.decode_batch(toks, ptrs);
      for (int b = 0; b < 3; ++b) EXPECT_ROW_BITS_EQ(rows.row(b).data(), ref.row(pos[b]).data(), V) << "batch row " << b;
    }
  }
  {  // a paged cache
    BlockPool<float> pool(c, 8);
    PagedSequence<float> seq(pool);
    model.prefill(std::vector<int>(ids.begin(), ids.begin() + 10), seq);
    for (int t = 10; t < n; ++t) {
      auto row = model.decode_step(ids[t], seq);
      ASSERT_TRUE(kvd_test::same_bits(row.row(0).data(), ref.row(t).data(), V)) << "paged decode at " << t;
    }
  }
  set_num_threads(saved);
}

TEST_P(GGUFExactness, EveryPathIdentical) {
  const std::string name = std::get<0>(GetParam());
  SKIP_IF_MISSING(gguf_path(name));
  SKIP_IF_MISSING(kRef + "prompt.ids");  // tests/data/ik's files are in the repository; the prompt is in ../shared
  check_every_path(name, std::get<1>(GetParam()), false);
}

INSTANTIATE_TEST_SUITE_P(RopeStyles, GGUFExactness,
                         ::testing::Combine(::testing::Values("stories260K-F16", "rand256-BF16", "qwen2arch-F32",
                                                              "stories260K-Q4_K_M", "rand256-Q2_K", "rand256-Q4_K_M",
                                                              "rand256-Q5_1"),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param);
                           for (auto& ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s + "_threads" + std::to_string(std::get<1>(info.param));
                         });

// ---- The fast mode (int8-rounded activations) on real GGUF models ---------------

class GGUFFastExactness : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

// The same contract in the fast mode: every path bit-identical to every other.
TEST_P(GGUFFastExactness, EveryPathIdentical) {
  const std::string name = std::get<0>(GetParam());
  SKIP_IF_MISSING(gguf_path(name));
  SKIP_IF_MISSING(kRef + "prompt.ids");  // tests/data/ik's files are in the repository; the prompt is in ../shared
  check_every_path(name, std::get<1>(GetParam()), true);
}

INSTANTIATE_TEST_SUITE_P(FastMode, GGUFFastExactness,
                         ::testing::Combine(::testing::Values("rand256-Q4_K_M", "rand256-Q4_0", "rand256-Q4_1", "rand256-Q6_K",
                                                              "rand256-Q5_0", "rand256-Q5_1", "rand256-Q5_K_M",
                                                              "rand256-Q3_K_M", "rand256-Q2_K", "rand256-Q8_0", "rand256-F16",
                                                              "rand256-BF16", "stories260K-F16", "stories260K-BF16"),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param);
                           for (auto& ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s + "_threads" + std::to_string(std::get<1>(info.param));
                         });

// The table types (ik_llama.cpp's files in tests/data/ik), in the default and the
// fast mode (where their levels meet the int8 activations).
std::string file_and_threads(const ::testing::TestParamInfo<std::tuple<const char*, int>>& info) {
  std::string s = std::get<0>(info.param);
  for (auto& ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s + "_threads" + std::to_string(std::get<1>(info.param));
}
INSTANTIATE_TEST_SUITE_P(TableTypes, GGUFExactness,
                         ::testing::Combine(::testing::Values("ik/rand256-IQ4_NL", "ik/rand256-IQ4_XS", "ik/rand256-MXFP4"),
                                            ::testing::Values(1, 2)),
                         file_and_threads);
INSTANTIATE_TEST_SUITE_P(TableTypes, GGUFFastExactness,
                         ::testing::Combine(::testing::Values("ik/rand256-IQ4_NL", "ik/rand256-IQ4_XS", "ik/rand256-MXFP4"),
                                            ::testing::Values(1, 2)),
                         file_and_threads);

class GGUFFastReference : public ::testing::TestWithParam<const char*> {};

// The fast mode's logits against the float64 forward on the dequantized weights:
// it changes them (the matrices of every block type round their inputs,
// f16 and bf16 ones too where the CPU has AVX512-BF16),
// by at most 3% of the largest logit at any position (llama.cpp's own rounding:
// 1.2-1.8%). A model without such matrices is unchanged, bit for bit.
TEST_P(GGUFFastReference, LogitsNearReference) {
  const std::string name = GetParam();
  SKIP_IF_MISSING(kGGUF + name + ".gguf");
  auto [model, ids, ref, V] = load_reference_run(name);
  ASSERT_EQ(ref.size(), ids.size() * V);
  const RowMatrix<float> exact = prompt_logits(model, ids);
  model.set_fast_matmul(true);
  const RowMatrix<float> fast = prompt_logits(model, ids);
  bool any_fast = false;
  for (const auto& b : model.blocks())
    for (const auto* m : {&b.attention().wqkv(), &b.attention().wo(), &b.mlp().w13(), &b.mlp().w2()})
      for (const auto& seg : m->segments()) any_fast = any_fast || detail::fast_segment(*m, seg);
  const double worst = check_near_reference(ref, fast, ids.size(), V, 0.03, name);
  double mean_kl = 0;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    // KL(reference || fast) of the next-token distributions
    double mr = -1e300, mf = -1e300, zr = 0, zf = 0, kl = 0;
    for (int v = 0; v < V; ++v) mr = std::max(mr, double(ref[t * V + v])), mf = std::max(mf, double(fast(t, v)));
    for (int v = 0; v < V; ++v) zr += std::exp(ref[t * V + v] - mr), zf += std::exp(fast(t, v) - mf);
    for (int v = 0; v < V; ++v) {
      const double lr = ref[t * V + v] - mr - std::log(zr), lf = fast(t, v) - mf - std::log(zf);
      kl += std::exp(lr) * (lr - lf);
    }
    mean_kl += kl / ids.size();
  }
  if (any_fast)
    EXPECT_FALSE(kvd_test::same_bits(fast.data(), exact.data(), fast.size())) << "fast mode changed nothing";
  else
    EXPECT_TRUE(kvd_test::same_bits(fast.data(), exact.data(), fast.size())) << "no matrix of a fast-mode type, yet the logits changed";
  std::cout << "  " << name << " fast mode: largest error " << worst << " of the largest logit, mean KL " << mean_kl
            << "\n";
}

INSTANTIATE_TEST_SUITE_P(SharedFiles, GGUFFastReference,
                         ::testing::Values("stories260K-Q4_K_M", "rand256-Q4_0", "rand256-Q4_1", "rand256-Q4_K_M",
                                           "rand256-Q6_K", "rand256-Q5_0", "rand256-Q5_1", "rand256-Q5_K_M",
                                           "rand256-Q3_K_M", "rand256-Q2_K", "rand256-Q8_0", "rand256-F16",
                                           "rand256-BF16", "stories260K-F16", "stories260K-BF16"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// ---- Bad models: metadata and tensors that do not describe a runnable model ----

/// A small valid llama GGUF written by our own writer (random weights), with hooks
/// to break one thing.
struct TinyGGUF {
  std::string arch = "llama";
  int d = 32, layers = 1, heads = 4, kv_heads = 2, ff = 48, vocab = 40, ctx = 16;
  GGUFWriter w;
  void build() {
    const std::string a = arch + ".";
    w.set_string("general.architecture", arch);
    w.set_u32(a + "context_length", ctx);
    w.set_u32(a + "embedding_length", d);
    w.set_u32(a + "block_count", layers);
    w.set_u32(a + "feed_forward_length", ff);
    w.set_u32(a + "attention.head_count", heads);
    w.set_u32(a + "attention.head_count_kv", kv_heads);
    w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
    const int dh = d / heads;
    auto t = [&](const std::string& name, std::uint64_t cols, std::uint64_t rows) {
      std::vector<float> v(cols * (rows ? rows : 1), 0.01f);
      w.add_tensor(name, WeightType::kF32, rows ? std::vector<std::uint64_t>{cols, rows} : std::vector<std::uint64_t>{cols},
                   v.data(), v.size() * 4);
    };
    t("token_embd.weight", d, vocab);
    t("output_norm.weight", d, 0);
    for (int l = 0; l < layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      t(p + "attn_norm.weight", d, 0);
      t(p + "attn_q.weight", d, heads * dh);
      t(p + "attn_k.weight", d, kv_heads * dh);
      t(p + "attn_v.weight", d, kv_heads * dh);
      t(p + "attn_output.weight", heads * dh, d);
      t(p + "ffn_norm.weight", d, 0);
      t(p + "ffn_gate.weight", d, ff);
      t(p + "ffn_down.weight", ff, d);
      if (!skip_up) t(p + "ffn_up.weight", d, ff);
    }
  }
  bool skip_up = false;
  std::string error() {
    try {
      Transformer<float> m(load_gguf_weights<float>(std::make_shared<const detail::GGUFOwner>(
          GGUFFile::from_bytes(w.bytes(), "tiny.gguf"))));
    } catch (const FormatError& e) {
      return e.what();
    } catch (const ConfigError& e) {
      return std::string("ConfigError: ") + e.what();
    }
    return "";
  }
};

TEST(GGUFModelBadInput, ValidTinyModelLoads) {
  TinyGGUF g;
  g.build();
  EXPECT_EQ(g.error(), "");
}

TEST(GGUFModelBadInput, UnknownArchitectureNamed) {
  TinyGGUF g;
  g.arch = "mamba";
  g.build();
  const std::string e = g.error();
  EXPECT_NE(e.find("'mamba'"), std::string::npos) << e;
  EXPECT_NE(e.find("not supported"), std::string::npos) << e;
}

TEST(GGUFModelBadInput, MissingTensorNamed) {
  TinyGGUF g;
  g.skip_up = true;
  g.build();
  const std::string e = g.error();
  EXPECT_NE(e.find("blk.0.ffn_up.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
}

TEST(GGUFModelBadInput, TensorShapeMismatchNamed) {
  TinyGGUF g;
  g.build();
  std::vector<float> v(32 * 9, 0.f);
  g.w.add_tensor("output.weight", WeightType::kF32, {32, 9}, v.data(), v.size() * 4);  // vocab is 40
  const std::string e = g.error();
  EXPECT_NE(e.find("'output.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("[32,9]"), std::string::npos) << e;
  EXPECT_NE(e.find("expected [32,40]"), std::string::npos) << e;
}

TEST(GGUFModelBadInput, MissingKeyNamed) {
  TinyGGUF g;
  g.build();
  GGUFWriter w2;  // the same file without feed_forward_length
  const GGUFFile parsed = GGUFFile::from_bytes(g.w.bytes(), "x");
  for (const auto& kv : parsed.metadata())
    if (kv.first != "llama.feed_forward_length") w2.set(kv.first, kv.second);
  std::swap(g.w, w2);
  const std::string e = g.error();
  EXPECT_NE(e.find("llama.feed_forward_length"), std::string::npos) << e;
}

TEST(GGUFModelBadInput, ZeroOrHugeDimensionNamed) {
  for (std::uint32_t bad : {0u, 1u << 21}) {
    TinyGGUF g;
    g.build();
    g.w.set_u32("llama.block_count", bad);
    const std::string e = g.error();
    EXPECT_NE(e.find("llama.block_count"), std::string::npos) << e;
    EXPECT_NE(e.find(std::to_string(bad)), std::string::npos) << e;
  }
}

TEST(GGUFModelBadInput, HeadsNotDividingKvHeads) {
  TinyGGUF g;
  g.kv_heads = 3;
  g.build();
  const std::string e = g.error();
  EXPECT_NE(e.find("n_kv_heads = 3"), std::string::npos) << e;
}

TEST(GGUFModelBadInput, UnsupportedTensorTypeNamed) {
  TinyGGUF g;
  g.d = 256;
  g.heads = 8;
  g.build();
  std::vector<unsigned char> iq(40 * 66, 0);
  g.w.add_tensor("output.weight", WeightType::kIQ2_XXS, {256, 40}, iq.data(), iq.size());
  const std::string e = g.error();
  EXPECT_NE(e.find("'output.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("iq2_xxs"), std::string::npos) << e;
}

TEST(GGUFModelBadInput, UnsupportedRopeScalingNamed) {
  TinyGGUF g;
  g.build();
  g.w.set_string("llama.rope.scaling.type", "yarn");
  const std::string e = g.error();
  EXPECT_NE(e.find("'yarn'"), std::string::npos) << e;
}

TEST(GGUFModelBadInput, ContextBeyondLimitAsksForSmallerContext) {
  TinyGGUF g;
  g.ctx = 1 << 22;
  g.build();
  const std::string e = g.error();
  EXPECT_NE(e.find("context_length"), std::string::npos) << e;
  EXPECT_NE(e.find(std::to_string(1 << 22)), std::string::npos) << e;
}

// ---- Issue 33: every tensor accounted for -------------------------------------

/// Loads g's bytes with `options`; "" or the FormatError's message.
std::string load_error(TinyGGUF& g, const GGUFLoadOptions& options, ModelWeights<float>* out = nullptr) {
  try {
    ModelWeights<float> w =
        load_gguf_weights<float>(std::make_shared<const detail::GGUFOwner>(GGUFFile::from_bytes(g.w.bytes(), "tiny.gguf")),
                                 options);
    if (out) *out = std::move(w);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

void add_vector(GGUFWriter& w, const std::string& name, std::uint64_t n, float value) {
  std::vector<float> v(n, value);
  w.add_tensor(name, WeightType::kF32, {n}, v.data(), v.size() * 4);
}

TEST(GGUFModelUnusedTensors, UnknownTensorRefusedByNameUnlessAllowed) {
  TinyGGUF g;
  g.build();
  add_vector(g.w, "blk.0.mystery.weight", 32, 1.0f);
  const std::string e = load_error(g, {});
  EXPECT_NE(e.find("tensor 'blk.0.mystery.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("1 of the file's"), std::string::npos) << e;
  EXPECT_NE(e.find("the limit is 0"), std::string::npos) << e;
  EXPECT_NE(e.find("--allow-unused-tensors"), std::string::npos) << e;
  GGUFLoadOptions allow;
  std::vector<std::string> unused;
  allow.allow_unused_tensors = true;
  allow.unused_tensors = &unused;
  EXPECT_EQ(load_error(g, allow), "");
  EXPECT_EQ(unused, std::vector<std::string>{"blk.0.mystery.weight"});
}

TEST(GGUFModelUnusedTensors, LayerBeyondBlockCountIsRefused) {
  TinyGGUF g;
  g.layers = 2;
  g.build();
  g.w.set_u32("llama.block_count", 1);  // one targeted change: the weights hold two layers
  const std::string e = load_error(g, {});
  EXPECT_NE(e.find("tensor 'blk.1.attn_norm.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("1 layers (block_count)"), std::string::npos) << e;
}

TEST(GGUFModelUnusedTensors, LlamaQkvBiasesAreAppliedAndAnOutputBiasRefused) {
  TinyGGUF g;
  g.build();
  add_vector(g.w, "blk.0.attn_q.bias", 32, 0.25f);
  add_vector(g.w, "blk.0.attn_k.bias", 16, 0.5f);
  add_vector(g.w, "blk.0.attn_v.bias", 16, 0.75f);
  ModelWeights<float> w;
  ASSERT_EQ(load_error(g, {}, &w), "");
  EXPECT_TRUE(w.config.qkv_bias);
  ASSERT_EQ(w.layers[0].bq.size(), 32);
  EXPECT_EQ(w.layers[0].bq[0], 0.25f);
  EXPECT_EQ(w.layers[0].bk[15], 0.5f);
  EXPECT_EQ(w.layers[0].bv[3], 0.75f);
  // kvdecode has no attention output bias: refused, never ignored.
  add_vector(g.w, "blk.0.attn_output.bias", 32, 1.0f);
  const std::string e = load_error(g, {});
  EXPECT_NE(e.find("tensor 'blk.0.attn_output.bias'"), std::string::npos) << e;
}

TEST(GGUFModelUnusedTensors, VocabularyShorterThanTheEmbeddingIsRefused) {
  TinyGGUF g;
  g.build();
  std::vector<std::string> tokens;
  for (int i = 0; i < 39; ++i) tokens.push_back("t" + std::to_string(i));  // the embedding has 40 rows
  g.w.set_string_array("tokenizer.ggml.tokens", tokens);
  const std::string e = load_error(g, {});
  EXPECT_NE(e.find("tokenizer.ggml.tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("holds 39 tokens, fewer than token_embd.weight's 40 rows"), std::string::npos) << e;
  tokens.push_back("t39");
  g.w.set_string_array("tokenizer.ggml.tokens", tokens);
  EXPECT_EQ(load_error(g, {}), "");
}

// ---- The table types against ik_llama.cpp -----------------------------------------
// ik_llama.cpp (August 2026) quantized rand256-F32 to iq4_nl, iq4_xs and mxfp4
// (tests/data/ik/rand256-<T>.gguf), wrote each back as F32 with its own
// dequantization, and computed that F32 copy's logits of the reference prompt with
// an f16 K/V cache (without flash attention it takes no other V cache): ik's
// forward pass on exactly these weights, without the int8 rounding of activations
// its quantized kernels do. kvdecode on the quantized file with the same cache
// dtype stays within 1e-4 of the largest of those logits at every position, and so
// does its float32 forward against its float64 forward (the tighter oracle).

class GGUFIkReference : public ::testing::TestWithParam<const char*> {};

TEST_P(GGUFIkReference, LogitsMatchIkLlamaAndTheFloat64Forward) {
  const std::string name = GetParam(), path = kIkData + name + ".gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "test data not found: " << path;
  SKIP_IF_MISSING(kRef + "prompt.ids");
  const auto ids = read_ids(kRef + "prompt.ids");
  Transformer<float> model(load_gguf_model<float>(path));
  const int V = model.config().vocab_size;
  const std::vector<float> ik = read_floats(kIkData + name + ".logits");
  ASSERT_EQ(ik.size(), ids.size() * V);
  KVCache<float, Eigen::half> cache(model.config(), static_cast<int>(ids.size()));
  const RowMatrix<float> f16_cache = model.prefill(ids, cache, true);
  const double worst_ik = check_near_reference(ik, f16_cache, ids.size(), V, 1e-4, name + " vs ik_llama.cpp");
  Transformer<double> exact(load_gguf_model<double>(path));
  KVCache<double> cache64(exact.config(), static_cast<int>(ids.size()));
  const RowMatrix<double> f64 = exact.prefill(ids, cache64, true);
  std::vector<float> f64_floats(f64.size());
  for (long t = 0; t < f64.rows(); ++t)
    for (long v = 0; v < V; ++v) f64_floats[static_cast<std::size_t>(t * V + v)] = static_cast<float>(f64(t, v));
  const double worst_f64 = check_near_reference(f64_floats, prompt_logits(model, ids), ids.size(), V, 1e-4,
                                                name + " vs float64");
  std::cout << "  " << name << ": largest error " << worst_ik << " of the largest logit against ik_llama.cpp (f16 cache), "
            << worst_f64 << " against the float64 forward (f32 cache)\n";
}

INSTANTIATE_TEST_SUITE_P(TableTypes, GGUFIkReference, ::testing::Values("rand256-IQ4_NL", "rand256-IQ4_XS", "rand256-MXFP4"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// ---- Blocks of the table types a load refuses -------------------------------------
// The tiny model with an output.weight of type t (rows quantized from a valid
// pattern), one block spoiled: the load names the tensor, the row, the block and
// the limit (tests/fuzz/corpus/gguf holds one seed of each).

std::string table_type_error(WeightType t, const std::function<void(unsigned char* block)>& spoil, long row, long block) {
  TinyGGUF g;
  g.d = t == WeightType::kIQ4_XS ? 256 : 32;
  g.heads = g.d / 8;
  g.kv_heads = g.heads / 2;
  g.build();
  const std::size_t rb = weight_row_bytes(t, static_cast<std::uint64_t>(g.d));
  std::vector<unsigned char> q(rb * static_cast<std::size_t>(g.vocab));
  std::vector<float> x(static_cast<std::size_t>(g.d));
  for (int r = 0; r < g.vocab; ++r) {
    for (int k = 0; k < g.d; ++k) x[static_cast<std::size_t>(k)] = 0.01f * static_cast<float>((r * 31 + k * 7) % 23 - 11);
    detail::quantize_row(t, x.data(), q.data() + static_cast<std::size_t>(r) * rb, g.d);
  }
  if (spoil) spoil(q.data() + static_cast<std::size_t>(row) * rb + static_cast<std::size_t>(block) * weight_type_traits(t).block_bytes);
  g.w.add_tensor("output.weight", t, {static_cast<std::uint64_t>(g.d), static_cast<std::uint64_t>(g.vocab)}, q.data(), q.size());
  return g.error();
}

TEST(GGUFModelTableTypes, ValidBlocksOfEachTypeLoad) {
  for (WeightType t : {WeightType::kIQ4_NL, WeightType::kIQ4_XS, WeightType::kMXFP4})
    EXPECT_EQ(table_type_error(t, {}, 0, 0), "") << weight_type_name(t);
}

TEST(GGUFModelTableTypes, IQ4_NLInfiniteScaleIsNamed) {
  const std::string e = table_type_error(WeightType::kIQ4_NL, [](unsigned char* b) { b[0] = 0x00, b[1] = 0x7C; }, 3, 0);
  EXPECT_NE(e.find("tensor 'output.weight' (iq4_nl): row 3 block 0"), std::string::npos) << e;
  EXPECT_NE(e.find("0x7c00 is infinite"), std::string::npos) << e;
  EXPECT_NE(e.find("|d| <= 65504"), std::string::npos) << e;
}

TEST(GGUFModelTableTypes, IQ4_XSNanScaleIsNamed) {
  const std::string e = table_type_error(WeightType::kIQ4_XS, [](unsigned char* b) { b[0] = 0x01, b[1] = 0xFE; }, 39, 0);
  EXPECT_NE(e.find("tensor 'output.weight' (iq4_xs): row 39 block 0"), std::string::npos) << e;
  EXPECT_NE(e.find("0xfe01 is NaN"), std::string::npos) << e;
  EXPECT_NE(e.find("|d| <= 65504"), std::string::npos) << e;
}

TEST(GGUFModelTableTypes, MXFP4NanScaleIsNamed) {
  const std::string e = table_type_error(WeightType::kMXFP4, [](unsigned char* b) { b[0] = 0xFF; }, 7, 0);
  EXPECT_NE(e.find("tensor 'output.weight' (mxfp4): row 7 block 0"), std::string::npos) << e;
  EXPECT_NE(e.find("0xff, which OCP MX defines as NaN (the limit is 0xfe)"), std::string::npos) << e;
}

TEST(GGUFModelTableTypes, MXFP4ScaleThatOverflowsIsNamed) {
  // e8m0 0xfe is 2^127: level 12 (e2m1 6) times 2^126 is beyond float's range.
  const std::string e = table_type_error(WeightType::kMXFP4, [](unsigned char* b) { b[0] = 0xFE, b[1] = 0x07; }, 12, 0);
  EXPECT_NE(e.find("tensor 'output.weight' (mxfp4): row 12 block 0"), std::string::npos) << e;
  EXPECT_NE(e.find("0xfe times its largest level 12 / 2 overflows float (the limit is 2^128)"), std::string::npos) << e;
  // The same scale with levels up to 3 (1.5 x 2^127) is a finite block, and loads.
  EXPECT_EQ(table_type_error(WeightType::kMXFP4, [](unsigned char* b) {
              b[0] = 0xFE;
              for (int j = 1; j < 17; ++j) b[j] = 0x33;
            }, 12, 0), "");
}

TEST(GGUFModelTableTypes, OtherIqTypesStayRefusedByName) {
  for (WeightType t : {WeightType::kIQ2_XXS, WeightType::kIQ2_XS, WeightType::kIQ3_XXS, WeightType::kIQ1_S,
                       WeightType::kIQ3_S, WeightType::kIQ2_S, WeightType::kIQ1_M}) {
    TinyGGUF g;
    g.d = 256;
    g.heads = 8;
    g.build();
    std::vector<unsigned char> q(weight_row_bytes(t, 256) * 40, 0);
    g.w.add_tensor("output.weight", t, {256, 40}, q.data(), q.size());
    const std::string e = g.error();
    EXPECT_NE(e.find("'output.weight' has type " + weight_type_name(t) + ", which kvdecode does not support"),
              std::string::npos) << e;
  }
}

}  // namespace
