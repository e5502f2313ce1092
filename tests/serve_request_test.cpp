// The request parser of kvdecode-server (serve/openai_request.hpp): valid
// requests read every field, and each kind of bad input is refused with a
// RequestError whose status, field and message name what was wrong and the limit.
// Each bad case starts from a valid body with one change.
#include <gtest/gtest.h>

#include <string>

#include "kvdecode/serve/openai_request.hpp"

using namespace kvd;

namespace {

const char* const kChat =
    R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})";

// Parses `body` as a chat request, expecting a refusal; returns it.
RequestError chat_error(const std::string& body, const RequestLimits& limits = {}) {
  try {
    parse_chat_request(body, limits);
  } catch (const RequestError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.substr(0, 200);
  return RequestError(0, "", "", "", "");
}

RequestError completion_error(const std::string& body) {
  try {
    parse_completion_request(body);
  } catch (const RequestError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.substr(0, 200);
  return RequestError(0, "", "", "", "");
}

std::string with(const std::string& extra) {  // kChat plus one more field
  std::string b = kChat;
  b.pop_back();
  return b + ", " + extra + "}";
}

#define EXPECT_MESSAGE_HAS(e, text) EXPECT_NE(std::string((e).what()).find(text), std::string::npos) << (e).what()

}  // namespace

TEST(ServeRequest, ChatReadsEveryField) {
  const ChatRequest r = parse_chat_request(with(
      R"("max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 5, "min_p": 0.1, "repeat_penalty": 1.1,
         "seed": 42, "stop": ["a", "bc"], "stream": true, "stream_options": {"include_usage": true},
         "logprobs": true, "top_logprobs": 2, "n": 1, "unknown_field": {"x": [1]})"));
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "Hi");
  EXPECT_EQ(*r.params.max_tokens, 7);
  EXPECT_EQ(r.params.sampler.temperature, 0.5);
  EXPECT_EQ(r.params.sampler.top_p, 0.9);
  EXPECT_EQ(r.params.sampler.top_k, 5);
  EXPECT_EQ(r.params.sampler.min_p, 0.1);
  EXPECT_EQ(r.params.sampler.repetition_penalty, 1.1);
  EXPECT_EQ(r.params.sampler.seed, 42u);
  EXPECT_TRUE(r.params.seed_given);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.params.stream);
  EXPECT_TRUE(r.params.include_usage);
  EXPECT_TRUE(r.params.logprobs);
  EXPECT_EQ(r.params.top_logprobs, 2);
}

TEST(ServeRequest, DefaultsAndContentParts) {
  const ChatRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
          "max_completion_tokens": 3, "stop": "x"})");
  EXPECT_EQ(r.messages[0].content, "ab");
  EXPECT_EQ(*r.params.max_tokens, 3);
  EXPECT_EQ(r.params.sampler.temperature, 1.0);
  EXPECT_FALSE(r.params.seed_given);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(r.params.stream);
}

TEST(ServeRequest, CompletionPromptAsTextOrIds) {
  EXPECT_EQ(parse_completion_request(R"({"prompt": "Once upon"})").prompt, "Once upon");
  const CompletionRequest ids = parse_completion_request(R"({"prompt": [1, 2, 3], "logprobs": 2})");
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(ids.params.logprobs);
  EXPECT_EQ(ids.params.top_logprobs, 2);
  EXPECT_EQ(parse_completion_request(R"({"prompt": [[5, 6]]})").prompt_ids, (std::vector<int>{5, 6}));
}

TEST(ServeRequest, MalformedJsonIs400WithTheOffset) {
  const RequestError e = chat_error(R"({"messages": [)");
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.code(), "invalid_json");
  EXPECT_MESSAGE_HAS(e, "offset");
}

TEST(ServeRequest, DeeplyNestedJsonIs400NamingTheDepthLimit) {
  std::string deep = with(R"("x": )" + std::string(100, '[') + std::string(100, ']'));
  const RequestError e = chat_error(deep);
  EXPECT_EQ(e.status(), 400);
  EXPECT_MESSAGE_HAS(e, "exceeds the limit of 16 levels");
}

TEST(ServeRequest, BodyOverTheSizeLimitIs413) {
  RequestLimits lim;
  lim.max_body_bytes = 64;
  const RequestError e = chat_error(kChat, lim);
  EXPECT_EQ(e.status(), 413);
  EXPECT_MESSAGE_HAS(e, "limit of 64 bytes");
}

TEST(ServeRequest, BodyThatIsNotAnObjectIs400) {
  const RequestError e = chat_error("[1, 2]");
  EXPECT_EQ(e.status(), 400);
  EXPECT_MESSAGE_HAS(e, "an array");
}

