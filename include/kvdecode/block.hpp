// Moved to <kvdecode/model/block.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/model/block.hpp"
