// TextTokenizer: the one interface every tokenizer kvdecode reads presents to
// programs (encode text to ids, ids back to text, the special ids that start and
// stop generation), and TokenStreamDecoder, which turns ids into text one at a
// time as a generation loop produces them.
//
// Implementations: BpeTokenizer (bpe_tokenizer.hpp: SentencePiece-style and
// byte-level BPE, from GGUF metadata or Hugging Face tokenizer.json) and
// Llama2cTextTokenizer below (llama2.c's tokenizer.bin, through kvd::Llama2cTokenizer).
// load_tokenizer() (tokenizer_loader.hpp) picks one by looking at a file's bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvdecode/error.hpp"
#include "kvdecode/text/llama2c_tokenizer.hpp"

namespace kvd {

/// Kinds of token, with the codes GGUF stores in tokenizer.ggml.token_type.
/// Frozen: these values are on disk.
enum class TokenType : std::int32_t {
  kUndefined = 0,
  kNormal = 1,       ///< ordinary vocabulary piece
  kUnknown = 2,      ///< <unk>
  kControl = 3,      ///< special token (BOS, EOS, <|im_start|>...): no text unless asked for
  kUserDefined = 4,  ///< added token matched verbatim in text, decoded as its text
  kUnused = 5,
  kByte = 6,         ///< byte-fallback piece <0xNN>
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;

  /// Ids of `text`. With add_special, BOS is prepended if the tokenizer's
  /// add_bos() says so and EOS appended if add_eos() does. With parse_special,
  /// special-token text in `text` (e.g. "<|im_start|>") becomes that token's id;
  /// without, it is tokenized as ordinary text (user-defined added tokens are still
  /// matched, as the reference implementations do). Any byte string is accepted:
  /// invalid UTF-8 becomes byte tokens. Throws TokenError, naming the limit, when
  /// the text would exceed a tokenizer's work or growth limits (BpeTokenizer's regex
  /// budget and text growth, docs/limits.md). Never modifies the tokenizer; safe to
  /// call from several threads at once.
  virtual std::vector<int> encode(const std::string& text, bool add_special = true, bool parse_special = true) const = 0;

  virtual int vocab_size() const = 0;

  /// The bytes decoding appends for `id` (may be part of a UTF-8 character, e.g. a
  /// byte-fallback piece). Control and unknown tokens give "" unless `special`.
  /// Throws TokenError naming the id and vocab_size if id is outside [0, vocab_size).
  virtual std::string token_to_piece(int id, bool special = false) const = 0;

  /// The token's text as the vocabulary stores it. Throws TokenError if out of range.
  virtual const std::string& token_text(int id) const = 0;

  /// Kind of token `id`. Throws TokenError if out of range.
  virtual TokenType token_type(int id) const = 0;

  /// One line saying what was loaded, e.g. "tokenizer.json BPE (byte-level), 151669 tokens".
  virtual std::string describe() const = 0;

  int bos_id() const { return bos_; }  ///< -1 if none
  int eos_id() const { return eos_; }  ///< -1 if none
  int eot_id() const { return eot_; }  ///< end of turn (<|eot_id|>, <|im_end|>...), -1 if none
  int unk_id() const { return unk_; }  ///< -1 if none
  int pad_id() const { return pad_; }  ///< -1 if none
  bool add_bos() const { return add_bos_; }  ///< encode(add_special) prepends BOS
  bool add_eos() const { return add_eos_; }  ///< encode(add_special) appends EOS
  /// Whether the first token of a decoded text loses one leading space (the
  /// SentencePiece dummy prefix that encoding added).
  bool strips_leading_space() const { return strip_leading_space_; }

  /// Ids that end generation: EOS, EOT, EOM and the end-of-turn tokens the
  /// vocabulary names (llama.cpp's list), sorted, without duplicates.
  const std::vector<int>& eog_ids() const { return eog_; }
  bool is_eog(int id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

  /// True for control and unknown tokens (what decode(skip_special) leaves out).
  bool is_special(int id) const {
    const TokenType t = token_type(id);
    return t == TokenType::kControl || t == TokenType::kUnknown;
  }

  /// Text of `ids` as valid UTF-8 (each invalid or incomplete sequence becomes one
  /// U+FFFD). The first emitted token loses one leading space when
  /// strips_leading_space(). With skip_special, control and unknown tokens give no
  /// text. Throws TokenError for an id out of range.
  inline std::string decode(const std::vector<int>& ids, bool skip_special = true) const;

 protected:
  void check_id(int id, const char* what) const {
    if (id < 0 || id >= vocab_size())
      throw TokenError(detail::msg(what, ": token id ", id, " is outside [0, ", vocab_size(), ")"));
  }
  /// Sorts and deduplicates eog_ after it was filled; drops -1.
  void finish_eog() {
    eog_.erase(std::remove(eog_.begin(), eog_.end(), -1), eog_.end());
    std::sort(eog_.begin(), eog_.end());
    eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
  }

  int bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1, pad_ = -1;
  bool add_bos_ = false, add_eos_ = false, strip_leading_space_ = false;
  std::vector<int> eog_;
};

/// Turns ids into valid UTF-8 text one token at a time. Bytes that may still
/// become a character (a UTF-8 sequence split over byte-fallback or byte-level
/// tokens) are held back until it completes; every invalid sequence becomes one
/// U+FFFD. Keeps a pointer to the tokenizer, which must outlive it.
class TokenStreamDecoder {
 public:
  /// `at_start`: the first token pushed begins the text (so it loses the dummy-prefix
  /// space when the tokenizer strips one); false when continuing after a prompt.
  /// `special`: control tokens produce their text.
  explicit TokenStreamDecoder(const TextTokenizer& tok, bool at_start = false, bool special = false)
      : tok_(&tok), at_start_(at_start), special_(special) {}

