// The exactness contract, as tests. For every position t these logits are
// bit-identical (compared with memcmp, never a tolerance):
//   forward_reference(tokens[0..t]) at t, prefill(tokens[0..t]),
//   prefill(tokens[0..k]) + decode steps up to t (every k), any chunking of the
//   prompt, batched decode, and 1 or 2 threads.
// Plus an independent double-precision oracle, so that "identical" never means
// "identically wrong".
#include <gtest/gtest.h>

#include <random>

#include "test_util.hpp"

using namespace kvd;
using kvd_test::make_tokens;

namespace {

using Shape = kvd_test::NamedConfig;

std::vector<Shape> shapes() {
  using kvd_test::small_config;
  using kvd_test::windowed;
  return {
      // name, H, Hk, Dh, D, L, F, V, S
      {"MHA_D40_Dh10_L2", small_config(4, 4, 10, 40, 2, 72, 97, 40)},
      {"GQA_D40_Dh10_L3", small_config(4, 2, 10, 40, 3, 56, 61, 40)},
      {"MQA_D40_Dh8_L2", small_config(5, 1, 8, 40, 2, 300, 50, 40)},   // F > 256 exercises k-blocking
      {"OneLayer_GQA_Dh8", small_config(6, 3, 8, 40, 1, 64, 33, 24)},
      {"GQA_D64_Dh16_S70", small_config(8, 2, 16, 64, 2, 96, 130, 70)},  // several 16-position blocks
      // head_dim 48 and 80: the prefill weighted sum's passes of 4 and 2 vectors of 16
      // dims end in a pass of 3 and of 1
      {"GQA_Dh48_S70", small_config(4, 2, 48, 192, 1, 64, 50, 70)},
      {"MQA_Dh80_S40", small_config(2, 1, 80, 160, 1, 64, 50, 40)},
      {"Window7_GQA_D40_S40", windowed(small_config(4, 2, 10, 40, 2, 48, 45, 40), 7)},
      // a window narrower than the 4-row prefill groups of the attention kernel, odd head count
      {"Window2_MHA_H3_Dh16_S36", windowed(small_config(3, 3, 16, 40, 2, 40, 30, 36), 2)},
      // The architectures GGUF and Hugging Face models bring: qwen2 (biases, RoPE on
      // halves), qwen3 (q/k norms, head_dim * n_heads != d_model), partial rotary
      // dims with Llama 3.1 frequency factors, and 16-bit weight storage.
      {"Qwen2_Bias_Halves_GQA", kvd_test::qwen2_like(small_config(4, 2, 10, 40, 2, 56, 61, 40))},
      {"Qwen3_QKNorm_Dh16_D40", kvd_test::qwen3_like(small_config(4, 2, 16, 40, 2, 56, 61, 36))},
      {"PartialRope_Factors", [] { auto c = small_config(4, 2, 10, 40, 2, 56, 61, 34); c.rope_dim = 6; return c; }(),
       WeightType::kF32, false, true},
      {"F16_GQA_D64_S70", small_config(8, 2, 16, 64, 2, 96, 130, 70), WeightType::kF16},
      {"BF16_Qwen2_Window5", windowed(kvd_test::qwen2_like(small_config(4, 2, 10, 40, 2, 300, 45, 40)), 5), WeightType::kBF16},
      // Mixtures of experts (model/moe.hpp): qwen3moe's routing (softmax, top-k,
      // normalised) and gpt-oss's (top-k, then softmax), the latter in f16.
      {"Qwen3Moe_E8_K2", kvd_test::qwen3moe_like(small_config(4, 2, 16, 40, 2, 24, 61, 36), 8, 2)},
      {"Moe_E5_K3_TopKSoftmax_F16", [] {
         auto c = kvd_test::qwen3moe_like(small_config(4, 2, 10, 40, 2, 40, 45, 33), 5, 3);
         c.router_order = RouterOrder::kTopKSoftmax;
         c.norm_topk_prob = false;
         return c;
       }(), WeightType::kF16},
      // Gemma 3 (gemma3): layers local, global, local (pattern 2) with a window of 5
      // and their own RoPE bases, linear RoPE scaling 4 on the global one, post norms,
      // scaled embeddings, GeGLU and scores over sqrt(24) with head_dim 16.
      {"Gemma3_LocalGlobalLocal_Window5", [] {
         auto c = kvd_test::gemma3_like(small_config(4, 2, 16, 40, 3, 48, 61, 36), 2, 5, 4.0, 24);
         c.rope_theta = 1e6;
         return c;
       }()},
      // gpt-oss: layers local, full, local, full (window 5) with sinks, q/k/v/o biases,
      // YaRN (factor 8, trained context 32) on every layer, 6 experts, 3 per token
      // (top-k, then softmax) with biased router and experts and the clamped SwiGLU.
      {"GptOss_E6_K3_Window5", [] {
         auto c = small_config(4, 2, 16, 40, 4, 24, 61, 36);
         c.rope_theta = 150000.0;
         c.shared_classifier = false;
         return kvd_test::gpt_oss_like(c, 6, 3, 5, 8.0, 32);
       }()},
      {"MixedStorage_Untied", [] { auto c = small_config(4, 2, 10, 40, 2, 72, 50, 33); c.shared_classifier = false; return c; }(),
       WeightType::kF32, true},
  };
}

struct Param {
  Shape shape;
  int threads;
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(info.param.shape.name) + "_threads" + std::to_string(info.param.threads);
}

class ExactEquivalence : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    saved_threads_ = num_threads();
    set_num_threads(GetParam().threads);
  }
  void TearDown() override { set_num_threads(saved_threads_); }
  const Shape& shape() const { return GetParam().shape; }
  int saved_threads_ = 1;
};

