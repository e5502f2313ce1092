// Moved to <kvdecode/matmul/matmul.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/matmul/matmul.hpp"
