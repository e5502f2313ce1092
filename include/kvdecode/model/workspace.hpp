// Rows and the Workspace. Every forward pass in kvdecode is one call over a
// list of rows: a row is a token, the sequence (cache) it belongs to and its
// position there. Prefill is many rows of one sequence, a decode step is one
// row, batched decode is one row per sequence, and chunked prefill alongside
// decode is a mix. The Workspace holds every activation buffer, sized for the
// largest number of rows seen so far; later calls only change the row count,
// so a decode step allocates nothing.
#pragma once

#include <vector>

#include "kvdecode/core/config.hpp"
#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/model/ops.hpp"

namespace kvd {

/// One position to run through the model.
struct Row {
  int token = 0;        ///< token id in [0, vocab_size)
  int seq = 0;          ///< index of the sequence's cache in the caches array
  int pos = 0;          ///< position in that sequence; rows of a sequence are consecutive from its cache length
  bool logits = false;  ///< whether to compute this row's logits
};

/// Activation buffers for up to rows() rows. Row strides are padded to 16 so
/// the kernels may write whole vectors. Not thread-safe: one per model.
template <class T>
struct Workspace {
  long ld_d = 0, ld_qkv = 0, ld_q = 0, ld_ff2 = 0, ld_ff = 0, ld_v = 0, ld_s = 0, heads = 0;
  long rows = 0, logit_rows = 0, score_threads = 0;
  long ffn_k = 1, n_experts = 0, ld_e = 0;  // FFN rows per token (K of a mixture of experts), E, router stride
  detail::AlignedBuffer<T> x;       // (rows, ld_d)    residual stream
  detail::AlignedBuffer<T> xn;      // (rows, ld_d)    normalised input of a sub-layer
  detail::AlignedBuffer<T> qkv;     // (rows, ld_qkv)  q | k | v
  detail::AlignedBuffer<T> att;     // (rows, ld_q)    attention output, all heads
  detail::AlignedBuffer<T> proj;    // (rows, ld_d)    output projection of a sub-layer
  detail::AlignedBuffer<T> h13;     // (rows * ffn_k, ld_ff2)  w1 x | w3 x (an expert's, per slot)
  detail::AlignedBuffer<T> hmid;    // (rows * ffn_k, ld_ff)   silu(w1 x) * w3 x
  // A mixture of experts (model/moe.hpp); empty otherwise. A slot is one (row, rank)
  // pair, the slots of one expert consecutive.
  detail::AlignedBuffer<T> router;  // (rows, ld_e)          router logits
  detail::AlignedBuffer<T> xg;      // (rows * ffn_k, ld_d)  each slot's input row, grouped by expert
  detail::AlignedBuffer<T> ye;      // (rows * ffn_k, ld_d)  each slot's expert output
  std::vector<int> route_expert;    // (rows, ffn_k) chosen experts by rank
  std::vector<T> route_weight;      // (rows, ffn_k) their weights
  std::vector<int> route_slot;      // (rows, ffn_k) their slots
  std::vector<int> expert_start;    // (E + 1) first slot of each expert
  std::vector<int> expert_next;     // (E) next free slot of each expert while grouping
  std::vector<T> route_scratch;     // (E) one row's probabilities
  detail::AlignedBuffer<T> xl;      // (logit_rows, ld_d) final-normed rows that need logits
  detail::AlignedBuffer<T> logits;  // (logit_rows, ld_v)
  static constexpr int kScoreRows = 8;  // score rows per thread: up to 8 rows (prefill) or 8 heads (decode)
  detail::AlignedBuffer<T> scores;  // (score_threads, kScoreRows, ld_s) attention scores
  struct AttentionItem {
    int row;   // first row
    int rows;  // consecutive rows of one sequence (1 = one row, `heads` query heads of one KV head)
    int head;  // first query head
    int heads; // query heads (1 when rows > 1)
  };
  std::vector<AttentionItem> attention_items;  // the current call's attention work list
  std::vector<int> seq_rows;        // rows per sequence in the current call
  /// A block's last residual add still to do: x += proj (see TransformerBlock::forward).
  bool pending_residual = false;
  /// With a pending add of a block with post norms (Gemma 3): the FFN post norm's
  /// weights (D), applied to proj's row before the add; null otherwise.
  const T* pending_norm = nullptr;
  T pending_norm_eps = T(0);

