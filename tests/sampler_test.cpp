// Sampler tests: the position-keyed generator against SplitMix64's published
// vector and pinned constants,
// greedy decoding, every filter against a plain reference implementation,
// empirical frequencies against softmax, determinism, the repetition penalty,
// bad inputs (one test each), config validation (one test per field), and
// "no allocation after the first call" measured with a counting operator new.
#include "kvdecode/generate/sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

// Counts heap allocations while g_count_allocations is set (this test binary only).
// AddressSanitizer brings its own operator new, which must not be replaced, so
// under it the counter stays off and the allocation test is skipped.
#if defined(__SANITIZE_ADDRESS__)
#define KVD_TEST_COUNT_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVD_TEST_COUNT_ALLOCATIONS 0
#endif
#endif
#ifndef KVD_TEST_COUNT_ALLOCATIONS
#define KVD_TEST_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<bool> g_count_allocations{false};
std::atomic<long> g_allocations{0};
}  // namespace

#if KVD_TEST_COUNT_ALLOCATIONS
void* operator new(std::size_t size) {
  if (g_count_allocations.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// noinline: once inlined into a `delete` expression, GCC's -Wmismatched-new-delete
// no longer sees that these free() what the operator new above malloc()ed.
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------
// The generator: random_bits_at(seed, pos), counter-based.

TEST(Random, SplitMix64MatchesPublishedVector) {
  // First outputs of SplitMix64 from seed 1234567 (the reference implementation's
  // test vector, also Java's SplittableRandom mixing).
  std::uint64_t state = 1234567;
  const std::uint64_t want[] = {6457827717110365317ull, 3203168211198807973ull, 9817491932198370423ull,
                                4593380528125082431ull, 16408922859458223821ull};
  for (std::uint64_t w : want) EXPECT_EQ(kvd::splitmix64(state), w);
}

TEST(Random, BitsAtPositionAreTheSplitMixSequenceFromTheKey) {
  // The documented definition: position p is the p-th output of SplitMix64 started at
  // key = splitmix64(seed), so walking the sequence and jumping to p agree.
  for (std::uint64_t seed : {0ull, 1ull, 42ull, 0xFFFFFFFFFFFFFFFFull}) {
    std::uint64_t key_state = seed;
    std::uint64_t state = kvd::splitmix64(key_state);
    for (std::uint64_t pos = 0; pos < 1000; ++pos) ASSERT_EQ(kvd::random_bits_at(seed, pos), kvd::splitmix64(state));
  }
}

TEST(Random, Seed42IsPinned) {
  // If this fails, every seeded sample kvdecode produces has changed.
  EXPECT_EQ(kvd::random_bits_at(42, 0), 0x57E1FABA65107204ull);
  EXPECT_EQ(kvd::random_bits_at(42, 1), 0xF4ABD143FEB24055ull);
  EXPECT_EQ(kvd::random_bits_at(42, 1000000), 0x8505DA9E8A915C81ull);
  EXPECT_EQ(kvd::uniform_at(42, 0), 0.34329192209867343);
  EXPECT_EQ(kvd::uniform_at(42, 7), 0.73472045846236389);
}

TEST(Random, UniformIsTop53BitsInUnitInterval) {
  for (std::uint64_t pos = 0; pos < 10000; ++pos) {
    const double d = kvd::uniform_at(7, pos);
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    ASSERT_EQ(d, static_cast<double>(kvd::random_bits_at(7, pos) >> 11) / 9007199254740992.0);  // 2^53
  }
}

TEST(Random, NeighbouringSeedsAreNotShiftsOfEachOther) {
  // A plain SplitMix64 seeded with s + gamma is seed s shifted by one; the key step
  // prevents that: no draw of seed 1 at positions 0..99 reappears for seed 2.
  std::set<std::uint64_t> a;
  for (std::uint64_t pos = 0; pos < 100; ++pos) a.insert(kvd::random_bits_at(1, pos));
  for (std::uint64_t pos = 0; pos < 100; ++pos) EXPECT_EQ(a.count(kvd::random_bits_at(2, pos)), 0u);
}

// ---------------------------------------------------------------------------
// A plain reference of the documented pipeline: full stable sort for the ranking,
// std::set for the penalty window, boolean keep flags for the filters.
std::vector<double> reference_distribution(std::vector<double> logits, const kvd::SamplerConfig& c,
                                           const std::vector<int>& history) {
  const int V = static_cast<int>(logits.size());
  if (c.repetition_penalty != 1.0) {
    const std::size_t n = std::min(history.size(), static_cast<std::size_t>(c.repetition_last_n));
    const std::set<int> window(history.end() - static_cast<std::ptrdiff_t>(n), history.end());
    for (int t : window) logits[t] = logits[t] > 0 ? logits[t] / c.repetition_penalty : logits[t] * c.repetition_penalty;
  }
  std::vector<double> p(V, 0.0);
  std::vector<int> rank(V);
  std::iota(rank.begin(), rank.end(), 0);
  std::stable_sort(rank.begin(), rank.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (c.temperature == 0) {
    p[rank[0]] = 1;
    return p;
  }
  const double mx = logits[rank[0]];
  double sum = 0;
  for (int i = 0; i < V; ++i) sum += p[i] = std::exp((logits[i] - mx) / c.temperature);
  for (double& x : p) x /= sum;
  std::vector<bool> keep(V);
  for (int i = 0; i < V; ++i) keep[i] = p[i] > 0;
  if (c.top_k > 0) {
    int count = 0;
    for (int id : rank)
      if (keep[id] && ++count > c.top_k) keep[id] = false;
  }
  if (c.top_p < 1) {
    double mass = 0;
    for (int id : rank)
      if (keep[id]) mass += p[id];
    double cum = 0;
    bool reached = false;
    for (int id : rank) {
      if (!keep[id]) continue;
      if (reached) {
        keep[id] = false;
      } else {
        cum += p[id] / mass;
        reached = cum >= c.top_p;
      }
    }
  }
  if (c.min_p > 0) {
    double pmax = 0;
    for (int i = 0; i < V; ++i)
      if (keep[i]) pmax = std::max(pmax, p[i]);
    for (int i = 0; i < V; ++i)
      if (keep[i] && p[i] < c.min_p * pmax) keep[i] = false;
  }
  double mass = 0;
  for (int i = 0; i < V; ++i) mass += keep[i] ? p[i] : 0;
  for (int i = 0; i < V; ++i) p[i] = keep[i] ? p[i] / mass : 0;
  return p;
}

std::set<int> support(const std::vector<double>& p) {
  std::set<int> s;
  for (int i = 0; i < static_cast<int>(p.size()); ++i)
    if (p[i] > 0) s.insert(i);
  return s;
}

kvd::SamplerConfig with_temperature(double t) {
  kvd::SamplerConfig c;
  c.temperature = t;
  return c;
}

// The kept set of Sampler::distribution equals the reference's exactly, and the drawn
// tokens over many samples are exactly that set.
void expect_matches_reference(const std::vector<double>& logits, const kvd::SamplerConfig& c,
                              const std::vector<int>& history, const std::set<int>& want_support) {
  kvd::Sampler s(c);
  std::vector<double> got;
  s.distribution(logits.data(), static_cast<int>(logits.size()), history, got);
  const auto ref = reference_distribution(logits, c, history);
  EXPECT_EQ(support(got), want_support);
  EXPECT_EQ(support(ref), want_support);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-12) << "token " << i;
  std::set<int> drawn;
  for (int i = 0; i < 2000; ++i) drawn.insert(s.sample(logits.data(), static_cast<int>(logits.size()), history, i));
  EXPECT_EQ(drawn, want_support);
}

// ---------------------------------------------------------------------------
// Greedy and top-k = 1.

TEST(SamplerGreedy, ReturnsArgmaxLowestIdOnTies) {
  kvd::Sampler s(kvd::SamplerConfig{});
  const std::vector<float> a = {0.1f, 3.0f, -2.0f, 2.5f};
  EXPECT_EQ(s.sample(a.data(), 4), 1);
  const std::vector<double> tie = {1.0, 5.0, 5.0, -kInf};
  EXPECT_EQ(s.sample(tie.data(), 4), 1);
  const std::vector<double> neg = {-kInf, -7.0, -kInf};
  EXPECT_EQ(s.sample(neg.data(), 3), 1);
}

TEST(SamplerGreedy, MatchesScalarArgmaxOnRandomRows) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  kvd::Sampler s(kvd::SamplerConfig{});
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<float> logits(512);
    for (float& x : logits) x = std::round(normal(gen));  // rounding makes ties common
    const int want = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(s.sample(logits.data(), 512), want);
  }
}

