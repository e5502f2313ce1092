// The project's programs compile the matmul kernels once (see
// include/kvdecode/detail/kernel_instances.hpp): instance 9 of 9.
#define KVDECODE_KERNEL_INSTANCES_PART 9
#include "kvdecode/kernel_instances.hpp"
