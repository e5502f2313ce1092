// Moved to <kvdecode/weights/weight_type.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/weights/weight_type.hpp"
