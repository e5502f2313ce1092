// Reader for Hugging Face's tokenizer.json (and the tokenizer_config.json beside
// it, when present): fills a TokenizerSpec for BpeTokenizer.
//
// Supported: model BPE (byte_fallback, fuse_unk, ignore_merges, unk_token, merges
// as "a b" strings or [a, b] pairs); normalizers Sequence, Prepend, Replace, NFC,
// Lowercase; pre-tokenizers Sequence, Split (String or Regex pattern, every
// behaviour, invert), ByteLevel (add_prefix_space, use_regex), Metaspace, Digits;
// decoders Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip;
// added_tokens with special, lstrip and rstrip (they are matched in the raw text,
// before normalization, whatever `normalized` says: every file we know sets it so
// that this is the same thing; `single_word` is not honoured, every token we
// know leaves it false). bos/eos/unk/pad tokens and add_bos_token /
// add_eos_token come from tokenizer_config.json; without add_bos_token, BOS is
// added when the post_processor is a TemplateProcessing that starts with it.
// Anything else (a Unigram or WordPiece model, an NFKC normalizer...) is refused
// with a FormatError naming it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvdecode/text/bpe_tokenizer.hpp"
#include "kvdecode/io/file.hpp"
#include "kvdecode/io/json.hpp"
#include "kvdecode/error.hpp"

namespace kvd {

namespace detail {

/// Reads the fields of tokenizer.json into a spec. All errors are FormatError
/// naming the file and the JSON path of the bad value.
class TokenizerJsonReader {
 public:
  TokenizerJsonReader(std::string source, const nlohmann::json& root, const nlohmann::json* config)
      : src_(std::move(source)), root_(root), config_(config) {}

  TokenizerSpec read() {
    if (!root_.is_object()) fail("(root)", "is not a JSON object");
    TokenizerSpec spec;
    spec.source = src_;
    const nlohmann::json& model = member(root_, "model", "(root)");
    read_model(model, spec);
    if (root_.contains("normalizer")) read_normalizer(root_["normalizer"], "normalizer", spec.normalizers);
    if (root_.contains("pre_tokenizer")) read_pre_tokenizer(root_["pre_tokenizer"], "pre_tokenizer", spec.pre_tokenizers);
    if (root_.contains("decoder")) read_decoder(root_["decoder"], "decoder", spec.decoders);
    read_added_tokens(spec);
    read_specials(spec);
    bool byte_level = false;
    for (const auto& p : spec.pre_tokenizers) byte_level = byte_level || p.kind == PreTokenizerStep::kByteLevel;
    spec.description = std::string("tokenizer.json BPE (") + (byte_level ? "byte-level" : spec.byte_fallback ? "byte fallback" : "plain") + ")";
    return spec;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw FormatError(msg(src_, ": ", path, " ", what));
  }
  const nlohmann::json& member(const nlohmann::json& obj, const char* key, const std::string& path) const {
    if (!obj.is_object()) fail(path, "is not an object");
    const auto it = obj.find(key);
    if (it == obj.end()) fail(path, msg("has no \"", key, "\""));
    return *it;
  }
  std::string str(const nlohmann::json& obj, const char* key, const std::string& path) const {
    const nlohmann::json& v = member(obj, key, path);
    if (!v.is_string()) fail(path + "." + key, "is not a string");
    return v.get<std::string>();
  }
  bool flag(const nlohmann::json& obj, const char* key, bool dflt, const std::string& path) const {
    if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return dflt;
    if (!obj[key].is_boolean()) fail(path + "." + key, "is not true/false");
    return obj[key].get<bool>();
  }
  std::int64_t integer(const nlohmann::json& obj, const char* key, std::int64_t dflt, const std::string& path) const {
    if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return dflt;
    if (!obj[key].is_number_integer()) fail(path + "." + key, "is not an integer");
    return obj[key].get<std::int64_t>();
  }
  std::string type_of(const nlohmann::json& obj, const std::string& path) const { return str(obj, "type", path); }

