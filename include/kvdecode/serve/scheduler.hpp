// Scheduler: the serving loop's core. It holds one BlockPool (the cache budget),
// the requests running on it, a queue of those waiting, and the prefix cache, and
// advances every running request in one Transformer::forward per step():
//   - one decode row per request that has its next token ready;
//   - beside them, prompt chunks (at most prefill_chunk tokens of one request, at
//     most max_rows_per_step rows in all), so a long prompt never stalls the
//     streams.
// A row's logits depend only on its own token, position and sequence cache (see
// transformer.hpp), so every request gets the bits it would get alone, whatever
// runs beside it and however its prompt was chunked; the sampler's draw is keyed
// by (seed, position) (sampler.hpp), so its tokens are the same too.
//
// Automatic prefix caching. A finished request's sequence (its blocks and the
// tokens they hold) goes into the prefix cache instead of being freed, and
// running requests' sequences count as well. A new request forks (paged_cache.hpp)
// the sequence that shares the longest prefix with its prompt, rewinds it to that
// prefix and prefills only the rest: a chat's second turn prefills only its new
// tokens. The cached K and V are the values a fresh prefill of the same tokens
// writes, so the logits are the same bits. Entries are dropped least recently used
// first, whenever the pool needs their blocks, and beyond max_prefix_entries.
//
// Memory. Admission reserves, for each running request, the blocks of its whole
// sequence (prompt + max_tokens, capped at the context) plus one for a
// copy-on-write; a request is admitted only while the reservations fit the pool.
// The blocks the prefix cache holds are taken back on demand, so a running
// request never runs out of blocks: a full cache queues new requests, never fails
// a running one. A queue longer than max_queue refuses new requests (503).
//
// Not thread-safe: one thread calls submit/cancel/step (engine.hpp wraps it for a
// server). Callbacks run inside step() on that thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvdecode/cache/paged_cache.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/generate/generate.hpp"
#include "kvdecode/generate/sampler.hpp"
#include "kvdecode/model/transformer.hpp"
#include "kvdecode/serve/request_error.hpp"

namespace kvd {

/// Scheduler settings. validate() says what is wrong.
struct SchedulerOptions {
  int n_parallel = 4;            ///< requests running at once (-np)
  int n_blocks = 0;              ///< pool blocks (--cache-blocks); 0 = default_cache_blocks()
  int block_size = 16;           ///< tokens per block (a multiple of 16)
  int prefill_chunk = 128;       ///< most prompt tokens of one request per step
  int max_rows_per_step = 512;   ///< rows in one forward
  int max_queue = 64;            ///< requests waiting beyond n_parallel before new ones get 503
  bool prefix_cache = true;      ///< keep finished sequences' blocks for later prompts
  int max_prefix_entries = 0;    ///< sequences the prefix cache keeps; 0 = 4 * n_parallel

