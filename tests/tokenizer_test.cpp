// Llama2cTokenizer tests: golden encodings from the shared reference files (both
// vocabularies), the fast merge against a literal transcription of llama2.c's
// O(n^2) loop, decoding, streaming UTF-8 reassembly, and one test per kind of
// malformed tokenizer file.
#include "kvdecode/text/llama2c_tokenizer.hpp"

#include "json_reader.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using kvd_test::Json;
using kvd_test::JsonParser;
using kvd_test::read_json;

const std::string kShared = KVDECODE_SHARED_DIR;
const std::string kTok512 = kShared + "/models/tok512.bin";
const std::string kLlama2 = kShared + "/models/tokenizer.bin";
const std::string kTok512Cases = kShared + "/reference/tok512_cases.json";
const std::string kLlama2Cases = kShared + "/reference/llama2_tokenizer_cases.json";

#define SKIP_IF_MISSING(path) \
  if (!fs::exists(path)) GTEST_SKIP() << "shared file " << (path) << " is absent"

TEST(JsonParserSelfTest, DecodesEscapesAndSurrogatePairs) {
  const Json v = JsonParser(R"({"a": ["x\n\"\\\/\t", "\u00e9\u4e2d\ud83d\ude00", 12, -3.5, true, null]})").parse();
  const auto& a = v.at("a").array;
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a[0].string, "x\n\"\\/\t");
  EXPECT_EQ(a[1].string, "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");  // é 中 😀
  EXPECT_EQ(a[2].number, 12);
  EXPECT_EQ(a[3].number, -3.5);
  EXPECT_TRUE(a[4].boolean);
  EXPECT_EQ(a[5].kind, Json::kNull);
}

// ---------------------------------------------------------------------------
// llama2.c's encode(), transcribed literally (rescan all pairs after each merge,
// strict '>' so the leftmost best pair wins), with its own ordered-map lookup. The
// fast encoder must agree with it on every input.
std::vector<int> reference_encode(const kvd::Llama2cTokenizer& tok, const std::string& text, bool bos, bool eos) {
  std::map<std::string, int> lookup;
  for (int i = tok.vocab_size() - 1; i >= 0; --i) lookup[tok.piece(i)] = i;  // lowest id wins
  auto find = [&](const std::string& s) {
    auto it = lookup.find(s);
    return it == lookup.end() ? -1 : it->second;
  };
  std::vector<int> tokens;
  if (bos) tokens.push_back(1);
  if (!text.empty()) tokens.push_back(find(" "));
  std::string buf;
  for (std::size_t c = 0; c < text.size(); ++c) {
    if ((text[c] & 0xC0) != 0x80) buf.clear();
    buf += text[c];
    const bool next_is_cont = c + 1 < text.size() && (text[c + 1] & 0xC0) == 0x80;
    if (next_is_cont && buf.size() < 4) continue;
    const int id = find(buf);
    if (id != -1) {
      tokens.push_back(id);
    } else {
      for (unsigned char b : buf) tokens.push_back(b + 3);
    }
    buf.clear();
  }
  for (;;) {
    float best_score = -1e10f;
    int best_id = -1, best_idx = -1;
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int id = find(tok.piece(tokens[i]) + tok.piece(tokens[i + 1]));
      if (id != -1 && tok.score(id) > best_score) {
        best_score = tok.score(id);
        best_id = id;
        best_idx = static_cast<int>(i);
      }
    }
    if (best_idx == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + best_idx + 1);
  }
  if (eos) tokens.push_back(2);
  return tokens;
}

