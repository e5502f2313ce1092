// Moved to <kvdecode/cache/planner.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/cache/planner.hpp"
