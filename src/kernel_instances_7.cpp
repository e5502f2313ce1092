// The project's programs compile the matmul kernels once (see
// include/kvdecode/detail/kernel_instances.hpp): instance 7 of 9.
#define KVDECODE_KERNEL_INSTANCES_PART 7
#include "kvdecode/kernel_instances.hpp"