  /// Throws ConfigError naming the field, its value and the range.
  void validate() const {
    auto bad = [](const char* f, long v, const char* range) {
      throw ConfigError(detail::msg("SchedulerOptions.", f, " = ", v, " must be ", range));
    };
    if (n_parallel < 1 || n_parallel > 4096) bad("n_parallel", n_parallel, "in [1, 4096]");
    if (n_blocks < 0) bad("n_blocks", n_blocks, ">= 0 (0 = default)");
    if (block_size < 16 || block_size % 16 != 0) bad("block_size", block_size, "a positive multiple of 16");
    if (prefill_chunk < 1) bad("prefill_chunk", prefill_chunk, ">= 1");
    if (max_rows_per_step < 1) bad("max_rows_per_step", max_rows_per_step, ">= 1");
    if (max_queue < 0) bad("max_queue", max_queue, ">= 0");
    if (max_prefix_entries < 0) bad("max_prefix_entries", max_prefix_entries, ">= 0 (0 = 4 * n_parallel)");
  }
};

/// Blocks a pool needs so that n_parallel requests can each hold a whole context
/// of `ctx` positions (plus one copy-on-write block each), and as many again for
/// the prefix cache: 2 * n_parallel * (ceil(ctx / block_size) + 1). Never throws.
inline long default_cache_blocks(int ctx, int n_parallel, int block_size = 16) {
  const long per = (static_cast<long>(ctx) + block_size - 1) / block_size + 1;
  return 2L * n_parallel * per;
}

/// One generation request as the scheduler runs it.
struct ScheduledJob {
  std::vector<int> prompt;        ///< token ids, each in [0, vocab_size)
  int max_tokens = 16;            ///< most tokens to generate (>= 1); the context may stop it sooner
  SamplerConfig sampler;          ///< greedy by default
  std::vector<int> stop_ids;      ///< generation ends after one of these (it is included)
  int top_logprobs = -1;          ///< -1: no log-probabilities; k >= 0: the chosen token's and the k best
};

/// Why a request ended.
enum class FinishReason { kStop, kLength, kCancelled, kError };

/// "stop", "length", "cancelled" or "error" (OpenAI's finish_reason for the first two).
inline const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

/// One generated token, with its log-probability under the model (log-softmax of
/// the raw logits, in double) when the job asked for them.
struct TokenEvent {
  int token = 0;
  int index = 0;                              ///< 0 for the first generated token
  double logprob = 0;                         ///< valid when the job's top_logprobs >= 0
  std::vector<std::pair<int, double>> top;    ///< the top_logprobs best (id, log-probability), best first
};

/// Where a request's results go; every member optional. Called on the step() thread.
struct JobCallbacks {
  /// The request left the queue: its prompt length and how many of its tokens came from the prefix cache.
  std::function<void(int prompt_tokens, int cached_tokens)> on_start;
  std::function<void(const TokenEvent&)> on_token;
  /// The request ended (after its last on_token); generated = tokens produced.
  std::function<void(FinishReason, int generated)> on_finish;
};

/// Counters the scheduler keeps (monotonic since construction), and its state now.
struct SchedulerStats {
  std::uint64_t tokens_prefilled = 0;   ///< prompt tokens run through the model
  std::uint64_t tokens_cached = 0;      ///< prompt tokens taken from the prefix cache instead
  std::uint64_t tokens_generated = 0;
  std::uint64_t steps = 0;              ///< forwards run
  int running = 0;                      ///< requests admitted and not finished
  int queued = 0;                       ///< requests waiting for admission
  long blocks_total = 0;                ///< pool blocks
  long blocks_in_use = 0;               ///< pool blocks held by anything (running or prefix cache)
  long blocks_running = 0;              ///< distinct pool blocks held by running requests
  int prefix_entries = 0;               ///< sequences in the prefix cache
};

/// Checks a job against a context of `ctx` positions and a vocabulary of
/// `vocab_size`: throws RequestError 400 for an empty prompt, an id outside
/// [0, vocab_size), a prompt that leaves no room for one generated token (naming
/// both lengths) or max_tokens < 1; ConfigError for bad sampler settings.
inline void check_job(const ScheduledJob& job, int ctx, int vocab_size) {
  if (job.prompt.empty()) throw bad_request("prompt", "invalid_value", "the prompt has no tokens");
  for (std::size_t i = 0; i < job.prompt.size(); ++i)
    if (job.prompt[i] < 0 || job.prompt[i] >= vocab_size)
      throw bad_request("prompt", "invalid_value",
                        detail::msg("token id ", job.prompt[i], " at index ", i, " is outside the vocabulary [0, ",
                                    vocab_size, ")"));
  if (static_cast<long>(job.prompt.size()) >= ctx)
    throw bad_request("prompt", "context_length_exceeded",
                      detail::msg("the prompt has ", job.prompt.size(), " tokens but the context holds ", ctx,
                                  " positions (at most ", ctx - 1,
                                  " prompt tokens leave room for one generated token; --ctx-size)"));
  if (job.max_tokens < 1)
    throw bad_request("max_tokens", "invalid_value", detail::msg("max_tokens = ", job.max_tokens, " must be >= 1"));
  job.sampler.validate();
}

template <class S = float>
class Scheduler {
 public:
  using Pool = BlockPool<float, S>;
  using Seq = PagedSequence<float, S>;
  using Clock = std::chrono::steady_clock;

