// Attention with grouped-query heads: n_heads query heads share n_kv_heads
// key/value heads, query head h reading KV head h / (n_heads / n_kv_heads).
// n_kv_heads == n_heads is multi-head attention, n_kv_heads == 1 multi-query.
//
// Two implementations of the same maths, kept apart on purpose:
//  * forward() over rows and a cache: each row appends its k and v at its own
//    position, then attends its query over its own sequence's cache from the
//    first visible position up to and including its own. No mask is built:
//    positions after a row's own are simply not read. For a decode step that
//    is the whole cache.
//  * forward_reference(): no cache; K and V for every position, the full
//    square score matrix with the causal mask, masked entries set to -inf so
//    they get exactly zero weight.
//
// REDUCTION ORDER (identical in both, whatever the cache length or batch):
//   score[t] = (fma chain over d = 0..head_dim-1 of q[d] * k_t[d], from +0) / sqrt(attention_scalar)
//              (attention_scalar: head_dim, or Gemma's query_pre_attn_scalar; the square root rounded once)
//   m        = max over visible t            (exact in any order)
//   e[t]     = exp_(score[t] - m)
//   sum      = 16 lane sums keyed to t mod 16, each in increasing t, then a fixed tree
//   w[t]     = e[t] / sum
//              (with a sink s_h, gpt-oss: m = max(m, s_h), sum = tree + exp_(s_h - m))
//   out[d]   = fma chain over t in increasing order of w[t] * v_t[d], from +0
// The decode kernel computes 16 scores at once with the lanes keyed to
// positions, each lane its own chain over d, so the vector width never enters
// a sum. In the reference, masked entries add exact zeros after (or before)
// the visible ones, which change nothing.
//
// CACHE ROTATION (ModelConfig::kv_rotation, model/hadamard.hpp): after RoPE, each
// q and k head (and each v head with kKeysValues) is rotated by the normalised
// Walsh-Hadamard transform, in finish_row(), which every path calls; with rotated
// values each head's output is rotated back, by the same function, right after the
// weighted sum. Both are one fixed sequence of operations per head, so the paths
// still agree bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvdecode/core/config.hpp"
#include "kvdecode/model/attention_kernels.hpp"
#include "kvdecode/model/hadamard.hpp"
#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/model/ops.hpp"
#include "kvdecode/model/workspace.hpp"

namespace kvd {


/// One attention sub-layer in three steps, each used by every path:
///   project: q|k|v = W xn (+ bias), per-head RMSNorm of q and k (qwen3), RoPE
///            at each row's position — the cached forward and the reference
///            both call it, so they share every element-wise operation;
///   plan:    the work list (which rows and heads go to which kernel);
///   run:     the kernels over each row's own cache, then the output projection.
template <class T>
class Attention {
 public:
  Attention() = default;
  /// Packs the layer's wq|wk|wv and wo (each in its own storage type). `rope`
  /// must outlive this object.
  Attention(const ModelConfig& c, const LayerWeights<T>& w, int layer, const RoPE<T>* rope)
      : n_heads_(c.n_heads), n_kv_heads_(c.n_kv_heads), head_dim_(c.head_dim), d_model_(c.d_model),
        window_(c.layer_window(layer)), layer_(layer), score_div_(std::sqrt(static_cast<T>(c.attention_scalar()))), rotation_(c.kv_rotation), norm_eps_(static_cast<T>(c.norm_eps)), rope_(rope),
        wqkv_({&w.wq, &w.wk, &w.wv}), wo_({&w.wo}), q_norm_(w.q_norm), k_norm_(w.k_norm), sinks_(w.attn_sinks),
        out_bias_(w.bo) {
    k_col_ = wqkv_.part_col(1);
    v_col_ = wqkv_.part_col(2);
    if (c.qkv_bias) {
      bias_ = Vector<T>::Zero(wqkv_.n_out_padded());  // (q | k | v columns as the product lays them out)
      bias_.segment(0, q_dim()) = w.bq;
      bias_.segment(k_col_, kv_dim()) = w.bk;
      bias_.segment(v_col_, kv_dim()) = w.bv;
    }
  }

