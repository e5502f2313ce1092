// The mixture-of-experts feed-forward sub-layer (Qwen3-MoE, gpt-oss):
//   logits = router x (+ router bias)       (E)
//   (e_k, w_k) for k < K = route(logits)    softmax then top-k, or top-k then softmax;
//                                           with norm_topk_prob, w_k /= sum(w)
//   out = sum over k of w_k * expert_{e_k}(x),
//   expert_e(x) = down_e(act(gate_e x + gb_e), up_e x + ub_e) + db_e
// (act: the gated activation, ops.hpp gated_array; the biases gb, ub, db only with
// config.moe_bias, gpt-oss).
//
// The one order: route() ranks the chosen experts by weight, highest first, ties to
// the lower expert index, and combine_row() sums their outputs in that rank order
// (out = w_0 y_0, then out = fma(w_k, y_k, out)). A row's result depends only on its
// own input: every expert's product gives each row the bits it would give it alone
// (the reduction-order rule), so it does not matter which rows travel together, how
// prefill groups them by expert or how the threads split the work.
//
// Prefill gathers the rows routed to each expert into one block and runs one product
// per expert over it, split over the threads; a decode step runs only its K chosen
// experts, so it reads K of the E experts' weights (active_bytes()), each thread
// running whole experts in one parallel region.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/model/ops.hpp"
#include "kvdecode/model/workspace.hpp"

namespace kvd {

namespace detail {

/// Routes one row: logits (E) -> the K chosen experts (experts[0..K), by rank) and
/// their weights (weights[0..K)), as `order` and `norm` say. `scratch` holds E
/// values. Ties go to the lower index; NaN logits are never chosen over a number
/// (a row of NaNs picks experts 0..K-1). The softmax uses the library's one exp.
template <class T>
void route_row(const T* logits, int E, int K, RouterOrder order, bool norm, T* scratch, int* experts, T* weights) {
  // Top-K of v[0..E) by value, highest first, ties to the lower index.
  auto top_k = [&](const T* v) {
    for (int k = 0; k < K; ++k) {
      int best = -1;
      for (int i = 0; i < E; ++i) {
        bool taken = false;
        for (int j = 0; j < k; ++j) taken = taken || experts[j] == i;
        if (!taken && (best < 0 || v[i] > v[best])) best = i;
      }
      experts[k] = best;
    }
  };
  // out[i] = exp(v[i] - max) / sum over n values, the sum in index order.
  auto softmax = [](const T* v, long n, T* out) {
    T mx = v[0];
    for (long i = 1; i < n; ++i) mx = v[i] > mx ? v[i] : mx;
    for (long i = 0; i < n; ++i) out[i] = v[i] - mx;
    exp_array(out, out, n);
    T sum = T(0);
    for (long i = 0; i < n; ++i) sum = sum + out[i];
    const T inv = T(1) / sum;
    for (long i = 0; i < n; ++i) out[i] = out[i] * inv;
  };
  if (order == RouterOrder::kSoftmaxTopK) {
    softmax(logits, E, scratch);
    top_k(scratch);
    for (int k = 0; k < K; ++k) weights[k] = scratch[experts[k]];
  } else {
    top_k(logits);
    for (int k = 0; k < K; ++k) scratch[k] = logits[experts[k]];
    softmax(scratch, K, weights);
  }
  if (norm) {
    T sum = T(0);
    for (int k = 0; k < K; ++k) sum = sum + weights[k];
    for (int k = 0; k < K; ++k) weights[k] = weights[k] / sum;
  }
}

/// out[i] = sum over k in rank order of weights[k] * ys[k][i], i in [0, D): the
/// one order every path sums the experts' outputs in (see the header).
template <class T>
void combine_row(const T* const* ys, const T* weights, int K, long D, T* out) {
  for (long i = 0; i < D; ++i) out[i] = weights[0] * ys[0][i];
  for (int k = 1; k < K; ++k)
    for (long i = 0; i < D; ++i) out[i] = std::fma(weights[k], ys[k][i], out[i]);
}

}  // namespace detail

template <class T>
class MoE {
 public:
  MoE() = default;
  /// Packs the router and each expert's gate|up and down. Precondition: w
  /// validated for c (ModelWeights::validate), c.moe().
  MoE(const ModelConfig& c, const LayerWeights<T>& w)
      : d_model_(c.d_model), hidden_dim_(c.hidden_dim), n_experts_(c.n_experts), k_(c.n_experts_used), act_(c.ffn_activation),
        order_(c.router_order), norm_(c.norm_topk_prob), router_({&w.router}), router_bias_(w.router_bias) {
    experts_.reserve(static_cast<std::size_t>(n_experts_));
    for (long e = 0; e < n_experts_; ++e) {
      const WeightMatrix gate = w.experts_gate.row_block(e * hidden_dim_, hidden_dim_);
      const WeightMatrix up = w.experts_up.row_block(e * hidden_dim_, hidden_dim_);
      const WeightMatrix down = w.experts_down.row_block(e * d_model_, d_model_);
      Expert x;
      x.w13 = PackedMatrix<T>({&gate, &up});
      x.w2 = PackedMatrix<T>({&down});
      x.up_col = x.w13.part_col(1);
      if (w.experts_gate_bias.size() != 0) {
        x.gate_bias = w.experts_gate_bias.segment(e * hidden_dim_, hidden_dim_);
        x.up_bias = w.experts_up_bias.segment(e * hidden_dim_, hidden_dim_);
        x.down_bias = w.experts_down_bias.segment(e * d_model_, d_model_);
      }
      experts_.push_back(std::move(x));
    }
  }

