// Moved to <kvdecode/cache/cache_interface.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/cache/cache_interface.hpp"
