// kvdecode-kv_context: decode speed against context length per KV-cache storage
// type, side by side in one run. For each context length (default 512, 2048 and
// 8192 positions) and each cache type (default f32, f16, q8_0 and q4_0, keys and
// values alike) it fills a cache with that many positions of random keys and
// values (a decode step's cost does not depend on what the cache holds), then
// times decode steps continuing from there. The cache types take turns within
// each round, and each figure is the best of the rounds, so that a change in the
// machine's load hits every type alike.
//   kvdecode-kv_context MODEL.gguf [--contexts 512,2048,8192] [--types f32,f16,q8_0,q4_0]
//                       [--steps 8] [--rounds 3] [--threads 2] [--out-dir DIR]
//   kvdecode-kv_context --attention-only [the same options]
// --attention-only runs the 1.1B shape's attention with a negligible rest (random
// weights) instead of a file, so a step's time or instruction count is its attention.
// The model's own context is raised to the longest one asked for (the weights do
// not depend on it; RoPE's table is computed for it). Writes a Markdown table to
// stdout and, with --out-dir, kv_context.csv and kv_context.svg (tokens/s against
// context per cache type). Each row also gives the attention phase's share of the
// step and the bytes a step reads: the weights once, and the cache's keys and values
// of every position, so the memory bound of each figure is clear. Exit status: 0 success, 1 a failure, 2 bad arguments.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "svg_chart.hpp"
#include "kvdecode/kvdecode.hpp"

namespace {

namespace fs = std::filesystem;

// The model --attention-only runs instead of a file: TinyLlama-1.1B's attention
// (22 layers, 32 query and 4 KV heads of 64) around a token's negligible rest
// (d_model 64, hidden 64, vocabulary 256), random weights: a decode step is then
// almost all attention, for timing it or counting its instructions (callgrind).
constexpr const char* kAttentionOnly = "(attention of the 1.1B shape)";

kvd::ModelWeights<float> attention_only_weights(int max_seq_len) {
  kvd::ModelConfig c;
  c.n_layers = 22; c.n_heads = 32; c.n_kv_heads = 4; c.head_dim = 64;
  c.d_model = 64; c.hidden_dim = 64; c.vocab_size = 256; c.max_seq_len = max_seq_len;
  return kvd::ModelWeights<float>::random(c, 5);
}

struct Options {
  std::string model;
  std::vector<int> contexts{512, 2048, 8192};
  std::vector<kvd::DType> types{kvd::DType::kF32, kvd::DType::kF16, kvd::DType::kQ8, kvd::DType::kQ4};
  int steps = 8, rounds = 3, threads = 2;
  std::string out_dir;
};

const char* const kUsage =
    "usage: kvdecode-kv_context MODEL.gguf [--contexts 512,2048,8192] [--types f32,f16,q8_0,q4_0]\n"
    "                           [--steps 8] [--rounds 3] [--threads 2] [--out-dir DIR]\n"
    "       kvdecode-kv_context --attention-only [options]\n"
    "  Decode tokens/s at each context length per KV-cache type (keys and values alike), side by side.\n"
    "  --attention-only: a random model of the 1.1B shape's attention with a negligible rest instead of a file.\n";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

int parse_int(const std::string& name, const std::string& v, int lo, int hi) {
  std::size_t used = 0;
  long x = 0;
  try {
    x = std::stol(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || x < lo || x > hi)
    throw kvd::ArgumentError(kvd::detail::msg(name, " = '", v, "' must be an integer in [", lo, ", ", hi, "]"));
  return static_cast<int>(x);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw kvd::ArgumentError(kvd::detail::msg(a, " needs a value"));
      return argv[++i];
    };
    if (a == "--contexts") {
      o.contexts.clear();
      for (const auto& c : split(value())) o.contexts.push_back(parse_int("--contexts", c, 1, 1 << 17));
    } else if (a == "--types") {
      o.types.clear();
      for (const auto& t : split(value())) o.types.push_back(kvd::parse_dtype(t));
    } else if (a == "--steps") {
      o.steps = parse_int(a, value(), 1, 1000);
    } else if (a == "--rounds") {
      o.rounds = parse_int(a, value(), 1, 100);
    } else if (a == "--threads") {
      o.threads = parse_int(a, value(), 1, 1024);
    } else if (a == "--attention-only") {
      o.model = kAttentionOnly;
    } else if (a == "--out-dir") {
      o.out_dir = value();
    } else if (o.model.empty() && !a.empty() && a[0] != '-') {
      o.model = a;
    } else {
      throw kvd::ArgumentError(kvd::detail::msg("unknown argument '", a, "'"));
    }
  }
  if (o.model.empty()) throw kvd::ArgumentError("no MODEL.gguf given (or --attention-only)");
  if (o.contexts.empty() || o.types.empty()) throw kvd::ArgumentError("--contexts and --types need at least one entry");
  return o;
}

