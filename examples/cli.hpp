// Everything kvdecode's command-line programs share (not part of the library):
// one table of every option any program takes, strict value parsing that names
// the option and the limit, JSON formatting, and a main() wrapper that maps
// errors to exit statuses (2 for a bad argument, 1 for any other kvd::Error).
//
// The option table follows llama.cpp's common/arg.cpp: every option is declared
// once, in all_options(), with its names (long name first, then llama.cpp-style
// short aliases such as -m, -p, -n), the placeholder of its value, its help text,
// its default and the handler that stores it in Params. Each option names the
// programs that take it; OptionTable picks one program's subset, parses argv
// against it and generates that program's --help from it (grouped by section,
// wrapped to 80 columns). Unknown options, missing values and bad values throw
// ArgumentError naming the option as it was spelled, so run_main exits with 2.
//
// Syntax: `--name VALUE`, `--name=VALUE`, `-n VALUE`; flags take no value.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kvdecode/text/unicode.hpp"
#include "kvdecode/core/dtype.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/cache/planner.hpp"
#include "kvdecode/matmul/numerics.hpp"
#include "kvdecode/generate/sampler.hpp"

namespace kvd::cli {

// ---------------------------------------------------------------- value parsing

/// A decimal integer in [lo, hi]; ArgumentError naming the option otherwise.
inline long long parse_integer(const std::string& opt, const std::string& text, long long lo, long long hi) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(begin, &end, 10);
  if (text.empty() || end != begin + text.size() || errno == ERANGE)
    throw ArgumentError(detail::msg(opt, ": '", text, "' is not an integer"));
  if (v < lo || v > hi) throw ArgumentError(detail::msg(opt, ": ", text, " must be in [", lo, ", ", hi, "]"));
  return v;
}

/// A decimal integer in [1, max].
inline std::uint64_t parse_positive(const std::string& opt, const std::string& text, std::uint64_t max) {
  bool digits = !text.empty();
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (!digits) throw ArgumentError(detail::msg(opt, ": '", text, "' is not a positive integer"));
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v > max) throw ArgumentError(detail::msg(opt, ": ", text, " exceeds the limit ", max));
  if (v == 0) throw ArgumentError(detail::msg(opt, ": 0 must be positive (> 0)"));
  return v;
}

/// A finite decimal number in [min, max] (min itself excluded when `open_min`).
inline double parse_number(const std::string& opt, const std::string& text, double min, bool open_min, double max) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || errno == ERANGE || !std::isfinite(v))
    throw ArgumentError(detail::msg(opt, ": '", text, "' is not a number"));
  if (v < min || (open_min && v == min) || v > max)
    throw ArgumentError(detail::msg(opt, ": ", text, " must be in ", open_min ? "(" : "[", min, ", ", max, "]"));
  return v;
}

/// A comma-separated list of token ids in [0, 2^30], e.g. "1,403,407"; ArgumentError naming `opt`.
inline std::vector<int> parse_id_list(const std::string& opt, const std::string& text) {
  std::vector<int> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) ids.push_back(static_cast<int>(parse_integer(opt, item, 0, 1 << 30)));
  if (ids.empty()) throw ArgumentError(detail::msg(opt, " needs at least one id, e.g. 1,403,407"));
  return ids;
}

/// A cache or weight element type name (see kvd::parse_dtype); ArgumentError naming `opt`.
/// Calls f(S()) with the KV cache storage type S that `name` (--cache-dtype) names:
/// float, Eigen::bfloat16 or Eigen::half, the types the programs compile.
/// Throws ArgumentError for any other name.
template <class F>
decltype(auto) visit_cache_dtype(const std::string& name, F&& f) {
  return visit_dtype_among<float, Eigen::bfloat16, Eigen::half>(parse_dtype(name), std::forward<F>(f));
}

/// The canonical name ("f32", "bf16", "f16", "q8_0", "q4_0") of a KV cache type
/// given to option `opt`; ArgumentError naming the option, the text and the names.
inline std::string cache_type_name(const std::string& opt, const std::string& text) {
  DType t = DType::kF32;
  try {
    t = parse_dtype(text);
  } catch (const ArgumentError&) {
    t = DType::kF64;  // refused below
  }
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kQ8: return "q8_0";
    case DType::kQ4: return "q4_0";
    default: break;
  }
  throw ArgumentError(detail::msg(opt, " must be f32, bf16, f16, q8_0 or q4_0, got '", text, "'"));
}

inline DType parse_dtype_value(const std::string& opt, const std::string& text) {
  try {
    return parse_dtype(text);
  } catch (const ArgumentError& e) {
    throw ArgumentError(detail::msg(opt, ": ", e.what()));
  }
}

// ---------------------------------------------------------------- the option table

/// The programs that take options; an option lists the ones it belongs to.
enum Program : unsigned {
  kGenerate = 1u << 0,     ///< kvdecode-generate
  kCacheReport = 1u << 1,  ///< kvdecode-cache-report
  kPlan = 1u << 2,         ///< kvdecode-plan
  kRoofline = 1u << 3,     ///< kvdecode-roofline
  kTokenize = 1u << 4,     ///< kvdecode-tokenize
  kQuantize = 1u << 5,     ///< kvdecode-quantize
  kConversation = 1u << 6, ///< kvdecode-conversation (bench/conversation.cpp)
  kServer = 1u << 7,       ///< kvdecode-server (examples/server/server.cpp)
};

