// The float32 FMA peak as the benchmarks measure it: 24 independent
// register-resident fma chains of detail::Vec16 per thread.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>

#include "kvdecode/kernels.hpp"

namespace kvd_bench {

/// GFLOP/s of one timed run: `threads` threads, each `iters` rounds of 24 fmas.
inline double fma_peak_once(int threads, long iters) {
  constexpr int kChains = 24;
  using V = kvd::detail::Vec16<float>;
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
    total += lanes[0];
  }
  benchmark::DoNotOptimize(total);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * 16 * kChains * static_cast<double>(iters) * threads / s * 1e-9;
}

}  // namespace kvd_bench
