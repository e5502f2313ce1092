// The requests of OpenAI's HTTP API that kvdecode-server answers, and their
// parser. A body is read through parse_json_text() (io/json.hpp, the one JSON
// entry point) with the limits of RequestLimits, then every field the server uses
// is checked for its type and range. Fields the server does not use are ignored,
// as OpenAI's clients send many. Every refusal is a RequestError (400, or 413 for
// a body over max_body_bytes) naming the JSON field, the value and the limit.
//
// Fields read (OpenAI's names; llama.cpp's extra samplers too):
//   chat:        model, messages [{role, content}], with content a string or a list
//                of {"type": "text", "text"} parts; roles system, developer, user,
//                assistant, tool
//   completions: model, prompt (a string, a list of one string, or token ids)
//   both:        max_tokens, max_completion_tokens, temperature, top_p, top_k, min_p,
//                repeat_penalty, repeat_last_n, seed, stop (string or list), stream,
//                stream_options.include_usage, n (1 only), ignore_eos
//   chat:        logprobs (bool), top_logprobs (integer)
//   completions: logprobs (integer: the number of top log-probabilities)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvdecode/chat/chat_template.hpp"
#include "kvdecode/generate/sampler.hpp"
#include "kvdecode/io/json.hpp"
#include "kvdecode/serve/request_error.hpp"

namespace kvd {

/// Limits on one request body. Each is checked before anything proportional to
/// the value is allocated.
struct RequestLimits {
  std::size_t max_body_bytes = std::size_t{1} << 20;  ///< body size (413 above)
  int max_depth = 16;                ///< levels of JSON arrays and objects
  std::size_t max_messages = 1024;   ///< messages of one chat request
  std::size_t max_stop = 4;          ///< stop strings (OpenAI's limit)
  std::size_t max_stop_bytes = 256;  ///< bytes of one stop string
  int max_top_logprobs = 20;         ///< top_logprobs (OpenAI's limit)
  std::size_t max_prompt_ids = std::size_t{1} << 20;  ///< token ids of a /v1/completions prompt
};

/// What both endpoints share: how much to generate and how to sample.
struct GenerationParams {
  std::optional<int> max_tokens;    ///< max_completion_tokens or max_tokens; empty: up to the context
  SamplerConfig sampler;            ///< temperature (default 1, as OpenAI), top_p, top_k, min_p, repeat_penalty
  bool seed_given = false;          ///< whether the request chose sampler.seed
  std::vector<std::string> stop;    ///< stop strings: the text ends before the first one
  bool stream = false;              ///< answer as server-sent events
  bool include_usage = false;       ///< stream_options.include_usage
  bool logprobs = false;            ///< return each token's log-probability
  int top_logprobs = 0;             ///< and this many alternatives per token
  bool ignore_eos = false;          ///< llama.cpp's: do not stop at the model's end-of-generation ids
};

/// POST /v1/chat/completions.
struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  GenerationParams params;
};

/// POST /v1/completions: a text prompt, or token ids used as they are.
struct CompletionRequest {
  std::string model;
  std::string prompt;          ///< the text, when prompt_ids is empty
  std::vector<int> prompt_ids; ///< the ids, when the prompt was given as ids
  bool prompt_is_ids = false;
  GenerationParams params;
};

