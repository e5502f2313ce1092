// kvdecode-roofline: how close kvdecode runs to this machine's own limits,
// measured in one run on the same machine.
//
// 1. Machine limits.
//    * Streaming-read bandwidth: a 1 GiB array (256 MiB with --quick), far
//      larger than the last-level cache, first touched by the threads that
//      later read it, is OR-reduced with 64-byte vector loads (AVX-512; AVX2 or
//      64-bit words as fallbacks), 4 independent accumulators so the loads are
//      never waiting on each other. Each thread reads its own contiguous
//      slice, as 1, 2, 4, 8 or 16 interleaved sequential streams (a core with
//      several streams in flight reads faster than with one, as a matmul over
//      weight panels does); one pass is timed from before the parallel region
//      to after its join. Best pass over all stream counts (the median pass of
//      that stream count is printed too).
//    * FMA peak: each thread runs 16 independent fused multiply-add chains in
//      registers (16 >= latency 4 x 2 FMA ports), explicit intrinsics for
//      AVX-512 / AVX2, a scalar fallback. FLOPs = 2 per lane per fma. Best of
//      several runs, with 1 thread and with --threads threads.
// 2. kvdecode on random weights of the stories15M and stories110M shapes,
//    float32, --threads threads (default 2), through the library's public
//    calls (decode_step, prefill, decode_batch, forward_reference):
//    * decode tokens/s at position 256 (the cache holds 256 positions, the
//      step writes the 257th), against the bandwidth limit: one step must read
//      weight_bytes_per_token() + kv_bytes_per_token * 257 bytes;
//    * prefill of a 512-token prompt, tokens/s and FLOP/s (2 * last_macs())
//      against the FMA peak;
//    * decode_batch of 8 sequences against batch 1, both at position 256.
//    Figures are medians of repeated calls after a warm-up; the limits are
//    best-of, so fractions lean low rather than high.
// 3. Time per token against position for the 15M shape, with the KV cache
//    (decode_step at the position) and without (forward_reference of pos + 1
//    tokens, which is what a step costs when everything is recomputed):
//    time_per_token.csv and time_per_token.svg (drawn here, no plotting library).
//    summary.csv holds every figure of the final table.
//
// On a shared machine other processes' load ruins 2-thread figures (every
// parallel region waits for a descheduled thread). So each measurement first
// waits until other processes use at most --max-others of the CPUs (from
// /proc/stat minus our own time) and is repeated if they took more while it
// ran, for at most --patience seconds in all; the share each accepted figure
// was measured under is printed beside it.
//
// Both shapes use max_seq_len = 1024 (stories15M ships with 256); it sizes only
// the RoPE table and scratch, not the weights, so positions 256 and 512 fit.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif
#include <unistd.h>

#include "../examples/cli.hpp"
#include "model_shapes.hpp"
#include "svg_chart.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/io/model_format.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/convert/quantize.hpp"
#include "kvdecode/model/transformer.hpp"
#include "kvdecode/version.hpp"

namespace {

using kvd_bench::Shape;
using kvd_bench::random_tokens;
using kvd_bench::shape_config;
using kvd_bench::shape_name;
using kvd_bench::fmt;
using kvd_bench::line_chart_svg;
using kvd_bench::Series;
using kvd_bench::xml_escape;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Model = kvd::Transformer<float>;
using Cache = kvd::KVCache<float>;

// ---------------------------------------------------------------- options

struct Options {
  fs::path out_dir;
  int threads = 2;
  bool quick = false;
  double max_others = 0.10;  ///< a measurement during which others took more of the CPUs is repeated
  double patience = -1;      ///< seconds we may spend waiting and repeating (-1: 1200, 0 with --quick)
  std::vector<kvd::QuantScheme> schemes;  ///< --weight-types (empty: section 4 skipped)
  std::string quality_model;              ///< --quality-model
  std::vector<int> prefill_lengths;       ///< --prefill-lengths (empty: no prefill sweep)
  bool fast_matmul = false;               ///< --fast-matmul: the weight-type table in the fast mode
};

const char* const kIntro = R"(usage: kvdecode-roofline [options]

Measures this machine's streaming-read bandwidth and FMA peak, then kvdecode's
decode, prefill and batched decode on random weights of the stories15M and
stories110M shapes (float32), and prints each figure as a fraction of its limit
with the project's targets. Also times one token against position with and
without the KV cache (stories15M shape). With --weight-types, the same figures
for each storage scheme on the TinyLlama-1.1B shape, and with --quality-model
what each scheme costs in accuracy on a real model.)";

const char* const kOutro = "A full run takes a few minutes; progress goes to stderr.\n";

fs::path default_out_dir(const char* argv0) {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) exe = fs::absolute(argv0, ec);
  if (!ec && exe.has_parent_path() && exe.parent_path().filename() == "bin")
    return exe.parent_path().parent_path() / "roofline";
  return fs::path("roofline");
}

/// The options from argv (the shared table of ../examples/cli.hpp); prints --help and
/// exits 0 when asked. Throws kvd::ArgumentError naming a bad option (exit status 2).
Options parse_options(int argc, char** argv) {
  kvd::cli::Params p;
  p.threads = 2;
  p.out_dir = default_out_dir(argv[0]).string();
  kvd::cli::OptionTable table(kvd::cli::kRoofline, p, kIntro, kOutro);
  table.set_help("--threads", "threads for the bandwidth limit and every model figure; the FMA peak is measured "
                              "with 1 and N threads");
  table.set_help("--out-dir", "where to write summary.csv, time_per_token.csv and time_per_token.svg (the default "
                              "is <build dir>/roofline, next to the bin/ directory holding this program)");
  table.parse(argc, argv);
  if (p.help) {
    std::cout << table.help();
    std::exit(0);
  }
  Options o;
  o.out_dir = p.out_dir;
  o.threads = p.threads;
  o.quick = p.quick;
  o.max_others = p.max_others;
  o.patience = p.patience < 0 ? (p.quick ? 0 : 1200) : p.patience;
  if (p.weight_types == "all") {
    for (const auto& i : kvd::detail::quant_schemes()) o.schemes.push_back(i.scheme);
  } else {
    std::stringstream list(p.weight_types);
    for (std::string name; std::getline(list, name, ',');)
      if (!name.empty()) o.schemes.push_back(kvd::parse_quant_scheme(name));  // ArgumentError naming the text
  }
  o.quality_model = p.quality_model;
  if (!o.quality_model.empty() && o.schemes.empty())
    throw kvd::ArgumentError("--quality-model rates the schemes of --weight-types, which is not given");
  o.prefill_lengths = p.prefill_lengths;
  o.fast_matmul = p.fast_matmul;
  if (!o.prefill_lengths.empty() && o.schemes.empty())
    throw kvd::ArgumentError("--prefill-lengths times the schemes of --weight-types, which is not given");
  return o;
}

// ---------------------------------------------------------------- timing helpers

const Clock::time_point kStart = Clock::now();

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

