// Moved to <kvdecode/matmul/kernel_instances.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/matmul/kernel_instances.hpp"
