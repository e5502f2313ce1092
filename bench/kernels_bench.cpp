// Matrix-product benchmarks on the stories110M shapes: kvdecode's exact,
// batch-invariant matmul against Eigen's own product (y = x * W^T, Eigen's
// threads), for prefill (M = 512 rows), batched decode (M = 8) and decode
// (M = 1), with 1 and 2 threads. Two reference benchmarks measure this
// machine's limits in the same run: the streaming-read bandwidth and the FP32
// FMA peak; compare GB/s with the first and GFLOP/s with the second.
//
// Names: BM_Matmul{Kvd,Eigen}/<shape>/M:<rows>/threads:<n>/cold:<0|1>.
// Counters: GFLOP/s = 2 M N K / time; GB/s = weight bytes / time (the bytes a
// decode step must stream).
//
// cold:1 (decode and batched decode) cycles through copies of the weights that
// together are more than 3x the 48 MiB L3, so every call reads its weights from
// DRAM as a full-model decode step does (each layer's weights are different
// bytes). cold:0 (prefill) reuses one copy: a prefill reads each weight many
// times from cache anyway.
//
//   build/bin/kvdecode-bench --benchmark_filter=BM_Matmul --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fma_peak.hpp"
#include "kvdecode/matmul/matmul.hpp"

namespace {

struct Shape {
  const char* name;
  long n, k;  // N output columns, K reduction length
};

// The fused products of one stories110M layer, and the classifier.
const Shape kShapes[] = {
    {"wqkv", 2304, 768}, {"wo", 768, 768}, {"w13", 4096, 768}, {"w2", 768, 2048}, {"cls", 32000, 768},
};

constexpr std::uint64_t kColdBytes = 160ull << 20;  // > 3x the L3

kvd::RowMatrix<float> random_matrix(long rows, long cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  kvd::RowMatrix<float> m(rows, cols);
  for (long i = 0; i < m.size(); ++i) m.data()[i] = dist(gen);
  return m;
}

int copies_for(const Shape& s, bool cold) {
  if (!cold) return 1;
  const std::uint64_t bytes = static_cast<std::uint64_t>(s.n) * s.k * sizeof(float);
  return static_cast<int>(std::max<std::uint64_t>(2, (kColdBytes + bytes - 1) / bytes));
}

// Inputs and weight copies for one benchmark, built once and kept while the
// same (library, shape, rows, cold) runs again (repetitions, iteration probing).
struct Setup {
  int lib = -1, shape = -1;
  long M = 0;
  bool cold = false;
  kvd::RowMatrix<float> x;                       // (M, K)
  std::vector<kvd::PackedMatrix<float>> packed;  // kvdecode's weights, `copies` times
  std::vector<kvd::RowMatrix<float>> eigen;      // Eigen's weights (N, K), `copies` times
  kvd::detail::AlignedBuffer<float> y;           // (M, N padded)
};

Setup& setup_for(int lib, int shape, long M, bool cold) {
  static std::unique_ptr<Setup> s;
  if (s && s->lib == lib && s->shape == shape && s->M == M && s->cold == cold) return *s;
  s.reset();  // free the previous weights first
  s = std::make_unique<Setup>();
  s->lib = lib, s->shape = shape, s->M = M, s->cold = cold;
  const Shape& sh = kShapes[shape];
  const auto w = random_matrix(sh.n, sh.k, 1);
  const int copies = copies_for(sh, cold);
  if (lib == 0) {
    s->packed.reserve(copies);
    for (int c = 0; c < copies; ++c) s->packed.emplace_back(kvd::PackedMatrix<float>({&w}));
  } else {
    for (int c = 0; c < copies; ++c) s->eigen.push_back(w);
  }
  s->x = random_matrix(M, sh.k, 2);
  s->y.resize(static_cast<std::size_t>(M) * kvd::detail::round_up_lanes(sh.n));
  return *s;
}

void set_counters(benchmark::State& st, const Shape& s, long M) {
  const double flops = 2.0 * M * s.n * s.k;
  const double bytes = static_cast<double>(s.n) * s.k * sizeof(float);
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// args: {M, threads, cold}
void BM_MatmulKvd(benchmark::State& st, int shape) {
  const Shape& s = kShapes[shape];
  const long M = st.range(0);
  kvd::set_num_threads(static_cast<int>(st.range(1)));
  Setup& su = setup_for(0, shape, M, st.range(2) != 0);
  const long ldy = su.packed[0].n_out_padded();
  std::size_t c = 0;
  for (auto _ : st) {
    kvd::matmul(su.x.data(), s.k, M, su.packed[c], su.y.data(), ldy);
    benchmark::DoNotOptimize(su.y.data());
    benchmark::ClobberMemory();
    c = c + 1 == su.packed.size() ? 0 : c + 1;
  }
  set_counters(st, s, M);
}

void BM_MatmulEigen(benchmark::State& st, int shape) {
  const Shape& s = kShapes[shape];
  const long M = st.range(0);
  const int threads = static_cast<int>(st.range(1));
  kvd::set_num_threads(threads);
  Eigen::setNbThreads(threads);
  Setup& su = setup_for(1, shape, M, st.range(2) != 0);
  Eigen::Map<kvd::RowMatrix<float>> y(su.y.data(), M, s.n);
  std::size_t c = 0;
  for (auto _ : st) {
    y.noalias() = su.x * su.eigen[c].transpose();
    benchmark::DoNotOptimize(su.y.data());
    benchmark::ClobberMemory();
    c = c + 1 == su.eigen.size() ? 0 : c + 1;
  }
  set_counters(st, s, M);
  Eigen::setNbThreads(0);
}

// Prefill (M = 512, weights hot), batched decode (M = 8) and decode (M = 1),
// weights cold; 1 and 2 threads. Batched decode over M = 1..16 on the
// classifier, the largest matrix, shows the time staying near M = 1's.
[[maybe_unused]] const int kRegistered = [] {
  for (int shape = 0; shape < 5; ++shape) {
    const std::string name = kShapes[shape].name;
    for (int lib = 0; lib < 2; ++lib) {
      auto* b = lib == 0 ? benchmark::RegisterBenchmark(("BM_MatmulKvd/" + name).c_str(), BM_MatmulKvd, shape)
                         : benchmark::RegisterBenchmark(("BM_MatmulEigen/" + name).c_str(), BM_MatmulEigen, shape);
      b->ArgNames({"M", "threads", "cold"})->UseRealTime()->Unit(benchmark::kMicrosecond);
      for (int threads : {1, 2}) b->Args({512, threads, 0})->Args({8, threads, 1})->Args({1, threads, 1});
    }
  }
  benchmark::RegisterBenchmark("BM_MatmulKvdBatch/cls", BM_MatmulKvd, 4)
      ->ArgNames({"M", "threads", "cold"})
      ->ArgsProduct({{1, 2, 4, 8, 12, 16}, {2}, {1}})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  return 0;
}();

// The machine's streaming-read bandwidth: a sum over a 256 MiB array. Each
// thread reads its contiguous part as 8 interleaved streams with software
// prefetch, the access pattern of a decode step, so this is the bandwidth the
// kernel can hope for.
void BM_MatmulReadBandwidth(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  constexpr int kStreams = 8;
  const std::size_t n = (256ull << 20) / sizeof(float);
  kvd::detail::AlignedBuffer<float> a(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = 1.0f;
  using V = kvd::detail::Vec16<float>;
  const std::size_t part = n / threads / (16 * kStreams) * (16 * kStreams), len = part / kStreams;
  for (auto _ : st) {
    float total = 0;
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) reduction(+ : total)
#endif
    {
      int t = 0;
#if defined(_OPENMP)
      t = omp_get_thread_num();
#endif
      const float* base = a.data() + part * t;
      V acc[kStreams];
      for (auto& v : acc) v = V::zero();
      const V one = V::broadcast(1.0f);
      for (std::size_t i = 0; i < len; i += 16)
        for (int j = 0; j < kStreams; ++j) {
          kvd::detail::prefetch_read_at(base + j * len + i, 4096);
          acc[j].fma(one, V::load(base + j * len + i));
        }
      float lanes[16];
      for (int j = 1; j < kStreams; ++j) acc[0].fma(one, acc[j]);
      acc[0].store(lanes);
      for (float l : lanes) total += l;
    }
    benchmark::DoNotOptimize(total);
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(part * threads * sizeof(float)) * 1e-9,
                                           benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatmulReadBandwidth)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// The FP32 FMA peak: 24 independent register-resident fma chains per thread.
void BM_MatmulFmaPeak(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  double best = 0;
  for (auto _ : st) best = std::max(best, kvd_bench::fma_peak_once(threads, 1L << 20));
  st.counters["GFLOP/s"] = best;
}
BENCHMARK(BM_MatmulFmaPeak)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
