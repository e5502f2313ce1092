// Decode speed by weight storage type on the TinyLlama-1.1B shape (d_model 2048,
// hidden 5632, 22 layers, 32/4 heads, vocab 32000): 4.4 GB of f32 weights, 2.2 GB
// in f16/bf16, and every kvdecode-quantize scheme (block types through
// kvd_bench::weights_in_scheme); far larger than any last-level cache, so every step streams its
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

/// The model with its matrices stored as `scheme` chooses (kvd_bench::weights_in_scheme),
/// built once per scheme from one set of random f32 weights.
kvd::Transformer<float>& model_of(kvd::QuantScheme scheme) {
  static std::optional<kvd::ModelWeights<float>> f32;
  static std::unique_ptr<kvd::Transformer<float>> current;
  static kvd::QuantScheme current_scheme = kvd::QuantScheme::kF32;
  if (current && current_scheme == scheme) return *current;
  current.reset();
  if (!f32) f32 = kvd::ModelWeights<float>::random(kvd_bench::tinyllama_config(512), 2024);
  current = std::make_unique<kvd::Transformer<float>>(kvd_bench::weights_in_scheme(*f32, scheme));
  current_scheme = scheme;
  return *current;
}

// One decode step at position 256 (2 threads by default), cache prefilled once.
void BM_Decode1p1B(benchmark::State& st, kvd::QuantScheme scheme) {
  const double bw = read_bandwidth_gbs();
  kvd::Transformer<float>& m = model_of(scheme);
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

#define KVD_DECODE_1P1B(name, scheme) \
  BENCHMARK_CAPTURE(BM_Decode1p1B, name, kvd::QuantScheme::scheme)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3)
KVD_DECODE_1P1B(f32, kF32);
KVD_DECODE_1P1B(f16, kF16);
KVD_DECODE_1P1B(bf16, kBF16);
KVD_DECODE_1P1B(q8_0, kQ8_0);
KVD_DECODE_1P1B(q6_K, kQ6_K);
KVD_DECODE_1P1B(q5_K_M, kQ5_K_M);
KVD_DECODE_1P1B(q4_K_M, kQ4_K_M);
KVD_DECODE_1P1B(q4_K, kQ4_K);
KVD_DECODE_1P1B(q4_0, kQ4_0);
KVD_DECODE_1P1B(q4_1, kQ4_1);
KVD_DECODE_1P1B(q5_0, kQ5_0);
KVD_DECODE_1P1B(q5_1, kQ5_1);
KVD_DECODE_1P1B(q3_K_M, kQ3_K_M);
KVD_DECODE_1P1B(q2_K, kQ2_K);

}  // namespace