std::string ids_str(const std::vector<int>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

void check_reference_cases(const std::string& model_path, const std::string& cases_path) {
  const kvd::Llama2cTokenizer tok = kvd::Llama2cTokenizer::load(model_path);
  const Json doc = read_json(cases_path);
  const auto& cases = doc.at("cases").array;
  ASSERT_FALSE(cases.empty());
  for (const Json& c : cases) {
    const std::string& text = c.at("text").string;
    std::vector<int> want;
    for (const Json& id : c.at("ids").array) want.push_back(static_cast<int>(id.number));
    const std::vector<int> got = tok.encode(text, /*bos=*/true, /*eos=*/false);
    EXPECT_EQ(got, want) << "text: \"" << text << "\"\n got " << ids_str(got) << "\nwant " << ids_str(want);
    EXPECT_EQ(tok.decode_all(got), text);
  }
}

TEST(TokenizerReference, Tok512CasesMatch) {
  SKIP_IF_MISSING(kTok512);
  SKIP_IF_MISSING(kTok512Cases);
  check_reference_cases(kTok512, kTok512Cases);
}

TEST(TokenizerReference, Llama2CasesMatch) {
  SKIP_IF_MISSING(kLlama2);
  SKIP_IF_MISSING(kLlama2Cases);
  check_reference_cases(kLlama2, kLlama2Cases);
}

// Random texts built from words, runs of spaces, newlines, accented letters, CJK,
// emoji and raw (often invalid) bytes.
std::vector<std::string> random_texts(int count, std::size_t max_parts, std::uint32_t seed) {
  const std::vector<std::string> parts = {"the", "The", " ", "  ", "    ", "\n", "\t", "Once", "upon", "a",
                                          "time", "little", "girl", "named", "Lily", ",", ".", "!", "?", "\"",
                                          "'s", "don't", "123", "4567", "poivrée", "naïve", "中文", "日本語",
                                          "😀", "🚀", "ß", "Ω", "\xFF", "\x80", "\xE4\xB8", "\xC3", "\x01", "ab",
                                          "aaaa", "ing", "er", "hello", "world", "x", "Zz", "==>", "\r\n", "—"};
  std::mt19937 rng(seed);
  std::vector<std::string> texts;
  for (int t = 0; t < count; ++t) {
    std::string s;
    const std::size_t n = rng() % (max_parts + 1);
    for (std::size_t k = 0; k < n; ++k) s += parts[rng() % parts.size()];
    texts.push_back(s);
  }
  return texts;
}

TEST(TokenizerReference, FastMergeMatchesLlama2cLoopTok512) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512, 512);
  for (const std::string& text : random_texts(300, 60, 1)) {
    ASSERT_EQ(tok.encode(text, true, false), reference_encode(tok, text, true, false)) << "text: \"" << text << "\"";
    ASSERT_EQ(tok.encode(text, false, true), reference_encode(tok, text, false, true)) << "text: \"" << text << "\"";
  }
}

TEST(TokenizerReference, FastMergeMatchesLlama2cLoopLlama2) {
  SKIP_IF_MISSING(kLlama2);
  const auto tok = kvd::Llama2cTokenizer::load(kLlama2, 32000);
  for (const std::string& text : random_texts(60, 60, 2))
    ASSERT_EQ(tok.encode(text, true, false), reference_encode(tok, text, true, false)) << "text: \"" << text << "\"";
  // Runs of spaces exercise Llama 2's whitespace pieces scored -1e9 (still > -1e10).
  const std::string spaces = "a" + std::string(17, ' ') + "b\n" + std::string(9, ' ') + "c";
  EXPECT_EQ(tok.encode(spaces, true, false), reference_encode(tok, spaces, true, false));
}

TEST(TokenizerReference, LongTextMatchesLlama2cLoop) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  std::string text;
  for (const std::string& t : random_texts(40, 60, 3)) text += t;
  ASSERT_GT(text.size(), 1000u);
  EXPECT_EQ(tok.encode(text, true, true), reference_encode(tok, text, true, true));
}

TEST(TokenizerReference, VeryLongTextEncodesAndRoundTrips) {
  SKIP_IF_MISSING(kLlama2);
  const auto tok = kvd::Llama2cTokenizer::load(kLlama2);
  std::string text;
  for (const std::string& t : random_texts(400, 60, 5)) text += t;  // ~100 KB; O(n^2) would take far longer
  std::string valid;  // keep it valid UTF-8 so the round trip is exact
  for (std::size_t pos = 0; pos < text.size();) {
    const auto step = kvd::detail::utf8_step(text, pos);
    if (step.kind == kvd::detail::Utf8Step::kComplete) valid.append(text, pos, step.length);
    pos += step.length;
  }
  const auto ids = tok.encode(valid, true, false);
  EXPECT_LT(ids.size(), valid.size());
  EXPECT_EQ(tok.decode_all(ids), valid);
}

