// Optional separate compilation of the matmul kernels.
//
// The kernels are templates over compute type, vector implementation and
// storage type, each with dozens of unrolled register tiles; compiling them is
// most of the cost of any translation unit that runs a model (about two
// minutes at -O3). A program with several such files can compile them once:
//
//   - define KVDECODE_EXTERN_KERNELS in every translation unit (for example
//     -DKVDECODE_EXTERN_KERNELS), so that they only declare the instances below;
//   - compile one file that includes <kvdecode/matmul/kernel_instances.hpp>, with the
//     same compiler flags (-march in particular) as the rest of the program.
//
// The result is the same code, so the same bits: this changes where the
// kernels are compiled, never what they compute. A program that does neither
// compiles them inline, as before. The project's own tests, examples and
// benchmarks build this way (CMake target kvdecode_kernel_instances).
#pragma once

#include "kvdecode/matmul/dense_kernels.hpp"  // the templates declared below
#include "kvdecode/matmul/fast_int8.hpp"
#include "kvdecode/matmul/quant_kernels.hpp"

// KVDECODE_KERNEL_INSTANCE_<n>(prefix), n = 1 .. KVDECODE_KERNEL_INSTANCE_COUNT,
// lists every instance that kvd::matmul reaches, for the compute types the
// library runs (float, and double for the oracle and reference paths) on the
// vector implementation detail::Vec16 that the flags select.
// The float quantized product is split in three (the dispatcher, the fused
// small-M tiles, the buffered paths) because it was the longest file to compile
// (131 s at -O3 with GCC 12, as long as the other five together).
#define KVDECODE_KERNEL_INSTANCE_COUNT 10
#define KVDECODE_KERNEL_INSTANCE_1(prefix) \
  prefix template void matmul_panels<float, Vec16<float>, float>(const float*, long, long, const PanelRange<float>&, float*, long, const RowPrologue&);
#define KVDECODE_KERNEL_INSTANCE_2(prefix) \
  prefix template void matmul_panels<float, Vec16<float>, F16Bits>(const float*, long, long, const PanelRange<F16Bits>&, float*, long, const RowPrologue&);
#define KVDECODE_KERNEL_INSTANCE_3(prefix) \
  prefix template void matmul_panels<float, Vec16<float>, BF16Bits>(const float*, long, long, const PanelRange<BF16Bits>&, float*, long, const RowPrologue&);
#define KVDECODE_KERNEL_INSTANCE_4(prefix) \
  prefix template void matmul_panels<double, Vec16<double>, double>(const double*, long, long, const PanelRange<double>&, double*, long, const RowPrologue&);
#define KVDECODE_KERNEL_INSTANCE_5(prefix) \
  prefix template void matmul_quant_with<float, Vec16<float>>(const float*, long, long, const QuantPanels&, float*, long, QuantPath, QuantDequant);
#define KVDECODE_KERNEL_INSTANCE_6(prefix) \
  prefix template void matmul_quant_with<double, Vec16<double>>(const double*, long, long, const QuantPanels&, double*, long, QuantPath, QuantDequant);
#if defined(KVDECODE_QUANT_FUSED)
#define KVDECODE_KERNEL_INSTANCE_7(prefix) \
  prefix template void matmul_quant_fused<float>(const float*, long, long, const float*, long, const QuantPanels&, float*, long, bool);
#else
#define KVDECODE_KERNEL_INSTANCE_7(prefix)
#endif
#define KVDECODE_KERNEL_INSTANCE_8(prefix) \
  prefix template void matmul_quant_small<float, Vec16<float>>(const float*, long, long, const float*, long, const QuantPanels&, float*, long, bool, QuantDequant); \
  prefix template void matmul_quant_large<float, Vec16<float>>(const float*, long, long, const float*, long, const QuantPanels&, float*, long, bool, QuantDequant);
// The AVX2 fused tiles (instance 9) are compiled on AVX-512 builds too, where the
// tests compare them with the other paths; on aarch64 instance 9 is the NEON fused tiles.
#if defined(KVDECODE_QUANT_FUSED_AVX2)
#define KVDECODE_KERNEL_INSTANCE_9(prefix) \
  prefix template void matmul_quant_fused_avx2<float>(const float*, long, long, const float*, long, const QuantPanels&, float*, long, bool);
#elif defined(KVDECODE_QUANT_FUSED_NEON)
#define KVDECODE_KERNEL_INSTANCE_9(prefix) \
  prefix template void matmul_quant_fused_neon<float>(const float*, long, long, const float*, long, const QuantPanels&, float*, long, bool);
#else
#define KVDECODE_KERNEL_INSTANCE_9(prefix)
#endif
// The int8 fast mode's product (fast_int8.hpp: its tiles for every block type):
// compiled inline, about 17 s of GCC 12 at -O3 in every file that runs a model.
// A sanitized tree compiles src/kernel_instances_10.cpp at -O0 (CMakeLists.txt).
#define KVDECODE_KERNEL_INSTANCE_10(prefix) \
  prefix template void matmul_fast_with<void>(const float*, long, long, const QuantPanels&, float*, long, FastPath);
#define KVDECODE_KERNEL_INSTANCES(prefix) \
  KVDECODE_KERNEL_INSTANCE_1(prefix) KVDECODE_KERNEL_INSTANCE_2(prefix) KVDECODE_KERNEL_INSTANCE_3(prefix) \
  KVDECODE_KERNEL_INSTANCE_4(prefix) KVDECODE_KERNEL_INSTANCE_5(prefix) KVDECODE_KERNEL_INSTANCE_6(prefix) \
  KVDECODE_KERNEL_INSTANCE_7(prefix) KVDECODE_KERNEL_INSTANCE_8(prefix) KVDECODE_KERNEL_INSTANCE_9(prefix) \
  KVDECODE_KERNEL_INSTANCE_10(prefix)

#if defined(KVDECODE_EXTERN_KERNELS)
namespace kvd {
namespace detail {
KVDECODE_KERNEL_INSTANCES(extern)
}  // namespace detail
}  // namespace kvd
#endif
