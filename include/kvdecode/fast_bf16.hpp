// Moved to <kvdecode/matmul/fast_bf16.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/matmul/fast_bf16.hpp"
