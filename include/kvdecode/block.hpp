// One pre-norm transformer block with residual connections:
//   x = x + attention(rmsnorm(x));  x = x + mlp(rmsnorm(x))
#pragma once

#include "kvdecode/attention.hpp"
#include "kvdecode/mlp.hpp"
#include "kvdecode/ops.hpp"

namespace kvd {

template <class T>
class TransformerBlock {
 public:
  TransformerBlock() = default;
  TransformerBlock(const ModelConfig& c, const LayerWeights<T>& w, int layer, const RoPE<T>* rope)
      : attn_norm_(w.attn_norm, c.norm_eps), attn_(c, w, layer, rope), ffn_norm_(w.ffn_norm, c.norm_eps), mlp_(c, w) {}

  const Attention<T>& attention() const { return attn_; }
  const SwiGLU<T>& mlp() const { return mlp_; }

  /// Updates ws.x (M rows) in place. Returns multiply-adds performed.
  template <class Cache>
  std::uint64_t forward(const Row* rows, long M, Cache* const* caches, Workspace<T>& ws) const {
    const long D = attn_norm_.dim(), ld = ws.ld_d;
    using detail::Phase;
    using detail::PhaseScope;
    T* x = ws.x.data();
    { PhaseScope ps(Phase::kNorm); attn_norm_.apply(x, ld, M, ws.xn.data(), ld); }
    std::uint64_t macs = attn_.forward(ws.xn.data(), ld, rows, M, caches, ws, ws.proj.data(), ld);
    { PhaseScope ps(Phase::kResidual); add_rows(x, ws.proj.data(), M, D, ld); }
    { PhaseScope ps(Phase::kNorm); ffn_norm_.apply(x, ld, M, ws.xn.data(), ld); }
    macs += mlp_.forward(ws.xn.data(), ld, M, ws, ws.proj.data(), ld);
    { PhaseScope ps(Phase::kResidual); add_rows(x, ws.proj.data(), M, D, ld); }
    return macs;
  }

  /// The cache-free reference on a whole sequence: x (n, D) updated in place.
  template <class S = T>
  void forward_reference(RowMatrix<T>& x) const {
    RowMatrix<T> xn(x.rows(), x.cols());
    attn_norm_.apply(x.data(), x.cols(), x.rows(), xn.data(), xn.cols());
    x = x + attn_.template forward_reference<S>(xn);
    ffn_norm_.apply(x.data(), x.cols(), x.rows(), xn.data(), xn.cols());
    x = x + mlp_.forward_reference(xn);
  }

 private:
  static void add_rows(T* x, const T* y, long M, long D, long ld) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (M * D >= detail::kParallelElements)
#endif
    for (long m = 0; m < M; ++m)
      for (long i = 0; i < D; ++i) x[m * ld + i] = x[m * ld + i] + y[m * ld + i];
  }

  RMSNorm<T> attn_norm_;
  Attention<T> attn_;
  RMSNorm<T> ffn_norm_;
  SwiGLU<T> mlp_;
};

}  // namespace kvd
