// BpeTokenizer: the tokenizers of real models, described by a TokenizerSpec that
// the GGUF reader (tokenizer_gguf.hpp) or the tokenizer.json reader
// (tokenizer_json.hpp) fills. It runs Hugging Face's pipeline:
//
//   raw text
//     -> split on added tokens (special ones only when parse_special), leftmost-longest,
//        with lstrip/rstrip absorbing the whitespace beside them
//     -> each text segment: normalizers (Prepend, Replace, NFC, Lowercase)
//     -> pre-tokenizers (Split by regex with a behaviour, ByteLevel, Metaspace, Digits)
//     -> the model on each piece:
//          kSentencePiece: llama.cpp's SentencePiece merge: start from UTF-8
//            characters, repeatedly merge the adjacent pair whose concatenation is a
//            vocabulary piece with the highest score (leftmost on ties); characters
//            left unknown become <0xNN> byte tokens;
//          kBpe: merges by rank (lowest first, leftmost on ties) over ids, with
//            byte_fallback, fuse_unk and ignore_merges as Hugging Face defines them.
//
// Both merges keep the pairs in a priority queue over a linked list of symbols,
// so a piece of n characters costs O(n log n), whatever its length.
// Decoding precomputes each token's output bytes by running the decoders on it
// (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip).
//
// Encoding is linear in the text: the added tokens are found by one Aho–Corasick
// pass (text/word_matcher.hpp); the regex work of one call is paid from one
// budget (text/regex.hpp), kDefaultRegexUnitsPerByte units per byte of text plus
// kRegexBudgetBase; and a step that grows text (Prepend, Replace, Metaspace, and
// the decoders at load) may make at most kMaxTextGrowth times its segment's bytes
// plus kTextGrowthSlack. Past a limit, encode throws TokenError and loading
// FormatError, each naming the limit.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvdecode/text/regex.hpp"
#include "kvdecode/text/unicode.hpp"
#include "kvdecode/text/word_matcher.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/text/text_tokenizer.hpp"

