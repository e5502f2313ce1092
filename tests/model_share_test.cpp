// One packed Model shared by several Transformers (model.hpp): two threads
// decoding two sequences on one model get, bit for bit, what one Transformer gets
// running them one after the other, on random weights and on a quantized GGUF; the
// fast mode cannot be switched under another user's feet. (That sharing copies no
// weights is counted in alloc_test.cpp, which replaces operator new.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/model/transformer.hpp"
#include "test_util.hpp"

namespace {
using namespace kvd;

// Every step's logits, flattened: a prefill of `prompt`, then `steps` greedy decode steps.
std::vector<float> greedy_logits(Transformer<float>& t, const std::vector<int>& prompt, int steps) {
  KVCache<float> cache(t.config());
  std::vector<float> out;
  const int V = t.config().vocab_size;
  const float* logits = t.prefill(prompt, cache).row(0).data();  // valid until the next call on t
  for (int s = 0;; ++s) {
    out.insert(out.end(), logits, logits + V);
    if (s == steps) break;
    int best = 0;
    for (int v = 1; v < V; ++v)
      if (logits[v] > logits[best]) best = v;
    logits = t.decode_step(best, cache).row(0).data();
  }
  return out;
}

// Two sequences on two threads, each with its own Transformer on `model`, against
// one Transformer running them in turn.
void expect_two_threads_give_the_bits_of_one(const std::shared_ptr<const Model<float>>& model) {
  const int V = model->config().vocab_size;
  const std::vector<int> a = kvd_test::make_tokens(9, V, 1), b = kvd_test::make_tokens(5, V, 2);
  const int steps = 12;
  Transformer<float> solo(model);
  const std::vector<float> want_a = greedy_logits(solo, a, steps), want_b = greedy_logits(solo, b, steps);
  for (int omp_threads : {1, 2}) {
    std::vector<float> got_a, got_b;
    auto run = [&](const std::vector<int>& prompt, std::vector<float>& out) {
      set_num_threads(omp_threads);  // this thread's OpenMP teams
      Transformer<float> t(model);
      out = greedy_logits(t, prompt, steps);
    };
    std::thread ta(run, std::cref(a), std::ref(got_a)), tb(run, std::cref(b), std::ref(got_b));
    ta.join();
    tb.join();
    ASSERT_EQ(got_a.size(), want_a.size());
    ASSERT_EQ(got_b.size(), want_b.size());
    EXPECT_EQ(std::memcmp(got_a.data(), want_a.data(), want_a.size() * sizeof(float)), 0)
        << "sequence a, " << omp_threads << " OpenMP thread(s) each: "
        << kvd_test::first_difference(got_a.data(), want_a.data(), static_cast<long>(want_a.size()));
    EXPECT_EQ(std::memcmp(got_b.data(), want_b.data(), want_b.size() * sizeof(float)), 0)
        << "sequence b, " << omp_threads << " OpenMP thread(s) each: "
        << kvd_test::first_difference(got_b.data(), want_b.data(), static_cast<long>(want_b.size()));
  }
}

TEST(SharedModel, TwoThreadsOnOneRandomModelGiveTheBitsOfOne) {
  const ModelConfig c = kvd_test::small_config(4, 2, 16, 64, 2, 160, 300, 64);
  expect_two_threads_give_the_bits_of_one(std::make_shared<const Model<float>>(ModelWeights<float>::random(c, 3)));
}

TEST(SharedModel, TwoThreadsOnOneQuantizedGgufGiveTheBitsOfOne) {
  const std::string path = std::string(KVDECODE_SHARED_DIR) + "/models/gguf/rand256-Q4_K_M.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found (../shared/models absent)";
  expect_two_threads_give_the_bits_of_one(std::make_shared<const Model<float>>(load_gguf_model<float>(path)));
}

TEST(SharedModel, TransformersShareOnePackedCopy) {
  const ModelConfig c = kvd_test::small_config(4, 2, 16, 64, 2, 160, 300, 64);
  Transformer<float> first(ModelWeights<float>::random(c, 4));
  Transformer<float> second(first.shared_model());
  EXPECT_EQ(&first.model(), &second.model());
  EXPECT_EQ(first.shared_model().use_count(), 3);  // first, second, and the copy in the expression
  EXPECT_EQ(&first.classifier(), &second.classifier());
}

TEST(SharedModel, FastModeOfASharedModelIsRefusedAndUnchanged) {
  const ModelConfig c = kvd_test::small_config(4, 2, 16, 64, 2, 160, 300, 64);
  Transformer<float> owner(ModelWeights<float>::random(c, 5));
  owner.set_fast_matmul(true);  // the only user: allowed
  EXPECT_TRUE(owner.fast_matmul());
  owner.set_fast_matmul(false);
  Transformer<float> other(owner.shared_model());
  for (Transformer<float>* t : {&owner, &other}) {
    try {
      t->set_fast_matmul(true);
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("shares its model"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(owner.fast_matmul());
  }
  other.set_fast_matmul(false);  // no change asked: fine
}

TEST(SharedModel, NullModelIsAnArgumentError) {
  EXPECT_THROW(Transformer<float>(std::shared_ptr<const Model<float>>()), ArgumentError);
}

}  // namespace
