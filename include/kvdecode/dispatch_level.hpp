// Moved to <kvdecode/matmul/dispatch_level.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/matmul/dispatch_level.hpp"