namespace kvd {

/// One text normalization step, applied to each text segment between added tokens.
struct NormalizerStep {
  enum Kind { kPrepend, kReplace, kNfc, kLowercase } kind;
  std::string text;     ///< kPrepend: what to put in front; kReplace: the literal to find (if no regex)
  std::string content;  ///< kReplace: the replacement
  std::shared_ptr<detail::Regex> regex;  ///< kReplace by pattern instead of literal
};

/// How a Split pre-tokenizer treats the matches (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

/// One pre-tokenization step, applied to every piece the previous steps made.
struct PreTokenizerStep {
  enum Kind { kSplit, kByteLevel, kMetaspace } kind;
  // kSplit: pieces are cut at the matches of `regex` (or of the literal `text`).
  std::shared_ptr<detail::Regex> regex;
  std::string text;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  // kByteLevel: bytes become GPT-2's byte-level characters.
  bool add_prefix_space = false;  ///< also kMetaspace (prepend the replacement)
  std::shared_ptr<detail::Regex> byte_level_regex;  ///< use_regex: GPT-2's split first
  // kMetaspace: spaces become `replacement`; prepend_first: only at the text's start.
  std::string replacement = "\xE2\x96\x81";
  bool prepend_first = false;
  bool split = true;
};

/// One decoding step, run at load time on each ordinary token's text.
struct DecoderStep {
  enum Kind { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip } kind;
  std::string text;     ///< kReplace: literal to find; kMetaspace: the replacement; kStrip: content
  std::string content;  ///< kReplace: replacement
  int start = 0, stop = 0;         ///< kStrip: characters removed at the start / end
  bool add_prefix_space = false;   ///< kMetaspace: the encoder prepended one
};

/// A token matched verbatim in the raw text before normalization (Hugging Face's
/// added_tokens; in GGUF, control, user-defined and unknown tokens).
struct AddedToken {
  int id = -1;
  std::string content;
  bool special = false;  ///< matched only with parse_special; decoded as "" unless asked
  bool lstrip = false;   ///< absorbs whitespace on its left
  bool rstrip = false;   ///< absorbs whitespace on its right
};

/// Everything a BpeTokenizer needs, as a reader found it.
struct TokenizerSpec {
  enum class Model { kSentencePiece, kBpe };
  std::string source;       ///< file name, for messages
  std::string description;  ///< e.g. "GGUF llama (SentencePiece)"
  Model model = Model::kBpe;
  std::vector<std::string> tokens;  ///< (vocab_size) text of each id
  std::vector<float> scores;        ///< (vocab_size) kSentencePiece merge scores (empty: all 0)
  std::vector<TokenType> types;     ///< (vocab_size) (empty: all kNormal)
  std::vector<std::pair<std::string, std::string>> merges;  ///< kBpe: merge rules, rank order
  bool byte_fallback = false;  ///< unknown characters become <0xNN> tokens
  bool fuse_unk = false;       ///< consecutive unknowns become one <unk>
  bool ignore_merges = false;  ///< a piece that is a whole token is taken as is
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<DecoderStep> decoders;
  std::vector<AddedToken> added;
  int bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
};

/// A text segment's normalized text, a Metaspace piece and a decoded token are at
/// most this many times the bytes they came from, plus kTextGrowthSlack.
constexpr std::size_t kMaxTextGrowth = 8;
constexpr std::size_t kTextGrowthSlack = 64;
/// Default regex budget of one encode call: this many PCRE2 match-limit units per
/// byte of text, plus kRegexBudgetBase (BpeTokenizer::set_regex_budget changes it).
constexpr std::uint64_t kDefaultRegexUnitsPerByte = 1024;
constexpr std::uint64_t kRegexBudgetBase = std::uint64_t{1} << 20;

class BpeTokenizer : public TextTokenizer {
 public:
  /// Builds the tokenizer. Throws FormatError naming spec.source and the problem if
  /// the vocabulary is empty or too large, a token text is empty or repeated, the
  /// scores or types do not match the vocabulary size, a special id (bos, eos...) or
  /// an added token's id is outside the vocabulary, an added token's content differs
  /// from the vocabulary's text at its id, or a merge names a piece (or a
  /// concatenation) that is not in the vocabulary.
  explicit BpeTokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
    const std::string& src = spec_.source;
    const std::size_t n = spec_.tokens.size();
    if (n == 0) throw FormatError(detail::msg(src, ": the vocabulary is empty"));
    if (n > static_cast<std::size_t>(kMaxVocab))
      throw FormatError(detail::msg(src, ": vocabulary of ", n, " tokens exceeds the limit ", kMaxVocab));
    if (!spec_.scores.empty() && spec_.scores.size() != n)
      throw FormatError(detail::msg(src, ": ", spec_.scores.size(), " scores for ", n, " tokens"));
    if (spec_.types.empty()) spec_.types.assign(n, TokenType::kNormal);
    if (spec_.types.size() != n)
      throw FormatError(detail::msg(src, ": ", spec_.types.size(), " token types for ", n, " tokens"));
    ids_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& t = spec_.tokens[i];
      if (t.empty()) throw FormatError(detail::msg(src, ": token ", i, " has empty text"));
      max_len_ = std::max(max_len_, t.size());
      const auto [it, fresh] = ids_.emplace(std::string_view(t), static_cast<int>(i));
      if (!fresh)
        throw FormatError(detail::msg(src, ": token text '", t, "' appears twice, at ids ", it->second, " and ", i));
    }
    auto check_special = [&](int id, const char* what) {
      if (id < -1 || id >= static_cast<int>(n))
        throw FormatError(detail::msg(src, ": ", what, " id ", id, " is outside the vocabulary [0, ", n, ")"));
    };
    check_special(spec_.bos, "BOS");
    check_special(spec_.eos, "EOS");
    check_special(spec_.eot, "EOT");
    check_special(spec_.eom, "EOM");
    check_special(spec_.unk, "UNK");
    check_special(spec_.pad, "PAD");
    if (spec_.add_bos && spec_.bos < 0) throw FormatError(detail::msg(src, ": add_bos is set but there is no BOS token"));
    if (spec_.add_eos && spec_.eos < 0) throw FormatError(detail::msg(src, ": add_eos is set but there is no EOS token"));

