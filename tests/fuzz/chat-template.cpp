// Fuzz target: chat templates (chat_template.hpp, chat/jinja.hpp), which come from
// downloaded files (tokenizer_config.json, GGUF tokenizer.chat_template). The input is
// a template source, optionally followed by a NUL byte and a JSON list of
// {"role", "content"} messages (a fixed conversation otherwise). Parse, then render
// with and without add_generation_prompt, under small limits so that every input ends
// quickly: a TemplateError (or any kvd::Error) is a clean rejection; a crash, hang,
// leak, sanitizer report or other exception is a finding. So is a slow unit: every
// operation charges its work against max_steps (200,000 here, a few milliseconds), so
// an input that takes over kSlowUnitSeconds found work that escapes the budget.
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "kvdecode/chat/chat_template.hpp"

namespace {

constexpr double kSlowUnitSeconds = 2;  // generous: sanitizers slow rendering about tenfold

std::vector<kvd::ChatMessage> messages_from(const std::string& json) {
  std::vector<kvd::ChatMessage> out;
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);  // no exceptions
  if (j.is_discarded() || !j.is_array()) return out;
  for (const auto& m : j) {
    if (!m.is_object()) continue;
    const auto r = m.find("role"), c = m.find("content");
    if (r == m.end() || c == m.end() || !r->is_string() || !c->is_string()) continue;
    out.push_back({r->get<std::string>(), c->get<std::string>()});
    if (out.size() >= 64) break;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  const char* nul = static_cast<const char*>(std::memchr(bytes, '\0', size));
  const std::string source(bytes, nul ? static_cast<std::size_t>(nul - bytes) : size);
  std::vector<kvd::ChatMessage> messages;
  if (nul) messages = messages_from(std::string(nul + 1, bytes + size));
  else messages = {{"system", "Be brief."}, {"user", "Hi <b>\n"}, {"assistant", "<think>x</think>\n\nHello."},
                   {"user", "Bye"}};
  kvd::TemplateLimits lim;
  lim.max_source_bytes = 1 << 16;
  lim.max_output_bytes = 1 << 20;
  lim.max_built_bytes = 1 << 23;
  lim.max_steps = 200000;
  lim.max_loop_iterations = 20000;
  const auto start = std::chrono::steady_clock::now();
  kvd_fuzz::run([&] {
    kvd::ChatTemplate t = kvd::ChatTemplate::parse(source, "fuzz chat template", lim);
    t.set_limits(lim);
    t.set_special_tokens("<s>", "</s>");
    for (bool gen : {true, false}) {
      const std::string out = t.render(messages, gen);
      if (out.size() > lim.max_output_bytes) {
        std::fprintf(stderr, "FINDING: %zu bytes rendered, over the limit of %llu\n", out.size(),
                     static_cast<unsigned long long>(lim.max_output_bytes));
        std::abort();
      }
    }
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (seconds > kSlowUnitSeconds) {
    std::fprintf(stderr, "FINDING: slow unit: %.2f s, over %.0f s under a budget of %llu steps\n", seconds,
                 kSlowUnitSeconds, static_cast<unsigned long long>(lim.max_steps));
    std::abort();
  }
  return 0;
}
