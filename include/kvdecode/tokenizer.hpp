// Moved to <kvdecode/text/llama2c_tokenizer.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/text/llama2c_tokenizer.hpp"