// forward_reference(tokens[0..t]) at t equals row t of the reference over the whole sequence,
// and prefill of the whole prompt with all logits equals the reference row by row.
template <class T>
void check_prefill_matches_reference(const Shape& s) {
  const ModelConfig& c = s.config;
  Transformer<T> model(kvd_test::make_weights<T>(s, 11));
  const int n = c.max_seq_len, V = c.vocab_size;
  const auto tokens = make_tokens(n, V);
  const RowMatrix<T> ref = model.forward_reference(tokens);
  for (int t = 1; t <= n; ++t) {
    const RowMatrix<T> prefix = model.forward_reference(std::vector<int>(tokens.begin(), tokens.begin() + t));
    EXPECT_ROW_BITS_EQ(prefix.row(t - 1).data(), ref.row(t - 1).data(), V) << "reference prefix t=" << t;
  }
  KVCache<T> cache(c);
  const RowMatrix<T> all = model.prefill(tokens, cache, true);
  ASSERT_EQ(all.rows(), n);
  for (int t = 0; t < n; ++t) EXPECT_ROW_BITS_EQ(all.row(t).data(), ref.row(t).data(), V) << "prefill row " << t;
  EXPECT_EQ(cache.length(), n);
}

// prefill(tokens[0..t]) alone, for every prompt length t from 1 to max_seq_len.
template <class T>
void check_prefill_every_length(const Shape& s) {
  const ModelConfig& c = s.config;
  Transformer<T> model(kvd_test::make_weights<T>(s, 12));
  const int n = c.max_seq_len, V = c.vocab_size;
  const auto tokens = make_tokens(n, V, 3);
  const RowMatrix<T> ref = model.forward_reference(tokens);
  for (int t = 1; t <= n; ++t) {
    KVCache<T> cache(c);
    auto last = model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + t), cache);
    ASSERT_EQ(last.rows(), 1);
    EXPECT_ROW_BITS_EQ(last.row(0).data(), ref.row(t - 1).data(), V) << "prompt length " << t;
  }
}

