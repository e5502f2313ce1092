// The project's programs compile the matmul kernels once (see
// include/kvdecode/matmul/instances_list.hpp): instance 2 of 10.
#define KVDECODE_KERNEL_INSTANCES_PART 2
#include "kvdecode/matmul/kernel_instances.hpp"