  /// Test hook: every logits row a step produces, with the request id and position.
  std::function<void(long id, int pos, const float* logits, int vocab_size)> on_logits;

  /// `model` must outlive the scheduler; its config's max_seq_len is the context of
  /// each request. Throws ConfigError for bad options, or when the pool
  /// (options.n_blocks, default default_cache_blocks()) cannot hold one whole context;
  /// std::bad_alloc when the memory is not there.
  Scheduler(Transformer<float>& model, SchedulerOptions options) : model_(&model), opt_(options) {
    opt_.validate();
    const int ctx = model.config().max_seq_len;
    if (opt_.n_blocks == 0) {
      const long d = default_cache_blocks(ctx, opt_.n_parallel, opt_.block_size);
      if (d > (1L << 30)) throw ConfigError(detail::msg("the default cache of ", d, " blocks is too large; give n_blocks"));
      opt_.n_blocks = static_cast<int>(d);
    }
    if (opt_.max_prefix_entries == 0) opt_.max_prefix_entries = 4 * opt_.n_parallel;
    const int block_size = std::min(opt_.block_size, (ctx + 15) / 16 * 16);
    opt_.block_size = block_size;
    const long one = reservation_blocks(ctx);
    if (opt_.n_blocks < one)
      throw ConfigError(detail::msg("cache of ", opt_.n_blocks, " blocks of ", block_size,
                                    " tokens cannot hold one request of the whole context (", ctx, " positions need ",
                                    one, " blocks); raise --cache-blocks or lower --ctx-size"));
    pool_ = std::make_unique<Pool>(model.config(), opt_.n_blocks, block_size);
    model.reserve(opt_.max_rows_per_step, false);
  }

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler() {
    running_.clear();  // sequences before their pool
    queue_.clear();
    prefix_.clear();
  }

  const SchedulerOptions& options() const { return opt_; }
  int context() const { return model_->config().max_seq_len; }  ///< positions per request
  int vocab_size() const { return model_->config().vocab_size; }
  const Pool& pool() const { return *pool_; }

  /// Queues a request under the caller's id (unique among live requests); it starts
  /// at a later step(). Throws RequestError 400 for an empty prompt, an id outside
  /// [0, vocab_size) or a prompt that leaves no room to generate in the context (both
  /// lengths named), 503 when max_queue requests already wait; ConfigError for bad
  /// sampler settings. Nothing is queued on a throw.
  void submit(long id, ScheduledJob job, JobCallbacks callbacks = {}) {
    const int ctx = context();
    const int V = vocab_size();
    check_job(job, ctx, V);
    if (static_cast<int>(queue_.size()) >= opt_.max_queue)
      throw RequestError(503, "server_error", "", "queue_full",
                         detail::msg("the server is busy: ", queue_.size(), " requests wait (the limit is ",
                                     opt_.max_queue, ", --max-queue); retry later"));
    auto r = std::make_unique<Request>(job.sampler);
    r->id = id;
    r->job = std::move(job);
    r->callbacks = std::move(callbacks);
    r->submitted = Clock::now();
    queue_.push_back(std::move(r));
  }