// One cache of storage type S (keys and values) filled with `n` positions of
// pseudo-random values in [-2, 2) (xorshift: cheap enough to fill 8k positions
// under callgrind; a step's cost does not depend on the values).
template <class S>
kvd::KVCache<float, S, S> filled_cache(const kvd::ModelConfig& c, int n, int capacity) {
  kvd::KVCache<float, S, S> cache(c, capacity);
  const long kv = static_cast<long>(c.n_layers) * c.n_kv_heads * c.head_dim;
  std::vector<float> k(kv), v(kv);
  std::uint32_t state = 2463534242u;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return static_cast<float>(state >> 8) * (4.0f / 16777216.0f) - 2.0f;
  };
  for (int p = 0; p < n; ++p) {
    for (long i = 0; i < kv; ++i) {
      k[i] = next();
      v[i] = next();
    }
    cache.append(k.data(), v.data());
  }
  return cache;
}

// Seconds per decode step: the whole step and its attention phase (kvd's phase
// profile: q/k norms, RoPE, the cache writes, scores, softmax and weighted sums).
struct StepTime {
  double step = 1e300, attention = 1e300;
};

// One measurement: the best of the rounds, for the step and for its attention apart.
struct Cell {
  StepTime best;
  std::uint64_t cache_bytes_per_token = 0;  // one position's keys and values, every layer
};

