// Moved to <kvdecode/generate/generate.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/generate/generate.hpp"
