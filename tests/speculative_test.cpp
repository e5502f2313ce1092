// Speculative decoding against plain decoding: tokens, every logits row
// (memcmp) and the final cache contents are identical with and without a
// drafter, for greedy and sampled decoding, for drafters that are always
// right, sometimes right and never right, contiguous and paged caches, draft
// lengths 1..8. Also: prompt lookup's proposals, the vocabulary check, the
// drafting counters, and bad options (one test each).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvdecode/generate/speculative.hpp"
#include "test_util.hpp"

using namespace kvd;

namespace {

#define REQUIRE_SHARED()                 \
  if (kvd_test::shared_dir().empty())    \
  GTEST_SKIP() << "../shared (models) is absent; looked in " << KVDECODE_SHARED_DIR

// What a run produced: its tokens, every logits row handed to on_logits (with its
// position) and why it stopped.
struct Outcome {
  std::vector<int> tokens;
  std::vector<int> positions;
  std::vector<std::vector<float>> logits;
  StopReason stop = StopReason::kMaxTokens;
  long proposed = 0, accepted = 0, forwards = 0;
};

GenerateHooks<float> hooks_for(Outcome& run, Sampler& sampler) {
  GenerateHooks<float> h;
  h.choose = [&sampler](const float* l, int n, const std::vector<int>& hist) { return sampler.sample(l, n, hist); };
  h.on_logits = [&run](int pos, const float* l, int n) {
    run.positions.push_back(pos);
    run.logits.emplace_back(l, l + n);
  };
  return h;
}

template <class Cache>
Outcome plain(Transformer<float>& model, const std::vector<int>& prompt, Cache& cache, const GenerateOptions& opt,
          const SamplerConfig& sc) {
  Outcome run;
  Sampler sampler(sc);
  auto r = generate(model, prompt, cache, opt, hooks_for(run, sampler));
  run.tokens = r.tokens;
  run.stop = r.stop;
  return run;
}

template <class Cache>
Outcome speculative(Transformer<float>& model, const std::vector<int>& prompt, Cache& cache, Drafter& drafter,
                const GenerateOptions& opt, const SpeculativeOptions& sopt, const SamplerConfig& sc) {
  Outcome run;
  Sampler sampler(sc);
  auto r = generate_speculative(model, prompt, cache, drafter, opt, sopt, hooks_for(run, sampler));
  run.tokens = r.tokens;
  run.stop = r.stop;
  run.proposed = r.draft_proposed;
  run.accepted = r.draft_accepted;
  run.forwards = r.target_forwards;
  EXPECT_EQ(r.step_seconds.size(), r.tokens.size());
  EXPECT_EQ(r.decode_steps + 1, static_cast<int>(r.tokens.size()));
  EXPECT_LE(r.draft_accepted, r.draft_proposed);
  return run;
}

void expect_same(const Outcome& want, const Outcome& got, const std::string& what) {
  ASSERT_EQ(want.tokens, got.tokens) << what;
  EXPECT_EQ(want.stop, got.stop) << what;
  ASSERT_EQ(want.positions, got.positions) << what;
  ASSERT_EQ(want.logits.size(), got.logits.size()) << what;
  for (std::size_t i = 0; i < want.logits.size(); ++i)
    ASSERT_TRUE(kvd_test::same_bits(want.logits[i].data(), got.logits[i].data(), static_cast<long>(want.logits[i].size())))
        << what << ": logits row " << i << " (position " << want.positions[i] << ") "
        << kvd_test::first_difference(want.logits[i].data(), got.logits[i].data(), static_cast<long>(want.logits[i].size()));
}

// Every stored K and V value of positions [0, length) has the same bits.
template <class A, class B>
void expect_same_cache(const A& a, const B& b, const std::string& what) {
  ASSERT_EQ(a.length(), b.length()) << what;
  const CacheShape& s = a.shape();
  for (int l = 0; l < s.n_layers; ++l)
    for (int p = 0; p < a.length(); ++p)
      for (int h = 0; h < s.n_kv_heads; ++h)
        for (int d = 0; d < s.head_dim; ++d) {
          const float ka = a.key(l, p, h, d), kb = b.key(l, p, h, d), va = a.value(l, p, h, d), vb = b.value(l, p, h, d);
          ASSERT_EQ(std::memcmp(&ka, &kb, sizeof(float)), 0) << what << ": K layer " << l << " pos " << p;
          ASSERT_EQ(std::memcmp(&va, &vb, sizeof(float)), 0) << what << ": V layer " << l << " pos " << p;
        }
}

// Proposes from a known continuation of the prompt (a plain run's tokens): the right
// tokens, or from the `wrong_every`-th drafted position on a wrong one ((t + 1) % V).
class ScriptedDrafter : public Drafter {
 public:
  ScriptedDrafter(std::vector<int> prompt_and_output, int vocab, int wrong_every)
      : script_(std::move(prompt_and_output)), vocab_(vocab), wrong_every_(wrong_every) {}
  void propose(const std::vector<int>& seq, int max_tokens, std::vector<int>& out) override {
    out.clear();
    for (std::size_t i = seq.size(); i < script_.size() && static_cast<int>(out.size()) < max_tokens; ++i) {
      const bool wrong = wrong_every_ > 0 && i % static_cast<std::size_t>(wrong_every_) == 0;
      out.push_back(wrong ? (script_[i] + 1) % vocab_ : script_[i]);
    }
    if (static_cast<int>(out.size()) < max_tokens) out.push_back(0);  // past the script: a guess
  }

