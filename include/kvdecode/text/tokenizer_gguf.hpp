// Reader for the vocabulary in GGUF metadata (llama.cpp's tokenizer.ggml.* keys),
// as in a model file or a vocabulary-only file. Fills a TokenizerSpec:
//
//   tokenizer.ggml.model = "llama": SentencePiece BPE. tokens, scores, token_type;
//     "<0xNN>" byte fallback; a "▁" prepended to each text segment
//     (tokenizer.ggml.add_space_prefix, default true) and every space written "▁";
//     BOS added by default.
//   tokenizer.ggml.model = "gpt2": byte-level BPE. tokens, token_type, merges by
//     rank; tokenizer.ggml.pre selects the pre-tokenizer regexes (the patterns of
//     the models' own tokenizer.json files, which PCRE2 runs as written).
//   Both: bos/eos/eot/eom/unknown/padding_token_id, add_bos_token, add_eos_token;
//   control, user-defined and unknown tokens are matched verbatim in text (control
//   and unknown ones only when special tokens are parsed), as llama.cpp does.
#pragma once

#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kvdecode/text/bpe_tokenizer.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/io/gguf.hpp"
#include "kvdecode/text/text_tokenizer.hpp"

namespace kvd {

namespace detail {

/// A pre-tokenizer llama.cpp names in tokenizer.ggml.pre: the regexes applied in
/// turn (each splits every piece, keeping matches and gaps), and its defaults.
struct GgufPreTokenizer {
  std::vector<const char*> regexes;
  bool ignore_merges = false;
  bool add_bos = false;
};

/// The pre-tokenizer for `pre`, or false if kvdecode does not know it.
inline bool gguf_pre_tokenizer(const std::string& pre, GgufPreTokenizer& out) {
  static const char* const kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  static const char* const kLlama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* const kQwen2 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* const kTekken =
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
      "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  // o200k (tiktoken's, tokenizer.json's regex): case changes cut words, contractions
  // of either case stay on their word, digits in threes (gpt-oss's vocabulary).
  static const char* const kGpt4o =
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
      "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  auto is = [&](std::initializer_list<const char*> names) {
    for (const char* n : names) if (pre == n) return true;
    return false;
  };
  out = GgufPreTokenizer{};
  if (is({"default", "gpt-2", "gpt2", "phi-2", "roberta-bpe", "mpt", "olmo", "jais"})) {
    out.regexes = {kGpt2};
  } else if (is({"llama-bpe", "llama3", "llama-v3", "falcon3", "dbrx", "smaug-bpe"})) {
    out.regexes = {kLlama3};
    out.ignore_merges = true;
    out.add_bos = true;
  } else if (is({"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"})) {
    out.regexes = {kQwen2};
  } else if (is({"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"})) {
    out.regexes = {"\\p{N}", kGpt2};
  } else if (is({"gpt-4o"})) {
    out.regexes = {kGpt4o};
  } else if (is({"tekken", "mistral"})) {
    out.regexes = {kTekken};
    out.ignore_merges = true;
    out.add_bos = true;
  } else {
    return false;
  }
  return true;
}

}  // namespace detail