// prefill(tokens[0..k]) then decode steps to the end, for every k.
template <class T>
void check_prefill_then_decode(const Shape& s) {
  const ModelConfig& c = s.config;
  Transformer<T> model(kvd_test::make_weights<T>(s, 13));
  const int n = c.max_seq_len, V = c.vocab_size;
  const auto tokens = make_tokens(n, V, 5);
  const RowMatrix<T> ref = model.forward_reference(tokens);
  for (int k = 1; k <= n; ++k) {
    KVCache<T> cache(c);
    auto first = model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + k), cache);
    ASSERT_TRUE(kvd_test::same_bits(first.row(0).data(), ref.row(k - 1).data(), V)) << "k=" << k;
    for (int t = k; t < n; ++t) {
      auto row = model.decode_step(tokens[t], cache);
      ASSERT_TRUE(kvd_test::same_bits(row.row(0).data(), ref.row(t).data(), V))
          << "prefill " << k << " then decode to position " << t << ": "
          << kvd_test::first_difference(row.row(0).data(), ref.row(t).data(), V);
    }
    EXPECT_EQ(cache.length(), n);
  }
}

// Random splits of the prompt into prefill chunks, each returning all its logits.
template <class T>
void check_chunked_prefill(const Shape& s) {
  const ModelConfig& c = s.config;
  Transformer<T> model(kvd_test::make_weights<T>(s, 14));
  const int n = c.max_seq_len, V = c.vocab_size;
  const auto tokens = make_tokens(n, V, 9);
  const RowMatrix<T> ref = model.forward_reference(tokens);
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 12; ++trial) {
    KVCache<T> cache(c);
    int pos = 0;
    while (pos < n) {
      const int len = std::min(n - pos, 1 + static_cast<int>(rng() % (trial % 3 == 0 ? 3 : 17)));
      auto rows = model.prefill(std::vector<int>(tokens.begin() + pos, tokens.begin() + pos + len), cache, true);
      ASSERT_EQ(rows.rows(), len);
      for (int i = 0; i < len; ++i)
        ASSERT_TRUE(kvd_test::same_bits(rows.row(i).data(), ref.row(pos + i).data(), V))
            << "trial " << trial << " chunk at " << pos << " row " << i;
      pos += len;
    }
  }
}

// generate() with and without the cache: same tokens, same logits at every position.
template <class T>
void check_generate_same(const Shape& s) {
  const ModelConfig& c = s.config;
  Transformer<T> model(kvd_test::make_weights<T>(s, 15));
  const int V = c.vocab_size;
  const auto prompt = make_tokens(3, V, 4);
  GenerateOptions opt;
  opt.max_new_tokens = c.max_seq_len;  // runs into the context limit
  std::vector<std::vector<T>> with, without;
  auto record = [](std::vector<std::vector<T>>& into) {
    return [&into](int, const T* l, int n) { into.emplace_back(l, l + n); };
  };
  KVCache<T> cache(c);
  GenerateHooks<T> hooks;
  hooks.all_prompt_logits = true;
  hooks.on_logits = record(with);
  auto a = generate(model, prompt, cache, opt, hooks);
  opt.use_cache = false;
  hooks.on_logits = record(without);
  auto b = generate(model, prompt, cache, opt, hooks);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.stop, StopReason::kContextFull);
  EXPECT_EQ(static_cast<int>(prompt.size() + a.tokens.size()), c.max_seq_len + 1);
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) EXPECT_ROW_BITS_EQ(with[i].data(), without[i].data(), V) << "position " << i;
}