  int q_dim() const { return n_heads_ * head_dim_; }
  int kv_dim() const { return n_kv_heads_ * head_dim_; }
  const PackedMatrix<T>& wqkv() const { return wqkv_; }  ///< (q_dim + 2 kv_dim, D) packed
  const PackedMatrix<T>& wo() const { return wo_; }      ///< (D, q_dim) packed
  /// The numerics mode on the projections (PackedMatrix::set_numerics).
  void set_numerics(Numerics n) {
    wqkv_.set_numerics(n);
    wo_.set_numerics(n);
  }
  long k_col() const { return k_col_; }  ///< first column of k in a projected row (q starts at 0)
  long v_col() const { return v_col_; }  ///< first column of v

  /// Step 1. xn (M, ldx) normalised inputs -> qkv (M, ldq) with ldq >= wqkv().n_out_padded():
  /// q | k | v of each row at position pos_of(m), biased, q/k-normed and rotated.
  template <class PosFn>
  void project(const T* xn, long ldx, long M, PosFn&& pos_of, T* qkv, long ldq) const {
    { detail::PhaseScope ps(detail::Phase::kQkv); matmul(xn, ldx, M, wqkv_, qkv, ldq); }
    detail::PhaseScope ps(detail::Phase::kRope);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (M * q_dim() >= detail::kParallelElements)
#endif
    for (long m = 0; m < M; ++m) finish_row(qkv + m * ldq, pos_of(m));
  }

  /// Rows through attention: xn (M, ldx) inputs -> out (M, ldo); `pre`, if given,
  /// prepares xn's rows first (the block's RMSNorm, inside the projection's
  /// parallel region). Appends each row's k, v at its position in caches[row.seq]
  /// (the caller validated room and commits the lengths afterwards), then attends.
  /// Returns the multiply-adds performed.
  template <class Cache>
  std::uint64_t forward(const T* xn, long ldx, const Row* rows, long M, Cache* const* caches, Workspace<T>& ws,
                        T* out, long ldo, const RowPrologue& pre = RowPrologue()) const {
    { detail::PhaseScope ps(detail::Phase::kQkv); matmul(xn, ldx, M, wqkv_, ws.qkv.data(), ws.ld_qkv, pre); }
    std::uint64_t visible = 0;
    {
      detail::PhaseScope ps(detail::Phase::kAttention);
      visible = plan(rows, M, ws);
      run(rows, M, caches, ws, visible);
    }
    {
      detail::PhaseScope ps(detail::Phase::kWo);
      matmul(ws.att.data(), ws.ld_q, M, wo_, out, ldo);
      add_out_bias(out, ldo, M);
    }
    return static_cast<std::uint64_t>(M) * (wqkv_.n_out() * d_model_ + wo_.n_out() * q_dim()) +
           2ull * visible * n_heads_ * head_dim_;
  }

  /// Step 2: fills ws.attention_items. Consecutive rows of one sequence (prefill)
  /// go in groups of up to kRowGroup, one query head per item, so they share every
  /// K and V load; a lone row (decode) takes the query heads of one KV head per
  /// item, so they share every K and V load (a block type's values are decoded once
  /// per KV head), split in parts when there are fewer KV heads than threads.
  /// Either way each row and head gets exactly the computation it would get alone.
  /// Returns the (row, position) pairs attended, summed.
  std::uint64_t plan(const Row* rows, long M, Workspace<T>& ws) const {
    const int rep = n_heads_ / n_kv_heads_;
    int parts = 1;  // items per KV head of a lone row: enough to give every thread one
    while (parts < rep && static_cast<long>(n_kv_heads_) * parts * M < num_threads()) ++parts;
    auto& items = ws.attention_items;
    items.clear();
    std::uint64_t visible = 0;
    for (long m = 0; m < M;) {
      int n = 1;
      while (n < kRowGroup && m + n < M && rows[m + n].seq == rows[m].seq && rows[m + n].pos == rows[m].pos + n) ++n;
      for (int i = 0; i < n; ++i) visible += rows[m + i].pos - detail::first_visible(rows[m + i].pos, window_) + 1;
      if (n == 1)
        for (int g = 0; g < n_kv_heads_; ++g)
          for (int p = 0; p < parts; ++p) {  // heads [rep * p / parts, rep * (p + 1) / parts) of the group
            const int h0 = rep * p / parts, h1 = rep * (p + 1) / parts;
            items.push_back({static_cast<int>(m), 1, g * rep + h0, h1 - h0});
          }
      else
        for (int h = 0; h < n_heads_; ++h) items.push_back({static_cast<int>(m), n, h, 1});
      m += n;
    }
    return visible;
  }

