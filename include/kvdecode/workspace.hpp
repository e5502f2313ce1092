// Moved to <kvdecode/model/workspace.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/model/workspace.hpp"
