// Opt-in wall-clock breakdown of a forward pass by kernel, for the prefill
// profile (bench/prefill_bench.cpp). Off unless a program installs a
// PhaseTimes with set_phase_profile(); then every PhaseScope adds its wall time
// to its phase, and the prefill matmul adds, per thread, the time spent copying
// input rows and the time spent waiting for the other threads at its end.
// Off, a scope costs one load and one branch. Timing never changes a result.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvd {
namespace detail {

/// What a forward pass spends its time on (the rows of the profile table).
enum class Phase : int {
  kEmbed = 0,     ///< token embedding lookup
  kNorm,          ///< the final RMSNorm (the blocks' run inside their products, see below)
  kQkv,           ///< q|k|v projection (matmul; with the residual add and RMSNorm of its input rows)
  kRope,          ///< bias, q/k norm and RoPE (the reference path; the cached one does it in kAttention)
  kCacheWrite,    ///< (unused since it joined kAttention)
  kAttention,     ///< bias, q/k norm, RoPE and k, v into the cache; scores, softmax, weighted sums
  kWo,            ///< attention output projection (matmul)
  kResidual,      ///< the last block's pending residual add
  kW13,           ///< gate|up projection (matmul; with the residual add and RMSNorm of its input rows)
  kGate,          ///< (unused since SwiGLU joined kW2)
  kW2,            ///< down projection (matmul; with the SwiGLU of its input rows)
  kClassifier,    ///< logits (matmul)
  kCount
};

inline const char* phase_name(Phase p) {
  static const char* const kNames[] = {"embedding", "norms", "QKV", "RoPE/bias", "cache write", "attention",
                                       "O", "residual", "gate/up", "SwiGLU", "down", "classifier"};
  return kNames[static_cast<int>(p)];
}

/// Accumulated seconds per phase, plus what the prefill matmul reports from
/// inside its parallel region (summed over threads, so divide by the thread count).
struct PhaseTimes {
  double seconds[static_cast<int>(Phase::kCount)] = {};
  double prologue_thread_seconds = 0;  ///< RowPrologues run inside it (residual adds, RMSNorms, SwiGLU)
  double pack_thread_seconds = 0;      ///< copying input rows into packed buffers
  double wait_thread_seconds = 0;  ///< a thread done with its share, waiting for the others
  void clear() { *this = PhaseTimes(); }
};

/// The installed profile, or nullptr (off, the default).
inline PhaseTimes*& phase_profile() {
  static PhaseTimes* p = nullptr;
  return p;
}
/// Installs (or, with nullptr, removes) the profile every later forward pass adds to.
/// Not thread-safe against a running forward pass.
inline void set_phase_profile(PhaseTimes* p) { phase_profile() = p; }

inline double profile_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Adds the wall time of its lifetime to phase p when a profile is installed.
class PhaseScope {
 public:
  explicit PhaseScope(Phase p) : p_(p), t_(phase_profile() ? profile_now() : 0) {}
  ~PhaseScope() {
    if (PhaseTimes* pt = phase_profile()) pt->seconds[static_cast<int>(p_)] += profile_now() - t_;
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase p_;
  double t_;
};

}  // namespace detail
}  // namespace kvd