template <class S>
StepTime time_steps(kvd::Transformer<float>& m, int context, int steps, kvd::KVCache<float, S, S>& cache) {
  cache.truncate(context);
  m.decode_step(1, cache);  // warm-up: pages touched, OpenMP team started
  cache.truncate(context);
  kvd::detail::PhaseTimes phases;
  kvd::detail::set_phase_profile(&phases);
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) m.decode_step(1 + s, cache);
  const auto t1 = std::chrono::steady_clock::now();
  kvd::detail::set_phase_profile(nullptr);
  return {std::chrono::duration<double>(t1 - t0).count() / steps,
          phases.seconds[static_cast<int>(kvd::detail::Phase::kAttention)] / steps};
}

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cerr << kUsage;
    return argc < 2 ? 2 : 0;
  }
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const kvd::ArgumentError& e) {
    std::cerr << "kvdecode-kv_context: " << e.what() << "\n" << kUsage;
    return 2;
  }
  kvd::set_num_threads(o.threads);
  const int longest = *std::max_element(o.contexts.begin(), o.contexts.end());
  kvd::ModelWeights<float> weights = o.model == kAttentionOnly ? attention_only_weights(longest + o.steps + 1)
                                                               : kvd::load_gguf_model<float>(o.model);
  weights.config.max_seq_len = std::max(weights.config.max_seq_len, longest + o.steps + 1);
  kvd::Transformer<float> m(std::move(weights));
  const kvd::ModelConfig& c = m.config();
  const std::uint64_t weight_bytes = m.weight_bytes_per_token();
  std::cerr << "model " << o.model << ": " << c.n_layers << " layers, " << c.n_heads << " query / " << c.n_kv_heads
            << " KV heads of " << c.head_dim << ", weights " << weight_bytes / 1e6 << " MB read per token, "
            << o.threads << " threads\n";

  // cells[ci][ti]
  std::vector<std::vector<Cell>> cells(o.contexts.size(), std::vector<Cell>(o.types.size()));
  for (std::size_t ci = 0; ci < o.contexts.size(); ++ci) {
    const int ctx = o.contexts[ci];
    // Every type's cache of this context alive at once, so that they take turns in
    // each round (the 1.1B shape's f32 cache is 370 MB at 8k positions).
    std::vector<std::function<StepTime()>> timers;
    for (std::size_t ti = 0; ti < o.types.size(); ++ti)
      kvd::visit_dtype_among<float, Eigen::half, Eigen::bfloat16, kvd::CacheQ8_0, kvd::CacheQ4_0>(o.types[ti], [&](auto s) {
        using S = decltype(s);
        auto cache = std::make_shared<kvd::KVCache<float, S, S>>(filled_cache<S>(c, ctx, ctx + o.steps + 1));
        cells[ci][ti].cache_bytes_per_token = cache->bytes_per_token();
        timers.push_back([&m, ctx, &o, cache] { return time_steps<S>(m, ctx, o.steps, *cache); });
      });
    for (int r = 0; r < o.rounds; ++r)
      for (std::size_t ti = 0; ti < o.types.size(); ++ti) {
        const StepTime t = timers[ti]();
        StepTime& b = cells[ci][ti].best;
        b.step = std::min(b.step, t.step);
        b.attention = std::min(b.attention, t.attention);
      }
    std::cerr << "context " << ctx << " done\n";
  }

  std::ostringstream csv;
  csv << "context,cache_type,tokens_per_s,ms_per_token,attention_ms_per_token,weight_bytes_per_token,"
         "cache_bytes_per_token,threads\n";
  std::cout << "| context | cache | tok/s | ms/token | attention ms | vs " << o.contexts.front()
            << " | weights MB/token | cache MB/token |\n|---:|---|---:|---:|---:|---:|---:|---:|\n";
  for (std::size_t ci = 0; ci < o.contexts.size(); ++ci)
    for (std::size_t ti = 0; ti < o.types.size(); ++ti) {
      const StepTime& x = cells[ci][ti].best;
      const double cache_read = static_cast<double>(cells[ci][ti].cache_bytes_per_token) * (o.contexts[ci] + 1);
      csv << o.contexts[ci] << ',' << kvd::dtype_name(o.types[ti]) << ',' << 1.0 / x.step << ',' << 1e3 * x.step << ','
          << 1e3 * x.attention << ',' << weight_bytes << ',' << static_cast<std::uint64_t>(cache_read) << ','
          << o.threads << '\n';
      char line[256];
      std::snprintf(line, sizeof line, "| %d | %s | %.2f | %.1f | %.1f | %.2f | %.0f | %.1f |\n", o.contexts[ci],
                    kvd::dtype_name(o.types[ti]), 1.0 / x.step, 1e3 * x.step, 1e3 * x.attention,
                    cells[0][ti].best.step / x.step, weight_bytes / 1e6, cache_read / 1e6);
      std::cout << line;
    }
  if (!o.out_dir.empty()) {
    fs::create_directories(o.out_dir);
    std::ofstream(fs::path(o.out_dir) / "kv_context.csv") << csv.str();
    const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};
    std::vector<kvd_bench::Series> series;
    for (std::size_t ti = 0; ti < o.types.size(); ++ti) {
      kvd_bench::Series s;
      s.name = std::string(kvd::dtype_name(o.types[ti])) + " cache";
      s.color = colors[ti % 6];
      for (std::size_t ci = 0; ci < o.contexts.size(); ++ci) {
        s.x.push_back(o.contexts[ci]);
        s.y.push_back(1.0 / cells[ci][ti].best.step);
      }
      series.push_back(s);
    }
    const std::string subtitle = kvd::detail::msg(c.n_layers, " layers, ", c.n_heads, "/", c.n_kv_heads, " heads of ",
                                                  c.head_dim, ", ", o.threads, o.threads == 1 ? " thread" : " threads", ", best of ", o.rounds,
                                                  " rounds of ", o.steps, " steps");
    std::ofstream(fs::path(o.out_dir) / "kv_context.svg")
        << kvd_bench::line_chart_svg("Decode speed against context per KV-cache type", subtitle, "context (positions)",
                                     "tokens/s", series, std::string(), "kvdecode-kv_context " + o.model, true);
    std::cerr << "wrote " << (fs::path(o.out_dir) / "kv_context.csv").string() << " and kv_context.svg\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "kvdecode-kv_context: " << e.what() << "\n";
    return 1;
  }
}
