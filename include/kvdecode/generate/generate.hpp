// The generation loop: prefill the prompt, then pick a token and run a decode
// step, until a stop rule fires. The same loop runs cache-free, calling the
// reference on the whole sequence at every step, so the two can be compared
// token for token and logit for logit.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/generate/sampler.hpp"
#include "kvdecode/model/transformer.hpp"

namespace kvd {

/// Why generation stopped.
enum class StopReason { kMaxTokens, kStopToken, kContextFull };

inline const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kMaxTokens: return "max_tokens";
    case StopReason::kStopToken: return "stop_token";
    case StopReason::kContextFull: return "context_full";
  }
  return "?";
}

struct GenerateOptions {
  int max_new_tokens = 32;        ///< tokens to generate at most
  bool use_cache = true;          ///< false: every step recomputes the whole sequence with forward_reference
  std::vector<int> stop_tokens;   ///< generation ends after producing one of these (it is included in the output)
};

template <class T>
struct GenerateResult {
  std::vector<int> tokens;        ///< the generated tokens (prompt excluded)
  StopReason stop = StopReason::kMaxTokens;
  double prefill_seconds = 0;     ///< time to the first token's logits
  double decode_seconds = 0;      ///< time of all decode steps after it
  int decode_steps = 0;
  std::vector<double> step_seconds;       ///< per produced token: seconds of the forward that made its logits
  std::vector<std::uint64_t> step_macs;   ///< per produced token: multiply-adds of that forward
  double decode_tokens_per_second() const { return decode_steps > 0 ? decode_steps / decode_seconds : 0.0; }
};

/// Chooses the next token from a logits row (vocab_size values) and the tokens so far.
template <class T>
using TokenChooser = std::function<int(const T* logits, int vocab_size, const std::vector<int>& history)>;

/// Called with each position's logits row (every prompt position only if the caller asked, see generate()).
template <class T>
using LogitsCallback = std::function<void(int pos, const T* logits, int vocab_size)>;

/// Hooks into the loop; every member is optional.
template <class T>
struct GenerateHooks {
  TokenChooser<T> choose;                  ///< picks each token; greedy (argmax) when empty
  std::function<void(int token)> on_token; ///< sees each token as it is produced (for streaming)
  LogitsCallback<T> on_logits;             ///< sees the logits of each position fed to the model
  bool all_prompt_logits = false;          ///< on_logits also sees every prompt position, not just the last
};

/// The stop rule, defined once for generate() and ContinuousBatcher: generation
/// ends right after a token listed in `stop_tokens` is produced. Never throws.
inline bool is_stop_token(const std::vector<int>& stop_tokens, int token) {
  for (int s : stop_tokens)
    if (s == token) return true;
  return false;
}

/// Runs the loop. With the cache: prefill(prompt) into `cache` (which must be
/// empty or hold a prefix the prompt continues), then decode steps. Without it:
/// forward_reference over the whole sequence at each step, rounding K and V
/// through the cache's storage type as the cache would (`cache` is not written).
/// Stops at max_new_tokens, at a stop token, or when the
/// context (cache capacity / max_seq_len) is full, which is not an error.
/// Throws as prefill/decode_step do (TokenError for an empty or bad prompt, ...).
template <class T, class Cache>
GenerateResult<T> generate(Transformer<T>& model, const std::vector<int>& prompt, Cache& cache,
                           const GenerateOptions& opt, const GenerateHooks<T>& hooks = {}) {
  using Clock = std::chrono::steady_clock;
  const int V = model.config().vocab_size;
  const int limit = opt.use_cache ? cache.capacity() : model.config().max_seq_len;
  if (prompt.empty()) throw TokenError("generate needs a prompt of at least one token");
  if (static_cast<int>(prompt.size()) > limit)
    throw CacheFullError(detail::msg("prompt of ", prompt.size(), " tokens exceeds the context of ", limit, " positions"));
  TokenChooser<T> choose = hooks.choose;
  if (!choose) choose = [](const T* l, int n, const std::vector<int>&) { return argmax(l, n); };
  const auto& on_logits = hooks.on_logits;
  const auto& on_token = hooks.on_token;
  const bool all_prompt_logits = hooks.all_prompt_logits;
  GenerateResult<T> res;
  std::vector<int> seq = prompt;
  std::vector<T> row(V);
  auto t0 = Clock::now();
  // First forward: the prompt.
  int base_pos = 0;
  if (opt.use_cache) {
    base_pos = cache.length();
    auto logits = model.prefill(prompt, cache, all_prompt_logits && on_logits);
    if (on_logits)
      for (long r = 0; r < logits.rows(); ++r)
        on_logits(base_pos + static_cast<int>(prompt.size() - logits.rows() + r), logits.row(r).data(), V);
    Eigen::Map<Vector<T>>(row.data(), V) = logits.row(logits.rows() - 1).transpose();
  } else {
    RowMatrix<T> logits = model.template forward_reference<typename Cache::Storage, typename Cache::ValueStorage>(seq, all_prompt_logits && on_logits);
    if (on_logits)
      for (long r = 0; r < logits.rows(); ++r) on_logits(static_cast<int>(seq.size() - logits.rows() + r), logits.row(r).data(), V);
    Eigen::Map<Vector<T>>(row.data(), V) = logits.row(logits.rows() - 1).transpose();
  }
  auto t1 = Clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  res.step_seconds.push_back(res.prefill_seconds);
  res.step_macs.push_back(model.last_macs());
  for (;;) {
    const int next = choose(row.data(), V, seq);
    res.tokens.push_back(next);
    seq.push_back(next);
    if (on_token) on_token(next);
    if (is_stop_token(opt.stop_tokens, next)) { res.stop = StopReason::kStopToken; break; }
    if (static_cast<int>(res.tokens.size()) >= opt.max_new_tokens) { res.stop = StopReason::kMaxTokens; break; }
    if (base_pos + static_cast<int>(seq.size()) > limit) { res.stop = StopReason::kContextFull; break; }
    auto s0 = Clock::now();
    const int pos = base_pos + static_cast<int>(seq.size()) - 1;
    if (opt.use_cache) {
      auto logits = model.decode_step(next, cache);
      std::copy(logits.data(), logits.data() + V, row.begin());
    } else {
      RowMatrix<T> logits = model.template forward_reference<typename Cache::Storage, typename Cache::ValueStorage>(seq, false);
      Eigen::Map<Vector<T>>(row.data(), V) = logits.row(0).transpose();
    }
    const double dt = std::chrono::duration<double>(Clock::now() - s0).count();
    res.decode_seconds += dt;
    res.decode_steps += 1;
    res.step_seconds.push_back(dt);
    res.step_macs.push_back(model.last_macs());
    if (on_logits) on_logits(pos, row.data(), V);
  }
  return res;
}

}  // namespace kvd
