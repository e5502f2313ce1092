// Llama2cTokenizer (formerly kvd::Tokenizer; the old name is a deprecated alias for
// one version): the SentencePiece-BPE vocabulary of a Llama-style model, read from
// llama2.c's tokenizer.bin format, with an encoder that reproduces llama2.c's
// encode() token for token, a per-token decoder with llama2.c's decode()
// semantics, and a StreamDecoder that turns a token stream into complete UTF-8
// text (holding back multi-byte characters split across byte-fallback pieces).
//
// File format (llama2.c's tokenizer.py writes host byte order; every file in
// circulation is little-endian, which is what we read on any host):
//   int32 max_token_length
//   vocab_size times: float32 score, int32 length, `length` bytes of piece text
// Ids 0, 1, 2 are <unk>, BOS, EOS; ids 3..258 are the byte-fallback pieces
// "<0x00>".."<0xFF>" (byte b is id b + 3); merges follow. SentencePiece's "▁" is
// already stored as a plain space in this format.
//
// Encoding cost: O(n log n) in the text length n. llama2.c rescans every pair
// after each merge (O(n^2)); here the pairs sit in a priority queue over a
// linked list of symbols, ordered so that the merge chosen at each step is the
// one llama2.c would choose (highest score, leftmost on ties).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <queue>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvdecode/io/file.hpp"
#include "kvdecode/error.hpp"

namespace kvd {

namespace detail {

/// Result of looking at the UTF-8 sequence starting at one byte.
struct Utf8Step {
  enum Kind { kComplete, kIncomplete, kInvalid } kind;
  std::size_t length;  ///< bytes covered: the whole character, the valid prefix seen, or the maximal invalid subpart (>= 1)
};

/// Classifies the bytes of `s` starting at `pos` (< s.size()) by the well-formed
/// sequences of Unicode Table 3-7 (no overlongs, no surrogates, nothing above
/// U+10FFFF). kIncomplete means the bytes up to the end of `s` are a valid prefix
/// that more bytes could complete; kInvalid's length is the "maximal subpart"
/// that Unicode recommends replacing by a single U+FFFD.
inline Utf8Step utf8_step(const std::string& s, std::size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return {Utf8Step::kComplete, 1};
  std::size_t need;               // total length of the sequence b0 starts
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // below is an overlong encoding
    if (b0 == 0xED) hi = 0x9F;  // above are the UTF-16 surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // below is overlong
    if (b0 == 0xF4) hi = 0x8F;  // above is beyond U+10FFFF
  } else {
    return {Utf8Step::kInvalid, 1};  // continuation byte, C0/C1 or F5..FF: never a lead byte
  }
  for (std::size_t k = 1; k < need; ++k) {
    if (pos + k >= s.size()) return {Utf8Step::kIncomplete, k};
    const auto b = static_cast<unsigned char>(s[pos + k]);
    const unsigned char l = (k == 1) ? lo : 0x80, h = (k == 1) ? hi : 0xBF;
    if (b < l || b > h) return {Utf8Step::kInvalid, k};
  }
  return {Utf8Step::kComplete, need};
}

/// Reads a little-endian 32-bit word (the tokenizer.bin byte order on every host).
inline std::uint32_t load_le32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

}  // namespace detail

class Llama2cTokenizer {
 public:
  static constexpr int kUnkId = 0;
  static constexpr int kBosId = 1;
  static constexpr int kEosId = 2;
  static constexpr int kByteOffset = 3;  ///< byte b falls back to piece id b + kByteOffset
  static constexpr int kMinVocab = 3;    ///< <unk>, BOS and EOS must exist

