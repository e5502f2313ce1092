// What this build computes with: the vector width of the kernels (the ISA level
// the compiler flags allowed) and which optional paths are compiled in. Programs
// print it in their load line and in --json; the golden-bits test names it when a
// build's logits differ.
//
// None of this changes a default-mode result: every level gives the same bits
// (detail/simd.hpp). It decides speed, and which fast-mode variants exist
// (docs/cpus.md says which of them agree across CPUs).
#pragma once

#include <string>

#include "kvdecode/kernels.hpp"

namespace kvd {

/// The kernels this program runs, as compiled (see build_info()).
struct BuildInfo {
  const char* isa = "scalar";  ///< the kernels' vectors: "avx512", "avx2" or "scalar" (portable, also NEON builds for now)
  bool avx2_quant = false;     ///< the AVX2 block-type decoders (default mode and fast mode)
  bool fused_quant = false;    ///< the fused small-M quantized tiles (left out of sanitized builds)
  bool fast_int8_avx2 = false; ///< the int8 fast mode (--fast-matmul) of block types runs AVX2 tiles (else a portable loop, same bits)
  bool vnni = false;           ///< its dot products use VNNI (vpdpbusd)
  bool fast_bf16 = false;      ///< the bf16 fast mode for f16/bf16 weights (AVX512-BF16)

  /// One line, e.g. "avx512 (vnni, bf16, fused)" or "scalar (fused, portable fast mode)".
  std::string summary() const {
    std::string s = isa, extra;
    auto add = [&](bool on, const char* name) {
      if (on) extra += (extra.empty() ? "" : ", ") + std::string(name);
    };
    add(vnni, "vnni");
    add(fast_bf16, "bf16");
    add(fused_quant, "fused");
    if (!fast_int8_avx2) add(true, "portable fast mode");
    return extra.empty() ? s : s + " (" + extra + ")";
  }
};

/// What the including translation unit's flags compiled. Never fails.
inline BuildInfo build_info() {
  BuildInfo b;
  b.isa = detail::kSimdName;
#if defined(KVDECODE_QUANT_AVX2)
  b.avx2_quant = true;
#endif
#if defined(KVDECODE_QUANT_FUSED) || defined(KVDECODE_QUANT_FUSED_AVX2)
  b.fused_quant = true;
#endif
#if defined(KVDECODE_FAST_AVX2)
  b.fast_int8_avx2 = true;
#endif
#if defined(KVDECODE_FAST_VNNI)
  b.vnni = true;
#endif
#if defined(KVDECODE_FAST_BF16)
  b.fast_bf16 = true;
#endif
  return b;
}

}  // namespace kvd
