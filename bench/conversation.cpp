// kvdecode-conversation: what keeping the KV cache across the turns of a chat
// saves. A 10-turn conversation (a system message, then ten user messages, each
// reply generated greedily) on a random-weight model of TinyLlama-1.1B's shape
// with bf16 weights, run twice turn by turn: a kvd::Conversation that reuses its
// cache (prefilling only the tokens it does not hold) and one that re-prefills
// the whole history every turn (ConversationOptions::reuse_cache = false). The
// two are checked to give the same tokens and the same logits, bit for bit, and
// the program reports per turn the time to the first token and the tokens
// prefilled, as a Markdown table, <out-dir>/conversation_ttft.csv and
// <out-dir>/conversation_ttft.svg.
//
// Rendering is ChatML (kvd::ChatTemplate::builtin("chatml")); with --tokenizer (e.g.
// ../shared/models/tokenizer.bin, Llama 2's 32000 pieces, TinyLlama's vocabulary)
// the text is encoded with it, else one token per byte.
//   ./build/bin/kvdecode-conversation --tokenizer ../shared/models/tokenizer.bin
// --quick runs the stories15M shape instead (seconds; for a smoke test).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "../examples/chat_cli.hpp"
#include "model_shapes.hpp"
#include "svg_chart.hpp"
#include "kvdecode/kvdecode.hpp"

namespace {

namespace fs = std::filesystem;
using Cache = kvd::KVCache<float>;
using Message = kvd::ChatMessage;

const char* const kIntro = R"(usage: kvdecode-conversation [options]

A 10-turn chat on a random-weight model of TinyLlama-1.1B's shape (bf16 weights),
run with the KV cache kept across turns and with the whole history re-prefilled
every turn; checks that both give identical tokens and logits and reports the
time to first token and the tokens prefilled per turn.)";

const char* const kSystem =
    "You are a helpful assistant. Answer briefly and precisely, in plain sentences, and say so when you do not know.";

const char* const kUsers[] = {
    "Hello! Can you tell me what a key-value cache is in a transformer?",
    "Why does it make each generated token cheaper?",
    "How much memory does it take for a model with 22 layers and 4 key-value heads of 64 dimensions?",
    "And at a context of four thousand tokens?",
    "What is grouped-query attention, and how does it shrink that figure?",
    "Can the cache be kept between two turns of a conversation like this one?",
    "What happens if the chat template renders an earlier message differently?",
    "Is the result exactly the same as recomputing everything?",
    "How would you check that, bit for bit?",
    "Thank you. Summarise what we discussed in one sentence.",
};

/// One conversation's text layer over its own Conversation.
struct Side {
  kvd::Conversation<float, Cache> conv;
  kvd::Chat<float, Cache, Message> chat;
  Side(kvd::Transformer<float>& model, bool reuse, const kvd::Chat<float, Cache, Message>::Encoder& enc,
       const kvd::Chat<float, Cache, Message>::Decoder& dec)
      : conv(model, Cache(model.config()), kvd::ConversationOptions{reuse}),
        chat(conv, render, enc, dec, {{"system", kSystem}}) {}
  static std::string render(const std::vector<Message>& m, bool add_generation_prompt) {
    static const kvd::ChatTemplate chatml = kvd::ChatTemplate::builtin("chatml");
    return chatml.render(m, add_generation_prompt);
  }
};

struct TurnFigures {
  kvd::TurnResult reuse, full;
};

kvd::Transformer<float> make_model(bool quick) {
  kvd::ModelConfig c = quick ? kvd::stories15m_config() : kvd_bench::tinyllama_config(1024);
  c.max_seq_len = 1024;
  std::cerr << "building a random-weight model of " << (quick ? "stories15M" : "TinyLlama-1.1B") << "'s shape ("
            << c.summary() << "), bf16 weights...\n";
  kvd::ModelWeights<float> w = kvd::ModelWeights<float>::random(c, 2024);
  const auto bf16 = kvd::WeightType::kBF16;
  kvd::for_each_tensor(w, [&](const kvd::TensorSpec&, int, auto slot) {
    if (slot.matrix) *slot.matrix = slot.matrix->converted_to(bf16);
  });
  return kvd::Transformer<float>(std::move(w));
}

