// Moved to <kvdecode/text/bpe_tokenizer.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/text/bpe_tokenizer.hpp"
