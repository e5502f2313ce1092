// Moved to <kvdecode/generate/speculative.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/generate/speculative.hpp"
