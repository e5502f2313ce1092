// What this build computes with: the vector width of the kernels (the ISA level
// the compiler flags allowed) and which optional paths are compiled in. Programs
// print it in their load line and in --json; the golden-bits test names it when a
// build's logits differ.
//
// None of this changes a default-mode result: every level gives the same bits
// (core/simd.hpp). It decides speed, and which fast-mode variants exist
// (docs/cpus.md says which of them agree across CPUs).
#pragma once

#include <string>

#include "kvdecode/matmul/matmul.hpp"

namespace kvd {

/// The kernels this program runs, as compiled (see build_info()).
struct BuildInfo {
  const char* isa = "scalar";  ///< the kernels' vectors: "avx512", "avx2", "neon" (aarch64) or "scalar" (portable)
  bool avx2_quant = false;     ///< the AVX2 block-type decoders (default mode and fast mode)
  bool fused_quant = false;    ///< the fused small-M quantized tiles (left out of sanitized builds)
  bool fast_int8_avx2 = false; ///< the int8 fast mode (--fast-matmul) of block types runs AVX2 tiles (else a portable loop, same bits)
  bool vnni = false;           ///< its dot products use VNNI (vpdpbusd)
  bool fast_int8_neon = false; ///< the int8 fast mode of block types runs NEON tiles (aarch64)
  bool dotprod = false;        ///< their dot products use sdot (armv8.2-a+dotprod), else smull / sadalp
  bool i8mm = false;           ///< ... and pairs of rows smmla (+i8mm)
  bool fast_bf16 = false;      ///< the bf16 fast mode for f16/bf16 weights (AVX512-BF16)
  /// With KVDECODE_DISPATCH (dispatch.hpp): the level picked for this CPU, then every
  /// level and why one was passed over; the fields above are the picked level's.
  /// Empty in a build without dispatch.
  std::string dispatch;

  /// One line, e.g. "avx512 (vnni, bf16, fused)", "neon (dotprod, fused)" or "scalar (fused, portable fast mode)".
  std::string summary() const {
    std::string s = isa, extra;
    auto add = [&](bool on, const char* name) {
      if (on) extra += (extra.empty() ? "" : ", ") + std::string(name);
    };
    add(vnni, "vnni");
    add(dotprod, "dotprod");
    add(i8mm, "i8mm");
    add(fast_bf16, "bf16");
    add(fused_quant, "fused");
    if (!fast_int8_avx2 && !fast_int8_neon) add(true, "portable fast mode");
    if (!extra.empty()) s += " (" + extra + ")";
    return dispatch.empty() ? s : s + ", dispatch " + dispatch;
  }
};

/// What the including translation unit's flags compiled, or with KVDECODE_DISPATCH
/// what the level picked for this CPU runs (the pick is made here if no product
/// made it yet). Throws ConfigError only with KVDECODE_DISPATCH, when the
/// environment's KVDECODE_MAX_ISA names no level.
inline BuildInfo build_info() {
  BuildInfo b;
#if defined(KVDECODE_DISPATCH) && !defined(KVDECODE_DISPATCH_LEVEL)
  const detail::DispatchChoice& c = detail::dispatch(detail::kDispatchLayout);
  b.dispatch = c.name + " [" + c.levels + "]";
  if (const kvd_isa::LevelKernels* k = c.kernels) {
    kvd_isa::LevelInfo i{};
    k->describe(&i);
    b.isa = i.isa;
    b.avx2_quant = i.avx2_quant;
    b.fused_quant = i.fused_quant;
    b.fast_int8_avx2 = i.fast_int8_avx2;
    b.vnni = i.vnni;
    b.fast_bf16 = i.fast_bf16;
    return b;
  }
#endif
  b.isa = detail::kSimdName;
#if defined(KVDECODE_QUANT_AVX2)
  b.avx2_quant = true;
#endif
#if defined(KVDECODE_QUANT_FUSED) || defined(KVDECODE_QUANT_FUSED_AVX2) || defined(KVDECODE_QUANT_FUSED_NEON)
  b.fused_quant = true;
#endif
#if defined(KVDECODE_FAST_AVX2)
  b.fast_int8_avx2 = true;
#endif
#if defined(KVDECODE_FAST_VNNI)
  b.vnni = true;
#endif
#if defined(KVDECODE_FAST_NEON)
  b.fast_int8_neon = true;
#endif
#if defined(KVDECODE_FAST_DOTPROD)
  b.dotprod = true;
#endif
#if defined(KVDECODE_FAST_I8MM)
  b.i8mm = true;
#endif
#if defined(KVDECODE_FAST_BF16)
  b.fast_bf16 = true;
#endif
  return b;
}

}  // namespace kvd
