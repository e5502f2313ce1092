// Moved to <kvdecode/model/attention.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/model/attention.hpp"
