// The server's promise, at the scheduler: for a fixed seed, a request's logits
// (every row, compared with memcmp), tokens and log-probabilities are the same
// bits whether it runs alone or among 1 to 8 others of different lengths arriving
// at different steps, and whether its prefix came from the prefix cache, a fresh
// prefill or a chunked one. Then the memory rules: a full cache queues and never
// fails a running request, a cancel frees the blocks, a full queue is a 503.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kvdecode/serve/scheduler.hpp"
#include "test_util.hpp"

using namespace kvd;

namespace {

ModelConfig cfg() {
  ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 97, 128);
  c.shared_classifier = false;  // a tied random model mostly repeats tokens; keep generations varied
  return c;
}

// Everything one request produced.
struct Trace {
  std::map<int, std::vector<float>> logits;  // position -> logits row
  std::vector<int> tokens;
  std::vector<double> logprobs;
  std::vector<std::vector<std::pair<int, double>>> top;
  FinishReason reason = FinishReason::kCancelled;
  int cached = -1;
};

JobCallbacks record(Trace& t) {
  JobCallbacks cb;
  cb.on_start = [&t](int, int cached) { t.cached = cached; };
  cb.on_token = [&t](const TokenEvent& ev) {
    t.tokens.push_back(ev.token);
    t.logprobs.push_back(ev.logprob);
    t.top.push_back(ev.top);
  };
  cb.on_finish = [&t](FinishReason r, int) { t.reason = r; };
  return cb;
}

ScheduledJob job(std::vector<int> prompt, int max_tokens, std::uint64_t seed) {
  ScheduledJob j;
  j.prompt = std::move(prompt);
  j.max_tokens = max_tokens;
  j.sampler.temperature = 0.9;
  j.sampler.top_k = 40;
  j.sampler.seed = seed;
  j.top_logprobs = 3;
  return j;
}

void hook(Scheduler<float>& s, std::map<long, Trace>& traces) {
  s.on_logits = [&traces](long id, int pos, const float* l, int n) {
    traces[id].logits[pos] = std::vector<float>(l, l + n);
  };
}

// "" when a and b hold the same bits everywhere.
std::string compare(const Trace& a, const Trace& b) {
  if (a.tokens != b.tokens) return "tokens differ";
  if (a.logits.size() != b.logits.size()) return detail::msg(a.logits.size(), " vs ", b.logits.size(), " logits rows");
  for (const auto& [pos, row] : a.logits) {
    const auto it = b.logits.find(pos);
    if (it == b.logits.end()) return detail::msg("no row at position ", pos);
    if (!kvd_test::same_bits(row.data(), it->second.data(), static_cast<long>(row.size())))
      return detail::msg("position ", pos, ": ", kvd_test::first_difference(row.data(), it->second.data(), static_cast<long>(row.size())));
  }
  if (std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * sizeof(double)) != 0) return "logprobs differ";
  if (a.top != b.top) return "top logprobs differ";
  if (a.reason != b.reason) return "finish reasons differ";
  return "";
}

struct Fixture {
  Fixture() : model(ModelWeights<float>::random(cfg(), 11)) {}
  Transformer<float> model;
};

Trace run_alone(Transformer<float>& model, const ScheduledJob& j, SchedulerOptions opt = {}) {
  Scheduler<float> s(model, opt);
  std::map<long, Trace> traces;
  hook(s, traces);
  s.submit(1, j, record(traces[1]));
  s.run();
  return traces[1];
}

}  // namespace

TEST(ServeScheduler, RequestAloneAndAmongOneToEightOthersGivesTheSameBits) {
  Fixture f;
  const ScheduledJob target = job(kvd_test::make_tokens(23, 97, 3), 30, 1234);
  const Trace alone = run_alone(f.model, target);
  ASSERT_EQ(alone.tokens.size(), 30u);
  for (int others = 1; others <= 8; ++others) {
    SchedulerOptions opt;
    opt.n_parallel = 9;
    opt.prefill_chunk = 16;
    Scheduler<float> s(f.model, opt);
    std::map<long, Trace> traces;
    hook(s, traces);
    // Others of different lengths arrive at steps 0, 1, 2, ...; the target at step `others % 3`.
    int submitted = 0;
    bool target_in = false;
    for (int step = 0; step < 400; ++step) {
      if (submitted < others) {
        const int id = 100 + submitted;
        s.submit(id, job(kvd_test::make_tokens(5 + 9 * submitted, 97, 50 + submitted), 10 + 7 * submitted, 99 + submitted),
                 record(traces[id]));
        ++submitted;
      }
      if (!target_in && step == others % 3) {
        s.submit(1, target, record(traces[1]));
        target_in = true;
      }
      if (!s.step() && target_in && submitted == others) break;
    }
    EXPECT_EQ(compare(alone, traces[1]), "") << others << " others";
    EXPECT_EQ(traces[1].cached, 0);
  }
}