  /// Step 3, in one parallel region: finishes each projected row in ws.qkv (bias,
  /// q/k norm, RoPE at its position) and appends its k and v to its cache; then,
  /// after one barrier, runs the planned items (taken dynamically by the threads),
  /// writing every row's heads into ws.att. Rows write different cache positions
  /// (distinct elements, never the same one).
  template <class Cache>
  void run(const Row* rows, long M, Cache* const* caches, Workspace<T>& ws, std::uint64_t visible) const {
    const int rep = n_heads_ / n_kv_heads_;
    const auto& items = ws.attention_items;
    const long n_items = static_cast<long>(items.size());
    const bool parallel = static_cast<std::int64_t>(visible) * n_heads_ * head_dim_ >= detail::kParallelThreshold ||
                          M * q_dim() >= detail::kParallelElements;
    T* const qkv = ws.qkv.data();
#if defined(_OPENMP)
#pragma omp parallel if (parallel)
#endif
    {
#if defined(_OPENMP)
#pragma omp for schedule(static)
#endif
    for (long m = 0; m < M; ++m) {
      T* r = qkv + m * ws.ld_qkv;
      finish_row(r, rows[m].pos);
      caches[rows[m].seq]->write(layer_, rows[m].pos, r + k_col_, r + v_col_);
    }
#if defined(_OPENMP)
#pragma omp for schedule(dynamic, 1)
#endif
    for (long it = 0; it < n_items; ++it) {
      const auto& item = items[it];
      const Row& row = rows[item.row];
      const int h = item.head;
      int t = 0, nt = 1;
      detail::this_thread(t, nt);
      T* scores = ws.scores.data() + t * Workspace<T>::kScoreRows * ws.ld_s;
      const T* qh = qkv + item.row * ws.ld_qkv + h * head_dim_;
      T* out_h = ws.att.data() + item.row * ws.ld_q + h * head_dim_;
      const Cache& cache = *caches[row.seq];
      const int kvh = h / rep;
      const int first = detail::first_visible(row.pos, window_);
      switch (item.rows) {
        case 1:
          detail::attend_kv_head(qh, cache, layer_, kvh, item.heads, head_dim_, first, row.pos, score_div_,
                                 sinks_.size() ? sinks_.data() + h : nullptr, scores, ws.ld_s, out_h);
          if (rotation_ == KVRotation::kKeysValues) detail::hadamard_rotate(out_h, item.heads, head_dim_);
          break;
        case 2:
          detail::attend_rows<2>(qh, ws.ld_qkv, cache, layer_, kvh, head_dim_, row.pos, window_, score_div_, sink(h), scores, ws.ld_s, out_h, ws.ld_q);
          break;
        case 3:
          detail::attend_rows<3>(qh, ws.ld_qkv, cache, layer_, kvh, head_dim_, row.pos, window_, score_div_, sink(h), scores, ws.ld_s, out_h, ws.ld_q);
          break;
        case 4:
          detail::attend_rows<4>(qh, ws.ld_qkv, cache, layer_, kvh, head_dim_, row.pos, window_, score_div_, sink(h), scores, ws.ld_s, out_h, ws.ld_q);
          break;
        case 5:
          detail::attend_rows<5>(qh, ws.ld_qkv, cache, layer_, kvh, head_dim_, row.pos, window_, score_div_, sink(h), scores, ws.ld_s, out_h, ws.ld_q);
          break;
        case 6:
          detail::attend_rows<6>(qh, ws.ld_qkv, cache, layer_, kvh, head_dim_, row.pos, window_, score_div_, sink(h), scores, ws.ld_s, out_h, ws.ld_q);
          break;
        case 7:
          detail::attend_rows<7>(qh, ws.ld_qkv, cache, layer_, kvh, head_dim_, row.pos, window_, score_div_, sink(h), scores, ws.ld_s, out_h, ws.ld_q);
          break;
        default:
          detail::attend_rows<8>(qh, ws.ld_qkv, cache, layer_, kvh, head_dim_, row.pos, window_, score_div_, sink(h), scores, ws.ld_s, out_h, ws.ld_q);
          break;
      }
      if (item.rows > 1 && rotation_ == KVRotation::kKeysValues)
        for (int r = 0; r < item.rows; ++r) detail::hadamard_rotate(out_h + r * ws.ld_q, 1, head_dim_);
    }
    }
  }

