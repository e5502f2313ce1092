// Moved to <kvdecode/matmul/dispatch.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/matmul/dispatch.hpp"
