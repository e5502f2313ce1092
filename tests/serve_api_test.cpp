// kvdecode-server's endpoints without sockets (serve/api.hpp on an Engine), on
// the real stories260K GGUF from ../shared with the built-in chatml template:
// streamed and non-streamed answers carry the same text and log-probabilities,
// stop strings and max_tokens end the text as OpenAI's API does, a client that
// goes away frees its blocks, and each kind of refusal has its status and an
// OpenAI error body naming the field and the limit.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvdecode/load/model_loader.hpp"
#include "kvdecode/serve/api.hpp"
#include "test_util.hpp"

using namespace kvd;

namespace {

constexpr int kCtx = 128;

struct Server {
  explicit Server(ApiOptions aopt = {}, SchedulerOptions sopt = {}) {
    LoadOptions lo;
    lo.max_seq_len = kCtx;
    loaded = std::make_unique<LoadedModel>(open_model(kvd_test::shared_dir() + "/models/gguf/stories260K-F32.gguf", lo));
    tmpl = std::make_unique<ChatTemplate>(ChatTemplate::builtin("chatml"));
    engine = std::make_unique<Engine<float>>(loaded->model, sopt);
    api = std::make_unique<Api>(*engine, *loaded->tokenizer, tmpl.get(), loaded->stop_ids, aopt, metrics);
  }
  ~Server() {
    api.reset();
    engine.reset();
  }

  // The reply's whole body (the producer run to its end).
  std::string call(const std::string& method, const std::string& path, const std::string& body, int* status = nullptr,
                   std::map<std::string, std::string> headers = {}) {
    HttpReply r = api->handle(HttpRequest{method, path, std::move(headers), body});
    if (status) *status = r.status;
    if (!r.stream) return r.body;
    std::string out;
    HttpSink sink{[&out](const std::string& s) {
      out += s;
      return true;
    }};
    r.stream(sink);
    return out;
  }
  nlohmann::json post(const std::string& path, const std::string& body, int* status = nullptr,
                      std::map<std::string, std::string> headers = {}) {
    return nlohmann::json::parse(call("POST", path, body, status, std::move(headers)));
  }
  // Waits until no request runs or waits. It asks the scheduler itself on its
  // loop thread, after every earlier submit and cancel: the published stats() can
  // be one step old and would show an idle engine before a new request arrived.
  void drain() {
    for (int i = 0; i < 500; ++i) {
      bool idle = false;
      engine->with_scheduler([&idle](Scheduler<float>& s) {
        const SchedulerStats st = s.stats();
        idle = st.running == 0 && st.queued == 0;
      });
      if (idle) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "the engine did not become idle in 5 s";
  }
  SchedulerStats live_stats() {
    SchedulerStats st;
    engine->with_scheduler([&st](Scheduler<float>& s) { st = s.stats(); });
    return st;
  }

  ServerMetrics metrics;
  std::unique_ptr<LoadedModel> loaded;
  std::unique_ptr<ChatTemplate> tmpl;
  std::unique_ptr<Engine<float>> engine;
  std::unique_ptr<Api> api;
};

#define NEED_SHARED()                                                                     \
  if (kvd_test::shared_dir().empty()) GTEST_SKIP() << "../shared (stories260K-F32.gguf) is absent"

const char* const kChatBody =
    R"({"messages": [{"role": "user", "content": "Once upon a time"}], "temperature": 0.8, "seed": 5,
        "max_tokens": 40, "logprobs": true, "top_logprobs": 2, "ignore_eos": true)";

// The text and logprobs of an SSE stream of chat chunks.
struct Streamed {
  std::string text;
  nlohmann::json logprobs = nlohmann::json::array();
  std::string finish;
  nlohmann::json usage;
  bool done = false;
};
Streamed read_stream(const std::string& sse) {
  Streamed s;
  std::size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const std::size_t end = sse.find("\n\n", pos);
    const std::string data = sse.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      s.done = true;
      continue;
    }
    const nlohmann::json c = nlohmann::json::parse(data);
    if (c.contains("usage") && !c["usage"].is_null()) s.usage = c["usage"];
    if (c["choices"].empty()) continue;
    const nlohmann::json& ch = c["choices"][0];
    if (ch.contains("delta") && ch["delta"].contains("content")) s.text += ch["delta"]["content"].get<std::string>();
    if (ch.contains("text")) s.text += ch["text"].get<std::string>();
    if (!ch["logprobs"].is_null())
      for (const auto& e : ch["logprobs"]["content"]) s.logprobs.push_back(e);
    if (!ch["finish_reason"].is_null()) s.finish = ch["finish_reason"];
  }
  return s;
}

}  // namespace

