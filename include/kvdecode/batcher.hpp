// Moved to <kvdecode/generate/batcher.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/generate/batcher.hpp"
