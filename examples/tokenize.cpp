// kvdecode-tokenize: encodes text with any tokenizer kvdecode reads (a GGUF
// file, vocabulary-only ones included; a Hugging Face tokenizer.json under any
// name or the folder holding it; a llama2.c tokenizer.bin), told apart by content.
//
//   kvdecode-tokenize --model ../shared/models/vocab/vocab-llama3.gguf --text "Hello world" --pieces
//   kvdecode-tokenize --model ../shared/models/tokenizer-json/qwen3 --cases ../shared/reference/vocab/ggml-vocab-qwen2.gguf.inp
//   kvdecode-tokenize --model ../shared/models/tokenizer-json/llama3 --cases FILE --bench
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

#include "cli.hpp"
#include "kvdecode/tokenizer_loader.hpp"

namespace {

using kvd::ArgumentError;
using kvd::detail::msg;

const char* const kIntro = R"(kvdecode-tokenize: text to token ids with a model's own tokenizer

Usage:
  kvdecode-tokenize --model PATH --text TEXT [--pieces] [--no-bos] [--no-special]
  kvdecode-tokenize --model PATH --cases FILE
  kvdecode-tokenize --model PATH (--text TEXT | --cases FILE) --bench)";

const char* const kOutro = R"(Options take their value as the next argument or after '=' (--text=hi).
Exit status: 0 success, 1 tokenizer or input unusable, 2 bad argument.
)";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kvd::FileError(msg("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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
  if (p.text && p.cases) throw ArgumentError("--text and --cases exclude each other");
  if (!p.text && !p.cases) throw ArgumentError("give --text TEXT or --cases FILE");
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