  /// The cache-free reference: xn (n, D) normalised inputs at positions 0..n-1
  /// -> (n, D). K is rounded through storage type S and V through SV at the point
  /// the cache would store them (a block type: per 32 values of each head,
  /// kv_cache.hpp, KVStore), so it matches a cache of those types bit for bit. Throws
  /// ConfigError naming head_dim when a block type meets a head_dim that is not a
  /// multiple of 32.
  template <class S = T, class SV = S>
  RowMatrix<T> forward_reference(const RowMatrix<T>& xn) const {
    detail::KVStore<S>::check_head_dim(head_dim_, "forward_reference keys");
    detail::KVStore<SV>::check_head_dim(head_dim_, "forward_reference values");
    const long n = xn.rows();
    RowMatrix<T> qkv(n, wqkv_.n_out_padded());  // (n, q | k | v, padded)
    project(xn.data(), xn.cols(), n, [](long m) { return static_cast<int>(m); }, qkv.data(), qkv.cols());
    if constexpr (std::is_same_v<S, SV> && !detail::KVStore<S>::kQuantized) {
      for (long i = 0; i < n; ++i)
        for (long j = k_col_; j < qkv.cols(); ++j) qkv(i, j) = detail::from_storage<T>(detail::to_storage<S>(qkv(i, j)));
    } else {
      for (long i = 0; i < n; ++i) {
        detail::KVStore<S>::round_trip(&qkv(i, k_col_), kv_dim());
        detail::KVStore<SV>::round_trip(&qkv(i, v_col_), kv_dim());
      }
    }
    const int rep = n_heads_ / n_kv_heads_;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    RowMatrix<T> att(n, wo_.n_in());  // (n, q_dim)
    const long n_pad = detail::round_up_lanes(n);
    RowMatrix<T> scores(n, n_pad);    // (n, n) one head's full square score matrix (rows padded to 16)
    RowMatrix<T> kt(head_dim_, n);    // (head_dim, n) one KV head's keys, transposed (an exact copy)
    for (int h = 0; h < n_heads_; ++h) {
      const long qo = h * head_dim_, ko = k_col_ + (h / rep) * head_dim_, vo = v_col_ + (h / rep) * head_dim_;
      for (int d = 0; d < head_dim_; ++d)
        for (long t = 0; t < n; ++t) kt(d, t) = qkv(t, ko + d);
      for (long i = 0; i < n; ++i) {
        // scores(i, t) = fma chain over d of q_i[d] * k_t[d], for every t at once
        T* s = &scores(i, 0);
        for (long t = 0; t < n; ++t) s[t] = T(0);
        for (int d = 0; d < head_dim_; ++d) {
          const T qd = qkv(i, qo + d);
          const T* k = &kt(d, 0);
          for (long t = 0; t < n; ++t) s[t] = std::fma(qd, k[t], s[t]);
        }
        const long first = detail::first_visible(static_cast<int>(i), window_);
        for (long t = 0; t < n; ++t) s[t] = (t > i || t < first) ? neg_inf : s[t] / score_div_;  // the causal mask
        detail::softmax_blocks(s, 0, static_cast<int>(n_pad / detail::kLanes), 0, static_cast<int>(n - 1), sink(h));
        // att_i = fma chain over every t (masked ones add exact zeros) of w[t] * v_t
        T* o = &att(i, qo);
        for (int d = 0; d < head_dim_; ++d) o[d] = T(0);
        for (long t = 0; t < n; ++t) {
          const T w = s[t];
          const T* v = &qkv(t, vo);
          for (int d = 0; d < head_dim_; ++d) o[d] = std::fma(w, v[d], o[d]);
        }
        if (rotation_ == KVRotation::kKeysValues) detail::hadamard_rotate(o, 1, head_dim_);  // values were rotated
      }
    }
    RowMatrix<T> out(n, wo_.n_out_padded());
    matmul(att.data(), att.cols(), n, wo_, out.data(), out.cols());
    add_out_bias(out.data(), out.cols(), n);
    return out.leftCols(d_model_);
  }

