// Whole-model benchmarks on seeded random weights of two real shapes,
// stories15M and stories110M, float32, through the library's public calls:
//
//   BM_Prefill          prompt of `tokens` tokens into an empty cache (tokens/s)
//   BM_Decode           one decode_step at position `pos` with the KV cache
//   BM_DecodeReference  what that step costs without a cache:
//                       forward_reference of pos + 1 tokens
//   BM_DecodeBatch      one decode_batch step of `batch` sequences, each at
//                       position kBatchPos (aggregate tokens/s)
//
// each with 1 and 2 threads. Counters (per second of wall time):
//   tokens        tokens produced (prefill: prompt tokens; decode: 1 per sequence)
//   weight_bytes  weight_bytes_per_token() per call: every call streams the
//                 weights once, so this is the weight bandwidth actually drawn
//   flops         2 * last_macs() per call (projections, attention, classifier)
//
// Decode benchmarks keep the position fixed: the cache is filled to `pos`
// once, and each iteration appends one position and truncates back (an O(1)
// length change). Models are built once, on first use (the 110M weights take
// ~0.45 GB and a few seconds to generate and pack), and kept for the run.
//
// Both shapes use max_seq_len = 1024 so that position 1000 fits; max_seq_len
// sizes only the RoPE table and scratch, not the weights.
//
// Run: build/bin/kvdecode-bench --benchmark_filter='BM_(Prefill|Decode)'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model_shapes.hpp"
#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/model/transformer.hpp"

