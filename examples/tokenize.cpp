// kvdecode-tokenize: encodes text with any tokenizer kvdecode reads (a GGUF
// file, vocabulary-only ones included; a Hugging Face tokenizer.json under any
// name or the folder holding it; a llama2.c tokenizer.bin), told apart by content.
//
//   kvdecode-tokenize --model ../shared/models/vocab/vocab-llama3.gguf --text "Hello world" --pieces
//   kvdecode-tokenize --model ../shared/models/tokenizer-json/qwen3 --cases ../shared/reference/vocab/ggml-vocab-qwen2.gguf.inp
//   kvdecode-tokenize --model ../shared/models/tokenizer-json/llama3 --cases FILE --bench
//   kvdecode-tokenize --model ../shared/models/vocab/vocab-qwen3.gguf --render-chat ../shared/reference/chat/conversations.json
//
// Exit status: 0 on success, 1 if the tokenizer or input cannot be used, 2 on a bad argument.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "kvdecode/chat/chat_template.hpp"
#include "kvdecode/text/tokenizer_loader.hpp"

namespace {

using kvd::ArgumentError;
using kvd::detail::msg;

const char* const kIntro = R"(kvdecode-tokenize: text to token ids with a model's own tokenizer

Usage:
  kvdecode-tokenize --model PATH --text TEXT [--pieces] [--no-bos] [--no-special]
  kvdecode-tokenize --model PATH --cases FILE
  kvdecode-tokenize --model PATH --render-chat FILE [--chat-template NAME]
  kvdecode-tokenize --model PATH (--text TEXT | --cases FILE) --bench)";

const char* const kOutro = R"(Options take their value as the next argument or after '=' (--text=hi).
Exit status: 0 success, 1 tokenizer or input unusable, 2 bad argument.
)";

// Input files (a case file, a conversation list): at most 1 GiB.
std::string read_file(const std::string& path) { return kvd::detail::read_text_file(path, std::uint64_t{1} << 30); }

// llama.cpp's test format: texts separated by "\n__ggml_vocab_test__\n" (also after the last).
std::vector<std::string> split_cases(const std::string& all) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  std::size_t pos = 0;
  for (std::size_t hit; (hit = all.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
    cases.push_back(all.substr(pos, hit - pos));
  if (pos < all.size()) cases.push_back(all.substr(pos));
  return cases;
}

// A piece as printable text: control bytes and bytes that are not (yet) whole
// UTF-8 characters escaped as \xNN, quotes around it.
std::string printable(const std::string& s) {
  std::string out = "'";
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = kvd::detail::utf8_unit(s.data(), s.size(), i);
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7F || !kvd::detail::utf8_valid_unit(s.data(), i, len)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  return out + "'";
}

// --render-chat: FILE is a JSON list of {"messages": [{"role", "content"}...],
// "add_generation_prompt": bool}; prints the renderings as a JSON array, one per line,
// each byte of invalid UTF-8 (a GGUF's template may hold any bytes) as U+FFFD, as
// --json does, so that the output is always valid JSON.
int render_chat(const kvd::cli::Params& p) {
  kvd::ChatTemplate tmpl = [&] {
    if (p.chat_template.empty()) return kvd::load_chat_template(*p.model);
    kvd::ChatTemplate t = [&] {
      try {
        return kvd::ChatTemplate::builtin(p.chat_template);
      } catch (const kvd::ConfigError& e) {
        throw ArgumentError(msg("--chat-template: ", e.what()));
      }
    }();
    const auto tok = kvd::load_tokenizer(*p.model);  // the built-in gets this vocabulary's BOS/EOS text
    t.set_special_tokens(tok->bos_id() >= 0 ? tok->token_text(tok->bos_id()) : std::string(),
                         tok->eos_id() >= 0 ? tok->token_text(tok->eos_id()) : std::string());
    return t;
  }();
  const std::string& file = *p.render_chat;
  const nlohmann::json all = kvd::detail::parse_json(read_file(file), file);
  if (!all.is_array()) throw kvd::FormatError(msg(file, ": expected a JSON list of conversations"));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const nlohmann::json& c = all[i];
    const std::string where = msg(file, ": conversation ", i);
    if (!c.is_object() || !c.contains("messages") || !c["messages"].is_array())
      throw kvd::FormatError(where + " is not {\"messages\": [...], \"add_generation_prompt\": bool}");
    std::vector<kvd::ChatMessage> messages;
    for (std::size_t k = 0; k < c["messages"].size(); ++k) {
      const nlohmann::json& m = c["messages"][k];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string())
        throw kvd::FormatError(msg(where, ": messages[", k, "] is not {\"role\": string, \"content\": string}"));
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    bool gen = false;
    if (c.contains("add_generation_prompt")) {
      if (!c["add_generation_prompt"].is_boolean()) throw kvd::FormatError(where + ": add_generation_prompt is not a boolean");
      gen = c["add_generation_prompt"].get<bool>();
    }
    out.push_back(tmpl.render(messages, gen));
  }
  std::cout << "[";
  for (std::size_t i = 0; i < out.size(); ++i) std::cout << (i ? ",\n " : "\n ") << kvd::cli::json_string(kvd::detail::utf8_repair(out[i]));
  std::cout << (out.empty() ? "]\n" : "\n]\n");
  return 0;
}

