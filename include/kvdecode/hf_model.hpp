// Moved to <kvdecode/io/hf_model.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/io/hf_model.hpp"
