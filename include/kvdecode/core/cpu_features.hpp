// What the running x86-64 CPU can execute, read with cpuid and xgetbv, for the
// kernel dispatch (dispatch.hpp). A feature counts only when the operating
// system also saves its registers (the OSXSAVE / XCR0 bits): a CPU with AVX-512
// under a kernel that does not save zmm state cannot run AVX-512 code.
//
// The levels are the x86-64 psABI's micro-architecture levels, as GCC and clang
// name them in -march=x86-64-v2 ... -v4, plus the two AVX-512 extensions that
// kvdecode's fast mode uses. A level is supported when every feature its -march
// lets the compiler use is present, so code built for it cannot meet an illegal
// instruction.
#pragma once

#include <cstdint>

#include "kvdecode/core/isa.hpp"

#if defined(KVDECODE_HAS_CPUID)
#include <cpuid.h>
#endif

namespace kvd::detail {

/// The x86-64 features kvdecode's dispatch levels need (false on other CPUs).
struct CpuFeatures {
  bool sse3 = false, ssse3 = false, sse41 = false, sse42 = false, popcnt = false, cx16 = false, lahf = false;  // v2
  bool avx = false, avx2 = false, bmi1 = false, bmi2 = false, f16c = false, fma = false, lzcnt = false,
       movbe = false, xsave = false;                                                                           // v3
  bool avx512f = false, avx512bw = false, avx512cd = false, avx512dq = false, avx512vl = false;                // v4
  bool avx512vnni = false, avx512bf16 = false;  // the fast mode's int8 and bf16 dot products
  bool avxvnni = false;  // the int8 dot product on 256-bit vectors without AVX-512 (Alder Lake and later)
  /// AVX-512 executed as two 256-bit halves (AMD family 0x19, Zen 4): it shapes the
  /// fast mode's tiles (fast_tiles_512.hpp), never what they compute.
  bool avx512_halves = false;

  bool x86_64_v2() const { return sse3 && ssse3 && sse41 && sse42 && popcnt && cx16 && lahf; }
  bool x86_64_v3() const { return x86_64_v2() && avx && avx2 && bmi1 && bmi2 && f16c && fma && lzcnt && movbe && xsave; }
  bool x86_64_v4() const { return x86_64_v3() && avx512f && avx512bw && avx512cd && avx512dq && avx512vl; }
};

/// Reads the running CPU's features. Never fails: on a CPU without cpuid (or not
/// x86-64) every feature is false.
inline CpuFeatures read_cpu_features() {
  CpuFeatures f;
#if defined(KVDECODE_HAS_CPUID)
  unsigned a = 0, b = 0, c = 0, d = 0;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 1) return f;
  __cpuid(0, a, b, c, d);
  const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
  __cpuid(1, a, b, c, d);
  const unsigned base_family = (a >> 8) & 0xfu;
  const unsigned family = base_family == 0xfu ? base_family + ((a >> 20) & 0xffu) : base_family;
  f.sse3 = c & (1u << 0);
  f.ssse3 = c & (1u << 9);
  f.fma = c & (1u << 12);
  f.cx16 = c & (1u << 13);
  f.sse41 = c & (1u << 19);
  f.sse42 = c & (1u << 20);
  f.movbe = c & (1u << 22);
  f.popcnt = c & (1u << 23);
  f.xsave = c & (1u << 26);
  const bool osxsave = c & (1u << 27);
  f.avx = c & (1u << 28);
  f.f16c = c & (1u << 29);
  // XCR0: the register state the operating system saves on a context switch.
  std::uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<std::uint64_t>(hi) << 32) | lo;
  }
  const bool ymm_saved = (xcr0 & 0x6) == 0x6;    // SSE and AVX state
  const bool zmm_saved = (xcr0 & 0xe6) == 0xe6;  // and opmask, ZMM_Hi256, Hi16_ZMM
  if (!ymm_saved) f.avx = f.fma = f.f16c = false;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned max_sub = a;
    f.bmi1 = b & (1u << 3);
    f.avx2 = ymm_saved && (b & (1u << 5));
    f.bmi2 = b & (1u << 8);
    f.avx512f = zmm_saved && (b & (1u << 16));
    f.avx512dq = zmm_saved && (b & (1u << 17));
    f.avx512cd = zmm_saved && (b & (1u << 28));
    f.avx512bw = zmm_saved && (b & (1u << 30));
    f.avx512vl = zmm_saved && (b & (1u << 31));
    f.avx512vnni = zmm_saved && (c & (1u << 11));
    f.avx512_halves = amd && family == 0x19 && f.avx512f;
    if (max_sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avxvnni = ymm_saved && (a & (1u << 4));
      f.avx512bf16 = zmm_saved && (a & (1u << 5));
    }
  }
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000u, nullptr)) >= 0x80000001u) {  // int in clang's cpuid.h, unsigned in GCC's
    __cpuid(0x80000001u, a, b, c, d);
    f.lahf = c & (1u << 0);
    f.lzcnt = c & (1u << 5);
  }
#endif
  return f;
}

/// read_cpu_features(), read once.
inline const CpuFeatures& cpu_features() {
  static const CpuFeatures f = read_cpu_features();
  return f;
}

}  // namespace kvd::detail
