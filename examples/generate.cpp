// kvdecode-generate: text generation with an exact KV cache, and the proof.
//
// With no arguments it runs a built-in demo: a random-weight model of
// stories15M's shape generates with and without the KV cache, checks that the
// tokens and every logit are identical, and reports what the cache saved
// (time per token and counted multiply-adds per step, both ways).
// With --model it runs any model kvd::open_model reads: a GGUF file (its own
// vocabulary), a Hugging Face folder (its tokenizer.json) or a llama2.c checkpoint;
// --tokenizer takes any format kvd::load_tokenizer reads (GGUF, tokenizer.json, tokenizer.bin).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chat_cli.hpp"
#include "cli.hpp"
#include "kvdecode/kvdecode.hpp"
#include "kvdecode/generate/sampler.hpp"

namespace {

using Clock = std::chrono::steady_clock;

const char* const kIntro = R"(usage: kvdecode-generate [options]

With no options: a demo on a built-in random-weight model of stories15M's shape
(d_model 288, 6 layers, 6 heads, hidden 768, vocab 32000, max_seq_len 256) that
generates with and without the KV cache, checks that tokens and all logits are
bit-identical, and reports what the cache saved.)";

const char* const kOutro = R"(--json fields: prompt_tokens, generated_tokens, prefill_seconds, decode_seconds,
decode_tokens_per_second, weight_bytes_per_token, kv_cache_bytes, kv_bytes_per_token,
cache, cache_dtype, threads, kernels, stop_reason, prompt_ids, generated_ids, text, ...; with
--draft-model or --lookup also draft, draft_tokens, draft_proposed, draft_accepted,
acceptance_rate, target_forwards, draft_seconds (of decode_seconds); with
--prompt-cache also reused and prefilled; with --conversation one object
{model, cache_reuse, cache_dtype, turns: [{prompt_tokens, reused, prefilled, ...}]}
Options take their value as the next argument or after '=' (--steps=64).
Exit status: 0 success, 1 model file unusable or results not identical, 2 bad argument.
)";

using Options = kvd::cli::Params;

// The cache types in effect: --cache-type-k / --cache-type-v, or --cache-dtype for both.
std::string key_type(const Options& o) { return o.cache_type_k.empty() ? kvd::cli::cache_type_name("--cache-dtype", o.cache_dtype) : o.cache_type_k; }
std::string value_type(const Options& o) { return o.cache_type_v.empty() ? kvd::cli::cache_type_name("--cache-dtype", o.cache_dtype) : o.cache_type_v; }

/// Context planned for a GGUF model without --ctx-size (files declare up to 128k).
constexpr int kDefaultGGUFContext = 4096;

// Opens a model of any format (kvd::open_model) for at most `ctx` positions, with
// `tokenizer` ("" = the model's own) and, if asked, its chat template; tensors the
// model does not use (--allow-unused-tensors) are listed in a warning.
kvd::LoadedModel open_model(const std::string& path, int ctx, bool allow_unused, const std::string& tokenizer,
                            bool chat_template, kvd::KVRotation rotation) {
  kvd::LoadOptions lo;
  lo.max_seq_len = ctx;
  lo.cache_rotation = rotation;
  lo.allow_unused_tensors = allow_unused;
  lo.tokenizer = tokenizer;
  lo.chat_template = chat_template;
  kvd::LoadedModel m = kvd::open_model(path, lo);
  const std::vector<std::string>& unused = m.info.unused_tensors;
  if (!unused.empty()) {
    std::cerr << "warning: " << path << ": " << unused.size() << " tensor(s) not used by the model, loaded anyway "
              << "(--allow-unused-tensors):";
    for (std::size_t k = 0; k < unused.size() && k < 8; ++k) std::cerr << (k ? ", " : " ") << unused[k];
    std::cerr << (unused.size() > 8 ? ", ...\n" : "\n");
  }
  return m;
}

[[noreturn]] void usage_error(const std::string& message) { throw kvd::ArgumentError(message); }

