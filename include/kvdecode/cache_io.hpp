// Moved to <kvdecode/cache/cache_io.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/cache/cache_io.hpp"
