// Decode speed by weight storage type on the TinyLlama-1.1B shape (d_model 2048,
// hidden 5632, 22 layers, 32/4 heads, vocab 32000): 4.4 GB of f32 weights, 2.2 GB
// in f16/bf16, far larger than any last-level cache, so every step streams its
// weights from memory. Each benchmark reports the bytes a step reads (packed
// weights, one embedding row, norms, and the K/V it attends over) and divides by
// the streaming-read bandwidth measured in the same process.
//   ./build/bin/kvdecode-bench --benchmark_filter=Decode1p1B
#include <benchmark/benchmark.h>

#include <memory>
#include <optional>

#include "kvdecode/kvdecode.hpp"
#include "model_shapes.hpp"

namespace {

using kvd_bench::tinyllama_config;  // max_seq_len 512

/// Streaming-read bandwidth over a 1 GiB array (GB/s), best of 3 passes with
/// the current thread count: the limit a decode step can approach.
double read_bandwidth_gbs() {
  static const double gbs = [] {
    const std::size_t n = (1ull << 30) / sizeof(float);
    kvd::detail::AlignedBuffer<float> a(n);
    for (std::size_t i = 0; i < n; i += 1024) a[i] = 1.0f;
    using V = kvd::detail::Vec16<float>;
    double best = 0;
    for (int pass = 0; pass < 4; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      float total = 0;
#if defined(_OPENMP)
#pragma omp parallel reduction(+ : total)
#endif
      {
        int t = 0, nt = 1;
        kvd::detail::this_thread(t, nt);
        long b, e;
        kvd::detail::split_range(static_cast<long>(n / 128), t, nt, b, e);
        V acc[8];
        for (auto& v : acc) v = V::zero();
        const V one = V::broadcast(1.0f);
        for (long i = b * 128; i < e * 128; i += 128)
          for (int j = 0; j < 8; ++j) {
            kvd::detail::prefetch_read_at(a.data() + i + 16 * j, 4096);
            acc[j].fma(one, V::load(a.data() + i + 16 * j));
          }
        for (int j = 1; j < 8; ++j) acc[0].fma(one, acc[j]);
        float lanes[16];
        acc[0].store(lanes);
        for (float l : lanes) total += l;
      }
      benchmark::DoNotOptimize(total);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (pass > 0) best = std::max(best, static_cast<double>(n * sizeof(float)) / s / 1e9);  // pass 0 warms up
    }
    return best;
  }();
  return gbs;
}

/// The model with its matrices stored as `type` (built once per type).
kvd::Transformer<float>& model_of(kvd::WeightType type) {
  static std::optional<kvd::ModelWeights<float>> f32;
  static std::unique_ptr<kvd::Transformer<float>> current;
  static kvd::WeightType current_type = kvd::WeightType::kF32;
  if (current && current_type == type) return *current;
  current.reset();
  if (!f32) f32 = kvd::ModelWeights<float>::random(tinyllama_config(), 2024);
  kvd::ModelWeights<float> w = *f32;
  if (type != kvd::WeightType::kF32) {
    w.token_embedding = w.token_embedding.converted_to(type);
    for (auto& l : w.layers)
      for (kvd::WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) *m = m->converted_to(type);
    w.classifier = w.classifier.converted_to(type);
  }
  current = std::make_unique<kvd::Transformer<float>>(std::move(w));
  current_type = type;
  return *current;
}

// One decode step at position 256 (2 threads by default), cache prefilled once.
void BM_Decode1p1B(benchmark::State& st, kvd::WeightType type) {
  const double bw = read_bandwidth_gbs();
  kvd::Transformer<float>& m = model_of(type);
  constexpr int kPos = 256;
  kvd::KVCache<float> cache(m.config(), kPos + 1);
  m.prefill(kvd_bench::random_tokens(kPos, m.config().vocab_size), cache);
  for (auto _ : st) {
    cache.truncate(kPos);
    benchmark::DoNotOptimize(m.decode_step(7, cache).data());
  }
  const double bytes = static_cast<double>(m.weight_bytes_per_token()) +
                       static_cast<double>(cache.bytes_per_token()) * (kPos + 1);
  st.counters["bytes/token"] = bytes;
  st.counters["tok/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["bandwidth_GB/s"] = bw;
  st.counters["fraction"] = benchmark::Counter(bytes * 1e-9 / bw, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_Decode1p1B, f32, kvd::WeightType::kF32)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3);
BENCHMARK_CAPTURE(BM_Decode1p1B, f16, kvd::WeightType::kF16)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3);
BENCHMARK_CAPTURE(BM_Decode1p1B, bf16, kvd::WeightType::kBF16)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3);

}  // namespace
