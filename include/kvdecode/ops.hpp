// Moved to <kvdecode/model/ops.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/model/ops.hpp"