 private:
  std::vector<int> script_;
  int vocab_;
  int wrong_every_;  // 0 = always right, 1 = never right
};

ModelConfig test_config() {
  ModelConfig c = kvd_test::small_config(4, 2, 16, 64, 2, 96, 97, 128);
  c.shared_classifier = false;  // a tied random model mostly repeats its input token
  return c;
}

std::vector<SamplerConfig> sampler_configs() {
  std::vector<SamplerConfig> v(4);
  v[1].temperature = 0.9;
  v[1].seed = 11;
  v[2].temperature = 0.7;  // every filter at once
  v[2].top_k = 20;
  v[2].top_p = 0.9;
  v[2].min_p = 0.02;
  v[2].repetition_penalty = 1.3;
  v[2].repetition_last_n = 16;
  v[2].seed = 12345;
  v[3].temperature = 1.5;  // flat: most drafts rejected
  v[3].seed = 3;
  return v;
}

std::string name_of(const SamplerConfig& sc) {
  return detail::msg("T=", sc.temperature, " k=", sc.top_k, " p=", sc.top_p, " min_p=", sc.min_p, " pen=",
                     sc.repetition_penalty);
}

}  // namespace

// ---------------------------------------------------------------------------
// Prompt lookup's proposals.

TEST(PromptLookup, ProposesWhatFollowedTheMostRecentEarlierOccurrence) {
  PromptLookupDrafter d(2);
  std::vector<int> out;
  d.propose({1, 2, 3, 4, 9, 1, 2, 5, 6, 7, 1, 2}, 3, out);  // last (1, 2): most recently followed by 5 6 7
  EXPECT_EQ(out, (std::vector<int>{5, 6, 7}));
  d.propose({1, 2, 3, 4, 9, 1, 2, 5, 6, 7, 1, 2}, 2, out);
  EXPECT_EQ(out, (std::vector<int>{5, 6}));
  d.propose({7, 8, 9, 7, 8}, 5, out);  // clipped at the end of the sequence
  EXPECT_EQ(out, (std::vector<int>{9, 7, 8}));
  d.propose({1, 2, 3, 4}, 4, out);  // no earlier (3, 4)
  EXPECT_TRUE(out.empty());
  d.propose({5, 5}, 4, out);  // shorter than n + 1
  EXPECT_TRUE(out.empty());
  d.propose({5, 5, 5}, 4, out);  // overlapping occurrence at 0
  EXPECT_EQ(out, (std::vector<int>{5}));
}