namespace detail {

/// Parses a body as JSON under `limits` and checks it is an object. Throws
/// RequestError 413 for a body over max_body_bytes, 400 ("invalid_json") for
/// text that is not JSON or nests deeper than max_depth, 400 ("invalid_type")
/// for a body that is not an object.
inline nlohmann::json parse_request_body(std::string_view body, const RequestLimits& limits) {
  if (body.size() > limits.max_body_bytes)
    throw RequestError(413, "invalid_request_error", "", "request_too_large",
                       msg("request body of ", body.size(), " bytes exceeds the limit of ", limits.max_body_bytes,
                           " bytes (--max-body-bytes)"));
  JsonLimits jl;
  jl.max_bytes = limits.max_body_bytes;
  jl.max_depth = limits.max_depth;
  nlohmann::json j;
  try {
    j = parse_json_text<nlohmann::json>(body, "request body", jl);
  } catch (const FormatError& e) {
    throw bad_request("", "invalid_json", e.what());
  }
  if (!j.is_object()) throw bad_request("", "invalid_type", msg("request body is ", json_type_text(j), ", not a JSON object"));
  return j;
}

/// The field `key` of `obj`, or null when absent (a JSON null counts as absent).
inline const nlohmann::json* request_field(const nlohmann::json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] inline void wrong_type(const std::string& field, const nlohmann::json& v, const char* want) {
  throw bad_request(field, "invalid_type", msg("'", field, "' must be ", want, ", not ", json_type_text(v), " (",
                                               json_value_text(v), ")"));
}

inline bool request_bool(const nlohmann::json& obj, const char* key, bool dflt) {
  const nlohmann::json* v = request_field(obj, key);
  if (!v) return dflt;
  if (!v->is_boolean()) wrong_type(key, *v, "a boolean");
  return v->get<bool>();
}

/// An integer field in [lo, hi]; a float with no fraction is accepted (JavaScript sends 5 as 5).
inline std::optional<long long> request_int(const nlohmann::json& obj, const std::string& key, long long lo, long long hi) {
  const nlohmann::json* v = request_field(obj, key.c_str());
  if (!v) return std::nullopt;
  long long x = 0;
  if (v->is_number_integer()) {
    x = v->get<long long>();
  } else if (v->is_number_unsigned()) {
    const auto u = v->get<unsigned long long>();
    if (u > static_cast<unsigned long long>(hi))
      throw bad_request(key, "invalid_value", msg("'", key, "' = ", u, " is outside [", lo, ", ", hi, "]"));
    x = static_cast<long long>(u);
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!(std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(lo) && d <= static_cast<double>(hi)))
      throw bad_request(key, "invalid_value",
                        msg("'", key, "' = ", json_value_text(*v), " is not an integer in [", lo, ", ", hi, "]"));
    x = static_cast<long long>(d);
  } else {
    wrong_type(key, *v, "an integer");
  }
  if (x < lo || x > hi) throw bad_request(key, "invalid_value", msg("'", key, "' = ", x, " is outside [", lo, ", ", hi, "]"));
  return x;
}

