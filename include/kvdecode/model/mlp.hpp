// The gated feed-forward sub-layer: w2(act(w1 x) * w3 x), SwiGLU (act = SiLU, Llama)
// or GeGLU (act = GELU's tanh form, Gemma) as config.ffn_activation says.
// w1 and w3 are packed side by side so one matrix product yields both the
// gate and the up projection of every row.
#pragma once

#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/model/ops.hpp"
#include "kvdecode/model/workspace.hpp"

namespace kvd {

template <class T>
class SwiGLU {
 public:
  SwiGLU() = default;
  SwiGLU(const ModelConfig& c, const LayerWeights<T>& w)
      : d_model_(c.d_model), hidden_dim_(c.hidden_dim), act_(c.ffn_activation), w13_({&w.w1, &w.w3}), w2_({&w.w2}), up_col_(w13_.part_col(1)) {}

  const PackedMatrix<T>& w13() const { return w13_; }  ///< (2F, D): gate rows then up rows (from up_col())
  long up_col() const { return up_col_; }
  const PackedMatrix<T>& w2() const { return w2_; }    ///< (D, F)
  /// The numerics mode on both products (PackedMatrix::set_numerics).
  void set_numerics(Numerics n) {
    w13_.set_numerics(n);
    w2_.set_numerics(n);
  }

  /// xn (M, ldx) -> out (M, ldo); uses ws.h13 and ws.hmid. `pre`, if given, prepares
  /// xn's rows first (inside the gate/up product's parallel region); the SwiGLU of
  /// each row runs inside the down product's. Returns multiply-adds performed.
  std::uint64_t forward(const T* xn, long ldx, long M, Workspace<T>& ws, T* out, long ldo,
                        const RowPrologue& pre = RowPrologue()) const {
    using detail::Phase;
    using detail::PhaseScope;
    { PhaseScope ps(Phase::kW13); matmul(xn, ldx, M, w13_, ws.h13.data(), ws.ld_ff2, pre); }
    auto swiglu_rows = [&](long r0, long r1) {
      for (long m = r0; m < r1; ++m) {
        const T* g = ws.h13.data() + m * ws.ld_ff2;
        T* h = ws.hmid.data() + m * ws.ld_ff;
        gated_array(act_, g, g + up_col_, h, h, hidden_dim_);
      }
    };
    { PhaseScope ps(Phase::kW2); matmul(ws.hmid.data(), ws.ld_ff, M, w2_, out, ldo, row_prologue(swiglu_rows)); }
    return static_cast<std::uint64_t>(M) * (3ull * hidden_dim_ * d_model_);
  }

  /// The same sub-layer on whole matrices, for the cache-free reference: (n, D) -> (n, D).
  RowMatrix<T> forward_reference(const RowMatrix<T>& xn) const {
    const long n = xn.rows();
    RowMatrix<T> h13(n, w13_.n_out_padded());  // (n, 2F padded)
    matmul(xn.data(), xn.cols(), n, w13_, h13.data(), h13.cols());
    RowMatrix<T> hmid(n, hidden_dim_);         // (n, F)
    gate(h13.data(), h13.cols(), n, hmid.data(), hmid.cols());
    RowMatrix<T> out(n, w2_.n_out_padded());
    matmul(hmid.data(), hmid.cols(), n, w2_, out.data(), out.cols());
    return out.leftCols(d_model_);
  }

 private:
  // hmid[m][i] = act(gate[m][i]) * up[m][i]
  void gate(const T* h13, long ld13, long M, T* hmid, long ldm) const {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (M * hidden_dim_ >= detail::kParallelElements)
#endif
    for (long m = 0; m < M; ++m) {
      const T* g = h13 + m * ld13;
      gated_array(act_, g, g + up_col_, hmid + m * ldm, hmid + m * ldm, hidden_dim_);
    }
  }

  long d_model_ = 0, hidden_dim_ = 0;
  Activation act_ = Activation::kSilu;  // SiLU (SwiGLU) or GELU tanh (GeGLU)
  PackedMatrix<T> w13_;  // (2F, D)
  PackedMatrix<T> w2_;   // (D, F)
  long up_col_ = 0;      // first column of the up projection in a w13 product row
};

}  // namespace kvd