int run(int argc, char** argv) {
  kvd::cli::Params p;
  kvd::cli::OptionTable table(kvd::cli::kTokenize, p, kIntro, kOutro);
  table.set_help("--model", "tokenizer: GGUF file, tokenizer.json (any name) or its folder, or llama2.c tokenizer.bin",
                 "Tokenize");
  table.parse(argc, argv);
  if (p.help || argc == 1) {
    std::cout << table.help();
    return 0;
  }
  if (!p.model) throw ArgumentError("--model is required");
  if (!p.chat_template.empty() && !p.render_chat) throw ArgumentError("--chat-template goes with --render-chat");
  if (p.render_chat) {
    if (p.text || p.cases || p.pieces || p.bench) throw ArgumentError("--render-chat excludes --text, --cases, --pieces and --bench");
    return render_chat(p);
  }
  if (p.text && p.cases) throw ArgumentError("--text and --cases exclude each other");
  if (!p.text && !p.cases) throw ArgumentError("give --text TEXT, --cases FILE or --render-chat FILE");
  if (p.cases && p.pieces) throw ArgumentError("--pieces goes with --text");

  const auto tok = kvd::load_tokenizer(*p.model);
  std::cerr << tok->describe() << '\n';

  if (p.bench) {
    const std::string text = p.text ? *p.text : read_file(*p.cases);
    if (text.empty()) throw ArgumentError("--bench needs a non-empty input");
    // Encode the whole input repeatedly for about a second; report bytes per second.
    using clock = std::chrono::steady_clock;
    std::size_t bytes = 0, ids = 0;
    const auto t0 = clock::now();
    double seconds = 0;
    do {
      ids += tok->encode(text, false, !p.no_special).size();
      bytes += text.size();
      seconds = std::chrono::duration<double>(clock::now() - t0).count();
    } while (seconds < 1.0);
    std::cout << "encoded " << bytes << " bytes into " << ids << " tokens in " << seconds << " s: "
              << bytes / seconds / 1e6 << " MB/s, " << ids / seconds << " tokens/s (one thread)\n";
    return 0;
  }

  if (p.cases) {
    for (const std::string& text : split_cases(read_file(*p.cases))) {
      std::string line;
      for (int id : tok->encode(text, false, false)) line += " " + std::to_string(id);
      std::cout << line << '\n';
    }
    return 0;
  }

  const std::vector<int> ids = tok->encode(*p.text, !p.no_bos, !p.no_special);
  for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << '\n';
  if (p.pieces) {
    for (int id : ids) std::cout << id << '\t' << printable(tok->token_to_piece(id, true)) << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kvd::cli::run_main("kvdecode-tokenize", [&] { return run(argc, argv); });
}
