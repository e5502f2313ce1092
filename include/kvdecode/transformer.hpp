// Moved to <kvdecode/model/transformer.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/model/transformer.hpp"