  const PackedMatrix<T>& router() const { return router_; }  ///< (E, D)
  long n_experts() const { return n_experts_; }
  long n_experts_used() const { return k_; }
  /// The numerics mode on every product (PackedMatrix::set_numerics).
  void set_numerics(Numerics n) {
    router_.set_numerics(n);
    for (auto& x : experts_) {
      x.w13.set_numerics(n);
      x.w2.set_numerics(n);
    }
  }
  /// Packed bytes of the router and every expert (what the model holds).
  std::uint64_t bytes() const {
    std::uint64_t b = router_.bytes();
    for (const auto& x : experts_) b += x.w13.bytes() + x.w2.bytes();
    return b;
  }
  /// Packed bytes one row reads: the router and K experts (every expert of a layer
  /// has the same shape and types, so any K of them).
  std::uint64_t active_bytes() const {
    return experts_.empty() ? router_.bytes()
                            : router_.bytes() + static_cast<std::uint64_t>(k_) * (experts_[0].w13.bytes() + experts_[0].w2.bytes());
  }

  /// xn (M, ldx) -> out (M, ldo); uses ws.router, ws.xg, ws.h13, ws.hmid, ws.ye and
  /// the routing lists. `pre`, if given, prepares xn's rows first (inside the router
  /// product). Allocates nothing once ws holds M rows. Returns multiply-adds performed.
  std::uint64_t forward(const T* xn, long ldx, long M, Workspace<T>& ws, T* out, long ldo,
                        const RowPrologue& pre = RowPrologue()) const {
    using detail::Phase;
    using detail::PhaseScope;
    const long ld_d = ws.ld_d;
    { PhaseScope ps(Phase::kW13); matmul(xn, ldx, M, router_, ws.router.data(), ws.ld_e, pre); }
    add_router_bias(ws.router.data(), ws.ld_e, M);
    // Route every row, then give each (row, rank) a slot: the slots of expert e are
    // consecutive, in row order, so its rows form one block for one product.
    int* const count = ws.expert_start.data();  // (E + 1) first slot of each expert
    for (long e = 0; e <= n_experts_; ++e) count[e] = 0;
    for (long m = 0; m < M; ++m) {
      detail::route_row(ws.router.data() + m * ws.ld_e, static_cast<int>(n_experts_), static_cast<int>(k_), order_, norm_,
                        ws.route_scratch.data(), ws.route_expert.data() + m * k_, ws.route_weight.data() + m * k_);
      for (long k = 0; k < k_; ++k) ++count[ws.route_expert[m * k_ + k] + 1];
    }
    for (long e = 0; e < n_experts_; ++e) count[e + 1] += count[e];
    int* const next = ws.expert_next.data();  // (E) next free slot of each expert
    for (long e = 0; e < n_experts_; ++e) next[e] = count[e];
    for (long m = 0; m < M; ++m)
      for (long k = 0; k < k_; ++k) {
        const int slot = next[ws.route_expert[m * k_ + k]]++;
        ws.route_slot[m * k_ + k] = slot;
        const T* src = xn + m * ldx;
        std::copy(src, src + d_model_, ws.xg.data() + slot * ld_d);
      }
    std::uint64_t macs = static_cast<std::uint64_t>(M) * n_experts_ * d_model_;
    // Expert e on its slots [count[e], count[e + 1]); a decode step reads only the chosen experts.
    auto expert_rows = [&](long e, bool scoped) {
      const long s0 = count[e], n = count[e + 1] - s0;
      run_expert(e, ws.xg.data() + s0 * ld_d, ld_d, n, ws.h13.data() + s0 * ws.ld_ff2, ws.ld_ff2,
                 ws.hmid.data() + s0 * ws.ld_ff, ws.ld_ff, ws.ye.data() + s0 * ld_d, ld_d, scoped);
    };
    long active = 0, most = 0;  // experts with rows, and the most rows one has
    for (long e = 0; e < n_experts_; ++e) {
      const long n = count[e + 1] - count[e];
      active += n > 0;
      most = std::max(most, n);
      macs += static_cast<std::uint64_t>(n) * 3ull * hidden_dim_ * d_model_;
    }
    const int nt = num_threads();
    if (nt > 1 && active >= nt && most <= kExpertParallelMaxRows) {
      // Decode (and batched decode): each thread runs whole experts, every product of
      // them on one thread, in one parallel region instead of two per expert. Thread t
      // takes the experts whose first slot lies in its share of the slots. Each
      // product gives every row the same bits on any thread, so this split changes
      // nothing but the time (the phase profile counts it all as gate/up).
      const long slots = count[n_experts_];
      detail::PhaseScope ps(Phase::kW13);
      detail::parallel_parts(slots, true, [&](long begin, long end) {
        for (long e = 0; e < n_experts_; ++e)
          if (count[e + 1] > count[e] && count[e] >= begin && count[e] < end) expert_rows(e, false);
      });
    } else {
      for (long e = 0; e < n_experts_; ++e)
        if (count[e + 1] > count[e]) expert_rows(e, true);
    }
    const T* ys[kMaxK];
    for (long m = 0; m < M; ++m) {
      for (long k = 0; k < k_; ++k) ys[k] = ws.ye.data() + ws.route_slot[m * k_ + k] * ld_d;
      detail::combine_row(ys, ws.route_weight.data() + m * k_, static_cast<int>(k_), d_model_, out + m * ldo);
    }
    return macs;
  }