 private:
  // Head h's sink logit, or -inf without sinks.
  T sink(int h) const { return sinks_.size() ? sinks_[h] : -std::numeric_limits<T>::infinity(); }

  // out[m] += the output projection's bias, for M rows (nothing without one).
  void add_out_bias(T* out, long ldo, long M) const {
    if (out_bias_.size() == 0) return;
    for (long m = 0; m < M; ++m)
      for (long i = 0; i < d_model_; ++i) out[m * ldo + i] = out[m * ldo + i] + out_bias_[i];
  }

  // One projected row r (q | k | v) at position pos: bias, q/k RMSNorm, RoPE on q and k.
  void finish_row(T* r, int pos) const {
    if (bias_.size() != 0)
      for (long j = 0; j < wqkv_.n_out_padded(); ++j) r[j] = r[j] + bias_[j];
    if (q_norm_.size() != 0) {
      for (int h = 0; h < n_heads_; ++h) rmsnorm_row(r + h * head_dim_, q_norm_.data(), head_dim_, norm_eps_, r + h * head_dim_);
      for (int h = 0; h < n_kv_heads_; ++h)
        rmsnorm_row(r + k_col_ + h * head_dim_, k_norm_.data(), head_dim_, norm_eps_, r + k_col_ + h * head_dim_);
    }
    rope_->apply(r, n_heads_, pos);              // q heads
    rope_->apply(r + k_col_, n_kv_heads_, pos);  // k heads
    if (rotation_ != KVRotation::kNone) {        // the cache rotation: q and k alike, then v
      detail::hadamard_rotate(r, n_heads_, head_dim_);
      detail::hadamard_rotate(r + k_col_, n_kv_heads_, head_dim_);
      if (rotation_ == KVRotation::kKeysValues) detail::hadamard_rotate(r + v_col_, n_kv_heads_, head_dim_);
    }
  }

  static constexpr int kRowGroup = 8;  // prefill rows sharing K/V loads (attend_rows<2..8>)
  int n_heads_ = 0, n_kv_heads_ = 0, head_dim_ = 0, d_model_ = 0, window_ = 0, layer_ = 0;  // window_: this layer's
  T score_div_ = T(1);  // sqrt(attention_scalar()): what every score is divided by
  KVRotation rotation_ = KVRotation::kNone;  // heads the cache stores rotated (see the top of this file)
  T norm_eps_ = T(1e-5);
  const RoPE<T>* rope_ = nullptr;
  PackedMatrix<T> wqkv_;  // (q_dim + 2 kv_dim, D)
  PackedMatrix<T> wo_;    // (D, q_dim)
  long k_col_ = 0, v_col_ = 0;  // where k and v start in a projected row
  Vector<T> bias_;     // (wqkv_.n_out_padded()) q|k|v biases in the product's columns; empty = none
  Vector<T> q_norm_;   // (Dh) per-head q RMSNorm weights; empty = none
  Vector<T> k_norm_;   // (Dh)
  Vector<T> sinks_;    // (H) per-head sink logits (gpt-oss); empty = none
  Vector<T> out_bias_; // (D) the output projection's bias (gpt-oss); empty = none
};

}  // namespace kvd