/// A number field in [lo, hi] (lo excluded when open_lo).
inline std::optional<double> request_number(const nlohmann::json& obj, const char* key, double lo, bool open_lo, double hi) {
  const nlohmann::json* v = request_field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(key, *v, "a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || (open_lo && x == lo) || x > hi)
    throw bad_request(key, "invalid_value",
                      msg("'", key, "' = ", json_value_text(*v), " is outside ", open_lo ? "(" : "[", lo, ", ", hi, "]"));
  return x;
}

inline std::string request_string(const nlohmann::json& obj, const char* key) {
  const nlohmann::json* v = request_field(obj, key);
  if (!v) return "";
  if (!v->is_string()) wrong_type(key, *v, "a string");
  return v->get<std::string>();
}

inline GenerationParams parse_generation_params(const nlohmann::json& j, const RequestLimits& limits, bool chat) {
  GenerationParams p;
  constexpr long long kMaxTokens = 1 << 30;
  if (auto v = request_int(j, "max_tokens", 1, kMaxTokens)) p.max_tokens = static_cast<int>(*v);
  if (auto v = request_int(j, "max_completion_tokens", 1, kMaxTokens)) p.max_tokens = static_cast<int>(*v);
  if (auto n = request_int(j, "n", 1, 1 << 20); n && *n != 1)
    throw bad_request("n", "invalid_value", msg("'n' = ", *n, ": this server returns one choice per request (n must be 1)"));
  p.sampler.temperature = 1.0;  // OpenAI's default
  if (auto v = request_number(j, "temperature", 0, false, 2)) p.sampler.temperature = *v;
  if (auto v = request_number(j, "top_p", 0, true, 1)) p.sampler.top_p = *v;
  if (auto v = request_int(j, "top_k", 0, 1 << 30)) p.sampler.top_k = static_cast<int>(*v);
  if (auto v = request_number(j, "min_p", 0, false, 1)) p.sampler.min_p = *v;
  if (auto v = request_number(j, "repeat_penalty", 0, true, 100)) p.sampler.repetition_penalty = *v;
  if (auto v = request_int(j, "repeat_last_n", 0, 1 << 20)) p.sampler.repetition_last_n = static_cast<int>(*v);
  if (auto v = request_int(j, "seed", std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max())) {
    p.sampler.seed = static_cast<std::uint64_t>(*v);
    p.seed_given = true;
  }
  if (const nlohmann::json* s = request_field(j, "stop")) {
    if (s->is_string()) {
      p.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > limits.max_stop)
        throw bad_request("stop", "invalid_value",
                          msg("'stop' has ", s->size(), " strings; the limit is ", limits.max_stop));
      for (std::size_t i = 0; i < s->size(); ++i) {
        if (!(*s)[i].is_string()) wrong_type(msg("stop[", i, "]"), (*s)[i], "a string");
        p.stop.push_back((*s)[i].get<std::string>());
      }
    } else {
      wrong_type("stop", *s, "a string or a list of strings");
    }
    for (std::size_t i = 0; i < p.stop.size(); ++i) {
      if (p.stop[i].empty()) throw bad_request("stop", "invalid_value", msg("'stop' string ", i, " is empty"));
      if (p.stop[i].size() > limits.max_stop_bytes)
        throw bad_request("stop", "invalid_value", msg("'stop' string ", i, " has ", p.stop[i].size(),
                                                       " bytes; the limit is ", limits.max_stop_bytes));
    }
  }
  p.stream = request_bool(j, "stream", false);
  if (const nlohmann::json* so = request_field(j, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", *so, "an object");
    p.include_usage = request_bool(*so, "include_usage", false);
  }
  p.ignore_eos = request_bool(j, "ignore_eos", false);
  if (chat) {
    p.logprobs = request_bool(j, "logprobs", false);
    if (auto v = request_int(j, "top_logprobs", 0, limits.max_top_logprobs)) {
      if (!p.logprobs)
        throw bad_request("top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs': true");
      p.top_logprobs = static_cast<int>(*v);
    }
  } else if (auto v = request_int(j, "logprobs", 0, limits.max_top_logprobs)) {
    p.logprobs = true;
    p.top_logprobs = static_cast<int>(*v);
  }
  return p;
}

inline std::string parse_message_content(const nlohmann::json& content, std::size_t i) {
  const std::string field = msg("messages[", i, "].content");
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(field, content, "a string or a list of text parts");
  std::string text;
  for (std::size_t k = 0; k < content.size(); ++k) {
    const nlohmann::json& part = content[k];
    const std::string pf = msg(field, "[", k, "]");
    if (!part.is_object()) wrong_type(pf, part, "an object {\"type\": \"text\", \"text\": ...}");
    const std::string type = request_string(part, "type");
    if (type != "text")
      throw bad_request(pf + ".type", "invalid_value",
                        msg("'", pf, ".type' = \"", type.substr(0, 40), "\": only \"text\" parts are supported"));
    const nlohmann::json* t = request_field(part, "text");
    if (!t || !t->is_string()) {
      if (t) wrong_type(pf + ".text", *t, "a string");
      throw bad_request(pf + ".text", "missing_field", msg("'", pf, ".text' is missing"));
    }
    text += t->get<std::string>();
  }
  return text;
}

}  // namespace detail

/// The roles a chat message may have.
inline bool is_chat_role(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool";
}

