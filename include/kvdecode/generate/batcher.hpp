// ContinuousBatcher: serving many sequences at once. Sequences join and leave
// between steps; one step() runs a single forward over a mix of rows: one row
// per decoding sequence, plus a chunk of prompt rows for each sequence still
// prefilling. The weights are read once for the whole step.
//
// Exactness: a row's logits depend only on its own token, position and
// sequence cache (see transformer.hpp), so every sequence's logits are
// bit-identical to decoding it alone, however the batch around it changes:
// mixed lengths, sequences joining mid-way, chunked prefill beside decode.
//
// The cache type is a template parameter: KVCache (one contiguous cache per
// sequence) or a paged sequence from paged_cache.hpp; a factory makes one per
// sequence.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvdecode/generate/generate.hpp"
#include "kvdecode/generate/sampler.hpp"
#include "kvdecode/model/transformer.hpp"

namespace kvd {

struct BatcherOptions {
  int max_rows_per_step = 256;  ///< rows in one forward (decode rows first, then prompt chunks)
  int prefill_chunk = 64;       ///< most prompt tokens of one sequence per step
  void validate() const {
    if (max_rows_per_step < 1)
      throw ConfigError(detail::msg("BatcherOptions.max_rows_per_step = ", max_rows_per_step, " must be >= 1"));
    if (prefill_chunk < 1) throw ConfigError(detail::msg("BatcherOptions.prefill_chunk = ", prefill_chunk, " must be >= 1"));
  }
};

/// Per-sequence generation settings.
struct SequenceOptions {
  int max_new_tokens = 32;
  std::vector<int> stop_tokens;
  SamplerConfig sampler;  ///< greedy by default
};

template <class T, class Cache>
class ContinuousBatcher {
 public:
  using SeqId = int;
  using CacheFactory = std::function<std::unique_ptr<Cache>()>;

  /// Called with each logits row a step produces: sequence, position, (vocab_size) values.
  std::function<void(SeqId, int pos, const T* logits, int vocab_size)> on_logits;
  /// Called with each token a sequence produces.
  std::function<void(SeqId, int token)> on_token;

  /// `model` must outlive the batcher. Throws ConfigError for bad options.
  ContinuousBatcher(Transformer<T>& model, CacheFactory make_cache, BatcherOptions options = {})
      : model_(&model), make_cache_(std::move(make_cache)), opt_(options) {
    opt_.validate();
  }

  /// Adds a sequence; it starts prefilling at the next step. Returns its id.
  /// Throws TokenError (empty prompt or an id outside [0, vocab_size)),
  /// CacheFullError (a prompt that leaves no room to generate), ConfigError
  /// (bad sampler settings) or what the cache factory throws; nothing changes then.
  SeqId add(std::vector<int> prompt, SequenceOptions options = {}) {
    const auto& c = model_->config();
    if (prompt.empty()) throw TokenError("a sequence needs a prompt of at least one token");
    for (std::size_t i = 0; i < prompt.size(); ++i)
      if (prompt[i] < 0 || prompt[i] >= c.vocab_size)
        throw TokenError(detail::msg("token id ", prompt[i], " at index ", i, " is outside the vocabulary [0, ",
                                     c.vocab_size, ")"));
    auto seq = std::make_unique<Sequence>(options.sampler);
    seq->cache = make_cache_();
    if (static_cast<long>(prompt.size()) >= seq->cache->capacity())
      throw CacheFullError(detail::msg("prompt of ", prompt.size(), " tokens leaves no room in a cache of ",
                                       seq->cache->capacity(), " positions"));
    seq->id = next_id_++;
    seq->history = std::move(prompt);
    seq->prompt_len = static_cast<int>(seq->history.size());
    seq->options = std::move(options);
    seqs_.push_back(std::move(seq));
    return seqs_.back()->id;
  }

  /// Removes a sequence (finished or not) and frees its cache. Throws ArgumentError for an unknown id.
  void remove(SeqId id) {
    for (auto it = seqs_.begin(); it != seqs_.end(); ++it)
      if ((*it)->id == id) { seqs_.erase(it); return; }
    throw ArgumentError(detail::msg("no sequence with id ", id));
  }