Options parse(int argc, char** argv) {
  Options o;
  o.n_parallel = 1;  // the server's default is 4
  const kvd::cli::OptionTable table(kvd::cli::kGenerate, o, kIntro, kOutro);
  table.parse(argc, argv);
  if (o.help) {
    std::cout << table.help();
    std::exit(0);
  }
  o.demo = o.demo || argc == 1;
  o.sampler.seed = o.seed;
  if (o.prompt && o.prompt_ids) usage_error("give either --prompt or --prompt-ids, not both");
  if (o.no_cache && o.compare) usage_error("--compare already runs without the cache; drop --no-cache");
  if (o.demo && o.model) usage_error("--demo uses a built-in model; drop --model");
  if (!o.demo && !o.model) usage_error("--model PATH is required (or run with no arguments for the demo)");
  if (o.draft_model && o.lookup > 0) usage_error("give either --draft-model or --lookup, not both");
  if ((o.draft_model || o.lookup > 0) && o.no_cache)
    usage_error("speculative decoding (--draft-model, --lookup) verifies against the KV cache; drop --no-cache");
  if (o.draft_model && o.demo) usage_error("--demo uses a built-in model; drop --draft-model");
  // Conversations and prompt caches (chat_cli.hpp).
  const bool conversing = o.conversation || o.chat;
  if (o.conversation && o.chat) usage_error("give either --conversation FILE or --chat, not both");
  if (conversing && (o.prompt || o.prompt_ids)) usage_error("--conversation / --chat take their prompts as messages; drop --prompt");
  if (conversing && (o.no_cache || o.compare || o.demo))
    usage_error("--conversation / --chat run with the cache; compare with --no-cache-reuse instead");
  if (!conversing && (o.no_cache_reuse || o.system || !o.chat_template.empty()))
    usage_error("--no-cache-reuse, --system and --chat-template go with --conversation or --chat");
  if (!o.prompt_cache.empty() && (o.no_cache || o.no_cache_reuse || o.compare || o.demo || !o.dump_logits.empty()))
    usage_error("--prompt-cache reuses a cached prompt: drop --no-cache, --no-cache-reuse, --compare, --demo and "
                "--dump-logits");
  if (!o.prompt_cache.empty() && conversing && !o.system)
    usage_error("--prompt-cache with --conversation / --chat caches the --system message: give --system TEXT");
  if (o.n_parallel > 1 && (o.no_cache || o.compare || o.demo || conversing || o.draft_model || o.lookup > 0 ||
                           !o.prompt_cache.empty() || !o.dump_logits.empty() || o.json))
    usage_error("--parallel measures batched decode of one prompt; drop --no-cache, --compare, --demo, "
                "--conversation, --chat, --draft-model, --lookup, --prompt-cache, --dump-logits and --json");
  if ((o.draft_model || o.lookup > 0) && (conversing || !o.prompt_cache.empty()))
    usage_error("speculative decoding (--draft-model, --lookup) runs single prompts; drop --conversation, --chat and "
                "--prompt-cache");
  try {
    o.sampler.validate();
  } catch (const kvd::Error& e) {
    usage_error(e.what());
  }
  return o;
}

// One generation run and everything recorded about it.
struct Run {
  kvd::GenerateResult<float> result;
  bool speculative = false;  // with a drafter: the counters below are set
  long draft_proposed = 0, draft_accepted = 0, target_forwards = 0;
  double draft_seconds = 0;  // proposing, included in decode_seconds
  std::vector<float> logits;  // (positions, V): every position fed, in order
  std::uint64_t kv_bytes = 0;
  double total_seconds = 0;
  int reused = -1;  // --prompt-cache: prompt positions restored from the file (-1: no prompt cache)
};

// A drafter for the run, or none: a draft model over its own cache, or prompt lookup.
struct DraftSetup {
  kvd::Transformer<float>* draft_model = nullptr;
  int lookup = 0;
  bool on() const { return draft_model || lookup > 0; }
};