int real_main(int argc, char** argv) {
  kvd::cli::Params o;
  o.steps = 16;
  o.out_dir = "docs";
  kvd::cli::OptionTable table(kvd::cli::kConversation, o, kIntro);
  table.set_help("--out-dir", "where to write conversation_ttft.csv and conversation_ttft.svg");
  table.set_help("--steps", "tokens generated per reply (greedy)");
  table.set_help("--quick", "the stories15M shape instead (seconds; figures are not the 1.1B ones)");
  table.set_help("--tokenizer", "a llama2.c tokenizer.bin (e.g. Llama 2's, TinyLlama's vocabulary) or any format "
                 "kvd::load_tokenizer reads; without it one token per byte");
  table.parse(argc, argv);
  if (o.help) {
    std::cout << table.help();
    return 0;
  }
  if (o.threads > 0) kvd::set_num_threads(o.threads);
  kvd::Transformer<float> model = make_model(o.quick);
  const int V = model.config().vocab_size;

  std::unique_ptr<kvd::TextTokenizer> tok;
  if (!o.tokenizer.empty()) tok = kvd::load_tokenizer(o.tokenizer, V);
  kvd::Chat<float, Cache, Message>::Encoder enc = [&](const std::string& s) {
    if (tok) return tok->encode(s, true, true);
    std::vector<int> ids;
    for (unsigned char ch : s) ids.push_back(3 + ch);
    return ids;
  };
  kvd::Chat<float, Cache, Message>::Decoder dec = [&](const std::vector<int>& ids) {
    if (tok) return tok->decode(ids);
    std::string s;
    for (int id : ids) s += id >= 3 && id < 259 ? static_cast<char>(id - 3) : '?';
    return s;
  };
  Side reuse(model, true, enc, dec), full(model, false, enc, dec);
  kvd::GenerateOptions gopt;
  gopt.max_new_tokens = o.steps;  // greedy, no stop token: every reply has the same length

  std::vector<TurnFigures> turns;
  bool identical = true;
  for (const char* user : kUsers) {
    std::vector<float> rows_a, rows_b;
    kvd::GenerateHooks<float> ha, hb;
    ha.all_prompt_logits = hb.all_prompt_logits = true;
    ha.on_logits = [&](int, const float* l, int n) { rows_a.insert(rows_a.end(), l, l + n); };
    hb.on_logits = [&](int, const float* l, int n) { rows_b.insert(rows_b.end(), l, l + n); };
    TurnFigures f;
    f.reuse = reuse.chat.reply(user, gopt, ha);  // the two alternate, so a busy moment hits both
    f.full = full.chat.reply(user, gopt, hb);
    const bool same = f.reuse.tokens == f.full.tokens && rows_a.size() == rows_b.size() &&
                      std::memcmp(rows_a.data(), rows_b.data(), rows_a.size() * sizeof(float)) == 0;
    identical = identical && same;
    turns.push_back(f);
    std::cerr << "turn " << turns.size() << ": " << f.reuse.prompt_tokens << " tokens; reuse: " << f.reuse.prefilled
              << " prefilled in " << std::fixed << std::setprecision(1) << f.reuse.prefill_seconds * 1e3
              << " ms; re-prefill: " << f.full.prefilled << " in " << f.full.prefill_seconds * 1e3 << " ms; "
              << (same ? "identical" : "DIFFERENT") << "\n";
  }

  // The table.
  std::cout << std::fixed;
  std::cout << "| turn | conversation tokens | prefilled (reuse) | reused | first token (reuse) | prefilled (no reuse) "
               "| first token (no reuse) | speed-up |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  double sum_a = 0, sum_b = 0;
  long pre_a = 0, pre_b = 0;
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const auto& a = turns[i].reuse;
    const auto& b = turns[i].full;
    sum_a += a.prefill_seconds;
    sum_b += b.prefill_seconds;
    pre_a += a.prefilled;
    pre_b += b.prefilled;
    std::cout << "| " << i + 1 << " | " << a.prompt_tokens << " | " << a.prefilled << " | " << a.reused << " | "
              << std::setprecision(0) << a.prefill_seconds * 1e3 << " ms | " << b.prefilled << " | "
              << b.prefill_seconds * 1e3 << " ms | " << std::setprecision(1) << b.prefill_seconds / a.prefill_seconds
              << "x |\n";
  }
  std::cout << "| all | | " << pre_a << " | | " << std::setprecision(2) << sum_a << " s | " << pre_b << " | " << sum_b
            << " s | " << std::setprecision(1) << sum_b / sum_a << "x |\n";
  std::cout << "tokens and logits identical with and without reuse: " << (identical ? "yes" : "NO") << "\n";

  // CSV and chart.
  fs::create_directories(o.out_dir);
  {
    std::ofstream csv(fs::path(o.out_dir) / "conversation_ttft.csv");
    csv << "turn,conversation_tokens,prefilled_reuse,reused,ttft_ms_reuse,prefilled_no_reuse,ttft_ms_no_reuse\n";
    for (std::size_t i = 0; i < turns.size(); ++i)
      csv << i + 1 << ',' << turns[i].reuse.prompt_tokens << ',' << turns[i].reuse.prefilled << ','
          << turns[i].reuse.reused << ',' << kvd_bench::fmt("%.3f", turns[i].reuse.prefill_seconds * 1e3) << ','
          << turns[i].full.prefilled << ',' << kvd_bench::fmt("%.3f", turns[i].full.prefill_seconds * 1e3) << '\n';
  }
  kvd_bench::Series a{"cache kept across turns (prefill only the new tokens)", "#1f63b4", {}, {}};
  kvd_bench::Series b{"whole conversation re-prefilled every turn", "#d6452a", {}, {}, true};
  for (std::size_t i = 0; i < turns.size(); ++i) {
    a.x.push_back(static_cast<double>(i + 1));
    a.y.push_back(turns[i].reuse.prefill_seconds * 1e3);
    b.x.push_back(static_cast<double>(i + 1));
    b.y.push_back(turns[i].full.prefill_seconds * 1e3);
  }
  const std::string subtitle = std::string(o.quick ? "stories15M" : "TinyLlama-1.1B") + " shape, bf16 weights, " +
                               std::to_string(kvd::num_threads()) + " threads, " + std::to_string(o.steps) +
                               "-token replies; tokens and logits identical both ways";
  std::ofstream(fs::path(o.out_dir) / "conversation_ttft.svg")
      << kvd_bench::line_chart_svg("Time to first token per chat turn", subtitle, "turn", "ms to first token", {a, b},
                                   kvd_bench::fmt("%.0fx", b.y.back() / a.y.back()),
                                   "one run on a shared 2-core machine: figures are noisy");
  std::cerr << "wrote " << (fs::path(o.out_dir) / "conversation_ttft.csv").string() << " and conversation_ttft.svg\n";
  return identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return kvd::cli::run_main("kvdecode-conversation", [&] { return real_main(argc, argv); });
}
