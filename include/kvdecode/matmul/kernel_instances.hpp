// The matmul kernels, compiled once: include this in exactly one .cpp file of a
// program built with KVDECODE_EXTERN_KERNELS (see matmul/instances_list.hpp).
// To compile them in parallel, define KVDECODE_KERNEL_INSTANCES_PART to n in
// file n, for n = 1 .. KVDECODE_KERNEL_INSTANCE_COUNT: each file then
// compiles one instance.
#pragma once

#include "kvdecode/matmul/matmul.hpp"

#define KVDECODE_KERNEL_INSTANCE_CAT(a, b) a##b
#define KVDECODE_KERNEL_INSTANCE_N(n) KVDECODE_KERNEL_INSTANCE_CAT(KVDECODE_KERNEL_INSTANCE_, n)

namespace kvd {
namespace detail {
#if defined(KVDECODE_KERNEL_INSTANCES_PART)
KVDECODE_KERNEL_INSTANCE_N(KVDECODE_KERNEL_INSTANCES_PART)()
#else
KVDECODE_KERNEL_INSTANCES()
#endif
}  // namespace detail
}  // namespace kvd
