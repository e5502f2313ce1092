// Moved to <kvdecode/cache/paged_cache.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/cache/paged_cache.hpp"
