// Exact speculative decoding. A cheap drafter proposes the next k tokens; the
// target model checks them in one forward over k + 1 rows (the last accepted
// token and the k drafts, at consecutive positions, logits for every row);
// the tokens the target itself chooses are kept up to and including its first
// disagreement with the draft, and both caches are rewound to what was kept.
//
// Why the output is exactly plain decoding's, bit for bit:
//   * a verification row is a decode row: every kernel computes a row from that
//     row's data alone by a fixed sequence of operations (dense_kernels.hpp), so the
//     logits of row i equal decode_step's logits for that token at that position;
//   * the target's choice for each row goes through the same chooser with the same
//     history as plain decoding, and the sampler's draw for position p is
//     uniform_at(seed, p) (sampler.hpp), whatever was drawn before;
//   * rejected rows are removed with truncate(): the rows kept are the ones plain
//     decoding would have appended, and nothing reads a position at or beyond a
//     cache's length (stale K/V there is never visible).
// The drafter therefore only changes speed, never tokens or logits; so does the
// draft length, which DraftTuner picks from the measured acceptance and costs
// (0, a plain step, when drafting does not pay).
//
// Drafters:
//   * DraftModelDrafter: a second Transformer with the same vocabulary (e.g. a
//     Q2_K or Q4_K copy of a Q8_0 target) and its own cache; it proposes the
//     tokens the target's chooser would pick from the draft's logits (the same
//     sampler at the same positions, so sampled decoding is drafted too);
//   * PromptLookupDrafter: no model; proposes the tokens that followed the most
//     recent earlier occurrence of the last n tokens of the sequence.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvdecode/error.hpp"
#include "kvdecode/generate/generate.hpp"
#include "kvdecode/text/text_tokenizer.hpp"
#include "kvdecode/model/transformer.hpp"

namespace kvd {

/// Proposes tokens to follow a sequence. Implementations may keep state (a draft
/// cache) that they bring back in line with `seq` on each call.
class Drafter {
 public:
  virtual ~Drafter() = default;
  /// Appends to `out` (cleared first) at most `max_tokens` (>= 1) tokens proposed to
  /// follow `seq` (the whole sequence the target has accepted so far, prompt included).
  /// Proposing fewer, or none, is allowed. Throws what the drafter's model throws
  /// (a full draft cache is not an error: it proposes fewer).
  virtual void propose(const std::vector<int>& seq, int max_tokens, std::vector<int>& out) = 0;
  /// Whether a proposal costs model forwards (used by the pay-off rule). Never throws.
  virtual bool uses_model() const { return false; }
  /// Seconds the last propose() spent feeding the drafter tokens it had not seen (a
  /// draft model's prefill of the prompt): a one-off cost the pay-off rule leaves out
  /// of the per-token drafting cost. Never throws.
  virtual double last_feed_seconds() const { return 0; }
};

/// Prompt lookup (n-gram drafting): finds the most recent earlier occurrence of the
/// last n tokens of the sequence and proposes the tokens that followed it.
class PromptLookupDrafter : public Drafter {
 public:
  /// Throws ConfigError if ngram < 1.
  explicit PromptLookupDrafter(int ngram) : ngram_(ngram) {
    if (ngram < 1) throw ConfigError(detail::msg("prompt lookup n-gram size ", ngram, " must be >= 1"));
  }
  int ngram() const { return ngram_; }

  /// Proposes seq[j + n, j + n + max_tokens) (clipped to seq's end) for the largest
  /// j < size - n with seq[j, j + n) == the last n tokens; nothing if there is none or
  /// seq is shorter than n + 1. Never throws (besides bad_alloc on `out`).
  void propose(const std::vector<int>& seq, int max_tokens, std::vector<int>& out) override {
    out.clear();
    const long n = ngram_, size = static_cast<long>(seq.size());
    if (size <= n || max_tokens < 1) return;
    const int* tail = seq.data() + size - n;
    for (long j = size - n - 1; j >= 0; --j) {
      if (!std::equal(tail, tail + n, seq.data() + j)) continue;
      for (long i = j + n; i < size && static_cast<long>(out.size()) < max_tokens; ++i) out.push_back(seq[i]);
      return;
    }
  }