TEST(SamplerTopK, TopKOneEqualsGreedyAtAnyTemperature) {
  std::mt19937 gen(4);
  std::normal_distribution<double> normal(0.0, 2.0);
  for (double t : {0.01, 0.5, 1.0, 7.0, 1e6}) {
    kvd::SamplerConfig c = with_temperature(t);
    c.top_k = 1;
    c.seed = 99;
    kvd::Sampler s(c), greedy(kvd::SamplerConfig{});
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<double> logits(64);
      for (double& x : logits) x = std::round(normal(gen) * 2) / 2;  // ties
      logits[trial % 64] += 1e-13;  // a near-tie that exp() may round away
      ASSERT_EQ(s.sample(logits.data(), 64), greedy.sample(logits.data(), 64)) << "T = " << t;
    }
  }
}

// ---------------------------------------------------------------------------
// Filters against the reference, on hand-made distributions. Logits {2, 1, 0, -1}
// at T = 1 give p = {0.644, 0.237, 0.087, 0.032}.

const std::vector<double> kFour = {2.0, 1.0, 0.0, -1.0};

TEST(SamplerFilters, TemperatureOnlyKeepsEveryToken) {
  expect_matches_reference(kFour, with_temperature(1.0), {}, {0, 1, 2, 3});
}

TEST(SamplerFilters, TopKKeepsKBest) {
  auto c = with_temperature(1.0);
  c.top_k = 2;
  expect_matches_reference(kFour, c, {}, {0, 1});
  c.top_k = 3;
  expect_matches_reference({0.0, 5.0, 1.0, 5.0, 5.0}, c, {}, {1, 3, 4});
  c.top_k = 2;  // three-way tie at the top: lower ids win
  expect_matches_reference({0.0, 5.0, 1.0, 5.0, 5.0}, c, {}, {1, 3});
  c.top_k = 10;  // more than the vocabulary: off
  expect_matches_reference(kFour, c, {}, {0, 1, 2, 3});
}

