// What the compiler flags of this translation unit let the kernels use: every
// ISA capability macro of kvdecode is defined here, from the compiler's own
// predefined macros (-march, -mavx2, ...), and nowhere else. A kernel file tests
// these names, never the compiler's, so that one table says which code a build
// holds. None of them changes a result: each path gives the same bits.
//
//   KVDECODE_VEC_AVX512        AVX-512 F: Vec16 is one zmm register (simd.hpp, exp.hpp)
//   KVDECODE_VEC_AVX2          AVX2+FMA: Vec16 is two ymm registers
//   KVDECODE_VEC_F16C          F16C: f16 weights convert in vector registers
//   KVDECODE_VEC_NEON          aarch64 Advanced SIMD (every armv8-a CPU): Vec16 is four
//                              q registers of float (eight of double), exp.hpp's
//                              vector form; f16 and bf16 convert in registers
//   KVDECODE_QUANT_AVX512      AVX-512 F+BW+VL: the 16-lane block-type decoders
//   KVDECODE_QUANT_FUSED       ... and their fused small-M tiles (not in sanitized
//                              builds, which define KVDECODE_NO_FUSED_QUANT)
//   KVDECODE_QUANT_AVX2        AVX2+FMA+F16C: the 8-lane decoders
//   KVDECODE_QUANT_FUSED_AVX2  ... and their fused tiles (not with KVDECODE_NO_FUSED_QUANT)
//   KVDECODE_QUANT_NEON        aarch64 Advanced SIMD: the 4-lane block-type decoders
//   KVDECODE_QUANT_FUSED_NEON  ... and their fused tiles (not with KVDECODE_NO_FUSED_QUANT)
//   KVDECODE_FAST_AVX2         the int8 fast mode's AVX2 tiles (fast_int8.hpp)
//   KVDECODE_FAST_VNNI         ... with vpdpbusd (AVX512-VNNI+VL or AVX-VNNI)
//   KVDECODE_FAST_PLANES_512   ... and 512-bit byte planes (AVX512-VNNI+BW)
//   KVDECODE_FAST_TILES_512    ... and 512-bit small-M tiles over whole panels
//                              (AVX512-VNNI+F+BW+VL)
//   KVDECODE_FAST_BYTES_512    ... q8_0's among them (AVX512-VBMI's vpermb)
//   KVDECODE_FAST_NEON         the int8 fast mode's NEON tiles (aarch64; fast_tiles_neon.hpp)
//   KVDECODE_FAST_DOTPROD      ... with sdot (__ARM_FEATURE_DOTPROD: armv8.2-a+dotprod and later);
//                              without, smull / smlal and sadalp (armv8-a)
//   KVDECODE_FAST_I8MM         ... and smmla for pairs of rows (__ARM_FEATURE_MATMUL_INT8:
//                              +i8mm, armv8.6-a and later; with KVDECODE_FAST_DOTPROD)
//   KVDECODE_FAST_BF16         the bf16 fast mode for 16-bit weights (AVX512-BF16+BW+F)
//   KVDECODE_HAS_CPUID         cpuid is available to detect the running CPU
//
// Compiler attributes the kernels need are here too: KVD_ALWAYS_INLINE and
// KVDECODE_GCC_NOIPA.
#pragma once

#if defined(__AVX512F__)
#define KVDECODE_VEC_AVX512 1
#endif
#if defined(__AVX2__) && defined(__FMA__)
#define KVDECODE_VEC_AVX2 1
#endif
#if defined(__F16C__)
#define KVDECODE_VEC_F16C 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define KVDECODE_VEC_NEON 1
#define KVDECODE_QUANT_NEON 1
#define KVDECODE_FAST_NEON 1
#if defined(__ARM_FEATURE_DOTPROD)
#define KVDECODE_FAST_DOTPROD 1
#if defined(__ARM_FEATURE_MATMUL_INT8)
#define KVDECODE_FAST_I8MM 1
#endif
#endif
#if !defined(KVDECODE_NO_FUSED_QUANT)
#define KVDECODE_QUANT_FUSED_NEON 1
#endif
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define KVDECODE_QUANT_AVX512 1
#if !defined(KVDECODE_NO_FUSED_QUANT)
#define KVDECODE_QUANT_FUSED 1
#endif
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KVDECODE_QUANT_AVX2 1
#define KVDECODE_FAST_AVX2 1
#if !defined(KVDECODE_NO_FUSED_QUANT)
#define KVDECODE_QUANT_FUSED_AVX2 1
#endif
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define KVDECODE_FAST_VNNI 1
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define KVDECODE_FAST_PLANES_512 1
#if defined(KVDECODE_QUANT_AVX512)
#define KVDECODE_FAST_TILES_512 1
#if defined(__AVX512VBMI__)
#define KVDECODE_FAST_BYTES_512 1
#endif
#endif
#endif
#endif
#endif

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512F__)
#define KVDECODE_FAST_BF16 1
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVDECODE_HAS_CPUID 1
#endif

// Forces inlining where GCC's heuristics give up: a sub-block loop of 32 values
// unrolled through static_for, left as a call, keeps the tile's partial sums in
// memory (4x slower; seen for the AVX2 q8_0, q4_0 and q5_0 tiles of 2 and 4 rows).
#if defined(__GNUC__) || defined(__clang__)
#define KVD_ALWAYS_INLINE __attribute__((always_inline))
#else
#define KVD_ALWAYS_INLINE
#endif

// GCC 12 at -O2 miscompiles the panel dequantization for q3_K and q5_K (their
// blocks came out as zeros; -O1, -O3 and -O2 -fno-ipa-sra were right; found by
// building the tests at -O2, tests/quant_matrix_test.cpp): noipa keeps
// interprocedural optimisation off these functions.
#if defined(__GNUC__) && !defined(__clang__)
#define KVDECODE_GCC_NOIPA __attribute__((noipa))
#else
#define KVDECODE_GCC_NOIPA
#endif