  /// Builds a tokenizer from in-memory pieces (piece i is token id i) and their merge
  /// scores. Preconditions: pieces.size() == scores.size() >= kMinVocab, no score is
  /// NaN. max_token_length < 0 means "the longest piece"; otherwise it must be >= the
  /// longest piece. If a piece occurs twice, lookups find its lowest id.
  /// Throws ArgumentError naming the bad size, score or length.
  Llama2cTokenizer(std::vector<std::string> pieces, std::vector<float> scores, int max_token_length = -1) {
    if (pieces.size() != scores.size())
      throw ArgumentError(detail::msg("Llama2cTokenizer: ", pieces.size(), " pieces but ", scores.size(),
                                      " scores; need one score per piece"));
    if (pieces.size() < static_cast<std::size_t>(kMinVocab) ||
        pieces.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw ArgumentError(detail::msg("Llama2cTokenizer: vocab_size = ", pieces.size(), " must be in [", kMinVocab, ", ",
                                      std::numeric_limits<int>::max(), "] (ids 0..2 are <unk>, BOS, EOS)"));
    std::size_t longest = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      longest = std::max(longest, pieces[i].size());
      if (scores[i] != scores[i]) throw ArgumentError(detail::msg("Llama2cTokenizer: score of piece ", i, " is NaN"));
    }
    if (longest > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw ArgumentError(detail::msg("Llama2cTokenizer: a piece of ", longest, " bytes is longer than any int can say"));
    if (max_token_length >= 0 && static_cast<std::size_t>(max_token_length) < longest)
      throw ArgumentError(detail::msg("Llama2cTokenizer: max_token_length = ", max_token_length,
                                      " is shorter than the longest piece (", longest, " bytes)"));
    max_token_length_ = max_token_length >= 0 ? max_token_length : static_cast<int>(longest);
    pieces_ = std::move(pieces);
    scores_ = std::move(scores);
    ids_.reserve(pieces_.size());
    for (std::size_t i = 0; i < pieces_.size(); ++i) ids_.emplace(pieces_[i], static_cast<int>(i));  // first id wins
  }

  /// Loads exactly `vocab_size` pieces from a llama2.c tokenizer.bin (vocab_size comes
  /// from the model config). Throws ArgumentError if vocab_size < kMinVocab, and
  /// FileError naming the file and the problem if it is missing, a directory,
  /// unreadable, truncated, holds a negative or oversized length, holds fewer than
  /// vocab_size pieces, or has bytes left over after them (then the tokenizer does
  /// not belong to the model; load(path) would read them all).
  static Llama2cTokenizer load(const std::string& path, int vocab_size) {
    if (vocab_size < kMinVocab)
      throw ArgumentError(detail::msg("Llama2cTokenizer::load('", path, "'): vocab_size = ", vocab_size, " must be >= ",
                                      kMinVocab, " (ids 0..2 are <unk>, BOS, EOS)"));
    return load_impl(path, vocab_size);
  }

  /// Loads every piece of a llama2.c tokenizer.bin, up to the end of the file; the
  /// vocab size is the number of pieces read. Throws FileError as load(path, n) does,
  /// and also when the file holds fewer than kMinVocab pieces.
  static Llama2cTokenizer load(const std::string& path) { return load_impl(path, -1); }

  // A vocabulary with its hash index is a few MB for 32000 pieces: moves are free,
  // deep copies must be asked for by name.
  Llama2cTokenizer(Llama2cTokenizer&&) noexcept = default;
  Llama2cTokenizer& operator=(Llama2cTokenizer&&) noexcept = default;
  Llama2cTokenizer(const Llama2cTokenizer&) = delete;
  Llama2cTokenizer& operator=(const Llama2cTokenizer&) = delete;

  /// Returns an independent deep copy. Never throws except std::bad_alloc.
  Llama2cTokenizer copy() const { return Llama2cTokenizer(*this, CopyTag{}); }

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  int bos_id() const { return kBosId; }
  int eos_id() const { return kEosId; }
  /// The header's max_token_length (or the longest piece for in-memory tokenizers).
  int max_token_length() const { return max_token_length_; }

  /// Raw piece text of `id`, as stored (byte pieces read "<0xXX>", spaces are ' ').
  /// Throws TokenError if id is outside [0, vocab_size).
  const std::string& piece(int id) const {
    check_id(id, "piece");
    return pieces_[static_cast<std::size_t>(id)];
  }

  /// Merge score of `id`. Throws TokenError if id is outside [0, vocab_size).
  float score(int id) const {
    check_id(id, "score");
    return scores_[static_cast<std::size_t>(id)];
  }

  /// Id of the piece whose text is exactly `text`, or -1 if there is none.
  int find(const std::string& text) const {
    auto it = ids_.find(text);
    return it == ids_.end() ? -1 : it->second;
  }

  /// Encodes `text` exactly as llama2.c's encode() does:
  ///  1. BOS if `bos`; then, if text is non-empty, the dummy-prefix piece " ";
  ///  2. each UTF-8 character (a byte plus up to 3 following continuation bytes,
  ///     grouped the way llama2.c groups them, so invalid UTF-8 is handled byte-wise)
  ///     becomes its piece if the vocabulary has it, else one byte-fallback piece
  ///     (id byte + 3) per byte;
  ///  3. repeatedly merge the adjacent pair whose concatenation is a piece with the
  ///     highest score (leftmost on ties; only scores > -1e10f, llama2.c's starting
  ///     bound), until no pair merges. As in llama2.c, BOS takes part in this step,
  ///     and byte-fallback pieces take part with their "<0xXX>" text;
  ///  4. EOS if `eos`.
  /// Differences from llama2.c, where it would misbehave: a '\0' byte is encoded like
  /// any other byte instead of ending the text, and a vocabulary without a " " piece
  /// gets the byte-fallback piece of ' ' as dummy prefix instead of id -1.
  /// Throws TokenError if a byte needs a fallback piece id >= vocab_size (only for
  /// vocabularies smaller than 259 pieces). The tokenizer is never modified.
  std::vector<int> encode(const std::string& text, bool bos, bool eos) const {
    // One symbol per initial token; merging unlinks the right symbol of a pair.
    struct Symbol {
      int id;    // current token id, -1 once merged into its left neighbour
      int prev;  // index of the previous live symbol, -1 at the start
      int next;  // index of the next live symbol, -1 at the end
    };
    std::vector<Symbol> syms;
    syms.reserve(text.size() + 2);
    auto push = [&](int id) {
      const int n = static_cast<int>(syms.size());
      syms.push_back({id, n - 1, -1});
      if (n > 0) syms[static_cast<std::size_t>(n - 1)].next = n;
    };
    auto push_byte = [&](unsigned char b) {
      const int id = static_cast<int>(b) + kByteOffset;
      if (id >= vocab_size())
        throw TokenError(detail::msg("encode: byte 0x", std::hex, static_cast<int>(b), std::dec,
                                     " needs byte-fallback piece id ", id, " but vocab_size is ", vocab_size()));
      push(id);
    };

    if (bos) push(kBosId);
    if (!text.empty()) {
      const int space = find(" ");
      if (space >= 0) push(space); else push_byte(' ');
    }
    std::string buf;  // scratch for lookups, reused to avoid an allocation per pair
    for (std::size_t i = 0; i < text.size();) {
      // llama2.c's grouping: any byte starts a group, which then takes up to 3
      // following continuation bytes (10xxxxxx).
      std::size_t len = 1;
      while (len < 4 && i + len < text.size() && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) ++len;
      buf.assign(text, i, len);
      const int id = find(buf);
      if (id >= 0) {
        push(id);
      } else {
        for (std::size_t k = 0; k < len; ++k) push_byte(static_cast<unsigned char>(text[i + k]));
      }
      i += len;
    }

    // A possible merge of the live pair (left, left's next). It is stale once either
    // side has changed id or left's neighbour is no longer `right`.
    struct Candidate {
      float score;
      int left, right;        // symbol indices
      int left_id, right_id;  // their ids when the candidate was made
      int merged_id;
    };
    // Priority: higher score first; on equal scores the leftmost pair. Symbols keep
    // their original index and list order never changes, so "smaller left index" is
    // "leftmost in the current token list", the pair llama2.c's left-to-right scan keeps.
    auto lower = [](const Candidate& a, const Candidate& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> queue(lower);
    const float kNoMerge = -1e10f;  // llama2.c's initial best_score; a merge must beat it
    auto consider = [&](int left) {
      if (left < 0) return;
      const int right = syms[static_cast<std::size_t>(left)].next;
      if (right < 0) return;
      const int a = syms[static_cast<std::size_t>(left)].id, b = syms[static_cast<std::size_t>(right)].id;
      buf.assign(pieces_[static_cast<std::size_t>(a)]);
      buf.append(pieces_[static_cast<std::size_t>(b)]);
      const int merged = find(buf);
      if (merged < 0) return;
      const float s = scores_[static_cast<std::size_t>(merged)];
      if (s > kNoMerge) queue.push({s, left, right, a, b, merged});
    };
    for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) consider(i);

    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& l = syms[static_cast<std::size_t>(c.left)];
      if (l.id != c.left_id || l.next != c.right) continue;  // stale
      Symbol& r = syms[static_cast<std::size_t>(c.right)];
      if (r.id != c.right_id) continue;  // stale
      // Merge: left takes the merged id, right is unlinked.
      l.id = c.merged_id;
      l.next = r.next;
      if (r.next >= 0) syms[static_cast<std::size_t>(r.next)].prev = c.left;
      r.id = -1;
      consider(l.prev);
      consider(c.left);
    }

    std::vector<int> ids;
    ids.reserve(syms.size() + 1);
    for (int i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<std::size_t>(i)].next)
      ids.push_back(syms[static_cast<std::size_t>(i)].id);
    if (eos) ids.push_back(kEosId);
    return ids;
  }

  /// Text of `token` as llama2.c's decode() gives it: after BOS (prev_token == 1) a
  /// leading space is stripped (SentencePiece's dummy prefix), and a byte piece
  /// "<0xXX>" becomes that single raw byte, so a character split into byte pieces
  /// comes out in parts (StreamDecoder reassembles them). BOS and EOS decode to their
  /// piece text. prev_token is only compared with BOS and may be anything (e.g. -1).
  /// Throws TokenError naming the id and vocab_size if token is outside [0, vocab_size).
  std::string decode(int prev_token, int token) const {
    std::string out;
    decode_append(prev_token, token, out);
    return out;
  }

  /// Same as decode(), appending to `out` instead of returning a new string.
  /// On TokenError `out` is unchanged.
  void decode_append(int prev_token, int token, std::string& out) const {
    check_id(token, "decode");
    const std::string& p = pieces_[static_cast<std::size_t>(token)];
    const int byte = byte_value(p);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else if (prev_token == kBosId && !p.empty() && p[0] == ' ') {
      out.append(p, 1, std::string::npos);
    } else {
      out.append(p);
    }
  }

  /// Concatenated text of `ids`: BOS and EOS produce no text; every other token is
  /// decode(previous id, id), so a leading space right after BOS is stripped. The
  /// result holds exactly the bytes of the pieces, so it is valid UTF-8 whenever the
  /// ids came from encode() of valid UTF-8 (decode_all(encode(t, true, x)) == t).
  /// Throws TokenError naming the first id outside [0, vocab_size).
  std::string decode_all(const std::vector<int>& ids) const {
    std::string out;
    int prev = -1;
    for (int id : ids) {
      check_id(id, "decode_all");
      if (id != kBosId && id != kEosId) decode_append(prev, id, out);
      prev = id;
    }
    return out;
  }

  /// If `p` is a byte piece "<0xXX>" (two hex digits, either case), its byte value,
  /// else -1.
  static int byte_value(const std::string& p) {
    if (p.size() != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = hex(p[3]), lo = hex(p[4]);
    return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
  }

 private:
  struct CopyTag {};
  Llama2cTokenizer(const Llama2cTokenizer& other, CopyTag)
      : pieces_(other.pieces_), scores_(other.scores_), ids_(other.ids_), max_token_length_(other.max_token_length_) {}

  void check_id(int id, const char* what) const {
    if (id < 0 || id >= vocab_size())
      throw TokenError(detail::msg(what, ": token id ", id, " is outside [0, vocab_size = ", vocab_size(), ")"));
  }

  // expected_vocab < 0: read pieces until the end of the file.
  static Llama2cTokenizer load_impl(const std::string& path, int expected_vocab) {
    const std::string where = detail::msg("tokenizer file '", path, "'");
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (status.type() == std::filesystem::file_type::not_found)
      throw FileError(detail::msg(where, " does not exist (expected a llama2.c tokenizer.bin)"));
    if (ec) throw FileError(detail::msg(where, " cannot be accessed: ", ec.message()));
    if (std::filesystem::is_directory(status))
      throw FileError(detail::msg(where, " is a directory, not a llama2.c tokenizer.bin file"));
    detail::MappedFile file;
    try {
      file = detail::MappedFile::open(path);
    } catch (const FileError& e) {
      throw FileError(detail::msg(where, " cannot be opened for reading (", e.what(), ")"));
    }
    const std::uint64_t size = file.size();
    std::uint64_t offset = 0;

    unsigned char word[8];
    auto read_exact = [&](void* dst, std::size_t n, const char* what) {
      if (n > size - offset)
        throw FileError(detail::msg(where, ": read error at byte ", offset, " while reading ", what));
      std::memcpy(dst, file.data() + offset, n);
      offset += n;
    };

    if (size == 0) throw FileError(detail::msg(where, " is empty (expected an int32 max_token_length header)"));
    if (size < 4)
      throw FileError(detail::msg(where, " is ", size, " bytes, too short for the 4-byte max_token_length header"));
    read_exact(word, 4, "the header");
    const auto max_len = static_cast<std::int32_t>(detail::load_le32(word));
    if (max_len <= 0)
      throw FileError(detail::msg(where, ": header max_token_length = ", max_len, " must be positive"));

    std::vector<std::string> pieces;
    std::vector<float> scores;
    // Reserve no more than the file can hold (each piece takes >= 8 bytes), so a huge
    // vocab_size with a small file cannot make us allocate without bound; and no more
    // than a large real vocabulary up front, so memory grows only with pieces read.
    const std::uint64_t most = std::min<std::uint64_t>((size - 4) / 8, std::uint64_t{1} << 18);
    const std::uint64_t want =
        expected_vocab >= 0 ? std::min(static_cast<std::uint64_t>(expected_vocab), most) : most;
    pieces.reserve(static_cast<std::size_t>(want));
    scores.reserve(static_cast<std::size_t>(want));

    for (std::int64_t i = 0; expected_vocab >= 0 ? i < expected_vocab : offset < size; ++i) {
      if (i >= std::numeric_limits<int>::max())
        throw FileError(detail::msg(where, " holds more than ", std::numeric_limits<int>::max(), " pieces"));
      const std::uint64_t remaining = size - offset;
      if (remaining == 0)
        throw FileError(detail::msg(where, " holds only ", i, " pieces, expected vocab_size = ", expected_vocab,
                                    " (tokenizer does not match the model, or the file is truncated)"));
      if (remaining < 8)
        throw FileError(detail::msg(where, " is truncated: piece ", i, " at byte ", offset,
                                    " needs an 8-byte score and length, only ", remaining, " bytes remain"));
      read_exact(word, 8, "a piece header");
      float score;
      const std::uint32_t score_bits = detail::load_le32(word);
      std::memcpy(&score, &score_bits, sizeof score);
      const auto len = static_cast<std::int32_t>(detail::load_le32(word + 4));
      if (score != score) throw FileError(detail::msg(where, ": piece ", i, " has a NaN score"));
      if (len < 0) throw FileError(detail::msg(where, ": piece ", i, " has negative length ", len));
      if (len > max_len)
        throw FileError(detail::msg(where, ": piece ", i, " has length ", len, " > max_token_length = ", max_len));
      if (static_cast<std::uint64_t>(len) > size - offset)
        throw FileError(detail::msg(where, " is truncated: piece ", i, " has length ", len, " but only ",
                                    size - offset, " bytes remain"));
      std::string piece(static_cast<std::size_t>(len), '\0');
      if (len > 0) read_exact(piece.data(), piece.size(), "piece text");
      pieces.push_back(std::move(piece));
      scores.push_back(score);
    }
    if (offset < size)
      throw FileError(detail::msg(where, " has ", size - offset, " bytes left after vocab_size = ", expected_vocab,
                                  " pieces (tokenizer does not match the model; load(path) reads every piece)"));
    if (pieces.size() < static_cast<std::size_t>(kMinVocab))
      throw FileError(detail::msg(where, " holds only ", pieces.size(), " pieces, need at least ", kMinVocab,
                                  " (<unk>, BOS, EOS)"));
    return Llama2cTokenizer(std::move(pieces), std::move(scores), max_len);
  }

  std::vector<std::string> pieces_;            // (vocab_size) piece text by id
  std::vector<float> scores_;                  // (vocab_size) merge score by id
  std::unordered_map<std::string, int> ids_;   // piece text -> lowest id with that text
  int max_token_length_ = 0;
};