TEST(ServeRequest, WrongTypeIs400NamingTheField) {
  const RequestError e = chat_error(with(R"("max_tokens": "ten")"));
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "max_tokens");
  EXPECT_EQ(e.code(), "invalid_type");
  EXPECT_MESSAGE_HAS(e, "must be an integer");
  EXPECT_EQ(chat_error(with(R"("stream": 1)")).param(), "stream");
  EXPECT_EQ(chat_error(R"({"messages": "hi"})").param(), "messages");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": 5}]})").param(), "messages[0].content");
}

TEST(ServeRequest, OutOfRangeIs400NamingTheRange) {
  const RequestError t = chat_error(with(R"("temperature": 2.5)"));
  EXPECT_EQ(t.param(), "temperature");
  EXPECT_MESSAGE_HAS(t, "[0, 2]");
  const RequestError m = chat_error(with(R"("max_tokens": 0)"));
  EXPECT_EQ(m.param(), "max_tokens");
  EXPECT_MESSAGE_HAS(m, "outside [1, ");
  EXPECT_MESSAGE_HAS(chat_error(with(R"("top_p": 0)")), "(0, 1]");
  EXPECT_MESSAGE_HAS(chat_error(with(R"("max_tokens": 1e300)")), "not an integer");
}

TEST(ServeRequest, UnknownRoleIs400NamingTheRoles) {
  const RequestError e = chat_error(R"({"messages": [{"role": "wizard", "content": "hi"}]})");
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "messages[0].role");
  EXPECT_MESSAGE_HAS(e, "system, developer, user, assistant, tool");
}

TEST(ServeRequest, EmptyOrMissingMessagesIs400) {
  EXPECT_MESSAGE_HAS(chat_error(R"({"messages": []})"), "'messages' is empty");
  EXPECT_MESSAGE_HAS(chat_error(R"({"model": "m"})"), "'messages' is missing");
  EXPECT_MESSAGE_HAS(chat_error(R"({"messages": [{"role": "user"}]})"), "content' is missing");
}

TEST(ServeRequest, TooManyMessagesIs400NamingTheLimit) {
  RequestLimits lim;
  lim.max_messages = 1;
  EXPECT_MESSAGE_HAS(chat_error(kChat, lim), "the limit is 1");
}

TEST(ServeRequest, TooManyOrTooLongStopStringsIs400NamingTheLimit) {
  EXPECT_MESSAGE_HAS(chat_error(with(R"("stop": ["a", "b", "c", "d", "e"])")), "the limit is 4");
  EXPECT_MESSAGE_HAS(chat_error(with(R"("stop": ")" + std::string(300, 'x') + "\"")), "the limit is 256");
  EXPECT_MESSAGE_HAS(chat_error(with(R"("stop": [""])")), "is empty");
}

TEST(ServeRequest, TopLogprobsOverTheLimitIs400) {
  const RequestError e = chat_error(with(R"("logprobs": true, "top_logprobs": 21)"));
  EXPECT_EQ(e.param(), "top_logprobs");
  EXPECT_MESSAGE_HAS(e, "[0, 20]");
  EXPECT_MESSAGE_HAS(chat_error(with(R"("top_logprobs": 2)")), "needs 'logprobs'");
}

TEST(ServeRequest, MoreThanOneChoiceIs400) {
  EXPECT_MESSAGE_HAS(chat_error(with(R"("n": 2)")), "n must be 1");
}

TEST(ServeRequest, BadCompletionPromptIs400) {
  EXPECT_EQ(completion_error(R"({"prompt": [1, -2]})").param(), "prompt[1]");
  EXPECT_MESSAGE_HAS(completion_error(R"({"prompt": [1, 3000000000]})"), "[0, 2^31)");
  EXPECT_MESSAGE_HAS(completion_error(R"({"prompt": ""})"), "is empty");
  EXPECT_MESSAGE_HAS(completion_error(R"({"prompt": ["a", "b"]})"), "one prompt per request");
  EXPECT_MESSAGE_HAS(completion_error(R"({"max_tokens": 3})"), "'prompt' is missing");
  EXPECT_EQ(completion_error(R"({"prompt": 5})").code(), "invalid_type");
}

TEST(ServeRequest, ErrorJsonHasOpenAisShape) {
  const RequestError e = chat_error(with(R"("max_tokens": "x")"));
  const nlohmann::json j = error_json(e);
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_EQ(j["error"]["code"], "invalid_type");
  EXPECT_TRUE(j["error"]["message"].is_string());
}