/// Parses and validates a /v1/chat/completions body. Throws RequestError (413 for
/// a body over limits.max_body_bytes, else 400) naming the field and the limit:
/// malformed or too deep JSON, a field of the wrong type or out of range, no
/// messages or more than max_messages, an unknown role, a message without content.
inline ChatRequest parse_chat_request(std::string_view body, const RequestLimits& limits = {}) {
  using namespace detail;
  const nlohmann::json j = parse_request_body(body, limits);
  ChatRequest r;
  r.model = request_string(j, "model");
  const nlohmann::json* m = request_field(j, "messages");
  if (!m) throw bad_request("messages", "missing_field", "'messages' is missing: a chat request needs at least one message");
  if (!m->is_array()) wrong_type("messages", *m, "a list of messages");
  if (m->empty()) throw bad_request("messages", "invalid_value", "'messages' is empty: a chat request needs at least one message");
  if (m->size() > limits.max_messages)
    throw bad_request("messages", "invalid_value",
                      msg("'messages' has ", m->size(), " messages; the limit is ", limits.max_messages));
  for (std::size_t i = 0; i < m->size(); ++i) {
    const nlohmann::json& msg_j = (*m)[i];
    if (!msg_j.is_object()) wrong_type(msg("messages[", i, "]"), msg_j, "an object {\"role\", \"content\"}");
    const nlohmann::json* role = request_field(msg_j, "role");
    if (!role) throw bad_request(msg("messages[", i, "].role"), "missing_field", msg("'messages[", i, "].role' is missing"));
    if (!role->is_string()) wrong_type(msg("messages[", i, "].role"), *role, "a string");
    const std::string role_s = role->get<std::string>();
    if (!is_chat_role(role_s))
      throw bad_request(msg("messages[", i, "].role"), "invalid_value",
                        msg("'messages[", i, "].role' = ", json_value_text(*role),
                            " is not one of system, developer, user, assistant, tool"));
    const nlohmann::json* content = request_field(msg_j, "content");
    if (!content) {
      if (role_s == "assistant" && request_field(msg_j, "tool_calls"))
        throw bad_request(msg("messages[", i, "].tool_calls"), "unsupported", "tool calls are not supported");
      throw bad_request(msg("messages[", i, "].content"), "missing_field",
                        msg("'messages[", i, "].content' is missing"));
    }
    r.messages.push_back({role_s, parse_message_content(*content, i)});
  }
  r.params = parse_generation_params(j, limits, true);
  return r;
}

/// Parses and validates a /v1/completions body: prompt a string (or a list of one
/// string) or a list of token ids in [0, 2^31) (a list of one such list too; range
/// against the vocabulary is checked by the scheduler). Throws RequestError as
/// parse_chat_request() does; a missing, empty or multi-prompt `prompt` is a 400.
inline CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& limits = {}) {
  using namespace detail;
  const nlohmann::json j = parse_request_body(body, limits);
  CompletionRequest r;
  r.model = request_string(j, "model");
  const nlohmann::json* p = request_field(j, "prompt");
  if (!p) throw bad_request("prompt", "missing_field", "'prompt' is missing");
  const nlohmann::json* one = p;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) one = &(*p)[0];
  if (one->is_string()) {
    r.prompt = one->get<std::string>();
    if (r.prompt.empty()) throw bad_request("prompt", "invalid_value", "'prompt' is empty");
  } else if (one->is_array()) {
    if (one->empty()) throw bad_request("prompt", "invalid_value", "'prompt' is an empty list");
    if (one->size() > limits.max_prompt_ids)
      throw bad_request("prompt", "invalid_value",
                        msg("'prompt' has ", one->size(), " token ids; the limit is ", limits.max_prompt_ids));
    r.prompt_is_ids = true;
    r.prompt_ids.reserve(one->size());
    for (std::size_t i = 0; i < one->size(); ++i) {
      const nlohmann::json& t = (*one)[i];
      if (!t.is_number_integer() && !t.is_number_unsigned())
        wrong_type(msg("prompt[", i, "]"), t, t.is_array() || t.is_string() ? "a token id (one prompt per request)" : "a token id");
      const long long id = t.is_number_unsigned() ? static_cast<long long>(std::min<unsigned long long>(
                                                        t.get<unsigned long long>(), 1ull << 40))
                                                  : t.get<long long>();
      if (id < 0 || id > std::numeric_limits<int>::max())
        throw bad_request(msg("prompt[", i, "]"), "invalid_value",
                          msg("'prompt[", i, "]' = ", id, " is not a token id in [0, 2^31)"));
      r.prompt_ids.push_back(static_cast<int>(id));
    }
  } else {
    wrong_type("prompt", *p, "a string or a list of token ids");
  }
  r.params = parse_generation_params(j, limits, false);
  return r;
}

}  // namespace kvd