  /// The same sub-layer on whole matrices, for the cache-free reference, one row and
  /// one expert at a time: (n, D) -> (n, D).
  RowMatrix<T> forward_reference(const RowMatrix<T>& xn) const {
    const long n = xn.rows(), ld = detail::round_up_lanes(d_model_);
    RowMatrix<T> logits(n, router_.n_out_padded());  // (n, E padded)
    matmul(xn.data(), xn.cols(), n, router_, logits.data(), logits.cols());
    add_router_bias(logits.data(), logits.cols(), n);
    std::vector<T> scratch(static_cast<std::size_t>(n_experts_)), weights(static_cast<std::size_t>(k_));
    std::vector<int> chosen(static_cast<std::size_t>(k_));
    std::vector<T> h13(static_cast<std::size_t>(2 * detail::round_up_lanes(hidden_dim_)));
    std::vector<T> hmid(static_cast<std::size_t>(detail::round_up_lanes(hidden_dim_)));
    std::vector<T> y(static_cast<std::size_t>(k_ * ld));  // (K, D padded) each chosen expert's output
    RowMatrix<T> out(n, d_model_);
    const T* ys[kMaxK];
    for (long m = 0; m < n; ++m) {
      detail::route_row(logits.data() + m * logits.cols(), static_cast<int>(n_experts_), static_cast<int>(k_), order_,
                        norm_, scratch.data(), chosen.data(), weights.data());
      for (long k = 0; k < k_; ++k) {
        run_expert(chosen[k], xn.data() + m * xn.cols(), xn.cols(), 1, h13.data(), static_cast<long>(h13.size()),
                   hmid.data(), static_cast<long>(hmid.size()), y.data() + k * ld, ld);
        ys[k] = y.data() + k * ld;
      }
      detail::combine_row(ys, weights.data(), static_cast<int>(k_), d_model_, out.data() + m * d_model_);
    }
    return out;
  }

