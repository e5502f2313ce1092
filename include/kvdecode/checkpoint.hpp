// Moved to <kvdecode/io/checkpoint.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/io/checkpoint.hpp"
