// Nothing is allocated in the decode hot path: after a warm-up, decode_step and
// decode_batch make no heap allocation at all (counted by replacing global
// operator new in this test program). And a Transformer made on a shared Model
// allocates its workspace only, never a copy of the weights.
#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <cstdlib>
#include <new>

#include "test_util.hpp"

namespace {
std::atomic<long> g_allocations{0};
std::atomic<long long> g_bytes{0};
}

// The replacements below pair malloc/aligned_alloc with free, which GCC cannot see
// through when it checks new/delete pairs.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(static_cast<long long>(n), std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, std::align_val_t al) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(static_cast<long long>(n), std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(al);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) { return operator new(n, al); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace kvd;

TEST(DecodeHotPath, DecodeStepAllocatesNothing) {
  const ModelConfig c = kvd_test::small_config(4, 2, 16, 64, 2, 128, 300, 128);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const long at_start = g_allocations.load();
    Transformer<float> model(ModelWeights<float>::random(c, 1));
    KVCache<float> cache(c);
    EXPECT_GT(g_allocations.load() - at_start, 0) << "the counter must see the model's own allocations";
    model.prefill(kvd_test::make_tokens(10, c.vocab_size), cache);
    model.decode_step(3, cache);  // warm-up (OpenMP thread pool)
    const long before = g_allocations.load();
    for (int i = 0; i < 50; ++i) model.decode_step(i % c.vocab_size, cache);
    EXPECT_EQ(g_allocations.load() - before, 0) << "threads=" << threads;
  }
}

TEST(DecodeHotPath, DecodeBatchAllocatesNothingAfterFirstBatch) {
  const ModelConfig c = kvd_test::small_config(4, 2, 16, 64, 2, 128, 300, 128);
  Transformer<float> model(ModelWeights<float>::random(c, 2));
  std::vector<KVCache<float>> caches;
  for (int b = 0; b < 4; ++b) caches.emplace_back(c);
  std::vector<KVCache<float>*> ptrs;
  for (auto& x : caches) ptrs.push_back(&x);
  for (int b = 0; b < 4; ++b) model.prefill(kvd_test::make_tokens(3 + b, c.vocab_size, b), caches[b]);
  const std::vector<int> toks{1, 2, 3, 4};
  model.decode_batch(toks, ptrs);  // sizes the workspace for 4 rows
  const long before = g_allocations.load();
  for (int i = 0; i < 20; ++i) model.decode_batch(toks, ptrs);
  EXPECT_EQ(g_allocations.load() - before, 0);
}

// A Transformer on a shared Model (model.hpp) allocates its workspace, not the
// weights; one built from weights allocates the packed copy (the counter sees it).
TEST(SharedModel, ASecondTransformerAllocatesNoWeights) {
  const ModelConfig c = kvd_test::small_config(8, 4, 32, 256, 4, 1024, 4000, 128);
  Transformer<float> first(ModelWeights<float>::random(c, 6));
  const long long weights = static_cast<long long>(first.weight_bytes_per_token());
  long long at = g_bytes.load();
  Transformer<float> second(first.shared_model());
  const long long shared = g_bytes.load() - at;
  ModelWeights<float> w = ModelWeights<float>::random(c, 7);
  at = g_bytes.load();
  Transformer<float> third(std::move(w));
  const long long packed = g_bytes.load() - at;
  std::cout << "weights read per token " << weights << " bytes; a Transformer on the shared model allocated " << shared
            << ", one packing its own " << packed << "\n";
  EXPECT_LT(shared, weights / 10);
  EXPECT_GE(packed, weights * 9 / 10);
}
