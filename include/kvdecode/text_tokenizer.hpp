// Moved to <kvdecode/text/text_tokenizer.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/text/text_tokenizer.hpp"
