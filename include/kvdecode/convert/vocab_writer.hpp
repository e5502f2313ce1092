// Writing a Hugging Face tokenizer.json as a GGUF vocabulary: llama.cpp's
// tokenizer.ggml.* keys, laid out as its convert_hf_to_gguf.py lays them out, so
// that kvdecode's GGUF tokenizer (tokenizer_gguf.hpp) and llama.cpp read back the
// tokenizer the file describes. The file is read with tokenizer_json.hpp's reader;
// this header only maps the TokenizerSpec it fills onto GGUF keys.
//
//   Byte-level BPE (a ByteLevel pre-tokenizer: Llama 3, Qwen2/3, GPT-2): model
//     "gpt2" with tokens, token_type and merges ("a b"), and tokenizer.ggml.pre, the
//     name llama.cpp gives the pre-tokenizer. It is found by comparing the file's
//     Split regexes with those of every name gguf_pre_tokenizer() knows (llama.cpp
//     hashes the encoding of a test text instead, which needs the tokenizer to run).
//   BPE with byte fallback on text whose spaces are "▁" (Mistral, Llama 2): model
//     "llama" with scores. GGUF "llama" merges SentencePiece-style, the adjacent pair
//     whose concatenation scores highest first; each token scores -(1 + the rank of
//     the first merge that makes it), so the score order is the merges' rank order.
//     (llama.cpp's converter, through gguf-py's LlamaHfVocab, writes a placeholder
//     -1000 for every token of such a file, which leaves the order to position.)
//     Tokens no merge makes score kNoMergeScore, below every merge. Mistral's file
//     shows why ids will not do: its "▁▁" (id 259) comes from merge 58876.
//   Both: bos/eos/unknown/padding ids, add_bos/add_eos as the reader found them
//     (tokenizer_config.json, else the post_processor's template), always written;
//     tokenizer.chat_template from tokenizer_config.json ("default" of a list of
//     named templates, the others as tokenizer.chat_template.NAME) or from
//     chat_template.jinja beside it; a model vocabulary larger than the tokenizer's
//     padded with "[PAD<id>]" unused tokens, as llama.cpp does.
//   Token types: the reader's (normal, byte, control for special added tokens,
//     user-defined for the others, unknown for the unk token in "llama"). Unlike
//     today's convert_hf_to_gguf.py, an added token the file calls not special
//     stays user-defined even when it looks special ("<|fim_prefix|>"): it is then
//     matched in text and decoded as the file says, and the types equal those of
//     ../shared's vocab-qwen3.gguf (written by gguf-py without that rule).
//
// What GGUF cannot say is refused (ConfigError naming the file and the step): a
// pre-tokenizer no name matches, a ByteLevel step that adds a prefix space, a
// Metaspace pre-tokenizer, normalizers other than NFC (byte-level) or Prepend/
// Replace "▁" (byte fallback), decoders other than the ones each model implies,
// added tokens that strip whitespace (lstrip/rstrip), an ignore_merges that
// differs from the named pre-tokenizer's. One step is dropped, as llama.cpp drops
// it: the NFC normalizer of byte-level files (Qwen's), so the GGUF tokenizer gives
// other ids than tokenizer.json for text that is not already in NFC.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvdecode/text/bpe_tokenizer.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/io/gguf.hpp"
#include "kvdecode/text/text_tokenizer.hpp"
#include "kvdecode/text/tokenizer_gguf.hpp"
#include "kvdecode/text/tokenizer_json.hpp"