    // Byte-fallback ids: "<0xNN>" pieces (SentencePiece), else the one-byte piece.
    for (int b = 0; b < 256; ++b) {
      static const char* kHex = "0123456789ABCDEF";
      const std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
      byte_id_[b] = find(name);
      if (byte_id_[b] < 0 && spec_.model == TokenizerSpec::Model::kSentencePiece)
        byte_id_[b] = find(std::string(1, static_cast<char>(b)));
    }

    build_merges();
    build_added();
    build_pieces();

    bos_ = spec_.bos;
    eos_ = spec_.eos;
    eot_ = spec_.eot;
    unk_ = spec_.unk;
    pad_ = spec_.pad;
    add_bos_ = spec_.add_bos;
    add_eos_ = spec_.add_eos;
    // End of generation: llama.cpp's rule, the named ids plus the end-of-turn
    // tokens recognised by their text.
    eog_ = {eos_, eot_, spec_.eom};
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"}) {
      const int id = find(t);
      if (id >= 0) eog_.push_back(id);
    }
    finish_eog();
  }

  BpeTokenizer(const BpeTokenizer&) = delete;  // ids_ views the token strings
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  static constexpr int kMaxVocab = 1 << 24;

  int vocab_size() const override { return static_cast<int>(spec_.tokens.size()); }
  const std::string& token_text(int id) const override {
    check_id(id, "token_text");
    return spec_.tokens[static_cast<std::size_t>(id)];
  }
  TokenType token_type(int id) const override {
    check_id(id, "token_type");
    return spec_.types[static_cast<std::size_t>(id)];
  }
  std::string token_to_piece(int id, bool special = false) const override {
    check_id(id, "token_to_piece");
    const auto i = static_cast<std::size_t>(id);
    const TokenType t = spec_.types[i];
    if (t == TokenType::kControl || t == TokenType::kUnknown) return special ? spec_.tokens[i] : std::string();
    return pieces_[i];
  }
  std::string describe() const override {
    return detail::msg(spec_.description, " ", spec_.source, ": ", vocab_size(), " tokens",
                       spec_.model == TokenizerSpec::Model::kBpe ? detail::msg(", ", n_merges_, " merges") : std::string(),
                       ", ", spec_.added.size(), " added/special tokens");
  }

  /// Id of the token whose text is exactly `text`, or -1.
  int find(std::string_view text) const {
    const auto it = ids_.find(text);
    return it == ids_.end() ? -1 : it->second;
  }

  const TokenizerSpec& spec() const { return spec_; }

  /// Sets the regex budget of each encode call to `units_per_byte` PCRE2
  /// match-limit units per byte of its text plus kRegexBudgetBase (the default is
  /// kDefaultRegexUnitsPerByte). Throws ArgumentError for 0. Not thread-safe with encode.
  void set_regex_budget(std::uint64_t units_per_byte) {
    if (units_per_byte == 0) throw ArgumentError("set_regex_budget: 0 units per byte; it must be at least 1");
    regex_units_per_byte_ = units_per_byte;
  }
  std::uint64_t regex_budget() const { return regex_units_per_byte_; }

  std::vector<int> encode(const std::string& text, bool add_special = true, bool parse_special = true) const override {
    std::vector<int> out;
    out.reserve(text.size() / 3 + 4);
    if (add_special && add_bos_) out.push_back(bos_);
    const std::uint64_t per_byte = regex_units_per_byte_;
    const std::uint64_t units = text.size() > (UINT64_MAX - kRegexBudgetBase) / per_byte
                                    ? UINT64_MAX
                                    : text.size() * per_byte + kRegexBudgetBase;
    detail::RegexBudget budget(units);
    // Split on added tokens (the longest allowed one starting at each byte); then
    // each text segment goes through the pipeline.
    std::vector<std::int32_t> longest;
    if (!added_matcher_.empty()) added_matcher_.longest_at(text.data(), text.size(), !parse_special, longest);
    std::size_t seg = 0;  // start of the current text segment
    std::size_t i = 0;
    while (i < text.size()) {
      const int hit = longest.empty() ? -1 : longest[i];
      if (hit < 0) {
        ++i;
        continue;
      }
      const AddedToken& a = spec_.added[static_cast<std::size_t>(hit)];
      std::size_t seg_end = i;
      if (a.lstrip) while (seg_end > seg && is_space(text[seg_end - 1])) --seg_end;
      encode_segment(text, seg, seg_end, seg == 0, budget, out);
      out.push_back(a.id);
      i += a.content.size();
      if (a.rstrip) while (i < text.size() && is_space(text[i])) ++i;
      seg = i;
    }
    encode_segment(text, seg, text.size(), seg == 0, budget, out);
    if (add_special && add_eos_) out.push_back(eos_);
    return out;
  }

 private:
  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

  // --- construction -----------------------------------------------------------

  void build_merges() {
    if (spec_.model != TokenizerSpec::Model::kBpe) return;
    merges_.reserve(spec_.merges.size());
    std::string both;
    for (std::size_t r = 0; r < spec_.merges.size(); ++r) {
      // Named references, not a structured binding: C++17 forbids capturing a
      // binding in the lambda below (clang rejects it; GCC accepts it).
      const std::string& a = spec_.merges[r].first;
      const std::string& b = spec_.merges[r].second;
      const int ia = find(a), ib = find(b);
      both = a + b;
      const int im = find(both);
      auto bad = [&](const std::string& what) {
        throw FormatError(detail::msg(spec_.source, ": merge ", r, " '", a, " ", b, "' names '", what,
                                      "', which is not in the vocabulary"));
      };
      if (ia < 0) bad(a);
      if (ib < 0) bad(b);
      if (im < 0) bad(both);
      // The first (lowest-rank) rule for a pair wins, as a map built in rank order keeps it.
      merges_.emplace(pair_key(ia, ib), Merge{static_cast<int>(r), im});
    }
    n_merges_ = spec_.merges.size();
    spec_.merges.clear();
    spec_.merges.shrink_to_fit();
  }

  void build_added() {
    std::vector<std::string> words;
    std::vector<bool> special;
    words.reserve(spec_.added.size());
    special.reserve(spec_.added.size());
    for (std::size_t k = 0; k < spec_.added.size(); ++k) {
      const AddedToken& a = spec_.added[k];
      if (a.id < 0 || a.id >= vocab_size())
        throw FormatError(detail::msg(spec_.source, ": added token '", a.content, "' has id ", a.id,
                                      " outside the vocabulary [0, ", vocab_size(), ")"));
      if (spec_.tokens[static_cast<std::size_t>(a.id)] != a.content)
        throw FormatError(detail::msg(spec_.source, ": added token '", a.content, "' has id ", a.id, ", whose text is '",
                                      spec_.tokens[static_cast<std::size_t>(a.id)], "'"));
      words.push_back(a.content);
      special.push_back(a.special);
    }
    added_matcher_ = detail::WordMatcher(words, special);  // the first definition of a text wins
  }

  // Output bytes of every ordinary token: its text through the decoders.
  void build_pieces() {
    pieces_.resize(spec_.tokens.size());
    bool fused = false;
    for (const DecoderStep& d : spec_.decoders) {
      if (d.kind == DecoderStep::kFuse) fused = true;
      // A Strip after Fuse acts once, on the start of the whole text.
      if (d.kind == DecoderStep::kStrip && fused && d.text == " " && d.start > 0) strip_leading_space_ = true;
      if (d.kind == DecoderStep::kMetaspace && d.add_prefix_space) strip_leading_space_ = true;
    }
    for (std::size_t i = 0; i < spec_.tokens.size(); ++i) {
      const TokenType t = spec_.types[i];
      std::string s = spec_.tokens[i];
      const std::size_t cap = grown_limit(s.size());
      auto grown = [&](std::size_t step) {
        const std::string& text = spec_.tokens[i];
        return FormatError(detail::msg(spec_.source, ": decoder step ", step, " would make token ", i, " ('",
                                       text.substr(0, 64), text.size() > 64 ? "...') " : "') ", "longer than ", cap,
                                       " bytes (", kMaxTextGrowth, " x its ", text.size(), " bytes + ", kTextGrowthSlack,
                                       "), the limit"));
      };
      if (t == TokenType::kUnused || t == TokenType::kUndefined) {
        s.clear();
      } else if (t == TokenType::kNormal || t == TokenType::kByte) {
        bool after_fuse = false;
        for (std::size_t step = 0; step < spec_.decoders.size(); ++step) {
          const DecoderStep& d = spec_.decoders[step];
          switch (d.kind) {
            case DecoderStep::kByteLevel: s = detail::byte_level_decode(s); break;
            case DecoderStep::kMetaspace:
              if (!replace_all(s, d.text, " ", cap)) throw grown(step);
              break;
            case DecoderStep::kReplace:
              if (!replace_all(s, d.text, d.content, cap)) throw grown(step);
              break;
            case DecoderStep::kByteFallback: {
              const int b = parse_byte_token(s);
              if (b >= 0) s.assign(1, static_cast<char>(b));
              break;
            }
            case DecoderStep::kFuse: after_fuse = true; break;
            case DecoderStep::kStrip:
              if (!after_fuse) s = strip(s, d.text, d.start, d.stop);
              break;
          }
        }
      }
      pieces_[i] = std::move(s);
    }
  }

  static std::string strip(const std::string& s, const std::string& c, int start, int stop) {
    std::size_t b = 0, e = s.size();
    for (int k = 0; k < start && !c.empty() && s.compare(b, c.size(), c) == 0; ++k) b += c.size();
    for (int k = 0; k < stop && !c.empty() && e >= b + c.size() && s.compare(e - c.size(), c.size(), c) == 0; ++k)
      e -= c.size();
    return s.substr(b, e - b);
  }

  /// "<0xNN>" -> NN, else -1.
  static int parse_byte_token(const std::string& s) {
    if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = hex(s[3]), lo = hex(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }

  // The most bytes a step may make from `n`: kMaxTextGrowth x n + kTextGrowthSlack.
  static std::size_t grown_limit(std::size_t n) {
    return n > (SIZE_MAX - kTextGrowthSlack) / kMaxTextGrowth ? SIZE_MAX : n * kMaxTextGrowth + kTextGrowthSlack;
  }

  // Replaces every `from` in s by `to`; false (s unchanged) if the result would
  // be longer than `cap`, which is checked before it is built.
  static bool replace_all(std::string& s, const std::string& from, const std::string& to, std::size_t cap) {
    if (from.empty()) return true;
    std::size_t hits = 0;
    for (std::size_t pos = 0, hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) ++hits;
    if (hits == 0) return true;
    if (to.size() > from.size() && (to.size() - from.size()) > (cap - std::min(cap, s.size())) / hits) return false;
    std::string out;
    out.reserve(s.size() - hits * from.size() + hits * to.size());
    std::size_t pos = 0;
    for (std::size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
      out.append(s, pos, hit - pos);
      out += to;
    }
    out.append(s, pos, std::string::npos);
    s.swap(out);
    return true;
  }

  // Replaces every match of `re` in s by `to`; false (s unchanged) past `cap`.
  static bool regex_replace(const detail::Regex& re, std::string& s, const std::string& to, std::size_t cap,
                            detail::RegexBudget& budget) {
    std::string out;
    std::size_t pos = 0;
    bool fits = true;
    re.for_each_match(s.data(), s.size(), budget, [&](std::size_t b, std::size_t e) {
      if (!fits) return;
      if (out.size() + (b - pos) + to.size() > cap) {
        fits = false;
        return;
      }
      out.append(s, pos, b - pos);
      out += to;
      pos = e;
    });
    if (!fits || out.size() + (s.size() - pos) > cap) return false;
    out.append(s, pos, std::string::npos);
    s.swap(out);
    return true;
  }

  // --- encoding ---------------------------------------------------------------

  // One text segment [b, e) between added tokens: normalize, pre-tokenize, model.
  void encode_segment(const std::string& text, std::size_t b, std::size_t e, bool at_text_start,
                      detail::RegexBudget& budget, std::vector<int>& out) const {
    if (e <= b) return;
    std::string s = text.substr(b, e - b);
    // Every step's result is held to cap, before it is built where it can grow much.
    const std::size_t cap = grown_limit(e - b);
    auto grown = [&](const char* what, std::size_t step) {
      return TokenError(detail::msg(spec_.source, ": ", what, " ", step, " would make the ", e - b,
                                    "-byte text segment at byte ", b, " longer than ", cap, " bytes (", kMaxTextGrowth,
                                    " x its bytes + ", kTextGrowthSlack, "), the limit"));
    };
    for (std::size_t step = 0; step < spec_.normalizers.size(); ++step) {
      const NormalizerStep& n = spec_.normalizers[step];
      bool fits = true;
      switch (n.kind) {
        case NormalizerStep::kPrepend:
          if (s.empty()) break;
          fits = n.text.size() <= cap - std::min(cap, s.size());
          if (fits) s = n.text + s;
          break;
        case NormalizerStep::kReplace:
          fits = n.regex ? regex_replace(*n.regex, s, n.content, cap, budget) : replace_all(s, n.text, n.content, cap);
          break;
        case NormalizerStep::kNfc: s = detail::nfc(s); break;
        case NormalizerStep::kLowercase: s = detail::lowercase(s); break;
      }
      if (!fits || s.size() > cap) throw grown("normalizer step", step);
    }
    if (s.empty()) return;
    std::vector<std::string> pieces;
    pieces.push_back(std::move(s));
    std::vector<std::string> next;
    for (std::size_t step = 0; step < spec_.pre_tokenizers.size(); ++step) {
      const PreTokenizerStep& p = spec_.pre_tokenizers[step];
      next.clear();
      std::size_t produced = 0;  // bytes this step made so far (Metaspace), held to cap in all
      for (std::size_t k = 0; k < pieces.size(); ++k) {
        std::string& piece = pieces[k];
        switch (p.kind) {
          case PreTokenizerStep::kSplit:
            split(piece, p.regex.get(), p.text, p.behavior, p.invert, budget, next);
            break;
          case PreTokenizerStep::kByteLevel: {
            if (p.add_prefix_space && piece[0] != ' ') piece.insert(0, 1, ' ');
            if (p.byte_level_regex) {
              const std::size_t first = next.size();
              split(piece, p.byte_level_regex.get(), "", SplitBehavior::kIsolated, false, budget, next);
              for (std::size_t q = first; q < next.size(); ++q) next[q] = detail::byte_level_encode(next[q]);
            } else {
              next.push_back(detail::byte_level_encode(piece));
            }
            break;
          }
          case PreTokenizerStep::kMetaspace: {
            const std::size_t left = cap - produced;
            std::string m = std::move(piece);
            if (m.size() > left || !replace_all(m, " ", p.replacement, left)) throw grown("Metaspace pre-tokenizer", step);
            const bool at_start = at_text_start && k == 0;
            if (p.add_prefix_space && (!p.prepend_first || at_start) && m.compare(0, p.replacement.size(), p.replacement) != 0) {
              if (p.replacement.size() > left - m.size()) throw grown("Metaspace pre-tokenizer", step);
              m.insert(0, p.replacement);
            }
            produced += m.size();
            if (p.split) split(m, nullptr, p.replacement, SplitBehavior::kMergedWithNext, false, budget, next);
            else next.push_back(std::move(m));
            break;
          }
        }
      }
      pieces.swap(next);
    }
    for (const std::string& piece : pieces) {
      if (spec_.model == TokenizerSpec::Model::kSentencePiece) encode_spm(piece, out);
      else encode_bpe(piece, out);
    }
  }

  // Cuts `s` at the matches of `re` (or of the literal `lit`), keeping the parts
  // the behaviour asks for, appending them to `out`. Empty parts are dropped.
  static void split(const std::string& s, const detail::Regex* re, const std::string& lit, SplitBehavior behavior,
                    bool invert, detail::RegexBudget& budget, std::vector<std::string>& out) {
    struct Part { std::size_t b, e; bool match; };
    std::vector<Part> parts;
    std::size_t pos = 0;
    auto on_match = [&](std::size_t b, std::size_t e) {
      if (b > pos) parts.push_back({pos, b, false});
      parts.push_back({b, e, true});
      pos = e;
    };
    if (re) {
      re->for_each_match(s.data(), s.size(), budget, on_match);
    } else if (!lit.empty()) {
      for (std::size_t hit; (hit = s.find(lit, pos)) != std::string::npos;) on_match(hit, hit + lit.size());
    }
    if (pos < s.size()) parts.push_back({pos, s.size(), false});
    if (invert) for (Part& p : parts) p.match = !p.match;

    std::vector<Part> kept;
    switch (behavior) {
      case SplitBehavior::kRemoved:
        for (const Part& p : parts) if (!p.match) kept.push_back(p);
        break;
      case SplitBehavior::kIsolated:
        kept = parts;
        break;
      case SplitBehavior::kMergedWithPrevious: {
        bool prev_match = false;
        for (const Part& p : parts) {
          if (p.match && !prev_match && !kept.empty()) kept.back().e = p.e;
          else kept.push_back(p);
          prev_match = p.match;
        }
        break;
      }
      case SplitBehavior::kMergedWithNext: {
        bool prev_match = false;
        for (std::size_t k = parts.size(); k-- > 0;) {
          const Part& p = parts[k];
          if (p.match && !prev_match && !kept.empty()) kept.back().b = p.b;
          else kept.push_back(p);
          prev_match = p.match;
        }
        std::reverse(kept.begin(), kept.end());
        break;
      }
      case SplitBehavior::kContiguous: {
        for (std::size_t k = 0; k < parts.size(); ++k) {
          if (k > 0 && parts[k].match && parts[k - 1].match && !kept.empty()) kept.back().e = parts[k].e;
          else kept.push_back(parts[k]);
        }
        break;
      }
    }
    for (const Part& p : kept) if (p.e > p.b) out.push_back(s.substr(p.b, p.e - p.b));
  }

  static std::uint64_t pair_key(int a, int b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  void push_byte(unsigned char c, std::vector<int>& out) const {
    const int id = byte_id_[c];
    if (id >= 0) out.push_back(id);
    else if (unk_ >= 0) out.push_back(unk_);
  }

  // llama.cpp's SentencePiece merge on one piece (text with spaces already "▁").
  void encode_spm(const std::string& w, std::vector<int>& out) const {
    struct Sym { std::uint32_t start, len; int prev, next; };
    std::vector<Sym> syms;
    syms.reserve(w.size());
    for (std::size_t i = 0; i < w.size();) {
      // One UTF-8 character, or one invalid byte (llama.cpp takes the length a lead
      // byte announces, which lets a stray lead byte swallow the next character;
      // on valid UTF-8 both are the same).
      const std::size_t len = detail::utf8_unit(w.data(), w.size(), i);
      const int n = static_cast<int>(syms.size());
      syms.push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(len), n - 1, -1});
      if (n > 0) syms[static_cast<std::size_t>(n - 1)].next = n;
      i += len;
    }
    struct Cand { float score; int left, right; std::uint32_t size; };
    auto lower = [](const Cand& a, const Cand& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
    std::priority_queue<Cand, std::vector<Cand>, decltype(lower)> queue(lower);
    auto consider = [&](int l) {
      if (l < 0) return;
      const Sym& a = syms[static_cast<std::size_t>(l)];
      if (a.next < 0) return;
      const Sym& b = syms[static_cast<std::size_t>(a.next)];
      const std::size_t size = a.len + b.len;
      if (size > max_len_) return;
      const int id = find(std::string_view(w.data() + a.start, size));
      if (id < 0) return;
      const float score = spec_.scores.empty() ? 0.0f : spec_.scores[static_cast<std::size_t>(id)];
      queue.push({score, l, a.next, static_cast<std::uint32_t>(size)});
    };
    for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) consider(i);
    while (!queue.empty()) {
      const Cand c = queue.top();
      queue.pop();
      Sym& l = syms[static_cast<std::size_t>(c.left)];
      if (l.len == 0 || l.next != c.right) continue;
      Sym& r = syms[static_cast<std::size_t>(c.right)];
      if (l.len + r.len != c.size) continue;  // one side changed since
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms[static_cast<std::size_t>(r.next)].prev = c.left;
      consider(l.prev);
      consider(c.left);
    }
    for (int i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<std::size_t>(i)].next) {
      const Sym& s = syms[static_cast<std::size_t>(i)];
      const int id = find(std::string_view(w.data() + s.start, s.len));
      if (id >= 0) {
        out.push_back(id);
      } else {
        for (std::uint32_t k = 0; k < s.len; ++k) push_byte(static_cast<unsigned char>(w[s.start + k]), out);
      }
    }
  }

  // Hugging Face's BPE on one piece: characters to ids, then merges by rank.
  void encode_bpe(const std::string& w, std::vector<int>& out) const {
    if (spec_.ignore_merges) {
      const int id = find(w);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    struct Sym { int id, prev, next; };
    std::vector<Sym> syms;
    syms.reserve(w.size());
    auto push = [&](int id) {
      const int n = static_cast<int>(syms.size());
      syms.push_back({id, n - 1, -1});
      if (n > 0) syms[static_cast<std::size_t>(n - 1)].next = n;
    };
    for (std::size_t i = 0; i < w.size();) {
      const std::size_t len = detail::utf8_unit(w.data(), w.size(), i);
      const int id = find(std::string_view(w.data() + i, len));
      if (id >= 0) {
        push(id);
      } else if (spec_.byte_fallback && std::all_of(w.begin() + static_cast<std::ptrdiff_t>(i),
                                                    w.begin() + static_cast<std::ptrdiff_t>(i + len),
                                                    [&](char c) { return byte_id_[static_cast<unsigned char>(c)] >= 0; })) {
        for (std::size_t k = 0; k < len; ++k) push(byte_id_[static_cast<unsigned char>(w[i + k])]);
      } else if (unk_ >= 0) {
        if (!(spec_.fuse_unk && !syms.empty() && syms.back().id == unk_)) push(unk_);
      }
      // Without an unknown token the character is dropped, as Hugging Face does.
      i += len;
    }
    struct Cand { int rank, left, right, left_id, right_id, merged; };
    auto lower = [](const Cand& a, const Cand& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
    std::priority_queue<Cand, std::vector<Cand>, decltype(lower)> queue(lower);
    auto consider = [&](int l) {
      if (l < 0) return;
      const int r = syms[static_cast<std::size_t>(l)].next;
      if (r < 0) return;
      const int a = syms[static_cast<std::size_t>(l)].id, b = syms[static_cast<std::size_t>(r)].id;
      const auto it = merges_.find(pair_key(a, b));
      if (it != merges_.end()) queue.push({it->second.rank, l, r, a, b, it->second.merged});
    };
    for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) consider(i);
    while (!queue.empty()) {
      const Cand c = queue.top();
      queue.pop();
      Sym& l = syms[static_cast<std::size_t>(c.left)];
      if (l.id != c.left_id || l.next != c.right) continue;
      Sym& r = syms[static_cast<std::size_t>(c.right)];
      if (r.id != c.right_id) continue;
      l.id = c.merged;
      l.next = r.next;
      if (r.next >= 0) syms[static_cast<std::size_t>(r.next)].prev = c.left;
      r.id = -1;
      consider(l.prev);
      consider(c.left);
    }
    for (int i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<std::size_t>(i)].next)
      out.push_back(syms[static_cast<std::size_t>(i)].id);
  }

  struct Merge { int rank, merged; };

  TokenizerSpec spec_;
  std::unordered_map<std::string_view, int> ids_;  // views spec_.tokens, which never changes after construction
  std::unordered_map<std::uint64_t, Merge> merges_;  // (left id, right id) -> rank and merged id
  std::size_t n_merges_ = 0;
  std::size_t max_len_ = 0;
  int byte_id_[256];
  detail::WordMatcher added_matcher_;  // over spec_.added's contents; special ones flagged
  std::uint64_t regex_units_per_byte_ = kDefaultRegexUnitsPerByte;
  std::vector<std::string> pieces_;  // (vocab_size) output bytes of each ordinary token
};

}  // namespace kvd
