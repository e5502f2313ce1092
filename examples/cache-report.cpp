// kvdecode-cache-report: what a narrower KV cache costs in accuracy and saves
// in memory. For each model, a token sequence is fixed by the float32 cache
// (greedy decoding from BOS for a checkpoint, a fixed pseudo-random sequence
// for the random stories15M-shape model), then the SAME tokens are fed through
// a bfloat16 and a float16 cache (teacher forcing), and every position's
// next-token logits are compared with the float32 cache's:
//   max |logit difference|, KL(p_f32 || p_type) of the softmax (in double,
//   mean and max over positions), and how often the greedy token agrees.
// Prints a Markdown table (ready for the README) and, with --json, one JSON object.
//
//   kvdecode-cache-report                          # stories260K from ../shared, then the random 15M model
//   kvdecode-cache-report --model stories260K.bin --tokens 200 --json
//
// Exit status: 0 on success, 1 if the model file cannot be used, 2 on a bad argument.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "kvdecode/kvdecode.hpp"

#ifndef KVDECODE_SHARED_DIR
#define KVDECODE_SHARED_DIR "../shared"
#endif

namespace {

using kvd::cli::json_number;
using kvd::cli::json_string;
using kvd::cli::parse_positive;

using kvd::ArgumentError;
using kvd::detail::msg;

const char* const kIntro = R"(kvdecode-cache-report: accuracy and memory of bf16 and f16 KV caches against f32

Usage:
  kvdecode-cache-report [options]

For each model, the f32 cache fixes a token sequence (greedy from BOS for the
checkpoint, fixed pseudo-random tokens for the random model); the same tokens
then go through bf16 and f16 caches, and each position's logits are compared.)";

const char* const kOutro = R"(Options take their value as the next argument or after '=' (--tokens=100).
Exit status: 0 success, 1 model file unusable, 2 bad argument.
)";

using Options = kvd::cli::Params;

/// The parsed options (defaults: 200 checkpoint tokens, seed 1); help() is the --help text.
Options parse_args(int argc, char** argv, std::string& help) {
  Options o;
  o.tokens = 200;
  o.seed = 1;
  kvd::cli::OptionTable table(kvd::cli::kCacheReport, o, kIntro, kOutro);
  table.set_help("--model", "GGUF file, Hugging Face folder or llama2.c checkpoint (default: stories260K.bin in "
                            "the shared models folder; skipped with a message when that default is absent)", "Models");
  help = table.help();
  table.parse(argc, argv);
  if (o.model && o.no_model) throw ArgumentError("--model cannot be combined with --no-model");
  return o;
}

// ---------------------------------------------------------------- statistics

/// How one cache type's logits compare with the f32 cache's, accumulated over positions.
struct TypeStats {
  kvd::DType dtype = kvd::DType::kF32;
  std::uint64_t bytes_per_token = 0;
  std::uint64_t bytes_sequence = 0;  // bytes_per_token * positions
  double max_abs_diff = 0;           // max over positions and vocabulary of |logit - logit_f32|
  double kl_sum = 0, kl_max = 0;     // KL(p_f32 || p_type) in nats
  long agree = 0;                    // positions whose argmax equals the f32 cache's
  long positions = 0;
  double kl_mean() const { return positions ? kl_sum / positions : 0.0; }
  double agreement() const { return positions ? static_cast<double>(agree) / positions : 0.0; }
};

struct ModelReport {
  std::string name;         // "stories260K"
  std::string description;  // what the sequence is
  std::string summary;      // ModelConfig::summary()
  long positions = 0;
  double max_abs_logit = 0;  // of the f32 cache, for scale
  double top1_prob_sum = 0;  // f32 cache: probability of the most likely token, summed over positions
  double mean_top1_prob() const { return positions ? top1_prob_sum / positions : 0.0; }
  std::vector<TypeStats> types;
};