  // Either {"String": s} or {"Regex": r}.
  void pattern(const nlohmann::json& obj, const std::string& path, std::string& literal,
               std::shared_ptr<Regex>& regex) const {
    const nlohmann::json& p = member(obj, "pattern", path);
    if (p.is_object() && p.contains("String") && p["String"].is_string()) {
      literal = p["String"].get<std::string>();
    } else if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
      regex = std::make_shared<Regex>(p["Regex"].get<std::string>(), src_ + ": " + path + ".pattern");
    } else {
      fail(path + ".pattern", "is neither {\"String\": ...} nor {\"Regex\": ...}");
    }
  }

  void read_model(const nlohmann::json& m, TokenizerSpec& spec) {
    if (!m.is_object()) fail("model", "is not an object");
    const std::string type = m.contains("type") ? str(m, "type", "model") : (m.contains("merges") ? "BPE" : "");
    if (type != "BPE")
      fail("model.type", msg("'", type, "' is not supported (supported: BPE; Unigram, WordPiece and WordLevel are not)"));
    spec.model = TokenizerSpec::Model::kBpe;
    spec.byte_fallback = flag(m, "byte_fallback", false, "model");
    spec.fuse_unk = flag(m, "fuse_unk", false, "model");
    spec.ignore_merges = flag(m, "ignore_merges", false, "model");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
        fail(std::string("model.") + k, "is set, which is not supported");
    }
    const nlohmann::json& vocab = member(m, "vocab", "model");
    if (!vocab.is_object()) fail("model.vocab", "is not an object");
    static const nlohmann::json kNoAddedTokens = nlohmann::json::array();
    const nlohmann::json& added = root_.contains("added_tokens") ? root_["added_tokens"] : kNoAddedTokens;
    if (!added.is_array()) fail("added_tokens", "is not an array");
    // Ids must fill [0, n) exactly: every id names one token, none is left out.
    // n is at most the number of entries, so nothing is sized by a number from the file.
    const std::uint64_t limit = vocab.size() + added.size();
    std::vector<std::string> tokens;
    std::vector<bool> used;
    auto place = [&](std::int64_t id, const std::string& text, const std::string& where, bool may_repeat) {
      if (id < 0 || static_cast<std::uint64_t>(id) >= limit)
        fail(where, msg("id ", id, " of '", text, "' is outside [0, ", limit, ") (the number of entries)"));
      const auto i = static_cast<std::size_t>(id);
      if (i >= tokens.size()) {
        tokens.resize(i + 1);
        used.resize(i + 1, false);
      }
      if (used[i]) {
        if (may_repeat && tokens[i] == text) return;
        fail(where, msg("id ", id, " is given to both '", tokens[i], "' and '", text, "'"));
      }
      tokens[i] = text;
      used[i] = true;
    };
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it.value().is_number_integer()) fail("model.vocab[\"" + it.key() + "\"]", "is not an integer id");
      place(it.value().get<std::int64_t>(), it.key(), "model.vocab", false);
    }
    for (std::size_t k = 0; k < added.size(); ++k) {
      const std::string path = msg("added_tokens[", k, "]");
      const std::string content = str(added[k], "content", path);
      place(integer(added[k], "id", -1, path), content, path, true);
    }
    for (std::size_t i = 0; i < tokens.size(); ++i)
      if (!used[i]) fail("model.vocab", msg("has no token with id ", i, " (ids must run from 0 to ", tokens.size() - 1, ")"));
    spec.tokens = std::move(tokens);

    const nlohmann::json& merges = member(m, "merges", "model");
    if (!merges.is_array()) fail("model.merges", "is not an array");
    spec.merges.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const nlohmann::json& e = merges[r];
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const std::size_t sp = s.find(' ', 1);
        if (sp == std::string::npos || sp + 1 >= s.size())
          fail(msg("model.merges[", r, "]"), msg("'", s, "' is not two pieces separated by a space"));
        spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        spec.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        fail(msg("model.merges[", r, "]"), "is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
    if (m.contains("unk_token") && !m["unk_token"].is_null()) unk_text_ = str(m, "unk_token", "model");
  }

  // Nested Sequences: deeper than this is refused rather than recursed into.
  static constexpr int kMaxDepth = 16;
  void check_depth(const std::string& path, int depth) const {
    if (depth > kMaxDepth) fail(path, msg("nests Sequences ", depth, " deep; the limit is ", kMaxDepth));
  }

  void read_normalizer(const nlohmann::json& n, const std::string& path, std::vector<NormalizerStep>& out, int depth = 0) {
    if (n.is_null()) return;
    check_depth(path, depth);
    const std::string type = type_of(n, path);
    if (type == "Sequence") {
      const nlohmann::json& list = member(n, "normalizers", path);
      if (!list.is_array()) fail(path + ".normalizers", "is not an array");
      for (std::size_t k = 0; k < list.size(); ++k) read_normalizer(list[k], msg(path, ".normalizers[", k, "]"), out, depth + 1);
    } else if (type == "Prepend") {
      out.push_back({NormalizerStep::kPrepend, str(n, "prepend", path), "", nullptr});
    } else if (type == "Replace") {
      NormalizerStep s{NormalizerStep::kReplace, "", str(n, "content", path), nullptr};
      pattern(n, path, s.text, s.regex);
      out.push_back(std::move(s));
    } else if (type == "NFC") {
      out.push_back({NormalizerStep::kNfc, "", "", nullptr});
    } else if (type == "Lowercase") {
      out.push_back({NormalizerStep::kLowercase, "", "", nullptr});
    } else {
      fail(path + ".type", msg("'", type, "' is not a supported normalizer (supported: Sequence, Prepend, Replace, NFC, Lowercase)"));
    }
  }

  static SplitBehavior behavior(const std::string& b, bool& ok) {
    ok = true;
    if (b == "Removed") return SplitBehavior::kRemoved;
    if (b == "Isolated") return SplitBehavior::kIsolated;
    if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (b == "Contiguous") return SplitBehavior::kContiguous;
    ok = false;
    return SplitBehavior::kIsolated;
  }

  // Metaspace's prepend rule: prepend_scheme (newer files) or add_prefix_space (older).
  void metaspace_scheme(const nlohmann::json& p, const std::string& path, bool& add, bool& first) const {
    if (p.contains("prepend_scheme") && !p["prepend_scheme"].is_null()) {
      const std::string s = str(p, "prepend_scheme", path);
      if (s == "always") { add = true; first = false; }
      else if (s == "first") { add = true; first = true; }
      else if (s == "never") { add = false; first = false; }
      else fail(path + ".prepend_scheme", msg("'", s, "' is not always, first or never"));
    } else {
      add = flag(p, "add_prefix_space", true, path);
      first = false;
    }
  }

  void read_pre_tokenizer(const nlohmann::json& p, const std::string& path, std::vector<PreTokenizerStep>& out,
                          int depth = 0) {
    if (p.is_null()) return;
    check_depth(path, depth);
    const std::string type = type_of(p, path);
    PreTokenizerStep s{};
    if (type == "Sequence") {
      const nlohmann::json& list = member(p, "pretokenizers", path);
      if (!list.is_array()) fail(path + ".pretokenizers", "is not an array");
      for (std::size_t k = 0; k < list.size(); ++k) read_pre_tokenizer(list[k], msg(path, ".pretokenizers[", k, "]"), out, depth + 1);
      return;
    } else if (type == "Split") {
      s.kind = PreTokenizerStep::kSplit;
      pattern(p, path, s.text, s.regex);
      bool ok;
      const std::string b = str(p, "behavior", path);
      s.behavior = behavior(b, ok);
      if (!ok) fail(path + ".behavior", msg("'", b, "' is not a split behaviour"));
      s.invert = flag(p, "invert", false, path);
    } else if (type == "ByteLevel") {
      s.kind = PreTokenizerStep::kByteLevel;
      s.add_prefix_space = flag(p, "add_prefix_space", true, path);
      if (flag(p, "use_regex", true, path)) s.byte_level_regex = gpt2_regex();
    } else if (type == "Metaspace") {
      s.kind = PreTokenizerStep::kMetaspace;
      s.replacement = str(p, "replacement", path);
      if (s.replacement.empty()) fail(path + ".replacement", "is empty");
      metaspace_scheme(p, path, s.add_prefix_space, s.prepend_first);
      s.split = flag(p, "split", true, path);
    } else if (type == "Digits") {
      s.kind = PreTokenizerStep::kSplit;
      s.regex = std::make_shared<Regex>(flag(p, "individual_digits", false, path) ? "\\p{N}" : "\\p{N}+", src_ + ": " + path);
      s.behavior = SplitBehavior::kIsolated;
    } else {
      fail(path + ".type", msg("'", type, "' is not a supported pre-tokenizer (supported: Sequence, Split, ByteLevel, Metaspace, Digits)"));
    }
    out.push_back(std::move(s));
  }

  void read_decoder(const nlohmann::json& d, const std::string& path, std::vector<DecoderStep>& out, int depth = 0) {
    if (d.is_null()) return;
    check_depth(path, depth);
    const std::string type = type_of(d, path);
    DecoderStep s{};
    if (type == "Sequence") {
      const nlohmann::json& list = member(d, "decoders", path);
      if (!list.is_array()) fail(path + ".decoders", "is not an array");
      for (std::size_t k = 0; k < list.size(); ++k) read_decoder(list[k], msg(path, ".decoders[", k, "]"), out, depth + 1);
      return;
    } else if (type == "ByteLevel") {
      s.kind = DecoderStep::kByteLevel;
    } else if (type == "Metaspace") {
      s.kind = DecoderStep::kMetaspace;
      s.text = str(d, "replacement", path);
      bool first = false;
      metaspace_scheme(d, path, s.add_prefix_space, first);
    } else if (type == "Replace") {
      s.kind = DecoderStep::kReplace;
      std::shared_ptr<Regex> re;
      pattern(d, path, s.text, re);
      if (re) fail(path + ".pattern", "is a Regex, which decoders do not support (only String)");
      s.content = str(d, "content", path);
    } else if (type == "ByteFallback") {
      s.kind = DecoderStep::kByteFallback;
    } else if (type == "Fuse") {
      s.kind = DecoderStep::kFuse;
    } else if (type == "Strip") {
      s.kind = DecoderStep::kStrip;
      s.text = str(d, "content", path);
      const std::int64_t a = integer(d, "start", 0, path), b = integer(d, "stop", 0, path);
      if (a < 0 || a > 1024 || b < 0 || b > 1024) fail(path, msg("strips ", a, "/", b, " characters; limit 1024"));
      s.start = static_cast<int>(a);
      s.stop = static_cast<int>(b);
    } else {
      fail(path + ".type", msg("'", type, "' is not a supported decoder (supported: Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip)"));
    }
    out.push_back(std::move(s));
  }

  void read_added_tokens(TokenizerSpec& spec) {
    const std::size_t n = spec.tokens.size();
    spec.types.assign(n, TokenType::kNormal);
    if (spec.byte_fallback) {
      for (std::size_t i = 0; i < n; ++i) {
        const std::string& t = spec.tokens[i];
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') spec.types[i] = TokenType::kByte;
      }
    }
    if (!root_.contains("added_tokens")) return;
    const nlohmann::json& added = root_["added_tokens"];
    for (std::size_t k = 0; k < added.size(); ++k) {
      const std::string path = msg("added_tokens[", k, "]");
      AddedToken a;
      a.id = static_cast<int>(integer(added[k], "id", -1, path));  // range checked in read_model
      a.content = str(added[k], "content", path);
      if (a.content.empty()) fail(path + ".content", "is empty");
      a.special = flag(added[k], "special", false, path);
      a.lstrip = flag(added[k], "lstrip", false, path);
      a.rstrip = flag(added[k], "rstrip", false, path);
      spec.types[static_cast<std::size_t>(a.id)] = a.special ? TokenType::kControl : TokenType::kUserDefined;
      spec.added.push_back(std::move(a));
    }
  }

  // A token named in tokenizer_config.json: a string, {"content": ...} or null.
  int config_token(TokenizerSpec& spec, const char* key) const {
    if (!config_ || !config_->is_object() || !config_->contains(key)) return -2;  // not said
    const nlohmann::json& v = (*config_)[key];
    std::string text;
    if (v.is_null()) return -1;
    if (v.is_string()) text = v.get<std::string>();
    else if (v.is_object() && v.contains("content") && v["content"].is_string()) text = v["content"].get<std::string>();
    else fail(std::string("tokenizer_config.json ") + key, "is neither a string nor {\"content\": ...}");
    for (std::size_t i = 0; i < spec.tokens.size(); ++i)
      if (spec.tokens[i] == text) return static_cast<int>(i);
    fail(std::string("tokenizer_config.json ") + key, msg("'", text, "' is not in the vocabulary"));
  }

  void read_specials(TokenizerSpec& spec) {
    auto find_text = [&](const std::string& t) {
      for (std::size_t i = 0; i < spec.tokens.size(); ++i)
        if (spec.tokens[i] == t) return static_cast<int>(i);
      return -1;
    };
    if (!unk_text_.empty()) {
      spec.unk = find_text(unk_text_);
      if (spec.unk < 0) fail("model.unk_token", msg("'", unk_text_, "' is not in the vocabulary"));
      if (spec.types[static_cast<std::size_t>(spec.unk)] == TokenType::kNormal)
        spec.types[static_cast<std::size_t>(spec.unk)] = TokenType::kUnknown;
    }
    const int bos = config_token(spec, "bos_token"), eos = config_token(spec, "eos_token");
    const int unk = config_token(spec, "unk_token"), pad = config_token(spec, "pad_token");
    spec.bos = bos >= 0 ? bos : -1;
    spec.eos = eos >= 0 ? eos : -1;
    if (unk >= 0) spec.unk = unk;
    spec.pad = pad >= 0 ? pad : -1;
    // Without a config, the post-processor's template says which tokens frame a text.
    int template_first = -1, template_last = -1;
    if (root_.contains("post_processor") && root_["post_processor"].is_object() &&
        type_of(root_["post_processor"], "post_processor") == "TemplateProcessing" && root_["post_processor"].contains("single") &&
        root_["post_processor"]["single"].is_array()) {
      const nlohmann::json& single = root_["post_processor"]["single"];
      auto special_of = [&](const nlohmann::json& item) {
        if (item.is_object() && item.contains("SpecialToken") && item["SpecialToken"].is_object() &&
            item["SpecialToken"].contains("id") && item["SpecialToken"]["id"].is_string())
          return find_text(item["SpecialToken"]["id"].get<std::string>());
        return -1;
      };
      if (!single.empty()) {
        template_first = special_of(single.front());
        template_last = single.size() > 1 ? special_of(single.back()) : -1;
      }
    }
    if (spec.bos < 0 && bos == -2) spec.bos = template_first;
    if (spec.eos < 0 && eos == -2) spec.eos = template_last;
    const bool has_cfg = config_ && config_->is_object();
    if (has_cfg && config_->contains("add_bos_token") && (*config_)["add_bos_token"].is_boolean())
      spec.add_bos = (*config_)["add_bos_token"].get<bool>();
    else
      spec.add_bos = template_first >= 0 && template_first == spec.bos;
    if (has_cfg && config_->contains("add_eos_token") && (*config_)["add_eos_token"].is_boolean())
      spec.add_eos = (*config_)["add_eos_token"].get<bool>();
    else
      spec.add_eos = template_last >= 0 && template_last == spec.eos;
    if (spec.add_bos && spec.bos < 0) spec.add_bos = false;
    if (spec.add_eos && spec.eos < 0) spec.add_eos = false;
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>"}) {
      const int id = find_text(t);
      if (id >= 0) { spec.eot = id; break; }
    }
    const int eom = find_text("<|eom_id|>");
    if (eom >= 0) spec.eom = eom;
  }

  static std::shared_ptr<Regex> gpt2_regex() {
    static const std::shared_ptr<Regex> re = std::make_shared<Regex>(
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", "GPT-2 byte-level regex");
    return re;
  }

  std::string src_;
  const nlohmann::json& root_;
  const nlohmann::json* config_;
  std::string unk_text_;
};

}  // namespace detail

