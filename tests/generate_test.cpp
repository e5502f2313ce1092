// The generation loop against the outside world and its own contract:
//  * stories260K greedy from BOS reproduces llama2.c's ids exactly, and tok512
//    decodes them to llama2.c's text;
//  * a seeded sampler gives the same tokens across runs, thread counts, and
//    with or without the cache;
//  * stop rules: stop tokens, max tokens, a full context (no error).
#include <gtest/gtest.h>

#include <limits>

#include "json_reader.hpp"
#include "kvdecode/load/model_loader.hpp"
#include "kvdecode/generate/sampler.hpp"
#include "kvdecode/text/llama2c_tokenizer.hpp"
#include "test_util.hpp"

using namespace kvd;

namespace {

std::string model_path() { return kvd_test::shared_dir() + "/models/stories260K.bin"; }

#define REQUIRE_SHARED()                                                                              \
  if (kvd_test::shared_dir().empty())                                                                 \
  GTEST_SKIP() << "../shared (models and reference outputs) is absent; looked in " << KVDECODE_SHARED_DIR

// Generates with a seeded sampler; returns the tokens.
std::vector<int> sample_run(Transformer<float>& model, bool use_cache, const SamplerConfig& sc, int steps) {
  KVCache<float> cache(model.config());
  Sampler sampler(sc);
  GenerateOptions opt;
  opt.max_new_tokens = steps;
  opt.use_cache = use_cache;
  GenerateHooks<float> hooks;
  hooks.choose = [&](const float* l, int n, const std::vector<int>& h) { return sampler.sample(l, n, h); };
  return generate(model, {1}, cache, opt, hooks).tokens;
}

}  // namespace

TEST(Stories260K, GreedyIdsMatchLlama2cReference) {
  REQUIRE_SHARED();
  const auto ref = kvd_test::read_json(kvd_test::shared_dir() + "/reference/stories260K_greedy.json");
  std::vector<int> want;
  for (const auto& v : ref.at("greedy_ids").array) want.push_back(static_cast<int>(v.number));
  ASSERT_EQ(want.size(), 256u);
  Transformer<float> model(load_checkpoint<float>(model_path()));
  KVCache<float> cache(model.config());
  GenerateOptions opt;
  opt.max_new_tokens = 256;
  const auto got = generate(model, {1}, cache, opt).tokens;
  EXPECT_EQ(got, want);
}

TEST(Stories260K, GreedyTextMatchesLlama2cReference) {
  REQUIRE_SHARED();
  const auto ref = kvd_test::read_json(kvd_test::shared_dir() + "/reference/stories260K_greedy.json");
  std::vector<int> ids{1};
  for (const auto& v : ref.at("greedy_ids").array) ids.push_back(static_cast<int>(v.number));
  // run.c's output is every generated token's piece followed by a final newline
  // (its last printed piece is greedy_ids[255], " mom").
  const std::string want = ref.at("text").string;
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(want.back(), '\n');
  const Llama2cTokenizer tok = Llama2cTokenizer::load(kvd_test::shared_dir() + "/models/tok512.bin", 512);
  EXPECT_EQ(tok.decode_all(ids) + "\n", want);
  // streaming gives the same text
  StreamDecoder stream(tok, 1);
  std::string streamed;
  for (std::size_t i = 1; i < ids.size(); ++i) streamed += stream.push(ids[i]);
  streamed += stream.flush();
  EXPECT_EQ(streamed + "\n", want);
}

TEST(Stories260K, CachedAndCacheFreeIdenticalOnRealModel) {
  REQUIRE_SHARED();
  Transformer<float> model(load_checkpoint<float>(model_path()));
  const Llama2cTokenizer tok = Llama2cTokenizer::load(kvd_test::shared_dir() + "/models/tok512.bin", 512);
  const auto prompt = tok.encode("Once upon a time", true, false);
  EXPECT_EQ(prompt, (std::vector<int>{1, 403, 407, 261, 378}));
  const auto ref = model.forward_reference(prompt);
  KVCache<float> cache(model.config());
  RowMatrix<float> pf = model.prefill(prompt, cache, true);
  EXPECT_TRUE(kvd_test::same_bits(pf.data(), ref.data(), ref.size()));
}

TEST(SampledGeneration, SameSeedSameTokensWithAndWithoutCacheAndThreads) {
  ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 64, 60, 48);
  c.shared_classifier = false;  // a tied random model mostly repeats its input token
  Transformer<float> model(ModelWeights<float>::random(c, 5));
  SamplerConfig sc;
  sc.temperature = 1.0;
  sc.top_p = 0.95;
  sc.top_k = 40;
  sc.seed = 1234;
  const int saved = num_threads();
  set_num_threads(1);
  const auto a = sample_run(model, true, sc, 40);
  const auto b = sample_run(model, true, sc, 40);
  const auto d = sample_run(model, false, sc, 40);
  set_num_threads(2);
  const auto e = sample_run(model, true, sc, 40);
  const auto f = sample_run(model, false, sc, 40);
  set_num_threads(saved);
  EXPECT_EQ(a.size(), 40u);
  EXPECT_EQ(a, b) << "same seed, same run";
  EXPECT_EQ(a, d) << "with vs without cache";
  EXPECT_EQ(a, e) << "1 vs 2 threads";
  EXPECT_EQ(a, f) << "2 threads, without cache";
  sc.seed = 1235;
  EXPECT_NE(a, sample_run(model, true, sc, 40)) << "a different seed should give a different sample";
}