/// log-softmax in double: out[i] = x[i] - logsumexp(x).
void log_softmax(const float* x, int n, std::vector<double>& out) {
  out.resize(n);
  double mx = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < n; ++i) out[i] = static_cast<double>(x[i]) - lse;
}

/// e^y - 1 - y >= 0, without cancellation for small |y|.
double expm1_minus_x(double y) {
  if (std::abs(y) < 1e-3) return y * y * (0.5 + y * (1.0 / 6 + y * (1.0 / 24 + y / 120)));
  return std::expm1(y) - y;
}

/// KL(p || q) in nats for logits a (p) and b (q), p's log-softmax `lp` given.
/// With d = b - a and m = sum_i p_i d_i, q_i = p_i e^(d_i - m) / Z where
/// Z = sum_j p_j e^(d_j - m), so KL = log Z = log1p(sum_j p_j (e^(d_j - m) - 1 - (d_j - m)))
/// (the subtracted terms sum to zero). Every term is >= 0, so the result never
/// comes out negative by rounding, and it stays accurate when p is nearly one-hot
/// (the textbook sum p (log p - log q) loses everything below 1e-16 there).
double kl_divergence(const std::vector<double>& lp, const float* a, const float* b, int n) {
  double m = 0;
  for (int i = 0; i < n; ++i) m += std::exp(lp[i]) * (static_cast<double>(b[i]) - static_cast<double>(a[i]));
  double s = 0;
  for (int i = 0; i < n; ++i)
    s += std::exp(lp[i]) * expm1_minus_x(static_cast<double>(b[i]) - static_cast<double>(a[i]) - m);
  return std::log1p(s);
}

/// Adds one position: `ref` the f32 cache's logits (with log-softmax `lp`), `got` the other cache's.
void accumulate(TypeStats& s, const float* ref, const std::vector<double>& lp, const float* got, int n) {
  for (int i = 0; i < n; ++i)
    s.max_abs_diff = std::max(s.max_abs_diff, std::abs(static_cast<double>(got[i]) - static_cast<double>(ref[i])));
  const double kl = kl_divergence(lp, ref, got, n);
  s.kl_sum += kl;
  s.kl_max = std::max(s.kl_max, kl);
  s.agree += kvd::argmax(got, n) == kvd::argmax(ref, n) ? 1 : 0;
  s.positions += 1;
}

/// One cache of element type S fed the same tokens as the f32 cache.
template <class S>
struct Follower {
  kvd::KVCache<float, S> cache;
  TypeStats stats;
  explicit Follower(const kvd::ModelConfig& c) : cache(c) {
    stats.dtype = cache.dtype();
    stats.bytes_per_token = cache.bytes_per_token();
  }
};