TEST(SamplerFilters, TopPKeepsSmallestNucleus) {
  auto c = with_temperature(1.0);
  c.top_p = 0.5;
  expect_matches_reference(kFour, c, {}, {0});
  c.top_p = 0.7;
  expect_matches_reference(kFour, c, {}, {0, 1});
  c.top_p = 0.9;
  expect_matches_reference(kFour, c, {}, {0, 1, 2});
  c.top_p = 0.99;
  expect_matches_reference(kFour, c, {}, {0, 1, 2, 3});
  c.top_p = 0.6;  // two equal tokens of p = 0.5 each: the lower id comes first
  expect_matches_reference({3.0, 3.0, -kInf}, c, {}, {0, 1});
  c.top_p = 0.4;
  expect_matches_reference({3.0, 3.0, -kInf}, c, {}, {0});
}

TEST(SamplerFilters, TopPRenormalisesAfterTopK) {
  // After top-k = 2, p = {0.731, 0.269}; top-p 0.72 keeps token 0 alone, whereas
  // over the full distribution (0.644 < 0.72) it would also keep token 1.
  auto c = with_temperature(1.0);
  c.top_k = 2;
  c.top_p = 0.72;
  expect_matches_reference(kFour, c, {}, {0});
}

TEST(SamplerFilters, MinPDropsTokensBelowFractionOfMax) {
  // Relative to the max: {1, 0.368, 0.135, 0.050}.
  auto c = with_temperature(1.0);
  c.min_p = 0.3;
  expect_matches_reference(kFour, c, {}, {0, 1});
  c.min_p = 0.1;
  expect_matches_reference(kFour, c, {}, {0, 1, 2});
  c.min_p = 1.0;
  expect_matches_reference(kFour, c, {}, {0});
}