template <class S, class SV = S>
Run run_once(kvd::Transformer<float>& model, const std::vector<int>& prompt, const Options& o, bool use_cache,
             bool keep_logits, const kvd::TextTokenizer* tok, bool stream_text, bool progress,
             const DraftSetup& ds = {}) {
  Run run;
  const int V = model.config().vocab_size;
  // (with --prompt-cache the conversation in chat_cli.hpp holds the cache; this one is not used)
  kvd::KVCache<float, S, SV> cache(model.config(), o.prompt_cache.empty() ? 0 : 1);
  kvd::GenerateOptions gopt;
  gopt.max_new_tokens = o.steps;
  gopt.use_cache = use_cache;
  if (tok && !o.ignore_eos) gopt.stop_tokens = tok->eog_ids();  // EOS, EOT and the vocabulary's end-of-turn tokens
  if (!o.ignore_eos)  // a Hugging Face folder's generation_config.json may list more (Llama 3: <|eot_id|> too)
    for (int id : o.model_eos_ids)
      if (std::find(gopt.stop_tokens.begin(), gopt.stop_tokens.end(), id) == gopt.stop_tokens.end())
        gopt.stop_tokens.push_back(id);
  kvd::Sampler sampler(o.sampler);
  kvd::GenerateHooks<float> hooks;
  hooks.choose = [&](const float* l, int n, const std::vector<int>& hist) {
    kvd::cli::require_finite_logits(l, n, hist.empty() ? 0 : hist.size() - 1);
    return sampler.sample(l, n, hist);
  };
  if (keep_logits) {
    hooks.all_prompt_logits = true;
    hooks.on_logits = [&](int, const float* l, int n) { run.logits.insert(run.logits.end(), l, l + n); };
  }
  std::unique_ptr<kvd::TokenStreamDecoder> text;
  if (stream_text && tok) {
    const std::string shown = tok->decode(prompt);
    // Until some text is out, the first piece loses the dummy-prefix space.
    text = std::make_unique<kvd::TokenStreamDecoder>(*tok, shown.empty());
    std::cout << shown << std::flush;
  }
  const auto t0 = Clock::now();
  int produced = 0;
  hooks.on_token = [&](int t) {
    ++produced;
    if (text) std::cout << text->push(t) << std::flush;
    if (progress && (produced % 32 == 0))
      std::cerr << "  [" << (use_cache ? "cache" : "cache-free") << "] " << produced << " tokens, "
                << std::fixed << std::setprecision(1) << std::chrono::duration<double>(Clock::now() - t0).count()
                << " s\n";
  };
  if (!o.prompt_cache.empty() && use_cache) {
    run.result = kvd::cli::generate_with_prompt_cache<S, SV>(model, prompt, o, gopt, hooks, &run.kv_bytes, &run.reused);
  } else if (use_cache && ds.on()) {
    // The draft proposes with its own sampler of the same settings: the same draw at
    // the same position, so it agrees with the target wherever their distributions do.
    kvd::Sampler draft_sampler(o.sampler);
    kvd::TokenChooser<float> draft_choose = [&](const float* l, int n, const std::vector<int>& hist) {
      kvd::cli::require_finite_logits(l, n, hist.empty() ? 0 : hist.size() - 1);
      return draft_sampler.sample(l, n, hist);
    };
    std::unique_ptr<kvd::KVCache<float>> draft_cache;
    std::unique_ptr<kvd::Drafter> drafter;
    if (ds.draft_model) {
      draft_cache = std::make_unique<kvd::KVCache<float>>(ds.draft_model->config());
      drafter = std::make_unique<kvd::DraftModelDrafter<float, kvd::KVCache<float>>>(*ds.draft_model, *draft_cache,
                                                                                     V, draft_choose);
    } else {
      drafter = std::make_unique<kvd::PromptLookupDrafter>(ds.lookup);
    }
    kvd::SpeculativeOptions so;
    so.draft_tokens = o.draft_tokens;
    auto r = kvd::generate_speculative(model, prompt, cache, *drafter, gopt, so, hooks);
    run.speculative = true;
    run.draft_proposed = r.draft_proposed;
    run.draft_accepted = r.draft_accepted;
    run.target_forwards = r.target_forwards;
    run.draft_seconds = r.draft_seconds;
    run.result = std::move(r);
  } else {
    run.result = kvd::generate(model, prompt, cache, gopt, hooks);
  }
  run.total_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (text) std::cout << text->flush() << "\n";
  if (o.prompt_cache.empty()) run.kv_bytes = use_cache ? cache.bytes_used() : 0;
  (void)V;
  return run;
}