/// Every value any program's options can set. A program sets its own defaults
/// here before building its OptionTable (the --help text shows them), then reads
/// the fields its options wrote.
struct Params {
  // Model and input
  std::optional<std::string> model;        ///< --model: a model file
  std::string tokenizer;                   ///< --tokenizer: any format kvd::load_tokenizer reads
  std::optional<std::string> prompt;       ///< --prompt: text to encode
  std::optional<std::vector<int>> prompt_ids;  ///< --prompt-ids: exact ids
  int steps = 256;                         ///< --steps: new tokens to generate
  int ctx_size = 0;                        ///< --ctx-size (generate): longest sequence planned for; 0 = the model's
  bool allow_unused_tensors = false;       ///< --allow-unused-tensors: load a model file whose tensors are not all used
  // Sampling (seed is separate: cache-report seeds its random model with it)
  SamplerConfig sampler;
  std::uint64_t seed = 0;                  ///< --seed
  bool ignore_eos = false;                 ///< --ignore-eos
  std::vector<int> model_eos_ids;          ///< set by the program: the model's stop ids (kvd::LoadedModel::stop_ids)
  // Speculative decoding (generate)
  std::optional<std::string> draft_model;  ///< --draft-model: a model of the same vocabulary that proposes tokens
  int draft_tokens = 4;                    ///< --draft-tokens: most tokens proposed per verification
  int lookup = 0;                          ///< --lookup: prompt-lookup n-gram size; 0 = off
  // Execution
  int threads = 0;                         ///< --threads: 0 = OpenMP's default
  bool fast_matmul = false;                ///< --fast-matmul: Numerics::kFast (16-bit matrices in bf16 too)
  bool exact_activations = false;          ///< --exact-activations: Numerics::kExact (float activations everywhere)
  std::string cache_dtype = "f32";         ///< --cache-dtype (generate): f32, bf16, f16 for keys and values
  std::string cache_type_k;                ///< --cache-type-k / -ctk: the keys' type; empty = cache_dtype
  std::string cache_type_v;                ///< --cache-type-v / -ctv: the values' type; empty = cache_dtype
  KVRotation cache_rotate = KVRotation::kNone;  ///< --cache-rotate: none, k or kv (ModelConfig::kv_rotation)
  bool no_cache = false, compare = false, demo = false;
  // Output
  bool ids = false, json = false, quiet = false, help = false;
  std::string dump_logits;                 ///< --dump-logits FILE
  // Conversations and prompt caches (kvdecode-generate)
  std::optional<std::string> conversation; ///< --conversation FILE.json: a list of user messages
  bool chat = false;                       ///< --chat: interactive, one user message per stdin line
  std::optional<std::string> system;       ///< --system TEXT: the conversation's system message
  bool no_cache_reuse = false;             ///< --no-cache-reuse: re-prefill the whole history each turn
  std::string prompt_cache;                ///< --prompt-cache FILE
  // kvdecode-cache-report
  bool no_model = false, no_random = false;
  std::optional<std::uint64_t> tokens;     ///< --tokens: cache-report's generated tokens, plan's context
  int random_tokens = 256;                 ///< --random-tokens
  // kvdecode-plan
  std::optional<int> layers, kv_heads, head_dim;
  std::optional<int> swa_pattern, local_window;  ///< kvdecode-plan: local layers (ModelConfig's)
  std::optional<std::string> weight_dtype;  ///< --weight-dtype: a kvdecode-quantize scheme name (checked by kvdecode-plan)
  DType dtype = DType::kF16;               ///< --dtype: the planned cache's element type
  std::optional<double> memory_gb, bandwidth_gb_s, weights_gb;
  std::optional<std::string> gpu;
  bool list_gpus = false;
  // kvdecode-server
  std::string host = "127.0.0.1";          ///< --host
  int port = 8080;                         ///< --port
  int n_parallel = 4;                      ///< --parallel: requests generating at once
  int cache_blocks = 0;                    ///< --cache-blocks: 16-token blocks of the paged cache; 0 = planned
  std::string api_key;                     ///< --api-key: "" = none
  int max_queue = 64;                      ///< --max-queue: requests waiting before new ones get 503
  std::uint64_t max_body_bytes = 1u << 20; ///< --max-body-bytes: a request body's size limit (413 above)
  std::string alias;                       ///< --alias: the model id /v1/models lists ("" = the file's name)
  // kvdecode-roofline
  std::string out_dir;
  bool quick = false;
  double max_others = 0.10;                ///< a fraction; --max-others takes a percentage
  double patience = -1;                    ///< -1: 1200 s, or 0 with --quick
  std::string weight_types;                ///< --weight-types: comma-separated schemes, "all", "" = skip
  std::string quality_model;               ///< --quality-model: an F32 model whose own text rates each scheme
  std::vector<int> prefill_lengths;        ///< --prefill-lengths: prompt lengths timed per scheme (empty: none)
  // kvdecode-tokenize
  std::optional<std::string> text;         ///< --text: text to encode
  std::optional<std::string> cases;        ///< --cases: llama.cpp's vocab test file
  bool pieces = false, no_bos = false, no_special = false, bench = false;
  std::optional<std::string> render_chat;  ///< --render-chat: conversations to render
  std::string chat_template;               ///< --chat-template: a built-in template's name ("" = the model's)
};

/// The numerics mode the options ask for (kvd::Numerics): --exact-activations,
/// --fast-matmul, or by default int8 activations for block-type matrices. Throws
/// ArgumentError when both options are given.
inline Numerics numerics_of(const Params& p) {
  if (p.fast_matmul && p.exact_activations)
    throw ArgumentError("--fast-matmul and --exact-activations ask for opposite numerics: give one of them");
  return p.exact_activations ? Numerics::kExact : p.fast_matmul ? Numerics::kFast : Numerics::kInt8Blocks;
}