// Several sequences of different lengths decoded in one batch == each decoded alone.
template <class T>
void check_decode_batch(const Shape& s) {
  const ModelConfig& c = s.config;
  Transformer<T> model(kvd_test::make_weights<T>(s, 16));
  const int V = c.vocab_size, B = 4;
  std::vector<std::vector<int>> seqs;
  std::vector<KVCache<T>> alone, batched;
  for (int b = 0; b < B; ++b) {
    seqs.push_back(make_tokens(c.max_seq_len, V, 20 + b));
    alone.emplace_back(c);
    batched.emplace_back(c);
    const int plen = 1 + (b * 5) % (c.max_seq_len / 2);
    std::vector<int> p(seqs[b].begin(), seqs[b].begin() + plen);
    model.prefill(p, alone[b]);
    model.prefill(p, batched[b]);
  }
  std::vector<KVCache<T>*> ptrs;
  for (auto& cch : batched) ptrs.push_back(&cch);
  for (int step = 0; step < c.max_seq_len / 2 - 1; ++step) {
    std::vector<int> toks;
    for (int b = 0; b < B; ++b) toks.push_back(seqs[b][batched[b].length()]);
    RowMatrix<T> rows = model.decode_batch(toks, ptrs);
    for (int b = 0; b < B; ++b) {
      auto one = model.decode_step(toks[b], alone[b]);
      ASSERT_TRUE(kvd_test::same_bits(rows.row(b).data(), one.row(0).data(), V)) << "step " << step << " seq " << b;
    }
  }
}

// The whole model against the double oracle: float within 1e-4 of the largest logit,
// double within 1e-10.
template <class T>
void check_against_oracle(const Shape& s, double tol) {
  const ModelConfig& c = s.config;
  const auto weights = kvd_test::make_weights<T>(s, 17);
  const auto oracle = kvd_test::oracle_logits(weights.template cast<double>(), make_tokens(c.max_seq_len, c.vocab_size, 2));
  Transformer<T> model(weights.template cast<T>());
  KVCache<T> cache(c);
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 2);
  model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 5), cache);
  for (int t = 5; t < c.max_seq_len; ++t) {
    auto row = model.decode_step(tokens[t], cache);
    double max_abs = 0, max_err = 0;
    for (int v = 0; v < c.vocab_size; ++v) {
      max_abs = std::max(max_abs, std::abs(oracle[t][v]));
      max_err = std::max(max_err, std::abs(oracle[t][v] - static_cast<double>(row(0, v))));
    }
    EXPECT_LE(max_err, tol * max_abs) << "position " << t;
  }
}

}  // namespace

TEST_P(ExactEquivalence, PrefillMatchesReferenceFloat) { check_prefill_matches_reference<float>(shape()); }
TEST_P(ExactEquivalence, PrefillMatchesReferenceDouble) { check_prefill_matches_reference<double>(shape()); }
TEST_P(ExactEquivalence, PrefillEveryPromptLengthFloat) { check_prefill_every_length<float>(shape()); }
TEST_P(ExactEquivalence, PrefillEveryPromptLengthDouble) { check_prefill_every_length<double>(shape()); }
TEST_P(ExactEquivalence, PrefillThenDecodeEverySplitFloat) { check_prefill_then_decode<float>(shape()); }
TEST_P(ExactEquivalence, PrefillThenDecodeEverySplitDouble) { check_prefill_then_decode<double>(shape()); }
TEST_P(ExactEquivalence, ChunkedPrefillFloat) { check_chunked_prefill<float>(shape()); }
TEST_P(ExactEquivalence, ChunkedPrefillDouble) { check_chunked_prefill<double>(shape()); }
TEST_P(ExactEquivalence, GenerateCachedEqualsUncachedFloat) { check_generate_same<float>(shape()); }
TEST_P(ExactEquivalence, GenerateCachedEqualsUncachedDouble) { check_generate_same<double>(shape()); }
TEST_P(ExactEquivalence, DecodeBatchEqualsSingleFloat) { check_decode_batch<float>(shape()); }
TEST_P(ExactEquivalence, DecodeBatchEqualsSingleDouble) { check_decode_batch<double>(shape()); }
TEST_P(ExactEquivalence, FloatAgreesWithDoubleOracle) { check_against_oracle<float>(shape(), 1e-4); }
TEST_P(ExactEquivalence, DoubleAgreesWithDoubleOracle) { check_against_oracle<double>(shape(), 1e-10); }