namespace kvd {

/// Score of a "llama" token that no merge makes (padding, specials, bytes, single
/// characters): below every merge's, so SentencePiece merging reaches it last.
constexpr float kNoMergeScore = -1e9f;

namespace detail {

/// The tokenizer.ggml.pre name whose regexes are exactly `regexes`, or "".
inline std::string match_pre_tokenizer(const std::vector<std::string>& regexes, GgufPreTokenizer& found) {
  // One name per distinct pre-tokenizer: the name llama.cpp's converter writes.
  for (const char* name : {"llama-bpe", "qwen2", "tekken", "smollm", "gpt-2"}) {
    GgufPreTokenizer p;
    if (!gguf_pre_tokenizer(name, p) || p.regexes.size() != regexes.size()) continue;
    bool same = true;
    for (std::size_t k = 0; k < regexes.size(); ++k) same = same && regexes[k] == p.regexes[k];
    if (same) {
      found = p;
      return name;
    }
  }
  return "";
}

/// The tokenizer_config.json's chat templates as GGUF keys (see the top of the file).
inline void chat_template_keys(const std::string& json_path, std::vector<std::pair<std::string, GGUFValue>>& keys) {
  const std::string cfg_path = tokenizer_config_path(json_path);
  nlohmann::json cfg;
  if (!cfg_path.empty()) cfg = parse_json(read_text_file(cfg_path, kMaxTokenizerJsonBytes), cfg_path);
  if (cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const nlohmann::json& t = cfg["chat_template"];
    if (t.is_string()) {
      keys.emplace_back("tokenizer.chat_template", GGUFValue::of_string(t.get<std::string>()));
      return;
    }
    if (!t.is_array()) throw FormatError(msg(cfg_path, ": chat_template is neither a string nor a list of templates"));
    std::vector<std::string> names;
    std::string dflt;
    bool has_default = false;
    for (std::size_t k = 0; k < t.size(); ++k) {
      const nlohmann::json& c = t[k];
      if (!c.is_object() || !c.contains("name") || !c["name"].is_string() || !c.contains("template") ||
          !c["template"].is_string())
        throw FormatError(msg(cfg_path, ": chat_template[", k, "] is not {\"name\": string, \"template\": string}"));
      std::string name = c["name"].get<std::string>();
      for (char& ch : name)  // gguf-py's filter: a key part of letters, digits and '_'
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))) ch = '_';
      if (name.empty()) continue;
      if (name == "default") {
        dflt = c["template"].get<std::string>();
        has_default = true;
      } else {
        keys.emplace_back("tokenizer.chat_template." + name, GGUFValue::of_string(c["template"].get<std::string>()));
        names.push_back(name);
      }
    }
    if (!names.empty()) {
      GGUFValue v = GGUFValue::of_array(GGUFType::kString);
      v.as = names;
      keys.emplace_back("tokenizer.chat_templates", std::move(v));
    }
    if (has_default) keys.emplace_back("tokenizer.chat_template", GGUFValue::of_string(dflt));
    return;
  }
  // Newer folders keep the template in its own file.
  const std::filesystem::path jinja = std::filesystem::path(json_path).parent_path() / "chat_template.jinja";
  std::error_code ec;
  if (std::filesystem::is_regular_file(jinja, ec))
    keys.emplace_back("tokenizer.chat_template",
                      GGUFValue::of_string(read_text_file(jinja.string(), kMaxTokenizerJsonBytes)));
}