// ---------------------------------------------------------------------------
// Encoding and decoding behaviour.

TEST(Tokenizer, RoundTripsTextsIncludingNonAscii) {
  SKIP_IF_MISSING(kTok512);
  SKIP_IF_MISSING(kLlama2);
  const auto small = kvd::Llama2cTokenizer::load(kTok512);
  const auto llama = kvd::Llama2cTokenizer::load(kLlama2);
  const std::vector<std::string> texts = {"Once upon a time, there was a little girl.",
                                          "  leading spaces and trailing  ",
                                          "line one\nline two\n\n\ttabbed",
                                          "Crème brûlée, naïve façade",
                                          "中文 and 日本語 mixed",
                                          "emoji 😀🚀 end",
                                          "x"};
  for (const auto* tok : {&small, &llama}) {
    for (const std::string& text : texts) {
      const auto ids = tok->encode(text, true, true);
      EXPECT_EQ(tok->decode_all(ids), text) << "vocab " << tok->vocab_size();
      EXPECT_EQ(ids.front(), tok->bos_id());
      EXPECT_EQ(ids.back(), tok->eos_id());
    }
  }
}

TEST(Tokenizer, ByteFallbackForCharacterNotInVocab) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  ASSERT_EQ(tok.find("\xE4\xB8\xAD"), -1);  // 中 is not a tok512 piece
  const int space = tok.find(" ");
  ASSERT_GE(space, 0);
  // 中 = E4 B8 AD -> byte pieces 0xE4+3, 0xB8+3, 0xAD+3; byte pieces never merge.
  EXPECT_EQ(tok.encode("\xE4\xB8\xAD", true, false), (std::vector<int>{1, space, 0xE4 + 3, 0xB8 + 3, 0xAD + 3}));
  EXPECT_EQ(tok.piece(0xE4 + 3), "<0xE4>");
  EXPECT_EQ(tok.decode(1, 0xE4 + 3), "\xE4");
}

TEST(Tokenizer, InvalidUtf8AndNulBytesEncodeBytewise) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  const std::string text("a\xFF\x80" "b\0c", 6);
  const auto ids = tok.encode(text, true, false);
  EXPECT_EQ(ids, reference_encode(tok, text, true, false));
  EXPECT_NE(std::find(ids.begin(), ids.end(), 0xFF + 3), ids.end());
  EXPECT_NE(std::find(ids.begin(), ids.end(), 0x00 + 3), ids.end());  // NUL is a byte, not the end
  EXPECT_EQ(tok.decode_all(ids), text);
}

TEST(Tokenizer, EmptyText) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  EXPECT_EQ(tok.encode("", true, false), std::vector<int>{1});  // no dummy prefix for empty text
  EXPECT_EQ(tok.encode("", false, false), std::vector<int>{});
  EXPECT_EQ(tok.encode("", true, true), (std::vector<int>{1, 2}));
  EXPECT_EQ(tok.decode_all({}), "");
}

TEST(Tokenizer, EosFlagAppendsEosAfterMerging) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  const auto without = tok.encode("Once upon a time", true, false);
  auto with = tok.encode("Once upon a time", true, true);
  ASSERT_EQ(with.back(), tok.eos_id());
  with.pop_back();
  EXPECT_EQ(with, without);
  EXPECT_EQ(tok.encode("Once", false, true).front(), tok.find(" Once"));
}

TEST(Tokenizer, DecodeStripsLeadingSpaceOnlyAfterBos) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  const int once = tok.find(" Once");
  ASSERT_GE(once, 0);
  EXPECT_EQ(tok.decode(tok.bos_id(), once), "Once");
  EXPECT_EQ(tok.decode(once, once), " Once");
  EXPECT_EQ(tok.decode(-1, once), " Once");
  EXPECT_EQ(tok.decode(5, tok.bos_id()), tok.piece(tok.bos_id()));  // control pieces decode to their text
}