Run run_dtype(kvd::Transformer<float>& model, const std::vector<int>& prompt, const Options& o, bool use_cache,
              bool keep_logits, const kvd::TextTokenizer* tok, bool stream_text, bool progress,
              const DraftSetup& ds = {}) {
  return kvd::cli::visit_cache_types(o, [&](auto k, auto v) {
    return run_once<decltype(k), decltype(v)>(model, prompt, o, use_cache, keep_logits, tok, stream_text, progress, ds);
  });
}

// --parallel: one prompt decoded as n sequences of one ContinuousBatcher (the
// server's path: every step one batched forward over all of them).
struct BatchRun {
  std::vector<int> tokens;  // the first sequence's generated tokens
  bool same = true;         // every sequence generated them
  long decode_tokens = 0;   // tokens of the steps that were all decode rows
  double decode_seconds = 0;
  kvd::detail::PhaseTimes phases;  // of those steps
  double tokens_per_second() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0.0; }
};

template <class S, class SV>
BatchRun run_batch(kvd::Transformer<float>& model, const std::vector<int>& prompt, const Options& o,
                   const std::vector<int>& stop_tokens, int n) {
  using Cache = kvd::KVCache<float, S, SV>;
  const int capacity = std::min(model.config().max_seq_len, static_cast<int>(prompt.size()) + o.steps);
  kvd::ContinuousBatcher<float, Cache> batcher(model, [&] { return std::make_unique<Cache>(model.config(), capacity); });
  kvd::SequenceOptions so;
  so.max_new_tokens = o.steps;
  so.sampler = o.sampler;  // the same seed for each: the same draws, so the same tokens
  so.stop_tokens = stop_tokens;
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(batcher.add(prompt, so));
  long produced = 0;
  batcher.on_token = [&](int, int) { ++produced; };
  BatchRun r;
  kvd::detail::set_phase_profile(&r.phases);
  for (;;) {
    const long before = produced;
    const kvd::detail::PhaseTimes phases_before = r.phases;
    const auto t0 = Clock::now();
    if (!batcher.step()) break;
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (produced - before == static_cast<long>(batcher.last_step_rows())) {  // no prompt rows in this step
      r.decode_tokens += produced - before;
      r.decode_seconds += dt;
    } else {
      r.phases = phases_before;
    }
  }
  kvd::detail::set_phase_profile(nullptr);
  r.tokens = batcher.generated(ids[0]);
  for (int id : ids) r.same = r.same && batcher.generated(id) == r.tokens;
  return r;
}

// Decodes the prompt as 1 and then as o.n_parallel sequences; prints both speeds.
// Returns 1 if a sequence's tokens differ from the single sequence's.
int run_parallel(kvd::Transformer<float>& model, const std::vector<int>& prompt, const Options& o,
                 const kvd::TextTokenizer* tok) {
  std::vector<int> stop;
  if (!o.ignore_eos) {
    if (tok) stop = tok->eog_ids();
    stop.insert(stop.end(), o.model_eos_ids.begin(), o.model_eos_ids.end());
  }
  return kvd::cli::visit_cache_types(o, [&](auto k, auto v) {
    const BatchRun one = run_batch<decltype(k), decltype(v)>(model, prompt, o, stop, 1);
    const BatchRun many = run_batch<decltype(k), decltype(v)>(model, prompt, o, stop, o.n_parallel);
    const bool same = many.same && many.tokens == one.tokens;
    std::cout << std::fixed << std::setprecision(1) << "decode, " << prompt.size() << "-token prompt, "
              << one.tokens.size() << " new tokens, " << kvd::num_threads() << " thread(s): batch 1 "
              << one.tokens_per_second() << " tokens/s; batch " << o.n_parallel << " " << many.tokens_per_second()
              << " tokens/s in all (" << std::setprecision(2)
              << (one.tokens_per_second() > 0 ? many.tokens_per_second() / one.tokens_per_second() : 0.0)
              << "x); every sequence's tokens " << (same ? "identical" : "DIFFER") << "\n";
    if (!o.quiet) {  // where a decode step's time goes, per step
      const double steps1 = static_cast<double>(one.decode_tokens), stepsn = static_cast<double>(many.decode_tokens) / o.n_parallel;
      std::cerr << "ms per decode step, batch 1 / batch " << o.n_parallel << ":";
      for (int p = 0; p < static_cast<int>(kvd::detail::Phase::kCount); ++p) {
        const double a = one.phases.seconds[p] / std::max(1.0, steps1), b = many.phases.seconds[p] / std::max(1.0, stepsn);
        if (a + b > 0) std::cerr << " " << kvd::detail::phase_name(static_cast<kvd::detail::Phase>(p)) << " "
                                 << std::setprecision(2) << a * 1e3 << " / " << b * 1e3 << ";";
      }
      std::cerr << " all " << one.decode_seconds / std::max(1.0, steps1) * 1e3 << " / "
                << many.decode_seconds / std::max(1.0, stepsn) * 1e3 << "\n";
    }
    return same ? 0 : 1;
  });
}