TEST(GenerateStops, AtStopToken) {
  const ModelConfig c = kvd_test::small_config(2, 2, 8, 16, 1, 32, 20, 64);
  Transformer<float> model(ModelWeights<float>::random(c, 9));
  KVCache<float> cache(c);
  GenerateOptions opt;
  opt.max_new_tokens = 30;
  const auto free_run = generate(model, {1, 2, 3}, cache, opt).tokens;
  ASSERT_GE(free_run.size(), 5u);
  cache.clear();
  opt.stop_tokens = {free_run[4]};
  const auto r = generate(model, {1, 2, 3}, cache, opt);
  EXPECT_EQ(r.stop, StopReason::kStopToken);
  const auto first = std::find(free_run.begin(), free_run.end(), free_run[4]) - free_run.begin();
  EXPECT_EQ(static_cast<long>(r.tokens.size()), first + 1);
  EXPECT_EQ(r.tokens.back(), free_run[4]);
}

TEST(GenerateStops, AtMaxTokensWithTimings) {
  const ModelConfig c = kvd_test::small_config(2, 2, 8, 16, 1, 32, 20, 64);
  Transformer<float> model(ModelWeights<float>::random(c, 9));
  KVCache<float> cache(c);
  GenerateOptions opt;
  opt.max_new_tokens = 7;
  std::vector<int> streamed;
  GenerateHooks<float> hooks;
  hooks.on_token = [&](int t) { streamed.push_back(t); };
  const auto r = generate(model, {1, 2, 3}, cache, opt, hooks);
  EXPECT_EQ(r.stop, StopReason::kMaxTokens);
  EXPECT_EQ(r.tokens.size(), 7u);
  EXPECT_EQ(streamed, r.tokens);
  EXPECT_EQ(r.decode_steps, 6);
  EXPECT_EQ(cache.length(), 3 + 6);  // the last token is produced but not fed
  EXPECT_GT(r.prefill_seconds, 0.0);
  EXPECT_GT(r.decode_tokens_per_second(), 0.0);
}

TEST(GenerateStops, WhenContextIsFullWithoutError) {
  const ModelConfig c = kvd_test::small_config(2, 2, 8, 16, 1, 32, 20, 10);
  Transformer<float> model(ModelWeights<float>::random(c, 9));
  KVCache<float> cache(c);
  GenerateOptions opt;
  opt.max_new_tokens = 100;
  const auto r = generate(model, {1, 2, 3}, cache, opt);
  EXPECT_EQ(r.stop, StopReason::kContextFull);
  EXPECT_EQ(cache.length(), 10);
  EXPECT_EQ(r.tokens.size(), 8u);  // positions 3..9 fed, each producing one token, plus the prefill's
}

TEST(GenerateStops, PromptLongerThanContextIsTypedError) {
  const ModelConfig c = kvd_test::small_config(2, 2, 8, 16, 1, 32, 20, 4);
  Transformer<float> model(ModelWeights<float>::random(c, 9));
  KVCache<float> cache(c);
  EXPECT_THROW(generate(model, {1, 2, 3, 4, 5}, cache, GenerateOptions{}), CacheFullError);
  EXPECT_EQ(cache.length(), 0);
  EXPECT_THROW(generate(model, {}, cache, GenerateOptions{}), TokenError);
}

TEST(GenerateStops, StopRuleMatchesListedTokensOnly) {
  EXPECT_TRUE(is_stop_token({2, 1}, 1));
  EXPECT_TRUE(is_stop_token({2, 1}, 2));
  EXPECT_FALSE(is_stop_token({2, 1}, 0));
  EXPECT_FALSE(is_stop_token({}, 0));
}

TEST(Argmax, FirstOfEqualMaximaAndTheSameAsGreedySampling) {
  const float a[] = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax(a, 5), 1);
  const double inf = std::numeric_limits<double>::infinity();
  const double b[] = {-inf, -inf, -2.0};
  EXPECT_EQ(argmax(b, 3), 2);
  EXPECT_EQ(argmax(a, 1), 0);
  Sampler greedy(SamplerConfig{});
  EXPECT_EQ(greedy.sample(a, 5), argmax(a, 5));
}

// The usage example in README.md, kept compiling and running here.
TEST(Readme, UsageExampleRuns) {
  REQUIRE_SHARED();
  const std::string dir = kvd_test::shared_dir() + "/models/";
  kvd::LoadOptions opts;
  opts.tokenizer = dir + "tok512.bin";  // a llama2.c checkpoint keeps its vocabulary apart
  kvd::LoadedModel m = kvd::open_model(dir + "stories260K.bin", opts);  // or a GGUF file, or an HF folder
  kvd::Transformer<float>& model = m.model;
  const kvd::TextTokenizer& tok = *m.tokenizer;
  kvd::KVCache<float> cache(model.config());  // capacity: max_seq_len positions

  std::vector<int> prompt = tok.encode("Once upon a time");  // BOS first
  auto logits = model.prefill(prompt, cache);  // (1, vocab): the last position
  kvd::Sampler sampler({/*temperature=*/0.8, /*top_k=*/40, /*top_p=*/0.95});
  std::vector<int> seq = prompt;
  int token = sampler.sample(logits.data(), model.config().vocab_size, seq);
  for (int i = 0; i < 100 && token != tok.eos_id(); ++i) {
    seq.push_back(token);
    auto row = model.decode_step(token, cache);  // appends K,V; attends over the whole cache
    token = sampler.sample(row.data(), model.config().vocab_size, seq);
  }
  const std::string text = tok.decode(seq);
  EXPECT_EQ(text.rfind("Once upon a time", 0), 0u) << text;
  EXPECT_GT(text.size(), 100u);
  EXPECT_EQ(cache.length(), static_cast<int>(seq.size()));  // every token in seq has been fed
}