  /// Ends request `id`: a queued one leaves the queue, a running one is removed and
  /// its blocks freed (it is not kept in the prefix cache). on_finish(kCancelled)
  /// is called. Returns false (nothing changed) for an id not live. Never throws.
  bool cancel(long id) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if ((*it)->id == id) {
        auto r = std::move(*it);
        queue_.erase(it);
        if (r->callbacks.on_finish) r->callbacks.on_finish(FinishReason::kCancelled, 0);
        return true;
      }
    for (auto it = running_.begin(); it != running_.end(); ++it)
      if ((*it)->id == id) {
        auto r = std::move(*it);
        running_.erase(it);
        if (r->callbacks.on_finish) r->callbacks.on_finish(FinishReason::kCancelled, r->generated);
        return true;
      }
    return false;
  }

  /// Admits what fits, then runs one forward over every running request and
  /// delivers its tokens. Returns false when there was nothing to do (no request
  /// running or waiting). Throws what the forward throws for a reason other than
  /// the pool (nothing changed then).
  bool step() {
    admit();
    if (running_.empty()) return !queue_.empty();
    build_rows();
    LogitsView<float> logits = forward_evicting();
    ++stats_.steps;
    const int V = vocab_size();
    long j = 0;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      Request& q = *owners_[static_cast<std::size_t>(rows_[r].seq)];
      q.fed += 1;
      if (q.fed <= q.prompt_len) ++stats_.tokens_prefilled;
      if (!rows_[r].logits) continue;
      const float* row = logits.row(j++).data();
      if (on_logits) on_logits(q.id, rows_[r].pos, row, V);
      deliver(q, row, V);
    }
    // Finished requests leave; their sequences go to the prefix cache.
    for (auto it = running_.begin(); it != running_.end();) {
      if (!(*it)->finished) {
        ++it;
        continue;
      }
      auto q = std::move(*it);
      it = running_.erase(it);
      if (q->callbacks.on_finish) q->callbacks.on_finish(q->finish, q->generated);
      keep_prefix(std::move(q));
    }
    return true;
  }

  /// Ends every queued and running request with on_finish(why) and frees their
  /// blocks (after a step threw: the server keeps serving new requests). Never throws.
  void abort_all(FinishReason why) {
    auto q = std::move(queue_);
    queue_.clear();
    auto r = std::move(running_);
    running_.clear();
    for (auto& x : q)
      if (x->callbacks.on_finish) x->callbacks.on_finish(why, 0);
    for (auto& x : r)
      if (x->callbacks.on_finish) x->callbacks.on_finish(why, x->generated);
  }

  /// Steps until no request runs or waits.
  void run() {
    while (step()) {}
  }

  /// Drops every prefix-cache entry (their blocks return to the pool unless a
  /// running request shares them). Never throws.
  void clear_prefix_cache() { prefix_.clear(); }

  /// Counters and the state now. O(running requests' blocks + pool blocks).
  SchedulerStats stats() const {
    SchedulerStats s = stats_;
    s.running = static_cast<int>(running_.size());
    s.queued = static_cast<int>(queue_.size());
    s.blocks_total = pool_->n_blocks();
    s.blocks_in_use = pool_->blocks_in_use();
    std::vector<char> seen(static_cast<std::size_t>(pool_->n_blocks()), 0);
    for (const auto& r : running_)
      for (int b : r->seq->block_table())
        if (b >= 0 && !seen[static_cast<std::size_t>(b)]) {
          seen[static_cast<std::size_t>(b)] = 1;
          ++s.blocks_running;
        }
    s.prefix_entries = static_cast<int>(prefix_.size());
    return s;
  }

 private:
  struct Request {
    explicit Request(const SamplerConfig& sc) : sampler(sc) {}
    long id = 0;
    ScheduledJob job;
    JobCallbacks callbacks;
    Clock::time_point submitted;
    std::unique_ptr<Seq> seq;
    std::vector<int> history;  // prompt then generated tokens
    int prompt_len = 0;
    int fed = 0;               // tokens of history in the cache (seq->length())
    int generated = 0;
    int reserved = 0;          // blocks reserved at admission
    bool finished = false;
    FinishReason finish = FinishReason::kLength;
    Sampler sampler;
  };
  struct PrefixEntry {
    std::vector<int> tokens;   // the tokens whose K and V the sequence holds
    std::unique_ptr<Seq> seq;
  };

  long reservation_blocks(long tokens) const {
    return (tokens + opt_.block_size - 1) / opt_.block_size + 1;
  }

  long reserved_total() const {
    long n = 0;
    for (const auto& r : running_) n += r->reserved;
    return n;
  }

  static std::size_t common_prefix(const std::vector<int>& a, std::size_t a_len, const std::vector<int>& b) {
    const std::size_t n = std::min(a_len, b.size());
    std::size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return i;
  }

  // Queue -> running, in arrival order, while slots and block reservations allow.
  void admit() {
    while (!queue_.empty() && static_cast<int>(running_.size()) < opt_.n_parallel) {
      Request& r = *queue_.front();
      const long total = std::min<long>(context(), static_cast<long>(r.job.prompt.size()) + r.job.max_tokens);
      const long need = reservation_blocks(total);
      if (reserved_total() + need > pool_->n_blocks()) break;  // wait for running requests to finish
      auto q = std::move(queue_.front());
      queue_.pop_front();
      q->reserved = static_cast<int>(need);
      q->history = q->job.prompt;
      q->prompt_len = static_cast<int>(q->history.size());
      start_sequence(*q);
      if (q->callbacks.on_start) q->callbacks.on_start(q->prompt_len, q->fed);
      running_.push_back(std::move(q));
    }
  }

  // Gives q a sequence: a fork of the longest shared prefix (at most prompt - 1
  // tokens, so that at least one row yields logits), or an empty one.
  void start_sequence(Request& q) {
    const std::size_t cap = q.history.size() - 1;
    std::size_t best = 0;
    const Seq* from = nullptr;
    typename std::list<PrefixEntry>::iterator hit = prefix_.end();
    if (opt_.prefix_cache) {
      for (auto it = prefix_.begin(); it != prefix_.end(); ++it) {
        const std::size_t l = std::min(cap, common_prefix(it->tokens, it->tokens.size(), q.history));
        if (l > best) {
          best = l;
          from = it->seq.get();
          hit = it;
        }
      }
      for (const auto& r : running_) {
        const std::size_t l = std::min(cap, common_prefix(r->history, static_cast<std::size_t>(r->fed), q.history));
        if (l > best) {
          best = l;
          from = r->seq.get();
          hit = prefix_.end();
        }
      }
    }
    if (from) {
      q.seq = std::make_unique<Seq>(from->fork());
      q.seq->truncate(static_cast<int>(best));
      q.fed = static_cast<int>(best);
      stats_.tokens_cached += best;
      if (hit != prefix_.end()) prefix_.splice(prefix_.begin(), prefix_, hit);  // most recently used first
    } else {
      q.seq = std::make_unique<Seq>(*pool_);
      q.fed = 0;
    }
  }

  // Rows for this step: decode rows (one unfed token) first, then prompt chunks.
  void build_rows() {
    rows_.clear();
    caches_.clear();
    owners_.clear();
    int budget = opt_.max_rows_per_step;
    auto add = [this](Request& q, int n) {
      const int seq_index = static_cast<int>(caches_.size());
      caches_.push_back(q.seq.get());
      owners_.push_back(&q);
      for (int i = 0; i < n; ++i) {
        const int idx = q.fed + i;
        rows_.push_back(Row{q.history[static_cast<std::size_t>(idx)], seq_index, idx,
                            idx == static_cast<int>(q.history.size()) - 1});
      }
    };
    for (auto& q : running_)
      if (unfed(*q) == 1 && budget > 0) {
        add(*q, 1);
        --budget;
      }
    for (auto& q : running_) {
      if (unfed(*q) <= 1 || budget <= 0) continue;
      const int n = std::min({unfed(*q), opt_.prefill_chunk, budget});
      add(*q, n);
      budget -= n;
    }
  }

  static int unfed(const Request& q) { return static_cast<int>(q.history.size()) - q.fed; }

  // The forward; when the pool is short of blocks, drops prefix-cache entries
  // (least recently used first) and tries again. The reservations make the
  // running requests fit once the prefix cache is empty.
  LogitsView<float> forward_evicting() {
    for (;;) {
      try {
        return model_->forward(rows_.data(), static_cast<long>(rows_.size()), caches_.data(),
                               static_cast<long>(caches_.size()));
      } catch (const OutOfBlocksError&) {
        if (prefix_.empty()) throw;
        prefix_.pop_back();
      }
    }
  }

  // Samples q's next token from its logits row and records why it may stop.
  void deliver(Request& q, const float* row, int V) {
    TokenEvent ev;
    for (int i = 0; i < V; ++i)
      if (!std::isfinite(row[i]))
        throw NumericError(detail::msg("request ", q.id, ": logit ", i, " at position ", q.history.size() - 1,
                                       " is not finite"));
    ev.token = q.sampler.sample(row, V, q.history);
    ev.index = q.generated;
    if (q.job.top_logprobs >= 0) log_probabilities(row, V, ev, q.job.top_logprobs);
    q.history.push_back(ev.token);
    q.generated += 1;
    ++stats_.tokens_generated;
    if (q.callbacks.on_token) q.callbacks.on_token(ev);
    if (is_stop_token(q.job.stop_ids, ev.token)) {
      q.finished = true;
      q.finish = FinishReason::kStop;
    } else if (q.generated >= q.job.max_tokens || static_cast<int>(q.history.size()) >= context()) {
      q.finished = true;
      q.finish = FinishReason::kLength;
    }
  }

  // log-softmax of the raw logits, in double, for the chosen token and the k best.
  void log_probabilities(const float* row, int V, TokenEvent& ev, int k) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(row[i]));
    double sum = 0;
    for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
    const double lse = mx + std::log(sum);
    ev.logprob = static_cast<double>(row[ev.token]) - lse;
    if (k <= 0) return;
    order_.resize(static_cast<std::size_t>(V));
    for (int i = 0; i < V; ++i) order_[static_cast<std::size_t>(i)] = i;
    const int n = std::min(k, V);
    std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), [row](int a, int b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int i = 0; i < n; ++i) {
      const int t = order_[static_cast<std::size_t>(i)];
      ev.top.emplace_back(t, static_cast<double>(row[t]) - lse);
    }
  }

  // A finished request's sequence joins the prefix cache (most recent first);
  // an entry it extends is dropped, and the oldest beyond max_prefix_entries.
  void keep_prefix(std::unique_ptr<Request> q) {
    if (!opt_.prefix_cache || q->fed == 0) return;
    PrefixEntry e;
    e.tokens.assign(q->history.begin(), q->history.begin() + q->fed);
    e.seq = std::move(q->seq);
    for (auto it = prefix_.begin(); it != prefix_.end();) {
      if (it->tokens.size() <= e.tokens.size() && common_prefix(it->tokens, it->tokens.size(), e.tokens) == it->tokens.size())
        it = prefix_.erase(it);
      else
        ++it;
    }
    prefix_.push_front(std::move(e));
    while (static_cast<int>(prefix_.size()) > opt_.max_prefix_entries) prefix_.pop_back();
  }

  Transformer<float>* model_;
  SchedulerOptions opt_;
  std::unique_ptr<Pool> pool_;
  std::deque<std::unique_ptr<Request>> queue_;
  std::vector<std::unique_ptr<Request>> running_;
  std::list<PrefixEntry> prefix_;  // most recently used first
  SchedulerStats stats_;
  std::vector<Row> rows_;
  std::vector<Seq*> caches_;
  std::vector<Request*> owners_;
  std::vector<int> order_;
};

}  // namespace kvd