/// Calls f(K(), V()) with the key and value storage types the options name
/// (--cache-type-k / --cache-type-v, each defaulting to --cache-dtype) and returns
/// what f returns. The pairs compiled: one type for both (f32, bf16, f16, q8_0,
/// q4_0), q8_0 or q4_0 keys with f16 values (llama.cpp's usual -ctk), and q4_0
/// keys with q8_0 values. Throws ArgumentError naming any other pair, before calling f.
template <class F>
decltype(auto) visit_cache_types(const Params& o, F&& f) {
  const std::string k = o.cache_type_k.empty() ? cache_type_name("--cache-dtype", o.cache_dtype) : o.cache_type_k;
  const std::string v = o.cache_type_v.empty() ? cache_type_name("--cache-dtype", o.cache_dtype) : o.cache_type_v;
  if (k == v) {
    if (k == "q8_0") return f(CacheQ8_0(), CacheQ8_0());
    if (k == "q4_0") return f(CacheQ4_0(), CacheQ4_0());
    return visit_cache_dtype(k, [&](auto s) { return f(s, s); });
  }
  if (k == "q8_0" && v == "f16") return f(CacheQ8_0(), Eigen::half());
  if (k == "q4_0" && v == "f16") return f(CacheQ4_0(), Eigen::half());
  if (k == "q4_0" && v == "q8_0") return f(CacheQ4_0(), CacheQ8_0());
  throw ArgumentError(detail::msg("cache types ", k, " keys with ", v, " values are not a pair this program "
                                  "compiles: use one type for both, q8_0 or q4_0 keys with f16 values, or q4_0 keys "
                                  "with q8_0 values"));
}


/// One option: declared once in all_options(), taken by the programs in `programs`.
struct Option {
  std::vector<std::string> names;  ///< long name first ("--model"), then aliases ("-m", "--temp")
  std::string value;               ///< value placeholder ("PATH"); empty for a flag
  std::string help;                ///< one paragraph, wrapped by OptionTable::help()
  std::string section;             ///< --help groups options under these headings
  unsigned programs = 0;           ///< Program bits
  std::function<std::string()> default_text;  ///< the default as shown in --help; empty: none shown
  /// Stores the value (empty for a flag). `spelled` is the name as given, for messages;
  /// throws ArgumentError naming it when the value is bad.
  std::function<void(const std::string& spelled, const std::string& value)> handler;

  const std::string& name() const { return names.front(); }
  bool takes_value() const { return !value.empty(); }
  bool has_name(const std::string& n) const {
    for (const std::string& x : names)
      if (x == n) return true;
    return false;
  }
};