TEST(ServeScheduler, PrefixFromTheCacheFreshOrChunkedGivesTheSameBits) {
  Fixture f;
  const std::vector<int> system = kvd_test::make_tokens(40, 97, 5);
  std::vector<int> turn1 = system;
  for (int t : kvd_test::make_tokens(7, 97, 6)) turn1.push_back(t);

  SchedulerOptions opt;
  Scheduler<float> s(f.model, opt);
  std::map<long, Trace> traces;
  hook(s, traces);
  s.submit(1, job(turn1, 12, 1), record(traces[1]));
  s.run();
  // Turn 2: turn 1, its answer, then new tokens: all but the new ones come from the cache.
  std::vector<int> turn2 = turn1;
  turn2.insert(turn2.end(), traces[1].tokens.begin(), traces[1].tokens.end());
  for (int t : kvd_test::make_tokens(9, 97, 8)) turn2.push_back(t);
  const ScheduledJob second = job(turn2, 20, 77);
  s.submit(2, second, record(traces[2]));
  s.run();
  // The first turn's last token was generated but never fed, so the cache holds one fewer.
  EXPECT_EQ(traces[2].cached, static_cast<int>(turn1.size() + traces[1].tokens.size()) - 1);
  EXPECT_GT(s.stats().tokens_cached, 0u);

  SchedulerOptions fresh;
  fresh.prefix_cache = false;
  const Trace cold = run_alone(f.model, second, fresh);
  EXPECT_EQ(cold.cached, 0);
  SchedulerOptions chunked;
  chunked.prefix_cache = false;
  chunked.prefill_chunk = 3;
  const Trace small_chunks = run_alone(f.model, second, chunked);
  // Logits rows exist only where the request asked for them (its generated positions).
  EXPECT_EQ(compare(cold, traces[2]), "");
  EXPECT_EQ(compare(cold, small_chunks), "");
}

TEST(ServeScheduler, SharedPrefixWithARunningRequestIsForked) {
  Fixture f;
  const std::vector<int> common = kvd_test::make_tokens(50, 97, 9);
  std::vector<int> a = common, b = common;
  a.push_back(3);
  b.push_back(4);
  Scheduler<float> s(f.model, {});
  std::map<long, Trace> traces;
  hook(s, traces);
  s.submit(1, job(a, 20, 1), record(traces[1]));
  for (int i = 0; i < 5; ++i) s.step();  // a's prompt is in
  s.submit(2, job(b, 20, 2), record(traces[2]));
  s.run();
  EXPECT_EQ(traces[2].cached, 50);
  EXPECT_EQ(compare(run_alone(f.model, job(b, 20, 2)), traces[2]), "");
}

TEST(ServeScheduler, FullCacheQueuesAndNeverFailsARunningRequest) {
  Fixture f;
  SchedulerOptions opt;
  opt.n_parallel = 4;
  opt.n_blocks = 10;  // room for one whole context (128 positions: 8 blocks + 1) at a time
  Scheduler<float> s(f.model, opt);
  std::map<long, Trace> traces;
  for (int i = 0; i < 4; ++i) s.submit(i, job(kvd_test::make_tokens(20 + i, 97, i), 200, i), record(traces[i]));
  int most_queued = 0;
  while (s.step()) most_queued = std::max(most_queued, s.stats().queued);
  EXPECT_EQ(most_queued, 3);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(traces[i].reason, FinishReason::kLength) << i;
    EXPECT_EQ(static_cast<int>(traces[i].tokens.size()), 128 - 20 - i) << "clamped to the context";
  }
}

TEST(ServeScheduler, CancelFreesTheBlocks) {
  Fixture f;
  Scheduler<float> s(f.model, {});
  std::map<long, Trace> traces;
  for (int i = 0; i < 3; ++i) s.submit(i, job(kvd_test::make_tokens(30, 97, 20 + i), 50, i), record(traces[i]));
  for (int k = 0; k < 6; ++k) s.step();
  const long before = s.stats().blocks_running;
  EXPECT_TRUE(s.cancel(1));
  EXPECT_FALSE(s.cancel(1));
  EXPECT_EQ(traces[1].reason, FinishReason::kCancelled);
  EXPECT_LT(s.stats().blocks_running, before);
  s.run();
  EXPECT_EQ(s.stats().blocks_running, 0);
  s.clear_prefix_cache();
  EXPECT_EQ(s.stats().blocks_in_use, 0) << "no block leaked";
}

TEST(ServeScheduler, FullQueueIsA503) {
  Fixture f;
  SchedulerOptions opt;
  opt.max_queue = 2;
  Scheduler<float> s(f.model, opt);
  s.submit(1, job({1, 2}, 4, 1));
  s.submit(2, job({1, 2}, 4, 1));
  try {
    s.submit(3, job({1, 2}, 4, 1));
    FAIL() << "no throw";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_NE(std::string(e.what()).find("limit is 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.stats().queued, 2);
}

TEST(ServeScheduler, PromptLongerThanTheContextIsA400NamingBothLengths) {
  Fixture f;
  Scheduler<float> s(f.model, {});
  try {
    s.submit(1, job(kvd_test::make_tokens(128, 97, 1), 4, 1));
    FAIL() << "no throw";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.code(), "context_length_exceeded");
    const std::string m = e.what();
    EXPECT_NE(m.find("128 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("holds 128 positions"), std::string::npos) << m;
  }
  EXPECT_EQ(s.stats().queued, 0);
}

TEST(ServeScheduler, TooSmallACacheIsAConfigErrorNamingTheBlocks) {
  Fixture f;
  SchedulerOptions opt;
  opt.n_blocks = 3;
  try {
    Scheduler<float> s(f.model, opt);
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("need 9 blocks"), std::string::npos) << e.what();
  }
}
