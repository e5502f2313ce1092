// One dispatch level's kernels (dispatch.hpp): include this in a .cpp file
// compiled with the level's flags and KVDECODE_DISPATCH_LEVEL defined to its id,
// for example
//
//   // g++ -O3 -march=x86-64-v3 -DKVDECODE_DISPATCH_LEVEL=x86_64_v3 -c level_v3.cpp
//   #include <kvdecode/matmul/dispatch_level.hpp>
//
// Nothing else may be included before it. Everything the library defines in this
// file lives in namespace kvd_level_<id> (the macro below renames kvd), so no
// inline function compiled here for the level's CPU can stand in for the
// baseline's. The file defines kvd_isa::level_<id>(), the level's entries.
//
// With KVDECODE_EXTERN_KERNELS (as the project builds), the kernel instances of
// the level are compiled in parallel, one per file, like the baseline's
// (matmul/kernel_instances.hpp): define KVDECODE_KERNEL_INSTANCES_PART to n in file n
// for n = 1 .. KVDECODE_KERNEL_INSTANCE_COUNT; such a file holds that instance
// only, and the file without it the entries.
#pragma once

#if !defined(KVDECODE_DISPATCH_LEVEL)
#error "define KVDECODE_DISPATCH_LEVEL to a level id of dispatch.hpp (for example x86_64_v3)"
#endif
#if defined(kvd)
#error "kvdecode/matmul/dispatch_level.hpp must be the only kvdecode header of its file"
#endif

#define KVDECODE_LEVEL_CAT2_(a, b) a##b
#define KVDECODE_LEVEL_CAT_(a, b) KVDECODE_LEVEL_CAT2_(a, b)
#define kvd KVDECODE_LEVEL_CAT_(kvd_level_, KVDECODE_DISPATCH_LEVEL)

#if defined(KVDECODE_KERNEL_INSTANCES_PART)
#include "kvdecode/matmul/kernel_instances.hpp"
#else
#include "kvdecode/matmul/build_info.hpp"
#include "kvdecode/matmul/matmul.hpp"

namespace kvd::detail {

// The level's entries: the same products as kvd::matmul, on this level's kernels.
inline void level_matmul_f32(const float* x, long ldx, long M, const void* w, float* y, long ldy, const void* pre,
                             void* profile) {
  phase_profile() = static_cast<PhaseTimes*>(profile);
  matmul_with<float, Vec16<float>>(x, ldx, M, *static_cast<const PackedMatrix<float>*>(w), y, ldy,
                                   *static_cast<const RowPrologue*>(pre));
}
inline void level_matmul_f64(const double* x, long ldx, long M, const void* w, double* y, long ldy,
                             const void* pre, void* profile) {
  phase_profile() = static_cast<PhaseTimes*>(profile);
  matmul_with<double, Vec16<double>>(x, ldx, M, *static_cast<const PackedMatrix<double>*>(w), y, ldy,
                                     *static_cast<const RowPrologue*>(pre));
}

inline void level_describe(kvd_isa::LevelInfo* out) {
  const BuildInfo b = build_info();
  *out = kvd_isa::LevelInfo{b.isa, b.avx2_quant, b.fused_quant, b.fast_int8_avx2, b.vnni, b.fast_bf16};
}

}  // namespace kvd::detail

namespace kvd_isa {

// Constant-initialized (every member a constant expression): returning it runs no
// code of this level, which may not be safe on the CPU yet.
const LevelKernels* KVDECODE_LEVEL_CAT_(level_, KVDECODE_DISPATCH_LEVEL)() {
  static constexpr LevelKernels k = {kAbi,
                                     kvd::detail::kDispatchLayout,
                                     kvd::detail::kCompiledFeatureBits,
                                     &kvd::detail::level_matmul_f32,
                                     &kvd::detail::level_matmul_f64,
                                     &kvd::detail::float_sums_keep_their_order,
                                     &kvd::detail::level_describe};
  return &k;
}

}  // namespace kvd_isa
#endif

#undef kvd