/// The catalogue: every option of every program, each declared once. Handlers write
/// into `p`, which must outlive the returned options. Options sharing a long name
/// (--tokens) belong to disjoint sets of programs.
inline std::vector<Option> all_options(Params& p) {
  using S = std::string;
  constexpr long long kIntMax = std::numeric_limits<int>::max();
  auto str = [](auto v) { std::ostringstream os; os << v; return os.str(); };
  auto flag = [](bool& target) { return [&target](const S&, const S&) { target = true; }; };
  auto none = std::function<S()>();
  std::vector<Option> o;
  auto add = [&](Option x) { o.push_back(std::move(x)); };

  const S in = "Model and input", smp = "Sampling (default greedy)", exe = "Execution", out = "Output";
  const S models = "Models", shape = "Cache shape", plan = "Plan", meas = "Measurement";

  // ---- model and input
  add({{"--model", "-m"}, "PATH", "model file, told apart by content: GGUF (architectures llama, qwen2, qwen3; tensors in f32, f16, bf16, "
       "q8_0, q4_0, q4_1, q5_0, q5_1, q2_K..q6_K, iq4_nl, iq4_xs, mxfp4; its own vocabulary), a Hugging Face folder (config.json + "
       "safetensors; its tokenizer.json) or a llama2.c checkpoint (legacy or version-1 float32)", in,
       kGenerate | kCacheReport | kPlan | kTokenize | kServer, none, [&p](const S&, const S& v) { p.model = v; }});
  add({{"--tokenizer"}, "PATH", "tokenizer for --prompt and text output: GGUF, tokenizer.json (any name) or its "
       "folder, or llama2.c tokenizer.bin", in, kGenerate | kQuantize | kConversation | kServer, none,
       [&p](const S&, const S& v) { p.tokenizer = v; }});
  add({{"--ctx-size", "-c"}, "N",
       "longest sequence to plan for (RoPE table, KV cache); caps a GGUF file's context_length, a model "
       "folder's max_position_embeddings or a checkpoint's seq_len (default: the model's, at most 4096); for "
       "kvdecode-server, the context of each request", in, kGenerate | kServer, none,
       [&p](const S& n, const S& v) { p.ctx_size = static_cast<int>(parse_positive(n, v, 1u << 20)); }});
  add({{"--allow-unused-tensors"}, "", "load a GGUF file or model folder holding tensors its architecture and layer "
       "count do not use (refused by default, naming the first), with a warning listing them", in,
       kGenerate | kPlan | kQuantize | kServer, none,
       flag(p.allow_unused_tensors)});
  add({{"--prompt", "-p"}, "TEXT", "prompt text, encoded with BOS prepended (default: just BOS)", in, kGenerate, none,
       [&p](const S&, const S& v) { p.prompt = v; }});
  add({{"--prompt-ids"}, "CSV", "prompt token ids used exactly as given, e.g. 1,403,407", in, kGenerate, none,
       [&p](const S& n, const S& v) { p.prompt_ids = parse_id_list(n, v); }});
  add({{"--steps", "-n", "--n-predict"}, "N", "new tokens to generate (capped by the context)", in, kGenerate | kConversation,
       [&p, str] { return str(p.steps); },
       [&p](const S& n, const S& v) { p.steps = static_cast<int>(parse_integer(n, v, 1, 1 << 30)); }});

  // ---- sampling
  add({{"--temperature", "--temp"}, "T", "0 = greedy", smp, kGenerate, [&p, str] { return str(p.sampler.temperature); },
       [&p](const S& n, const S& v) { p.sampler.temperature = parse_number(n, v, -1e300, false, 1e300); }});
  add({{"--top-k"}, "K", "keep the K most likely tokens (0 = off)", smp, kGenerate,
       [&p, str] { return str(p.sampler.top_k); },
       [&p](const S& n, const S& v) { p.sampler.top_k = static_cast<int>(parse_integer(n, v, 0, 1 << 30)); }});
  add({{"--top-p"}, "P", "nucleus sampling: the smallest set with probability >= P (1 = off)", smp, kGenerate,
       [&p, str] { return str(p.sampler.top_p); },
       [&p](const S& n, const S& v) { p.sampler.top_p = parse_number(n, v, -1e300, false, 1e300); }});
  add({{"--min-p"}, "P", "drop tokens below P * the top probability (0 = off)", smp, kGenerate,
       [&p, str] { return str(p.sampler.min_p); },
       [&p](const S& n, const S& v) { p.sampler.min_p = parse_number(n, v, -1e300, false, 1e300); }});
  add({{"--repetition-penalty", "--repeat-penalty"}, "R",
       ">1 discourages repeating the tokens of the last --repeat-last-n positions (1 = off)", smp, kGenerate,
       [&p, str] { return str(p.sampler.repetition_penalty); },
       [&p](const S& n, const S& v) { p.sampler.repetition_penalty = parse_number(n, v, -1e300, false, 1e300); }});
  add({{"--repeat-last-n", "--repetition-last-n"}, "N",
       "how many trailing tokens (prompt included) the repetition penalty looks at (0 = none)", smp, kGenerate,
       [&p, str] { return str(p.sampler.repetition_last_n); },
       [&p](const S& n, const S& v) {
         p.sampler.repetition_last_n = static_cast<int>(parse_integer(n, v, 0, 1 << 30));
       }});
  auto seed = [&p](const S& n, const S& v) {
    p.seed = static_cast<std::uint64_t>(parse_integer(n, v, 0, std::numeric_limits<long long>::max()));
  };
  add({{"--seed", "-s"}, "S", "sampler seed; same seed, same text", smp, kGenerate, [&p, str] { return str(p.seed); },
       seed});
  add({{"--ignore-eos"}, "", "do not stop at EOS/BOS", smp, kGenerate, none, flag(p.ignore_eos)});

  // ---- speculative decoding
  const S spec = "Speculative decoding (output identical to plain decoding, bit for bit)";
  add({{"--draft-model", "-md", "--model-draft"}, "PATH",
       "a model of the same vocabulary (e.g. a Q2_K copy of the target) proposes tokens that the target verifies "
       "in one forward", spec, kGenerate, none, [&p](const S&, const S& v) { p.draft_model = v; }});
  add({{"--draft-tokens", "--draft-max", "--draft"}, "N", "most tokens proposed per verification (adapts below it)",
       spec, kGenerate, [&p, str] { return str(p.draft_tokens); },
       [&p](const S& n, const S& v) { p.draft_tokens = static_cast<int>(parse_integer(n, v, 1, 64)); }});
  add({{"--lookup"}, "N",
       "prompt lookup: propose the tokens that followed the last N tokens' most recent earlier occurrence in the "
       "prompt and output (no second model; 0 = off)", spec, kGenerate, [&p, str] { return str(p.lookup); },
       [&p](const S& n, const S& v) { p.lookup = static_cast<int>(parse_integer(n, v, 0, 64)); }});

  // ---- kvdecode-cache-report's models
  add({{"--no-model"}, "", "skip the checkpoint", models, kCacheReport, none, flag(p.no_model)});
  add({{"--tokens", "-n"}, "N", "tokens to generate greedily from BOS with the checkpoint", models, kCacheReport,
       [&p, str] { return p.tokens ? str(*p.tokens) : S(); },
       [&p](const S& n, const S& v) { p.tokens = parse_positive(n, v, kIntMax); }});
  add({{"--no-random"}, "", "skip the random stories15M-shape model", models, kCacheReport, none, flag(p.no_random)});
  add({{"--seed", "-s"}, "S", "seed of the random model's weights and of its fixed tokens", models, kCacheReport,
       [&p, str] { return str(p.seed); }, seed});
  add({{"--random-tokens"}, "N", "positions of the random model's fixed sequence (256 = its max_seq_len)", models,
       kCacheReport, [&p, str] { return str(p.random_tokens); },
       [&p](const S& n, const S& v) { p.random_tokens = static_cast<int>(parse_positive(n, v, kIntMax)); }});

  // ---- kvdecode-plan
  add({{"--layers"}, "N", "transformer blocks (L)", shape, kPlan, none,
       [&p](const S& n, const S& v) { p.layers = static_cast<int>(parse_positive(n, v, kIntMax)); }});
  add({{"--kv-heads"}, "N", "key/value heads (Hk)", shape, kPlan, none,
       [&p](const S& n, const S& v) { p.kv_heads = static_cast<int>(parse_positive(n, v, kIntMax)); }});
  add({{"--head-dim"}, "N", "width of one head (Dh)", shape, kPlan, none,
       [&p](const S& n, const S& v) { p.head_dim = static_cast<int>(parse_positive(n, v, kIntMax)); }});
  add({{"--swa-pattern"}, "P", "with --layers: every P-th layer is global, the others local (Gemma 3: 6, gpt-oss: 2); "
       "needs --local-window", shape, kPlan, none,
       [&p](const S& n, const S& v) { p.swa_pattern = static_cast<int>(parse_positive(n, v, kIntMax)); }});
  add({{"--local-window"}, "W", "with --swa-pattern: the local layers' window, so their cache is a ring of W + 64 "
       "positions (Gemma 3 27B: 1024, gpt-oss: 128)", shape, kPlan, none,
       [&p](const S& n, const S& v) { p.local_window = static_cast<int>(parse_positive(n, v, kIntMax)); }});
  add({{"--weight-dtype"}, "T", "with --model: the weights as kvdecode-quantize would store them with scheme T (F32, "
       "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q3_K_M, Q4_K, Q4_K_M, Q5_K, Q5_K_M, Q6_K: each tensor's "
       "type and exact bytes); default: the file's tensors as stored",
       shape, kPlan, none, [&p](const S&, const S& v) { p.weight_dtype = v; }});
  add({{"--dtype"}, "T", "cache element type of keys and values: f32, f64, bf16, f16, q8_0, q4_0 (also fp16, int8, ...)", plan, kPlan,
       [&p] { return S(dtype_name(p.dtype)); }, [&p](const S& n, const S& v) { p.dtype = parse_dtype_value(n, v); }});
  add({{"--tokens", "-c", "--ctx-size"}, "N",
       "positions per sequence at full context (default with --model: its max_seq_len)", plan, kPlan, none,
       [&p](const S& n, const S& v) { p.tokens = parse_positive(n, v, std::numeric_limits<std::uint64_t>::max()); }});
  add({{"--memory-gb"}, "G", "device memory in GB (10^9 bytes); overrides --gpu's", plan, kPlan, none,
       [&p](const S& n, const S& v) { p.memory_gb = parse_number(n, v, 0, true, PlanInput::kMaxMemoryGb); }});
  add({{"--gpu"}, "NAME", "memory and bandwidth from the built-in table (see --list-gpus)", plan, kPlan, none,
       [&p](const S&, const S& v) { p.gpu = v; }});
  add({{"--bandwidth-gb-s"}, "B", "memory bandwidth in GB/s; overrides --gpu's", plan, kPlan, none,
       [&p](const S& n, const S& v) { p.bandwidth_gb_s = parse_number(n, v, 0, true, PlanInput::kMaxBandwidthGbS); }});
  add({{"--weights-gb"}, "W", "resident weight size in GB, subtracted from memory (without --model)", plan, kPlan, none,
       [&p](const S& n, const S& v) { p.weights_gb = parse_number(n, v, 0, false, PlanInput::kMaxMemoryGb); }});

  // ---- execution
  add({{"--threads", "-t"}, "N", "OpenMP threads (results are identical for any N)", exe,
       kGenerate | kCacheReport | kRoofline | kQuantize | kConversation | kServer,
       [&p, str] { return p.threads > 0 ? str(p.threads) : S("OpenMP's default"); },
       [&p](const S& n, const S& v) { p.threads = static_cast<int>(parse_integer(n, v, 1, 1024)); }});
  add({{"--fast-matmul"}, "", "fast mode: as the default, and on CPUs with AVX512-BF16 f16 and bf16 matrices also "
       "round their input rows to bf16 and use bf16 dot products (their logits then depend on whether the CPU has "
       "AVX512-BF16; still identical across every path and thread count)", exe, kGenerate | kRoofline | kServer, none,
       flag(p.fast_matmul)});
  add({{"--exact-activations"}, "", "float activations everywhere: block-type matrices (q4_0 ... q8_0) widen every "
       "weight to float instead of rounding the input rows to int8 blocks of 32 as the default (and llama.cpp) do; "
       "slower (1.2-2.3x in decode, 1.4-2.6x in prefill on 4- to 6-bit types), logits closer to the float model's by about 1.5% of the largest",
       exe, kGenerate | kServer, none, flag(p.exact_activations)});
  add({{"--cache-dtype"}, "T", "KV cache element type: f32, bf16, f16", exe, kGenerate | kServer,
       [&p] { return p.cache_dtype; },
       [&p](const S& n, const S& v) {
         try {
           visit_cache_dtype(v, [](auto) {});
         } catch (const Error&) {
           throw ArgumentError(detail::msg(n, " must be f32, bf16 or f16, got '", v, "'"));
         }
         p.cache_dtype = v;
       }});
  add({{"--cache-type-k", "-ctk"}, "T", "KV cache key type: f32, bf16, f16, q8_0, q4_0 (q8_0/q4_0: 32 values per f16 "
       "scale, head_dim a multiple of 32; default: --cache-dtype)", exe, kGenerate | kPlan,
       [&p] { return p.cache_type_k.empty() ? p.cache_dtype : p.cache_type_k; },
       [&p](const S& n, const S& v) { p.cache_type_k = cache_type_name(n, v); }});
  add({{"--cache-type-v", "-ctv"}, "T", "KV cache value type: f32, bf16, f16, q8_0, q4_0 (default: --cache-dtype); "
       "kvdecode-generate takes a pair of one type, or q8_0/q4_0 keys with f16 values, or q4_0 keys with q8_0 values",
       exe, kGenerate | kPlan, [&p] { return p.cache_type_v.empty() ? p.cache_dtype : p.cache_type_v; },
       [&p](const S& n, const S& v) { p.cache_type_v = cache_type_name(n, v); }});
  add({{"--cache-rotate"}, "R", "store the KV cache's heads rotated by a fixed Walsh-Hadamard transform before "
       "quantizing: k (keys; queries rotated alike, q.k unchanged), kv (keys and values; the output rotated back) or "
       "none; spreads a head's outliers before q8_0/q4_0 quantize it (head_dim a power of two)", exe, kGenerate | kServer,
       [&p] { return std::string(kv_rotation_name(p.cache_rotate)); },
       [&p](const S& n, const S& v) {
         try {
           p.cache_rotate = parse_kv_rotation(v);
         } catch (const ArgumentError&) {
           throw ArgumentError(detail::msg(n, " must be none, k or kv, got '", v, "'"));
         }
       }});
  add({{"--no-cache"}, "", "recompute the whole sequence at every step (the cache-free reference)", exe, kGenerate,
       none, flag(p.no_cache)});
  add({{"--compare"}, "", "run with and without the cache; report identity and savings", exe, kGenerate, none,
       flag(p.compare)});
  add({{"--demo"}, "", "run the built-in demo (the default with no arguments)", exe, kGenerate, none, flag(p.demo)});

  // ---- conversations and prompt caches (kvdecode-generate)
  const S conv = "Conversations and prompt caches";
  add({{"--conversation"}, "FILE", "a JSON list of user messages; each assistant reply is generated in turn, the KV "
       "cache kept across turns (only tokens not already cached are prefilled)", conv, kGenerate, none,
       [&p](const S&, const S& v) { p.conversation = v; }});
  add({{"--chat", "-cnv"}, "", "interactive chat: one user message per line on stdin, the reply streamed, tokens "
       "prefilled and reused reported per turn", conv, kGenerate, none, flag(p.chat)});
  add({{"--system", "-sys"}, "TEXT", "system message opening the --conversation / --chat", conv, kGenerate, none,
       [&p](const S&, const S& v) { p.system = v; }});
  add({{"--no-cache-reuse"}, "", "re-prefill the whole conversation every turn (the baseline: identical tokens and "
       "logits)", conv, kGenerate, none, flag(p.no_cache_reuse)});
  add({{"--prompt-cache"}, "FILE", "restore the KV cache of a prompt's first tokens from FILE and prefill only the "
       "rest; save it there after the prompt (a file of another model, or damaged, is ignored with a warning); with "
       "--conversation / --chat, the rendered --system message",
       conv, kGenerate, none, [&p](const S&, const S& v) { p.prompt_cache = v; }});

  // ---- kvdecode-roofline
  add({{"--out-dir"}, "DIR", "where to write summary.csv, time_per_token.csv and time_per_token.svg", meas, kRoofline | kConversation,
       [&p] { return p.out_dir; }, [&p](const S&, const S& v) { p.out_dir = v; }});
  add({{"--quick"}, "", "smoke run: 256 MiB bandwidth array, fewer repetitions, and the stories15M shape only "
       "(takes seconds, figures are rough)", meas, kRoofline | kConversation, none, flag(p.quick)});
  add({{"--max-others"}, "P", "on a shared machine: before each measurement wait until other processes use at most "
       "P% of the CPUs, and repeat a measurement during which they used more", meas, kRoofline,
       [&p, str] { return str(p.max_others * 100); },
       [&p](const S& n, const S& v) { p.max_others = parse_number(n, v, 0, false, 100) / 100; }});
  add({{"--patience"}, "S", "give up waiting/repeating after S seconds in total and accept disturbed measurements, "
       "marked in the table", meas, kRoofline,
       [&p, str] { return p.patience < 0 ? S("1200; 0 with --quick") : str(p.patience); },
       [&p](const S& n, const S& v) { p.patience = parse_number(n, v, 0, false, 1e6); }});
  add({{"--weight-types"}, "LIST", "measure decode, prefill of 256 tokens and batch 8 on the TinyLlama-1.1B shape "
       "with each storage scheme in LIST (comma-separated kvdecode-quantize names such as F16,Q8_0,Q4_K_M, or all) "
       "instead of the stories figures; "
       "writes weight_types.csv, weight_types_speed.svg and weight_types_kl.svg", meas, kRoofline,
       [&p] { return p.weight_types.empty() ? S("none") : p.weight_types; },
       [&p](const S&, const S& v) { p.weight_types = v; }});
  add({{"--quality-model"}, "PATH", "with --weight-types: an F32 model, GGUF, Hugging Face folder or llama2.c (e.g. stories260K.bin, 320 "
       "positions or more); each scheme's copy of it is rated on the F32 model's own sampled text (KL, top-1 agreement, perplexity)", meas, kRoofline,
       none, [&p](const S&, const S& v) { p.quality_model = v; }});
  add({{"--prefill-lengths"}, "LIST", "with --weight-types: also time a prefill of each prompt length in LIST "
       "(comma-separated, 1 to 8192, e.g. 16,32,64,128,256,512,1024,2048) with each scheme; writes prefill_speed.csv and "
       "prefill_speed.svg (time to first token as prefill tokens/s against prompt length)", meas, kRoofline,
       [&p] {
         S t;
         for (int n : p.prefill_lengths) t += (t.empty() ? "" : ",") + std::to_string(n);
         return t.empty() ? S("none") : t;
       },
       [&p](const S& n, const S& v) {
         std::vector<int> lengths;
         std::stringstream list(v);
         for (S item; std::getline(list, item, ',');)
           lengths.push_back(static_cast<int>(parse_integer(n, item, 1, 8192)));
         if (lengths.empty()) throw ArgumentError(detail::msg(n, " needs at least one length, got '", v, "'"));
         p.prefill_lengths = std::move(lengths);
       }});

  // ---- kvdecode-tokenize
  const S tok = "Tokenize";
  add({{"--text"}, "TEXT", "text to encode; prints its ids space-separated on one line", tok, kTokenize, none,
       [&p](const S&, const S& v) { p.text = v; }});
  add({{"--cases"}, "FILE", "llama.cpp's vocab test file (texts separated by \"\\n__ggml_vocab_test__\\n\"): one "
       "line per text, each id preceded by a space, no BOS, special-token text not parsed", tok, kTokenize, none,
       [&p](const S&, const S& v) { p.cases = v; }});
  add({{"--pieces"}, "", "after the ids, one line per token: id and its piece", tok, kTokenize, none, flag(p.pieces)});
  add({{"--no-bos"}, "", "do not add BOS (or EOS) even if the tokenizer adds them", tok, kTokenize, none,
       flag(p.no_bos)});
  add({{"--no-special"}, "", "tokenize special-token text such as <|im_start|> as plain text", tok,
       kGenerate | kTokenize, none, flag(p.no_special)});
  add({{"--render-chat"}, "FILE", "render conversations with the model's chat template: FILE is a JSON list of "
       "{\"messages\": [{\"role\", \"content\"}...], \"add_generation_prompt\": bool}; prints a JSON array of the "
       "rendered strings", tok, kTokenize, none, [&p](const S&, const S& v) { p.render_chat = v; }});
  add({{"--chat-template"}, "NAME", "use this built-in chat template instead of the model's: chatml, llama3, llama2, "
       "mistral, phi3 (BOS/EOS text from the model's vocabulary)", tok, kTokenize | kGenerate | kServer, none,
       [&p](const S&, const S& v) { p.chat_template = v; }});
  add({{"--bench"}, "", "measure encoding throughput (MB/s) on the --text or --cases input", tok, kTokenize, none,
       flag(p.bench)});

  // ---- server
  const S srv = "Server";
  add({{"--host"}, "ADDR", "address to listen on", srv, kServer, [&p] { return p.host; },
       [&p](const S&, const S& v) { p.host = v; }});
  add({{"--port"}, "N", "TCP port to listen on", srv, kServer, [&p, str] { return str(p.port); },
       [&p](const S& n, const S& v) { p.port = static_cast<int>(parse_integer(n, v, 1, 65535)); }});
  add({{"--parallel", "-np"}, "N", "requests generating at once, each advanced in the same batched forward; "
       "kvdecode-generate: decode the prompt as 1 and then as N sequences of one batch and report both decode "
       "speeds (every sequence must give the single one's tokens)", srv,
       kServer | kGenerate, [&p, str] { return str(p.n_parallel); },
       [&p](const S& n, const S& v) { p.n_parallel = static_cast<int>(parse_integer(n, v, 1, 4096)); }});
  add({{"--cache-blocks"}, "N", "16-token blocks of the paged KV cache shared by all requests and the prefix cache "
       "(default: 2 x --parallel x (ctx / 16 + 1), every request a whole context and as much again for the prefix cache)",
       srv, kServer, none,
       [&p](const S& n, const S& v) { p.cache_blocks = static_cast<int>(parse_integer(n, v, 1, 1 << 30)); }});
  add({{"--api-key"}, "KEY", "require 'Authorization: Bearer KEY' on the API endpoints (401 otherwise)", srv, kServer,
       none, [&p](const S&, const S& v) { p.api_key = v; }});
  add({{"--max-queue"}, "N", "requests that may wait for a slot or cache blocks; more get 503", srv, kServer,
       [&p, str] { return str(p.max_queue); },
       [&p](const S& n, const S& v) { p.max_queue = static_cast<int>(parse_integer(n, v, 0, 1 << 20)); }});
  add({{"--max-body-bytes"}, "N", "largest request body accepted (413 above)", srv, kServer,
       [&p, str] { return str(p.max_body_bytes); },
       [&p](const S& n, const S& v) { p.max_body_bytes = parse_positive(n, v, 1u << 30); }});
  add({{"--alias", "-a"}, "NAME", "model id listed by /v1/models and echoed in responses (default: the file name)",
       srv, kServer, none, [&p](const S&, const S& v) { p.alias = v; }});

  // ---- output
  add({{"--ids"}, "", "print prompt ids on line 1 and generated ids on line 2", out, kGenerate, none, flag(p.ids)});
  add({{"--dump-logits"}, "FILE", "raw little-endian float32, vocab_size values per row, one row per position fed "
       "to the model, from position 0 (prompt included); with --conversation, turn by turn, one row per position the "
       "turn added (its new prompt tokens, then the generated ones), the same rows with or without --no-cache-reuse", out, kGenerate, none,
       [&p](const S&, const S& v) { p.dump_logits = v; }});
  add({{"--json"}, "", "also print the results as one JSON object on the last line", out,
       kGenerate | kCacheReport | kPlan, none, flag(p.json)});
  add({{"--list-gpus"}, "", "print the built-in card table and exit", out, kPlan, none, flag(p.list_gpus)});
  add({{"--quiet"}, "", "no progress or timing on stderr", out, kGenerate | kCacheReport | kQuantize | kServer, none, flag(p.quiet)});
  add({{"--help", "-h"}, "", "print this text and exit", out, kGenerate | kCacheReport | kPlan | kRoofline | kTokenize | kQuantize | kConversation | kServer, none,
       flag(p.help)});
  return o;
}

