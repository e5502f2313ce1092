// One binary for every x86-64 CPU: the matmul kernels compiled for several ISA
// levels, the best one the running CPU supports picked at the first product.
//
// Why this is safe here and not elsewhere: every level computes each output with
// the same sequence of float operations (the reduction-order rule, dense_kernels.hpp),
// so the pick changes the speed, never a bit of a default-mode result. In the fast
// mode, the int8 paths agree across levels too; the bf16 path exists only on the
// level with AVX512-BF16 (docs/cpus.md).
//
// How a program uses it (the project's CMake does all of this with
// -DKVDECODE_DISPATCH=ON):
//   - compile every translation unit with -DKVDECODE_DISPATCH and the baseline
//     flags the binary must run with (for example -march=x86-64);
//   - for each row of KVDECODE_DISPATCH_LEVELS below, compile one .cpp file that
//     defines KVDECODE_DISPATCH_LEVEL to the row's id and includes
//     <kvdecode/matmul/dispatch_level.hpp>, with the row's flags added;
//   - link them all. Link the levels after the program's own objects (a static
//     library does that), so that the baseline's copies of shared inline code are
//     the ones kept.
// The environment variable KVDECODE_MAX_ISA caps the pick at a level's name (or
// "x86-64": the baseline), to compare levels on one machine.
//
// Each level's translation units rename namespace kvd (dispatch_level.hpp), so the
// levels' kernels are distinct symbols that never merge with the baseline's. Only
// the plain struct LevelKernels below crosses between them, in namespace kvd_isa,
// which no level renames; its entries take the library's objects by pointer, and
// the levels' layout signature must equal the baseline's (else the level is left
// out, and the report says why).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "kvdecode/core/cpu_features.hpp"
#include "kvdecode/error.hpp"

#if defined(KVDECODE_DISPATCH) && !defined(__x86_64__)
#error "KVDECODE_DISPATCH picks among x86-64 levels; build without it on other CPUs"
#endif

// The dispatch levels, lowest first: X(id, name, flags). CMake reads this table
// (CMakeLists.txt) to compile each level; the flags are added to the baseline's.
// A level is picked only when the CPU has every feature its flags let the
// compiler use (LevelKernels::needs, computed from the level's own macros). No
// code of a level runs before that: its files have no static initializers.
#define KVDECODE_DISPATCH_LEVELS(X)                                 \
  X(x86_64_v3, "x86-64-v3", "-march=x86-64-v3")                     \
  X(x86_64_v3_vnni, "x86-64-v3+vnni", "-march=x86-64-v3 -mavxvnni") \
  X(x86_64_v4, "x86-64-v4", "-march=x86-64-v4")                     \
  X(x86_64_v4_vnni_bf16, "x86-64-v4+vnni+bf16", "-march=x86-64-v4 -mavx512vnni -mavx512bf16")

namespace kvd_isa {

/// Bumped whenever LevelKernels or the entries' signatures change.
inline constexpr std::uint32_t kAbi = 2;

/// What a level's kernels are (as BuildInfo says of a build).
struct LevelInfo {
  const char* isa;  ///< its kernels' vectors: "avx512", "avx2" or "scalar"
  bool avx2_quant, fused_quant, fast_int8_avx2, vnni, fast_bf16;
};

/// What one level exports. Plain data, constant-initialized (no code of the level
/// runs to make it): both sides read it whatever their flags, and the baseline
/// reads abi, layout and needs before it knows whether the CPU has the level.
/// The functions may be called only once the level is picked.
struct LevelKernels {
  std::uint32_t abi;     ///< kAbi of the level
  std::uint64_t layout;  ///< the level's detail::kDispatchLayout (matmul.hpp; must equal the baseline's)
  std::uint32_t needs;   ///< the detail::kCpu* bits of the features the level's code may use
  /// kvd::matmul on float and double: w is a `const PackedMatrix<T>*`, pre a
  /// `const RowPrologue*`, profile a `detail::PhaseTimes*` (or null).
  void (*matmul_f32)(const float* x, long ldx, long M, const void* w, float* y, long ldy, const void* pre,
                     void* profile);
  void (*matmul_f64)(const double* x, long ldx, long M, const void* w, double* y, long ldy, const void* pre,
                     void* profile);
  /// The level's float-order probe (core/simd.hpp), run once the CPU is known to
  /// have the level: false if its flags reorder float sums.
  bool (*sums_keep_order)();
  void (*describe)(LevelInfo* out);  ///< fills *out
};

#define KVDECODE_DISPATCH_DECLARE_(id, name, flags) const LevelKernels* level_##id();
KVDECODE_DISPATCH_LEVELS(KVDECODE_DISPATCH_DECLARE_)
#undef KVDECODE_DISPATCH_DECLARE_

}  // namespace kvd_isa

