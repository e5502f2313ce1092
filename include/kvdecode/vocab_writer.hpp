// Moved to <kvdecode/convert/vocab_writer.hpp>; this forwarding header stays for one version.
#pragma once
#include "kvdecode/convert/vocab_writer.hpp"
