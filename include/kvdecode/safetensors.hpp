// Moved to <kvdecode/io/safetensors.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/io/safetensors.hpp"