TEST(SamplerFilters, NegativeInfinityIsNeverDrawn) {
  expect_matches_reference({-kInf, 0.0, -kInf, 0.5}, with_temperature(2.0), {}, {1, 3});
}

TEST(SamplerFilters, RandomConfigsMatchReference) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> vocab(1, 12), half_steps(-8, 8), k_dist(0, 6), coin(0, 3);
  const double top_ps[] = {1.0, 0.95, 0.8, 0.55, 0.3, 0.1};
  const double min_ps[] = {0.0, 0.0, 0.05, 0.2, 0.5};
  const double temps[] = {0.0, 0.3, 1.0, 2.5};
  const double pens[] = {1.0, 1.3, 0.7};
  for (int trial = 0; trial < 500; ++trial) {
    const int V = vocab(gen);
    std::vector<double> logits(V);
    for (double& x : logits) x = coin(gen) == 0 && V > 1 ? -kInf : half_steps(gen) * 0.5 + 0.123;
    logits[0] = 0.25;  // at least one finite logit
    std::vector<int> history;
    for (int i = coin(gen) * 3; i > 0; --i) history.push_back(static_cast<int>(gen() % V));
    kvd::SamplerConfig c;
    c.temperature = temps[gen() % 4];
    c.top_k = k_dist(gen);
    c.top_p = top_ps[gen() % 6];
    c.min_p = min_ps[gen() % 5];
    c.repetition_penalty = pens[gen() % 3];
    c.repetition_last_n = static_cast<int>(gen() % 5);
    kvd::Sampler s(c);
    std::vector<double> got;
    s.distribution(logits.data(), V, history, got);
    const auto ref = reference_distribution(logits, c, history);
    ASSERT_EQ(support(got), support(ref)) << "trial " << trial;
    for (int i = 0; i < V; ++i) ASSERT_NEAR(got[i], ref[i], 1e-12) << "trial " << trial << " token " << i;
    for (int draw = 0; draw < 20; ++draw) ASSERT_GT(ref[s.sample(logits.data(), V, history, draw)], 0.0);
  }
}

// ---------------------------------------------------------------------------
// Statistics and determinism.

TEST(SamplerStats, FrequenciesMatchSoftmaxWithinStandardErrors) {
  const std::vector<float> logits = {1.0f, 0.5f, -0.5f, 2.0f};
  const double T = 0.8;
  const int N = 20000;
  kvd::SamplerConfig c = with_temperature(T);
  c.seed = 2024;
  kvd::Sampler s(c);
  std::vector<int> counts(4, 0);
  for (int i = 0; i < N; ++i) ++counts[s.sample(logits.data(), 4, {}, i)];
  double sum = 0;
  std::vector<double> p(4);
  for (int i = 0; i < 4; ++i) sum += p[i] = std::exp(logits[i] / T);
  for (int i = 0; i < 4; ++i) {
    p[i] /= sum;
    const double freq = static_cast<double>(counts[i]) / N;
    const double se = std::sqrt(p[i] * (1 - p[i]) / N);
    EXPECT_LT(std::abs(freq - p[i]), 4 * se) << "token " << i << ": freq " << freq << " vs p " << p[i];
  }
}

std::vector<int> run(std::uint64_t seed, int n) {
  kvd::SamplerConfig c = with_temperature(1.0);
  c.top_p = 0.95;
  c.seed = seed;
  kvd::Sampler s(c);
  std::vector<double> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.7) * 2;
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits.data(), 100, out));
  return out;
}

TEST(SamplerDeterminism, SameSeedSameSequence) { EXPECT_EQ(run(7, 200), run(7, 200)); }

TEST(SamplerDeterminism, DifferentSeedsDiffer) { EXPECT_NE(run(7, 200), run(8, 200)); }

