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
//   score[t] = (fma chain over d = 0..head_dim-1 of q[d] * k_t[d], from +0) / sqrt(head_dim)
//   m        = max over visible t            (exact in any order)
//   e[t]     = exp_(score[t] - m);  sum = e[t0] + e[t0+1] + ... in increasing t
//   w[t]     = e[t] / sum
//   out[d]   = fma chain over t in increasing order of w[t] * v_t[d], from +0
// The decode kernel computes 16 scores at once with the lanes keyed to
// positions, each lane its own chain over d, so the vector width never enters
// a sum. In the reference, masked entries add exact zeros after (or before)
// the visible ones, which change nothing.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvdecode/config.hpp"
#include "kvdecode/kernels.hpp"
#include "kvdecode/kv_cache.hpp"
#include "kvdecode/ops.hpp"
#include "kvdecode/workspace.hpp"

namespace kvd {

namespace detail {

/// Loads 16 consecutive storage values as a compute vector.
template <class T, class S>
inline Vec16<T> load_lanes(const S* p) {
  if constexpr (std::is_same_v<S, T>) {
    return Vec16<T>::load(p);
  } else {
    T tmp[kLanes];
    for (int i = 0; i < kLanes; ++i) tmp[i] = from_storage<T>(p[i]);
    return Vec16<T>::load(tmp);
  }
}

/// First position a query at `pos` may see: 0, or pos - window + 1 with a sliding window.
inline int first_visible(int pos, int sliding_window) {
  return sliding_window > 0 ? std::max(0, pos - sliding_window + 1) : 0;
}

/// Softmax of s[0..n) in place, by the rule in the header comment.
template <class T>
inline void softmax_inplace(T* s, long n) {
  T mx = -std::numeric_limits<T>::infinity();
  for (long i = 0; i < n; ++i) mx = std::max(mx, s[i]);
  for (long i = 0; i < n; ++i) s[i] = s[i] - mx;
  exp_array(s, s, n);  // same bits as exp_ on each value
  T sum = T(0);
  for (long i = 0; i < n; ++i) sum += s[i];
  for (long i = 0; i < n; ++i) s[i] = s[i] / sum;
}

/// One query head of one row over cache positions [first, last] of KV head kvh.
/// scores: scratch of at least round_up_lanes(last + 1) - 16 * (first / 16) values.
template <class T, class Cache>
inline void attend_row(const T* q, const Cache& cache, int layer, int kvh, int head_dim, int first, int last,
                       T* scores, T* out) {
  const int b0 = first / kLanes, b1 = last / kLanes;
  const T sqrt_dh = std::sqrt(static_cast<T>(head_dim));
  for (int b = b0; b <= b1; ++b) {
    const auto* kb = cache.k_block(layer, b) + static_cast<long>(kvh) * head_dim * kLanes;  // (head_dim, 16)
    Vec16<T> acc = Vec16<T>::zero();
    for (int d = 0; d < head_dim; ++d) acc.fma(Vec16<T>::broadcast(q[d]), load_lanes<T>(kb + d * kLanes));
    acc.store(scores + (b - b0) * kLanes);
  }
  T* s = scores + (first - b0 * kLanes);  // s[i] is position first + i
  const int n = last - first + 1;
  for (int i = 0; i < n; ++i) s[i] = s[i] / sqrt_dh;
  softmax_inplace(s, n);
  for (int d = 0; d < head_dim; ++d) out[d] = T(0);
  for (int i = 0; i < n; ++i) {
    const int t = first + i;
    const auto* v = cache.v_block(layer, t / kLanes) + (static_cast<long>(kvh) * kLanes + t % kLanes) * head_dim;
    const T w = s[i];
    for (int d = 0; d < head_dim; ++d) out[d] = std::fma(w, from_storage<T>(v[d]), out[d]);
  }
}

}  // namespace detail

/// One attention sub-layer: fused q|k|v projection, RoPE, attention, output projection.
template <class T>
class Attention {
 public:
  Attention() = default;
  /// Packs the layer's wq|wk|wv and wo. `rope` must outlive this object.
  Attention(const ModelConfig& c, const LayerWeights<T>& w, int layer, const RoPE<T>* rope)
      : n_heads_(c.n_heads), n_kv_heads_(c.n_kv_heads), head_dim_(c.head_dim), d_model_(c.d_model),
        window_(c.sliding_window), layer_(layer), rope_(rope), wqkv_({&w.wq, &w.wk, &w.wv}), wo_({&w.wo}) {}

  int q_dim() const { return n_heads_ * head_dim_; }
  int kv_dim() const { return n_kv_heads_ * head_dim_; }
  const PackedMatrix<T>& wqkv() const { return wqkv_; }  ///< (q_dim + 2 kv_dim, D) packed
  const PackedMatrix<T>& wo() const { return wo_; }      ///< (D, q_dim) packed