/// Largest tokenizer.json accepted (real ones are up to ~20 MB).
constexpr std::uint64_t kMaxTokenizerJsonBytes = std::uint64_t{1} << 30;

/// The TokenizerSpec that tokenizer.json text (and, if non-empty, the text of its
/// tokenizer_config.json) describes, before a BpeTokenizer is built from it (the
/// GGUF vocabulary writer, vocab_writer.hpp, reads the merges and the pipeline
/// steps from it). `source` names it in messages. Throws FormatError for invalid or
/// truncated JSON, an unsupported model/normalizer/pre-tokenizer/decoder (naming
/// it), ids out of range, repeated or missing, or a config naming tokens the
/// vocabulary lacks. Merges naming unknown tokens are caught by BpeTokenizer.
inline TokenizerSpec tokenizer_json_spec(const std::string& json_text, const std::string& config_text,
                                         const std::string& source) {
  const nlohmann::json root = detail::parse_json(json_text, source);
  nlohmann::json config;
  if (!config_text.empty()) config = detail::parse_json(config_text, source + " (tokenizer_config.json)");
  detail::TokenizerJsonReader reader(source, root, config_text.empty() ? nullptr : &config);
  return reader.read();
}

/// Builds a tokenizer from tokenizer.json text (and, if non-empty, the text of its
/// tokenizer_config.json). `source` names it in messages. Throws FormatError as
/// tokenizer_json_spec does, and for merges naming unknown tokens.
inline std::unique_ptr<BpeTokenizer> tokenizer_from_json(const std::string& json_text, const std::string& config_text,
                                                        const std::string& source) {
  return std::make_unique<BpeTokenizer>(tokenizer_json_spec(json_text, config_text, source));
}