  /// The pending residual add on rows [r0, r1) of width d, on the calling thread:
  /// proj's row normed in place first when pending_norm is set, then x += proj.
  void add_pending_rows(long r0, long r1, long d) {
    T* xs = x.data();
    T* ps = proj.data();
    for (long m = r0; m < r1; ++m) {
      if (pending_norm) rmsnorm_row(ps + m * ld_d, pending_norm, d, pending_norm_eps, ps + m * ld_d);
      for (long i = 0; i < d; ++i) xs[m * ld_d + i] = xs[m * ld_d + i] + ps[m * ld_d + i];
    }
  }

  /// Does the pending residual add, if any, on M rows of width d.
  void finish_residual(long M, long d) {
    if (!pending_residual) return;
    pending_residual = false;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (M * d >= detail::kParallelElements)
#endif
    for (long m = 0; m < M; ++m) add_pending_rows(m, m + 1, d);
    pending_norm = nullptr;
  }

  explicit Workspace(const ModelConfig& c = ModelConfig()) {
    using detail::round_up_lanes;
    ld_d = round_up_lanes(c.d_model);
    // q, k and v may each start a fresh panel when their storage types differ
    // (PackedMatrix segments), so leave room for each to be padded to 16.
    ld_qkv = round_up_lanes(c.q_dim()) + 2 * round_up_lanes(c.kv_dim());
    ld_q = round_up_lanes(c.q_dim());
    ld_ff2 = 2 * round_up_lanes(c.hidden_dim);  // gate | up, each possibly padded (see ld_qkv)
    ld_ff = round_up_lanes(c.hidden_dim);
    ld_v = round_up_lanes(c.vocab_size);
    ld_s = round_up_lanes(c.max_seq_len);
    heads = c.n_heads;
    ffn_k = c.ffn_rows_per_token();
    n_experts = c.n_experts;
    ld_e = round_up_lanes(c.n_experts);
    expert_start.resize(static_cast<std::size_t>(n_experts + 1));
    expert_next.resize(static_cast<std::size_t>(n_experts));
    route_scratch.resize(static_cast<std::size_t>(n_experts));
  }

  /// Grows (never shrinks) to hold n rows, n_logits logit rows and n_seqs sequences.
  /// May throw std::bad_alloc; call before changing any cache.
  void reserve(long n, long n_logits, long n_seqs) {
    if (n > rows) {
      x.resize(n * ld_d); xn.resize(n * ld_d); qkv.resize(n * ld_qkv); att.resize(n * ld_q);
      proj.resize(n * ld_d); h13.resize(n * ffn_k * ld_ff2); hmid.resize(n * ffn_k * ld_ff);
      if (n_experts > 0) {
        router.resize(n * ld_e); xg.resize(n * ffn_k * ld_d); ye.resize(n * ffn_k * ld_d);
        route_expert.resize(static_cast<std::size_t>(n * ffn_k)); route_weight.resize(static_cast<std::size_t>(n * ffn_k));
        route_slot.resize(static_cast<std::size_t>(n * ffn_k));
      }
      rows = n;
    }
    if (n_logits > logit_rows) {
      xl.resize(n_logits * ld_d); logits.resize(n_logits * ld_v);
      logit_rows = n_logits;
    }
    const long threads = num_threads();
    if (threads > score_threads) { scores.resize(threads * kScoreRows * ld_s); score_threads = threads; }
    if (static_cast<long>(seq_rows.size()) < n_seqs) seq_rows.resize(n_seqs);
    // at most one item per (row, head): never reallocated within a call of n rows
    attention_items.reserve(static_cast<std::size_t>(n * heads));
  }
};

}  // namespace kvd