namespace kvd::detail {

/// The CPU features as bits, for LevelKernels::needs. Compared within one binary
/// only, never stored.
inline constexpr std::uint32_t kCpuV2 = 1u << 0;          ///< x86-64-v2 (SSE4.2, POPCNT, ...)
inline constexpr std::uint32_t kCpuV3 = 1u << 1;          ///< x86-64-v3 (AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE)
inline constexpr std::uint32_t kCpuV4 = 1u << 2;          ///< x86-64-v4 (AVX512 F, BW, CD, DQ, VL)
inline constexpr std::uint32_t kCpuAvx512Vnni = 1u << 3;  ///< AVX512-VNNI
inline constexpr std::uint32_t kCpuAvx512Bf16 = 1u << 4;  ///< AVX512-BF16
inline constexpr std::uint32_t kCpuAvxVnni = 1u << 5;     ///< AVX-VNNI (vpdpbusd on 256-bit vectors, VEX-encoded)

/// The bits of a running CPU's features.
inline std::uint32_t cpu_feature_bits(const CpuFeatures& f) {
  return (f.x86_64_v2() ? kCpuV2 : 0u) | (f.x86_64_v3() ? kCpuV3 : 0u) | (f.x86_64_v4() ? kCpuV4 : 0u) |
         (f.avx512vnni ? kCpuAvx512Vnni : 0u) | (f.avx512bf16 ? kCpuAvx512Bf16 : 0u) |
         (f.avxvnni ? kCpuAvxVnni : 0u);
}

/// The bits the including translation unit's flags let the compiler use.
inline constexpr std::uint32_t kCompiledFeatureBits =
#if defined(__SSE4_2__) && defined(__POPCNT__)
    kCpuV2 |
#endif
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__BMI2__)
    kCpuV3 |
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
    kCpuV4 |
#endif
#if defined(__AVX512VNNI__)
    kCpuAvx512Vnni |
#endif
#if defined(__AVX512BF16__)
    kCpuAvx512Bf16 |
#endif
#if defined(__AVXVNNI__)
    kCpuAvxVnni |
#endif
    0u;

/// The pick, made once per process (dispatch()).
struct DispatchChoice {
  const kvd_isa::LevelKernels* kernels = nullptr;  ///< null: the baseline's own kernels
  std::string name = "x86-64";                     ///< the level picked ("x86-64": the baseline)
  std::string levels;                              ///< every level, and why one was passed over
};

/// Picks the best level the CPU runs, at most KVDECODE_MAX_ISA, among those built
/// with the baseline's `layout`. Throws ConfigError if KVDECODE_MAX_ISA names no
/// level (nothing is picked then).
inline DispatchChoice pick_dispatch_level(std::uint64_t layout) {
  struct Row {
    const char* name;
    const kvd_isa::LevelKernels* (*entry)();
  };
#define KVDECODE_DISPATCH_ROW_(id, name, flags) {name, &kvd_isa::level_##id},
  static const Row kRows[] = {KVDECODE_DISPATCH_LEVELS(KVDECODE_DISPATCH_ROW_)};
#undef KVDECODE_DISPATCH_ROW_
  const char* cap = std::getenv("KVDECODE_MAX_ISA");
  const std::string cap_name = cap ? cap : "";
  if (!cap_name.empty() && cap_name != "x86-64") {
    bool known = false;
    std::string names = "x86-64";
    for (const Row& r : kRows) {
      known |= cap_name == r.name;
      names += std::string(", ") + r.name;
    }
    if (!known) throw ConfigError(msg("KVDECODE_MAX_ISA='", cap_name, "' names no dispatch level (", names, ")"));
  }
  const std::uint32_t have = cpu_feature_bits(read_cpu_features());
  DispatchChoice c;
  bool capped = cap_name == "x86-64";
  for (const Row& r : kRows) {
    const kvd_isa::LevelKernels* k = r.entry();
    std::string why;
    if (capped) why = "above KVDECODE_MAX_ISA";
    else if (k->abi != kvd_isa::kAbi || k->layout != layout) why = "built from other headers";
    else if ((k->needs & have) != k->needs) why = "not on this CPU";
    else if (!k->sums_keep_order()) why = "compiled with flags that reorder float sums";
    c.levels += (c.levels.empty() ? "" : ", ") + std::string(r.name) + (why.empty() ? "" : " (" + why + ")");
    if (why.empty()) {
      c.kernels = k;
      c.name = r.name;
    }
    if (cap_name == r.name) capped = true;
  }
  return c;
}

/// The level this process runs, picked at the first call (thread-safe) for the
/// baseline's `layout`. Throws as pick_dispatch_level(), at every call until a pick
/// succeeds.
inline const DispatchChoice& dispatch(std::uint64_t layout) {
  static const DispatchChoice c = pick_dispatch_level(layout);
  return c;
}

}  // namespace kvd::detail