TEST(Tokenizer, DecodeOutOfRangeThrowsNamingIdAndVocab) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  for (int bad : {-1, 512, 1 << 30}) {
    try {
      tok.decode(1, bad);
      FAIL() << "no exception for id " << bad;
    } catch (const kvd::TokenError& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("512"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(tok.decode_all({1, 400, 9999}), kvd::TokenError);
  EXPECT_THROW(tok.piece(512), kvd::TokenError);
  EXPECT_THROW(tok.score(-1), kvd::TokenError);
}

TEST(Tokenizer, DecodeAppendLeavesOutputUnchangedOnError) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  std::string out = "kept";
  EXPECT_THROW(tok.decode_append(1, 512, out), kvd::TokenError);
  EXPECT_EQ(out, "kept");
}

TEST(Tokenizer, AccessorsOnTok512) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.max_token_length(), 7);
  EXPECT_EQ(tok.piece(0), "<unk>");
  EXPECT_EQ(tok.piece(3), "<0x00>");
  EXPECT_EQ(tok.piece(258), "<0xFF>");
  EXPECT_EQ(tok.score(259), 0.0f);
  EXPECT_EQ(tok.score(260), -1.0f);
  EXPECT_EQ(kvd::Llama2cTokenizer::byte_value("<0x0a>"), 10);
  EXPECT_EQ(kvd::Llama2cTokenizer::byte_value("<0xZZ>"), -1);
  EXPECT_EQ(kvd::Llama2cTokenizer::byte_value(" the"), -1);
}

TEST(Tokenizer, CopyIsIndependentDeepCopy) {
  SKIP_IF_MISSING(kTok512);
  auto tok = kvd::Llama2cTokenizer::load(kTok512);
  const auto copy = tok.copy();
  tok = kvd::Llama2cTokenizer({"<unk>", "<s>", "</s>"}, {0, 0, 0});
  EXPECT_EQ(copy.vocab_size(), 512);
  EXPECT_EQ(copy.encode("Once upon a time", true, false), (std::vector<int>{1, 403, 407, 261, 378}));
}

// In-memory vocabularies pin the merge rule on hand-made cases.
kvd::Llama2cTokenizer tiny(std::vector<std::string> extra, std::vector<float> extra_scores) {
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    pieces.emplace_back(name);
    scores.push_back(0);
  }
  pieces.insert(pieces.end(), extra.begin(), extra.end());
  scores.insert(scores.end(), extra_scores.begin(), extra_scores.end());
  return kvd::Llama2cTokenizer(std::move(pieces), std::move(scores));
}

TEST(Tokenizer, MergeTiesGoToLeftmostPair) {
  // Pieces: 259 " ", 260 "a", 261 "aa". "aaa" -> " " a a a -> " " aa a (left pair first).
  const auto tok = tiny({" ", "a", "aa"}, {0, 0, 1});
  EXPECT_EQ(tok.encode("aaa", false, false), (std::vector<int>{259, 261, 260}));
  EXPECT_EQ(tok.encode("aaa", false, false), reference_encode(tok, "aaa", false, false));
}

TEST(Tokenizer, MergeTakesHighestScoreFirst) {
  // 262 "ab" (score 1) loses to 263 "bc" (score 2): "abc" -> " " a bc.
  const auto tok = tiny({" ", "a", "b", "ab", "bc", "c"}, {0, 0, 0, 1, 2, 0});
  EXPECT_EQ(tok.encode("abc", false, false), (std::vector<int>{259, 260, 263}));
  // Scores at or below llama2.c's starting bound -1e10 never merge.
  const auto never = tiny({" ", "a", "b", "ab"}, {0, 0, 0, -1e10f});
  EXPECT_EQ(never.encode("ab", false, false), (std::vector<int>{259, 260, 261}));
}

TEST(Tokenizer, MissingSpacePieceFallsBackToSpaceByte) {
  const auto tok = tiny({"a"}, {0});
  EXPECT_EQ(tok.encode("a", true, false), (std::vector<int>{1, ' ' + 3, 259}));
}