/// The old name of Llama2cTokenizer (llama2.c's tokenizer.bin reader), kept for one
/// version: it reads only that format, while TextTokenizer (text_tokenizer.hpp) is
/// the interface every tokenizer format presents.
using Tokenizer [[deprecated("kvd::Tokenizer is now kvd::Llama2cTokenizer")]] = Llama2cTokenizer;

/// Turns a stream of token ids into valid UTF-8 text, one token at a time, as a
/// generation loop produces them. Byte-fallback pieces can split one character
/// over several tokens; the decoder holds back such an incomplete sequence (at most
/// 3 bytes) until it completes. Every byte that cannot be part of valid UTF-8 is
/// replaced: each maximal invalid subpart becomes one U+FFFD (Unicode's recommended
/// practice), so the output is always valid UTF-8. BOS and EOS produce no text.
/// The decoder keeps a pointer to the tokenizer, which must outlive it and must
/// not be moved from while the decoder is in use.
class StreamDecoder {
 public:
  /// `prev_token` is the token before the first one pushed (e.g. BOS or the last
  /// prompt token), which decides whether a leading space is stripped; -1 for none.
  explicit StreamDecoder(const Llama2cTokenizer& tokenizer, int prev_token = -1) : tokenizer_(&tokenizer), prev_(prev_token) {}