/// Runs `positions` tokens through f32, bf16 and f16 caches, one decode step at a time.
/// The token at position 0 is `first`; later tokens are the f32 cache's greedy choice,
/// or fixed[pos] when `fixed` is given.
ModelReport compare_caches(kvd::Transformer<float>& model, int first, int positions, const std::vector<int>* fixed,
                           const std::string& name, bool quiet) {
  const kvd::ModelConfig& c = model.config();
  const int V = c.vocab_size;
  kvd::KVCache<float> f32(c);
  TypeStats f32_stats;
  f32_stats.dtype = f32.dtype();
  f32_stats.bytes_per_token = f32.bytes_per_token();
  Follower<Eigen::bfloat16> bf16(c);
  Follower<Eigen::half> f16(c);
  std::vector<float> ref(V);
  std::vector<double> lp;
  ModelReport r;
  int token = first;
  auto step = [&](auto& cache) { return cache.length() == 0 ? model.prefill({token}, cache) : model.decode_step(token, cache); };
  for (int pos = 0; pos < positions; ++pos) {
    {
      auto logits = step(f32);
      std::copy(logits.data(), logits.data() + V, ref.begin());
    }
    log_softmax(ref.data(), V, lp);
    for (int i = 0; i < V; ++i) r.max_abs_logit = std::max(r.max_abs_logit, std::abs(static_cast<double>(ref[i])));
    r.top1_prob_sum += std::exp(lp[kvd::argmax(ref.data(), V)]);
    accumulate(f32_stats, ref.data(), lp, ref.data(), V);
    {
      auto logits = step(bf16.cache);
      accumulate(bf16.stats, ref.data(), lp, logits.data(), V);
    }
    {
      auto logits = step(f16.cache);
      accumulate(f16.stats, ref.data(), lp, logits.data(), V);
    }
    token = fixed ? (pos + 1 < static_cast<int>(fixed->size()) ? (*fixed)[pos + 1] : 0) : kvd::argmax(ref.data(), V);
    if (!quiet && ((pos + 1) % 32 == 0 || pos + 1 == positions))
      std::cerr << "  " << name << ": " << pos + 1 << "/" << positions << " positions\n";
  }
  for (TypeStats* s : {&f32_stats, &bf16.stats, &f16.stats}) {
    s->bytes_sequence = s->bytes_per_token * static_cast<std::uint64_t>(positions);
    r.types.push_back(*s);
  }
  r.name = name;
  r.summary = c.summary();
  r.positions = positions;
  return r;
}

// ---------------------------------------------------------------- output

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// 3 significant digits, "0" for exact zero.
std::string sig3(double v) { return v == 0 ? std::string("0") : fmt("%.3g", v); }

void print_markdown(std::ostream& os, const std::vector<ModelReport>& reports) {
  os << "| model | cache | bytes/token | bytes/sequence | max abs logit diff | mean KL (nats) | max KL (nats) "
        "| greedy agreement |\n";
  os << "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const ModelReport& r : reports)
    for (const TypeStats& s : r.types)
      os << "| " << r.name << " | " << kvd::dtype_name(s.dtype) << " | " << kvd::format_count(s.bytes_per_token)
         << " | " << kvd::format_count(s.bytes_sequence) << " (" << kvd::format_bytes(s.bytes_sequence) << ") | "
         << sig3(s.max_abs_diff) << " | " << sig3(s.kl_mean()) << " | " << sig3(s.kl_max) << " | "
         << fmt("%.1f", 100.0 * s.agreement()) << "% (" << s.agree << "/" << s.positions << ") |\n";
  os << '\n';
  for (const ModelReport& r : reports)
    os << "- " << r.name << " (" << r.summary << "): " << r.description << "; " << r.positions
       << " positions compared; with the f32 cache the largest |logit| is " << sig3(r.max_abs_logit)
       << " and the top token's probability averages " << fmt("%.4f", r.mean_top1_prob()) << ".\n";
  os << "- KL(p_f32 || p_cache) of the next-token softmax, in double; greedy agreement: positions whose argmax "
        "equals the f32 cache's.\n";
}

void print_json(std::ostream& os, const std::vector<ModelReport>& reports) {
  std::ostringstream j;
  j << "{\"models\":[";
  for (std::size_t m = 0; m < reports.size(); ++m) {
    const ModelReport& r = reports[m];
    j << (m ? "," : "") << "{\"name\":" << json_string(r.name) << ",\"config\":" << json_string(r.summary)
      << ",\"sequence\":" << json_string(r.description) << ",\"positions\":" << r.positions
      << ",\"max_abs_logit_f32\":" << json_number(r.max_abs_logit)
      << ",\"mean_top1_prob_f32\":" << json_number(r.mean_top1_prob()) << ",\"caches\":[";
    for (std::size_t t = 0; t < r.types.size(); ++t) {
      const TypeStats& s = r.types[t];
      j << (t ? "," : "") << "{\"dtype\":" << json_string(kvd::dtype_name(s.dtype))
        << ",\"bytes_per_token\":" << s.bytes_per_token << ",\"bytes_sequence\":" << s.bytes_sequence
        << ",\"max_abs_logit_diff\":" << json_number(s.max_abs_diff) << ",\"kl_mean\":" << json_number(s.kl_mean())
        << ",\"kl_max\":" << json_number(s.kl_max) << ",\"greedy_agreement\":" << json_number(s.agreement())
        << ",\"greedy_agree\":" << s.agree << "}";
    }
    j << "]}";
  }
  j << "]}";
  os << j.str() << '\n';
}

