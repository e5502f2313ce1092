// Moved to <kvdecode/core/dtype.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/core/dtype.hpp"
