// Moved to <kvdecode/generate/sampler.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/generate/sampler.hpp"
