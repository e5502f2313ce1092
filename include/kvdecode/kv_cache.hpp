// Moved to <kvdecode/cache/kv_cache.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/cache/kv_cache.hpp"
