// Moved to <kvdecode/generate/conversation.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/generate/conversation.hpp"
