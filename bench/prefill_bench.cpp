// Prefill against the FMA peak, broken down by kernel, beside Eigen's sgemm on
// the same products, all in one run (issue 15).
//
// Shapes: stories110M (dim 768, hidden 2048, 12 layers, 12 heads) and the
// TinyLlama-1.1B shape (d_model 2048, hidden 5632, 32/4 heads) with random f32
// weights; the 1.1B model is cut to kTinyLayers of its 22 layers (every layer
// is the same work on different bytes, each layer's 130 MB of weights far
// larger than the L3 either way; prefill computes logits for the last row only,
// so the classifier is a sliver). Prompts of 64, 512 and 2048 tokens.
//
//   BM_PrefillFmaPeak/threads:N     the f32 FMA peak (the denominator below)
//   BM_PrefillKvd/<shape>/tokens:N     Transformer::prefill; counters: GFLOP/s
//       (2 x last_macs() / time), of_peak (against BM_PrefillFmaPeak's figure,
//       measured in the same process), and ms_<phase> = the wall time of each
//       kernel per call from the opt-in profile (kvdecode/core/profile.hpp),
//       measured in separate calls so the timed ones run without it. The
//       blocks' residual adds, RMSNorms and SwiGLU run inside the products that
//       read their rows (RowPrologue), so they count in QKV, gate/up and down and
//       are also given apart as ms_prologue; RoPE and cache writes count in
//       attention. ms_prologue / ms_pack / ms_wait are per thread, from inside the
//       prefill matmul: the prologues, the row packing, and the time a thread
//       waits for the other at a barrier.
//   BM_PrefillEigen/<shape>/tokens:N  Eigen's y = x W^T for one layer's four
//       products (wq|wk|wv, wo, w1|w3, w2) at M = tokens, Eigen's threads:
//       what the projections would reach without the exactness rule.
//
//   build/bin/kvdecode-bench --benchmark_filter=BM_Prefill(Kvd|Eigen|FmaPeak) --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvdecode/core/profile.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/model/transformer.hpp"
#include "fma_peak.hpp"
#include "model_shapes.hpp"

