// Moved to <kvdecode/io/load_options.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/io/load_options.hpp"
