// Quantized matrix products on TinyLlama-1.1B's shapes (d_model 2048, hidden
// 5632, 32/4 heads of 64: wq and wo 2048 x 2048, wk and wv 256 x 2048, gate
// and up 5632 x 2048, down 2048 x 5632), one benchmark per block type.
// An iteration runs the seven products of `layers` distinct layers (4 for
// decode-sized M, 1 for prefill), so the weights (>= 100 MB) stream from
// memory as in a decode step. Compare GB/s with BM_MatmulReadBandwidth/2 and
// GFLOP/s with BM_MatmulFmaPeak/2 of the same run:
//   kvdecode-bench --benchmark_filter='Quant|ReadBandwidth|FmaPeak'
// Counters: GB/s = repacked weight bytes read / time (every call streams them
// once); GFLOP/s = 2 M N K / time. The weights are random bytes with sane f16
// scales: the kernels' speed does not depend on the values.
// BM_QuantMatmulInCache: the same kernels on one matrix held in L2, one
// thread, CPU time (the compute rate apart from memory).
// fast = 1: the fast mode (fast_int8.hpp, int8-rounded activations) on the
// block types, beside the default mode in the same run.
// BM_Matmul16InCache: f16 and bf16 weights the same way (192 x 2048, 768 KiB),
// default mode against the fast mode's bf16 dot products (fast_bf16.hpp).
// BM_DotPeak: one core's peak of the 512-bit vpdpbusd and vdpbf16ps, the ceiling of
// both in-cache figures of the fast mode.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/matmul/quant_kernels.hpp"
#include "kvdecode/matmul/fast_bf16.hpp"
#include "kvdecode/matmul/fast_int8.hpp"
#include "kvdecode/matmul/quant_matrix.hpp"

