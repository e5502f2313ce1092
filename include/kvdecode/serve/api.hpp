// Api: the HTTP endpoints of kvdecode-server as plain functions from a request
// (method, path, headers, body) to a reply, so that they are tested without
// sockets; the program (examples/server.cpp) only moves bytes between cpp-httplib
// and handle(). Endpoints, with OpenAI's field names and shapes:
//   POST /v1/chat/completions   messages rendered with the model's chat template
//   POST /v1/completions        prompt as text or token ids
//   GET  /v1/models, GET /health, GET /metrics (Prometheus text)
//   POST /tokenize {"content"}, POST /detokenize {"tokens"} (llama-server's shapes)
//   GET  /                      the chat page (ApiOptions::index_html)
// Generation answers stream as server-sent events ("data: {chunk}\n\n" ...
// "data: [DONE]\n\n") when the request says "stream": true, otherwise as one JSON
// object. Either way the reply is produced by HttpReply::stream, which waits for
// the engine's tokens and writes them; a write that fails (the client went away)
// cancels the request and frees its cache blocks, and so does a reply dropped
// before it was produced.
//
// Errors are OpenAI's error object (request_error.hpp) with the status: 400 for a
// bad request, 401 for a missing or wrong key when ApiOptions::api_key is set
// (every endpoint but /, /health and /metrics), 404 for an unknown path, 413 for a
// body over RequestLimits::max_body_bytes, 503 when the queue is full.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvdecode/chat/chat_template.hpp"
#include "kvdecode/serve/engine.hpp"
#include "kvdecode/serve/metrics.hpp"
#include "kvdecode/serve/openai_request.hpp"
#include "kvdecode/serve/request_error.hpp"
#include "kvdecode/serve/stop_strings.hpp"
#include "kvdecode/text/text_tokenizer.hpp"

namespace kvd {

/// One HTTP request as the handlers see it. Header names in lower case.
struct HttpRequest {
  std::string method;  ///< "GET", "POST", ...
  std::string path;    ///< without the query string
  std::map<std::string, std::string> headers;
  std::string body;
};

/// Where a streamed reply goes: write() returns false once the client is gone.
struct HttpSink {
  std::function<bool(const std::string&)> write;
};

/// A reply: status, content type and either a body or a producer that writes it.
struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  /// When set, the body is produced by calling stream(sink) once (chunked transfer).
  std::function<void(HttpSink&)> stream;
};

/// Settings of the HTTP side.
struct ApiOptions {
  std::string model_name = "kvdecode";  ///< the id /v1/models lists and responses carry
  std::string api_key;                  ///< "" = no key needed
  RequestLimits limits;
  std::string index_html;               ///< GET / (empty: 404)
  /// Seconds a non-streamed reply may wait without writing; then it writes one space
  /// (JSON whitespace) to learn whether the client is still there.
  double keepalive_seconds = 2.0;
};

class Api {
 public:
  using Clock = std::chrono::steady_clock;

  /// Keeps references to `engine`, `tokenizer`, `chat_template` (null: chat
  /// requests get a 400 naming --chat-template) and `metrics`; each must outlive it.
  /// `stop_ids` end generation unless a request sets ignore_eos.
  Api(GenerationService& engine, const TextTokenizer& tokenizer, const ChatTemplate* chat_template,
      std::vector<int> stop_ids, ApiOptions options, ServerMetrics& metrics)
      : engine_(&engine), tok_(&tokenizer), tmpl_(chat_template), stop_ids_(std::move(stop_ids)),
        opt_(std::move(options)), metrics_(&metrics), created_(std::chrono::duration_cast<std::chrono::seconds>(
                                                          std::chrono::system_clock::now().time_since_epoch()).count()) {}

  /// Answers one request. Never throws: every failure becomes an error reply
  /// (500 for an unexpected one).
  HttpReply handle(const HttpRequest& req) {
    const std::string endpoint = endpoint_of(req.path);
    HttpReply reply;
    try {
      reply = route(req, endpoint);
    } catch (const RequestError& e) {
      reply = error_reply(e);
    } catch (const TemplateError& e) {
      reply = error_reply(bad_request("messages", "template_error", e.what()));
    } catch (const TokenError& e) {
      reply = error_reply(bad_request("prompt", "invalid_value", e.what()));
    } catch (const Error& e) {
      reply = error_reply(bad_request("", "invalid_value", e.what()));
    } catch (const std::exception& e) {
      reply = error_reply(RequestError(500, "server_error", "", "internal_error", e.what()));
    }
    metrics_->count_request(endpoint, reply.status);
    return reply;
  }

