// Moved to <kvdecode/load/model_loader.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/load/model_loader.hpp"