// Prints whether two runs agree bit for bit, and what the cache saved.
bool report_comparison(const kvd::ModelConfig& c, const Run& cached, const Run& uncached, std::size_t prompt_len) {
  const auto& a = cached.result;
  const auto& b = uncached.result;
  std::size_t same_prefix = 0;
  while (same_prefix < a.tokens.size() && same_prefix < b.tokens.size() && a.tokens[same_prefix] == b.tokens[same_prefix])
    ++same_prefix;
  const bool tokens_same = a.tokens == b.tokens;
  const bool logits_same = cached.logits.size() == uncached.logits.size() &&
                           std::memcmp(cached.logits.data(), uncached.logits.data(), cached.logits.size() * sizeof(float)) == 0;
  const std::size_t rows = cached.logits.size() / c.vocab_size;
  std::cout << "\nExactness\n";
  std::cout << "  tokens identical:  " << (tokens_same ? "yes" : "NO") << " (" << same_prefix << " of "
            << a.tokens.size() << " generated tokens agree)\n";
  std::cout << "  logits identical:  " << (logits_same ? "yes" : "NO") << " (" << rows << " positions x "
            << c.vocab_size << " values, compared bit for bit with memcmp)\n";

  std::cout << "\nWhat the cache saved (each step's own forward pass; position = tokens already in the sequence)\n";
  std::cout << "  position  ms/token cached  ms/token cache-free  speed-up   multiply-adds cached  cache-free      ratio\n";
  const std::size_t steps = std::min(a.step_seconds.size(), b.step_seconds.size());
  std::vector<std::size_t> picks;
  for (std::size_t want : {std::size_t(1), std::size_t(16), std::size_t(64), std::size_t(128), std::size_t(192), std::size_t(1) << 30}) {
    // step i (i >= 1) is the decode step at position prompt_len + i - 1
    std::size_t i = want >= (std::size_t(1) << 30) ? steps - 1 : (want + 1 > prompt_len ? want + 1 - prompt_len : 1);
    if (i >= 1 && i < steps && (picks.empty() || picks.back() < i)) picks.push_back(i);
  }
  for (std::size_t i : picks) {
    const double ta = a.step_seconds[i] * 1e3, tb = b.step_seconds[i] * 1e3;
    std::cout << "  " << std::setw(8) << prompt_len + i - 1 << "  " << std::setw(15) << std::fixed << std::setprecision(3)
              << ta << "  " << std::setw(19) << tb << "  " << std::setw(7) << std::setprecision(1) << tb / ta << "x  "
              << std::setw(20) << kvd::format_count(a.step_macs[i]) << "  " << std::setw(14) << kvd::format_count(b.step_macs[i])
              << "  " << std::setw(8) << std::setprecision(1) << double(b.step_macs[i]) / a.step_macs[i] << "x\n";
  }
  std::uint64_t macs_a = 0, macs_b = 0;
  for (auto m : a.step_macs) macs_a += m;
  for (auto m : b.step_macs) macs_b += m;
  std::cout << "  whole run: " << std::setprecision(2) << cached.total_seconds << " s with the cache, "
            << uncached.total_seconds << " s without (" << std::setprecision(1)
            << uncached.total_seconds / cached.total_seconds << "x); multiply-adds " << kvd::format_count(macs_a) << " vs "
            << kvd::format_count(macs_b) << " (" << double(macs_b) / macs_a << "x)\n";
  std::cout << "  the cache's price: " << kvd::format_count(cached.kv_bytes) << " bytes for "
            << prompt_len + a.tokens.size() - 1 << " positions ("
            << kvd::format_count(c.kv_bytes_per_token(kvd::DType::kF32)) << " bytes per token at f32: 2 x " << c.n_layers
            << " layers x " << c.n_kv_heads << " KV heads x " << c.head_dim << " dims x 4 bytes"
            << (c.swa_pattern > 0 || c.sliding_window > 0 ? "; the windowed layers hold a ring of their window only" : "")
            << ")\n";
  return tokens_same && logits_same;
}

