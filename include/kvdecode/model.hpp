// Moved to <kvdecode/model/model.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/model/model.hpp"