TEST(ServeApi, StreamedAndNotGiveTheSameTextAndLogprobs) {
  NEED_SHARED();
  Server srv;
  int status = 0;
  const nlohmann::json whole = srv.post("/v1/chat/completions", std::string(kChatBody) + "}", &status);
  ASSERT_EQ(status, 200) << whole.dump();
  EXPECT_EQ(whole["object"], "chat.completion");
  const nlohmann::json& choice = whole["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(whole["usage"]["completion_tokens"], 40);
  ASSERT_EQ(choice["logprobs"]["content"].size(), 40u);
  EXPECT_EQ(choice["logprobs"]["content"][0]["top_logprobs"].size(), 2u);

  const std::string sse =
      srv.call("POST", "/v1/chat/completions", std::string(kChatBody) + R"(, "stream": true, "stream_options": {"include_usage": true}})");
  const Streamed s = read_stream(sse);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.text, choice["message"]["content"].get<std::string>());
  EXPECT_EQ(s.logprobs, choice["logprobs"]["content"]) << "logprobs (doubles through JSON) identical";
  EXPECT_EQ(s.finish, "length");
  EXPECT_EQ(s.usage["completion_tokens"], 40);
  // The second request shares the whole prompt with the first: it came from the prefix cache.
  EXPECT_GT(s.usage["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
}

TEST(ServeApi, CompletionsTakeTextOrIdsAndAgree) {
  NEED_SHARED();
  Server srv;
  const nlohmann::json text = srv.post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0})");
  const std::vector<int> ids = srv.loaded->tokenizer->encode("Once upon a time", true, true);
  const nlohmann::json by_ids = srv.post("/v1/completions", nlohmann::json{{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}}.dump());
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], by_ids["choices"][0]["text"]);
  EXPECT_FALSE(text["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(text["usage"]["prompt_tokens"], static_cast<int>(ids.size()));
}

TEST(ServeApi, StopStringEndsTheTextBeforeIt) {
  NEED_SHARED();
  Server srv;
  const std::string base = R"({"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "ignore_eos": true)";
  const std::string full = srv.post("/v1/completions", base + "}")["choices"][0]["text"];
  ASSERT_GT(full.size(), 20u);
  const std::string stop = full.substr(10, 4);
  const nlohmann::json cut = srv.post("/v1/completions", base + R"(, "stop": )" + nlohmann::json(stop).dump() + "}");
  EXPECT_EQ(cut["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  const Streamed s = read_stream(srv.call("POST", "/v1/completions",
                                          base + R"(, "stream": true, "stop": )" + nlohmann::json(stop).dump() + "}"));
  EXPECT_EQ(s.text, full.substr(0, full.find(stop)));
  EXPECT_EQ(s.finish, "stop");
}

TEST(ServeApi, MaxTokensBeyondTheContextIsClampedWithLength) {
  NEED_SHARED();
  Server srv;
  const nlohmann::json r =
      srv.post("/v1/completions", R"({"prompt": "Once", "max_tokens": 100000, "temperature": 0, "ignore_eos": true})");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"].get<int>() + r["usage"]["completion_tokens"].get<int>(), kCtx);
}