TEST(Tokenizer, ByteFallbackBeyondSmallVocabThrows) {
  const kvd::Llama2cTokenizer tok({"<unk>", "<s>", "</s>", " "}, {0, 0, 0, 0});
  try {
    tok.encode("z", true, false);
    FAIL() << "expected TokenError";
  } catch (const kvd::TokenError& e) {
    EXPECT_NE(std::string(e.what()).find("4"), std::string::npos) << e.what();  // vocab_size
  }
}

TEST(Tokenizer, InMemoryConstructorRejectsBadInput) {
  EXPECT_THROW(kvd::Llama2cTokenizer({"<unk>", "<s>", "</s>"}, {0, 0}), kvd::ArgumentError);
  EXPECT_THROW(kvd::Llama2cTokenizer({"<unk>", "<s>"}, {0, 0}), kvd::ArgumentError);
  EXPECT_THROW(kvd::Llama2cTokenizer({"<unk>", "<s>", "</s>"}, {0, std::numeric_limits<float>::quiet_NaN(), 0}),
               kvd::ArgumentError);
  EXPECT_THROW(kvd::Llama2cTokenizer({"<unk>", "<s>", "</s>"}, {0, 0, 0}, 3), kvd::ArgumentError);  // "</s>" is 4 bytes
  EXPECT_EQ(kvd::Llama2cTokenizer({"<unk>", "<s>", "</s>"}, {0, 0, 0}).max_token_length(), 5);
}

// ---------------------------------------------------------------------------
// StreamDecoder.

std::string stream_all(const kvd::Llama2cTokenizer& tok, const std::vector<int>& ids, std::vector<std::string>* chunks = nullptr) {
  kvd::StreamDecoder dec(tok);
  std::string out;
  for (int id : ids) {
    const std::string piece = dec.push(id);
    if (chunks) chunks->push_back(piece);
    out += piece;
  }
  return out + dec.flush();
}

TEST(StreamDecoder, HoldsBackCharacterSplitOverBytePieces) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  const std::string text = "a 中😀!";
  const auto ids = tok.encode(text, true, false);
  std::vector<std::string> chunks;
  EXPECT_EQ(stream_all(tok, ids, &chunks), text);
  // Every chunk is complete UTF-8 on its own; some tokens yield nothing (held back).
  int empty = 0;
  for (const auto& c : chunks) {
    for (std::size_t pos = 0; pos < c.size();) {
      const auto step = kvd::detail::utf8_step(c, pos);
      ASSERT_EQ(step.kind, kvd::detail::Utf8Step::kComplete) << "chunk is not complete UTF-8";
      pos += step.length;
    }
    empty += c.empty();
  }
  EXPECT_GE(empty, 2 + 3);  // 中 holds back 2 tokens, 😀 holds back 3 (plus BOS)

  kvd::StreamDecoder dec(tok, tok.bos_id());
  EXPECT_EQ(dec.push(0xF0 + 3), "");
  EXPECT_EQ(dec.push(0x9F + 3), "");
  EXPECT_EQ(dec.push(0x98 + 3), "");
  EXPECT_EQ(dec.pending_bytes(), 3u);
  EXPECT_EQ(dec.push(0x80 + 3), "\xF0\x9F\x98\x80");
  EXPECT_EQ(dec.pending_bytes(), 0u);
}

TEST(StreamDecoder, MatchesDecodeAllForValidText) {
  SKIP_IF_MISSING(kLlama2);
  const auto tok = kvd::Llama2cTokenizer::load(kLlama2);
  for (const std::string text : {"Hello, 世界! 🚀 naïve", "Once upon a time", "\n\n  x"}) {
    const auto ids = tok.encode(text, true, true);
    EXPECT_EQ(stream_all(tok, ids), tok.decode_all(ids));
    EXPECT_EQ(stream_all(tok, ids), text);
  }
}

TEST(StreamDecoder, InvalidBytesBecomeOneReplacementPerMaximalSubpart) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  const std::string fffd = "\xEF\xBF\xBD";
  kvd::StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(0xFF + 3), fffd);               // never valid
  EXPECT_EQ(dec.push(0xE4 + 3), "");                 // could start 中
  EXPECT_EQ(dec.push(0xB8 + 3), "");
  EXPECT_EQ(dec.push(tok.find("a")), fffd + "a");    // E4 B8 cut short: one U+FFFD, then 'a'
  EXPECT_EQ(dec.push(0xC0 + 3), fffd);               // C0 is never a lead byte (overlong)
  EXPECT_EQ(dec.push(0xED + 3), "");
  EXPECT_EQ(dec.push(0xA0 + 3), fffd + fffd);        // ED A0 would be a surrogate
}