 private:
  int ngram_;
};

/// Throws ConfigError unless the two tokenizers have the same vocabulary: the same
/// size, and for every id the same token text and type (the first differing id is
/// named). A draft model must share the target's vocabulary for its ids to mean the
/// same tokens.
inline void check_same_vocabulary(const TextTokenizer& target, const TextTokenizer& draft) {
  auto shown = [](const std::string& text) {  // control bytes as \xNN, so the message stays on one line
    std::string out;
    for (unsigned char ch : text) {
      if (ch < 0x20 || ch == 0x7F) {
        static const char* const kHex = "0123456789ABCDEF";
        out += "\\x";
        out += kHex[ch >> 4];
        out += kHex[ch & 15];
      } else {
        out += static_cast<char>(ch);
      }
    }
    return out;
  };
  if (target.vocab_size() != draft.vocab_size())
    throw ConfigError(detail::msg("draft vocabulary has ", draft.vocab_size(), " tokens, the target's ", target.vocab_size(),
                                  " (a draft model must share the target's vocabulary)"));
  for (int id = 0; id < target.vocab_size(); ++id) {
    if (target.token_text(id) != draft.token_text(id))
      throw ConfigError(detail::msg("draft vocabulary differs from the target's at id ", id, ": '",
                                    shown(draft.token_text(id)), "' vs '", shown(target.token_text(id)), "'"));
    if (target.token_type(id) != draft.token_type(id))
      throw ConfigError(detail::msg("draft vocabulary differs from the target's at id ", id, " ('",
                                    shown(target.token_text(id)), "'): token type ", static_cast<int>(draft.token_type(id)), " vs ",
                                    static_cast<int>(target.token_type(id))));
  }
}

/// A draft model: proposes by running its own Transformer over its own cache, one
/// token at a time, choosing each token with `choose` (typically the target's
/// sampler, so that a sampled draft agrees with the target where their
/// distributions do). Keeps its cache equal to the longest prefix of the proposal
/// history that the target accepted: on each call it truncates to what it shares
/// with `seq` and feeds the rest in one prefill.
template <class T, class Cache>
class DraftModelDrafter : public Drafter {
 public:
  /// `model` and `cache` must outlive the drafter; `cache` must hold exactly the
  /// positions the target's cache holds before the sequence (normally: both empty).
  /// Throws ConfigError if the vocabulary sizes differ (check_same_vocabulary on the
  /// tokenizers checks the pieces too).
  DraftModelDrafter(Transformer<T>& model, Cache& cache, int target_vocab_size, TokenChooser<T> choose = {})
      : model_(&model), cache_(&cache), base_(cache.length()), choose_(std::move(choose)) {
    if (model.config().vocab_size != target_vocab_size)
      throw ConfigError(detail::msg("draft model vocab_size = ", model.config().vocab_size, " but the target's is ",
                                    target_vocab_size, " (a draft model must share the target's vocabulary)"));
    if (!choose_) choose_ = [](const T* l, int n, const std::vector<int>&) { return argmax(l, n); };
  }

  bool uses_model() const override { return true; }
  double last_feed_seconds() const override { return feed_seconds_; }
  long draft_forwards() const { return forwards_; }  ///< draft model calls so far

  void propose(const std::vector<int>& seq, int max_tokens, std::vector<int>& out) override {
    out.clear();
    feed_seconds_ = 0;
    if (seq.empty() || max_tokens < 1) return;
    const int V = model_->config().vocab_size;
    // Keep what the draft cache shares with seq, minus seq's last token (whose logits we need).
    std::size_t keep = 0;
    const std::size_t limit = std::min(fed_.size(), seq.size() - 1);
    while (keep < limit && fed_[keep] == seq[keep]) ++keep;
    cache_->truncate(base_ + static_cast<int>(keep));
    fed_.resize(keep);
    const int room = cache_->capacity() - cache_->length();
    const long unfed = static_cast<long>(seq.size() - keep);
    if (unfed > room) return;  // the draft's context is full: propose nothing
    max_tokens = std::min(max_tokens, room - static_cast<int>(unfed) + 1);
    pending_.assign(seq.begin() + static_cast<long>(keep), seq.end());
    const auto f0 = std::chrono::steady_clock::now();
    const T* logits = model_->prefill(pending_, *cache_).data();  // (V): the last row, in the model's workspace
    ++forwards_;
    // Feeding one token (the last accepted one) is the normal per-round cost; more is catching up.
    if (pending_.size() > 1) feed_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
    fed_.insert(fed_.end(), pending_.begin(), pending_.end());
    history_ = seq;
    for (;;) {
      const int t = choose_(logits, V, history_);
      out.push_back(t);
      history_.push_back(t);
      if (static_cast<int>(out.size()) >= max_tokens) break;
      logits = model_->decode_step(t, *cache_).data();
      ++forwards_;
      fed_.push_back(t);
    }
  }

