// Fuzz target: kvdecode-server's request bodies (serve/openai_request.hpp), which
// come from any client on the network. The first byte picks the endpoint (even:
// /v1/chat/completions, odd: /v1/completions); the rest is the body, parsed under
// small limits. A RequestError (or any kvd::Error) is a clean rejection; a crash,
// leak, sanitizer report, other exception or a parsed request beyond the limits
// is a finding.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fuzz_util.hpp"
#include "kvdecode/serve/openai_request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) == 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  kvd::RequestLimits lim;
  lim.max_body_bytes = 1 << 16;
  lim.max_messages = 64;
  lim.max_prompt_ids = 4096;
  kvd_fuzz::run([&] {
    if (chat) {
      const kvd::ChatRequest r = kvd::parse_chat_request(body, lim);
      if (r.messages.empty() || r.messages.size() > lim.max_messages || r.params.stop.size() > lim.max_stop) {
        std::fprintf(stderr, "FINDING: %zu messages, %zu stop strings accepted\n", r.messages.size(), r.params.stop.size());
        std::abort();
      }
    } else {
      const kvd::CompletionRequest r = kvd::parse_completion_request(body, lim);
      if (r.prompt_ids.size() > lim.max_prompt_ids || (r.prompt_is_ids == r.prompt_ids.empty())) {
        std::fprintf(stderr, "FINDING: %zu prompt ids accepted\n", r.prompt_ids.size());
        std::abort();
      }
    }
  });
  return 0;
}