/// Progress line on stderr: "[  12.3 s] message".
template <class... Args>
void progress(const char* fmt, Args... args) {
  std::fprintf(stderr, "[%7.1f s] ", seconds_between(kStart, Clock::now()));
  if constexpr (sizeof...(Args) == 0) std::fputs(fmt, stderr);
  else std::fprintf(stderr, fmt, args...);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

struct Samples {
  std::vector<double> v;  // seconds per call
  double median() const {
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  }
  double min() const { return *std::min_element(v.begin(), v.end()); }
  std::size_t size() const { return v.size(); }
};

/// Calls f `warmup` times untimed, then times single calls until at least
/// min_reps calls and min_seconds have passed (at most max_reps calls).
/// `after` runs untimed after every call (e.g. truncating a cache back).
Samples time_calls(const std::function<void()>& f, const std::function<void()>& after, int warmup, int min_reps,
                   double min_seconds, int max_reps) {
  for (int i = 0; i < warmup; ++i) {
    f();
    after();
  }
  Samples s;
  double total = 0;
  while (static_cast<int>(s.size()) < max_reps && (static_cast<int>(s.size()) < min_reps || total < min_seconds)) {
    const auto t0 = Clock::now();
    f();
    const double dt = seconds_between(t0, Clock::now());
    after();
    s.v.push_back(dt);
    total += dt;
  }
  return s;
}

/// CPU time the rest of the machine used while we measured: the machine's busy
/// time (/proc/stat) minus this process's (/proc/self/stat), as a share of all
/// CPUs over the interval. On a shared machine this says how much a figure was
/// disturbed; 2-thread figures suffer most when another process holds a core.
struct CpuSnapshot {
  Clock::time_point t;
  long long machine_busy = -1, self = -1;  // clock ticks
  static CpuSnapshot now() {
    CpuSnapshot s;
    s.t = Clock::now();
    std::ifstream st("/proc/stat");
    std::string cpu;
    long long user, nice, sys, idle, iowait, irq, softirq, steal;
    if (st >> cpu >> user >> nice >> sys >> idle >> iowait >> irq >> softirq >> steal && cpu == "cpu")
      s.machine_busy = user + nice + sys + irq + softirq + steal;
    std::ifstream self("/proc/self/stat");
    std::string line;
    if (std::getline(self, line)) {
      std::istringstream rest(line.substr(line.rfind(')') + 2));  // fields after "pid (comm) "
      std::string f;
      long long utime = 0, stime = 0;
      for (int i = 3; i <= 15 && rest >> f; ++i) {
        if (i == 14) utime = std::atoll(f.c_str());
        if (i == 15) stime = std::atoll(f.c_str());
      }
      s.self = utime + stime;
    }
    return s;
  }
};

/// Share of all CPUs used by other processes between a and b, or -1 if unknown.
double others_cpu_share(const CpuSnapshot& a, const CpuSnapshot& b) {
  if (a.machine_busy < 0 || b.machine_busy < 0 || a.self < 0 || b.self < 0) return -1;
  const double capacity = seconds_between(a.t, b.t) * sysconf(_SC_NPROCESSORS_ONLN) * sysconf(_SC_CLK_TCK);
  if (capacity <= 0) return -1;
  return std::clamp(static_cast<double>((b.machine_busy - a.machine_busy) - (b.self - a.self)) / capacity, 0.0, 1.0);
}

/// Keeps other processes' load out of the figures, within a time budget: before
/// each measurement it waits until the machine is idle, and it repeats a
/// measurement during which other processes took more than `max_others` of the
/// CPUs. Once `patience` seconds have gone into waiting and discarded runs, it
/// accepts what it gets; every figure carries the others' share it was measured
/// under, so a disturbed one is visible in the table.
class Undisturbed {
 public:
  Undisturbed(double max_others, double patience) : max_others_(max_others), patience_(patience) {}

  /// Runs f() until it was measured undisturbed (or patience ran out); returns
  /// its result and sets `busy` to the others' CPU share during the accepted run.
  template <class F>
  auto run(const std::string& what, F&& f, double& busy) {
    for (;;) {
      wait_idle(what);
      const auto c0 = CpuSnapshot::now();
      auto r = f();
      const auto c1 = CpuSnapshot::now();
      busy = others_cpu_share(c0, c1);
      if (busy <= max_others_ || exhausted()) return r;
      ++repeats_;
      spent_ += seconds_between(c0.t, c1.t);
      progress("%s: disturbed (other processes used %.0f%% of the CPUs); measuring again", what.c_str(), 100 * busy);
    }
  }

  int repeats() const { return repeats_; }
  double spent() const { return spent_; }
  double max_others() const { return max_others_; }

 private:
  bool exhausted() {
    if (spent_ < patience_) return false;
    if (!warned_ && patience_ > 0)
      progress("patience of %.0f s used up: accepting disturbed measurements from here on", patience_);
    warned_ = true;
    return true;
  }
  void wait_idle(const std::string& what) {
    bool said = false;
    while (!exhausted()) {
      const auto a = CpuSnapshot::now();
      usleep(500000);
      const auto b = CpuSnapshot::now();
      const double share = others_cpu_share(a, b);
      if (share < 0 || share <= max_others_) return;
      spent_ += seconds_between(a.t, b.t);
      if (!said)
        progress("%s: waiting for other processes to go quiet (they use %.0f%% of the CPUs)", what.c_str(), 100 * share);
      said = true;
    }
  }

  double max_others_, patience_;
  double spent_ = 0;
  int repeats_ = 0;
  bool warned_ = false;
};

// ---------------------------------------------------------------- machine limits

#if defined(__AVX512F__)
constexpr const char* kIsa = "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
constexpr const char* kIsa = "AVX2+FMA";
#else
constexpr const char* kIsa = "scalar";
#endif

// One vector load's worth of bytes, ORed into an accumulator.
#if defined(__AVX512F__)
using Chunk = __m512i;
inline Chunk chunk_zero() { return _mm512_setzero_si512(); }
inline Chunk chunk_or(Chunk a, const unsigned char* p) { return _mm512_or_si512(a, _mm512_load_si512(p)); }
#elif defined(__AVX2__)
using Chunk = __m256i;
inline Chunk chunk_zero() { return _mm256_setzero_si256(); }
inline Chunk chunk_or(Chunk a, const unsigned char* p) {
  return _mm256_or_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}
#else
using Chunk = std::uint64_t;
inline Chunk chunk_zero() { return 0; }
inline Chunk chunk_or(Chunk a, const unsigned char* p) { return a | *reinterpret_cast<const std::uint64_t*>(p); }
#endif
constexpr std::size_t kChunk = sizeof(Chunk);

/// Reads S sequential streams of `per_stream` bytes each, stream s starting at
/// p + s * per_stream (64-byte aligned; per_stream a multiple of 128), the
/// streams interleaved two vectors at a time, and ORs everything into one word.
/// Four accumulators, so the loads never wait on each other.
template <int S>
__attribute__((noinline)) std::uint64_t or_streams(const unsigned char* p, std::size_t per_stream) {
  Chunk a[4] = {chunk_zero(), chunk_zero(), chunk_zero(), chunk_zero()};
  for (std::size_t i = 0; i < per_stream; i += 2 * kChunk)
#pragma GCC unroll 32
    for (int s = 0; s < S; ++s)
#pragma GCC unroll 2
      for (std::size_t j = 0; j < 2 * kChunk; j += kChunk) {
        Chunk& acc = a[(2 * s + j / kChunk) % 4];
        acc = chunk_or(acc, p + s * per_stream + i + j);
      }
  alignas(64) std::uint64_t w[kChunk / 8 * 4];
  std::memcpy(w, a, sizeof a);  // reduced through memory: GCC 12's _mm512_reduce_* trip -Wuninitialized
  std::uint64_t r = 0;
  for (std::uint64_t x : w) r |= x;
  return r;
}

/// Streams per thread tried by the bandwidth measurement, and their kernels.
constexpr int kStreamCounts[] = {1, 2, 4, 8, 16};
using StreamsFn = std::uint64_t (*)(const unsigned char*, std::size_t);
constexpr StreamsFn kStreamsFns[] = {or_streams<1>, or_streams<2>, or_streams<4>, or_streams<8>, or_streams<16>};

struct Bandwidth {
  double best_gbs = 0, median_gbs = 0;  // best pass, and the median pass of the same stream count
  int streams = 1;                      // streams per thread that read fastest
  int passes = 0;                       // per stream count
};

/// Streaming-read bandwidth of `threads` threads over a `bytes` array: each thread
/// reads its own contiguous slice as 1, 2, 4, 8 or 16 interleaved sequential
/// streams (more streams keep more cache-line fills in flight per core, which can
/// raise a core's read rate by a quarter); `passes` timed passes per stream count,
/// the best pass overall is the limit. A pass is timed from before the parallel
/// region to after its join.
Bandwidth measure_bandwidth(const unsigned char* data, std::size_t bytes, int threads, int passes) {
  Bandwidth best;
  best.passes = passes;
  std::uint64_t sink = 0;
  for (std::size_t k = 0; k < std::size(kStreamCounts); ++k) {
    const int S = kStreamCounts[k];
    const std::size_t per_stream = bytes / threads / S / 128 * 128;
    const std::size_t slice = per_stream * S;
    Samples s;
    for (int r = 0; r < passes; ++r) {
      std::uint64_t acc = 0;
      const auto t0 = Clock::now();
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) reduction(| : acc)
      acc |= kStreamsFns[k](data + omp_get_thread_num() * slice, per_stream);
#else
      for (int t = 0; t < threads; ++t) acc |= kStreamsFns[k](data + t * slice, per_stream);
#endif
      s.v.push_back(seconds_between(t0, Clock::now()));
      sink |= acc;
    }
    const double gb = static_cast<double>(slice) * threads / 1e9;
    if (gb / s.min() > best.best_gbs) {
      best.best_gbs = gb / s.min();
      best.median_gbs = gb / s.median();
      best.streams = S;
    }
  }
  if (sink == 0) std::fprintf(stderr, "(bandwidth array read back as zeros)\n");  // keeps the reads alive
  return best;
}

#if defined(__AVX512F__)
constexpr int kFmaChains = 16;
#else
constexpr int kFmaChains = 12;
#endif

