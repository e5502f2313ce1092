// Continuous batching: sequences join and leave between steps, prefill in
// chunks beside others' decode rows, and every sequence's logits stay
// bit-identical to computing it alone. An inverse test proves the comparison
// catches a single flipped bit.
#include <gtest/gtest.h>

#include <map>

#include "kvdecode/generate/batcher.hpp"
#include "test_util.hpp"

using namespace kvd;
using kvd_test::make_tokens;

namespace {

using Batcher = ContinuousBatcher<float, KVCache<float>>;
// (sequence, position) -> logits row recorded during batched steps
using Recorded = std::map<std::pair<int, int>, std::vector<float>>;

ModelConfig cfg() {
  ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 70, 64);
  c.shared_classifier = false;  // a tied random model mostly repeats tokens; keep generations varied
  return c;
}

Batcher make_batcher(Transformer<float>& model, BatcherOptions opt, Recorded& rec) {
  const ModelConfig c = model.config();
  Batcher b(model, [c] { return std::make_unique<KVCache<float>>(c); }, opt);
  b.on_logits = [&rec](int id, int pos, const float* l, int n) { rec[{id, pos}] = std::vector<float>(l, l + n); };
  return b;
}

// Every recorded row against the same sequence computed alone: one prefill of the
// prompt, then decode steps with the sequence's own tokens. "" when all identical.
std::string compare_alone(Transformer<float>& model, const std::map<int, std::vector<int>>& histories,
                          const std::map<int, int>& prompt_lens, const Recorded& rec) {
  const int V = model.config().vocab_size;
  std::size_t checked = 0;
  for (const auto& [id, hist] : histories) {
    KVCache<float> cache(model.config());
    const int plen = prompt_lens.at(id);
    RowMatrix<float> alone(static_cast<long>(hist.size()), V);
    alone.row(plen - 1) = model.prefill(std::vector<int>(hist.begin(), hist.begin() + plen), cache);
    for (std::size_t p = plen; p + 1 < hist.size(); ++p) alone.row(static_cast<long>(p)) = model.decode_step(hist[p], cache);
    for (const auto& [key, row] : rec) {
      if (key.first != id) continue;
      ++checked;
      if (!kvd_test::same_bits(row.data(), alone.row(key.second).data(), V))
        return detail::msg("sequence ", id, " position ", key.second, ": ",
                           kvd_test::first_difference(row.data(), alone.row(key.second).data(), V));
    }
  }
  if (checked != rec.size()) return detail::msg("checked ", checked, " of ", rec.size(), " rows");
  return "";
}

struct Scenario {
  std::map<int, std::vector<int>> histories;
  std::map<int, int> prompt_lens;
  Recorded rec;
};

// Three sequences of different prompt lengths start together; a fourth joins
// after three steps and prefills in chunks while the others decode; one leaves
// early; one samples with a seed.
Scenario run_scenario(Transformer<float>& model, BatcherOptions opt) {
  Scenario sc;
  Batcher b = make_batcher(model, opt, sc.rec);
  const int V = model.config().vocab_size;
  std::map<int, std::vector<int>> prompts;
  auto add = [&](int len, unsigned seed, SequenceOptions so) {
    auto p = make_tokens(len, V, seed);
    const int id = b.add(p, so);
    prompts[id] = p;
    sc.prompt_lens[id] = len;
    return id;
  };
  SequenceOptions greedy;
  greedy.max_new_tokens = 20;
  SequenceOptions sampled = greedy;
  sampled.sampler.temperature = 0.9;
  sampled.sampler.seed = 77;
  add(1, 1, greedy);
  add(7, 2, sampled);
  const int leaver = add(13, 3, greedy);
  for (int i = 0; i < 3; ++i) b.step();
  add(23, 4, greedy);  // joins mid-way, prefills in chunks beside the decode rows
  int steps = 0;
  std::size_t widest = 0;
  while (b.step()) {
    widest = std::max(widest, b.last_step_rows());
    if (++steps == 4) {  // leaves early; record what it had
      auto g = b.generated(leaver);
      sc.histories[leaver] = prompts[leaver];
      sc.histories[leaver].insert(sc.histories[leaver].end(), g.begin(), g.end());
      b.remove(leaver);
      prompts.erase(leaver);
    }
  }
  EXPECT_GT(widest, 3u) << "some step should carry a prompt chunk beside decode rows";
  for (const auto& [id, p] : prompts) {
    auto g = b.generated(id);
    EXPECT_TRUE(b.finished(id));
    sc.histories[id] = p;
    sc.histories[id].insert(sc.histories[id].end(), g.begin(), g.end());
  }
  return sc;
}

}  // namespace