/// Wraps `text` into lines of at most `width` columns (longer words stay whole).
inline std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::istringstream words(text);
  std::string word, line;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

/// One program's options: its subset of all_options(), a parser and the --help text.
class OptionTable {
 public:
  static constexpr std::size_t kWidth = 80;       ///< --help wraps to this many columns
  static constexpr std::size_t kHelpColumn = 26;  ///< where help text starts

  /// The options of `program`, writing into `p` (which must outlive the table).
  /// `intro` is printed before the options and `outro` after them, both verbatim.
  OptionTable(Program program, Params& p, std::string intro, std::string outro = "")
      : intro_(std::move(intro)), outro_(std::move(outro)) {
    for (Option& o : all_options(p))
      if (o.programs & program) options_.push_back(std::move(o));
  }

  /// Replaces one option's help text, and its section unless `section` is empty, for
  /// this program (names, value and handler stay as declared). Throws ArgumentError if
  /// the program has no option called `name`.
  OptionTable& set_help(const std::string& name, std::string help, std::string section = "") {
    Option& o = find_or_throw(name);
    o.help = std::move(help);
    if (!section.empty()) o.section = std::move(section);
    return *this;
  }

  /// Parses argv[1, argc) and runs each option's handler in order. Throws ArgumentError
  /// naming the option for an unknown option, a missing value, a value given to a flag,
  /// a bad value, or an argument that is not an option; handlers already run keep their
  /// effect.
  void parse(int argc, const char* const* argv) const {
    for (int i = 1; i < argc; ++i) {
      std::string name = argv[i];
      std::optional<std::string> inline_value;
      if (const auto eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name.erase(eq);
      }
      if (name.size() < 2 || name[0] != '-')
        throw ArgumentError(detail::msg("unexpected argument '", name, "' (options start with -)"));
      const Option* o = find(name);
      if (!o) throw ArgumentError(detail::msg("unknown option '", name, "'"));
      std::string value;
      if (!o->takes_value()) {
        if (inline_value) throw ArgumentError(detail::msg(name, " takes no value"));
      } else if (inline_value) {
        value = *inline_value;
      } else {
        if (i + 1 >= argc) throw ArgumentError(detail::msg(name, " needs a value (", o->value, ")"));
        value = argv[++i];
      }
      o->handler(name, value);
    }
  }
  void parse(int argc, char** argv) const { parse(argc, const_cast<const char* const*>(argv)); }

