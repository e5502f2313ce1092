// One pre-norm transformer block with residual connections:
//   x = x + attention(rmsnorm(x));  x = x + mlp(rmsnorm(x))
// where mlp is one gated FFN (mlp.hpp) or a mixture of experts (moe.hpp), as the config
// says. With post norms (Gemma 3) each sub-layer's output is normed before the add:
//   x = x + post_attn_norm(attention(rmsnorm(x)));  x = x + post_ffn_norm(mlp(rmsnorm(x)))
#pragma once

#include "kvdecode/model/attention.hpp"
#include "kvdecode/model/mlp.hpp"
#include "kvdecode/model/moe.hpp"
#include "kvdecode/model/ops.hpp"

namespace kvd {

template <class T>
class TransformerBlock {
 public:
  TransformerBlock() = default;
  TransformerBlock(const ModelConfig& c, const LayerWeights<T>& w, int layer, const RoPE<T>* rope)
      : attn_norm_(w.attn_norm, c.norm_eps), attn_(c, w, layer, rope), ffn_norm_(w.ffn_norm, c.norm_eps),
        attn_post_norm_(w.attn_post_norm, c.norm_eps), ffn_post_norm_(w.ffn_post_norm, c.norm_eps) {
    if (c.moe())
      moe_ = MoE<T>(c, w);
    else
      mlp_ = SwiGLU<T>(c, w);
  }

  const Attention<T>& attention() const { return attn_; }
  const SwiGLU<T>& mlp() const { return mlp_; }  ///< empty in a mixture of experts
  const MoE<T>& moe() const { return moe_; }      ///< empty with a dense FFN
  bool is_moe() const { return moe_.n_experts() > 0; }
  /// Packed bytes of the FFN one row reads: the SwiGLU's, or the router's and K experts'.
  std::uint64_t ffn_active_bytes() const {
    return is_moe() ? moe_.active_bytes() : mlp_.w13().bytes() + mlp_.w2().bytes();
  }
  /// Packed bytes of the FFN: the SwiGLU's, or the router's and every expert's.
  std::uint64_t ffn_bytes() const { return is_moe() ? moe_.bytes() : mlp_.w13().bytes() + mlp_.w2().bytes(); }
  /// The numerics mode on every product of the block (PackedMatrix::set_numerics).
  void set_numerics(Numerics n) {
    attn_.set_numerics(n);
    mlp_.set_numerics(n);
    moe_.set_numerics(n);
  }

  /// Updates ws.x (M rows) in place. Returns multiply-adds performed.
  /// The block's last residual add (x += the MLP's output in ws.proj) is left
  /// pending (ws.pending_residual): the next block adds it inside its first
  /// product's parallel region, and the caller finishes the last one
  /// (Workspace::finish_residual). Each row's operations are the same either way.
  /// With post norms, the pending add norms proj's row first (Workspace::pending_norm).
  /// The residual adds and RMSNorms run as RowPrologues of the products that
  /// read their rows, so the threads meet once per product, not once per step.
  template <class Cache>
  std::uint64_t forward(const Row* rows, long M, Cache* const* caches, Workspace<T>& ws) const {
    const long D = attn_norm_.dim(), ld = ws.ld_d;
    T* const x = ws.x.data();
    T* const xn = ws.xn.data();
    T* const proj = ws.proj.data();
    const bool pending = ws.pending_residual;
    // rows [r0, r1): x += proj (the previous block's MLP output, post-normed if it has
    // post norms), then xn = attn_norm(x)
    auto attn_in = [&](long r0, long r1) {
      if (pending) ws.add_pending_rows(r0, r1, D);
      attn_norm_.apply_rows(x + r0 * ld, ld, r1 - r0, xn + r0 * ld, ld);
    };
    std::uint64_t macs = attn_.forward(xn, ld, rows, M, caches, ws, ws.proj.data(), ld, row_prologue(attn_in));
    // rows [r0, r1): proj = attn_post_norm(proj) with post norms; x += proj (attention
    // output), then xn = ffn_norm(x)
    auto ffn_in = [&](long r0, long r1) {
      if (has_post_norms()) attn_post_norm_.apply_rows(proj + r0 * ld, ld, r1 - r0, proj + r0 * ld, ld);
      add_rows(x + r0 * ld, proj + r0 * ld, r1 - r0, D, ld);
      ffn_norm_.apply_rows(x + r0 * ld, ld, r1 - r0, xn + r0 * ld, ld);
    };
    macs += is_moe() ? moe_.forward(xn, ld, M, ws, ws.proj.data(), ld, row_prologue(ffn_in))
                     : mlp_.forward(xn, ld, M, ws, ws.proj.data(), ld, row_prologue(ffn_in));
    ws.pending_residual = true;
    ws.pending_norm = has_post_norms() ? ffn_post_norm_.weight().data() : nullptr;
    ws.pending_norm_eps = ffn_post_norm_.eps();
    return macs;
  }

  /// The cache-free reference on a whole sequence: x (n, D) updated in place.
  template <class S = T, class SV = S>
  void forward_reference(RowMatrix<T>& x) const {
    RowMatrix<T> xn(x.rows(), x.cols());
    attn_norm_.apply(x.data(), x.cols(), x.rows(), xn.data(), xn.cols());
    RowMatrix<T> y = attn_.template forward_reference<S, SV>(xn);  // (n, D)
    if (has_post_norms()) attn_post_norm_.apply(y.data(), y.cols(), y.rows(), y.data(), y.cols());
    x = x + y;
    ffn_norm_.apply(x.data(), x.cols(), x.rows(), xn.data(), xn.cols());
    y = is_moe() ? moe_.forward_reference(xn) : mlp_.forward_reference(xn);
    if (has_post_norms()) ffn_post_norm_.apply(y.data(), y.cols(), y.rows(), y.data(), y.cols());
    x = x + y;
  }

  bool has_post_norms() const { return attn_post_norm_.dim() > 0; }  ///< Gemma 3's norms after each sub-layer

 private:
  // x[m] += y[m] for M rows, on the calling thread.
  static void add_rows(T* x, const T* y, long M, long D, long ld) {
    for (long m = 0; m < M; ++m)
      for (long i = 0; i < D; ++i) x[m * ld + i] = x[m * ld + i] + y[m * ld + i];
  }

  RMSNorm<T> attn_norm_;
  Attention<T> attn_;
  RMSNorm<T> ffn_norm_;
  RMSNorm<T> attn_post_norm_;  // (D) with post norms, else empty
  RMSNorm<T> ffn_post_norm_;   // (D) with post norms, else empty
  SwiGLU<T> mlp_;  // the dense FFN, or empty
  MoE<T> moe_;     // the mixture of experts, or empty
};

}  // namespace kvd