  /// Runs one forward over every active sequence. Returns false if none was active.
  /// Throws what the forward throws (e.g. OutOfBlocksError from a paged pool); no
  /// sequence or cache changes then, so the step can be retried after freeing room.
  bool step() {
    rows_.clear();
    caches_.clear();
    owners_.clear();
    int budget = opt_.max_rows_per_step;
    // Sequences with one token left to feed first (decode rows, or a prompt's last
    // token): one row each, which keeps decode latency low. Then prompt chunks.
    for (auto& s : seqs_)
      if (!s->finished && unfed(*s) == 1 && budget > 0) {
        add_rows(*s, 1);
        --budget;
      }
    for (auto& s : seqs_) {
      if (s->finished || unfed(*s) <= 1 || budget <= 0) continue;
      const long limit = std::min<long>(opt_.prefill_chunk, detail::max_append_of(*s->cache));
      const int n = static_cast<int>(std::min<long>({static_cast<long>(unfed(*s)), limit, static_cast<long>(budget)}));
      add_rows(*s, n);
      budget -= n;
    }
    if (rows_.empty()) return false;
    auto logits = model_->forward(rows_.data(), static_cast<long>(rows_.size()), caches_.data(),
                                  static_cast<long>(caches_.size()));
    // Success: now advance each sequence.
    long j = 0;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      Sequence& s = *owners_[static_cast<std::size_t>(rows_[r].seq)];
      s.fed += 1;
      if (!rows_[r].logits) continue;
      const T* row = logits.row(j++).data();
      const int V = model_->config().vocab_size;
      if (on_logits) on_logits(s.id, rows_[r].pos, row, V);
      const int token = s.sampler.sample(row, V, s.history);
      s.history.push_back(token);
      s.generated += 1;
      if (on_token) on_token(s.id, token);
      if (is_stop_token(s.options.stop_tokens, token)) finish(s, StopReason::kStopToken);
      if (!s.finished && s.generated >= s.options.max_new_tokens) finish(s, StopReason::kMaxTokens);
      if (!s.finished && s.cache->length() >= s.cache->capacity()) finish(s, StopReason::kContextFull);
    }
    return true;
  }

  /// Steps until every sequence has finished.
  void run() { while (step()) {} }

  bool finished(SeqId id) const { return find(id).finished; }
  StopReason stop_reason(SeqId id) const { return find(id).stop; }
  /// Tokens the sequence has generated so far.
  std::vector<int> generated(SeqId id) const {
    const Sequence& s = find(id);
    return std::vector<int>(s.history.begin() + s.prompt_len, s.history.end());
  }
  const Cache& cache(SeqId id) const { return *find(id).cache; }
  std::size_t size() const { return seqs_.size(); }  ///< sequences held (finished ones until removed)
  /// Rows in the last step's forward.
  std::size_t last_step_rows() const { return rows_.size(); }

 private:
  struct Sequence {
    explicit Sequence(const SamplerConfig& sc) : sampler(sc) {}
    SeqId id = 0;
    std::vector<int> history;  // prompt then generated tokens
    int prompt_len = 0;
    int fed = 0;               // tokens of history already in the cache
    int generated = 0;
    bool finished = false;
    StopReason stop = StopReason::kMaxTokens;
    SequenceOptions options;
    Sampler sampler;
    std::unique_ptr<Cache> cache;
  };

  // Appends rows for history[fed .. fed + n) of s; the last one wants logits if it
  // is the last known token (end of prompt, or a decode row).
  void add_rows(Sequence& s, int n) {
    const int seq_index = static_cast<int>(caches_.size());
    caches_.push_back(s.cache.get());
    owners_.push_back(&s);
    for (int i = 0; i < n; ++i) {
      const int idx = s.fed + i;
      rows_.push_back(Row{s.history[static_cast<std::size_t>(idx)], seq_index, s.cache->length() + i,
                          idx == static_cast<int>(s.history.size()) - 1});
    }
  }

  static int unfed(const Sequence& s) { return static_cast<int>(s.history.size()) - s.fed; }

  void finish(Sequence& s, StopReason why) {
    s.finished = true;
    s.stop = why;
  }

  const Sequence& find(SeqId id) const {
    for (const auto& s : seqs_)
      if (s->id == id) return *s;
    throw ArgumentError(detail::msg("no sequence with id ", id));
  }

  Transformer<T>* model_;
  CacheFactory make_cache_;
  BatcherOptions opt_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  SeqId next_id_ = 0;
  std::vector<Row> rows_;
  std::vector<Cache*> caches_;
  std::vector<Sequence*> owners_;
};

}  // namespace kvd