/// The tokenizer.ggml.* keys (in llama.cpp's order) for `spec`, read from
/// `source`, for a model of `vocab_size` rows (0: the tokenizer's size). Throws
/// ConfigError as write_tokenizer_json_vocab says; FormatError if the spec does not
/// make a valid tokenizer.
inline std::vector<std::pair<std::string, GGUFValue>> tokenizer_spec_keys(const TokenizerSpec& spec,
                                                                          const std::string& source, int vocab_size) {
  auto refuse = [&](const std::string& what) {
    throw ConfigError(msg(source, ": cannot be written as a GGUF vocabulary: ", what));
  };
  const std::size_t n = spec.tokens.size();
  if (vocab_size < 0) throw ArgumentError(msg("write_tokenizer_json_vocab: vocab_size ", vocab_size, " is negative"));
  if (vocab_size > BpeTokenizer::kMaxVocab)
    throw ConfigError(msg(source, ": model vocab_size ", vocab_size, " exceeds the limit ", BpeTokenizer::kMaxVocab));
  const std::size_t total = vocab_size == 0 ? n : static_cast<std::size_t>(vocab_size);
  if (total < n)
    throw ConfigError(msg(source, ": the tokenizer has ", n, " tokens but the model's vocab_size is ", vocab_size,
                          " (tokenizer.ggml.tokens must have one token per embedding row)"));

  // The whole tokenizer must build (unique texts, merges naming tokens, ids in range).
  const BpeTokenizer check{TokenizerSpec(spec)};
  for (const AddedToken& a : spec.added)
    if (a.lstrip || a.rstrip)
      refuse(msg("added token '", a.content, "' (id ", a.id, ") strips the whitespace ", a.lstrip ? "before" : "after",
                 " it (lstrip/rstrip), which GGUF cannot say"));

  bool byte_level = false;
  for (const PreTokenizerStep& p : spec.pre_tokenizers) byte_level = byte_level || p.kind == PreTokenizerStep::kByteLevel;
  const bool spm = !byte_level && spec.byte_fallback;
  if (!byte_level && !spm)
    refuse("its BPE is neither byte-level (a ByteLevel pre-tokenizer) nor with byte_fallback");

  std::vector<std::pair<std::string, GGUFValue>> keys;
  auto str = [&](const char* k, std::string v) { keys.emplace_back(k, GGUFValue::of_string(std::move(v))); };
  // A GGUF "llama" vocabulary without bos/eos/unknown ids means 1, 2 and 0; one
  // that has none says so with 0xFFFFFFFF (llama.cpp's LLAMA_TOKEN_NULL as u32; it
  // warns and keeps its default). gpt2's defaults are none, so nothing is written.
  auto u32 = [&](const char* k, int id, bool none_has_default) {
    if (id >= 0) keys.emplace_back(k, GGUFValue::of_u32(static_cast<std::uint32_t>(id)));
    else if (none_has_default) keys.emplace_back(k, GGUFValue::of_u32(0xFFFFFFFFu));
  };
  std::string pre = "default";
  bool space_prefix = false;
  if (byte_level) {
    if (spec.byte_fallback) refuse("model.byte_fallback is set on a byte-level BPE");
    for (const NormalizerStep& s : spec.normalizers)
      if (s.kind != NormalizerStep::kNfc) refuse("its normalizer has a step other than NFC (GGUF gpt2 has none)");
    std::vector<std::string> regexes;
    for (std::size_t k = 0; k < spec.pre_tokenizers.size(); ++k) {
      const PreTokenizerStep& p = spec.pre_tokenizers[k];
      const std::string where = msg("pre_tokenizer step ", k);
      if (p.kind == PreTokenizerStep::kSplit) {
        if (!p.regex) refuse(where + " splits on a String pattern; GGUF pre-tokenizers are regexes");
        if (p.behavior != SplitBehavior::kIsolated || p.invert)
          refuse(where + " is a Split whose behaviour is not Isolated (or is inverted)");
        regexes.push_back(p.regex->pattern());
      } else if (p.kind == PreTokenizerStep::kByteLevel) {
        if (k + 1 != spec.pre_tokenizers.size()) refuse(where + " (ByteLevel) is not the last step");
        if (p.add_prefix_space) refuse(where + " (ByteLevel) has add_prefix_space, which GGUF gpt2 cannot say");
        if (p.byte_level_regex) regexes.push_back(p.byte_level_regex->pattern());  // use_regex: GPT-2's split first
      } else {
        refuse(where + " is a Metaspace, which GGUF gpt2 cannot say");
      }
    }
    GgufPreTokenizer found;
    pre = match_pre_tokenizer(regexes, found);
    if (pre.empty()) {
      std::string list;
      for (const std::string& r : regexes) list += (list.empty() ? "'" : ", '") + r + "'";
      refuse("its pre-tokenizer (regexes " + list +
             ") is none that tokenizer.ggml.pre names (known: llama-bpe, qwen2, tekken, smollm, gpt-2)");
    }
    if (found.ignore_merges != spec.ignore_merges)
      refuse(msg("model.ignore_merges is ", spec.ignore_merges ? "true" : "false", " but llama.cpp's pre-tokenizer '",
                 pre, "' ", found.ignore_merges ? "ignores" : "applies", " merges on whole-token pieces"));
    if (spec.decoders.size() != 1 || spec.decoders[0].kind != DecoderStep::kByteLevel)
      refuse("its decoder is not a single ByteLevel step");
  } else {
    const std::string kSpace = "\xE2\x96\x81";  // "▁"
    const auto& nz = spec.normalizers;
    space_prefix = !nz.empty() && nz[0].kind == NormalizerStep::kPrepend;
    const std::size_t r = space_prefix ? 1 : 0;
    if ((space_prefix && nz[0].text != kSpace) || nz.size() != r + 1 || nz[r].kind != NormalizerStep::kReplace ||
        nz[r].regex || nz[r].text != " " || nz[r].content != kSpace)
      refuse("its normalizer is not [Prepend \"\xE2\x96\x81\",] Replace \" \" -> \"\xE2\x96\x81\" (GGUF llama's)");
    if (!spec.pre_tokenizers.empty()) refuse("it has a pre-tokenizer, which GGUF llama cannot say");
    if (spec.ignore_merges) refuse("model.ignore_merges is set, which GGUF llama cannot say");
    const auto& d = spec.decoders;
    const bool ok = d.size() == (space_prefix ? 4u : 3u) && d[0].kind == DecoderStep::kReplace && d[0].text == kSpace &&
                    d[0].content == " " && d[1].kind == DecoderStep::kByteFallback && d[2].kind == DecoderStep::kFuse &&
                    (!space_prefix || (d[3].kind == DecoderStep::kStrip && d[3].text == " " && d[3].start == 1 &&
                                       d[3].stop == 0));
    if (!ok) refuse("its decoder is not Replace \"\xE2\x96\x81\" -> \" \", ByteFallback, Fuse[, Strip 1] (GGUF llama's)");
    if (spec.merges.size() >= (std::size_t{1} << 24))
      refuse(msg(spec.merges.size(), " merges: scores of float32 cannot rank more than 2^24"));
  }

  // tokens, types (and scores), padded to the model's vocabulary.
  std::vector<std::string> tokens = spec.tokens;
  std::vector<std::int32_t> types(total, static_cast<std::int32_t>(TokenType::kUnused));
  for (std::size_t i = 0; i < n; ++i) {
    TokenType t = spec.types.empty() ? TokenType::kNormal : spec.types[i];
    if (spm && static_cast<int>(i) == spec.unk) t = TokenType::kUnknown;
    types[i] = static_cast<std::int32_t>(t);
  }
  for (std::size_t i = n; i < total; ++i) {
    tokens.push_back(msg("[PAD", i, "]"));
    if (check.find(tokens.back()) >= 0) refuse(msg("padding token '", tokens.back(), "' is already in the vocabulary"));
  }

  str("tokenizer.ggml.model", spm ? "llama" : "gpt2");
  str("tokenizer.ggml.pre", pre);
  {
    GGUFValue v = GGUFValue::of_array(GGUFType::kString);
    v.as = std::move(tokens);
    keys.emplace_back("tokenizer.ggml.tokens", std::move(v));
  }
  if (spm) {
    std::unordered_map<std::string, std::size_t> first_rank;
    first_rank.reserve(spec.merges.size());
    for (std::size_t r = 0; r < spec.merges.size(); ++r)
      first_rank.emplace(spec.merges[r].first + spec.merges[r].second, r);
    GGUFValue v = GGUFValue::of_array(GGUFType::kF32);
    v.af.assign(total, kNoMergeScore);
    for (std::size_t i = 0; i < n; ++i) {
      const auto it = first_rank.find(spec.tokens[i]);
      if (it != first_rank.end()) v.af[i] = -(1.0 + static_cast<double>(it->second));
    }
    keys.emplace_back("tokenizer.ggml.scores", std::move(v));
  }
  {
    GGUFValue v = GGUFValue::of_array(GGUFType::kI32);
    v.ai.assign(types.begin(), types.end());
    keys.emplace_back("tokenizer.ggml.token_type", std::move(v));
  }
  if (!spm) {
    GGUFValue v = GGUFValue::of_array(GGUFType::kString);
    v.as.reserve(spec.merges.size());
    for (std::size_t r = 0; r < spec.merges.size(); ++r) {
      const auto& [a, b] = spec.merges[r];
      // The reader splits "a b" at the first space after the first byte.
      if (a.find(' ', 1) != std::string::npos)
        refuse(msg("merge ", r, " ('", a, "', '", b, "') has a space that \"a b\" cannot tell from the separator"));
      v.as.push_back(a + " " + b);
    }
    keys.emplace_back("tokenizer.ggml.merges", std::move(v));
  } else {
    keys.emplace_back("tokenizer.ggml.add_space_prefix", GGUFValue::of_bool(space_prefix));
  }
  u32("tokenizer.ggml.bos_token_id", spec.bos, spm);
  u32("tokenizer.ggml.eos_token_id", spec.eos, spm);
  u32("tokenizer.ggml.unknown_token_id", spec.unk, spm);
  u32("tokenizer.ggml.padding_token_id", spec.pad, false);
  keys.emplace_back("tokenizer.ggml.add_bos_token", GGUFValue::of_bool(spec.add_bos));
  keys.emplace_back("tokenizer.ggml.add_eos_token", GGUFValue::of_bool(spec.add_eos));
  return keys;
}

}  // namespace detail