  /// Rows through attention: xn (M, ldx) normalised inputs -> out (M, ldo).
  /// Appends each row's k, v at its position in caches[row.seq] (the caller
  /// validated room and commits the lengths afterwards), then attends.
  /// Returns the multiply-adds performed.
  template <class Cache>
  std::uint64_t forward(const T* xn, long ldx, const Row* rows, long M, Cache* const* caches, Workspace<T>& ws,
                        T* out, long ldo) const {
    const long q = q_dim(), kv = kv_dim();
    T* qkv = ws.qkv.data();
    matmul(xn, ldx, M, wqkv_, qkv, ws.ld_qkv);
    for (long m = 0; m < M; ++m) {
      T* r = qkv + m * ws.ld_qkv;
      rope_->apply(r, n_heads_, rows[m].pos);          // q heads
      rope_->apply(r + q, n_kv_heads_, rows[m].pos);   // k heads
      caches[rows[m].seq]->write(layer_, rows[m].pos, r + q, r + q + kv);
    }
    const int rep = n_heads_ / n_kv_heads_;
    const long items = M * n_heads_;
    std::uint64_t visible = 0;
    for (long m = 0; m < M; ++m) visible += rows[m].pos - detail::first_visible(rows[m].pos, window_) + 1;
    const bool parallel = static_cast<std::int64_t>(visible) * n_heads_ * head_dim_ >= detail::kParallelThreshold;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (parallel)
#endif
    for (long it = 0; it < items; ++it) {
      const long m = it / n_heads_;
      const int h = static_cast<int>(it % n_heads_);
#if defined(_OPENMP)
      T* scores = ws.scores.data() + omp_get_thread_num() * ws.ld_s;
#else
      T* scores = ws.scores.data();
#endif
      const int pos = rows[m].pos;
      detail::attend_row(qkv + m * ws.ld_qkv + h * head_dim_, *caches[rows[m].seq], layer_, h / rep, head_dim_,
                         detail::first_visible(pos, window_), pos, scores, ws.att.data() + m * ws.ld_q + h * head_dim_);
    }
    (void)parallel;
    matmul(ws.att.data(), ws.ld_q, M, wo_, out, ldo);
    return static_cast<std::uint64_t>(M) * (wqkv_.n_out() * d_model_ + wo_.n_out() * q) +
           2ull * visible * n_heads_ * head_dim_;
  }

  /// The cache-free reference: xn (n, D) normalised inputs at positions 0..n-1
  /// -> (n, D). K and V are rounded through storage type S at the point the
  /// cache would store them, so it matches a cache of that type bit for bit.
  template <class S = T>
  RowMatrix<T> forward_reference(const RowMatrix<T>& xn) const {
    const long n = xn.rows(), q = q_dim(), kv = kv_dim();
    RowMatrix<T> qkv(n, wqkv_.n_out_padded());  // (n, q | k | v, padded)
    matmul(xn.data(), xn.cols(), n, wqkv_, qkv.data(), qkv.cols());
    for (long i = 0; i < n; ++i) {
      rope_->apply(&qkv(i, 0), n_heads_, static_cast<int>(i));
      rope_->apply(&qkv(i, q), n_kv_heads_, static_cast<int>(i));
      for (long j = q; j < q + 2 * kv; ++j) qkv(i, j) = detail::from_storage<T>(detail::to_storage<S>(qkv(i, j)));
    }
    const int rep = n_heads_ / n_kv_heads_;
    const T sqrt_dh = std::sqrt(static_cast<T>(head_dim_));
    const T neg_inf = -std::numeric_limits<T>::infinity();
    RowMatrix<T> att(n, wo_.n_in());  // (n, q_dim)
    RowMatrix<T> scores(n, n);        // (n, n) one head's full square score matrix
    RowMatrix<T> kt(head_dim_, n);    // (head_dim, n) one KV head's keys, transposed (an exact copy)
    for (int h = 0; h < n_heads_; ++h) {
      const long qo = h * head_dim_, ko = q + (h / rep) * head_dim_, vo = q + kv + (h / rep) * head_dim_;
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
        for (long t = 0; t < n; ++t) s[t] = (t > i || t < first) ? neg_inf : s[t] / sqrt_dh;  // the causal mask
        detail::softmax_inplace(s, n);
        // att_i = fma chain over every t (masked ones add exact zeros) of w[t] * v_t
        T* o = &att(i, qo);
        for (int d = 0; d < head_dim_; ++d) o[d] = T(0);
        for (long t = 0; t < n; ++t) {
          const T w = s[t];
          const T* v = &qkv(t, vo);
          for (int d = 0; d < head_dim_; ++d) o[d] = std::fma(w, v[d], o[d]);
        }
      }
    }
    RowMatrix<T> out(n, wo_.n_out_padded());
    matmul(att.data(), att.cols(), n, wo_, out.data(), out.cols());
    return out.leftCols(d_model_);
  }

 private:
  int n_heads_ = 0, n_kv_heads_ = 0, head_dim_ = 0, d_model_ = 0, window_ = 0, layer_ = 0;
  const RoPE<T>* rope_ = nullptr;
  PackedMatrix<T> wqkv_;  // (q_dim + 2 kv_dim, D)
  PackedMatrix<T> wo_;    // (D, q_dim)
};

}  // namespace kvd