void print_json(const Options& o, const kvd::ModelConfig& c, std::uint64_t weight_bytes, const std::vector<int>& prompt,
                const Run& run, const std::string& text, bool use_cache, std::optional<bool> identical) {
  std::ostringstream js;
  js << std::setprecision(9);
  const kvd::Numerics numerics = kvd::cli::numerics_of(o);
  js << "{\"model\":" << kvd::cli::json_string(o.demo ? std::string("demo:stories15M-shape-random") : *o.model)
     << ",\"prompt_tokens\":" << prompt.size() << ",\"generated_tokens\":" << run.result.tokens.size()
     << ",\"prefill_seconds\":" << run.result.prefill_seconds
     << ",\"decode_seconds\":" << run.result.decode_seconds
     << ",\"prefill_tokens_per_second\":" << (run.result.prefill_seconds > 0 ? prompt.size() / run.result.prefill_seconds : 0.0)
     << ",\"decode_tokens_per_second\":" << run.result.decode_tokens_per_second()
     << ",\"weight_bytes_per_token\":" << weight_bytes
     << ",\"decode_weight_gb_per_second\":" << weight_bytes * run.result.decode_tokens_per_second() / 1e9
     << ",\"kv_cache_bytes\":" << run.kv_bytes << ",\"kv_bytes_per_token\":" << (c.kv_bytes_per_token(kvd::parse_dtype(key_type(o))) + c.kv_bytes_per_token(kvd::parse_dtype(value_type(o)))) / 2
     << ",\"numerics\":\"" << kvd::numerics_name(numerics) << "\""
     << ",\"fast_matmul\":" << (numerics == kvd::Numerics::kFast ? "true" : "false")
     << ",\"cache\":" << (use_cache ? "true" : "false") << ",\"cache_dtype\":\"" << o.cache_dtype << "\""
     << ",\"cache_type_k\":\"" << key_type(o) << "\",\"cache_type_v\":\"" << value_type(o) << "\""
     << ",\"peak_rss_bytes\":" << kvd::cli::peak_rss_bytes() << ",\"threads\":" << kvd::num_threads()
     << ",\"kernels\":" << kvd::cli::json_string(kvd::build_info().summary()) << ",\"stop_reason\":\"" << kvd::stop_reason_name(run.result.stop) << "\"";
  if (identical) js << ",\"identical\":" << (*identical ? "true" : "false");
  if (run.speculative)
    js << ",\"draft\":" << kvd::cli::json_string(o.draft_model ? *o.draft_model : "lookup:" + std::to_string(o.lookup))
       << ",\"draft_tokens\":" << o.draft_tokens << ",\"draft_proposed\":" << run.draft_proposed
       << ",\"draft_accepted\":" << run.draft_accepted << ",\"acceptance_rate\":"
       << (run.draft_proposed > 0 ? static_cast<double>(run.draft_accepted) / run.draft_proposed : 0.0)
       << ",\"target_forwards\":" << run.target_forwards << ",\"draft_seconds\":" << run.draft_seconds;
  if (run.reused >= 0)
    js << ",\"reused\":" << run.reused << ",\"prefilled\":" << prompt.size() - static_cast<std::size_t>(run.reused);
  js << ",\"prompt_ids\":[";
  for (std::size_t i = 0; i < prompt.size(); ++i) js << (i ? "," : "") << prompt[i];
  js << "],\"generated_ids\":[";
  for (std::size_t i = 0; i < run.result.tokens.size(); ++i) js << (i ? "," : "") << run.result.tokens[i];
  js << "]";
  if (!text.empty()) js << ",\"text\":" << kvd::cli::json_string(text);
  js << "}";
  std::cout << js.str() << std::endl;
}

