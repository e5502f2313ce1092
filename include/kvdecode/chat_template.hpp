// Moved to <kvdecode/chat/chat_template.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/chat/chat_template.hpp"
