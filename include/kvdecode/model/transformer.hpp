// Transformer: token embedding, n_layers blocks, final RMSNorm, classifier.
//
// Every cached path is one call, forward(rows, caches): prefill is many rows
// of one sequence, decode_step one row, decode_batch one row per sequence.
// Because every kernel computes a row from that row's data alone, by a fixed
// sequence of operations (see dense_kernels.hpp and attention.hpp), a row's logits
// do not depend on which rows travel with it, so prefill == decode ==
// chunked prefill == batched decode, bit for bit. forward_reference() is the
// separate cache-free path: whole matrices and the square causal mask.
//
// A Transformer is one caller's context on a Model (model.hpp): the packed weights,
// immutable and shared by shared_ptr, plus its own workspace. Calls on one
// Transformer must not overlap; any number of Transformers on any threads may
// share one Model, and each gets the bits it would get alone.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include <Eigen/Core>

#include "kvdecode/model/block.hpp"
#include "kvdecode/core/config.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/cache/cache_interface.hpp"
#include "kvdecode/model/model.hpp"
#include "kvdecode/weights/model_weights.hpp"
#include "kvdecode/model/workspace.hpp"

namespace kvd {

namespace detail {
/// Most rows one call may append to a cache: cache.max_append() where the cache
/// has one (a sliding-window ring), otherwise unlimited.
template <class Cache>
auto max_append_of(const Cache& c, int) -> decltype(static_cast<long>(c.max_append())) { return c.max_append(); }
template <class Cache>
long max_append_of(const Cache&, long) { return std::numeric_limits<long>::max(); }
template <class Cache>
long max_append_of(const Cache& c) { return max_append_of(c, 0); }
}  // namespace detail

/// Rows of logits inside the model's workspace: (rows, vocab_size) with a padded
/// row stride. Valid until the next call on the same Transformer.
template <class T>
using LogitsView = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;

template <class T = float>
class Transformer {
 public:
  using Scalar = T;

  /// Validates and packs the weights into a Model of its own. Throws ConfigError if
  /// weights.validate() fails.
  explicit Transformer(ModelWeights<T> weights) {
    auto own = std::make_shared<Model<T>>(std::move(weights));
    own_ = own.get();
    attach(std::move(own));
  }

  /// A context on a packed model that other Transformers may share: the weights
  /// are not copied. Throws ArgumentError if `model` is null.
  explicit Transformer(std::shared_ptr<const Model<T>> model) {
    if (!model) throw ArgumentError("Transformer: the model is null");
    attach(std::move(model));
  }

  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;
  Transformer(Transformer&&) = default;
  Transformer& operator=(Transformer&&) = default;