TEST(SamplerDeterminism, DrawDependsOnlyOnSeedAndPosition) {
  // The same position gives the same token whatever was drawn before, in any order;
  // the default position is history.size().
  kvd::Sampler a(with_temperature(1.0)), b(with_temperature(1.0));
  const std::vector<double> logits = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5};
  std::vector<int> forward, backward(50);
  for (int i = 0; i < 50; ++i) forward.push_back(a.sample(logits.data(), 6, {}, i));
  for (int i = 49; i >= 0; --i) backward[static_cast<std::size_t>(i)] = b.sample(logits.data(), 6, {}, i);
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(a.sample(logits.data(), 6, {}, 3), forward[3]);
  EXPECT_EQ(a.sample(logits.data(), 6, {5, 5, 5}), forward[3]);  // position 3 by default
  std::set<int> distinct(forward.begin(), forward.end());
  EXPECT_GT(distinct.size(), 3u) << "positions should not all draw the same token";
}

TEST(SamplerDeterminism, UsesUniformAtSeedAndPosition) {
  // Two equally likely tokens: token 0 exactly when uniform_at(seed, pos) * 1 < 0.5.
  kvd::SamplerConfig c = with_temperature(1.0);
  c.seed = 31;
  kvd::Sampler s(c);
  const std::vector<double> logits = {0.0, 0.0};
  for (long pos = 0; pos < 200; ++pos)
    ASSERT_EQ(s.sample(logits.data(), 2, {}, pos), kvd::uniform_at(31, static_cast<std::uint64_t>(pos)) < 0.5 ? 0 : 1);
}

TEST(SamplerErrors, NegativePosition) {
  kvd::Sampler s(with_temperature(1.0));
  const std::vector<double> logits = {0.0, 1.0};
  try {
    s.sample(logits.data(), 2, {}, -1);
    FAIL();
  } catch (const kvd::ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("pos = -1"), std::string::npos) << e.what();
  }
}

TEST(SamplerDeterminism, FloatAndDoubleLogitsAgree) {
  std::vector<float> f(50);
  std::vector<double> d(50);
  for (int i = 0; i < 50; ++i) d[i] = f[i] = static_cast<float>(std::cos(i * 1.3));
  kvd::SamplerConfig c = with_temperature(0.7);
  c.top_k = 20;
  kvd::Sampler a(c), b(c);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.sample(f.data(), 50), b.sample(d.data(), 50));
}

TEST(SamplerDeterminism, DistributionChangesNothing) {
  kvd::Sampler a(with_temperature(1.0)), b(with_temperature(1.0));
  const std::vector<double> logits = {0.3, 0.1, 0.2};
  std::vector<double> probs;
  for (int i = 0; i < 20; ++i) {
    a.distribution(logits.data(), 3, {}, probs);
    ASSERT_EQ(a.sample(logits.data(), 3, {}, i), b.sample(logits.data(), 3, {}, i));
  }
}

// ---------------------------------------------------------------------------
// Repetition penalty.

TEST(SamplerPenalty, ChangesArgmaxInCraftedCase) {
  kvd::SamplerConfig c;
  c.repetition_penalty = 1.5;
  kvd::Sampler s(c);
  const std::vector<double> pos = {3.0, 2.9, 0.0};
  EXPECT_EQ(s.sample(pos.data(), 3, {}), 0);
  EXPECT_EQ(s.sample(pos.data(), 3, {2, 0}), 1);  // 3 / 1.5 = 2 < 2.9
  const std::vector<double> neg = {-1.0, -1.2};
  EXPECT_EQ(s.sample(neg.data(), 2, {}), 0);
  EXPECT_EQ(s.sample(neg.data(), 2, {0}), 1);  // -1 * 1.5 = -1.5 < -1.2
}

TEST(SamplerPenalty, EachDistinctTokenPenalisedOnce) {
  kvd::SamplerConfig c;
  c.repetition_penalty = 1.1;
  kvd::Sampler s(c);
  const std::vector<double> logits = {3.0, 2.5};
  // Once: 3 / 1.1 = 2.73 > 2.5. Three times would give 2.25 < 2.5.
  EXPECT_EQ(s.sample(logits.data(), 2, {0, 0, 0}), 0);
}

TEST(SamplerPenalty, OnlyLastNEntriesCount) {
  kvd::SamplerConfig c;
  c.repetition_penalty = 1.5;
  c.repetition_last_n = 2;
  kvd::Sampler s(c);
  const std::vector<double> logits = {3.0, 2.9, 0.0};
  EXPECT_EQ(s.sample(logits.data(), 3, {0, 2, 2}), 0);  // token 0 is outside the window
  EXPECT_EQ(s.sample(logits.data(), 3, {2, 0, 2}), 1);
  c.repetition_last_n = 0;
  kvd::Sampler off(c);
  EXPECT_EQ(off.sample(logits.data(), 3, {0}), 0);
}

