// Moved to <kvdecode/matmul/build_info.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/matmul/build_info.hpp"
