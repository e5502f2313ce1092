// Moved to <kvdecode/generate/prompt_cache.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/generate/prompt_cache.hpp"