namespace {

using kvd_bench::Shape;
using kvd_bench::random_tokens;
using kvd_bench::shape_config;
using kvd_bench::shape_name;

using Model = kvd::Transformer<float>;
using Cache = kvd::KVCache<float>;

/// Position every sequence of a BM_DecodeBatch step decodes at.
constexpr int kBatchPos = 256;
constexpr std::uint64_t kWeightSeed = 1234;

/// The model of a shape, built on first use and kept for the whole run.
Model& model(Shape s) {
  if (s == Shape::k15M) {
    static Model m15(kvd::ModelWeights<float>::random(shape_config(Shape::k15M), kWeightSeed));
    return m15;
  }
  static Model m110(kvd::ModelWeights<float>::random(shape_config(Shape::k110M), kWeightSeed));
  return m110;
}

/// Rate counters for a benchmark whose every iteration produces `tokens` tokens,
/// streams the weights once and performs `macs` multiply-adds.
void set_counters(benchmark::State& st, const Model& m, double tokens, std::uint64_t macs) {
  using benchmark::Counter;
  const double it = static_cast<double>(st.iterations());
  st.counters["tokens"] = Counter(tokens * it, Counter::kIsRate);
  st.counters["weight_bytes"] = Counter(static_cast<double>(m.weight_bytes_per_token()) * it, Counter::kIsRate);
  st.counters["flops"] = Counter(2.0 * static_cast<double>(macs) * it, Counter::kIsRate);
}

void BM_Prefill(benchmark::State& st, Shape shape, int n_tokens, int threads) {
  kvd::set_num_threads(threads);
  Model& m = model(shape);
  Cache cache(m.config(), n_tokens);
  const std::vector<int> tokens = random_tokens(n_tokens, m.config().vocab_size);
  m.reserve(n_tokens);
  m.prefill(tokens, cache);  // warm-up: pages touched, OpenMP team started
  for (auto _ : st) {
    cache.clear();
    auto logits = m.prefill(tokens, cache);
    benchmark::DoNotOptimize(logits.data());
    benchmark::ClobberMemory();
  }
  set_counters(st, m, n_tokens, m.last_macs());
}

void BM_Decode(benchmark::State& st, Shape shape, int pos, int threads) {
  kvd::set_num_threads(threads);
  Model& m = model(shape);
  const std::vector<int> tokens = random_tokens(pos + 1, m.config().vocab_size);
  Cache cache(m.config(), pos + 1);
  m.prefill(std::vector<int>(tokens.begin(), tokens.begin() + pos), cache);
  m.decode_step(tokens[pos], cache);  // warm-up
  cache.truncate(pos);
  for (auto _ : st) {
    auto logits = m.decode_step(tokens[pos], cache);
    benchmark::DoNotOptimize(logits.data());
    benchmark::ClobberMemory();
    cache.truncate(pos);
  }
  set_counters(st, m, 1, m.last_macs());
  st.counters["kv_bytes"] = benchmark::Counter(
      static_cast<double>(cache.bytes_per_token()) * (pos + 1) * static_cast<double>(st.iterations()),
      benchmark::Counter::kIsRate);
}

void BM_DecodeReference(benchmark::State& st, Shape shape, int pos, int threads) {
  kvd::set_num_threads(threads);
  Model& m = model(shape);
  const std::vector<int> tokens = random_tokens(pos + 1, m.config().vocab_size);
  for (auto _ : st) {
    auto logits = m.forward_reference(tokens, /*all_logits=*/false);  // a cache-free step needs the last row only
    benchmark::DoNotOptimize(logits.data());
    benchmark::ClobberMemory();
  }
  set_counters(st, m, 1, m.last_macs());
}

void BM_DecodeBatch(benchmark::State& st, Shape shape, int batch, int threads) {
  kvd::set_num_threads(threads);
  Model& m = model(shape);
  const int pos = kBatchPos;
  const std::vector<int> tokens = random_tokens(batch, m.config().vocab_size, 11);  // one next token per sequence
  std::vector<Cache> caches = kvd_bench::batch_caches(m, batch, pos);
  std::vector<Cache*> ptrs;
  for (auto& c : caches) ptrs.push_back(&c);
  m.decode_batch(tokens, ptrs);  // warm-up
  for (auto& c : caches) c.truncate(pos);
  for (auto _ : st) {
    auto logits = m.decode_batch(tokens, ptrs);
    benchmark::DoNotOptimize(logits.data());
    benchmark::ClobberMemory();
    for (auto& c : caches) c.truncate(pos);
  }
  set_counters(st, m, batch, m.last_macs());
}

template <class Fn>
benchmark::internal::Benchmark* add(const std::string& name, Fn fn, Shape shape, int arg, int threads) {
  return benchmark::RegisterBenchmark(name.c_str(), fn, shape, arg, threads)
      ->UseRealTime()  // OpenMP threads do the work; wall time is what a caller waits
      ->Unit(benchmark::kMillisecond);
}

std::string bench_name(const char* what, Shape shape, const char* arg_name, int arg, int threads) {
  return std::string(what) + "/" + shape_name(shape) + "/" + arg_name + ":" + std::to_string(arg) +
         "/threads:" + std::to_string(threads);
}

// Registration order is the report order: benchmark, shape, argument, threads.
const bool kRegistered = [] {
  const Shape shapes[] = {Shape::k15M, Shape::k110M};
  const int threads_list[] = {1, 2};
  for (Shape s : shapes)
    for (int n : {1, 16, 128, 512})
      for (int t : threads_list) add(bench_name("BM_Prefill", s, "tokens", n, t), BM_Prefill, s, n, t);
  for (Shape s : shapes)
    for (int pos : {1, 64, 256, 1000})
      for (int t : threads_list) add(bench_name("BM_Decode", s, "pos", pos, t), BM_Decode, s, pos, t);
  // Without a cache a step recomputes the whole sequence: at position 1000 one
  // call takes seconds (110M: tens of seconds), so those run once; the rest use
  // Google Benchmark's default minimum time (0.5 s).
  for (Shape s : shapes)
    for (int pos : {1, 64, 256, 1000})
      for (int t : threads_list) {
        auto* b = add(bench_name("BM_DecodeReference", s, "pos", pos, t), BM_DecodeReference, s, pos, t);
        if (pos >= 1000 || (s == Shape::k110M && pos >= 256)) b->Iterations(1);
      }
  for (Shape s : shapes)
    for (int batch : {1, 2, 4, 8, 16})
      for (int t : threads_list)
        add(bench_name("BM_DecodeBatch", s, "batch", batch, t), BM_DecodeBatch, s, batch, t);
  return true;
}();

}  // namespace
