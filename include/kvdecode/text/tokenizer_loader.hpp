// load_tokenizer(path): opens any tokenizer kvdecode reads, telling the formats
// apart by their bytes, never by the file name:
//   - a folder: the tokenizer.json inside it;
//   - "GGUF" magic: the vocabulary in a GGUF file's metadata (a model or a
//     vocabulary-only file);
//   - a JSON object (first non-blank byte '{'): Hugging Face's tokenizer.json,
//     with the tokenizer_config.json beside it;
//   - anything else: llama2.c's tokenizer.bin.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>

#include "kvdecode/error.hpp"
#include "kvdecode/text/text_tokenizer.hpp"
#include "kvdecode/text/llama2c_tokenizer.hpp"
#include "kvdecode/text/tokenizer_gguf.hpp"
#include "kvdecode/text/tokenizer_json.hpp"

namespace kvd {

/// What a tokenizer file holds, judged from its first bytes.
enum class TokenizerFormat { kGguf, kTokenizerJson, kLlama2c };

/// The format of the tokenizer at `path` (a folder means its tokenizer.json).
/// Throws FileError naming the path if it is missing or unreadable, or a folder
/// without tokenizer.json.
inline TokenizerFormat detect_tokenizer_format(const std::string& path, std::string* resolved = nullptr) {
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec)) {
    file = (std::filesystem::path(path) / "tokenizer.json").string();
    if (!std::filesystem::is_regular_file(file, ec))
      throw FileError(detail::msg(path, " is a folder without tokenizer.json"));
  }
  if (resolved) *resolved = file;
  std::ifstream in(file, std::ios::binary);
  if (!in) throw FileError(detail::msg("cannot open tokenizer ", file));
  char head[64] = {};
  in.read(head, sizeof head);
  const auto n = static_cast<std::size_t>(in.gcount());
  if (n >= 4 && head[0] == 'G' && head[1] == 'G' && head[2] == 'U' && head[3] == 'F') return TokenizerFormat::kGguf;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = head[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (c == '{') return TokenizerFormat::kTokenizerJson;
    break;
  }
  return TokenizerFormat::kLlama2c;
}

/// Loads the tokenizer at `path` in whichever format it is (see the top of this
/// file). Throws FileError/FormatError naming the file and the problem.
inline std::unique_ptr<TextTokenizer> load_tokenizer(const std::string& path) {
  std::string file;
  switch (detect_tokenizer_format(path, &file)) {
    case TokenizerFormat::kGguf: return load_tokenizer_gguf_file(file);
    case TokenizerFormat::kTokenizerJson: return load_tokenizer_json(file);
    case TokenizerFormat::kLlama2c: break;
  }
  return std::make_unique<Llama2cTextTokenizer>(Llama2cTokenizer::load(file), file);
}

namespace detail {

/// Refuses a tokenizer (read from `path`) that holds more tokens than a model's
/// vocab_size: it could produce ids the model has no row for. FileError naming both counts.
inline void require_tokenizer_fits(const TextTokenizer& tok, const std::string& path, int vocab_size) {
  if (tok.vocab_size() > vocab_size)
    throw FileError(msg(path, ": the tokenizer has ", tok.vocab_size(), " tokens, more than the model's vocab_size ",
                        vocab_size));
}

}  // namespace detail

/// Loads the tokenizer at `path` for a model of `vocab_size` ids: as load_tokenizer(),
/// except that a llama2.c tokenizer.bin (which does not say its own size) is read for
/// exactly vocab_size pieces. Throws what load_tokenizer() throws, and FileError naming
/// the file and both counts when the tokenizer holds more tokens than vocab_size.
inline std::unique_ptr<TextTokenizer> load_tokenizer(const std::string& path, int vocab_size) {
  std::string file;
  std::unique_ptr<TextTokenizer> tok;
  if (detect_tokenizer_format(path, &file) == TokenizerFormat::kLlama2c)
    tok = std::make_unique<Llama2cTextTokenizer>(Llama2cTokenizer::load(file, vocab_size), file);
  else
    tok = load_tokenizer(path);
  detail::require_tokenizer_fits(*tok, path, vocab_size);
  return tok;
}

}  // namespace kvd