  /// JSON text of `j`, invalid UTF-8 replaced (a token piece may be half a character).
  static std::string dump(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

 private:
  // Events of one request, from the engine's thread to the reply's.
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<TokenEvent> tokens;
    bool started = false, finished = false;
    int prompt_tokens = 0, cached_tokens = 0, generated = 0;
    FinishReason reason = FinishReason::kLength;
  };
  // Cancels the request when the reply is dropped before it saw the end.
  struct CancelGuard {
    CancelGuard(GenerationService* e, long i) : engine(e), id(i) {}
    CancelGuard(const CancelGuard&) = delete;
    CancelGuard& operator=(const CancelGuard&) = delete;
    GenerationService* engine;
    long id;
    bool done = false;
    ~CancelGuard() {
      if (!done) engine->cancel(id);
    }
  };
  struct Generation {
    bool chat = true;
    GenerationParams params;
    std::vector<int> prompt;
    std::string id;
  };

  static std::string endpoint_of(const std::string& path) {
    static const char* const kKnown[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics",
                                         "/tokenize", "/detokenize", "/", "/chat/completions", "/completions", "/models"};
    for (const char* k : kKnown)
      if (path == k) return path;
    return "other";
  }

  HttpReply route(const HttpRequest& req, const std::string& endpoint) {
    const bool get = req.method == "GET", post = req.method == "POST";
    if (endpoint == "/health" && get) return json_reply(200, {{"status", "ok"}});
    if (endpoint == "/metrics" && get) {
      HttpReply r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = metrics_->text(engine_->stats());
      return r;
    }
    if (endpoint == "/" && get) {
      if (opt_.index_html.empty()) throw RequestError(404, "invalid_request_error", "", "not_found", "no page at /");
      HttpReply r;
      r.content_type = "text/html; charset=utf-8";
      r.body = opt_.index_html;
      return r;
    }
    if (endpoint == "other")
      throw RequestError(404, "invalid_request_error", "", "not_found",
                         detail::msg("no endpoint ", req.method, " ", req.path.substr(0, 100)));
    check_key(req);
    if ((endpoint == "/v1/models" || endpoint == "/models") && get) return models();
    if ((endpoint == "/v1/chat/completions" || endpoint == "/chat/completions") && post) return chat(req.body);
    if ((endpoint == "/v1/completions" || endpoint == "/completions") && post) return completion(req.body);
    if (endpoint == "/tokenize" && post) return tokenize(req.body);
    if (endpoint == "/detokenize" && post) return detokenize(req.body);
    throw RequestError(405, "invalid_request_error", "", "method_not_allowed",
                       detail::msg(req.method.substr(0, 16), " is not allowed on ", req.path));
  }

  void check_key(const HttpRequest& req) const {
    if (opt_.api_key.empty()) return;
    const auto it = req.headers.find("authorization");
    if (it == req.headers.end())
      throw RequestError(401, "authentication_error", "", "missing_api_key",
                         "no API key: send the header 'Authorization: Bearer <key>' (the server was started with --api-key)");
    const std::string want = "Bearer " + opt_.api_key;
    // Compared in time independent of where the first difference is.
    unsigned diff = it->second.size() == want.size() ? 0u : 1u;
    for (std::size_t i = 0; i < it->second.size() && i < want.size(); ++i)
      diff |= static_cast<unsigned>(it->second[i] ^ want[i]);
    if (diff != 0)
      throw RequestError(401, "authentication_error", "", "invalid_api_key",
                         "incorrect API key in the Authorization header (expected 'Bearer <the key given with --api-key>')");
  }

  static HttpReply json_reply(int status, const nlohmann::json& j) {
    HttpReply r;
    r.status = status;
    r.body = dump(j);
    return r;
  }
  static HttpReply error_reply(const RequestError& e) { return json_reply(e.status(), error_json(e)); }

  HttpReply models() const {
    nlohmann::json m = {{"id", opt_.model_name}, {"object", "model"}, {"created", created_}, {"owned_by", "kvdecode"}};
    m["meta"] = {{"n_ctx", engine_->context()}, {"n_vocab", engine_->vocab_size()}};
    return json_reply(200, {{"object", "list"}, {"data", nlohmann::json::array({m})}});
  }

