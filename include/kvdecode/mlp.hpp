// Moved to <kvdecode/model/mlp.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/model/mlp.hpp"