TEST(SamplerPenalty, OverflowingPenaltyStillPicksAValidToken) {
  kvd::SamplerConfig c = with_temperature(1.0);
  c.repetition_penalty = 1e-300;  // 1e10 / 1e-300 overflows to +inf
  kvd::Sampler s(c);
  const std::vector<double> logits = {0.0, 1e10, 5.0};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(logits.data(), 3, {1}), 1);
}

// ---------------------------------------------------------------------------
// Bad inputs: one test each. A throwing call leaves nothing behind that changes later draws.

void expect_rng_untouched_after(const std::function<void(kvd::Sampler&)>& bad_call) {
  kvd::Sampler a(with_temperature(1.0)), b(with_temperature(1.0));
  EXPECT_ANY_THROW(bad_call(a));
  const std::vector<double> logits = {0.0, 0.1, 0.2, 0.3};
  for (int i = 0; i < 20; ++i) ASSERT_EQ(a.sample(logits.data(), 4, {}, i), b.sample(logits.data(), 4, {}, i));
}

TEST(SamplerErrors, NullLogits) {
  kvd::Sampler s(with_temperature(1.0));
  EXPECT_THROW(s.sample(static_cast<const float*>(nullptr), 4), kvd::ArgumentError);
  expect_rng_untouched_after([](kvd::Sampler& x) { x.sample(static_cast<const double*>(nullptr), 4); });
}

TEST(SamplerErrors, NonPositiveVocabSize) {
  kvd::Sampler s(with_temperature(1.0));
  const std::vector<double> logits = {0.0};
  EXPECT_THROW(s.sample(logits.data(), 0), kvd::ArgumentError);
  try {
    s.sample(logits.data(), -3);
    FAIL();
  } catch (const kvd::ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("-3"), std::string::npos) << e.what();
  }
}

TEST(SamplerErrors, NanLogit) {
  const std::vector<double> logits = {0.0, std::nan(""), 1.0};
  kvd::Sampler s(with_temperature(1.0));
  try {
    s.sample(logits.data(), 3);
    FAIL();
  } catch (const kvd::ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("logit[1]"), std::string::npos) << e.what();
  }
  expect_rng_untouched_after([&](kvd::Sampler& x) { x.sample(logits.data(), 3); });
}

TEST(SamplerErrors, PositiveInfinityLogit) {
  const std::vector<float> logits = {0.0f, std::numeric_limits<float>::infinity()};
  kvd::Sampler s(kvd::SamplerConfig{});
  EXPECT_THROW(s.sample(logits.data(), 2), kvd::ArgumentError);
}

TEST(SamplerErrors, AllLogitsNegativeInfinity) {
  const std::vector<double> logits = {-kInf, -kInf};
  kvd::Sampler greedy(kvd::SamplerConfig{}), s(with_temperature(1.0));
  EXPECT_THROW(greedy.sample(logits.data(), 2), kvd::ArgumentError);
  EXPECT_THROW(s.sample(logits.data(), 2), kvd::ArgumentError);
}

TEST(SamplerErrors, HistoryTokenOutOfRange) {
  kvd::SamplerConfig c = with_temperature(1.0);
  c.repetition_penalty = 1.2;
  kvd::Sampler s(c);
  const std::vector<double> logits = {0.0, 1.0, 2.0, 3.0};
  try {
    s.sample(logits.data(), 4, {1, 99});
    FAIL();
  } catch (const kvd::TokenError& e) {
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vocab_size = 4"), std::string::npos) << e.what();
  }
  // With the penalty off, history is not read at all.
  kvd::Sampler off(with_temperature(1.0));
  EXPECT_NO_THROW(off.sample(logits.data(), 4, {99}));
}

