// Moved to <kvdecode/core/config.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/core/config.hpp"