/// The tokenizer described by a GGUF file's metadata. Throws FormatError naming the
/// file and the key when tokenizer.ggml.model is absent or unsupported (naming it),
/// tokenizer.ggml.pre names an unknown pre-tokenizer (naming it), an array has the
/// wrong type or length, a token type code is not one GGUF defines, a special
/// token id (other than "none", -1) is outside the vocabulary, or a merge names an
/// unknown token.
inline std::unique_ptr<BpeTokenizer> load_tokenizer_gguf(const GGUFFile& f) {
  const std::string& src = f.path();
  const std::string model = f.get_string("tokenizer.ggml.model");
  TokenizerSpec spec;
  spec.source = src;
  if (model == "llama") {
    spec.model = TokenizerSpec::Model::kSentencePiece;
  } else if (model == "gpt2") {
    spec.model = TokenizerSpec::Model::kBpe;
  } else {
    throw FormatError(detail::msg(src, ": tokenizer.ggml.model '", model,
                                  "' is not supported (supported: llama = SentencePiece, gpt2 = byte-level BPE)"));
  }
  spec.tokens = f.get_string_array("tokenizer.ggml.tokens");
  const std::size_t n = spec.tokens.size();
  for (std::size_t i = 0; i < n; ++i)  // llama.cpp's name for an empty token
    if (spec.tokens[i].empty()) spec.tokens[i] = detail::msg("[EMPTY_", i, "]");
  if (f.find("tokenizer.ggml.scores")) {
    const std::vector<double> s = f.get_f64_array("tokenizer.ggml.scores");
    if (s.size() != n)
      throw FormatError(detail::msg(src, ": tokenizer.ggml.scores has ", s.size(), " entries for ", n, " tokens"));
    spec.scores.assign(s.begin(), s.end());
  }
  spec.types.assign(n, TokenType::kNormal);
  if (f.find("tokenizer.ggml.token_type")) {
    const std::vector<std::int64_t> t = f.get_i64_array("tokenizer.ggml.token_type");
    if (t.size() != n)
      throw FormatError(detail::msg(src, ": tokenizer.ggml.token_type has ", t.size(), " entries for ", n, " tokens"));
    for (std::size_t i = 0; i < n; ++i) {
      if (t[i] < 0 || t[i] > 6)
        throw FormatError(detail::msg(src, ": tokenizer.ggml.token_type[", i, "] = ", t[i],
                                      " is not a GGUF token type (0..6)"));
      spec.types[i] = static_cast<TokenType>(t[i]);
    }
  }
  const std::string name = f.get_string_or("general.name", "");

  auto decoder = [](DecoderStep::Kind kind, const char* text = "", const char* content = "", int start = 0) {
    DecoderStep d{};
    d.kind = kind;
    d.text = text;
    d.content = content;
    d.start = start;
    return d;
  };
  if (spec.model == TokenizerSpec::Model::kSentencePiece) {
    const bool space_prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", true);
    if (space_prefix) spec.normalizers.push_back({NormalizerStep::kPrepend, "\xE2\x96\x81", "", nullptr});
    spec.normalizers.push_back({NormalizerStep::kReplace, " ", "\xE2\x96\x81", nullptr});
    spec.decoders.push_back(decoder(DecoderStep::kReplace, "\xE2\x96\x81", " "));
    spec.decoders.push_back(decoder(DecoderStep::kByteFallback));
    spec.decoders.push_back(decoder(DecoderStep::kFuse));
    if (space_prefix) spec.decoders.push_back(decoder(DecoderStep::kStrip, " ", "", 1));
    spec.byte_fallback = true;
    spec.bos = 1;
    spec.eos = 2;
    spec.unk = 0;
    spec.add_bos = true;
    spec.description = "GGUF llama (SentencePiece BPE)";
  } else {
    const std::string pre = f.get_string_or("tokenizer.ggml.pre", "default");
    detail::GgufPreTokenizer p;
    if (!detail::gguf_pre_tokenizer(pre, p))
      throw FormatError(detail::msg(src, ": tokenizer.ggml.pre '", pre,
                                    "' is not a known pre-tokenizer (known: default, gpt-2, llama-bpe, qwen2, smollm, "
                                    "tekken/mistral, and their aliases)"));
    for (const char* re : p.regexes) {
      PreTokenizerStep s{};
      s.kind = PreTokenizerStep::kSplit;
      s.regex = std::make_shared<detail::Regex>(re, src + ": tokenizer.ggml.pre '" + pre + "'");
      s.behavior = SplitBehavior::kIsolated;
      spec.pre_tokenizers.push_back(std::move(s));
    }
    PreTokenizerStep bl{};
    bl.kind = PreTokenizerStep::kByteLevel;
    spec.pre_tokenizers.push_back(std::move(bl));
    spec.decoders.push_back(decoder(DecoderStep::kByteLevel));
    spec.ignore_merges = p.ignore_merges;
    spec.add_bos = p.add_bos;
    const std::vector<std::string>& merges = f.get_string_array("tokenizer.ggml.merges");
    spec.merges.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const std::string& m = merges[r];
      const std::size_t sp = m.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= m.size())
        throw FormatError(detail::msg(src, ": tokenizer.ggml.merges[", r, "] = '", m,
                                      "' is not two pieces separated by a space"));
      spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
    spec.description = "GGUF gpt2 (byte-level BPE, pre-tokenizer " + pre + ")";
  }

  // Special ids. -1 (also written as u32 0xFFFFFFFF, as llama.cpp's converters do)
  // means "none"; any other id must name a token, except the padding id, which
  // nothing here uses and which is dropped when it does not.
  auto special = [&](const char* key, int& id, bool must_fit) {
    const GGUFValue* v = f.find(key);
    if (!v) return;
    if (!gguf_type_is_integer(v->type)) f.get_u64(key);  // throws the typed-getter's FormatError
    const bool none = gguf_type_is_signed(v->type) ? v->i == -1 : (v->u == 0xFFFFFFFFu || v->u == ~std::uint64_t{0});
    if (none) {
      id = -1;
      return;
    }
    const std::uint64_t x = f.get_u64(key);  // FormatError for other negative values
    if (x < n) {
      id = static_cast<int>(x);
    } else if (must_fit) {
      throw FormatError(detail::msg(src, ": ", key, " = ", x, " at offset ", v->file_offset,
                                    " is outside the vocabulary [0, ", n, ")"));
    } else {
      id = -1;
    }
  };
  if (spec.bos >= static_cast<int>(n)) spec.bos = -1;
  if (spec.eos >= static_cast<int>(n)) spec.eos = -1;
  if (spec.unk >= static_cast<int>(n)) spec.unk = -1;
  special("tokenizer.ggml.bos_token_id", spec.bos, true);
  special("tokenizer.ggml.eos_token_id", spec.eos, true);
  special("tokenizer.ggml.eot_token_id", spec.eot, true);
  special("tokenizer.ggml.eom_token_id", spec.eom, true);
  special("tokenizer.ggml.unknown_token_id", spec.unk, true);
  special("tokenizer.ggml.padding_token_id", spec.pad, false);
  spec.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", spec.add_bos) && spec.bos >= 0;
  spec.add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", false) && spec.eos >= 0;

  // End-of-turn by text when the file names none (llama.cpp's fallback).
  if (spec.eot < 0) {
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>"}) {
      for (std::size_t i = 0; i < n && spec.eot < 0; ++i)
        if (spec.tokens[i] == t) spec.eot = static_cast<int>(i);
      if (spec.eot >= 0) break;
    }
  }

  // Tokens matched verbatim in text. Phi-3's special tokens swallow the whitespace
  // after them (llama.cpp's rule for that model family).
  std::string lname = name;
  for (char& c : lname) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool phi3 = lname.find("phi-3") != std::string::npos || lname.find("phi3") != std::string::npos;
  for (std::size_t i = 0; i < n; ++i) {
    const TokenType t = spec.types[i];
    if (t != TokenType::kControl && t != TokenType::kUserDefined && t != TokenType::kUnknown) continue;
    AddedToken a;
    a.id = static_cast<int>(i);
    a.content = spec.tokens[i];
    a.special = t != TokenType::kUserDefined;
    if (phi3) {
      const std::string& c = a.content;
      a.rstrip = !(c == "<unk>" || c == "<s>" || c == "<|endoftext|>");
    }
    if (!a.content.empty()) spec.added.push_back(std::move(a));
  }
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

/// Opens a GGUF file and reads its vocabulary (see load_tokenizer_gguf). Throws
/// FileError/FormatError naming the file.
inline std::unique_ptr<TextTokenizer> load_tokenizer_gguf_file(const std::string& path) {
  const GGUFFile f = GGUFFile::open(path);
  return load_tokenizer_gguf(f);
}

}  // namespace kvd