int real_main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.threads > 0) kvd::set_num_threads(o.threads);
  const bool progress = !o.quiet;

  // The model with its tokenizer, chat template and stop ids (kvd::open_model).
  const bool conversing = o.conversation || o.chat;
  std::optional<kvd::LoadedModel> loaded;
  kvd::Transformer<float>* model = nullptr;
  const auto load0 = Clock::now();
  if (o.demo) {
    kvd::ModelConfig c = kvd::stories15m_config();
    c.kv_rotation = o.cache_rotate;
    std::cout << "kvdecode " << kvd::kVersion << " demo: random-weight model of stories15M's shape ("
                            << c.summary() << "), float32, " << kvd::num_threads() << " thread(s), " << kvd::build_info().summary() << "\n";
    model = &loaded.emplace(kvd::Transformer<float>(kvd::ModelWeights<float>::random(c, 42))).model;
  } else {
    // Every format plans for -c positions, by default the model's context capped at
    // kDefaultGGUFContext.
    model = &loaded.emplace(open_model(*o.model, o.ctx_size > 0 ? o.ctx_size : kDefaultGGUFContext,
                                       o.allow_unused_tensors, o.tokenizer, conversing && o.chat_template.empty(),
                                       o.cache_rotate)).model;
    if (progress) std::cerr << "loaded " << *o.model << " (" << model->config().summary() << ") in "
                            << std::setprecision(3) << std::chrono::duration<double>(Clock::now() - load0).count() << " s, "
                            << kvd::num_threads() << " thread(s), kernels " << kvd::build_info().summary() << "\n";
  }
  model->set_numerics(kvd::cli::numerics_of(o));
  const kvd::ModelConfig& c = model->config();
  const kvd::TextTokenizer* tok = loaded->tokenizer.get();
  if (o.prompt && !tok) usage_error("--prompt needs --tokenizer to encode the text");
  if (conversing && !tok) usage_error("--conversation / --chat need a tokenizer (--tokenizer, or a GGUF model)");
  o.model_eos_ids = loaded->stop_ids;

  // A draft model: loaded like the target (same planned context), with its own vocabulary.
  std::optional<kvd::LoadedModel> draft;
  if (o.draft_model) {
    const auto d0 = Clock::now();
    draft.emplace(open_model(*o.draft_model, c.max_seq_len, o.allow_unused_tensors, "", false, o.cache_rotate));
    if (draft->model.config().vocab_size != c.vocab_size)
      throw kvd::ConfigError(kvd::detail::msg(*o.draft_model, ": the draft model's vocab_size ",
                                              draft->model.config().vocab_size, " differs from the target's ",
                                              c.vocab_size, " (a draft model must share the target's vocabulary)"));
    // The draft only chooses proposals, which the target verifies: its fast mode can
    // change how many are accepted, never the output.
    draft->model.set_fast_matmul(true);
    if (progress) std::cerr << "loaded draft " << *o.draft_model << " (" << draft->model.config().summary() << ") in "
                            << std::setprecision(3) << std::chrono::duration<double>(Clock::now() - d0).count() << " s\n";
    // A GGUF draft carries its vocabulary: every token's text and type must be the target's.
    if (tok && draft->info.format == kvd::ModelFormat::kGguf && draft->tokenizer)
      kvd::check_same_vocabulary(*tok, *draft->tokenizer);
  }

  if (o.conversation || o.chat) {  // chat_cli.hpp
    return kvd::cli::visit_cache_types(
        o, [&](auto k, auto v) { return kvd::cli::run_conversation<decltype(k), decltype(v)>(*loaded, o); });
  }

  // The prompt.
  std::vector<int> prompt;
  if (o.prompt_ids) prompt = *o.prompt_ids;
  else if (o.prompt) prompt = tok->encode(*o.prompt, true, !o.no_special);
  else if (o.demo) prompt = {1, 403, 407, 261, 378, 1000, 2000, 3000};  // 8 fixed ids
  else prompt = {1};
  if (prompt.empty()) {  // a tokenizer that adds no BOS, given empty text
    if (!tok || tok->bos_id() < 0) usage_error("the prompt encodes to no tokens; give some text or --prompt-ids");
    prompt = {tok->bos_id()};
  }
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] >= c.vocab_size)
      usage_error("prompt id " + std::to_string(prompt[i]) + " at index " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  if (static_cast<int>(prompt.size()) >= c.max_seq_len)
    usage_error("the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
                std::to_string(c.max_seq_len) + " and needs room for one more");
  const int room = c.max_seq_len - static_cast<int>(prompt.size()) + 1;
  if (o.steps > room) {
    if (progress && !o.demo && argc > 1)
      std::cerr << "note: --steps " << o.steps << " capped at " << room << " by the context of " << c.max_seq_len << " positions\n";
    o.steps = room;
  }

  if (o.n_parallel > 1) return run_parallel(*model, prompt, o, tok);

  const bool compare = o.compare || o.demo;
  const bool keep_logits = compare || !o.dump_logits.empty();
  const bool stream_text = tok && !o.ids && !compare;

  if (progress && compare)
    std::cerr << "generating " << o.steps << " tokens after a " << prompt.size() << "-token prompt, with the KV cache...\n";
  DraftSetup ds;
  ds.draft_model = draft ? &draft->model : nullptr;
  ds.lookup = o.lookup;
  Run run = run_dtype(*model, prompt, o, !o.no_cache, keep_logits, tok, stream_text, progress && compare, ds);
  std::optional<bool> identical;
  if (compare) {
    if (progress) std::cerr << "...and again without it (every step recomputes the whole sequence)\n";
    Run ref = run_dtype(*model, prompt, o, false, true, tok, false, progress);
    identical = report_comparison(c, run, ref, prompt.size());
  }

  std::string text;
  if (tok) {
    std::vector<int> all = prompt;
    all.insert(all.end(), run.result.tokens.begin(), run.result.tokens.end());
    text = tok->decode(all);
    if (compare && !o.ids) std::cout << "\nText:\n" << text << "\n";
  }
  if (o.ids) {
    for (std::size_t i = 0; i < prompt.size(); ++i) std::cout << (i ? " " : "") << prompt[i];
    std::cout << "\n";
    for (std::size_t i = 0; i < run.result.tokens.size(); ++i) std::cout << (i ? " " : "") << run.result.tokens[i];
    std::cout << "\n";
  }
  if (!o.dump_logits.empty()) {
    kvd::detail::write_file_atomically(o.dump_logits, [&](std::ostream& out) {
      out.write(reinterpret_cast<const char*>(run.logits.data()),
                static_cast<std::streamsize>(run.logits.size() * sizeof(float)));
    });
    if (progress) std::cerr << "wrote " << run.logits.size() / c.vocab_size << " rows x " << c.vocab_size
                            << " float32 logits to " << o.dump_logits << "\n";
  }
  if (progress) {
    const auto& r = run.result;
    std::cerr << std::fixed << std::setprecision(2) << "prefill: " << prompt.size() << " tokens in " << r.prefill_seconds * 1e3
              << " ms (time to first token); decode: " << r.decode_steps << " steps, " << std::setprecision(1)
              << r.decode_tokens_per_second() << " tokens/s" << (o.no_cache ? " (cache-free)" : "")
              << "; stop: " << kvd::stop_reason_name(r.stop) << "; KV cache " << kvd::format_count(run.kv_bytes) << " bytes ("
              << key_type(o) << " keys, " << value_type(o) << " values)\n";
    if (run.speculative)
      std::cerr << "speculative: " << run.draft_accepted << " of " << run.draft_proposed << " drafted tokens accepted ("
                << std::setprecision(1) << (run.draft_proposed > 0 ? 100.0 * run.draft_accepted / run.draft_proposed : 0.0)
                << "%), " << run.target_forwards << " target forwards for " << r.decode_steps << " decoded tokens\n";
  }
  if (o.json) print_json(o, c, model->weight_bytes_per_token(), prompt, run, text, !o.no_cache, identical);
  return identical.value_or(true) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return kvd::cli::run_main("kvdecode-generate", [&] { return real_main(argc, argv); });
}