/// The path of the tokenizer_config.json read with the tokenizer.json at `path`
/// ("" when there is none beside it). Never throws.
inline std::string tokenizer_config_path(const std::string& path) {
  const std::filesystem::path cfg = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(cfg, ec) && std::filesystem::path(path).filename() != "tokenizer_config.json")
    return cfg.string();
  return "";
}

/// The spec of a tokenizer.json file (any name) and of the tokenizer_config.json in
/// the same folder, if there is one. Throws FileError if a file cannot be read, and
/// FormatError as tokenizer_json_spec does.
inline TokenizerSpec read_tokenizer_json_spec(const std::string& path) {
  const std::string text = detail::read_text_file(path, kMaxTokenizerJsonBytes);
  const std::string cfg = tokenizer_config_path(path);
  const std::string cfg_text = cfg.empty() ? std::string() : detail::read_text_file(cfg, kMaxTokenizerJsonBytes);
  return tokenizer_json_spec(text, cfg_text, path);
}

/// Loads a tokenizer.json file (any name) and the tokenizer_config.json in the
/// same folder, if there is one. Throws FileError if a file cannot be read, and
/// FormatError as tokenizer_from_json does.
inline std::unique_ptr<BpeTokenizer> load_tokenizer_json(const std::string& path) {
  return std::make_unique<BpeTokenizer>(read_tokenizer_json_spec(path));
}

}  // namespace kvd
