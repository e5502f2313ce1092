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
//   e[t]     = exp_(score[t] - m)
//   sum      = 16 lane sums keyed to t mod 16, each in increasing t, then a fixed tree
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

/// Softmax over the scores of one query, in place. s[i] is the score of position
/// base + i, base a multiple of 16, for i in [0, 16 * n_blocks); only positions in
/// [lo, hi] are visible and every other entry ends as exactly 0 (the value stored
/// there beforehand is ignored). The reduction structure is keyed to absolute
/// positions, so every caller that sees the same visible scores gets the same bits:
///   m      = max over visible scores                       (exact in any order)
///   e      = exp_(s - m) for visible entries, 0 elsewhere
///   sum    = 16 lane sums, lane j adding the e of positions = j (mod 16) in
///            increasing position, then ((l0+l1)+(l2+l3))+... in a fixed tree
///   s      = e / sum
/// Entries that are not visible add +0 to their lane, which changes nothing.
template <class T>
inline void softmax_blocks(T* s, int base, int n_blocks, int lo, int hi) {
  const int n = n_blocks * kLanes;
  const int i0 = lo - base, i1 = hi - base;  // visible index range [i0, i1]
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int i = 0; i < i0; ++i) s[i] = neg_inf;
  for (int i = i1 + 1; i < n; ++i) s[i] = neg_inf;
  T lane_max[kLanes];
  for (int j = 0; j < kLanes; ++j) lane_max[j] = neg_inf;
  for (int b = 0; b < n_blocks; ++b)
    for (int j = 0; j < kLanes; ++j) lane_max[j] = std::max(lane_max[j], s[b * kLanes + j]);
  T mx = neg_inf;
  for (int j = 0; j < kLanes; ++j) mx = std::max(mx, lane_max[j]);
  // A signed-zero maximum may come out as +0 or -0 depending on order; s - (+0) and
  // s - (-0) are equal for every s (and exp(+0) == exp(-0)), so that cannot matter.
  for (int i = 0; i < n; ++i) s[i] = s[i] - mx;  // -inf stays -inf
  exp_array(s, s, n);                            // same bits as exp_ on each value; exp(-inf) = 0
  T lane_sum[kLanes];
  for (int j = 0; j < kLanes; ++j) lane_sum[j] = T(0);
  for (int b = 0; b < n_blocks; ++b)
    for (int j = 0; j < kLanes; ++j) lane_sum[j] = lane_sum[j] + s[b * kLanes + j];
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lane_sum[j] = lane_sum[2 * j] + lane_sum[2 * j + 1];
  const T sum = lane_sum[0];
  for (int i = 0; i < n; ++i) s[i] = s[i] / sum;
}

// For each of HG heads h: acc[h][v] += w[h][t - first] * v_t[16v .. 16v + 16) for t in
// [first, last], in increasing t; NV vectors of 16 dims from dim d0, all in registers.
// The HG heads' chains are independent, so they overlap in the pipeline.
// v_block(h, b) returns head h's (16, head_dim) values of positions [16b, 16b + 16).
template <int HG, int NV, class T, class VBlock>
inline void weighted_sum_vecs(const T* const* w, int first, int last, int head_dim, int d0, VBlock&& v_block,
                              T* const* out) {
  Vec16<T> acc[HG][NV];
  for (int h = 0; h < HG; ++h)
    for (int v = 0; v < NV; ++v) acc[h][v] = Vec16<T>::zero();
  for (int b = first / kLanes; b <= last / kLanes; ++b) {
    decltype(v_block(0, b)) vb[HG];
    for (int h = 0; h < HG; ++h) vb[h] = v_block(h, b) + d0;
    const int l0 = std::max(first, b * kLanes) - b * kLanes, l1 = std::min(last, b * kLanes + kLanes - 1) - b * kLanes;
    const int wo = b * kLanes - first;
    for (int lane = l0; lane <= l1; ++lane)
      for (int h = 0; h < HG; ++h) {
        const Vec16<T> wt = Vec16<T>::broadcast(w[h][wo + lane]);
        const auto* row = vb[h] + static_cast<long>(lane) * head_dim;
        for (int v = 0; v < NV; ++v) acc[h][v].fma(wt, load_lanes<T>(row + v * kLanes));
      }
  }
  for (int h = 0; h < HG; ++h)
    for (int v = 0; v < NV; ++v) acc[h][v].store(out[h] + d0 + v * kLanes);
}