 private:
  Transformer<T>* model_;
  Cache* cache_;
  int base_;                 // positions the cache held before the sequence
  TokenChooser<T> choose_;
  std::vector<int> fed_;     // tokens in the draft cache after base_
  std::vector<int> pending_; // tokens of one prefill
  std::vector<int> history_; // seq + the drafts so far (what choose_ sees)
  long forwards_ = 0;
  double feed_seconds_ = 0;  // of the last propose(): the prefill of more than one token
};

/// Options of speculative generation.
struct SpeculativeOptions {
  int draft_tokens = 4;   ///< most tokens drafted per verification, >= 1
  bool adaptive = true;   ///< adapt the draft length to acceptance, drop to plain decoding when drafting does not pay

  /// Throws ConfigError naming the field if draft_tokens < 1.
  void validate() const {
    if (draft_tokens < 1)
      throw ConfigError(detail::msg("SpeculativeOptions.draft_tokens = ", draft_tokens, " must be >= 1"));
  }
};

/// What generate() reports, plus the drafting counters.
template <class T>
struct SpeculativeResult : GenerateResult<T> {
  long draft_proposed = 0;   ///< drafted tokens sent to verification
  long draft_accepted = 0;   ///< of those, tokens the target chose too (and kept)
  long target_forwards = 0;  ///< target forwards after the prefill (verifications and plain steps)
  double draft_seconds = 0;  ///< time spent proposing (included in decode_seconds)
  double acceptance_rate() const { return draft_proposed > 0 ? static_cast<double>(draft_accepted) / draft_proposed : 0.0; }
};

namespace detail {
template <class C, class = void>
struct has_pool : std::false_type {};
template <class C>
struct has_pool<C, std::void_t<decltype(std::declval<const C&>().pool().block_size())>> : std::true_type {};

/// Most rows a verification may append to `cache` at its length so that a rewind to
/// length + 1 stays possible: a sliding-window paged sequence returns blocks behind
/// the window at commit, so the rows may not push the window start past the block
/// that length + 1's window starts in; a ring cache takes max_append() rows per call.
template <class Cache>
int max_verify_rows(const Cache& cache) {
  const int w = cache.shape().sliding_window;
  int rows = static_cast<int>(std::min<long>(max_append_of(cache), std::numeric_limits<int>::max()));
  if constexpr (has_pool<Cache>::value) {
    if (w > 0) {
      const int bs = cache.pool().block_size();
      const int start = cache.length() + 1 - w + 1;  // window start after one row
      // rows r keep the window start of length + r in that block: start + r - 1 < end of block
      rows = std::min(rows, start >= 0 ? bs - start % bs : bs - start);
    }
  }
  return std::max(rows, 1);
}

/// Chooses each round's draft length from measured costs (it changes speed only,
/// never the output). Model: each drafted token is accepted with probability a
/// given the previous one was (estimated from recent rounds, prior 1/2), so k drafts
/// yield E(k) = 1 + a + ... + a^k tokens for one forward of k + 1 rows costing
/// plain + k * (extra_row + draft_token) seconds (extra_row from the verifications'
/// average time and draft count against the plain estimate; a draft model's one-off
/// prefill of the prompt left out); k = 0 is a plain step. The k with
/// the best expected tokens per second is used. The first verification (after one
/// plain step) measures the costs: with max_k drafts for prompt lookup, with at most
/// 2 for a draft model (its prefill yields the first, one decode step the second), so
/// that a draft model too slow to pay costs one probe of 2 rather than max_k steps.
/// When the best k is 0, a prompt-lookup drafter
/// gets a one-token probe now and then (gaps doubling from 8 steps) to notice the
/// acceptance rising; a drafter with a model is not probed again (it stops for the
/// rest of the generation), since a probe must first feed it every token it skipped,
/// a prefill that costs more than the probe can win back (measured on the 1.1B shape).
/// So a draft model is dropped only on evidence: at once when even full acceptance
/// would not pay for its measured cost, otherwise after 4 verifications with drafts
/// (one draft a round while the estimate says 0), since an early rejection or two
/// says little about the acceptance. Timings are noisy on a shared machine (one
/// step can take twice another), and the plain step's cost is measured only on
/// plain steps, so before dropping a drafter the tuner takes one more plain step
/// (normal decoding: it changes nothing but the timing) and decides on the
/// refreshed estimate; if drafting pays after all, it goes on. Each estimate is the
/// mean of its first samples, then an average with weight 0.3 on the newest.
class DraftTuner {
 public:
  DraftTuner(int max_k, bool uses_model) : max_k_(max_k), uses_model_(uses_model) {}