/// Runs `iters` rounds of kFmaChains independent fmas on full vectors; returns
/// a value derived from every chain so none can be dropped. FLOPs per round:
/// 2 * kFmaChains * lanes.
__attribute__((noinline)) double fma_chains(long iters, float seed) {
#if defined(__AVX512F__)
#define KVD_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#else
// 12 chains: with a and b they fill 14 of AVX2's 16 ymm registers. 16 chains
// spill one to memory every round (58 GFLOP/s per core against 102 on Zen 3).
#define KVD_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#endif
#if defined(__AVX512F__)
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(seed * 1e-6f);
#define KVD_INIT(i) __m512 c##i = _mm512_set1_ps(seed + 0.01f * i);
#define KVD_STEP(i) c##i = _mm512_fmadd_ps(c##i, a, b);
#define KVD_SUM(i) total = _mm512_add_ps(total, c##i);
  KVD_CHAINS(KVD_INIT)
  for (long r = 0; r < iters; ++r) { KVD_CHAINS(KVD_STEP) }
  __m512 total = _mm512_setzero_ps();
  KVD_CHAINS(KVD_SUM)
  alignas(64) float w[16];
  _mm512_store_ps(w, total);
  double sum = 0;
  for (float x : w) sum += x;
  return sum;
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(seed * 1e-6f);
#define KVD_INIT(i) __m256 c##i = _mm256_set1_ps(seed + 0.01f * i);
#define KVD_STEP(i) c##i = _mm256_fmadd_ps(c##i, a, b);
#define KVD_SUM(i) total = _mm256_add_ps(total, c##i);
  KVD_CHAINS(KVD_INIT)
  for (long r = 0; r < iters; ++r) { KVD_CHAINS(KVD_STEP) }
  __m256 total = _mm256_setzero_ps();
  KVD_CHAINS(KVD_SUM)
  alignas(32) float w[8];
  _mm256_store_ps(w, total);
  return w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + w[6] + w[7];
#else
  const float a = 0.999999f, b = seed * 1e-6f;
#define KVD_INIT(i) float c##i = seed + 0.01f * i;
#define KVD_STEP(i) c##i = std::fma(c##i, a, b);
#define KVD_SUM(i) total += c##i;
  KVD_CHAINS(KVD_INIT)
  for (long r = 0; r < iters; ++r) { KVD_CHAINS(KVD_STEP) }
  float total = 0;
  KVD_CHAINS(KVD_SUM)
  return total;
#endif
#undef KVD_INIT
#undef KVD_STEP
#undef KVD_SUM
#undef KVD_CHAINS
}

constexpr int kFmaLanes =
#if defined(__AVX512F__)
    16;
#elif defined(__AVX2__) && defined(__FMA__)
    8;
#else
    1;
#endif

struct FmaPeak {
  double best_gflops = 0, median_gflops = 0;
};

/// float32 FMA peak of `threads` threads: each runs fma_chains(iters); best of `runs`.
FmaPeak measure_fma_peak(int threads, long iters, int runs) {
  double sink = 0;
  Samples s;
  for (int r = 0; r < runs; ++r) {
    double acc = 0;
    const auto t0 = Clock::now();
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) reduction(+ : acc)
    acc += fma_chains(iters, 1.0f + 0.001f * omp_get_thread_num());
#else
    for (int t = 0; t < threads; ++t) acc += fma_chains(iters, 1.0f + 0.001f * t);
#endif
    s.v.push_back(seconds_between(t0, Clock::now()));
    sink += acc;
  }
  if (!(sink > 0)) std::fprintf(stderr, "(fma chains gave %g)\n", sink);
  const double gflop = 2.0 * kFmaChains * kFmaLanes * static_cast<double>(iters) * threads / 1e9;
  return {gflop / s.min(), gflop / s.median()};
}

// ---------------------------------------------------------------- model figures

/// How many repetitions each kind of measurement gets.
struct Reps {
  int min_reps;
  double min_seconds;
  int max_reps;
};

struct ModelFigures {
  Shape shape;
  std::uint64_t weight_bytes = 0, kv_bytes_per_token = 0;
  int decode_pos = 256;
  Samples decode;            // seconds per decode_step at decode_pos
  int prefill_tokens = 512;
  Samples prefill;           // seconds per prefill of prefill_tokens
  std::uint64_t prefill_macs = 0;
  int batch = 8;
  Samples batch1, batchN;    // seconds per decode_batch step (1 and `batch` sequences) at decode_pos
  double decode_busy = -1, prefill_busy = -1, batch_busy = -1;  // others' CPU share while measuring
};

/// Seconds per decode_step at position `pos` (the cache holds pos positions).
Samples time_decode(Model& m, int pos, const Reps& r) {
  const std::vector<int> tokens = random_tokens(pos + 1, m.config().vocab_size);
  Cache cache(m.config(), pos + 1);
  m.prefill(std::vector<int>(tokens.begin(), tokens.begin() + pos), cache);
  return time_calls([&] { m.decode_step(tokens[pos], cache); }, [&] { cache.truncate(pos); }, 3, r.min_reps,
                    r.min_seconds, r.max_reps);
}

/// Seconds per forward_reference of pos + 1 tokens: one step without a cache.
Samples time_reference(Model& m, int pos, const Reps& r) {
  const std::vector<int> tokens = random_tokens(pos + 1, m.config().vocab_size);
  return time_calls([&] { m.forward_reference(tokens, /*all_logits=*/false); }, [] {}, 1, r.min_reps, r.min_seconds, r.max_reps);
}

/// Seconds per decode_batch step of `batch` sequences, each at position `pos`.
Samples time_batch(Model& m, int batch, int pos, const Reps& r) {
  const std::vector<int> next = random_tokens(batch, m.config().vocab_size, 11);
  std::vector<Cache> caches = kvd_bench::batch_caches(m, batch, pos);
  std::vector<Cache*> ptrs;
  for (auto& c : caches) ptrs.push_back(&c);
  return time_calls([&] { m.decode_batch(next, ptrs); }, [&] { for (auto& c : caches) c.truncate(pos); }, 3,
                    r.min_reps, r.min_seconds, r.max_reps);
}

ModelFigures measure_model(Shape shape, bool quick, Undisturbed& u) {
  const kvd::ModelConfig cfg = shape_config(shape);
  progress("%s: generating and packing random weights (%s)", shape_name(shape), cfg.summary().c_str());
  const auto t0 = Clock::now();
  Model m(kvd::ModelWeights<float>::random(cfg, 1234));
  ModelFigures f;
  f.shape = shape;
  f.weight_bytes = m.weight_bytes_per_token();
  f.kv_bytes_per_token = cfg.kv_bytes_per_token(kvd::DType::kF32);
  progress("%s: model ready in %.1f s, %.1f MB of weights per token", shape_name(shape),
           seconds_between(t0, Clock::now()), f.weight_bytes / 1e6);

  const Reps decode_reps = quick ? Reps{10, 0.3, 200} : Reps{30, 3.0, 2000};
  const std::string name = shape_name(shape);
  f.decode = u.run(name + " decode", [&] { return time_decode(m, f.decode_pos, decode_reps); }, f.decode_busy);
  progress("%s: decode at position %d: median %.3f ms/token (best %.3f) over %zu steps; other processes used %.0f%% of the CPUs",
           shape_name(shape), f.decode_pos, f.decode.median() * 1e3, f.decode.min() * 1e3, f.decode.size(),
           100 * f.decode_busy);

  Cache cache(cfg, f.prefill_tokens);
  const std::vector<int> prompt = random_tokens(f.prefill_tokens, cfg.vocab_size);
  m.reserve(f.prefill_tokens);
  const Reps prefill_reps = quick ? Reps{2, 0.3, 20} : Reps{5, 4.0, 200};
  f.prefill = u.run(name + " prefill", [&] {
    return time_calls([&] { m.prefill(prompt, cache); }, [&] { cache.clear(); }, 1, prefill_reps.min_reps,
                      prefill_reps.min_seconds, prefill_reps.max_reps);
  }, f.prefill_busy);
  f.prefill_macs = m.last_macs();
  progress("%s: prefill %d tokens: median %.1f ms (best %.1f) over %zu runs; other processes used %.0f%% of the CPUs",
           shape_name(shape), f.prefill_tokens, f.prefill.median() * 1e3, f.prefill.min() * 1e3, f.prefill.size(),
           100 * f.prefill_busy);

  const Reps batch_reps = quick ? Reps{10, 0.3, 200} : Reps{20, 2.0, 2000};
  // both batch sizes in one measurement, so their ratio comes from the same conditions
  auto both = u.run(name + " decode_batch", [&] {
    return std::make_pair(time_batch(m, 1, f.decode_pos, batch_reps), time_batch(m, f.batch, f.decode_pos, batch_reps));
  }, f.batch_busy);
  f.batch1 = both.first;
  f.batchN = both.second;
  progress("%s: decode_batch at position %d: batch 1 %.3f ms/step, batch %d %.3f ms/step (medians); other processes "
           "used %.0f%% of the CPUs",
           shape_name(shape), f.decode_pos, f.batch1.median() * 1e3, f.batch, f.batchN.median() * 1e3, 100 * f.batch_busy);
  return f;
}

struct PositionPoint {
  int pos;
  Samples cached, reference;
  double busy = -1;  // others' CPU share while measuring this point
};