TEST(ServeApi, PromptLongerThanTheContextIs400WithBothLengths) {
  NEED_SHARED();
  Server srv;
  int status = 0;
  std::string text;
  for (int i = 0; i < 60; ++i) text += "Once upon a time ";
  const nlohmann::json e = srv.post("/v1/completions", nlohmann::json{{"prompt", text}}.dump(), &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  const std::string m = e["error"]["message"];
  EXPECT_NE(m.find("holds 128 positions"), std::string::npos) << m;
  EXPECT_NE(m.find(" tokens but"), std::string::npos) << m;
}

TEST(ServeApi, BadInputGetsOpenAiErrorsAndTheServerKeepsServing) {
  NEED_SHARED();
  ApiOptions ao;
  ao.limits.max_body_bytes = 4096;
  Server srv(ao);
  int status = 0;
  nlohmann::json e = srv.post("/v1/chat/completions", "{not json", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  e = srv.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_k": "many"})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["param"], "top_k");
  e = srv.post("/v1/chat/completions", std::string(5000, ' '), &status);
  EXPECT_EQ(status, 413);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("limit of 4096 bytes"), std::string::npos);
  e = srv.post("/v1/nothing", "{}", &status);
  EXPECT_EQ(status, 404);
  e = srv.post("/v1/completions", R"({"prompt": [1, 99999]})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("[0, 512)"), std::string::npos) << e.dump();
  e = srv.post("/v1/completions", R"({"prompt": "Once", "max_tokens": 3})", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(srv.metrics.requests("/v1/chat/completions", 400), 2u);
}

TEST(ServeApi, ApiKeyIsRequiredWhenSet) {
  NEED_SHARED();
  ApiOptions ao;
  ao.api_key = "sekrit";
  Server srv(ao);
  int status = 0;
  nlohmann::json e = srv.post("/v1/completions", R"({"prompt": "Once", "max_tokens": 2})", &status);
  EXPECT_EQ(status, 401);
  EXPECT_EQ(e["error"]["type"], "authentication_error");
  srv.post("/v1/completions", R"({"prompt": "Once", "max_tokens": 2})", &status, {{"authorization", "Bearer wrong"}});
  EXPECT_EQ(status, 401);
  srv.post("/v1/completions", R"({"prompt": "Once", "max_tokens": 2})", &status, {{"authorization", "Bearer sekrit"}});
  EXPECT_EQ(status, 200);
  srv.call("GET", "/health", "", &status);
  EXPECT_EQ(status, 200) << "health needs no key";
}

TEST(ServeApi, FullQueueIs503) {
  NEED_SHARED();
  SchedulerOptions so;
  so.max_queue = 0;
  Server srv({}, so);
  int status = 0;
  const nlohmann::json e = srv.post("/v1/completions", R"({"prompt": "Once", "max_tokens": 2})", &status);
  EXPECT_EQ(status, 503);
  EXPECT_EQ(e["error"]["code"], "queue_full");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("the limit is 0"), std::string::npos);
}

TEST(ServeApi, ClientThatGoesAwayFreesItsBlocks) {
  NEED_SHARED();
  Server srv;
  HttpReply r = srv.api->handle(HttpRequest{"POST", "/v1/completions", {},
                                            R"({"prompt": "Once", "max_tokens": 100, "stream": true, "ignore_eos": true})"});
  int writes = 0;
  HttpSink sink{[&writes](const std::string&) { return ++writes < 3; }};
  r.stream(sink);
  EXPECT_EQ(writes, 3);
  srv.drain();
  EXPECT_EQ(srv.live_stats().running, 0);
  EXPECT_EQ(srv.live_stats().blocks_running, 0);
  // A reply dropped before it was produced cancels too.
  { HttpReply dropped = srv.api->handle(HttpRequest{"POST", "/v1/completions", {},
                                                    R"({"prompt": "Once", "max_tokens": 100, "ignore_eos": true})"}); }
  srv.drain();
  EXPECT_EQ(srv.live_stats().blocks_running, 0);
  srv.engine->with_scheduler([](Scheduler<float>& s) { s.clear_prefix_cache(); });
  EXPECT_EQ(srv.live_stats().blocks_in_use, 0);
}

TEST(ServeApi, HealthModelsMetricsTokenize) {
  NEED_SHARED();
  ApiOptions ao;
  ao.model_name = "stories";
  ao.index_html = "<html></html>";
  Server srv(ao);
  int status = 0;
  EXPECT_EQ(nlohmann::json::parse(srv.call("GET", "/health", "", &status))["status"], "ok");
  const nlohmann::json m = nlohmann::json::parse(srv.call("GET", "/v1/models", ""));
  EXPECT_EQ(m["data"][0]["id"], "stories");
  EXPECT_EQ(m["data"][0]["meta"]["n_ctx"], kCtx);
  srv.post("/v1/completions", R"({"prompt": "Once", "max_tokens": 3})");
  const std::string metrics = srv.call("GET", "/metrics", "");
  for (const char* name : {"kvdecode_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 1",
                           "kvdecode_tokens_generated_total", "kvdecode_prefix_cache_hit_tokens_total",
                           "kvdecode_queue_depth", "kvdecode_cache_blocks_in_use",
                           "kvdecode_time_to_first_token_seconds_bucket", "kvdecode_time_per_output_token_seconds_count"})
    EXPECT_NE(metrics.find(name), std::string::npos) << name;
  const nlohmann::json t = srv.post("/tokenize", R"({"content": "Once upon"})");
  const nlohmann::json d = srv.post("/detokenize", nlohmann::json{{"tokens", t["tokens"]}}.dump());
  EXPECT_EQ(d["content"], "Once upon");
  EXPECT_EQ(srv.call("GET", "/", ""), "<html></html>");
  srv.post("/detokenize", R"({"tokens": [1, 100000]})", &status);
  EXPECT_EQ(status, 400);
}

// The program's front door (ApiGate): the port is open while the model loads, and
// every request, /health included, gets 503 with OpenAI's error body until the Api
// is there; then the Api answers; after close() it is 503 again.
TEST(ServeApi, GateAnswers503WhileLoadingThenServes) {
  NEED_SHARED();
  ApiGate gate;
  EXPECT_FALSE(gate.ready());
  for (const char* path : {"/health", "/v1/models", "/metrics"}) {
    const HttpReply r = gate.handle(HttpRequest{"GET", path, {}, ""});
    EXPECT_EQ(r.status, 503) << path;
    const nlohmann::json e = nlohmann::json::parse(r.body)["error"];
    EXPECT_EQ(e["code"], "loading") << path;
    EXPECT_EQ(e["type"], "unavailable_error") << path;
  }
  Server srv;
  gate.open(*srv.api);
  EXPECT_TRUE(gate.ready());
  EXPECT_EQ(gate.handle(HttpRequest{"GET", "/health", {}, ""}).status, 200);
  const HttpReply done = gate.handle(HttpRequest{"POST", "/v1/completions", {}, R"({"prompt": "Once", "max_tokens": 2})"});
  EXPECT_EQ(done.status, 200);
  gate.close();
  const HttpReply r = gate.handle(HttpRequest{"GET", "/health", {}, ""});
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"], "stopping");
}