INSTANTIATE_TEST_SUITE_P(Shapes, ExactEquivalence,
                         ::testing::ValuesIn([] {
                           std::vector<Param> ps;
                           for (const auto& s : shapes())
                             for (int threads : {1, 2}) ps.push_back({s, threads});
                           return ps;
                         }()),
                         param_name);

// Logits computed with 1 thread and with 2 threads are identical, on a shape
// large enough that every kernel actually splits its work.
TEST(ExactEquivalenceThreads, OneAndTwoThreadsIdentical) {
  ModelConfig c = kvd_test::small_config(6, 2, 32, 192, 2, 512, 1000, 48);
  Transformer<float> model(ModelWeights<float>::random(c, 21));
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 8);
  std::vector<RowMatrix<float>> results;
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    KVCache<float> cache(c);
    RowMatrix<float> all(c.max_seq_len, c.vocab_size);
    all.topRows(20) = model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 20), cache, true);
    for (int t = 20; t < c.max_seq_len; ++t) all.row(t) = model.decode_step(tokens[t], cache);
    results.push_back(all);
  }
  set_num_threads(saved);
  EXPECT_TRUE(kvd_test::same_bits(results[0].data(), results[1].data(), results[0].size()))
      << kvd_test::first_difference(results[0].data(), results[1].data(), results[0].size());
}

// The comparison itself can fail: one flipped bit in one logit is caught.
TEST(ExactEquivalenceSelfCheck, FlippedBitIsDetected) {
  ModelConfig c = kvd_test::small_config(4, 2, 10, 40, 1, 48, 37, 16);
  Transformer<float> model(ModelWeights<float>::random(c, 22));
  const auto tokens = make_tokens(16, c.vocab_size);
  RowMatrix<float> ref = model.forward_reference(tokens);
  KVCache<float> cache(c);
  RowMatrix<float> got = model.prefill(tokens, cache, true);
  ASSERT_TRUE(kvd_test::same_bits(ref.data(), got.data(), ref.size()));
  std::uint32_t bits;
  std::memcpy(&bits, &got(7, 3), 4);
  bits ^= 1u;  // the lowest mantissa bit
  std::memcpy(&got(7, 3), &bits, 4);
  EXPECT_FALSE(kvd_test::same_bits(ref.data(), got.data(), ref.size()));
}

// ---------------------------------------------------------------- bad input
// Each case throws its typed error, names the bad value and the limit, and
// leaves the cache exactly as it was.

namespace {
struct BadInputFixture : ::testing::Test {
  ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 50, 20);
  Transformer<float> model{ModelWeights<float>::random(c, 3)};
  KVCache<float> cache{c, 12};
  std::vector<float> snapshot_k, snapshot_v;
  int snapshot_len = 0;

  void SetUp() override {
    model.prefill(make_tokens(10, c.vocab_size), cache);
    snapshot();
  }
  void snapshot() {
    snapshot_len = cache.length();
    snapshot_k.clear(); snapshot_v.clear();
    for (int l = 0; l < c.n_layers; ++l)
      for (int p = 0; p < cache.length(); ++p)
        for (int h = 0; h < c.n_kv_heads; ++h)
          for (int d = 0; d < c.head_dim; ++d) {
            snapshot_k.push_back(cache.key(l, p, h, d));
            snapshot_v.push_back(cache.value(l, p, h, d));
          }
  }
  void expect_unchanged() {
    std::vector<float> k = snapshot_k, v = snapshot_v;
    const int len = snapshot_len;
    snapshot();
    EXPECT_EQ(cache.length(), len);
    EXPECT_EQ(k, snapshot_k);
    EXPECT_EQ(v, snapshot_v);
    // and it still works: the next decode step equals the reference
    auto toks = make_tokens(10, c.vocab_size);
    toks.push_back(5);
    RowMatrix<float> ref = model.forward_reference(toks);
    auto row = model.decode_step(5, cache);
    EXPECT_ROW_BITS_EQ(row.row(0).data(), ref.row(10).data(), c.vocab_size);
  }
};