std::vector<PositionPoint> measure_time_per_token(bool quick, Undisturbed& u) {
  const kvd::ModelConfig cfg = shape_config(Shape::k15M);
  progress("time per token vs position (stories15M shape): building the model");
  Model m(kvd::ModelWeights<float>::random(cfg, 1234));
  std::vector<PositionPoint> pts;
  const Reps cached_reps = quick ? Reps{10, 0.2, 200} : Reps{30, 1.0, 2000};
  const Reps ref_reps = quick ? Reps{2, 0.2, 50} : Reps{5, 1.5, 200};
  for (int pos : {1, 16, 32, 64, 128, 192, 255}) {
    PositionPoint p{pos, {}, {}};
    std::tie(p.cached, p.reference) = u.run("position " + std::to_string(pos), [&] {
      return std::make_pair(time_decode(m, pos, cached_reps), time_reference(m, pos, ref_reps));
    }, p.busy);
    progress("  position %3d: with cache %.3f ms, cache-free %.3f ms (%.1fx); other processes used %.0f%% of the CPUs",
             pos, p.cached.median() * 1e3, p.reference.median() * 1e3, p.reference.median() / p.cached.median(),
             100 * p.busy);
    pts.push_back(std::move(p));
  }
  return pts;
}

// ---------------------------------------------------------------- 4. storage schemes (TinyLlama-1.1B shape)

/// One storage scheme's figures on the 1.1B shape, and optionally its quality.
struct SchemeFigures {
  kvd::QuantScheme scheme;
  std::uint64_t matrix_bytes = 0, matrix_values = 0;  // the 2-D weights as stored
  std::uint64_t step_bytes = 0;                       // bytes one decode step at position 256 reads
  Samples decode, prefill, batch1, batchN;
  std::uint64_t prefill_macs = 0;
  double decode_busy = -1, prefill_busy = -1, batch_busy = -1;
  bool rated = false;
  double kl = 0, top1 = 0, ppl = 0;  // quality on --quality-model's text
  std::uint64_t quality_file_bytes = 0;
  std::string quality_types;          // tensor types of the rated file ("q5_0 x10, q8_0 x1")
  double bits_per_weight() const { return matrix_values ? 8.0 * matrix_bytes / matrix_values : 0; }
  bool fast = false;  // measured in the fast mode (--fast-matmul)
  std::string label() const { return std::string(kvd::quant_scheme_name(scheme)) + (fast ? "+fast" : ""); }
};

constexpr int kTypePos = 256, kTypePrefill = 256, kTypeBatch = 8, kQualityTokens = 320;
/// Whether a scheme's main storage type is one the fast mode computes (every block type
/// but q8_0; f16 and bf16 where the CPU has AVX512-BF16).
bool scheme_has_fast_types(kvd::QuantScheme s) {
  const kvd::WeightType t = kvd::quant_scheme_type(s);
  return kvd::detail::fast_matmul_type(t) || kvd::detail::fast_bf16_type(t, 2048);
}

SchemeFigures measure_scheme(const kvd::ModelWeights<float>& f32, kvd::QuantScheme scheme, bool quick, Undisturbed& u,
                             bool fast) {
  SchemeFigures f;
  f.scheme = scheme;
  f.fast = fast;
  const std::string name = "1.1B " + f.label();
  progress("%s: storing the weights", name.c_str());
  kvd::ModelWeights<float> w = kvd_bench::weights_in_scheme(f32, scheme);
  auto count = [&](const kvd::WeightMatrix& m) {
    f.matrix_bytes += m.bytes();
    f.matrix_values += static_cast<std::uint64_t>(m.rows()) * static_cast<std::uint64_t>(m.cols());
  };
  kvd::for_each_tensor(static_cast<const kvd::ModelWeights<float>&>(w), [&](const kvd::TensorSpec&, int, auto slot) {
    if (slot.matrix) count(*slot.matrix);
  });
  const kvd::ModelConfig cfg = w.config;
  Model m(std::move(w));
  m.set_fast_matmul(fast);
  f.step_bytes = m.weight_bytes_per_token() + cfg.kv_bytes_per_token(kvd::DType::kF32) * (kTypePos + 1);

  const Reps decode_reps = quick ? Reps{5, 0.3, 100} : Reps{15, 2.0, 1000};
  f.decode = u.run(name + " decode", [&] { return time_decode(m, kTypePos, decode_reps); }, f.decode_busy);
  progress("%s: decode at position %d: median %.2f ms/token; other processes used %.0f%% of the CPUs", name.c_str(),
           kTypePos, f.decode.median() * 1e3, 100 * f.decode_busy);
  if (!quick) {
    Cache cache(cfg, kTypePrefill);
    const std::vector<int> prompt = random_tokens(kTypePrefill, cfg.vocab_size);
    m.reserve(kTypePrefill);
    f.prefill = u.run(name + " prefill", [&] {
      return time_calls([&] { m.prefill(prompt, cache); }, [&] { cache.clear(); }, 1, 3, 0.0, 3);
    }, f.prefill_busy);
    f.prefill_macs = m.last_macs();
    progress("%s: prefill %d tokens: median %.0f ms; other processes used %.0f%% of the CPUs", name.c_str(),
             kTypePrefill, f.prefill.median() * 1e3, 100 * f.prefill_busy);
    const Reps batch_reps{10, 1.0, 500};
    auto both = u.run(name + " decode_batch", [&] {
      return std::make_pair(time_batch(m, 1, kTypePos, batch_reps), time_batch(m, kTypeBatch, kTypePos, batch_reps));
    }, f.batch_busy);
    f.batch1 = both.first;
    f.batchN = both.second;
    progress("%s: decode_batch: batch 1 %.2f ms/step, batch %d %.2f ms/step; other processes used %.0f%% of the CPUs",
             name.c_str(), f.batch1.median() * 1e3, kTypeBatch, f.batchN.median() * 1e3, 100 * f.batch_busy);
  }
  return f;
}

/// Prefill (time to first token) of each prompt length, one scheme.
struct PrefillPoint {
  int tokens = 0;
  Samples seconds;
  std::uint64_t macs = 0;
  double busy = -1;
};

std::vector<PrefillPoint> measure_prefill_sweep(const kvd::ModelWeights<float>& f32, kvd::QuantScheme scheme,
                                                const std::vector<int>& lengths, Undisturbed& u, bool fast) {
  const std::string name = std::string("1.1B ") + kvd::quant_scheme_name(scheme) + (fast ? "+fast" : "");
  kvd::ModelWeights<float> w = kvd_bench::weights_in_scheme(f32, scheme);
  const kvd::ModelConfig cfg = w.config;
  Model m(std::move(w));
  m.set_fast_matmul(fast);
  std::vector<PrefillPoint> pts;
  for (int n : lengths) {
    PrefillPoint p;
    p.tokens = n;
    Cache cache(cfg, n);
    const std::vector<int> prompt = random_tokens(n, cfg.vocab_size);
    m.reserve(n);
    // short prompts take milliseconds: a warm-up run, then at least 3 runs and 2 s, at most
    // 20; from 512 tokens on (seconds each) no warm-up, and from 1024 on 2 runs
    const int warmup = n < 512 ? 1 : 0, min_reps = n < 1024 ? 3 : 2;
    p.seconds = u.run(name + " prefill " + std::to_string(n), [&] {
      return time_calls([&] { m.prefill(prompt, cache); }, [&] { cache.clear(); }, warmup, min_reps, 2.0, 20);
    }, p.busy);
    p.macs = m.last_macs();
    progress("%s: prefill %4d tokens: median %.1f ms, %.1f tokens/s; other processes used %.0f%% of the CPUs",
             name.c_str(), n, p.seconds.median() * 1e3, n / p.seconds.median(), 100 * p.busy);
    pts.push_back(std::move(p));
  }
  return pts;
}