  HttpReply tokenize(const std::string& body) const {
    const nlohmann::json j = detail::parse_request_body(body, opt_.limits);
    const nlohmann::json* c = detail::request_field(j, "content");
    if (!c) throw bad_request("content", "missing_field", "'content' is missing");
    if (!c->is_string()) detail::wrong_type("content", *c, "a string");
    const bool add_special = detail::request_bool(j, "add_special", false);
    const bool with_pieces = detail::request_bool(j, "with_pieces", false);
    const std::vector<int> ids = tok_->encode(c->get<std::string>(), add_special, true);
    nlohmann::json out = nlohmann::json::array();
    for (int id : ids) {
      if (with_pieces) out.push_back({{"id", id}, {"piece", tok_->token_to_piece(id, true)}});
      else out.push_back(id);
    }
    return json_reply(200, {{"tokens", out}});
  }

  HttpReply detokenize(const std::string& body) const {
    const nlohmann::json j = detail::parse_request_body(body, opt_.limits);
    const nlohmann::json* t = detail::request_field(j, "tokens");
    if (!t) throw bad_request("tokens", "missing_field", "'tokens' is missing");
    if (!t->is_array()) detail::wrong_type("tokens", *t, "a list of token ids");
    std::vector<int> ids;
    const int V = tok_->vocab_size();
    for (std::size_t i = 0; i < t->size(); ++i) {
      const nlohmann::json& x = (*t)[i];
      if (!x.is_number_integer()) detail::wrong_type(detail::msg("tokens[", i, "]"), x, "a token id");
      const long long id = x.get<long long>();
      if (id < 0 || id >= V)
        throw bad_request(detail::msg("tokens[", i, "]"), "invalid_value",
                          detail::msg("'tokens[", i, "]' = ", id, " is outside the vocabulary [0, ", V, ")"));
      ids.push_back(static_cast<int>(id));
    }
    return json_reply(200, {{"content", tok_->decode(ids, true)}});
  }

  HttpReply chat(const std::string& body) {
    const Clock::time_point t0 = Clock::now();
    ChatRequest req = parse_chat_request(body, opt_.limits);
    if (!tmpl_)
      throw bad_request("messages", "no_chat_template",
                        "the model has no chat template: start the server with --chat-template NAME "
                        "(chatml, llama3, llama2, mistral, phi3) or use /v1/completions");
    Generation g;
    g.chat = true;
    g.params = req.params;
    g.prompt = encode_chat(*tok_, tmpl_->render(req.messages, true));
    return generate(std::move(g), t0);
  }

  HttpReply completion(const std::string& body) {
    const Clock::time_point t0 = Clock::now();
    CompletionRequest req = parse_completion_request(body, opt_.limits);
    Generation g;
    g.chat = false;
    g.params = req.params;
    g.prompt = req.prompt_is_ids ? std::move(req.prompt_ids) : tok_->encode(req.prompt, true, true);
    return generate(std::move(g), t0);
  }

  HttpReply generate(Generation g, Clock::time_point t0) {
    ScheduledJob job;
    job.prompt = g.prompt;
    const int ctx = engine_->context();
    const long room = static_cast<long>(ctx) - static_cast<long>(job.prompt.size());
    job.max_tokens = room < 1 ? 1 : static_cast<int>(std::min<long>(room, g.params.max_tokens.value_or(ctx)));
    job.sampler = g.params.sampler;
    if (!g.params.seed_given) job.sampler.seed = std::random_device{}() * 0x100000001ull + std::random_device{}();
    if (!g.params.ignore_eos) job.stop_ids = stop_ids_;
    job.top_logprobs = g.params.logprobs ? g.params.top_logprobs : -1;
    check_job(job, ctx, engine_->vocab_size());  // 400 with both lengths before anything is queued

    auto ch = std::make_shared<Channel>();
    JobCallbacks cb;
    cb.on_start = [ch](int prompt_tokens, int cached) {
      std::lock_guard<std::mutex> lk(ch->mu);
      ch->started = true;
      ch->prompt_tokens = prompt_tokens;
      ch->cached_tokens = cached;
    };
    cb.on_token = [ch](const TokenEvent& ev) {
      {
        std::lock_guard<std::mutex> lk(ch->mu);
        ch->tokens.push_back(ev);
      }
      ch->cv.notify_all();
    };
    cb.on_finish = [ch](FinishReason why, int generated) {
      {
        std::lock_guard<std::mutex> lk(ch->mu);
        ch->finished = true;
        ch->reason = why;
        ch->generated = generated;
      }
      ch->cv.notify_all();
    };
    const long id = engine_->next_id();
    engine_->submit(id, std::move(job), std::move(cb));
    auto guard = std::make_shared<CancelGuard>(engine_, id);
    g.id = detail::msg(g.chat ? "chatcmpl-" : "cmpl-", id);

    HttpReply reply;
    if (g.params.stream) reply.content_type = "text/event-stream";
    auto shared_g = std::make_shared<Generation>(std::move(g));
    reply.stream = [this, ch, guard, shared_g, t0](HttpSink& sink) { produce(*shared_g, *ch, *guard, sink, t0); };
    return reply;
  }