  /// Feeds one token; returns the text that is now complete (possibly empty).
  /// Throws TokenError if token is outside [0, vocab_size); the decoder is unchanged.
  std::string push(int token) {
    std::string text = pending_;
    // BOS and EOS are always valid ids (vocab_size >= 3); any other id is checked
    // here, before the decoder changes.
    if (token != Llama2cTokenizer::kBosId && token != Llama2cTokenizer::kEosId) tokenizer_->decode_append(prev_, token, text);
    prev_ = token;
    pending_.clear();
    std::string out;
    out.reserve(text.size() + 3);
    for (std::size_t pos = 0; pos < text.size();) {
      const detail::Utf8Step step = detail::utf8_step(text, pos);
      if (step.kind == detail::Utf8Step::kComplete) {
        out.append(text, pos, step.length);
      } else if (step.kind == detail::Utf8Step::kIncomplete) {
        pending_.assign(text, pos, step.length);  // wait for the rest of the character
      } else {
        out.append(kReplacement);
      }
      pos += step.length;
    }
    return out;
  }

  /// Ends the stream: returns U+FFFD if an incomplete sequence was held back, else
  /// "". The decoder is then empty, ready for more tokens; prev_token is kept.
  std::string flush() {
    std::string out = pending_.empty() ? std::string() : std::string(kReplacement);
    pending_.clear();
    return out;
  }

  /// Drops any held-back bytes and starts over as if newly constructed.
  void reset(int prev_token = -1) {
    pending_.clear();
    prev_ = prev_token;
  }

  /// Bytes held back, waiting for the rest of a character (0..3).
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  static constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

  const Llama2cTokenizer* tokenizer_;
  int prev_;
  std::string pending_;  // an incomplete but so far valid UTF-8 sequence
};

}  // namespace kvd
