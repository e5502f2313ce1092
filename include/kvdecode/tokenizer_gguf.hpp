// Moved to <kvdecode/text/tokenizer_gguf.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/text/tokenizer_gguf.hpp"