TEST(PromptLookup, RejectsNonPositiveNgram) {
  try {
    PromptLookupDrafter d(0);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("0"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------
// Identity with plain decoding on a random model (needs no files).

// The pay-off rule on given times (it never changes the output, only the speed).
TEST(DraftTuner, ADraftModelIsProbedWithTwoDraftsAndDroppedWhenItCannotPay) {
  detail::DraftTuner model(4, true), lookup(4, false);
  EXPECT_EQ(model.choose(), 0);  // the first step is plain: it measures a plain step
  EXPECT_EQ(lookup.choose(), 0);
  model.plain_step(0.040);
  lookup.plain_step(0.040);
  EXPECT_EQ(model.choose(), 2);   // a draft model: its prefill yields draft 1, one decode step draft 2
  EXPECT_EQ(lookup.choose(), 4);  // prompt lookup costs no forward: the full length
  // 2 drafts, none kept; the draft's prefill took 0.300 s of its 0.345 s, so one
  // decode step of the draft took 0.045 s: more than a plain step of the target.
  model.verified(2, 0, true, 0.050, 0.345, 0.300);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(model.choose(), 0) << "round " << i;
    model.plain_step(0.040);
  }
}

TEST(DraftTuner, ADraftModelThatCouldPayIsDroppedOnlyAfterFourRounds) {
  // A draft token costs 0.015 s against a 0.040 s plain step: it would pay at full
  // acceptance, not at the 1/3 estimated after one rejection. The tuner keeps
  // drafting one token a round until 4 verifications with drafts, then stops.
  detail::DraftTuner t(4, true);
  t.plain_step(0.040);
  ASSERT_EQ(t.choose(), 2);
  t.verified(2, 0, true, 0.045, 0.315, 0.300);
  for (int round = 2; round <= 4; ++round) {
    ASSERT_EQ(t.choose(), 1) << "round " << round;
    t.verified(1, 0, true, 0.0425, 0.015, 0.0);
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(t.choose(), 0) << "after the 4th round, step " << i;
}

TEST(DraftTuner, ACheapAcceptedDraftKeepsDraftingAndACostlyOneStops) {
  // The same acceptance (every draft kept), two draft costs per token. Drafting k pays
  // while (1 + k) / (plain + k * (row + draft)) beats 1 / plain.
  for (double draft_s : {0.002, 0.060}) {
    detail::DraftTuner t(4, true);
    EXPECT_EQ(t.choose(), 0);
    t.plain_step(0.040);
    ASSERT_EQ(t.choose(), 2);
    t.verified(2, 2, false, 0.044, 0.300 + draft_s, 0.300);  // the first draft came from the feed
    int k = t.choose();
    if (draft_s < 0.01) {
      EXPECT_EQ(k, 4) << "draft_s " << draft_s;
    } else {
      EXPECT_EQ(k, 0) << "draft_s " << draft_s;
    }
  }
}

TEST(DraftTuner, ADropIsConfirmedByAFreshPlainStep) {
  // The first plain step happened to run fast (0.020 s; the machine's steps take
  // 0.050), so the first verification looks dear: its extra rows seem to cost
  // (0.070 - 0.020) / 2 each and no draft length would pay. Before dropping the
  // draft model the tuner takes one more plain step; with the plain cost re-measured
  // (the mean, 0.035 s) the same verification says one draft a round pays, and
  // drafting goes on. Had that step also been fast, the drafter is dropped.
  for (double second : {0.050, 0.020}) {
    detail::DraftTuner t(4, true);
    t.plain_step(0.020);
    ASSERT_EQ(t.choose(), 2);
    t.verified(2, 2, false, 0.070, 0.308, 0.300);
    ASSERT_EQ(t.choose(), 0) << "a plain step to confirm";
    t.plain_step(second);
    if (second > 0.03) {
      EXPECT_GT(t.choose(), 0);
    } else {
      for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(t.choose(), 0) << "dropped, step " << i;
        t.plain_step(0.020);
      }
    }
  }
}

TEST(DraftTuner, AFeedOnlyProbeCountsTheFeedAsTheDraftCost) {
  // draft_tokens = 1: the one draft came from the draft's prefill, so no decode step
  // was timed; the feed's time stands for a draft token's cost (an upper bound).
  detail::DraftTuner t(1, true);
  t.plain_step(0.040);
  ASSERT_EQ(t.choose(), 1);
  t.verified(1, 1, false, 0.042, 0.500, 0.500);  // a 0.5 s prefill cannot pay for one token
  EXPECT_EQ(t.choose(), 0);
}

TEST(Speculative, ScriptedDraftersMatchPlainDecodingForEveryDraftLength) {
  const ModelConfig c = test_config();
  Transformer<float> model(ModelWeights<float>::random(c, 21));
  const std::vector<int> prompt = kvd_test::make_tokens(7, c.vocab_size, 3);
  GenerateOptions opt;
  opt.max_new_tokens = 40;
  for (const SamplerConfig& sc : sampler_configs()) {
    KVCache<float> ref_cache(c);
    const Outcome want = plain(model, prompt, ref_cache, opt, sc);
    ASSERT_EQ(want.tokens.size(), 40u);
    std::vector<int> script = prompt;
    script.insert(script.end(), want.tokens.begin(), want.tokens.end());
    for (int wrong_every : {0, 3, 1}) {  // always, sometimes, never right
      for (int k = 1; k <= 8; ++k) {
        for (bool adaptive : {false, true}) {
          const std::string what = detail::msg(name_of(sc), " wrong_every=", wrong_every, " k=", k, " adaptive=", adaptive);
          ScriptedDrafter drafter(script, c.vocab_size, wrong_every);
          KVCache<float> cache(c);
          SpeculativeOptions so;
          so.draft_tokens = k;
          so.adaptive = adaptive;
          const Outcome got = speculative(model, prompt, cache, drafter, opt, so, sc);
          expect_same(want, got, what);
          expect_same_cache(ref_cache, cache, what);
          if (wrong_every == 1) {
            EXPECT_EQ(got.accepted, 0) << what;
          }
          if (wrong_every == 0 && !adaptive) {
            EXPECT_EQ(got.accepted, got.proposed) << what;
            EXPECT_EQ(got.forwards, (39 + k) / (k + 1)) << what << ": each verification keeps k + 1 tokens";
          }
        }
      }
    }
  }
}

TEST(Speculative, DraftModelsMatchPlainDecodingContiguousAndPaged) {
  const ModelConfig c = test_config();
  Transformer<float> model(ModelWeights<float>::random(c, 21));
  // Drafts: the same weights (always right), the weights rounded to bf16 (mostly
  // right) and unrelated weights (rarely right).
  Transformer<float> same(ModelWeights<float>::random(c, 21));
  kvd_test::NamedConfig bf16{"bf16", c, WeightType::kBF16};
  Transformer<float> rounded(kvd_test::make_weights<float>(bf16, 21));
  Transformer<float> other(ModelWeights<float>::random(c, 99));
  const std::vector<int> prompt = kvd_test::make_tokens(5, c.vocab_size, 8);
  GenerateOptions opt;
  opt.max_new_tokens = 30;
  for (const SamplerConfig& sc : sampler_configs()) {
    KVCache<float> ref_cache(c);
    const Outcome want = plain(model, prompt, ref_cache, opt, sc);
    for (Transformer<float>* draft : {&same, &rounded, &other}) {
      for (int k : {1, 3, 8}) {
        const std::string what = detail::msg(name_of(sc), " draft ", draft == &same ? "same" : draft == &rounded ? "bf16" : "other",
                                             " k=", k);
        Sampler draft_sampler(sc);
        TokenChooser<float> choose = [&draft_sampler](const float* l, int n, const std::vector<int>& h) {
          return draft_sampler.sample(l, n, h);
        };
        SpeculativeOptions so;
        so.draft_tokens = k;
        so.adaptive = false;
        {
          KVCache<float> dcache(draft->config());
          DraftModelDrafter<float, KVCache<float>> drafter(*draft, dcache, c.vocab_size, choose);
          KVCache<float> cache(c);
          const Outcome got = speculative(model, prompt, cache, drafter, opt, so, sc);
          expect_same(want, got, what + " contiguous");
          expect_same_cache(ref_cache, cache, what + " contiguous");
          if (draft == &same) {
            EXPECT_EQ(got.accepted, got.proposed) << what;
          }
        }
        {
          BlockPool<float> pool(c, 16, 16), dpool(draft->config(), 16, 16);
          PagedSequence<float> dseq(dpool);
          DraftModelDrafter<float, PagedSequence<float>> drafter(*draft, dseq, c.vocab_size, choose);
          PagedSequence<float> seq(pool);
          const Outcome got = speculative(model, prompt, seq, drafter, opt, so, sc);
          expect_same(want, got, what + " paged");
          expect_same_cache(ref_cache, seq, what + " paged");
          EXPECT_EQ(pool.free_blocks(), 16 - pool.blocks_for(seq.length())) << what << ": rejected rows hold no block";
        }
      }
    }
  }
}

TEST(Speculative, PagedForkedPrefixCopyOnWriteLeavesTheOtherHolderUntouched) {
  // The prompt is shared with a fork; its last block is partly filled, so the first
  // verification copies it. The fork keeps the original bits, and the speculative
  // sequence ends equal to a plain run from its own fork.
  const ModelConfig c = test_config();
  Transformer<float> model(ModelWeights<float>::random(c, 21));
  const std::vector<int> prompt = kvd_test::make_tokens(21, c.vocab_size, 4);  // 16 + 5: last block partial
  BlockPool<float> pool(c, 24, 16);
  PagedSequence<float> base(pool);
  model.prefill(std::vector<int>(prompt.begin(), prompt.end() - 1), base);
  KVCache<float> before(c);
  model.prefill(std::vector<int>(prompt.begin(), prompt.end() - 1), before);
  PagedSequence<float> plain_seq = base.fork(), spec_seq = base.fork();
  GenerateOptions opt;
  opt.max_new_tokens = 25;
  SamplerConfig sc;
  const std::vector<int> last{prompt.back()};
  const Outcome want = plain(model, last, plain_seq, opt, sc);
  std::vector<int> script = prompt;
  script.insert(script.end(), want.tokens.begin(), want.tokens.end());
  // The drafter sees only what generate sees (the new prompt), so script from `last`.
  std::vector<int> tail_script(script.end() - static_cast<long>(want.tokens.size()) - 1, script.end());
  ScriptedDrafter drafter(tail_script, c.vocab_size, 3);
  SpeculativeOptions so;
  so.draft_tokens = 6;
  const Outcome got = speculative(model, last, spec_seq, drafter, opt, so, sc);
  expect_same(want, got, "forked");
  expect_same_cache(plain_seq, spec_seq, "forked");
  expect_same_cache(before, base, "the shared prefix holder");
  EXPECT_EQ(pool.free_blocks(), 24 - pool.blocks_for(20) - 2 * (pool.blocks_for(spec_seq.length()) - 1))
      << "each fork holds its own copy of block 1 and its later blocks, and nothing else";
}

TEST(Speculative, SlidingWindowCachesMatchPlainDecoding) {
  ModelConfig c = kvd_test::windowed(test_config(), 20);
  Transformer<float> model(ModelWeights<float>::random(c, 5));
  const std::vector<int> prompt = kvd_test::make_tokens(9, c.vocab_size, 9);
  GenerateOptions opt;
  opt.max_new_tokens = 60;  // well past the window and several 16-position blocks
  SamplerConfig sc;
  sc.temperature = 0.8;
  sc.seed = 4;
  KVCache<float> ref_cache(c);
  const Outcome want = plain(model, prompt, ref_cache, opt, sc);
  std::vector<int> script = prompt;
  script.insert(script.end(), want.tokens.begin(), want.tokens.end());
  for (int wrong_every : {0, 4}) {
    for (int k : {2, 8}) {
      const std::string what = detail::msg("window 20 wrong_every=", wrong_every, " k=", k);
      SpeculativeOptions so;
      so.draft_tokens = k;
      so.adaptive = false;
      {
        ScriptedDrafter drafter(script, c.vocab_size, wrong_every);
        KVCache<float> cache(c);
        expect_same(want, speculative(model, prompt, cache, drafter, opt, so, sc), what + " ring");
      }
      {
        ScriptedDrafter drafter(script, c.vocab_size, wrong_every);
        BlockPool<float> pool(c, 8, 16);
        PagedSequence<float> seq(pool);
        expect_same(want, speculative(model, prompt, seq, drafter, opt, so, sc), what + " paged");
      }
    }
  }
}

// Verification of drafts on a mixture of experts (the rows of one verification
// travel together through the experts) gives plain decoding's tokens and cache.
TEST(Speculative, MixtureOfExpertsMatchesPlainDecoding) {
  const ModelConfig c = kvd_test::qwen3moe_like(test_config(), 6, 2);
  Transformer<float> model(ModelWeights<float>::random(c, 6));
  const std::vector<int> prompt = kvd_test::make_tokens(7, c.vocab_size, 3);
  GenerateOptions opt;
  opt.max_new_tokens = 30;
  for (const SamplerConfig& sc : sampler_configs()) {
    KVCache<float> ref_cache(c);
    const Outcome want = plain(model, prompt, ref_cache, opt, sc);
    std::vector<int> script = prompt;
    script.insert(script.end(), want.tokens.begin(), want.tokens.end());
    for (int wrong_every : {0, 3}) {
      for (int k : {1, 5}) {
        const std::string what = detail::msg(name_of(sc), " moe wrong_every=", wrong_every, " k=", k);
        SpeculativeOptions so;
        so.draft_tokens = k;
        so.adaptive = false;
        ScriptedDrafter drafter(script, c.vocab_size, wrong_every);
        KVCache<float> cache(c);
        expect_same(want, speculative(model, prompt, cache, drafter, opt, so, sc), what);
        expect_same_cache(ref_cache, cache, what);
      }
    }
  }
}

TEST(Speculative, StopTokenInsideAnAcceptedDraftEndsGenerationThere) {
  const ModelConfig c = test_config();
  Transformer<float> model(ModelWeights<float>::random(c, 21));
  const std::vector<int> prompt = kvd_test::make_tokens(6, c.vocab_size, 2);
  GenerateOptions opt;
  opt.max_new_tokens = 30;
  KVCache<float> free_cache(c);
  const Outcome free_run = plain(model, prompt, free_cache, opt, {});
  opt.stop_tokens = {free_run.tokens[10]};
  KVCache<float> ref_cache(c);
  const Outcome want = plain(model, prompt, ref_cache, opt, {});
  ASSERT_EQ(want.stop, StopReason::kStopToken);
  std::vector<int> script = prompt;
  script.insert(script.end(), free_run.tokens.begin(), free_run.tokens.end());
  ScriptedDrafter drafter(script, c.vocab_size, 0);
  KVCache<float> cache(c);
  SpeculativeOptions so;
  so.draft_tokens = 8;
  const Outcome got = speculative(model, prompt, cache, drafter, opt, so, {});
  expect_same(want, got, "stop token");
  expect_same_cache(ref_cache, cache, "stop token");
}

TEST(Speculative, ContextFullEndsAsPlainDecodingDoes) {
  const ModelConfig c = test_config();
  Transformer<float> model(ModelWeights<float>::random(c, 21));
  const std::vector<int> prompt = kvd_test::make_tokens(6, c.vocab_size, 2);
  GenerateOptions opt;
  opt.max_new_tokens = 100;
  KVCache<float> ref_cache(c, 23);
  const Outcome want = plain(model, prompt, ref_cache, opt, {});
  ASSERT_EQ(want.stop, StopReason::kContextFull);
  std::vector<int> script = prompt;
  script.insert(script.end(), want.tokens.begin(), want.tokens.end());
  ScriptedDrafter drafter(script, c.vocab_size, 0);
  KVCache<float> cache(c, 23);
  SpeculativeOptions so;
  so.draft_tokens = 8;
  const Outcome got = speculative(model, prompt, cache, drafter, opt, so, {});
  expect_same(want, got, "context full");
  expect_same_cache(ref_cache, cache, "context full");
}

TEST(Speculative, PromptLookupMatchesPlainDecoding) {
  const ModelConfig c = test_config();
  Transformer<float> model(ModelWeights<float>::random(c, 21));
  std::vector<int> prompt = kvd_test::make_tokens(12, c.vocab_size, 5);
  GenerateOptions opt;
  opt.max_new_tokens = 40;
  for (const SamplerConfig& sc : sampler_configs()) {
    KVCache<float> ref_cache(c);
    const Outcome want = plain(model, prompt, ref_cache, opt, sc);
    for (int ngram : {1, 2, 3}) {
      PromptLookupDrafter drafter(ngram);
      KVCache<float> cache(c);
      SpeculativeOptions so;
      so.draft_tokens = 5;
      expect_same(want, speculative(model, prompt, cache, drafter, opt, so, sc), detail::msg(name_of(sc), " n=", ngram));
      expect_same_cache(ref_cache, cache, "lookup");
    }
  }
}

TEST(Speculative, PromptLookupAcceptsARepeatedText) {
  // Greedy on a prompt that is the model's own greedy output twice: lookup finds the
  // continuation and most drafts are accepted.
  const ModelConfig c = test_config();
  Transformer<float> model(ModelWeights<float>::random(c, 21));
  const std::vector<int> seed_prompt = kvd_test::make_tokens(4, c.vocab_size, 6);
  GenerateOptions opt;
  opt.max_new_tokens = 60;
  KVCache<float> c0(c);
  const Outcome first = plain(model, seed_prompt, c0, opt, {});
  std::vector<int> prompt = seed_prompt;
  prompt.insert(prompt.end(), first.tokens.begin(), first.tokens.end());
  prompt.insert(prompt.end(), seed_prompt.begin(), seed_prompt.end());  // the output follows this again
  KVCache<float> ref_cache(c);
  const Outcome want = plain(model, prompt, ref_cache, opt, {});
  PromptLookupDrafter drafter(3);
  KVCache<float> cache(c);
  SpeculativeOptions so;
  so.draft_tokens = 8;
  so.adaptive = false;  // the adaptive rule measures time, so its counts vary from run to run
  const Outcome got = speculative(model, prompt, cache, drafter, opt, so, {});
  expect_same(want, got, "repeated");
  EXPECT_GT(got.accepted, got.proposed / 2) << "accepted " << got.accepted << " of " << got.proposed;
  EXPECT_LT(got.forwards, 60 / 2);
}

// ---------------------------------------------------------------------------
// Real models from ../shared: llama.cpp's Q2_K of rand256 drafting for its F32.

TEST(SpeculativeGGUF, Rand256Q2KDraftsForF32) {
  REQUIRE_SHARED();
  const std::string dir = kvd_test::shared_dir() + "/models/gguf/";
  Transformer<float> model(load_gguf_model<float>(dir + "rand256-F32.gguf"));
  Transformer<float> draft(load_gguf_model<float>(dir + "rand256-Q2_K.gguf"));
  const ModelConfig& c = model.config();
  const std::vector<int> prompt = kvd_test::make_tokens(8, c.vocab_size, 1);
  GenerateOptions opt;
  opt.max_new_tokens = 24;
  for (const SamplerConfig& sc : sampler_configs()) {
    KVCache<float> ref_cache(c);
    const Outcome want = plain(model, prompt, ref_cache, opt, sc);
    for (int k : {1, 5}) {
      Sampler draft_sampler(sc);
      KVCache<float> dcache(draft.config());
      DraftModelDrafter<float, KVCache<float>> drafter(
          draft, dcache, c.vocab_size,
          [&draft_sampler](const float* l, int n, const std::vector<int>& h) { return draft_sampler.sample(l, n, h); });
      KVCache<float> cache(c);
      SpeculativeOptions so;
      so.draft_tokens = k;
      so.adaptive = false;
      const Outcome got = speculative(model, prompt, cache, drafter, opt, so, sc);
      expect_same(want, got, detail::msg(name_of(sc), " k=", k));
      expect_same_cache(ref_cache, cache, "rand256");
    }
  }
}

TEST(SpeculativeGGUF, Stories260KQ4KMDraftsForF32) {
  REQUIRE_SHARED();
  const std::string dir = kvd_test::shared_dir() + "/models/gguf/";
  Transformer<float> model(load_gguf_model<float>(dir + "stories260K-F32.gguf"));
  Transformer<float> draft(load_gguf_model<float>(dir + "stories260K-Q4_K_M.gguf"));
  const std::vector<int> prompt{1, 403, 407, 261, 378};  // "Once upon a time"
  GenerateOptions opt;
  opt.max_new_tokens = 64;
  SamplerConfig sc;
  KVCache<float> ref_cache(model.config());
  const Outcome want = plain(model, prompt, ref_cache, opt, sc);
  KVCache<float> dcache(draft.config());
  DraftModelDrafter<float, KVCache<float>> drafter(draft, dcache, model.config().vocab_size);
  KVCache<float> cache(model.config());
  SpeculativeOptions so;
  so.adaptive = false;
  const Outcome got = speculative(model, prompt, cache, drafter, opt, so, sc);
  expect_same(want, got, "stories260K");
  expect_same_cache(ref_cache, cache, "stories260K");
  EXPECT_GT(got.accepted, got.proposed / 2) << "a Q4_K_M copy mostly agrees with its F32 model: " << got.accepted
                                            << " of " << got.proposed;
}

TEST(SpeculativeGGUF, VocabularyCheckNamesTheFirstDifference) {
  REQUIRE_SHARED();
  const std::string dir = kvd_test::shared_dir() + "/models/gguf/";
  const auto a = load_tokenizer(dir + "rand256-F32.gguf");
  const auto b = load_tokenizer(dir + "rand256-Q2_K.gguf");
  EXPECT_NO_THROW(check_same_vocabulary(*a, *b));
  const auto q = load_tokenizer(dir + "qwen2arch-F32.gguf");
  try {
    check_same_vocabulary(*a, *q);
    FAIL();
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("vocabulary"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "control bytes are escaped: " << m;
  }
}

// ---------------------------------------------------------------------------
// Bad inputs: one test each.

TEST(SpeculativeErrors, DraftModelOfAnotherVocabularySize) {
  const ModelConfig c = test_config();
  ModelConfig other = c;
  other.vocab_size = 50;
  Transformer<float> draft(ModelWeights<float>::random(other, 1));
  KVCache<float> dcache(other);
  try {
    DraftModelDrafter<float, KVCache<float>> d(draft, dcache, c.vocab_size);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size = 50"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("97"), std::string::npos) << e.what();
  }
}

TEST(SpeculativeErrors, ZeroDraftTokens) {
  const ModelConfig c = test_config();
  Transformer<float> model(ModelWeights<float>::random(c, 1));
  KVCache<float> cache(c);
  PromptLookupDrafter d(2);
  SpeculativeOptions so;
  so.draft_tokens = 0;
  try {
    generate_speculative(model, {1, 2}, cache, d, GenerateOptions{}, so);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("draft_tokens = 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(), 0);
}

TEST(SpeculativeErrors, WithoutTheCache) {
  const ModelConfig c = test_config();
  Transformer<float> model(ModelWeights<float>::random(c, 1));
  KVCache<float> cache(c);
  PromptLookupDrafter d(2);
  GenerateOptions opt;
  opt.use_cache = false;
  EXPECT_THROW(generate_speculative(model, {1, 2}, cache, d, opt), ConfigError);
  EXPECT_EQ(cache.length(), 0);
}

TEST(SpeculativeErrors, EmptyPrompt) {
  const ModelConfig c = test_config();
  Transformer<float> model(ModelWeights<float>::random(c, 1));
  KVCache<float> cache(c);
  PromptLookupDrafter d(2);
  EXPECT_THROW(generate_speculative(model, {}, cache, d, GenerateOptions{}), TokenError);
  EXPECT_EQ(cache.length(), 0);
}
