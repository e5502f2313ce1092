// Moved to <kvdecode/io/gguf_model.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/io/gguf_model.hpp"
