// Moved to <kvdecode/io/model_format.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/io/model_format.hpp"
