// kvdecode-server: an OpenAI-compatible HTTP server. It answers
// /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics,
// /tokenize, /detokenize and a chat page at /, serving -np requests at once in
// one batched forward per step with automatic prefix caching, and each request
// gets exactly the bits it would get alone (docs/serving.md).
//
// This file is the thin HTTP layer: cpp-httplib (Debian's libcpp-httplib-dev,
// as llama-server uses) moves bytes between sockets and kvd::Api
// (include/kvdecode/serve/api.hpp), which holds every endpoint's logic. The port
// is open while the model loads: /health answers 503 until it is ready.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "chat_cli.hpp"
#include "cli.hpp"
#include "kvdecode/kvdecode.hpp"
#include "kvdecode/serve/api.hpp"

// After Eigen: httplib pulls in <resolv.h>, whose _res macro breaks Eigen's parameter names.
#include <httplib.h>

namespace {

const char* const kIntro = R"(usage: kvdecode-server -m MODEL [options]

An OpenAI-compatible server: POST /v1/chat/completions, /v1/completions,
/tokenize, /detokenize; GET /v1/models, /health, /metrics and a chat page at /.
Requests run -np at a time in one batched forward per step, with automatic prefix
caching; for a fixed seed each gets exactly the tokens and logits it gets alone.)";

const char* const kOutro = R"(Stop with Ctrl-C (SIGINT) or SIGTERM.
Exit status: 0 stopped by a signal, 1 model file unusable or port taken, 2 bad argument.
)";

const char kChatPage[] =
#include "chat_page.inc"
    ;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string error_body(int status, const std::string& message) {
  const char* type = status == 503 ? "unavailable_error" : status == 413 ? "invalid_request_error" : "server_error";
  return kvd::Api::dump(kvd::error_json(type, message, "", std::to_string(status)));
}

std::unique_ptr<kvd::GenerationService> make_engine(kvd::Transformer<float>& model, const kvd::cli::Params& o,
                                                    const kvd::SchedulerOptions& so) {
  if (o.cache_dtype == "bf16") return std::make_unique<kvd::Engine<Eigen::bfloat16>>(model, so);
  if (o.cache_dtype == "f16") return std::make_unique<kvd::Engine<Eigen::half>>(model, so);
  return std::make_unique<kvd::Engine<float>>(model, so);
}

int real_main(int argc, char** argv) {
  kvd::cli::Params o;
  kvd::cli::OptionTable table(kvd::cli::kServer, o, kIntro, kOutro);
  table.parse(argc, argv);
  if (o.help) {
    std::cout << table.help();
    return 0;
  }
  if (!o.model) throw kvd::ArgumentError("--model is required");
  if (o.threads > 0) kvd::set_num_threads(o.threads);

  // SIGINT and SIGTERM are taken by sigwait() below, in this thread only; a
  // client that goes away must not kill the process with SIGPIPE.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  kvd::ApiGate gate;  // 503 "Loading model" until the model is ready
  httplib::Server http;
  const int threads = std::min(1024, o.n_parallel + o.max_queue + 8);  // waiting replies hold a thread each
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  // Bodies a little over --max-body-bytes reach the parser (a JSON 413 naming the
  // limit); far larger ones are refused by httplib before they are read.
  http.set_payload_max_length(static_cast<std::size_t>(o.max_body_bytes) * 2);
  auto handle = [&gate](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Access-Control-Allow-Origin", "*");
    kvd::HttpRequest r;
    r.method = req.method;
    r.path = req.path;
    for (const auto& [k, v] : req.headers) r.headers[lower(k)] = v;
    r.body = req.body;
    kvd::HttpReply reply = gate.handle(r);
    res.status = reply.status;
    if (!reply.stream) {
      res.set_content(reply.body, reply.content_type.c_str());
      return;
    }
    // If the client goes before the provider runs, the provider (and with it the
    // reply's producer) is destroyed, which cancels the request.
    auto producer = std::make_shared<std::function<void(kvd::HttpSink&)>>(std::move(reply.stream));
    res.set_chunked_content_provider(reply.content_type, [producer](std::size_t, httplib::DataSink& sink) {
      kvd::HttpSink out{[&sink](const std::string& s) { return sink.write(s.data(), s.size()); }};
      (*producer)(out);
      sink.done();
      return true;
    });
  };
  http.Get(".*", handle);
  http.Post(".*", handle);
  http.Options(".*", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Access-Control-Allow-Origin", "*");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.status = 204;
  });
  http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      const std::string why = res.status == 413 ? "request body exceeds twice --max-body-bytes" : "HTTP error";
      res.set_content(error_body(res.status, why), "application/json");
    }
  });
  if (!http.bind_to_port(o.host, o.port)) throw kvd::FileError(kvd::detail::msg("cannot listen on ", o.host, ":", o.port));
  std::thread listener([&http] { http.listen_after_bind(); });

  struct Stop {  // stops the listener on every way out of this function
    httplib::Server& http;
    std::thread& listener;
    ~Stop() {
      http.stop();
      listener.join();
    }
  } stop{http, listener};

  // The model: anything kvdecode-generate loads, planned for -c positions per request.
  kvd::LoadOptions lo;
  lo.max_seq_len = o.ctx_size > 0 ? o.ctx_size : 4096;
  lo.allow_unused_tensors = o.allow_unused_tensors;
  lo.cache_rotation = o.cache_rotate;
  lo.tokenizer = o.tokenizer;
  lo.chat_template = o.chat_template.empty();
  kvd::LoadedModel loaded = kvd::open_model(*o.model, lo);
  if (!loaded.tokenizer) throw kvd::ArgumentError("the model has no tokenizer: give --tokenizer");
  loaded.model.set_numerics(kvd::cli::numerics_of(o));
  const kvd::ChatTemplate tmpl = kvd::cli::chat_template_for(o, loaded, *loaded.tokenizer);

  kvd::SchedulerOptions so;
  so.n_parallel = o.n_parallel;
  so.n_blocks = o.cache_blocks;
  so.max_queue = o.max_queue;
  std::unique_ptr<kvd::GenerationService> engine = make_engine(loaded.model, o, so);
  kvd::ServerMetrics metrics;
  kvd::ApiOptions ao;
  ao.model_name = o.alias.empty() ? std::filesystem::path(*o.model).filename().string() : o.alias;
  ao.api_key = o.api_key;
  ao.limits.max_body_bytes = static_cast<std::size_t>(o.max_body_bytes);
  ao.index_html = kChatPage;
  kvd::Api handlers(*engine, *loaded.tokenizer, &tmpl, loaded.stop_ids, ao, metrics);
  gate.open(handlers);
  const kvd::SchedulerStats st = engine->stats();
  if (!o.quiet)
    std::cerr << "kvdecode-server: " << ao.model_name << " (" << loaded.model.config().summary() << "), context "
              << engine->context() << ", " << o.n_parallel << " parallel, " << st.blocks_total << " cache blocks ("
              << o.cache_dtype << "), " << kvd::num_threads() << " thread(s)\nlistening on http://" << o.host << ':'
              << o.port << std::endl;

  int sig = 0;
  sigwait(&stop_signals, &sig);
  if (!o.quiet) std::cerr << "kvdecode-server: stopping (signal " << sig << ")\n";
  http.stop();   // no new requests; replies in flight end when the engine stops
  gate.close();
  engine.reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return kvd::cli::run_main("kvdecode-server", [&] { return real_main(argc, argv); }); }