 private:
  static constexpr long kMaxK = ModelConfig::kMaxExperts;

  struct Expert {
    PackedMatrix<T> w13;  // (2F, D) gate rows then up rows (from up_col)
    PackedMatrix<T> w2;   // (D, F)
    long up_col = 0;
    Vector<T> gate_bias, up_bias;  // (F) with config.moe_bias, else empty
    Vector<T> down_bias;           // (D) with config.moe_bias, else empty
  };

  // logits[m] += the router's bias, for M rows (nothing without one).
  void add_router_bias(T* logits, long ld, long M) const {
    if (router_bias_.size() == 0) return;
    for (long m = 0; m < M; ++m)
      for (long e = 0; e < n_experts_; ++e) logits[m * ld + e] = logits[m * ld + e] + router_bias_[e];
  }

  // Above this many rows per expert, the experts run one after the other, each
  // product split over the threads (prefill); at or below, each thread runs whole
  // experts (decode). Either gives the same bits.
  static constexpr long kExpertParallelMaxRows = 16;

  // Expert e on n rows: x (n, ldx) -> y (n, ldy) through h13 (n, ld13) and hmid (n, ldm).
  // `scoped`: time its products in the phase profile (off inside a parallel region,
  // whose caller times it).
  void run_expert(long e, const T* x, long ldx, long n, T* h13, long ld13, T* hmid, long ldm, T* y, long ldy,
                  bool scoped = true) const {
    using detail::Phase;
    using detail::PhaseScope;
    const Expert& ex = experts_[static_cast<std::size_t>(e)];
    const bool biased = ex.down_bias.size() != 0;
    auto swiglu_rows = [&](long r0, long r1) {
      for (long m = r0; m < r1; ++m) {
        T* g = h13 + m * ld13;
        if (biased)
          for (long i = 0; i < hidden_dim_; ++i) {
            g[i] = g[i] + ex.gate_bias[i];
            g[ex.up_col + i] = g[ex.up_col + i] + ex.up_bias[i];
          }
        gated_array(act_, g, g + ex.up_col, hmid + m * ldm, hmid + m * ldm, hidden_dim_);
      }
    };
    auto down_bias = [&] {
      if (biased)
        for (long m = 0; m < n; ++m)
          for (long i = 0; i < d_model_; ++i) y[m * ldy + i] = y[m * ldy + i] + ex.down_bias[i];
    };
    if (!scoped) {
      matmul(x, ldx, n, ex.w13, h13, ld13);
      matmul(hmid, ldm, n, ex.w2, y, ldy, row_prologue(swiglu_rows));
      down_bias();
      return;
    }
    { PhaseScope ps(Phase::kW13); matmul(x, ldx, n, ex.w13, h13, ld13); }
    {
      PhaseScope ps(Phase::kW2);
      matmul(hmid, ldm, n, ex.w2, y, ldy, row_prologue(swiglu_rows));
      down_bias();
    }
  }

  long d_model_ = 0, hidden_dim_ = 0, n_experts_ = 0, k_ = 0;
  Activation act_ = Activation::kSilu;  // the experts' gate activation
  RouterOrder order_ = RouterOrder::kSoftmaxTopK;
  bool norm_ = false;
  PackedMatrix<T> router_;      // (E, D)
  Vector<T> router_bias_;       // (E) with config.moe_bias, else empty
  std::vector<Expert> experts_;  // E entries
};

}  // namespace kvd