/// Natural-log softmax of a logits row, in double.
std::vector<double> log_softmax(const float* x, int n) {
  double mx = x[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double z = 0;
  for (int i = 0; i < n; ++i) z += std::exp(x[i] - mx);
  const double lz = mx + std::log(z);
  std::vector<double> l(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) l[i] = x[i] - lz;
  return l;
}

/// `n` tokens the model itself samples from BOS (token 1) at temperature 1 (seed fixed),
/// through the cache; its text for the quality figures.
std::vector<int> sampled_text(Model& m, int n) {
  std::vector<int> text = {1};
  Cache cache(m.config(), n);
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const int V = m.config().vocab_size;
  std::vector<float> row(static_cast<std::size_t>(V));  // (V) logits of the last position
  auto keep_last = [&](const kvd::LogitsView<float>& l) { for (int i = 0; i < V; ++i) row[i] = l(l.rows() - 1, i); };
  keep_last(m.prefill(text, cache));
  while (static_cast<int>(text.size()) < n) {
    const std::vector<double> lp = log_softmax(row.data(), V);
    double r = uni(rng), acc = 0;
    int next = V - 1;
    for (int i = 0; i < V; ++i)
      if ((acc += std::exp(lp[i])) > r) { next = i; break; }
    text.push_back(next);
    keep_last(m.decode_step(next, cache));
  }
  return text;
}

/// Quantizes `path` (an F32 model in any format kvd::quantize_model reads) with `scheme` through kvd::quantize_model into a scratch
/// file, loads it, and rates its next-token distributions over `text` against `ref`
/// (the F32 model's logits, one row per position): mean KL(F32 || scheme), top-1 agreement,
/// perplexity of the text.
void rate_scheme(SchemeFigures& f, const std::string& path, const fs::path& scratch_dir, const std::vector<int>& text,
                 const kvd::RowMatrix<float>& ref) {
  const fs::path tmp = scratch_dir / ("quality-" + f.label() + ".gguf");
  const kvd::QuantizeResult q = kvd::quantize_model(path, tmp.string(), f.scheme);
  std::map<std::string, int> types;
  for (const auto& t : q.tensors)
    if (t.ne.size() >= 2) ++types[kvd::weight_type_name(t.type)];
  for (const auto& [t, n] : types) f.quality_types += (f.quality_types.empty() ? "" : ", ") + t + " x" + std::to_string(n);
  f.quality_file_bytes = q.file_bytes;
  kvd::GGUFLoadOptions lo;
  lo.max_seq_len = static_cast<int>(text.size());
  Model qm(kvd::load_gguf_model<float>(tmp.string(), lo));
  qm.set_fast_matmul(f.fast);
  std::error_code ec;
  fs::remove(tmp, ec);
  const kvd::RowMatrix<float> got = qm.forward_reference(text, /*all_logits=*/true);  // (n, V)
  const int V = qm.config().vocab_size, n = static_cast<int>(text.size()) - 1;  // positions with a next token
  double kl = 0, nll = 0;
  int agree = 0;
  for (int p = 0; p < n; ++p) {
    const std::vector<double> lp = log_softmax(ref.data() + static_cast<long>(p) * V, V);
    const std::vector<double> lq = log_softmax(got.data() + static_cast<long>(p) * V, V);
    for (int i = 0; i < V; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    agree += kvd::argmax(ref.data() + static_cast<long>(p) * V, V) == kvd::argmax(got.data() + static_cast<long>(p) * V, V);
    nll -= lq[text[p + 1]];
  }
  f.rated = true;
  f.kl = kl / n;
  f.top1 = static_cast<double>(agree) / n;
  f.ppl = std::exp(nll / n);
}

// The SVG chart (line_chart_svg, Series, fmt, xml_escape) is in svg_chart.hpp.

// ---------------------------------------------------------------- report

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text;
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", p.string().c_str());
    std::exit(1);
  }
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const auto c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  return "unknown CPU";
}

/// The final table: one line per figure, columns as in kTableHead.
using TableRow = std::vector<std::string>;
const TableRow kTableHead = {"figure", "model", "measured (median)", "as rate", "limit", "of limit", "best run",
                             "target", "met", "others' CPU"};

void print_table(const std::vector<TableRow>& rows) {
  std::vector<std::size_t> w(kTableHead.size());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = kTableHead[i].size();
  for (const auto& r : rows)
    for (std::size_t i = 0; i < w.size() && i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const TableRow& r) {
    std::string out;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const std::string& c = i < r.size() ? r[i] : std::string();
      out += (i ? "  " : "") + c + std::string(w[i] - c.size(), ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    std::printf("%s\n", out.c_str());
  };
  line(kTableHead);
  std::size_t total = 0;
  for (std::size_t i = 0; i < w.size(); ++i) total += w[i] + (i ? 2 : 0);
  std::printf("%s\n", std::string(total, '-').c_str());
  for (const auto& r : rows) line(r);
}

std::string pct(double f) { return fmt("%.1f%%", 100.0 * f); }

/// Decode target per scheme (fraction of the bandwidth bound): the issues' figures.
double decode_target(kvd::QuantScheme s) {
  switch (kvd::quant_scheme_type(s)) {
    case kvd::WeightType::kF16:
    case kvd::WeightType::kBF16: return 0.90;
    case kvd::WeightType::kF32:
    case kvd::WeightType::kQ8_0: return 0.85;
    case kvd::WeightType::kQ4_K:
    case kvd::WeightType::kQ6_K:
    case kvd::WeightType::kQ4_0: return 0.75;
    default: return 0.60;
  }
}

/// The per-scheme table on stdout, weight_types.csv, and two charts against bits per
/// weight: decode tokens/s (with the bandwidth bound) and, when rated, KL divergence.
void print_schemes(const std::vector<SchemeFigures>& v, double bw_gbs, double fma_gflops, int T, const fs::path& dir) {
  constexpr double kPrefillTarget = 0.45, kBatchTarget = 5.0;
  const bool rated = v.front().rated;
  std::printf("\nStorage schemes on the TinyLlama-1.1B shape (random weights; block types quantize 64 rows per matrix\n"
              "and repeat them, so each row still streams its own bytes), %d thread(s), decode at position %d, prefill\n"
              "of %d tokens, batch %d vs 1; limits: %.2f GB/s and %.1f GFLOP/s from above. Medians.\n",
              T, kTypePos, kTypePrefill, kTypeBatch, bw_gbs, fma_gflops);
  std::printf("%-11s %5s %8s %8s %7s %8s %6s %9s %8s %7s %9s %6s", "scheme", "bpw", "MB/step", "tok/s", "GB/s",
              "of bw", "target", "prefill/s", "of FMA", "b8/b1", "others", "");
  if (rated) std::printf(" %9s %6s %8s  %s", "KL", "top-1", "ppl", "tensors (quality model)");
  std::printf("\n");
  std::ostringstream csv;
  csv << "scheme,bits_per_weight,step_bytes,decode_tokens_per_s,decode_GB_per_s,decode_fraction_of_bandwidth,"
         "decode_target,prefill_tokens_per_s,prefill_GFLOP_per_s,prefill_fraction_of_fma,batch8_over_batch1,"
         "decode_others_cpu,prefill_others_cpu,batch_others_cpu,kl,top1,perplexity,quality_file_bytes,quality_types\n";
  Series speed{"decode tokens/s (median)", "#1f63b4", {}, {}}, bound{"bandwidth bound", "#999999", {}, {}, true};
  Series kl{"mean KL(F32 || scheme) per position", "#d6452a", {}, {}};
  std::vector<const SchemeFigures*> by_bits;
  for (const auto& f : v) by_bits.push_back(&f);
  std::stable_sort(by_bits.begin(), by_bits.end(),
                   [](const SchemeFigures* a, const SchemeFigures* b) { return a->bits_per_weight() < b->bits_per_weight(); });
  for (const SchemeFigures* p : by_bits) {
    const SchemeFigures& f = *p;
    const double tps = 1.0 / f.decode.median(), gbs = f.step_bytes * tps / 1e9, frac = gbs / bw_gbs;
    const bool has_pf = f.prefill.size() > 0;
    const double pf_tps = has_pf ? kTypePrefill / f.prefill.median() : 0;
    const double pf_frac = has_pf ? 2.0 * f.prefill_macs / f.prefill.median() / 1e9 / fma_gflops : 0;
    const double ratio = f.batchN.size() ? (kTypeBatch / f.batchN.median()) / (1.0 / f.batch1.median()) : 0;
    const double target = decode_target(f.scheme);
    const bool is_q4k = f.scheme == kvd::QuantScheme::kQ4_K;
    std::string met = frac >= target ? "yes" : "NO";
    if (has_pf && pf_frac < kPrefillTarget) met += " pf-NO";
    if (is_q4k && f.batchN.size() && ratio < kBatchTarget) met += " b-NO";
    const double others = std::max({f.decode_busy, f.prefill_busy, f.batch_busy});
    std::printf("%-11s %5.2f %8.1f %8.2f %7.2f %7.1f%% %5.0f%% %9s %7s%% %7s %8.0f%% %6s", f.label().c_str(),
                f.bits_per_weight(), f.step_bytes / 1e6, tps, gbs, 100 * frac, 100 * target,
                has_pf ? fmt("%.1f", pf_tps).c_str() : "-", has_pf ? fmt("%.1f", 100 * pf_frac).c_str() : "-",
                f.batchN.size() ? fmt("%.2fx", ratio).c_str() : "-", 100 * std::max(others, 0.0), met.c_str());
    if (f.rated) std::printf(" %9.5f %5.1f%% %8.3f  %s", f.kl, 100 * f.top1, f.ppl, f.quality_types.c_str());
    std::printf("\n");
    csv << f.label() << ',' << fmt("%.4f", f.bits_per_weight()) << ',' << f.step_bytes << ','
        << fmt("%.4f", tps) << ',' << fmt("%.3f", gbs) << ',' << fmt("%.4f", frac) << ',' << target << ','
        << (has_pf ? fmt("%.3f", pf_tps) : "") << ',' << (has_pf ? fmt("%.2f", 2.0 * f.prefill_macs / f.prefill.median() / 1e9) : "")
        << ',' << (has_pf ? fmt("%.4f", pf_frac) : "") << ',' << (f.batchN.size() ? fmt("%.3f", ratio) : "") << ','
        << fmt("%.3f", f.decode_busy) << ',' << fmt("%.3f", f.prefill_busy) << ',' << fmt("%.3f", f.batch_busy) << ','
        << (f.rated ? fmt("%.6g", f.kl) : "") << ',' << (f.rated ? fmt("%.4f", f.top1) : "") << ','
        << (f.rated ? fmt("%.5f", f.ppl) : "") << ',' << (f.rated ? std::to_string(f.quality_file_bytes) : "") << ",\""
        << f.quality_types << "\"\n";
    speed.x.push_back(f.bits_per_weight());
    speed.y.push_back(tps);
    bound.x.push_back(f.bits_per_weight());
    bound.y.push_back(bw_gbs * 1e9 / f.step_bytes);
    if (f.rated && f.kl > 0) {
      kl.x.push_back(f.bits_per_weight());
      kl.y.push_back(f.kl);
    }
  }
  if (rated)
    std::printf("KL, top-1 and ppl: each scheme's copy of --quality-model (written by kvd::quantize_model, the types\n"
                "listed) against the F32 file, over %d positions of the F32 model's own sampled text.\n", kQualityTokens - 1);
  write_file(dir / "weight_types.csv", csv.str());
  const std::string sub = "TinyLlama-1.1B shape, random weights, " + std::to_string(T) + " thread(s), position " +
                          std::to_string(kTypePos) + "; " + cpu_model();
  write_file(dir / "weight_types_speed.svg",
             line_chart_svg("Decode speed by storage scheme", sub, "bits per weight (matrices)",
                            "tokens/s (log scale)", {bound, speed}));
  std::printf("wrote %s, %s", (dir / "weight_types.csv").string().c_str(), (dir / "weight_types_speed.svg").string().c_str());
  if (kl.x.size() >= 2) {
    write_file(dir / "weight_types_kl.svg",
               line_chart_svg("What quantization costs: KL divergence from F32", "stories260K, " +
                              std::to_string(kQualityTokens - 1) + " positions of its own text",
                              "bits per weight (matrices, 1.1B shape)", "mean KL per position (log scale)", {kl}));
    std::printf(", %s", (dir / "weight_types_kl.svg").string().c_str());
  }
  std::printf("\n");
}

/// The --prefill-lengths table, prefill_speed.csv and prefill_speed.svg.
void print_prefill_sweeps(const std::vector<std::string>& schemes, const std::vector<std::vector<PrefillPoint>>& sweeps,
                          double fma_gflops, int T, const fs::path& dir) {
  std::printf("\nTime to first token on the TinyLlama-1.1B shape: prefill of each prompt length into an empty cache,\n"
              "%d thread(s); tokens/s and share of the FMA peak (%.1f GFLOP/s) from the median run.\n", T, fma_gflops);
  std::printf("%-11s %7s %10s %10s %8s %8s\n", "scheme", "tokens", "ms", "tokens/s", "of FMA", "others");
  std::ostringstream csv;
  csv << "scheme,prompt_tokens,seconds_median,seconds_best,tokens_per_s,GFLOP_per_s,fraction_of_fma,others_cpu\n";
  static const char* const kColors[] = {"#1f63b4", "#d6452a", "#2a9d4a", "#8e44ad", "#e08e0b", "#555555"};
  std::vector<Series> series;
  for (std::size_t i = 0; i < sweeps.size(); ++i) {
    Series s{schemes[i] + " prefill tokens/s (median)", kColors[i % 6], {}, {}};
    for (const PrefillPoint& p : sweeps[i]) {
      const double sec = p.seconds.median(), tps = p.tokens / sec, gflops = 2.0 * p.macs / sec / 1e9;
      std::printf("%-11s %7d %10.1f %10.1f %7.1f%% %7.0f%%\n", schemes[i].c_str(), p.tokens, sec * 1e3,
                  tps, 100 * gflops / fma_gflops, 100 * std::max(p.busy, 0.0));
      csv << schemes[i] << ',' << p.tokens << ',' << fmt("%.6f", sec) << ','
          << fmt("%.6f", p.seconds.min()) << ',' << fmt("%.3f", tps) << ',' << fmt("%.2f", gflops) << ','
          << fmt("%.4f", gflops / fma_gflops) << ',' << fmt("%.3f", p.busy) << '\n';
      s.x.push_back(p.tokens);
      s.y.push_back(tps);
    }
    series.push_back(std::move(s));
  }
  write_file(dir / "prefill_speed.csv", csv.str());
  const std::string sub = "TinyLlama-1.1B shape, random weights, " + std::to_string(T) + " thread(s), empty cache; " +
                          cpu_model();
  write_file(dir / "prefill_speed.svg",
             line_chart_svg("Prefill speed against prompt length", sub, "prompt length (tokens, log scale)",
                            "prefill tokens/s (log scale)", series, std::string(),
                            "time to first token = length / tokens per second", /*log2_x=*/true));
  std::printf("wrote %s, %s\n", (dir / "prefill_speed.csv").string().c_str(), (dir / "prefill_speed.svg").string().c_str());
}

}  // namespace