TEST(SamplerErrors, InputLogitsAreNotModified) {
  kvd::SamplerConfig c = with_temperature(0.5);
  c.repetition_penalty = 2.0;
  c.top_k = 2;
  kvd::Sampler s(c);
  std::vector<float> logits = {1.0f, -2.0f, 3.0f, 0.5f};
  const auto before = logits;
  s.sample(logits.data(), 4, {0, 1, 2});
  EXPECT_EQ(logits, before);
}

// ---------------------------------------------------------------------------
// Config validation: one test per field.

void expect_config_error(const kvd::SamplerConfig& c, const std::string& field, const std::string& value) {
  try {
    c.validate();
    FAIL() << "expected ConfigError for " << field;
  } catch (const kvd::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(field), std::string::npos) << what;
    EXPECT_NE(what.find(value), std::string::npos) << what;
  }
  EXPECT_THROW(kvd::Sampler{c}, kvd::ConfigError);
}

TEST(SamplerConfig, DefaultsAreValidAndGreedy) {
  kvd::SamplerConfig c;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.temperature, 0.0);
}

TEST(SamplerConfig, NegativeTemperature) {
  kvd::SamplerConfig c;
  c.temperature = -0.5;
  expect_config_error(c, "temperature", "-0.5");
  c.temperature = std::nan("");
  expect_config_error(c, "temperature", "nan");
  c.temperature = kInf;
  expect_config_error(c, "temperature", "inf");
}

TEST(SamplerConfig, NegativeTopK) {
  kvd::SamplerConfig c;
  c.top_k = -1;
  expect_config_error(c, "top_k", "-1");
}

TEST(SamplerConfig, TopPOutsideZeroOne) {
  kvd::SamplerConfig c;
  c.top_p = 0.0;
  expect_config_error(c, "top_p", "(0, 1]");
  c.top_p = 1.5;
  expect_config_error(c, "top_p", "1.5");
}

TEST(SamplerConfig, MinPOutsideZeroOne) {
  kvd::SamplerConfig c;
  c.min_p = -0.1;
  expect_config_error(c, "min_p", "-0.1");
  c.min_p = 1.01;
  expect_config_error(c, "min_p", "1.01");
}

TEST(SamplerConfig, NonPositiveRepetitionPenalty) {
  kvd::SamplerConfig c;
  c.repetition_penalty = 0.0;
  expect_config_error(c, "repetition_penalty", "(0, inf)");
  c.repetition_penalty = -2.0;
  expect_config_error(c, "repetition_penalty", "-2");
}

TEST(SamplerConfig, NegativeRepetitionLastN) {
  kvd::SamplerConfig c;
  c.repetition_last_n = -5;
  expect_config_error(c, "repetition_last_n", "-5");
}

// ---------------------------------------------------------------------------
// Allocation.

TEST(SamplerAlloc, NoAllocationAfterFirstCallForAVocabSize) {
  if (!KVD_TEST_COUNT_ALLOCATIONS) GTEST_SKIP() << "allocation counting is off under AddressSanitizer";
  kvd::SamplerConfig c = with_temperature(0.9);
  c.top_k = 40;
  c.top_p = 0.9;
  c.min_p = 0.01;
  c.repetition_penalty = 1.1;
  kvd::Sampler s(c);
  std::vector<float> logits(32000);
  for (int i = 0; i < 32000; ++i) logits[i] = std::sin(i * 0.01f) * 5;
  std::vector<int> history(100);
  for (int i = 0; i < 100; ++i) history[i] = (i * 7) % 512;  // valid for both vocab sizes
  s.sample(logits.data(), 512, history);
  // The first call for a larger vocab size grows the scratch (this also shows the counter works) ...
  g_allocations = 0;
  g_count_allocations = true;
  s.sample(logits.data(), 32000, history);
  g_count_allocations = false;
  EXPECT_GT(g_allocations.load(), 0);
  // ... and later calls, for that size or a smaller one, allocate nothing.
  g_allocations = 0;
  g_count_allocations = true;
  int sum = 0;
  for (int i = 0; i < 50; ++i) sum += s.sample(logits.data(), 32000, history);
  sum += s.sample(logits.data(), 512, history);
  g_count_allocations = false;
  EXPECT_EQ(g_allocations.load(), 0);
  EXPECT_GE(sum, 0);
}

}  // namespace