namespace {

constexpr int kTinyLayers = 4;  ///< layers of the 1.1B shape actually built (of 22)
constexpr int kThreads = 2;

kvd::ModelConfig prefill_config(int shape) {
  kvd::ModelConfig c = shape == 0 ? kvd::stories110m_config() : kvd_bench::tinyllama_config();
  if (shape == 1) c.n_layers = kTinyLayers;
  c.max_seq_len = 2048;
  return c;
}
const char* const kShapeNames[] = {"stories110M", "tinyllama1.1B_4layers"};

using kvd_bench::fma_peak_once;

/// Best of several short runs (GFLOP/s), measured once per process.
double fma_peak(int threads) {
  static double peak[8] = {};
  if (peak[threads] == 0)
    for (int r = 0; r < 5; ++r) peak[threads] = std::max(peak[threads], fma_peak_once(threads, 1L << 22));
  return peak[threads];
}

void BM_PrefillFmaPeak(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  double best = 0;
  for (auto _ : st) best = std::max(best, fma_peak_once(threads, 1L << 22));
  st.counters["GFLOP/s"] = best;
}

// ---- the model, built once per shape and kept while that shape runs
struct ModelSetup {
  int shape = -1;
  std::unique_ptr<kvd::Transformer<float>> model;
};
kvd::Transformer<float>& model_for(int shape) {
  static ModelSetup s;
  if (s.shape != shape) {
    s.model.reset();
    s.model = std::make_unique<kvd::Transformer<float>>(kvd::ModelWeights<float>::random(prefill_config(shape), 1234));
    s.shape = shape;
  }
  return *s.model;
}

// args: {tokens}
void BM_Prefill(benchmark::State& st, int shape) {
  const int n = static_cast<int>(st.range(0));
  kvd::set_num_threads(kThreads);
  const double peak = fma_peak(kThreads);
  auto& m = model_for(shape);
  kvd::KVCache<float> cache(m.config(), n);
  const std::vector<int> prompt = kvd_bench::random_tokens(n, m.config().vocab_size);
  m.reserve(n);
  m.prefill(prompt, cache);  // warm-up (first-touch of the workspace)
  cache.clear();
  double macs = 0;
  for (auto _ : st) {
    m.prefill(prompt, cache);
    macs = static_cast<double>(m.last_macs());
    st.PauseTiming();
    cache.clear();
    st.ResumeTiming();
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["peak_GFLOP/s"] = peak;
  st.counters["tok/s"] = benchmark::Counter(n, benchmark::Counter::kIsIterationInvariantRate);
  // The breakdown, from separate profiled calls (the profile's own cost stays out of the figures above).
  kvd::detail::PhaseTimes prof;
  const int reps = n >= 2048 ? 1 : n >= 512 ? 2 : 8;
  kvd::detail::set_phase_profile(&prof);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    m.prefill(prompt, cache);
    cache.clear();
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  kvd::detail::set_phase_profile(nullptr);
  double phases = 0;
  for (int p = 0; p < static_cast<int>(kvd::detail::Phase::kCount); ++p) {
    const double ms = prof.seconds[p] * 1e3 / reps;
    phases += ms;
    st.counters[std::string("ms_") + kvd::detail::phase_name(static_cast<kvd::detail::Phase>(p))] = ms;
  }
  st.counters["ms_profiled_total"] = total * 1e3 / reps;
  st.counters["ms_outside_phases"] = total * 1e3 / reps - phases;
  st.counters["ms_prologue"] = prof.prologue_thread_seconds * 1e3 / reps / kThreads;
  st.counters["ms_pack"] = prof.pack_thread_seconds * 1e3 / reps / kThreads;
  st.counters["ms_wait"] = prof.wait_thread_seconds * 1e3 / reps / kThreads;
}

// ---- Eigen's sgemm on one layer's four products
struct EigenSetup {
  int shape = -1;
  long M = 0;
  std::vector<kvd::RowMatrix<float>> w;  // (N, K) each
  std::vector<kvd::RowMatrix<float>> x;  // (M, K) each
  std::vector<kvd::RowMatrix<float>> y;  // (M, N) each
};
kvd::RowMatrix<float> random_matrix(long rows, long cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  kvd::RowMatrix<float> m(rows, cols);
  for (long i = 0; i < m.size(); ++i) m.data()[i] = dist(gen);
  return m;
}

void BM_PrefillEigen(benchmark::State& st, int shape) {
  const long M = st.range(0);
  Eigen::setNbThreads(kThreads);
  kvd::set_num_threads(kThreads);
  const double peak = fma_peak(kThreads);
  const kvd::ModelConfig c = prefill_config(shape);
  static EigenSetup s;
  if (s.shape != shape || s.M != M) {
    s = EigenSetup();
    s.shape = shape, s.M = M;
    const long D = c.d_model, F = c.hidden_dim;
    const long nk[4][2] = {{c.q_dim() + 2L * c.kv_dim(), D}, {D, c.q_dim()}, {2 * F, D}, {D, F}};
    for (int i = 0; i < 4; ++i) {
      s.w.push_back(random_matrix(nk[i][0], nk[i][1], 1 + i));
      s.x.push_back(random_matrix(M, nk[i][1], 11 + i));
      s.y.emplace_back(M, nk[i][0]);
    }
  }
  double flops = 0;
  for (int i = 0; i < 4; ++i) flops += 2.0 * M * s.w[i].rows() * s.w[i].cols();
  for (auto _ : st) {
    for (int i = 0; i < 4; ++i) s.y[i].noalias() = s.x[i] * s.w[i].transpose();
    benchmark::DoNotOptimize(s.y[3].data());
    benchmark::ClobberMemory();
  }
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["peak_GFLOP/s"] = peak;
  Eigen::setNbThreads(0);
}

[[maybe_unused]] const int kRegistered = [] {
  benchmark::RegisterBenchmark("BM_PrefillFmaPeak", BM_PrefillFmaPeak)
      ->ArgName("threads")->Arg(kThreads)->Iterations(5)->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
  for (int shape = 0; shape < 2; ++shape) {
    const std::string name = kShapeNames[shape];
    benchmark::RegisterBenchmark(("BM_PrefillKvd/" + name).c_str(), BM_Prefill, shape)
        ->ArgName("tokens")->Arg(64)->Arg(512)->Arg(2048)->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_PrefillEigen/" + name).c_str(), BM_PrefillEigen, shape)
        ->ArgName("tokens")->Arg(64)->Arg(512)->Arg(2048)->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
  }
  return 0;
}();

}  // namespace