  /// The packed weights, to share with other Transformers: Transformer t2(t1.shared_model()).
  std::shared_ptr<const Model<T>> shared_model() const { return model_; }
  const Model<T>& model() const { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  const std::vector<TransformerBlock<T>>& blocks() const { return model_->blocks(); }
  const PackedMatrix<T>& classifier() const { return model_->classifier(); }

  /// The model's numerics mode (Model::set_numerics). Call it between forwards, not
  /// during one. Throws ConfigError (nothing changed) if the model is shared, or was
  /// built elsewhere: it would change every other user's results; set it on the
  /// Model before sharing it.
  void set_numerics(Numerics n) {
    if (n == numerics()) return;
    if (!own_ || model_.use_count() > 1)
      throw ConfigError(detail::msg("set_numerics(", numerics_name(n), "): this Transformer shares its model (",
                                    model_.use_count(), " owner(s)); set the numerics on the Model before sharing it"));
    own_->set_numerics(n);
  }
  Numerics numerics() const { return model_->numerics(); }
  /// set_numerics(on ? kFast : kExact), with its errors.
  void set_fast_matmul(bool on) { set_numerics(on ? Numerics::kFast : Numerics::kExact); }
  bool fast_matmul() const { return model_->fast_matmul(); }
  const WeightMatrix& embedding() const { return model_->embedding(); }  ///< (V, D)

  /// Bytes of weights a decode step reads (Model::weight_bytes_per_token()).
  std::uint64_t weight_bytes_per_token() const { return model_->weight_bytes_per_token(); }

  /// Multiply-adds performed by the last call (projections, attention, classifier).
  std::uint64_t last_macs() const { return last_macs_; }

  /// Pre-sizes the workspace for `n_rows` rows (all with logits if `all_logits`)
  /// so later calls up to that size allocate nothing.
  void reserve(long n_rows, bool all_logits = false) { ws_.reserve(n_rows, all_logits ? n_rows : 1, n_rows); }

  /// The general cached forward: rows (each a token, a cache index and a position)
  /// through the model, appending every row's K and V to its cache.
  /// Preconditions checked before anything changes: M >= 1; every token in
  /// [0, vocab_size); every row's seq in [0, n_caches); the caches match this
  /// model's shape; the rows of each sequence are at consecutive positions starting
  /// at that cache's length(), and fit in its capacity.
  /// Throws TokenError, CacheMismatchError or CacheFullError (every cache unchanged).
  /// Returns the logits of the rows with `logits` set, in row order.
  template <class Cache>
  LogitsView<T> forward(const Row* rows, long M, Cache* const* caches, long n_caches) {
    static_assert(detail::check_cache_interface<Cache, T>(), "see cache_interface.hpp");
    long n_logits = validate_rows(rows, M, caches, n_caches);
    long prepared = 0;  // make room in every cache, or in none (a paged pool may run out of blocks)
    try {
      for (; prepared < n_caches; ++prepared) caches[prepared]->prepare_append(ws_.seq_rows[prepared]);
    } catch (...) {
      for (long s = 0; s < prepared; ++s) caches[s]->cancel_append(ws_.seq_rows[s]);
      throw;
    }
    const ModelConfig& cfg = model_->config();
    T* x = ws_.x.data();
    {
      detail::PhaseScope ps(detail::Phase::kEmbed);
      for (long m = 0; m < M; ++m) model_->embed(rows[m].token, x + m * ws_.ld_d);
    }
    std::uint64_t macs = 0;
    ws_.pending_residual = false;
    for (const auto& blk : model_->blocks()) macs += blk.forward(rows, M, caches, ws_);
    {
      detail::PhaseScope ps(detail::Phase::kResidual);
      ws_.finish_residual(M, cfg.d_model);
    }
    for (long s = 0; s < n_caches; ++s) caches[s]->commit_append(ws_.seq_rows[s]);
    {
      detail::PhaseScope ps(detail::Phase::kNorm);
      long j = 0;
      for (long m = 0; m < M; ++m)
        if (rows[m].logits) {
          model_->final_norm().apply(x + m * ws_.ld_d, ws_.ld_d, 1, ws_.xl.data() + j * ws_.ld_d, ws_.ld_d);
          ++j;
        }
    }
    {
      detail::PhaseScope ps(detail::Phase::kClassifier);
      matmul(ws_.xl.data(), ws_.ld_d, n_logits, model_->classifier(), ws_.logits.data(), ws_.ld_v);
    }
    last_macs_ = macs + static_cast<std::uint64_t>(n_logits) * cfg.vocab_size * cfg.d_model;
    return LogitsView<T>(ws_.logits.data(), n_logits, cfg.vocab_size, Eigen::OuterStride<>(ws_.ld_v));
  }

  /// Runs tokens (positions cache.length() ..) through the model in one batched
  /// pass and appends their K and V; works on a non-empty cache (chunked prefill).
  /// Returns the last position's logits (1, V), or every position's (n, V) if all_logits.
  /// Throws TokenError (empty or out-of-range tokens), CacheMismatchError or
  /// CacheFullError; the cache is then unchanged.
  template <class Cache>
  LogitsView<T> prefill(const std::vector<int>& tokens, Cache& cache, bool all_logits = false) {
    if (tokens.empty()) throw TokenError("prefill needs at least one token; the prompt is empty");
    check_compatible(cache);
    const long n = static_cast<long>(tokens.size());
    const long chunk = detail::max_append_of(cache);
    if (n <= chunk) return prefill_chunk(tokens.data(), n, cache, all_logits);
    // A sliding-window cache takes at most `chunk` rows per call. Splitting is exact
    // (a row never depends on the rows it travels with); check everything first so
    // that a failure leaves the cache unchanged.
    for (long i = 0; i < n; ++i) check_token(tokens[i], i);
    if (n > cache.capacity() - cache.length())
      throw CacheFullError(detail::msg("KV cache full: appending ", n, " position(s) to ", cache.length(),
                                       " would exceed its capacity of ", cache.capacity()));
    const long n_out = all_logits ? n : 1;
    const ModelConfig& cfg = model_->config();
    prefill_logits_.reserve(static_cast<std::size_t>(n_out * ws_.ld_v));
    for (long start = 0; start < n; start += chunk) {
      const long len = std::min(chunk, n - start);
      auto rows = prefill_chunk(tokens.data() + start, len, cache, all_logits);
      const long dst = all_logits ? start : 0;
      for (long r = 0; r < rows.rows(); ++r)
        std::copy(rows.row(r).data(), rows.row(r).data() + cfg.vocab_size, prefill_logits_.data() + (dst + r) * ws_.ld_v);
    }
    return LogitsView<T>(prefill_logits_.data(), n_out, cfg.vocab_size, Eigen::OuterStride<>(ws_.ld_v));
  }

  /// One decode step: embeds `token` at position cache.length(), appends its K and
  /// V, attends over the whole cache (no mask needed: it holds only the past and
  /// this token) and returns its logits (1, V). Allocates nothing.
  /// Throws TokenError, CacheMismatchError or CacheFullError; the cache is then unchanged.
  template <class Cache>
  LogitsView<T> decode_step(int token, Cache& cache) {
    check_compatible(cache);
    Row row{token, 0, cache.length(), true};
    Cache* c = &cache;
    return forward(&row, 1, &c, 1);
  }

  /// Decodes one token for each of several independent sequences in one step,
  /// reading the weights once for all of them. Row i of the result is
  /// bit-identical to decode_step(tokens[i], *caches[i]).
  /// Throws ArgumentError if the sizes differ or a cache appears twice, or as
  /// decode_step does; every cache is then unchanged.
  template <class Cache>
  LogitsView<T> decode_batch(const std::vector<int>& tokens, const std::vector<Cache*>& caches) {
    if (tokens.size() != caches.size())
      throw ArgumentError(detail::msg("decode_batch got ", tokens.size(), " tokens for ", caches.size(), " caches"));
    if (tokens.empty()) throw TokenError("decode_batch needs at least one sequence");
    for (std::size_t i = 0; i < caches.size(); ++i) {
      if (caches[i] == nullptr) throw ArgumentError(detail::msg("decode_batch: cache ", i, " is null"));
      check_compatible(*caches[i]);
      for (std::size_t j = 0; j < i; ++j)
        if (caches[j] == caches[i]) throw ArgumentError(detail::msg("decode_batch: caches ", j, " and ", i, " are the same object"));
    }
    rows_.resize(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) rows_[i] = Row{tokens[i], static_cast<int>(i), caches[i]->length(), true};
    return forward(rows_.data(), static_cast<long>(rows_.size()), caches.data(), static_cast<long>(caches.size()));
  }

  /// The cache-free reference: recomputes K and V for every position of tokens
  /// (positions 0..n-1) and forms the full square score matrix with the causal
  /// mask. K is rounded through S and V through SV as a KVCache<T, S, SV> would
  /// store them (q8_0 / q4_0: quantized per 32 values of each head, kv_cache.hpp, KVStore).
  /// Returns the logits of every position (n, V), or of the last one only (1, V)
  /// when all_logits is false (what a cache-free generation step needs).
  /// Throws TokenError for an empty sequence, an id outside [0, vocab_size) or
  /// more than max_seq_len tokens; ConfigError naming head_dim when a block type
  /// meets a head_dim that is not a multiple of 32.
  template <class S = T, class SV = S>
  RowMatrix<T> forward_reference(const std::vector<int>& tokens, bool all_logits = true) {
    if (tokens.empty()) throw TokenError("forward_reference needs at least one token; the sequence is empty");
    const ModelConfig& cfg = model_->config();
    if (static_cast<long>(tokens.size()) > cfg.max_seq_len)
      throw TokenError(detail::msg("sequence of ", tokens.size(), " tokens exceeds max_seq_len = ", cfg.max_seq_len));
    for (std::size_t i = 0; i < tokens.size(); ++i) check_token(tokens[i], static_cast<long>(i));
    const long n = static_cast<long>(tokens.size());
    RowMatrix<T> x(n, cfg.d_model);  // (n, D)
    for (long i = 0; i < n; ++i) model_->embed(tokens[i], x.data() + i * x.cols());
    for (const auto& blk : model_->blocks()) blk.template forward_reference<S, SV>(x);
    const long first = all_logits ? 0 : n - 1, n_out = n - first;
    model_->final_norm().apply(x.data() + first * x.cols(), x.cols(), n_out, x.data() + first * x.cols(), x.cols());
    RowMatrix<T> logits(n_out, model_->classifier().n_out_padded());
    matmul(x.data() + first * x.cols(), x.cols(), n_out, model_->classifier(), logits.data(), logits.cols());
    // multiply-adds: projections for all n rows, the full square score and value products
    const std::uint64_t proj = static_cast<std::uint64_t>(n) *
        (cfg.q_dim() + 2ull * cfg.kv_dim() + cfg.q_dim()) * cfg.d_model;
    const std::uint64_t mlp = static_cast<std::uint64_t>(n) * 3ull * cfg.hidden_dim * cfg.d_model;
    const std::uint64_t att = 2ull * n * n * cfg.n_heads * cfg.head_dim;
    last_macs_ = cfg.n_layers * (proj + mlp + att) + static_cast<std::uint64_t>(n_out) * cfg.vocab_size * cfg.d_model;
    return logits.leftCols(cfg.vocab_size);
  }

 private:
  void attach(std::shared_ptr<const Model<T>> model) {
    model_ = std::move(model);
    ws_ = Workspace<T>(model_->config());
    ws_.reserve(1, 1, 1);
  }

  // One forward over tokens[0..n) at the cache's next positions.
  template <class Cache>
  LogitsView<T> prefill_chunk(const int* tokens, long n, Cache& cache, bool all_logits) {
    rows_.resize(static_cast<std::size_t>(n));
    for (long i = 0; i < n; ++i)
      rows_[i] = Row{tokens[i], 0, cache.length() + static_cast<int>(i), all_logits || i + 1 == n};
    Cache* c = &cache;
    return forward(rows_.data(), n, &c, 1);
  }

  void check_token(int token, long index) const {
    const ModelConfig& cfg = model_->config();
    if (token < 0 || token >= cfg.vocab_size)
      throw TokenError(detail::msg("token id ", token, " at index ", index, " is outside the vocabulary [0, ",
                                   cfg.vocab_size, ")"));
  }

  template <class Cache>
  void check_compatible(const Cache& cache) const {
    const ModelConfig& cfg = model_->config();
    if (!(cache.shape() == CacheShape::of(cfg)))
      throw CacheMismatchError(detail::msg(
          "cache shape (layers ", cache.shape().n_layers, ", kv_heads ", cache.shape().n_kv_heads, ", head_dim ",
          cache.shape().head_dim, ", max_seq_len ", cache.shape().max_seq_len, ", sliding_window ",
          cache.shape().sliding_window, ", rotation ", kv_rotation_name(cache.shape().rotation), ", swa_pattern ",
          cache.shape().swa_pattern, ", local_window ", cache.shape().local_window,
          ") does not match the model (layers ", cfg.n_layers, ", kv_heads ", cfg.n_kv_heads, ", head_dim ",
          cfg.head_dim, ", max_seq_len ", cfg.max_seq_len, ", sliding_window ", cfg.sliding_window, ", rotation ",
          kv_rotation_name(cfg.kv_rotation), ", swa_pattern ", cfg.swa_pattern, ", local_window ", cfg.local_window, ")"));
  }

  // Checks every precondition of forward() and sizes the workspace; changes no cache.
  template <class Cache>
  long validate_rows(const Row* rows, long M, Cache* const* caches, long n_caches) {
    if (M < 1) throw TokenError("forward needs at least one row");
    ws_.reserve(M, 0, n_caches);
    std::fill(ws_.seq_rows.begin(), ws_.seq_rows.begin() + n_caches, 0);
    long n_logits = 0;
    for (long m = 0; m < M; ++m) {
      const Row& r = rows[m];
      check_token(r.token, m);
      if (r.seq < 0 || r.seq >= n_caches)
        throw ArgumentError(detail::msg("row ", m, " names sequence ", r.seq, ", outside [0, ", n_caches, ")"));
      check_compatible(*caches[r.seq]);
      const int expected = caches[r.seq]->length() + ws_.seq_rows[r.seq];
      if (r.pos != expected)
        throw ArgumentError(detail::msg("row ", m, " of sequence ", r.seq, " is at position ", r.pos,
                                        ", expected ", expected, " (rows of a sequence follow its cache length)"));
      ws_.seq_rows[r.seq] += 1;
      n_logits += r.logits ? 1 : 0;
    }
    for (long s = 0; s < n_caches; ++s) caches[s]->check_room(ws_.seq_rows[s]);
    ws_.reserve(M, n_logits, n_caches);
    return n_logits;
  }

  std::shared_ptr<const Model<T>> model_;
  Model<T>* own_ = nullptr;  // the model, when this Transformer built it (for set_numerics)
  Workspace<T> ws_;
  std::vector<Row> rows_;
  detail::AlignedBuffer<T> prefill_logits_;  // (n, ld_v) logits of a prefill split into chunks
  std::uint64_t last_macs_ = 0;
};

}  // namespace kvd