  int choose() {
    if (plain_s_ <= 0) return 0;             // the first decode step is plain: it measures plain_s_
    if (rounds_ == 0) return uses_model_ ? std::min(max_k_, 2) : max_k_;  // then one verification measures the rest
    if (gave_up_) return 0;
    if (const int k = best(); k > 0) return k;
    if (uses_model_) {
      // A draft model is dropped for good (see above), so only on evidence: at once if
      // it could not pay even with every draft accepted, else after kMinRounds
      // verifications with drafts; until then it drafts one token a round.
      if (best(1.0) == 0 || rounds_ >= kMinRounds) {
        // Decide on a plain step measured after the last verification (see above).
        if (!plain_fresh_) return 0;
        gave_up_ = true;
        return 0;
      }
      return 1;
    }
    if (--until_probe_ > 0) return 0;
    probing_ = true;
    return 1;
  }

  void plain_step(double seconds) {
    plain_s_ = ema(plain_s_, seconds, ++plain_n_);
    plain_fresh_ = true;
  }

  /// A verification of `proposed` (>= 1) drafts, `accepted` of them kept, `rejected`
  /// when a draft mismatched (not when the draft ran out or generation stopped).
  /// `draft_seconds` is the whole propose() call, `feed_seconds` the part of it that
  /// fed the drafter tokens it had not seen (Drafter::last_feed_seconds), which also
  /// yielded the first draft.
  void verified(int proposed, int accepted, bool rejected, double verify_seconds, double draft_seconds,
                double feed_seconds) {
    ++rounds_;
    plain_fresh_ = false;
    acc_ = 0.8 * acc_ + accepted;
    rej_ = 0.8 * rej_ + (rejected ? 1 : 0);
    verify_s_ = ema(verify_s_, verify_seconds, rounds_);
    verify_k_ = ema(verify_k_, proposed, rounds_);
    // Per draft token: the forwards timed apart from the feed, one per draft they yielded.
    const int timed = proposed - (feed_seconds > 0 ? 1 : 0);
    if (timed > 0)
      draft_s_ = ema(draft_s_, std::max(0.0, draft_seconds - feed_seconds) / timed, ++draft_n_);
    else if (draft_s_ < 0)
      draft_s_ = feed_seconds;  // only a feed so far: a forward of one token costs at most that
    if (probing_) {
      probing_ = false;
      if (best() > 0) {
        gap_ = 8;
      } else {
        gap_ = std::min(gap_ * 2, 1024);
      }
    }
    until_probe_ = gap_;
  }

