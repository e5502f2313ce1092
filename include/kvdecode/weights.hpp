// Moved to <kvdecode/weights/model_weights.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/weights/model_weights.hpp"