  /// The --help text: intro, then each section's options (names, placeholder, wrapped
  /// help with the default), in declaration order, then outro. Never fails.
  std::string help() const {
    std::string out = intro_;
    if (!out.empty() && out.back() != '\n') out += '\n';
    std::vector<std::string> sections;
    for (const Option& o : options_) {
      bool seen = false;
      for (const std::string& s : sections) seen = seen || s == o.section;
      if (!seen) sections.push_back(o.section);
    }
    for (const std::string& s : sections) {
      out += "\n" + s + ":\n";
      for (const Option& o : options_)
        if (o.section == s) out += describe(o);
    }
    if (!outro_.empty()) out += "\n" + outro_;
    if (!out.empty() && out.back() != '\n') out += '\n';
    return out;
  }

  /// The option called `name` (any of its names), or nullptr.
  const Option* find(const std::string& name) const {
    for (const Option& o : options_)
      if (o.has_name(name)) return &o;
    return nullptr;
  }

  const std::vector<Option>& options() const { return options_; }

 private:
  Option& find_or_throw(const std::string& name) {
    for (Option& o : options_)
      if (o.has_name(name)) return o;
    throw ArgumentError(detail::msg("no option '", name, "' in this program's table"));
  }

  // "  -m, --model PATH        help..." with short names first, wrapped under the help column.
  static std::string describe(const Option& o) {
    std::string names;
    for (int pass = 0; pass < 2; ++pass)  // short aliases (-m), then long names (--model)
      for (const std::string& n : o.names)
        if ((n.rfind("--", 0) == 0) == (pass == 1)) names += (names.empty() ? "" : ", ") + n;
    std::string head = "  " + names + (o.takes_value() ? " " + o.value : "");
    std::string text = o.help;
    if (o.default_text) {
      const std::string d = o.default_text();
      if (!d.empty()) text += " (default " + d + ")";
    }
    std::string out;
    const std::vector<std::string> lines = wrap(text, kWidth - kHelpColumn);
    if (head.size() + 2 > kHelpColumn) {
      out += head + '\n';
      head.clear();
    }
    for (std::size_t i = 0; i < lines.size() || i == 0; ++i) {
      const std::string pad(kHelpColumn - (i == 0 ? head.size() : 0), ' ');
      out += (i == 0 ? head : std::string()) + pad + (i < lines.size() ? lines[i] : std::string()) + '\n';
    }
    return out;
  }