int roofline_main(int argc, char** argv) {
  const Options opt = parse_options(argc, argv);
  // --quality-model in any format kvd::read_model_info reads, checked before minutes of measuring.
  if (!opt.quality_model.empty()) {
    const kvd::ModelInfo q = kvd::read_model_info(opt.quality_model);  // FileError/FormatError -> exit 1
    if (q.config.max_seq_len < kQualityTokens)
      throw kvd::ArgumentError(kvd::detail::msg("--quality-model ", opt.quality_model, " (", q.description, ") holds ",
                                                q.config.max_seq_len, " positions; the quality figures need ",
                                                kQualityTokens, " (stories260K.bin holds 512, its GGUF 128)"));
  }
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "cannot create %s: %s\n", opt.out_dir.string().c_str(), ec.message().c_str());
    return 1;
  }
  const int T = opt.threads;
  progress("kvdecode %s roofline: %s, %ld CPUs online, kernels %s, %d thread(s)%s", kvd::kVersion, cpu_model().c_str(),
           sysconf(_SC_NPROCESSORS_ONLN), kvd::detail::kSimdName, T, opt.quick ? ", --quick" : "");

  // ---- 1. machine limits
  const std::size_t bw_bytes = (opt.quick ? 256ull : 1024ull) << 20;
  const int bw_passes = opt.quick ? 2 : 6;  // per stream count
  progress("bandwidth: allocating and first-touching %zu MiB", bw_bytes >> 20);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> arr(
      static_cast<unsigned char*>(std::aligned_alloc(64, bw_bytes)), [](unsigned char* p) { std::free(p); });
  if (!arr) {
    std::fprintf(stderr, "cannot allocate %zu bytes for the bandwidth array\n", bw_bytes);
    return 1;
  }
  {
    // each thread writes the slice it will read (first touch places the pages near it)
    const std::size_t slice = bw_bytes / T / 256 * 256;
    auto* words = reinterpret_cast<std::uint64_t*>(arr.get());
    auto touch = [&](std::size_t t) {
      for (std::size_t i = t * slice / 8; i < (t + 1) * slice / 8; ++i) words[i] = i * 0x9E3779B97F4A7C15ull + 1;
    };
#if defined(_OPENMP)
#pragma omp parallel num_threads(T)
    touch(static_cast<std::size_t>(omp_get_thread_num()));
#else
    for (int t = 0; t < T; ++t) touch(static_cast<std::size_t>(t));
#endif
  }
  or_streams<1>(arr.get(), bw_bytes / 128 * 128);  // one untimed pass
  Undisturbed u(opt.max_others, opt.patience);
  double bw_busy = -1, bw1_busy = -1;
  const Bandwidth bw = u.run("bandwidth", [&] { return measure_bandwidth(arr.get(), bw_bytes, T, bw_passes); }, bw_busy);
  progress("bandwidth, %d thread(s): best %.2f GB/s (median %.2f) with %d stream(s) per thread; other processes used "
           "%.0f%% of the CPUs", T, bw.best_gbs, bw.median_gbs, bw.streams, 100 * bw_busy);
  Bandwidth bw1 = bw;
  bw1_busy = bw_busy;
  if (T != 1) {
    bw1 = u.run("bandwidth (1 thread)", [&] { return measure_bandwidth(arr.get(), bw_bytes, 1, bw_passes); }, bw1_busy);
    progress("bandwidth, 1 thread: best %.2f GB/s (median %.2f) with %d stream(s); other processes used %.0f%% of the "
             "CPUs", bw1.best_gbs, bw1.median_gbs, bw1.streams, 100 * bw1_busy);
  }
  arr.reset();

  const long fma_iters = opt.quick ? 20'000'000 : 100'000'000;
  const int fma_runs = opt.quick ? 3 : 7;
  double fma1_busy = -1, fma_busy = -1;
  const FmaPeak fma1 = u.run("FMA peak (1 thread)", [&] { return measure_fma_peak(1, fma_iters, fma_runs); }, fma1_busy);
  progress("FMA peak (%s, float32), 1 thread: best %.1f GFLOP/s, median %.1f; other processes used %.0f%% of the CPUs",
           kIsa, fma1.best_gflops, fma1.median_gflops, 100 * fma1_busy);
  FmaPeak fmaT = fma1;
  fma_busy = fma1_busy;
  if (T != 1) {
    fmaT = u.run("FMA peak", [&] { return measure_fma_peak(T, fma_iters, fma_runs); }, fma_busy);
    progress("FMA peak (%s, float32), %d threads: best %.1f GFLOP/s, median %.1f; other processes used %.0f%% of the "
             "CPUs", kIsa, T, fmaT.best_gflops, fmaT.median_gflops, 100 * fma_busy);
  }

  // ---- 4. storage schemes on the TinyLlama-1.1B shape (and their quality on a real model)
  // With --weight-types only the limits and these figures are measured.
  if (!opt.schemes.empty()) {
    kvd::set_num_threads(T);
    std::vector<SchemeFigures> schemes;
    std::unique_ptr<Model> qref;
    std::vector<int> qtext;
    kvd::RowMatrix<float> qlogits;  // (n, V) the F32 model's logits over its own text
    if (!opt.quality_model.empty()) {
      qref = std::make_unique<Model>(kvd::load_model_weights<float>(opt.quality_model));  // any format
      qtext = sampled_text(*qref, kQualityTokens);
      qlogits = qref->forward_reference(qtext, /*all_logits=*/true);
      progress("quality: %s sampled %d tokens of its own text (temperature 1)", opt.quality_model.c_str(), kQualityTokens);
    }
    const int max_len = opt.prefill_lengths.empty()
                            ? 1024 : std::max(1024, *std::max_element(opt.prefill_lengths.begin(), opt.prefill_lengths.end()));
    progress("1.1B shape: generating random float32 weights (%s)", kvd_bench::tinyllama_config(max_len).summary().c_str());
    const kvd::ModelWeights<float> f32 = kvd::ModelWeights<float>::random(kvd_bench::tinyllama_config(max_len), 2024);
    std::vector<std::vector<PrefillPoint>> sweeps;  // per scheme, with --prefill-lengths
    std::vector<std::string> sweep_labels;
    if (opt.fast_matmul)
      progress("--fast-matmul: schemes the fast mode computes (block types but q8_0; f16 and bf16 with AVX512-BF16) are measured twice, default and fast mode");
    for (kvd::QuantScheme sc : opt.schemes)
      for (bool fast : {false, true}) {
        if (fast && !(opt.fast_matmul && scheme_has_fast_types(sc))) continue;
        schemes.push_back(measure_scheme(f32, sc, opt.quick, u, fast));
        if (!opt.prefill_lengths.empty()) {
          sweeps.push_back(measure_prefill_sweep(f32, sc, opt.prefill_lengths, u, fast));
          sweep_labels.push_back(schemes.back().label());
        }
        if (qref) {
          rate_scheme(schemes.back(), opt.quality_model, opt.out_dir, qtext, qlogits);
          progress("quality of %s: KL %.5f, top-1 %.1f%%, perplexity %.3f (%s)", schemes.back().label().c_str(),
                   schemes.back().kl, 100 * schemes.back().top1, schemes.back().ppl, schemes.back().quality_types.c_str());
        }
      }
    std::printf("\nkvdecode %s roofline, %s: read bandwidth %.2f GB/s (%d thread(s), others' CPU %s), FMA peak %.1f "
                "GFLOP/s (others' CPU %s)\n", kvd::kVersion, cpu_model().c_str(), bw.best_gbs, T,
                bw_busy >= 0 ? fmt("%.0f%%", 100 * bw_busy).c_str() : "?", fmaT.best_gflops,
                fma_busy >= 0 ? fmt("%.0f%%", 100 * fma_busy).c_str() : "?");
    print_schemes(schemes, bw.best_gbs, fmaT.best_gflops, T, opt.out_dir);
    if (!sweeps.empty()) print_prefill_sweeps(sweep_labels, sweeps, fmaT.best_gflops, T, opt.out_dir);
    std::printf("%d measurement(s) were repeated because other processes took more than %.0f%% of the CPUs.\n",
                u.repeats(), 100 * u.max_others());
    return 0;
  }

  // ---- 2. model figures
  kvd::set_num_threads(T);
  std::vector<ModelFigures> figs;
  figs.push_back(measure_model(Shape::k15M, opt.quick, u));
  if (!opt.quick) figs.push_back(measure_model(Shape::k110M, opt.quick, u));

  // ---- 3. time per token against position
  const std::vector<PositionPoint> pts = measure_time_per_token(opt.quick, u);

  // ---- outputs
  {
    std::ostringstream csv;
    csv << "position,with_cache_ms_median,with_cache_ms_min,with_cache_runs,reference_ms_median,reference_ms_min,"
           "reference_runs,reference_over_cache\n";
    for (const auto& p : pts)
      csv << p.pos << ',' << fmt("%.5f", p.cached.median() * 1e3) << ',' << fmt("%.5f", p.cached.min() * 1e3) << ','
          << p.cached.size() << ',' << fmt("%.5f", p.reference.median() * 1e3) << ','
          << fmt("%.5f", p.reference.min() * 1e3) << ',' << p.reference.size() << ','
          << fmt("%.2f", p.reference.median() / p.cached.median()) << '\n';
    write_file(opt.out_dir / "time_per_token.csv", csv.str());

    double max_busy = 0;
    for (const auto& p : pts) max_busy = std::max(max_busy, p.busy);
    Series cached{"with KV cache (decode_step)", "#1f63b4", {}, {}};
    Series ref{"cache-free reference (forward_reference of pos+1 tokens)", "#d6452a", {}, {}, true};
    for (const auto& p : pts) {
      cached.x.push_back(p.pos);
      cached.y.push_back(p.cached.median() * 1e3);
      ref.x.push_back(p.pos);
      ref.y.push_back(p.reference.median() * 1e3);
    }
    const std::string subtitle = std::string("stories15M shape, random float32 weights, ") + std::to_string(T) +
                                 (T == 1 ? " thread" : " threads") + ", median per point; " + cpu_model();
    write_file(opt.out_dir / "time_per_token.svg",
               line_chart_svg("Time per token vs position: with and without the KV cache", subtitle, "position",
                              "ms per token (log scale)", {ref, cached},
                              fmt("%.0fx", pts.back().reference.median() / pts.back().cached.median()) +
                                  " slower without the cache at position " + std::to_string(pts.back().pos),
                              max_busy > 0.10 ? fmt("machine shared: other processes used up to %.0f%% of the CPUs "
                                                    "while these points were measured", 100 * max_busy)
                                              : std::string()));
  }

  // the summary table and its CSV
  constexpr double kDecodeTarget = 0.85, kPrefillTarget = 0.60, kBatchTarget = 5.0;
  std::vector<TableRow> rows;
  std::ostringstream csv;
  csv << "figure,model,value,unit,limit,limit_unit,fraction_of_limit,best_run_value,best_run_fraction,target,met,"
         "others_cpu_share\n";
  // value: median (limits: best pass); best_run_*: from the fastest single call
  auto csv_row = [&](const std::string& figure, const std::string& model, double v, const char* unit, double lim,
                     const char* lim_unit, double frac, double best_v, double best_frac, const std::string& target,
                     const std::string& met, double busy) {
    auto num = [](double x, const char* f) { return x >= 0 ? fmt(f, x) : std::string(); };
    csv << figure << ',' << model << ',' << fmt("%.6g", v) << ',' << unit << ',' << num(lim > 0 ? lim : -1, "%.6g")
        << ',' << lim_unit << ',' << num(frac, "%.4f") << ',' << num(best_v, "%.6g") << ',' << num(best_frac, "%.4f")
        << ',' << target << ',' << met << ',' << num(busy, "%.3f") << '\n';
  };
  auto busy_str = [](double b) { return b >= 0 ? fmt("%.0f%%", 100 * b) : std::string("?"); };
  csv_row("read_bandwidth", "machine", bw.best_gbs, "GB/s", 0, "", -1, -1, -1, "", "", bw_busy);
  csv_row("read_bandwidth_median_pass", "machine", bw.median_gbs, "GB/s", 0, "", -1, -1, -1, "", "", bw_busy);
  csv_row("read_bandwidth_streams_per_thread", "machine", bw.streams, "streams", 0, "", -1, -1, -1, "", "", bw_busy);
  csv_row("read_bandwidth_1thread", "machine", bw1.best_gbs, "GB/s", 0, "", -1, -1, -1, "", "", bw1_busy);
  csv_row("fma_peak_1thread", "machine", fma1.best_gflops, "GFLOP/s", 0, "", -1, -1, -1, "", "", fma1_busy);
  csv_row("fma_peak", "machine", fmaT.best_gflops, "GFLOP/s", 0, "", -1, -1, -1, "", "", fma_busy);
  for (const auto& f : figs) {
    const std::string name = shape_name(f.shape);
    const std::string at = std::to_string(f.decode_pos);
    // decode: bytes one step must read, against the bandwidth limit
    const double step_bytes =
        static_cast<double>(f.weight_bytes) + static_cast<double>(f.kv_bytes_per_token) * (f.decode_pos + 1);
    const double dec_tps = 1.0 / f.decode.median(), dec_best_tps = 1.0 / f.decode.min();
    const double dec_gbs = step_bytes * dec_tps / 1e9;
    const double bound_tps = bw.best_gbs * 1e9 / step_bytes;
    const double dec_frac = dec_tps / bound_tps, dec_best_frac = dec_best_tps / bound_tps;
    const bool dec_met = dec_frac >= kDecodeTarget;
    rows.push_back({"decode at pos " + at, name, fmt("%.1f tok/s", dec_tps) + fmt(" (%.2f ms)", f.decode.median() * 1e3),
                    fmt("%.2f GB/s", dec_gbs) + fmt(" (%.1f MB/step)", step_bytes / 1e6),
                    fmt("%.2f GB/s", bw.best_gbs) + fmt(" = %.1f tok/s", bound_tps), pct(dec_frac), pct(dec_best_frac),
                    ">= 85%", dec_met ? "yes" : "NO", busy_str(f.decode_busy)});
    csv_row("decode_pos" + at + "_tokens_per_s", name, dec_tps, "tokens/s", bound_tps, "tokens/s", dec_frac,
            dec_best_tps, dec_best_frac, ">=0.85", dec_met ? "yes" : "no", f.decode_busy);
    csv_row("decode_pos" + at + "_GB_per_s", name, dec_gbs, "GB/s", bw.best_gbs, "GB/s", dec_frac,
            step_bytes * dec_best_tps / 1e9, dec_best_frac, ">=0.85", dec_met ? "yes" : "no", f.decode_busy);
    csv_row("decode_pos" + at + "_bytes_per_step", name, step_bytes, "bytes", 0, "", -1, -1, -1, "", "", -1);

    // prefill: FLOPs against the FMA peak of the same thread count
    const double flop = 2.0 * static_cast<double>(f.prefill_macs);
    const double pf_gflops = flop / f.prefill.median() / 1e9, pf_best_gflops = flop / f.prefill.min() / 1e9;
    const double pf_frac = pf_gflops / fmaT.best_gflops, pf_best_frac = pf_best_gflops / fmaT.best_gflops;
    const bool pf_met = pf_frac >= kPrefillTarget;
    const std::string n = std::to_string(f.prefill_tokens);
    rows.push_back({"prefill " + n + " tokens", name,
                    fmt("%.0f tok/s", f.prefill_tokens / f.prefill.median()) + fmt(" (%.1f ms)", f.prefill.median() * 1e3),
                    fmt("%.1f GFLOP/s", pf_gflops), fmt("%.1f GFLOP/s", fmaT.best_gflops), pct(pf_frac),
                    pct(pf_best_frac), ">= 60%", pf_met ? "yes" : "NO", busy_str(f.prefill_busy)});
    csv_row("prefill" + n + "_tokens_per_s", name, f.prefill_tokens / f.prefill.median(), "tokens/s", 0, "", -1,
            f.prefill_tokens / f.prefill.min(), -1, "", "", f.prefill_busy);
    csv_row("prefill" + n + "_GFLOP_per_s", name, pf_gflops, "GFLOP/s", fmaT.best_gflops, "GFLOP/s", pf_frac,
            pf_best_gflops, pf_best_frac, ">=0.60", pf_met ? "yes" : "no", f.prefill_busy);

    // batched decode: aggregate tokens/s of `batch` sequences against one
    const double b1 = 1.0 / f.batch1.median(), bN = f.batch / f.batchN.median();
    const double b1_best = 1.0 / f.batch1.min(), bN_best = f.batch / f.batchN.min();
    const double ratio = bN / b1, ratio_best = bN_best / b1_best;
    const bool b_met = ratio >= kBatchTarget;
    const std::string bs = std::to_string(f.batch);
    rows.push_back({"batch " + bs + " vs 1 at pos " + at, name, fmt("%.1f vs ", bN) + fmt("%.1f tok/s", b1),
                    fmt("%.2fx", ratio), "-", "-", fmt("%.2fx", ratio_best), ">= 5x", b_met ? "yes" : "NO",
                    busy_str(f.batch_busy)});
    csv_row("decode_batch1_pos" + at + "_tokens_per_s", name, b1, "tokens/s", 0, "", -1, b1_best, -1, "", "", f.batch_busy);
    csv_row("decode_batch" + bs + "_pos" + at + "_tokens_per_s", name, bN, "tokens/s", 0, "", -1, bN_best, -1, "", "",
            f.batch_busy);
    csv_row("batch" + bs + "_over_batch1", name, ratio, "x", 0, "", -1, ratio_best, -1, ">=5", b_met ? "yes" : "no",
            f.batch_busy);
  }
  for (const auto& p : pts) {
    const std::string at = std::to_string(p.pos);
    csv_row("time_per_token_with_cache_pos" + at, "stories15M", p.cached.median() * 1e3, "ms", 0, "", -1,
            p.cached.min() * 1e3, -1, "", "", p.busy);
    csv_row("time_per_token_reference_pos" + at, "stories15M", p.reference.median() * 1e3, "ms", 0, "", -1,
            p.reference.min() * 1e3, -1, "", "", p.busy);
  }
  write_file(opt.out_dir / "summary.csv", csv.str());
  progress("done");

  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  std::printf("\nkvdecode %s roofline, %s%s\n", kvd::kVersion, cpu_model().c_str(), opt.quick ? "  [--quick: rough figures]" : "");
  std::printf("Machine limits (measured in this run; best of repeated passes, median in brackets):\n");
  std::printf("  streaming read bandwidth, %d thread(s): %8.2f GB/s  (%.2f)   others' CPU %s\n"
              "      %zu MiB array, %s loads, best with %d stream(s) per thread of 1-16; 1 thread: %.2f GB/s\n",
              T, bw.best_gbs, bw.median_gbs, busy_str(bw_busy).c_str(), bw_bytes >> 20, kIsa, bw.streams, bw1.best_gbs);
  std::printf("  FMA peak float32, 1 thread:             %8.1f GFLOP/s  (%.1f)   others' CPU %s\n", fma1.best_gflops,
              fma1.median_gflops, busy_str(fma1_busy).c_str());
  if (T != 1)
    std::printf("  FMA peak float32, %d threads:            %8.1f GFLOP/s  (%.1f)   others' CPU %s\n", T, fmaT.best_gflops,
                fmaT.median_gflops, busy_str(fma_busy).c_str());
  if (l3 > 0) std::printf("  last-level cache: %ld MiB\n", l3 >> 20);
  std::printf("\nkvdecode, float32, %d thread(s), random weights. \"measured\" and \"of limit\" use the median call,\n"
              "\"best run\" the fastest single call; targets are judged on the median. \"others' CPU\" is the share\n"
              "of all CPUs other processes used while that figure was measured (high = disturbed).\n", T);
  print_table(rows);
  for (const auto& f : figs)
    if (l3 > 0 && static_cast<long>(f.weight_bytes) < 2 * l3)
      std::printf("note: %s streams %.1f MB per step, within 2x of the %ld MiB last-level cache, so part of it may be\n"
                  "      served from cache and its decode fraction can overstate (or exceed) the DRAM bound.\n",
                  shape_name(f.shape), f.weight_bytes / 1e6, l3 >> 20);
  std::printf("%d measurement(s) were repeated because other processes took more than %.0f%% of the CPUs; "
              "%.0f s went into waiting and repeating.\n", u.repeats(), 100 * u.max_others(), u.spent());
  {
    bool disturbed = bw_busy > u.max_others() || fma_busy > u.max_others();
    for (const auto& f : figs)
      disturbed = disturbed || f.decode_busy > u.max_others() || f.prefill_busy > u.max_others() ||
                  f.batch_busy > u.max_others();
    if (disturbed)
      std::printf("WARNING: some figures were measured while other processes used more than %.0f%% of the CPUs\n"
                  "         (see \"others' CPU\"); they understate kvdecode and should be measured again.\n",
                  100 * u.max_others());
  }
  std::printf("\nTime per token vs position (stories15M shape, medians, ms):\n");
  std::printf("  %8s  %14s  %18s  %8s  %11s\n", "position", "with KV cache", "cache-free ref.", "ratio", "others' CPU");
  for (const auto& p : pts)
    std::printf("  %8d  %14.3f  %18.3f  %7.1fx  %11s\n", p.pos, p.cached.median() * 1e3, p.reference.median() * 1e3,
                p.reference.median() / p.cached.median(), busy_str(p.busy).c_str());
  std::printf("\nwrote %s, %s, %s\n", (opt.out_dir / "summary.csv").string().c_str(),
              (opt.out_dir / "time_per_token.csv").string().c_str(), (opt.out_dir / "time_per_token.svg").string().c_str());
  return 0;
}

int main(int argc, char** argv) {
  return kvd::cli::run_main("kvdecode-roofline", [&] { return roofline_main(argc, argv); });
}
