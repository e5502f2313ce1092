// Moved to <kvdecode/convert/quantize.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/convert/quantize.hpp"