// ---------------------------------------------------------------- main

/// Deterministic pseudo-random tokens in [0, vocab) (a 64-bit LCG, high bits).
std::vector<int> fixed_tokens(int n, int vocab, std::uint64_t seed) {
  std::vector<int> t(n);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int& x : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int>((s >> 33) % static_cast<std::uint64_t>(vocab));
  }
  return t;
}

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

int run(const Options& o) {
  if (o.threads > 0) kvd::set_num_threads(o.threads);
  std::vector<ModelReport> reports;

  if (!o.no_model) {
    const std::string path = o.model.value_or(std::string(KVDECODE_SHARED_DIR) + "/models/stories260K.bin");
    if (!o.model && !file_exists(path)) {
      std::cerr << "kvdecode-cache-report: skipping the checkpoint: " << path
                << " not found (give --model PATH, or --no-model)\n";
    } else {
      kvd::LoadOptions lo;
      lo.chat_template = false;
      kvd::LoadedModel m = kvd::open_model(path, lo);  // FileError/FormatError -> exit 1
      const kvd::ModelConfig& c = m.model.config();
      const int positions = static_cast<int>(*o.tokens);
      if (positions > c.max_seq_len)
        throw ArgumentError(msg("--tokens ", positions, " exceeds the model's max_seq_len ", c.max_seq_len));
      std::string name = path.substr(path.find_last_of('/') + 1);
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0) name.resize(name.size() - 4);
      if (!o.quiet) std::cerr << "kvdecode-cache-report: " << name << " (" << c.summary() << ")\n";
      // The vocabulary's BOS; llama2.c vocabularies (a checkpoint has none of its own): 1 = <s>.
      const int bos = m.tokenizer && m.tokenizer->bos_id() >= 0 ? m.tokenizer->bos_id() : 1;
      ModelReport r = compare_caches(m.model, bos, positions, nullptr, name, o.quiet);
      r.description = msg(positions, " tokens generated greedily from BOS with the f32 cache, teacher-forced into bf16/f16");
      reports.push_back(r);
    }
  }

  if (!o.no_random) {
    const kvd::ModelConfig c = kvd::stories15m_config();
    if (o.random_tokens > c.max_seq_len)
      throw ArgumentError(msg("--random-tokens ", o.random_tokens, " exceeds max_seq_len ", c.max_seq_len));
    if (!o.quiet) std::cerr << "kvdecode-cache-report: random stories15M-shape model (" << c.summary() << ")\n";
    kvd::Transformer<float> model(kvd::ModelWeights<float>::random(c, o.seed));
    const std::vector<int> tokens = fixed_tokens(o.random_tokens, c.vocab_size, o.seed);
    ModelReport r = compare_caches(model, tokens[0], o.random_tokens, &tokens, "random 15M", o.quiet);
    r.description = msg("seeded random weights (seed ", o.seed, "), ", o.random_tokens, " fixed pseudo-random tokens");
    reports.push_back(r);
  }

  if (reports.empty()) {
    std::cerr << "kvdecode-cache-report: nothing to report (both models skipped)\n";
    return 0;
  }
  print_markdown(std::cout, reports);
  if (o.json) print_json(std::cout, reports);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kvd::cli::run_main("kvdecode-cache-report", [&] {
    std::string help;
    const Options o = parse_args(argc, argv, help);
    if (o.help) {
      std::cout << help;
      return 0;
    }
    return run(o);
  });
}