  /// Feeds one token; returns the text now complete (possibly empty). Throws
  /// TokenError if id is out of range; the decoder is then unchanged.
  std::string push(int id) {
    std::string piece = tok_->token_to_piece(id, special_);
    if (at_start_ && !piece.empty()) {
      if (tok_->strips_leading_space() && piece[0] == ' ') piece.erase(0, 1);
      at_start_ = false;
    }
    std::string text = pending_ + piece;
    pending_.clear();
    std::string out;
    out.reserve(text.size() + 3);
    for (std::size_t pos = 0; pos < text.size();) {
      const detail::Utf8Step step = detail::utf8_step(text, pos);
      if (step.kind == detail::Utf8Step::kComplete) out.append(text, pos, step.length);
      else if (step.kind == detail::Utf8Step::kIncomplete) pending_.assign(text, pos, step.length);
      else out.append("\xEF\xBF\xBD");
      pos += step.length;
    }
    return out;
  }

  /// Ends the stream: U+FFFD if an incomplete sequence was held back, else "".
  std::string flush() {
    std::string out = pending_.empty() ? std::string() : std::string("\xEF\xBF\xBD");
    pending_.clear();
    return out;
  }

  /// Bytes held back (0..3).
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  const TextTokenizer* tok_;
  bool at_start_, special_;
  std::string pending_;
};

inline std::string TextTokenizer::decode(const std::vector<int>& ids, bool skip_special) const {
  TokenStreamDecoder dec(*this, true, !skip_special);
  std::string out;
  for (int id : ids) out += dec.push(id);
  return out + dec.flush();
}

/// llama2.c's tokenizer.bin behind the common interface: encoding is exactly
/// Llama2cTokenizer::encode (llama2.c's algorithm), ids 1 and 2 are BOS and EOS.
class Llama2cTextTokenizer : public TextTokenizer {
 public:
  /// Takes the tokenizer over. add_bos() is true, as llama2.c's run.c encodes prompts.
  explicit Llama2cTextTokenizer(Llama2cTokenizer tok, std::string path = "")
      : tok_(std::move(tok)), path_(std::move(path)) {
    bos_ = Llama2cTokenizer::kBosId;
    eos_ = Llama2cTokenizer::kEosId;
    unk_ = Llama2cTokenizer::kUnkId;
    add_bos_ = true;
    strip_leading_space_ = true;
    // llama2.c's models end a story by starting the next with BOS; run.c stops there.
    eog_ = {eos_, bos_};
    finish_eog();
  }

  /// parse_special has no effect: llama2.c has no special-token syntax.
  std::vector<int> encode(const std::string& text, bool add_special = true, bool /*parse_special*/ = true) const override {
    return tok_.encode(text, add_special && add_bos_, add_special && add_eos_);
  }
  int vocab_size() const override { return tok_.vocab_size(); }
  std::string token_to_piece(int id, bool special = false) const override {
    check_id(id, "token_to_piece");
    if (id == bos_ || id == eos_ || id == unk_) return special ? tok_.piece(id) : std::string();
    return tok_.decode(-1, id);
  }
  const std::string& token_text(int id) const override { return tok_.piece(id); }
  TokenType token_type(int id) const override {
    check_id(id, "token_type");
    if (id == unk_) return TokenType::kUnknown;
    if (id == bos_ || id == eos_) return TokenType::kControl;
    if (id >= Llama2cTokenizer::kByteOffset && id < Llama2cTokenizer::kByteOffset + 256) return TokenType::kByte;
    return TokenType::kNormal;
  }
  std::string describe() const override {
    return detail::msg("llama2.c tokenizer.bin ", path_, ": SentencePiece BPE, ", vocab_size(), " tokens");
  }
  const Llama2cTokenizer& tokenizer() const { return tok_; }

 private:
  Llama2cTokenizer tok_;
  std::string path_;
};

}  // namespace kvd
