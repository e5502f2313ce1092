// The project's programs compile the matmul kernels once (see
// include/kvdecode/matmul/instances_list.hpp): instance 10 of 10.
#define KVDECODE_KERNEL_INSTANCES_PART 10
#include "kvdecode/matmul/kernel_instances.hpp"
