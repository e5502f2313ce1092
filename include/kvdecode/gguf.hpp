// Moved to <kvdecode/io/gguf.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/io/gguf.hpp"
