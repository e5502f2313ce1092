// Moved to <kvdecode/matmul/quant_matrix.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/matmul/quant_matrix.hpp"