namespace {

using kvd::QuantMatrix;
using kvd::WeightType;

/// n_out x n_in random rows of type t in ggml bytes, with every f16 field set to a small scale.
std::vector<unsigned char> random_rows(WeightType t, long n_out, long n_in, std::mt19937_64& rng) {
  const auto tr = kvd::weight_type_traits(t);
  std::vector<unsigned char> rows(kvd::weight_row_bytes(t, n_in) * n_out);
  for (auto& b : rows) b = static_cast<unsigned char>(rng());
  const auto layout = kvd::detail::quant_layout(t);
  const std::uint16_t scale = kvd::detail::fp32_to_fp16(0.001f);
  for (std::size_t blk = 0; blk < rows.size() / tr.block_bytes; ++blk)
    for (int f = 0; f < layout.n_fields; ++f)
      if (layout.fields[f].width == 2) std::memcpy(rows.data() + blk * tr.block_bytes + layout.fields[f].offset, &scale, 2);
  if (t == WeightType::kMXFP4)  // its scale is the e8m0 byte: 2^-10, no subnormals or infinities
    for (std::size_t blk = 0; blk < rows.size() / tr.block_bytes; ++blk) rows[blk * tr.block_bytes] = 117;
  return rows;
}

struct Layer {
  std::vector<std::unique_ptr<QuantMatrix>> mats;  // wq, wk, wv, wo, gate, up, down
};

/// `layers` layers of type t, built once per (type, layers) and kept for the run.
const std::vector<Layer>& layers_of(WeightType t, int layers) {
  static std::vector<std::pair<std::pair<int, int>, std::vector<Layer>>> cache;
  for (auto& [key, v] : cache)
    if (key.first == static_cast<int>(t) && key.second == layers) return v;
  cache.clear();  // one set at a time: keeps memory to one type's layers
  std::mt19937_64 rng(42);
  std::vector<Layer> v(static_cast<std::size_t>(layers));
  const long D = 2048, F = 5632, KV = 256;
  const long shapes[7][2] = {{D, D}, {KV, D}, {KV, D}, {D, D}, {F, D}, {F, D}, {D, F}};
  for (auto& l : v)
    for (const auto& s : shapes) {
      const auto rows = random_rows(t, s[0], s[1], rng);
      l.mats.push_back(std::make_unique<QuantMatrix>(t, s[0], s[1], rows.data()));
    }
  cache.emplace_back(std::make_pair(static_cast<int>(t), layers), std::move(v));
  return cache.back().second;
}

void BM_QuantMatmul(benchmark::State& st) {
  const auto t = static_cast<WeightType>(st.range(0));
  const long M = st.range(1);
  const int threads = static_cast<int>(st.range(2));
  const bool fast = st.range(3) != 0;
  const int n_layers = M >= 64 ? 1 : 4;
  const auto& layers = layers_of(t, n_layers);
  const long K_max = 5632, N_max = 5632;
  std::vector<float> x(static_cast<std::size_t>(M * K_max), 0.01f), y(static_cast<std::size_t>(M * N_max));
  const int saved = kvd::num_threads();
  kvd::set_num_threads(threads);
  double bytes = 0, flops = 0;
  for (const auto& l : layers)
    for (const auto& m : l.mats) {
      bytes += static_cast<double>(m->bytes());
      flops += 2.0 * M * m->n_out() * m->n_in();
    }
  for (auto _ : st) {
    for (const auto& l : layers)
      for (const auto& m : l.mats) {
        if (fast)
          kvd::matmul_fast(x.data(), m->n_in(), M, *m, y.data(), m->n_out_padded());
        else
          kvd::matmul(x.data(), m->n_in(), M, *m, y.data(), m->n_out_padded());
      }
    benchmark::DoNotOptimize(y.data());
  }
  kvd::set_num_threads(saved);
  st.SetLabel(std::string(kvd::weight_type_name(t)) + (fast ? " fast" : ""));
  st.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// The kernels' own rate, apart from memory: one 512 x 2048 matrix (at most
/// 1.1 MB, held in L2) on one thread, CPU time. Counter: Gweights/s = weights
/// streamed per second (M rows share each weight); GMAC/s = multiply-adds per second.
void BM_QuantMatmulInCache(benchmark::State& st) {
  const auto t = static_cast<WeightType>(st.range(0));
  const long M = st.range(1), N = 512, K = 2048;
  const bool fast = st.range(2) != 0;
  std::mt19937_64 rng(7);
  const auto rows = random_rows(t, N, K, rng);
  const QuantMatrix w(t, N, K, rows.data());
  std::vector<float> x(static_cast<std::size_t>(M * K), 0.01f), y(static_cast<std::size_t>(M * w.n_out_padded()));
  const int saved = kvd::num_threads();
  kvd::set_num_threads(1);
  for (auto _ : st) {
    if (fast)
      kvd::matmul_fast(x.data(), K, M, w, y.data(), w.n_out_padded());
    else
      kvd::matmul(x.data(), K, M, w, y.data(), w.n_out_padded());
    benchmark::DoNotOptimize(y.data());
  }
  kvd::set_num_threads(saved);
  st.SetLabel(std::string(kvd::weight_type_name(t)) + (fast ? " fast" : ""));
  st.counters["Gweights/s"] = benchmark::Counter(static_cast<double>(N * K) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(M * N * K) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// BM_QuantMatmulInCache for 16-bit weights, through kvd::matmul and a PackedMatrix
/// (the model's path), fast mode on or off.
void BM_Matmul16InCache(benchmark::State& st) {
  const auto t = static_cast<WeightType>(st.range(0));
  const long M = st.range(1), N = 192, K = 2048;
  const bool fast = st.range(2) != 0;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(N * K));
  for (auto& b : bits) b = t == WeightType::kF16 ? kvd::detail::fp32_to_fp16(nd(rng)) : kvd::detail::fp32_to_bf16(nd(rng));
  const kvd::WeightMatrix wm = kvd::WeightMatrix::copy_of(t, N, K, bits.data(), bits.size() * 2);
  kvd::PackedMatrix<float> w({&wm});
  w.set_fast_matmul(fast);
  std::vector<float> x(static_cast<std::size_t>(M * K), 0.01f), y(static_cast<std::size_t>(M * w.n_out_padded()));
  const int saved = kvd::num_threads();
  kvd::set_num_threads(1);
  for (auto _ : st) {
    kvd::matmul(x.data(), K, M, w, y.data(), w.n_out_padded());
    benchmark::DoNotOptimize(y.data());
  }
  kvd::set_num_threads(saved);
  st.SetLabel(std::string(kvd::weight_type_name(t)) + (fast ? " fast" : ""));
  st.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(M * N * K) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

#if defined(KVDECODE_FAST_TILES_512) || defined(KVDECODE_FAST_BF16)
/// The peak of the fast mode's 512-bit dot-product instruction on one core: 12
/// independent register chains of vpdpbusd (kind 0: 64 int8 multiply-adds per
/// instruction) or vdpbf16ps (kind 1: 32 bf16 multiply-adds), CPU time. The ceiling
/// of BM_QuantMatmulInCache's fast figures (kind 0) and BM_Matmul16InCache's bf16
/// ones (kind 1), which also spend issue slots on their fixed float steps, code
/// rebuilds and loads. Counter: GMAC/s.
template <int kKind>
__attribute__((noinline)) float dot_chains(long n) {
  __m512 f[12];
  __m512i q[12];
  __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(2);
  for (int i = 0; i < 12; ++i) f[i] = _mm512_setzero_ps(), q[i] = _mm512_setzero_si512();
  for (long k = 0; k < n; ++k) {
    for (int i = 0; i < 12; ++i) {
      if constexpr (kKind == 0) {
#if defined(KVDECODE_FAST_TILES_512)
        q[i] = _mm512_dpbusd_epi32(q[i], a, b);
#endif
      } else {
#if defined(KVDECODE_FAST_BF16)
        f[i] = _mm512_dpbf16_ps(f[i], reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
#endif
      }
    }
    __asm__ volatile("" : "+v"(a), "+v"(b));  // loop-carried operands: the chains are not hoisted
  }
  float sum = 0;
  alignas(64) float lanes[16];
  for (int i = 0; i < 12; ++i) {
    _mm512_store_ps(lanes, _mm512_add_ps(f[i], _mm512_cvtepi32_ps(q[i])));
    sum += lanes[0];
  }
  return sum;
}
void BM_DotPeak(benchmark::State& st) {
  const long n = 1L << 20;
  for (auto _ : st) benchmark::DoNotOptimize(st.range(0) == 0 ? dot_chains<0>(n) : dot_chains<1>(n));
  st.SetLabel(st.range(0) == 0 ? "vpdpbusd zmm" : "vdpbf16ps zmm");
  st.counters["GMAC/s"] = benchmark::Counter(12.0 * n * (st.range(0) == 0 ? 64 : 32) * 1e-9,
                                             benchmark::Counter::kIsIterationInvariantRate);
}
#endif

const int kRegister = [] {
  const WeightType types[] = {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
                              WeightType::kQ5_1, WeightType::kQ2_K, WeightType::kQ3_K, WeightType::kQ4_K,
                              WeightType::kQ5_K, WeightType::kQ6_K, WeightType::kIQ4_NL, WeightType::kIQ4_XS,
                              WeightType::kMXFP4};
  auto* b = benchmark::RegisterBenchmark("BM_QuantMatmul", BM_QuantMatmul);
  b->ArgNames({"type", "M", "threads", "fast"});
  for (WeightType t : types)
    for (long M : {1L, 8L, 256L}) {
      b->Args({static_cast<long>(t), M, 2, 0});
      if (kvd::detail::fast_matmul_type(t)) b->Args({static_cast<long>(t), M, 2, 1});
    }
  b->Args({static_cast<long>(WeightType::kQ4_K), 1, 1, 0});
  b->Args({static_cast<long>(WeightType::kQ4_K), 1, 1, 1});
  b->Args({static_cast<long>(WeightType::kQ8_0), 1, 1, 0});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
  auto* c = benchmark::RegisterBenchmark("BM_QuantMatmulInCache", BM_QuantMatmulInCache);
  c->ArgNames({"type", "M", "fast"});
  for (WeightType t : types)
    for (long M : {1L, 5L, 8L, 64L}) {  // 5: a speculative verification of 4 drafts
      c->Args({static_cast<long>(t), M, 0});
      if (kvd::detail::fast_matmul_type(t)) c->Args({static_cast<long>(t), M, 1});
    }
  c->Unit(benchmark::kMicrosecond);
  auto* d = benchmark::RegisterBenchmark("BM_Matmul16InCache", BM_Matmul16InCache);
  d->ArgNames({"type", "M", "fast"});
  for (WeightType t : {WeightType::kF16, WeightType::kBF16})
    for (long M : {1L, 5L, 8L, 64L, 256L}) {
      d->Args({static_cast<long>(t), M, 0});
      if (kvd::detail::fast_bf16_type(t, 2048)) d->Args({static_cast<long>(t), M, 1});
    }
  d->Unit(benchmark::kMicrosecond);
#if defined(KVDECODE_FAST_TILES_512) || defined(KVDECODE_FAST_BF16)
  auto* e = benchmark::RegisterBenchmark("BM_DotPeak", BM_DotPeak);
  e->ArgName("bf16");
#if defined(KVDECODE_FAST_TILES_512)
  e->Arg(0);
#endif
#if defined(KVDECODE_FAST_BF16)
  e->Arg(1);
#endif
  e->Unit(benchmark::kMillisecond);
#endif
  return 0;
}();

}  // namespace
