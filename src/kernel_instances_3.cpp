// The project's programs compile the matmul kernels once (see
// include/kvdecode/detail/kernel_instances.hpp): instance 3 of 9.
#define KVDECODE_KERNEL_INSTANCES_PART 3
#include "kvdecode/kernel_instances.hpp"