TEST(ContinuousBatchingExact, JoinLeaveChunkedPrefillMixedLengths) {
  Transformer<float> model(ModelWeights<float>::random(cfg(), 31));
  BatcherOptions opt;
  opt.prefill_chunk = 5;
  Scenario sc = run_scenario(model, opt);
  EXPECT_EQ(sc.histories.size(), 4u);
  EXPECT_GT(sc.rec.size(), 50u);
  const std::string diff = compare_alone(model, sc.histories, sc.prompt_lens, sc.rec);
  EXPECT_EQ(diff, "");
}

TEST(ContinuousBatchingExact, TightRowBudgetAndTwoThreads) {
  Transformer<float> model(ModelWeights<float>::random(cfg(), 32));
  BatcherOptions opt;
  opt.prefill_chunk = 4;
  opt.max_rows_per_step = 6;  // prompt chunks get squeezed by decode rows
  const int saved = num_threads();
  set_num_threads(2);
  Scenario sc = run_scenario(model, opt);
  set_num_threads(1);
  EXPECT_EQ(compare_alone(model, sc.histories, sc.prompt_lens, sc.rec), "");
  set_num_threads(saved);
}

TEST(ContinuousBatchingExact, InverseOneFlippedBitIsCaught) {
  Transformer<float> model(ModelWeights<float>::random(cfg(), 33));
  Scenario sc = run_scenario(model, BatcherOptions{});
  ASSERT_EQ(compare_alone(model, sc.histories, sc.prompt_lens, sc.rec), "");
  auto& row = std::next(sc.rec.begin(), static_cast<long>(sc.rec.size() / 2))->second;
  std::uint32_t bits;
  std::memcpy(&bits, &row[5], 4);
  bits ^= 1u;
  std::memcpy(&row[5], &bits, 4);
  const std::string diff = compare_alone(model, sc.histories, sc.prompt_lens, sc.rec);
  EXPECT_NE(diff, "");
  EXPECT_NE(diff.find("index 5"), std::string::npos) << diff;
}

TEST(ContinuousBatching, StopsAtMaxTokensStopTokenAndFullContext) {
  ModelConfig c = cfg();
  c.max_seq_len = 16;
  Transformer<float> model(ModelWeights<float>::random(c, 34));
  Recorded rec;
  Batcher b = make_batcher(model, BatcherOptions{}, rec);
  SequenceOptions so;
  so.max_new_tokens = 5;
  const int a = b.add({1, 2, 3}, so);
  so.max_new_tokens = 100;
  const int full = b.add({4, 5, 6, 7}, so);
  b.run();
  EXPECT_EQ(b.generated(a).size(), 5u);
  EXPECT_EQ(b.stop_reason(a), StopReason::kMaxTokens);
  EXPECT_EQ(b.stop_reason(full), StopReason::kContextFull);
  EXPECT_EQ(b.cache(full).length(), 16);
  // a stop token ends a sequence
  so.stop_tokens = {b.generated(a)[2]};
  const int stopper = b.add({1, 2, 3}, so);
  b.run();
  EXPECT_EQ(b.stop_reason(stopper), StopReason::kStopToken);
  EXPECT_EQ(b.generated(stopper).back(), so.stop_tokens[0]);
  EXPECT_FALSE(b.step());
}

TEST(ContinuousBatching, BadPromptRejectedAndNothingAdded) {
  Transformer<float> model(ModelWeights<float>::random(cfg(), 35));
  Recorded rec;
  Batcher b = make_batcher(model, BatcherOptions{}, rec);
  EXPECT_THROW(b.add({1, 2, 999}), TokenError);
  EXPECT_THROW(b.add({}), TokenError);
  EXPECT_THROW(b.add(std::vector<int>(64, 1)), CacheFullError);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_THROW(b.remove(12), ArgumentError);
  BatcherOptions bad;
  bad.prefill_chunk = 0;
  EXPECT_THROW(make_batcher(model, bad, rec), ConfigError);
}