 private:
  // The n-th sample x into the average: the mean of the first 3, then weight 0.3 on the newest.
  static double ema(double avg, double x, int n) {
    const double w = std::max(0.3, 1.0 / n);
    return n <= 1 || avg < 0 ? x : (1 - w) * avg + w * x;
  }
  // The best draft length at acceptance a (default: the estimate, prior 1/2).
  int best(double a = -1) const {
    if (a < 0) a = (acc_ + 1) / (acc_ + rej_ + 2);
    // An extra verified row's cost, from the verifications against the current plain
    // estimate (so a refreshed plain step corrects it at once).
    const double row_s = std::max(0.0, (verify_s_ - plain_s_) / verify_k_);
    int best_k = 0;
    double best_rate = 1.0 / plain_s_, tokens = 1, term = 1;
    for (int k = 1; k <= max_k_; ++k) {
      term *= a;
      tokens += term;
      const double rate = tokens / (plain_s_ + k * (row_s + draft_s_));
      if (rate > best_rate) {
        best_rate = rate;
        best_k = k;
      }
    }
    return best_k;
  }

  int max_k_;
  bool uses_model_;
  double plain_s_ = 0, draft_s_ = -1;  // seconds: a plain step, one draft token
  double verify_s_ = 0, verify_k_ = 1;  // a verification's seconds and drafts (averages)
  double acc_ = 0, rej_ = 0;                         // decayed counts of accepted drafts and rejections
  int until_probe_ = 8, gap_ = 8;
  int plain_n_ = 0, draft_n_ = 0;  // samples in the plain and draft estimates (rounds_: the verifications')
  bool probing_ = false, gave_up_ = false;
  bool plain_fresh_ = false;  // a plain step was timed since the last verification
  int rounds_ = 0;                   // verifications with drafts so far
  static constexpr int kMinRounds = 4;
};
}  // namespace detail

/// Speculative generation: the loop of generate() (same options, hooks, stop rules
/// and GenerateResult fields), with each decode step replaced by a verification of
/// the drafter's proposals. Tokens, every logits row passed to hooks.on_logits and
/// the cache contents at the end are bit-identical to generate() with the same
/// arguments (use_cache must be true), for any drafter and draft length, provided
/// hooks.choose depends only on the logits row and the history it is given (a
/// Sampler does: its draw is keyed by the position history.size()).
/// step_seconds/step_macs get one entry per produced token (a verification's time
/// and work shared evenly among the tokens it produced).
/// Throws ConfigError (bad sopt, use_cache false), and what generate() throws. A
/// throw during decoding leaves the cache holding the sequence up to the last kept
/// token (never a rejected row).
template <class T, class Cache>
SpeculativeResult<T> generate_speculative(Transformer<T>& model, const std::vector<int>& prompt, Cache& cache,
                                          Drafter& drafter, const GenerateOptions& opt, const SpeculativeOptions& sopt = {},
                                          const GenerateHooks<T>& hooks = {}) {
  using Clock = std::chrono::steady_clock;
  sopt.validate();
  if (!opt.use_cache) throw ConfigError("generate_speculative needs the cache (GenerateOptions.use_cache = true)");
  const int V = model.config().vocab_size;
  const int limit = cache.capacity();
  if (prompt.empty()) throw TokenError("generate needs a prompt of at least one token");
  if (static_cast<int>(prompt.size()) > limit)
    throw CacheFullError(detail::msg("prompt of ", prompt.size(), " tokens exceeds the context of ", limit, " positions"));
  TokenChooser<T> choose = hooks.choose;
  if (!choose) choose = [](const T* l, int n, const std::vector<int>&) { return argmax(l, n); };
  SpeculativeResult<T> res;
  std::vector<int> seq = prompt;
  std::vector<T> row(V);
  auto t0 = Clock::now();
  const int base_pos = cache.length();
  {
    auto logits = model.prefill(prompt, cache, hooks.all_prompt_logits && hooks.on_logits);
    if (hooks.on_logits)
      for (long r = 0; r < logits.rows(); ++r)
        hooks.on_logits(base_pos + static_cast<int>(prompt.size() - logits.rows() + r), logits.row(r).data(), V);
    Eigen::Map<Vector<T>>(row.data(), V) = logits.row(logits.rows() - 1).transpose();
  }
  res.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  res.step_seconds.push_back(res.prefill_seconds);
  res.step_macs.push_back(model.last_macs());

  // Emits one chosen token with generate()'s stop rules; true when generation ends.
  auto emit = [&](int next) {
    res.tokens.push_back(next);
    seq.push_back(next);
    if (hooks.on_token) hooks.on_token(next);
    if (is_stop_token(opt.stop_tokens, next)) { res.stop = StopReason::kStopToken; return true; }
    if (static_cast<int>(res.tokens.size()) >= opt.max_new_tokens) { res.stop = StopReason::kMaxTokens; return true; }
    if (base_pos + static_cast<int>(seq.size()) > limit) { res.stop = StopReason::kContextFull; return true; }
    return false;
  };
  if (emit(choose(row.data(), V, seq))) return res;

  // The draft length is chosen by the pay-off rule (DraftTuner), or fixed when not adaptive.
  detail::DraftTuner tuner(sopt.draft_tokens, drafter.uses_model());
  std::vector<int> draft;
  std::vector<Row> rows;
  rows.reserve(static_cast<std::size_t>(sopt.draft_tokens) + 1);
  model.reserve(sopt.draft_tokens + 1, true);

  for (;;) {
    const int P = cache.length();  // the position of seq.back(), the token fed next
    // Drafts that can matter: the verification produces at most k + 1 tokens, and its
    // rows must fit the context and allow the rewind.
    int k = std::min({sopt.adaptive ? tuner.choose() : sopt.draft_tokens,
                      opt.max_new_tokens - static_cast<int>(res.tokens.size()) - 1, limit - P - 1,
                      detail::max_verify_rows(cache) - 1});
    k = std::max(k, 0);
    auto s0 = Clock::now();
    draft.clear();
    if (k > 0) drafter.propose(seq, k, draft);
    if (static_cast<int>(draft.size()) > k) draft.resize(static_cast<std::size_t>(k));
    const double draft_dt = std::chrono::duration<double>(Clock::now() - s0).count();
    res.draft_seconds += draft_dt;
    rows.clear();
    rows.push_back(Row{seq.back(), 0, P, true});
    for (std::size_t i = 0; i < draft.size(); ++i) rows.push_back(Row{draft[i], 0, P + 1 + static_cast<int>(i), true});
    Cache* c = &cache;
    auto verify = [&]() -> LogitsView<T> {
      try {
        return model.forward(rows.data(), static_cast<long>(rows.size()), &c, 1);
      } catch (const OutOfBlocksError&) {
        if (rows.size() == 1) throw;  // plain decoding fails the same way
        draft.clear();                // the pool has room for one row but not all: decode plainly
        rows.resize(1);
        return model.forward(rows.data(), 1, &c, 1);
      }
    };
    const LogitsView<T> logits = verify();
    res.target_forwards += 1;
    const std::uint64_t macs = model.last_macs();
    // Row i's logits choose the token after rows[i]; keep going while it is the next draft.
    int produced = 0;
    bool done = false;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (hooks.on_logits) hooks.on_logits(P + static_cast<int>(i), logits.row(static_cast<long>(i)).data(), V);
      const int next = choose(logits.row(static_cast<long>(i)).data(), V, seq);
      ++produced;
      const bool matched = i < draft.size() && next == draft[i];
      if (matched) res.draft_accepted += 1;
      done = emit(next);
      if (done || !matched) break;
    }
    res.draft_proposed += static_cast<long>(draft.size());
    // Keep the rows plain decoding would have fed: seq.back() and the accepted drafts.
    cache.truncate(P + produced);
    const double dt = std::chrono::duration<double>(Clock::now() - s0).count();
    res.decode_seconds += dt;
    res.decode_steps += produced;
    for (int i = 0; i < produced; ++i) {
      res.step_seconds.push_back(dt / produced);
      res.step_macs.push_back(macs / static_cast<std::uint64_t>(produced));
    }
    if (done) break;
    if (!sopt.adaptive) continue;
    if (draft.empty())
      tuner.plain_step(dt - draft_dt);
    else
      tuner.verified(static_cast<int>(draft.size()), produced - 1, produced - 1 < static_cast<int>(draft.size()),
                     dt - draft_dt, draft_dt, drafter.last_feed_seconds());
  }
  return res;
}

}  // namespace kvd