TEST(StreamDecoder, FlushReplacesIncompleteTail) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  kvd::StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(0xE4 + 3), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.flush(), "");
  EXPECT_EQ(dec.push(0xE4 + 3), "");
  dec.reset();
  EXPECT_EQ(dec.pending_bytes(), 0u);
  EXPECT_EQ(dec.push(tok.find("a")), "a");
}

TEST(StreamDecoder, OutOfRangeTokenLeavesDecoderUnchanged) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  kvd::StreamDecoder dec(tok, tok.bos_id());
  EXPECT_EQ(dec.push(0xE4 + 3), "");
  EXPECT_THROW(dec.push(512), kvd::TokenError);
  EXPECT_EQ(dec.pending_bytes(), 1u);
  EXPECT_EQ(dec.push(0xB8 + 3), "");
  EXPECT_EQ(dec.push(0xAD + 3), "\xE4\xB8\xAD");
}

TEST(StreamDecoder, StripsLeadingSpaceAfterBos) {
  SKIP_IF_MISSING(kTok512);
  const auto tok = kvd::Llama2cTokenizer::load(kTok512);
  kvd::StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(tok.bos_id()), "");
  EXPECT_EQ(dec.push(tok.find(" Once")), "Once");
  EXPECT_EQ(dec.push(tok.find(" Once")), " Once");
  EXPECT_EQ(dec.push(tok.eos_id()), "");
}

// ---------------------------------------------------------------------------
// Malformed tokenizer files: one test per defect. Each writes a small file into a
// fresh temporary directory.

class TokenizerFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("kvdecode-tokenizer-" + std::to_string(std::random_device{}()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Little-endian byte builders for the tokenizer.bin layout.
  static void put_i32(std::string& b, std::int32_t v) {
    const auto u = static_cast<std::uint32_t>(v);
    for (int k = 0; k < 4; ++k) b += static_cast<char>((u >> (8 * k)) & 0xFF);
  }
  static void put_f32(std::string& b, float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    put_i32(b, static_cast<std::int32_t>(u));
  }
  static void put_piece(std::string& b, float score, const std::string& text) {
    put_f32(b, score);
    put_i32(b, static_cast<std::int32_t>(text.size()));
    b += text;
  }
  // A valid 3-piece file with max_token_length 8.
  static std::string valid3() {
    std::string b;
    put_i32(b, 8);
    put_piece(b, 0, "<unk>");
    put_piece(b, 0, "<s>");
    put_piece(b, 0, "</s>");
    return b;
  }
  std::string write(const std::string& bytes) {
    const std::string path = (dir_ / "tok.bin").string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  // Asserts load throws FileError whose message names the file and contains `fragment`.
  static void expect_file_error(const std::function<void()>& load, const std::string& path,
                                const std::string& fragment) {
    try {
      load();
      FAIL() << "expected FileError containing \"" << fragment << "\"";
    } catch (const kvd::FileError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(fragment), std::string::npos) << what;
    }
  }

  fs::path dir_;
};

TEST_F(TokenizerFile, ValidSmallFileLoads) {
  const std::string path = write(valid3());
  const auto a = kvd::Llama2cTokenizer::load(path);
  const auto b = kvd::Llama2cTokenizer::load(path, 3);
  EXPECT_EQ(a.vocab_size(), 3);
  EXPECT_EQ(b.piece(2), "</s>");
  EXPECT_EQ(b.max_token_length(), 8);
}

TEST_F(TokenizerFile, MissingFile) {
  const std::string path = (dir_ / "nope.bin").string();
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "does not exist");
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path, 512); }, path, "does not exist");
}

TEST_F(TokenizerFile, Directory) {
  const std::string path = dir_.string();
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "is a directory");
}

TEST_F(TokenizerFile, EmptyFile) {
  const std::string path = write("");
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "is empty");
}