/// Writes the vocabulary of the tokenizer.json at `path` (a file of any name, or a
/// folder holding tokenizer.json) and of the tokenizer_config.json beside it into
/// `g` as tokenizer.ggml.* keys and tokenizer.chat_template (see the top of this
/// file), for a model whose embedding has `vocab_size` rows (0: as many as the
/// tokenizer has tokens); a larger vocab_size is padded with "[PAD<id>]" unused
/// tokens. Throws FileError if a file cannot be read; FormatError (naming the file
/// and the JSON path) for a malformed tokenizer.json, tokenizer_config.json or chat
/// template; ConfigError naming the file and the step for a tokenizer GGUF cannot
/// express, a vocab_size smaller than the tokenizer's token count or above
/// BpeTokenizer::kMaxVocab; ArgumentError for a negative vocab_size. On any throw
/// `g` is unchanged: every key is computed before the first is set.
inline void write_tokenizer_json_vocab(GGUFWriter& g, const std::string& path, int vocab_size = 0) {
  std::error_code ec;
  const std::string file =
      std::filesystem::is_directory(path, ec) ? (std::filesystem::path(path) / "tokenizer.json").string() : path;
  const TokenizerSpec spec = read_tokenizer_json_spec(file);
  std::vector<std::pair<std::string, GGUFValue>> keys = detail::tokenizer_spec_keys(spec, file, vocab_size);
  detail::chat_template_keys(file, keys);
  for (auto& [k, v] : keys) g.set(k, std::move(v));
}

}  // namespace kvd