/// out[h][0..head_dim) = fma chain over t in [first, last], increasing, from +0, of
/// w[h][t - first] * v_t[d], for HG heads at once. Vectorised over d, up to 128 dims
/// per pass in registers; each d's chain is the same sequence of operations as a
/// scalar loop.
template <int HG, class T, class VBlock>
inline void weighted_sum(const T* const* w, int first, int last, int head_dim, VBlock&& v_block, T* const* out) {
  constexpr int kMax = HG == 1 ? 8 : 4;  // vectors per pass: HG * kMax accumulators in registers
  int d0 = 0;
  for (; head_dim - d0 >= kMax * kLanes; d0 += kMax * kLanes)
    weighted_sum_vecs<HG, kMax>(w, first, last, head_dim, d0, v_block, out);
  switch ((head_dim - d0) / kLanes) {
    case 7: if constexpr (kMax > 7) weighted_sum_vecs<HG, 7>(w, first, last, head_dim, d0, v_block, out); break;
    case 6: if constexpr (kMax > 6) weighted_sum_vecs<HG, 6>(w, first, last, head_dim, d0, v_block, out); break;
    case 5: if constexpr (kMax > 5) weighted_sum_vecs<HG, 5>(w, first, last, head_dim, d0, v_block, out); break;
    case 4: if constexpr (kMax > 4) weighted_sum_vecs<HG, 4>(w, first, last, head_dim, d0, v_block, out); break;
    case 3: weighted_sum_vecs<HG, 3>(w, first, last, head_dim, d0, v_block, out); break;
    case 2: weighted_sum_vecs<HG, 2>(w, first, last, head_dim, d0, v_block, out); break;
    case 1: weighted_sum_vecs<HG, 1>(w, first, last, head_dim, d0, v_block, out); break;
    default: break;
  }
  for (int h = 0; h < HG; ++h)
    for (int d = head_dim / kLanes * kLanes; d < head_dim; ++d) {  // the dims past the last full vector
      T acc = T(0);
      for (int t = first; t <= last; ++t)
        acc = std::fma(w[h][t - first], from_storage<T>(v_block(h, t / kLanes)[(t % kLanes) * head_dim + d]), acc);
      out[h][d] = acc;
    }
}

// scores[16j .. 16j + 16) = fma chain over d of q[d] * K[block b0 + j][d][lane], from +0,
// for NG consecutive blocks at once (independent chains, so they overlap in the pipeline).
template <int NG, class T, class KBlock>
inline void score_blocks(const T* q, int head_dim, int b0, KBlock&& k_block, T* scores) {
  decltype(k_block(0)) kbs[NG];
  for (int j = 0; j < NG; ++j) kbs[j] = k_block(b0 + j);
  Vec16<T> acc[NG];
  for (int j = 0; j < NG; ++j) acc[j] = Vec16<T>::zero();
  for (int d = 0; d < head_dim; ++d) {
    const Vec16<T> qd = Vec16<T>::broadcast(q[d]);
    for (int j = 0; j < NG; ++j) acc[j].fma(qd, load_lanes<T>(kbs[j] + d * kLanes));
  }
  for (int j = 0; j < NG; ++j) acc[j].store(scores + j * kLanes);
}

/// HG consecutive query heads of one row over cache positions [first, last]:
/// q holds the HG heads' queries back to back, kvh[h] is head h's KV head, and out
/// receives the HG heads' outputs back to back. scores: HG rows of ld_s scratch, each
/// at least round_up_lanes(last + 1) - 16 * (first / 16) values. Each head's result
/// is the same as computing it alone: heads are grouped only to overlap their chains.
template <int HG, class T, class Cache>
inline void attend_heads(const T* q, const Cache& cache, int layer, const int* kvh, int head_dim, int first, int last,
                         T* scores, long ld_s, T* out) {
  const int b0 = first / kLanes, b1 = last / kLanes, nb = b1 - b0 + 1;
  const T sqrt_dh = std::sqrt(static_cast<T>(head_dim));
  const T* w[HG];
  T* o[HG];
  for (int h = 0; h < HG; ++h) {
    const long k_off = static_cast<long>(kvh[h]) * head_dim * kLanes;  // KV head inside a block
    auto k_block = [&](int b) { return cache.k_block(layer, b) + k_off; };  // (head_dim, 16)
    T* s = scores + h * ld_s;
    int g = 0;
    for (; g + 4 <= nb; g += 4) score_blocks<4>(q + h * head_dim, head_dim, b0 + g, k_block, s + g * kLanes);
    for (; g < nb; ++g) score_blocks<1>(q + h * head_dim, head_dim, b0 + g, k_block, s + g * kLanes);
    for (int i = 0; i < nb * kLanes; ++i) s[i] = s[i] / sqrt_dh;
    softmax_blocks(s, b0 * kLanes, nb, first, last);
    w[h] = s + (first - b0 * kLanes);
    o[h] = out + h * head_dim;
  }
  auto v_block = [&](int h, int b) {  // (16, head_dim)
    return cache.v_block(layer, b) + static_cast<long>(kvh[h]) * head_dim * kLanes;
  };
  weighted_sum<HG>(w, first, last, head_dim, v_block, o);
}

