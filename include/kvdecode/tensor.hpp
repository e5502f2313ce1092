// Moved to <kvdecode/weights/weight_matrix.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/weights/weight_matrix.hpp"