template <class E, class F>
std::string expect_throw(F&& f) {
  try {
    f();
  } catch (const E& e) {
    const kvd::Error* root = &e;  // the hierarchy is rooted at kvd::Error
    (void)root;
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception thrown";
  return "";
}
}  // namespace

TEST_F(BadInputFixture, TokenAboveVocabularyInDecode) {
  const std::string m = expect_throw<TokenError>([&] { model.decode_step(50, cache); });
  EXPECT_NE(m.find("50"), std::string::npos) << m;
  EXPECT_NE(m.find("[0, 50)"), std::string::npos) << m;
  expect_unchanged();
}

TEST_F(BadInputFixture, NegativeTokenInPrefill) {
  const std::string m = expect_throw<TokenError>([&] { model.prefill({1, 2, -3}, cache); });
  EXPECT_NE(m.find("-3"), std::string::npos) << m;
  EXPECT_NE(m.find("index 2"), std::string::npos) << m;
  expect_unchanged();
}

TEST_F(BadInputFixture, PrefillOverflowingCapacity) {
  const std::string m = expect_throw<CacheFullError>([&] { model.prefill({1, 2, 3}, cache); });
  EXPECT_NE(m.find("capacity of 12"), std::string::npos) << m;
  EXPECT_NE(m.find("3 position"), std::string::npos) << m;
  expect_unchanged();
}

TEST_F(BadInputFixture, DecodeStepOnFullCache) {
  model.decode_step(1, cache);
  model.decode_step(2, cache);
  ASSERT_EQ(cache.length(), 12);
  const std::string m = expect_throw<CacheFullError>([&] { model.decode_step(3, cache); });
  EXPECT_NE(m.find("12"), std::string::npos) << m;
  EXPECT_EQ(cache.length(), 12);
  cache.truncate(10);  // rewinding makes room again, and the state is still exact
  snapshot();
  expect_unchanged();
}

TEST_F(BadInputFixture, EmptyPrompt) {
  const std::string m = expect_throw<TokenError>([&] { model.prefill(std::vector<int>{}, cache); });
  EXPECT_NE(m.find("empty"), std::string::npos) << m;
  expect_unchanged();
}

TEST_F(BadInputFixture, CacheForDifferentConfig) {
  ModelConfig other = c;
  other.n_kv_heads = 4;
  KVCache<float> wrong(other);
  const std::string m = expect_throw<CacheMismatchError>([&] { model.decode_step(1, wrong); });
  EXPECT_NE(m.find("kv_heads 4"), std::string::npos) << m;
  EXPECT_NE(m.find("kv_heads 2"), std::string::npos) << m;
  EXPECT_EQ(wrong.length(), 0);
  expect_unchanged();
}

TEST_F(BadInputFixture, BatchWithOneBadTokenChangesNoCache) {
  KVCache<float> other(c);
  model.prefill({4, 5}, other);
  std::vector<KVCache<float>*> caches{&cache, &other};
  expect_throw<TokenError>([&] { model.decode_batch({1, 99}, caches); });
  EXPECT_EQ(other.length(), 2);
  expect_unchanged();
}

TEST(BadInput, InvalidConfigRejected) {
  ModelConfig c = kvd_test::small_config(4, 3, 8, 32, 2, 48, 50, 20);
  try {
    c.validate();
    FAIL() << "n_heads 4 with n_kv_heads 3 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("n_heads = 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("n_kv_heads = 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Transformer<float>(ModelWeights<float>::random(c, 1)), ConfigError);
  EXPECT_THROW({ KVCache<float> cache(c); }, ConfigError);
}

TEST(BadInput, ReferenceLongerThanMaxSeqLen) {
  ModelConfig c = kvd_test::small_config(2, 2, 8, 16, 1, 16, 20, 8);
  Transformer<float> model(ModelWeights<float>::random(c, 1));
  EXPECT_THROW(model.forward_reference(make_tokens(9, 20)), TokenError);
}