/// R consecutive rows of one sequence (positions pos0 .. pos0 + R - 1), one query
/// head each, over their visible cache positions; used for prefill, where rows
/// travelling together share every K and V load. q_r = q + r * ld_q, out_r = out +
/// r * ld_out; scores: R rows of ld_s scratch. Row r sees [first(r), pos0 + r] with
/// first(r) = first_visible(pos0 + r, window), and its result is the same as
/// attend_heads<1> for that row alone: per row, the same chains in the same order.
template <int R, class T, class Cache>
inline void attend_rows(const T* q, long ld_q, const Cache& cache, int layer, int kvh, int head_dim, int pos0,
                        int window, T* scores, long ld_s, T* out, long ld_out) {
  int first[R], last[R];
  for (int r = 0; r < R; ++r) {
    first[r] = first_visible(pos0 + r, window);
    last[r] = pos0 + r;
  }
  const int bmin = first[0] / kLanes, bmax = last[R - 1] / kLanes;
  const long off = static_cast<long>(kvh) * head_dim * kLanes;  // KV head inside a block
  // Scores of every row for blocks [bmin, bmax]: one K load feeds R chains.
  for (int b = bmin; b <= bmax; ++b) {
    const auto* kb = cache.k_block(layer, b) + off;  // (head_dim, 16)
    Vec16<T> acc[R];
    for (int r = 0; r < R; ++r) acc[r] = Vec16<T>::zero();
    for (int d = 0; d < head_dim; ++d) {
      const Vec16<T> k = load_lanes<T>(kb + d * kLanes);
      for (int r = 0; r < R; ++r) acc[r].fma(Vec16<T>::broadcast(q[r * ld_q + d]), k);
    }
    for (int r = 0; r < R; ++r) acc[r].store(scores + r * ld_s + (b - bmin) * kLanes);
  }
  const T sqrt_dh = std::sqrt(static_cast<T>(head_dim));
  const T* w[R];  // w[r][t - first[r]]
  for (int r = 0; r < R; ++r) {
    T* s = scores + r * ld_s;
    const int nb = bmax - bmin + 1;
    for (int i = 0; i < nb * kLanes; ++i) s[i] = s[i] / sqrt_dh;
    const int b0 = first[r] / kLanes;
    softmax_blocks(s + (b0 - bmin) * kLanes, b0 * kLanes, last[r] / kLanes - b0 + 1, first[r], last[r]);
    w[r] = s + (first[r] - bmin * kLanes);
  }
  auto v_row = [&](int t) { return cache.v_block(layer, t / kLanes) + off + static_cast<long>(t % kLanes) * head_dim; };
  // Weighted sums. Positions [first[R-1], last[0]] are visible to every row: one V load
  // feeds R chains. Before and after that span each row adds its own remaining
  // positions, so every row's chain still runs in increasing t.
  const int all_lo = first[R - 1], all_hi = last[0];
  for (int d0 = 0; d0 < head_dim; d0 += 4 * kLanes) {
    const int nv = std::min(4, (head_dim - d0) / kLanes);
    if (nv == 0) break;
    Vec16<T> acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) acc[r][v] = Vec16<T>::zero();
    auto one = [&](int r, int t) {
      const Vec16<T> wt = Vec16<T>::broadcast(w[r][t - first[r]]);
      const auto* row = v_row(t) + d0;
      for (int v = 0; v < nv; ++v) acc[r][v].fma(wt, load_lanes<T>(row + v * kLanes));
    };
    if (all_lo > all_hi) {  // a window narrower than the group: no shared span
      for (int r = 0; r < R; ++r)
        for (int t = first[r]; t <= last[r]; ++t) one(r, t);
    } else {
    for (int r = 0; r < R; ++r)
      for (int t = first[r]; t < all_lo; ++t) one(r, t);
    for (int t = all_lo; t <= all_hi; ++t) {
      const auto* row = v_row(t) + d0;
      if (nv == 4) {
        const Vec16<T> v0 = load_lanes<T>(row), v1 = load_lanes<T>(row + kLanes), v2 = load_lanes<T>(row + 2 * kLanes),
                       v3 = load_lanes<T>(row + 3 * kLanes);
        for (int r = 0; r < R; ++r) {
          const Vec16<T> wt = Vec16<T>::broadcast(w[r][t - first[r]]);
          acc[r][0].fma(wt, v0);
          acc[r][1].fma(wt, v1);
          acc[r][2].fma(wt, v2);
          acc[r][3].fma(wt, v3);
        }
      } else {
        for (int r = 0; r < R; ++r) one(r, t);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int t = all_hi + 1; t <= last[r]; ++t) one(r, t);
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < nv; ++v) acc[r][v].store(out + r * ld_out + d0 + v * kLanes);
  }
  for (int r = 0; r < R; ++r)
    for (int d = head_dim / kLanes * kLanes; d < head_dim; ++d) {  // the dims past the last full vector
      T acc = T(0);
      for (int t = first[r]; t <= last[r]; ++t) acc = std::fma(w[r][t - first[r]], from_storage<T>(v_row(t)[d]), acc);
      out[r * ld_out + d] = acc;
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
    // Rows write different positions (distinct elements, never the same one).
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (M * q_dim() >= detail::kParallelElements)
#endif
    for (long m = 0; m < M; ++m) {
      T* r = qkv + m * ws.ld_qkv;
      rope_->apply(r, n_heads_, rows[m].pos);          // q heads
      rope_->apply(r + q, n_kv_heads_, rows[m].pos);   // k heads
      caches[rows[m].seq]->write(layer_, rows[m].pos, r + q, r + q + kv);
    }
    const int rep = n_heads_ / n_kv_heads_;
    // Work items. Consecutive rows of one sequence (prefill) go in groups of up to
    // kRowGroup, one query head per item, so they share every K and V load; a lone
    // row (decode) takes its query heads in pairs, so their chains overlap. Either
    // way each row and head gets exactly the computation it would get alone.
    constexpr int kRowGroup = 4;
    const int pair = n_heads_ % 2 == 0 ? 2 : 1;
    auto& items = ws.attention_items;
    items.clear();
    std::uint64_t visible = 0;
    for (long m = 0; m < M;) {
      int n = 1;
      while (n < kRowGroup && m + n < M && rows[m + n].seq == rows[m].seq && rows[m + n].pos == rows[m].pos + n) ++n;
      for (int i = 0; i < n; ++i) visible += rows[m + i].pos - detail::first_visible(rows[m + i].pos, window_) + 1;
      if (n == 1)
        for (int h = 0; h < n_heads_; h += pair) items.push_back({static_cast<int>(m), 1, h});
      else
        for (int h = 0; h < n_heads_; ++h) items.push_back({static_cast<int>(m), n, h});
      m += n;
    }
    const long n_items = static_cast<long>(items.size());
    const bool parallel = static_cast<std::int64_t>(visible) * n_heads_ * head_dim_ >= detail::kParallelThreshold;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static, 1) if (parallel)
#endif
    for (long it = 0; it < n_items; ++it) {
      const auto& item = items[it];
      const Row& row = rows[item.row];
      const int h = item.head;
#if defined(_OPENMP)
      T* scores = ws.scores.data() + omp_get_thread_num() * Workspace<T>::kScoreRows * ws.ld_s;
#else
      T* scores = ws.scores.data();
#endif
      const T* qh = qkv + item.row * ws.ld_qkv + h * head_dim_;
      T* out_h = ws.att.data() + item.row * ws.ld_q + h * head_dim_;
      const Cache& cache = *caches[row.seq];
      const int kvh[2] = {h / rep, (h + 1) / rep};
      switch (item.rows) {
        case 1:
          if (pair == 2)
            detail::attend_heads<2>(qh, cache, layer_, kvh, head_dim_, detail::first_visible(row.pos, window_), row.pos,
                                    scores, ws.ld_s, out_h);
          else
            detail::attend_heads<1>(qh, cache, layer_, kvh, head_dim_, detail::first_visible(row.pos, window_), row.pos,
                                    scores, ws.ld_s, out_h);
          break;
        case 2:
          detail::attend_rows<2>(qh, ws.ld_qkv, cache, layer_, kvh[0], head_dim_, row.pos, window_, scores, ws.ld_s, out_h, ws.ld_q);
          break;
        case 3:
          detail::attend_rows<3>(qh, ws.ld_qkv, cache, layer_, kvh[0], head_dim_, row.pos, window_, scores, ws.ld_s, out_h, ws.ld_q);
          break;
        default:
          detail::attend_rows<4>(qh, ws.ld_qkv, cache, layer_, kvh[0], head_dim_, row.pos, window_, scores, ws.ld_s, out_h, ws.ld_q);
          break;
      }
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
    const long n_pad = detail::round_up_lanes(n);
    RowMatrix<T> scores(n, n_pad);    // (n, n) one head's full square score matrix (rows padded to 16)
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
        detail::softmax_blocks(s, 0, static_cast<int>(n_pad / detail::kLanes), 0, static_cast<int>(n - 1));
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
