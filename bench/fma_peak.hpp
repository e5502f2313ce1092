// The float32 FMA peak as the benchmarks measure it: independent
// register-resident fma chains of detail::Vec16 per thread, as many as fit in
// registers beside the two operands (24 zmm on AVX-512; 6 Vec16 = 12 ymm on
// AVX2, where more spill to memory and halve the figure).
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>

#include "kvdecode/matmul/matmul.hpp"

namespace kvd_bench {

/// GFLOP/s of one timed run: `threads` threads, each `iters` rounds of kChains fmas.
inline double fma_peak_once(int threads, long iters) {
  using V = kvd::detail::Vec16<float>;
  constexpr int kChains = V::kAccumulators >= 24 ? 24 : 6;
  const auto t0 = std::chrono::steady_clock::now();
  float total = 0;
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) reduction(+ : total)
#endif
  {
    V acc[kChains];
    for (int j = 0; j < kChains; ++j) acc[j] = V::broadcast(static_cast<float>(j));
    V a = V::broadcast(0.999f), b = V::broadcast(1e-4f);
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(b);
    for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 24
      for (int j = 0; j < kChains; ++j) acc[j].fma(a, b);
    }
    float lanes[16];
    for (int j = 1; j < kChains; ++j) acc[0].fma(a, acc[j]);
    acc[0].store(lanes);
    // Every lane counts: with lane 0 alone, GCC drops the upper ymm half of each
    // AVX2 Vec16 chain (half the work, counted in full: "150 GFLOP/s" per core
    // on a 100 GFLOP/s Zen 3).
    for (float l : lanes) total += l;
  }
  benchmark::DoNotOptimize(total);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * 16 * kChains * static_cast<double>(iters) * threads / s * 1e-9;
}

}  // namespace kvd_bench