  std::vector<Option> options_;
  std::string intro_, outro_;
};

// ---------------------------------------------------------------- output helpers

/// s as a quoted JSON string, escaped as JSON.stringify writes it.
inline std::string json_string(const std::string& s) {
  std::string out;
  kvd::detail::append_json_string(out, s);
  return out;
}

/// v as a JSON number with 10 significant digits.
inline std::string json_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

/// The process's peak resident memory in bytes (Linux VmHWM), 0 where unknown. Never throws.
inline std::uint64_t peak_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  std::uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %llu kB", reinterpret_cast<unsigned long long*>(&kb)) == 1) break;
  std::fclose(f);
  return kb * 1024;
}

/// Throws NumericError unless logits[0, n) are all finite: `position` is the sequence
/// position whose row they are (the index of the last token fed). A model whose
/// weights or restored cache hold NaN or infinity gives such rows; they end the
/// program with status 1 and this message, not a sampler's complaint about an argument.
inline void require_finite_logits(const float* logits, int n, std::size_t position) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(logits[i]))
      throw NumericError(detail::msg("the model's logits at position ", position, " are not finite (logit[", i,
                                     "] = ", logits[i], "): its weights or its cache hold NaN or infinite values"));
}

/// Runs body(); ArgumentError -> message and exit status 2, any other kvd::Error, an
/// exhausted memory (std::bad_alloc) or another std::exception -> message and 1.
/// Nothing escapes as an uncaught exception (which would abort with SIGABRT).
inline int run_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const ArgumentError& e) {
    std::cerr << program << ": " << e.what() << "\n(run " << program << " --help for usage)\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << program << ": " << e.what() << '\n';
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << program << ": out of memory (an allocation failed; the input asks for more memory than is free)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << program << ": internal error: " << detail::escape_control(e.what()) << '\n';
    return 1;
  }
}

}  // namespace kvd::cli