TEST_F(TokenizerFile, ShorterThanHeader) {
  const std::string path = write(std::string("\x08\x00", 2));
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "2 bytes");
}

TEST_F(TokenizerFile, NonPositiveMaxTokenLength) {
  std::string b;
  put_i32(b, -4);
  put_piece(b, 0, "x");
  const std::string path = write(b);
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "max_token_length = -4");
}

TEST_F(TokenizerFile, TruncatedPieceHeader) {
  std::string b = valid3();
  b += std::string("\x00\x00\x80", 3);  // 3 of the 8 bytes of a 4th piece's score+length
  const std::string path = write(b);
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "truncated: piece 3");
}

TEST_F(TokenizerFile, TruncatedPieceText) {
  std::string b = valid3();
  put_f32(b, 0);
  put_i32(b, 6);
  b += "abc";  // 3 of 6 bytes
  const std::string path = write(b);
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "piece 3 has length 6 but only 3 bytes remain");
}

TEST_F(TokenizerFile, NegativePieceLength) {
  std::string b = valid3();
  put_f32(b, 0);
  put_i32(b, -7);
  const std::string path = write(b);
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "negative length -7");
}

TEST_F(TokenizerFile, PieceLongerThanMaxTokenLength) {
  std::string b = valid3();
  put_piece(b, 0, "123456789");  // 9 > 8
  const std::string path = write(b);
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "length 9 > max_token_length = 8");
}

TEST_F(TokenizerFile, AbsurdLengthDoesNotAllocate) {
  std::string b;
  put_i32(b, std::numeric_limits<std::int32_t>::max());
  put_f32(b, 0);
  put_i32(b, std::numeric_limits<std::int32_t>::max());  // 2 GB piece in a 12-byte file
  const std::string path = write(b);
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "only 0 bytes remain");
}

TEST_F(TokenizerFile, FewerPiecesThanVocabSize) {
  const std::string path = write(valid3());
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path, 5); }, path, "only 3 pieces, expected vocab_size = 5");
}

TEST_F(TokenizerFile, HugeVocabSizeWithSmallFile) {
  const std::string path = write(valid3());
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path, std::numeric_limits<int>::max()); }, path, "only 3 pieces");
}

TEST_F(TokenizerFile, BytesLeftAfterVocabSize) {
  std::string b = valid3();
  put_piece(b, 0, "x");
  const std::string path = write(b);
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path, 3); }, path, "9 bytes left after vocab_size = 3");
  EXPECT_EQ(kvd::Llama2cTokenizer::load(path).vocab_size(), 4);
}

TEST_F(TokenizerFile, TooFewPiecesInferred) {
  std::string b;
  put_i32(b, 8);
  put_piece(b, 0, "<unk>");
  put_piece(b, 0, "<s>");
  const std::string path = write(b);
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "only 2 pieces");
}

TEST_F(TokenizerFile, NanScore) {
  std::string b = valid3();
  put_piece(b, std::numeric_limits<float>::quiet_NaN(), "x");
  const std::string path = write(b);
  expect_file_error([&] { kvd::Llama2cTokenizer::load(path); }, path, "piece 3 has a NaN score");
}

TEST_F(TokenizerFile, VocabSizeArgumentTooSmall) {
  const std::string path = write(valid3());
  EXPECT_THROW(kvd::Llama2cTokenizer::load(path, 0), kvd::ArgumentError);
  EXPECT_THROW(kvd::Llama2cTokenizer::load(path, -1), kvd::ArgumentError);
}

TEST(TokenizerLoad, SharedVocabSizesAreInferred) {
  SKIP_IF_MISSING(kTok512);
  SKIP_IF_MISSING(kLlama2);
  EXPECT_EQ(kvd::Llama2cTokenizer::load(kTok512).vocab_size(), 512);
  EXPECT_EQ(kvd::Llama2cTokenizer::load(kLlama2).vocab_size(), 32000);
  EXPECT_EQ(kvd::Llama2cTokenizer::load(kLlama2).max_token_length(), 27);
  EXPECT_THROW(kvd::Llama2cTokenizer::load(kLlama2, 512), kvd::FileError);  // wrong model's vocab
}

}  // namespace
