// Moved to <kvdecode/matmul/fast_int8.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/matmul/fast_int8.hpp"