  // Consumes the request's events and writes the reply (SSE chunks or one object).
  void produce(const Generation& g, Channel& ch, CancelGuard& guard, HttpSink& sink, Clock::time_point t0) {
    const GenerationParams& p = g.params;
    TokenStreamDecoder decoder(*tok_, false, false);
    StopStrings stops(p.stop);
    std::string text;
    nlohmann::json lp_content = nlohmann::json::array();  // chat logprobs
    nlohmann::json lp_tokens = nlohmann::json::array(), lp_values = nlohmann::json::array(),
                   lp_top = nlohmann::json::array(), lp_offsets = nlohmann::json::array();  // completion logprobs
    int consumed = 0;
    std::string finish = "length";
    bool stopped_by_text = false;
    Clock::time_point last_token = t0, last_write = Clock::now();
    bool first_chunk = true;

    auto write = [&](const std::string& s) {
      last_write = Clock::now();
      if (sink.write(s)) return true;
      return false;
    };
    auto send_chunk = [&](const std::string& delta, const nlohmann::json& lp, const char* finish_reason) {
      nlohmann::json c = chunk_base(g);
      nlohmann::json choice = {{"index", 0}};
      if (g.chat) {
        nlohmann::json d = nlohmann::json::object();
        if (first_chunk) d["role"] = "assistant";
        if (!delta.empty() || !finish_reason) d["content"] = delta;
        choice["delta"] = d;
      } else {
        choice["text"] = delta;
      }
      choice["logprobs"] = lp;
      choice["finish_reason"] = finish_reason ? nlohmann::json(finish_reason) : nlohmann::json(nullptr);
      c["choices"] = nlohmann::json::array({choice});
      if (p.include_usage) c["usage"] = nullptr;
      first_chunk = false;
      return write("data: " + dump(c) + "\n\n");
    };

    for (;;) {
      std::deque<TokenEvent> events;
      bool finished = false;
      FinishReason reason = FinishReason::kLength;
      {
        std::unique_lock<std::mutex> lk(ch.mu);
        ch.cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return !ch.tokens.empty() || ch.finished; });
        events.swap(ch.tokens);
        finished = ch.finished;
        reason = ch.reason;
      }
      for (const TokenEvent& ev : events) {
        if (stopped_by_text) break;
        const Clock::time_point now = Clock::now();
        if (consumed == 0) metrics_->observe_ttft(std::chrono::duration<double>(now - t0).count());
        else metrics_->observe_per_token(std::chrono::duration<double>(now - last_token).count());
        last_token = now;
        ++consumed;
        std::string delta = stops.push(decoder.push(ev.token));
        if (stops.stopped()) {
          stopped_by_text = true;
          finish = "stop";
        }
        nlohmann::json lp = nullptr;
        if (p.logprobs) {
          const std::string piece = tok_->token_to_piece(ev.token, true);
          if (g.chat) {
            nlohmann::json e = token_logprob(ev.token, ev.logprob);
            nlohmann::json top = nlohmann::json::array();
            for (const auto& [t, l] : ev.top) top.push_back(token_logprob(t, l));
            e["top_logprobs"] = top;
            lp = {{"content", nlohmann::json::array({e})}};
            lp_content.push_back(e);
          } else {
            nlohmann::json top = nlohmann::json::object();
            for (const auto& [t, l] : ev.top) top[tok_->token_to_piece(t, true)] = l;
            lp = {{"tokens", {piece}}, {"token_logprobs", {ev.logprob}}, {"top_logprobs", {top}},
                  {"text_offset", {text.size()}}};
            lp_tokens.push_back(piece);
            lp_values.push_back(ev.logprob);
            lp_top.push_back(top);
            lp_offsets.push_back(text.size());
          }
        }
        text += delta;
        if (p.stream && (!delta.empty() || p.logprobs) && !send_chunk(delta, lp, nullptr)) return;  // guard cancels
      }
      if (stopped_by_text) {
        engine_->cancel(guard.id);  // the rest is not wanted; frees the blocks now
        guard.done = true;
        break;
      }
      if (finished) {
        guard.done = true;
        if (reason == FinishReason::kError || reason == FinishReason::kCancelled) {
          const RequestError e(500, "server_error", "", "generation_failed",
                               detail::msg("generation ", reason == FinishReason::kError ? "failed" : "was cancelled",
                                           " after ", consumed, " tokens"));
          if (p.stream) write("data: " + dump(error_json(e)) + "\n\n");
          else write(dump(error_json(e)));
          return;
        }
        finish = reason == FinishReason::kStop ? "stop" : "length";
        std::string tail = decoder.flush();
        tail = stops.push(tail);
        if (stops.stopped()) finish = "stop";
        else tail += stops.flush();
        text += tail;
        if (p.stream && !tail.empty() && !send_chunk(tail, nullptr, nullptr)) return;
        break;
      }
      if (!p.stream && std::chrono::duration<double>(Clock::now() - last_write).count() >= opt_.keepalive_seconds &&
          !write(" "))
        return;  // the client is gone: the guard cancels
    }

    int prompt_tokens = 0, cached = 0;
    {
      std::lock_guard<std::mutex> lk(ch.mu);
      prompt_tokens = ch.prompt_tokens;
      cached = ch.cached_tokens;
    }
    const nlohmann::json usage = {{"prompt_tokens", prompt_tokens},
                                  {"completion_tokens", consumed},
                                  {"total_tokens", prompt_tokens + consumed},
                                  {"prompt_tokens_details", {{"cached_tokens", cached}}}};
    if (p.stream) {
      if (!send_chunk("", nullptr, finish.c_str())) return;
      if (p.include_usage) {
        nlohmann::json c = chunk_base(g);
        c["choices"] = nlohmann::json::array();
        c["usage"] = usage;
        if (!write("data: " + dump(c) + "\n\n")) return;
      }
      write("data: [DONE]\n\n");
      return;
    }
    nlohmann::json choice = {{"index", 0}, {"finish_reason", finish}};
    if (g.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
      choice["logprobs"] = p.logprobs ? nlohmann::json{{"content", lp_content}} : nlohmann::json(nullptr);
    } else {
      choice["text"] = text;
      choice["logprobs"] = p.logprobs ? nlohmann::json{{"tokens", lp_tokens}, {"token_logprobs", lp_values},
                                                       {"top_logprobs", lp_top}, {"text_offset", lp_offsets}}
                                      : nlohmann::json(nullptr);
    }
    nlohmann::json out = {{"id", g.id},
                          {"object", g.chat ? "chat.completion" : "text_completion"},
                          {"created", now_seconds()},
                          {"model", opt_.model_name},
                          {"choices", nlohmann::json::array({choice})},
                          {"usage", usage}};
    write(dump(out));
  }

  nlohmann::json chunk_base(const Generation& g) const {
    return {{"id", g.id},
            {"object", g.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", now_seconds()},
            {"model", opt_.model_name}};
  }

  nlohmann::json token_logprob(int token, double logprob) const {
    const std::string piece = tok_->token_to_piece(token, true);
    nlohmann::json bytes = nlohmann::json::array();
    for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
    return {{"token", piece}, {"logprob", logprob}, {"bytes", bytes}};
  }

  static long long now_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  }

  GenerationService* engine_;
  const TextTokenizer* tok_;
  const ChatTemplate* tmpl_;
  std::vector<int> stop_ids_;
  ApiOptions opt_;
  ServerMetrics* metrics_;
  long long created_;
};


/// The server's front door while the model loads: the listener starts first, so a
/// client (or a health check) learns "loading" instead of "connection refused".
/// Until open() every request gets 503 with OpenAI's error body (code "loading"),
/// /health included; after open() requests go to the Api, and after close() they get
/// 503 again (code "stopping"). open() and close() may run while other threads call
/// handle(); the Api must outlive every handle() that reached it.
class ApiGate {
 public:
  void open(Api& api) { api_.store(&api); }
  void close() {
    stopping_.store(true);
    api_.store(nullptr);
  }
  bool ready() const { return api_.load() != nullptr; }

  /// Never throws (as Api::handle).
  HttpReply handle(const HttpRequest& req) {
    if (Api* a = api_.load()) return a->handle(req);
    const bool stopping = stopping_.load();
    HttpReply r;
    r.status = 503;
    r.body = Api::dump(error_json("unavailable_error", stopping ? "the server is stopping" : "Loading model", "",
                                  stopping ? "stopping" : "loading"));
    return r;
  }

 private:
  std::atomic<Api*> api_{nullptr};
  std::atomic<bool> stopping_{false};
};

}  // namespace kvd
