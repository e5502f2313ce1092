// Vocabulary tests: every tokenizer format against llama.cpp's reference cases
// (../shared/reference/vocab: texts and the ids the Hugging Face tokenizers give),
// decoding round trips, special tokens, invalid UTF-8, streaming, long inputs,
// and one test per malformed or unsupported tokenizer file.
#include "kvdecode/text/bpe_tokenizer.hpp"
#include "kvdecode/io/gguf.hpp"
#include "kvdecode/text/text_tokenizer.hpp"
#include "kvdecode/text/tokenizer_json.hpp"
#include "kvdecode/text/tokenizer_loader.hpp"

#include <gtest/gtest.h>

#include "vocab_cases.hpp"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::string kShared = KVDECODE_SHARED_DIR;
const std::string kRef = kShared + "/reference/vocab/";
const std::string kVocab = kShared + "/models/vocab/";
const std::string kJson = kShared + "/models/tokenizer-json/";

#define SKIP_IF_MISSING(path) \
  if (!fs::exists(path)) GTEST_SKIP() << "shared file " << (path) << " is absent"

using kvd_test::read_cases;
using kvd_test::read_ids;
using kvd_test::show;
using kvd_test::slurp;

// Encodes every case as llama.cpp's test does (no BOS, special text not parsed)
// and compares with the reference ids; checks that decoding gives the text back
// wherever `round_trip(text)` says the reference does.
template <class RoundTrip>
void check_reference(const kvd::TextTokenizer& tok, const std::string& name, RoundTrip round_trip) {
  const auto cases = read_cases(kRef + name + ".inp");
  const auto want = read_ids(kRef + name + ".out");
  ASSERT_EQ(cases.size(), want.size()) << name;
  ASSERT_GT(cases.size(), 40u);
  int passed = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int> got = tok.encode(cases[i], false, false);
    EXPECT_EQ(show(got), show(want[i])) << name << " case " << i << ": '" << cases[i] << "'";
    passed += got == want[i];
    if (round_trip(cases[i])) {
      EXPECT_EQ(tok.decode(got), cases[i]) << name << " case " << i;
    }
  }
  EXPECT_EQ(passed, static_cast<int>(cases.size()));
}

bool always(const std::string&) { return true; }

TEST(TokenizerJsonReference, Llama3MatchesLlamaBpeCases) {
  SKIP_IF_MISSING(kJson + "llama3/tokenizer.json");
  const auto tok = kvd::load_tokenizer_json(kJson + "llama3/tokenizer.json");
  check_reference(*tok, "ggml-vocab-llama-bpe.gguf", always);
}

TEST(TokenizerJsonReference, Qwen3MatchesQwen2Cases) {
  SKIP_IF_MISSING(kJson + "qwen3/tokenizer.json");
  const auto tok = kvd::load_tokenizer_json(kJson + "qwen3/tokenizer.json");
  // NFC changes text that is not already NFC; every case here is.
  check_reference(*tok, "ggml-vocab-qwen2.gguf", always);
}

TEST(TokenizerJsonReference, MistralMatchesTransformersJs) {
  SKIP_IF_MISSING(kJson + "mistral/tokenizer.json");
  const auto tok = kvd::load_tokenizer_json(kJson + "mistral/tokenizer.json");
  check_reference(*tok, "mistral-tokenizer-json", always);
}

TEST(GgufVocabReference, LlamaSpmMatchesItsCases) {
  SKIP_IF_MISSING(kVocab + "ggml-vocab-llama-spm.gguf");
  const auto tok = kvd::load_tokenizer(kVocab + "ggml-vocab-llama-spm.gguf");
  check_reference(*tok, "ggml-vocab-llama-spm.gguf", always);
}

TEST(GgufVocabReference, Gpt2MatchesItsCases) {
  SKIP_IF_MISSING(kVocab + "ggml-vocab-gpt-2.gguf");
  const auto tok = kvd::load_tokenizer(kVocab + "ggml-vocab-gpt-2.gguf");
  check_reference(*tok, "ggml-vocab-gpt-2.gguf", always);
}

TEST(GgufVocabReference, Phi3MatchesItsCases) {
  SKIP_IF_MISSING(kVocab + "ggml-vocab-phi-3.gguf");
  const auto tok = kvd::load_tokenizer(kVocab + "ggml-vocab-phi-3.gguf");
  check_reference(*tok, "ggml-vocab-phi-3.gguf", always);
}

TEST(GgufVocabReference, Llama3MatchesLlamaBpeCases) {
  SKIP_IF_MISSING(kVocab + "vocab-llama3.gguf");
  const auto tok = kvd::load_tokenizer(kVocab + "vocab-llama3.gguf");
  check_reference(*tok, "ggml-vocab-llama-bpe.gguf", always);
}

TEST(GgufVocabReference, Qwen3MatchesQwen2Cases) {
  SKIP_IF_MISSING(kVocab + "vocab-qwen3.gguf");
  const auto tok = kvd::load_tokenizer(kVocab + "vocab-qwen3.gguf");
  check_reference(*tok, "ggml-vocab-qwen2.gguf", always);
}

// --- special tokens, BOS/EOS, end of generation -----------------------------

TEST(SpecialTokens, QwenChatMarkersBecomeTheirIdsUnlessTurnedOff) {
  SKIP_IF_MISSING(kJson + "qwen3/tokenizer.json");
  const auto tok = kvd::load_tokenizer(kJson + "qwen3");  // the folder
  const std::string text = "<|im_start|>user\nHi<|im_end|>";
  const std::vector<int> ids = tok->encode(text);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(ids.back(), 151645);
  EXPECT_EQ(tok->decode(ids, false), text);
  EXPECT_EQ(tok->decode(ids), "user\nHi");
  const std::vector<int> plain = tok->encode(text, true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 151644), 0);
  EXPECT_GT(plain.size(), ids.size());
  EXPECT_EQ(tok->decode(plain), text);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->eos_id(), 151645);
  EXPECT_TRUE(tok->is_eog(151645));
  EXPECT_TRUE(tok->is_eog(151643));  // <|endoftext|>
  EXPECT_FALSE(tok->is_eog(151644));
}

TEST(SpecialTokens, Llama3GgufAddsBosAndStopsAtEotAndEos) {
  SKIP_IF_MISSING(kVocab + "vocab-llama3.gguf");
  const auto tok = kvd::load_tokenizer(kVocab + "vocab-llama3.gguf");
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->bos_id(), 128000);
  const std::vector<int> ids = tok->encode("Hello");
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(tok->encode("Hello", false)[0], ids[1]);
  EXPECT_EQ(tok->encode("<|begin_of_text|>Hello", false), ids);
  EXPECT_TRUE(tok->is_eog(tok->eos_id()));
  EXPECT_TRUE(tok->is_eog(128009));  // <|eot_id|>
  EXPECT_EQ(tok->token_to_piece(128000), "");
  EXPECT_EQ(tok->token_to_piece(128000, true), "<|begin_of_text|>");
}

TEST(SpecialTokens, SentencePieceBosAndDummyPrefix) {
  SKIP_IF_MISSING(kVocab + "ggml-vocab-llama-spm.gguf");
  const auto tok = kvd::load_tokenizer(kVocab + "ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int>{1, 15043, 3186}));
  // "<s>" in text is BOS only when special tokens are parsed.
  // After a special token the segment gets its own dummy prefix, as in llama.cpp.
  EXPECT_EQ(tok->encode("<s>Hello", false), (std::vector<int>{1, 15043}));
  EXPECT_NE(tok->encode("<s>Hello", false, false)[0], 1);
  EXPECT_EQ(tok->decode({1, 15043, 3186}), "Hello world");
  EXPECT_EQ(tok->decode({1, 15043, 3186}, false), "<s> Hello world");
}

TEST(SpecialTokens, MistralJsonTakesBosFromConfig) {
  SKIP_IF_MISSING(kJson + "mistral/tokenizer.json");
  const auto tok = kvd::load_tokenizer(kJson + "mistral/tokenizer.json");
  EXPECT_TRUE(tok->add_bos());
  EXPECT_FALSE(tok->add_eos());
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_EQ(tok->encode("Hello")[0], 1);
}

// --- invalid UTF-8, streaming, long inputs ----------------------------------

std::vector<std::string> all_tokenizers() {
  return {kVocab + "ggml-vocab-llama-spm.gguf", kVocab + "ggml-vocab-gpt-2.gguf", kVocab + "vocab-llama3.gguf",
          kVocab + "vocab-qwen3.gguf",          kJson + "mistral/tokenizer.json",   kJson + "llama3/tokenizer.json"};
}

TEST(InvalidUtf8, BecomesByteTokensAndDecodesToTheSameBytes) {
  SKIP_IF_MISSING(kVocab + "vocab-qwen3.gguf");
  const std::string bad = "ok \xFF\xFE caf\xC3 \xE2\x82 \xED\xA0\x80 end\xF0\x9F";
  for (const std::string& path : all_tokenizers()) {
    const auto tok = kvd::load_tokenizer(path);
    const std::vector<int> a = tok->encode(bad, false);
    EXPECT_EQ(tok->encode(bad, false), a) << path;  // deterministic
    ASSERT_FALSE(a.empty()) << path;
    std::string bytes;
    for (int id : a) bytes += tok->token_to_piece(id);
    if (tok->strips_leading_space() && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
    EXPECT_EQ(bytes, bad) << path;
    // decode() repairs: the result is valid UTF-8 with U+FFFD where bytes were bad.
    const std::string text = tok->decode(a);
    EXPECT_NE(text.find("\xEF\xBF\xBD"), std::string::npos) << path;
    EXPECT_EQ(text.substr(0, 3), "ok ") << path;
  }
}

TEST(Streaming, HoldsBackSplitCharactersAndMatchesDecode) {
  SKIP_IF_MISSING(kVocab + "ggml-vocab-llama-spm.gguf");
  const std::string text = "Hello \xF0\x9F\x98\x81 world \xE1\x9E\x80 ok";  // emoji and Khmer fall back to bytes
  for (const std::string& path : all_tokenizers()) {
    const auto tok = kvd::load_tokenizer(path);
    const std::vector<int> ids = tok->encode(text, false);
    kvd::TokenStreamDecoder dec(*tok, true);
    std::string streamed;
    std::size_t held = 0;
    for (int id : ids) {
      const std::string part = dec.push(id);
      // Whatever comes out is whole characters.
      EXPECT_EQ(kvd::detail::utf8_repair(part), part) << path;
      streamed += part;
      held = std::max(held, dec.pending_bytes());
    }
    streamed += dec.flush();
    EXPECT_EQ(streamed, text) << path;
    EXPECT_EQ(tok->decode(ids), text) << path;
    if (path.find("llama-spm") != std::string::npos) {
      EXPECT_GT(held, 0u) << "the emoji is four byte tokens";
    }
  }
}

TEST(Streaming, RejectsIdsOutOfRangeWithoutChangingState) {
  SKIP_IF_MISSING(kVocab + "ggml-vocab-llama-spm.gguf");
  const auto tok = kvd::load_tokenizer(kVocab + "ggml-vocab-llama-spm.gguf");
  kvd::TokenStreamDecoder dec(*tok);
  EXPECT_EQ(dec.push(243), "");  // first byte of a 4-byte character
  EXPECT_EQ(dec.pending_bytes(), 1u);
  EXPECT_THROW(dec.push(tok->vocab_size()), kvd::TokenError);
  EXPECT_THROW(dec.push(-1), kvd::TokenError);
  EXPECT_EQ(dec.pending_bytes(), 1u);
  EXPECT_THROW(tok->token_to_piece(32000), kvd::TokenError);
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
}

TEST(LongInput, OneMegabyteWithoutSpacesEncodesAndDecodes) {
  SKIP_IF_MISSING(kVocab + "vocab-llama3.gguf");
  std::mt19937 rng(7);
  std::string letters(1 << 20, 'a');
  const std::string same(1 << 20, 'a');
  for (char& c : letters) c = static_cast<char>('a' + rng() % 26);
  for (const std::string& path : {kVocab + "vocab-llama3.gguf", kVocab + "ggml-vocab-llama-spm.gguf",
                                  kJson + "qwen3/tokenizer.json"}) {
    const auto tok = kvd::load_tokenizer(path);
    for (const std::string* text : {static_cast<const std::string*>(&letters), &same}) {
      const std::vector<int> ids = tok->encode(*text, false);
      EXPECT_LT(ids.size(), text->size()) << path;  // merges happened
      EXPECT_EQ(tok->decode(ids), *text) << path;
    }
  }
}

TEST(Concurrency, EncodingFromSeveralThreadsGivesTheSameIds) {
  SKIP_IF_MISSING(kVocab + "vocab-qwen3.gguf");
  const auto tok = kvd::load_tokenizer(kVocab + "vocab-qwen3.gguf");
  const auto cases = read_cases(kRef + "ggml-vocab-qwen2.gguf.inp");
  std::vector<std::vector<int>> want;
  for (const std::string& c : cases) want.push_back(tok->encode(c, false, false));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (std::size_t i = 0; i < cases.size(); ++i) mismatches[t] += tok->encode(cases[i], false, false) != want[i];
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// --- telling formats apart by content ---------------------------------------

// A model GGUF written by llama.cpp carries its vocabulary; for stories260K it
// encodes as llama2.c does with tok512.bin.
TEST(GgufModelVocab, Stories260KMatchesTok512) {
  SKIP_IF_MISSING(kShared + "/models/gguf/stories260K-F32.gguf");
  const auto gguf = kvd::load_tokenizer(kShared + "/models/gguf/stories260K-F32.gguf");
  const auto bin = kvd::load_tokenizer(kShared + "/models/tok512.bin");
  EXPECT_EQ(gguf->vocab_size(), 512);
  for (const char* text : {"Once upon a time", "Once upon a time, there was a little girl named Lily.",
                           "She said, \"I want to play!\"\nThe end."}) {
    EXPECT_EQ(gguf->encode(text), bin->encode(text)) << text;
    EXPECT_EQ(gguf->decode(gguf->encode(text)), text);
  }
  EXPECT_EQ(gguf->encode("Once upon a time"), (std::vector<int>{1, 403, 407, 261, 378}));
  EXPECT_TRUE(gguf->is_eog(2));
}

TEST(LoadTokenizer, TellsFormatsApartByContentNotName) {
  SKIP_IF_MISSING(kJson + "mistral/tokenizer.json");
  const fs::path dir = fs::temp_directory_path() / "kvd_vocab_names";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kJson + "mistral/tokenizer.json", dir / "weights.gguf");
  fs::copy_file(kVocab + "ggml-vocab-gpt-2.gguf", dir / "tokenizer.json.bin");
  EXPECT_EQ(kvd::detect_tokenizer_format((dir / "weights.gguf").string()), kvd::TokenizerFormat::kTokenizerJson);
  EXPECT_EQ(kvd::detect_tokenizer_format((dir / "tokenizer.json.bin").string()), kvd::TokenizerFormat::kGguf);
  EXPECT_EQ(kvd::load_tokenizer((dir / "weights.gguf").string())->vocab_size(), 32000);
  EXPECT_EQ(kvd::load_tokenizer((dir / "tokenizer.json.bin").string())->vocab_size(), 50257);
  if (fs::exists(kShared + "/models/tokenizer.bin")) {
    const auto l2 = kvd::load_tokenizer(kShared + "/models/tokenizer.bin");
    EXPECT_EQ(kvd::detect_tokenizer_format(kShared + "/models/tokenizer.bin"), kvd::TokenizerFormat::kLlama2c);
    EXPECT_EQ(l2->vocab_size(), 32000);
    const kvd::Llama2cTokenizer direct = kvd::Llama2cTokenizer::load(kShared + "/models/tokenizer.bin");
    EXPECT_EQ(l2->encode("Hello world"), direct.encode("Hello world", true, false));
    EXPECT_EQ(l2->decode(l2->encode("Hello world")), "Hello world");
  }
  EXPECT_THROW(kvd::load_tokenizer(dir.string()), kvd::FileError);  // a folder without tokenizer.json
  EXPECT_THROW(kvd::load_tokenizer((dir / "absent").string()), kvd::FileError);
  fs::remove_all(dir);
}

// --- malformed and unsupported tokenizers: one test each --------------------

const char* kTinyJson = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})";

template <class E>
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

void expect_json_error(const std::string& json, const std::vector<std::string>& parts) {
  expect_error<kvd::FormatError>([&] { kvd::tokenizer_from_json(json, "", "t.json"); }, parts);
}

TEST(MalformedTokenizerJson, TinyValidOneWorks) {
  const auto tok = kvd::tokenizer_from_json(kTinyJson, "", "t.json");
  EXPECT_EQ(tok->encode("abba"), (std::vector<int>{2, 1, 0}));
}

TEST(MalformedTokenizerJson, Truncated) {
  const std::string j = kTinyJson;
  expect_json_error(j.substr(0, j.size() / 2), {"t.json", "invalid JSON", "unexpected end of input"});
}

TEST(MalformedTokenizerJson, InvalidJson) {
  expect_json_error(R"({"model": {"type": "BPE", "vocab": {"a": 0,, }}})", {"t.json", "invalid JSON"});
}

TEST(MalformedTokenizerJson, NotAnObject) { expect_json_error("[1, 2]", {"t.json", "not a JSON object"}); }

TEST(MalformedTokenizerJson, UnigramModelIsRefused) {
  expect_json_error(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})", {"t.json", "model.type", "'Unigram'", "not supported"});
}

TEST(MalformedTokenizerJson, WordPieceModelIsRefused) {
  expect_json_error(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})", {"'WordPiece'", "not supported"});
}

TEST(MalformedTokenizerJson, IdOutOfRange) {
  expect_json_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 4000000000}, "merges": []}})",
                    {"model.vocab", "id 4000000000", "'b'", "outside [0, 2)"});
}

TEST(MalformedTokenizerJson, NegativeId) {
  expect_json_error(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})", {"id -1", "outside"});
}

TEST(MalformedTokenizerJson, DuplicatedId) {
  expect_json_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0, "c": 1}, "merges": []}})",
                    {"id 0 is given to both 'a' and 'b'"});
}

TEST(MalformedTokenizerJson, MissingId) {
  expect_json_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2, "c": 2}, "merges": []}})", {"id 2"});
}

TEST(MalformedTokenizerJson, AddedTokenClashesWithVocabulary) {
  expect_json_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                       "added_tokens": [{"id": 0, "content": "<s>", "special": true}]})",
                    {"added_tokens[0]", "id 0 is given to both 'a' and '<s>'"});
}

TEST(MalformedTokenizerJson, MergeNamesUnknownToken) {
  expect_json_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a c"]}})",
                    {"merge 0 'a c'", "'c'", "not in the vocabulary"});
}

TEST(MalformedTokenizerJson, MergeResultMissing) {
  expect_json_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}})",
                    {"merge 0 'a b'", "'ab'", "not in the vocabulary"});
}

TEST(MalformedTokenizerJson, MergeWithoutSpace) {
  expect_json_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}})", {"model.merges[0]", "'ab'"});
}

TEST(MalformedTokenizerJson, UnsupportedNormalizer) {
  expect_json_error(R"({"normalizer": {"type": "NFKC"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
                    {"normalizer.type", "'NFKC'", "not a supported normalizer"});
}

TEST(MalformedTokenizerJson, UnsupportedPreTokenizer) {
  expect_json_error(R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "BertPreTokenizer"}]},
                       "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
                    {"pre_tokenizer.pretokenizers[0].type", "'BertPreTokenizer'"});
}

TEST(MalformedTokenizerJson, UnsupportedDecoder) {
  expect_json_error(R"({"decoder": {"type": "WordPiece"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
                    {"decoder.type", "'WordPiece'"});
}

TEST(MalformedTokenizerJson, BadRegex) {
  expect_json_error(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"},
                       "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
                    {"pre_tokenizer.pattern", "'(a'", "does not compile"});
}

TEST(MalformedTokenizerJson, VocabIdNotAnInteger) {
  expect_json_error(R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})", {"model.vocab[\"a\"]", "not an integer"});
}

TEST(MalformedTokenizerJson, ConfigNamesUnknownBos) {
  expect_error<kvd::FormatError>([] { kvd::tokenizer_from_json(kTinyJson, R"({"bos_token": "<s>"})", "t.json"); },
                                 {"bos_token", "'<s>'", "not in the vocabulary"});
}

TEST(MalformedTokenizerJson, MissingFile) {
  expect_error<kvd::FileError>([] { kvd::load_tokenizer_json("/nonexistent/tokenizer.json"); }, {"/nonexistent/tokenizer.json"});
}

TEST(MalformedTokenizerJson, SequencesNestedTooDeep) {
  std::string n = R"({"type": "NFC"})";
  for (int i = 0; i < 40; ++i) n = R"({"type": "Sequence", "normalizers": [)" + n + "]}";
  expect_json_error(R"({"normalizer": )" + n + R"(, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
                    {"nests Sequences 17 deep; the limit is 16"});
}

// Found by the tokenizer-json fuzzer: a post_processor whose "type" was true
// escaped as nlohmann's type_error instead of a kvd::FormatError.
TEST(MalformedTokenizerJson, PostProcessorTypeNotAString) {
  expect_json_error(R"({"post_processor": {"type": true}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
                    {"t.json", "post_processor.type", "is not a string"});
}

// Random byte damage to a valid file: every failure is a kvd::Error, nothing else escapes.
TEST(MalformedTokenizerJson, DamagedFilesOnlyThrowKvdErrors) {
  const std::string base = R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "_"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "_"}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\p{L}+"},
      "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}, {"type": "Strip", "content": " ", "start": 1}]},
    "added_tokens": [{"id": 3, "content": "<s>", "special": true, "lstrip": false, "rstrip": true}],
    "model": {"type": "BPE", "byte_fallback": false, "vocab": {"a": 0, "b": 1, "ab": 2, "<s>": 3}, "merges": ["a b"]}})";
  std::mt19937 rng(11);
  const std::string alphabet = "{}[]\":,0123456789-eE.ab \\untrfls";
  int accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string j = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % j.size();
      switch (rng() % 3) {
        case 0: j[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: j.erase(at, 1 + rng() % 8); break;
        default: j.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
      }
    }
    try {
      const auto tok = kvd::tokenizer_from_json(j, "", "damaged.json");
      tok->decode(tok->encode("ab ba <s> \xFF"));
      ++accepted;
    } catch (const kvd::Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-kvd exception " << e.what() << " for " << j;
      break;
    }
  }
  EXPECT_GT(accepted, 0);
}

// The digits rule of each GGUF pre-tokenizer shows in how "123" is cut: the
// vocabulary can merge 1+2+3 only when the digits reach the model as one piece.
TEST(GgufPreTokenizers, EachNamedOneCompilesAndCutsDigitsItsWay) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(kvd::detail::byte_level_alphabet().utf8[b]);
  tokens.push_back("12");
  tokens.push_back("123");
  const std::vector<std::pair<std::string, std::size_t>> pres = {
      {"default", 1}, {"gpt-2", 1}, {"llama-bpe", 1}, {"qwen2", 3}, {"smollm", 3}, {"tekken", 3}, {"mistral", 3},
      {"gpt-4o", 1}};
  for (const auto& [pre, n] : pres) {
    kvd::GGUFWriter w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", pre);
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_string_array("tokenizer.ggml.merges", {"1 2", "12 3"});
    const kvd::GGUFFile f = kvd::GGUFFile::from_bytes(w.bytes(), "pre.gguf");
    const auto tok = kvd::load_tokenizer_gguf(f);
    EXPECT_EQ(tok->encode("123", false).size(), n) << pre;
    const std::string text = "Hello, World! It's 2024\n\tcode();  ";
    EXPECT_EQ(tok->decode(tok->encode(text, false)), text) << pre;
  }
}

// gpt-oss's "gpt-4o" pre-tokenizer (o200k) cuts a word where lower case turns to
// upper, keeps an upper-then-lower word whole, and keeps a contraction of either case
// on its word; GPT-2's keeps every run of letters whole.
TEST(GgufPreTokenizers, Gpt4oCutsWhereCaseTurnsUpper) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(kvd::detail::byte_level_alphabet().utf8[b]);
  for (const char* t : {"aB", "Ab", "AB", "AB'", "AB'S"}) tokens.push_back(t);
  auto load = [&](const std::string& pre) {
    kvd::GGUFWriter w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", pre);
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_string_array("tokenizer.ggml.merges", {"a B", "A b", "A B", "AB '", "AB' S"});
    return kvd::load_tokenizer_gguf(kvd::GGUFFile::from_bytes(w.bytes(), "pre.gguf"));
  };
  const auto o200k = load("gpt-4o"), gpt2 = load("gpt-2");
  EXPECT_EQ(o200k->encode("aB", false).size(), 2u);   // "a" | "B"
  EXPECT_EQ(o200k->encode("Ab", false).size(), 1u);   // one piece, merged
  EXPECT_EQ(o200k->encode("AB'S", false).size(), 1u);  // the contraction stays on its word
  EXPECT_EQ(gpt2->encode("aB", false).size(), 1u);
  EXPECT_EQ(gpt2->encode("AB'S", false).size(), 3u);  // GPT-2's contractions are lower case only: "AB" | "'" | "S"
}

// GGUF vocabularies crafted with the writer.
std::unique_ptr<kvd::BpeTokenizer> gguf_vocab(const std::function<void(kvd::GGUFWriter&)>& edit) {
  kvd::GGUFWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab", "<|end|>"});
  w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 1, 3});
  w.set_string_array("tokenizer.ggml.merges", {"a b"});
  edit(w);
  const kvd::GGUFFile f = kvd::GGUFFile::from_bytes(w.bytes(), "v.gguf");
  return kvd::load_tokenizer_gguf(f);
}

void expect_gguf_error(const std::function<void(kvd::GGUFWriter&)>& edit, const std::vector<std::string>& parts) {
  expect_error<kvd::FormatError>([&] { gguf_vocab(edit); }, parts);
}

TEST(MalformedGgufVocab, TinyValidOneWorks) {
  const auto tok = gguf_vocab([](kvd::GGUFWriter&) {});
  EXPECT_EQ(tok->encode("ab<|end|>ba"), (std::vector<int>{2, 3, 1, 0}));
  EXPECT_TRUE(tok->is_eog(3));
}

TEST(MalformedGgufVocab, UnknownPreTokenizerIsNamed) {
  expect_gguf_error([](kvd::GGUFWriter& w) { w.set_string("tokenizer.ggml.pre", "klingon-bpe"); },
                    {"v.gguf", "tokenizer.ggml.pre", "'klingon-bpe'", "not a known pre-tokenizer"});
}

TEST(MalformedGgufVocab, UnsupportedModelIsNamed) {
  expect_gguf_error([](kvd::GGUFWriter& w) { w.set_string("tokenizer.ggml.model", "t5"); },
                    {"tokenizer.ggml.model", "'t5'", "not supported"});
}

TEST(MalformedGgufVocab, MissingTokens) {
  kvd::GGUFWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  expect_error<kvd::FormatError>([&] { kvd::load_tokenizer_gguf(kvd::GGUFFile::from_bytes(w.bytes(), "v.gguf")); },
                                 {"tokenizer.ggml.tokens"});
}

TEST(MalformedGgufVocab, SpecialIdOutOfRange) {
  expect_gguf_error([](kvd::GGUFWriter& w) { w.set_u32("tokenizer.ggml.eos_token_id", 4); },
                    {"tokenizer.ggml.eos_token_id = 4", "outside the vocabulary [0, 4)"});
}

TEST(MalformedGgufVocab, NoneSentinelsAndAStrayPaddingIdAreAccepted) {
  const auto tok = gguf_vocab([](kvd::GGUFWriter& w) {
    w.set_u32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
    w.set_i32("tokenizer.ggml.eot_token_id", -1);
    w.set_u32("tokenizer.ggml.padding_token_id", 99);
  });
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->pad_id(), -1);
  EXPECT_EQ(tok->eot_id(), 3);  // found by its text, <|end|>
}

TEST(MalformedGgufVocab, NegativeSpecialId) {
  expect_gguf_error([](kvd::GGUFWriter& w) { w.set_i32("tokenizer.ggml.bos_token_id", -5); },
                    {"tokenizer.ggml.bos_token_id"});
}

TEST(MalformedGgufVocab, DuplicatedToken) {
  expect_gguf_error([](kvd::GGUFWriter& w) { w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab", "a"}); },
                    {"'a' appears twice, at ids 0 and 3"});
}

TEST(MalformedGgufVocab, TokenTypeCodeUnknown) {
  expect_gguf_error([](kvd::GGUFWriter& w) { w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 9, 3}); },
                    {"tokenizer.ggml.token_type[2] = 9"});
}

TEST(MalformedGgufVocab, TokenTypeCountMismatch) {
  expect_gguf_error([](kvd::GGUFWriter& w) { w.set_i32_array("tokenizer.ggml.token_type", {1, 1}); },
                    {"token_type has 2 entries for 4 tokens"});
}

TEST(MalformedGgufVocab, MergeNamesUnknownToken) {
  expect_gguf_error([](kvd::GGUFWriter& w) { w.set_string_array("tokenizer.ggml.merges", {"a b", "b z"}); },
                    {"merge 1 'b z'", "'z'", "not in the vocabulary"});
}

TEST(MalformedGgufVocab, ScoresCountMismatch) {
  expect_gguf_error([](kvd::GGUFWriter& w) {
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_f32_array("tokenizer.ggml.scores", {0.0f});
  }, {"tokenizer.ggml.scores has 1 entries for 4 tokens"});
}

// --- issue 33: tokenizers linear in the input, growth bounded -----------------

// A tiny tokenizer.json with `extra` spliced into its top-level object.
std::string tiny_json_with(const std::string& extra) {
  return std::string(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, " ": 3}, "merges": ["a b"]})") +
         (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(TokenizerLimits, WordMatcherFindsTheLongestWordAtEachByteLikeABruteForceScan) {
  std::mt19937 rng(33);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> words(1 + rng() % 8);
    std::vector<bool> flagged(words.size());
    for (std::size_t k = 0; k < words.size(); ++k) {
      const std::size_t len = rng() % 5;  // empty words are never matched
      for (std::size_t i = 0; i < len; ++i) words[k] += static_cast<char>('a' + rng() % 3);
      flagged[k] = rng() % 3 == 0;
    }
    std::string text;
    for (int i = 0; i < 40; ++i) text += static_cast<char>('a' + rng() % 3);
    const kvd::detail::WordMatcher m(words, flagged);
    for (const bool skip : {false, true}) {
      std::vector<std::int32_t> got;
      m.longest_at(text.data(), text.size(), skip, got);
      for (std::size_t i = 0; i < text.size(); ++i) {
        int want = -1;
        std::size_t want_len = 0;
        for (std::size_t k = 0; k < words.size(); ++k) {
          const std::string& w = words[k];
          if (w.empty() || text.compare(i, w.size(), w) != 0) continue;
          // The first of equal words stands for them, flagged or not.
          const auto first = static_cast<std::size_t>(std::find(words.begin(), words.end(), w) - words.begin());
          if (skip && flagged[first]) continue;
          if (w.size() > want_len) {
            want = static_cast<int>(first);
            want_len = w.size();
          }
        }
        ASSERT_EQ(got[i], want) << "round " << round << " byte " << i << " skip " << skip;
      }
    }
  }
}

TEST(TokenizerLimits, LongAddedTokenIsMatchedInLinearTimeAndCompactly) {
  // Was: a walk of the trie from every byte, O(text x token), minutes for 200 KB
  // each; and 80 bytes of trie per byte of token.
  const std::size_t n = 100000;
  const std::string token = std::string(n, 'a') + "b";
  const auto tok = kvd::tokenizer_from_json(
      tiny_json_with(R"("added_tokens": [{"id": 4, "content": ")" + token + R"(", "special": false}])"), "", "t.json");
  const kvd::detail::WordMatcher m({token}, {false});
  EXPECT_LE(m.memory_bytes(), 22 * token.size() + 4096);
  // Linear time, counted rather than timed: the automaton makes at most two moves a
  // byte on the worst text for this word (the walk from every byte made n^2 / 2).
  const std::string text = std::string(n, 'a') + token;
  std::vector<std::int32_t> best;
  std::size_t steps = 0;
  m.longest_at(text.data(), text.size(), false, best, &steps);
  EXPECT_LE(steps, 2 * text.size());
  EXPECT_EQ(best[n], 0);
  EXPECT_EQ(best[0], -1);
  const std::vector<int> ids = tok->encode(text, false, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), 4);
}

TEST(TokenizerLimits, BacktrackingPreTokenizerRunsOutOfOneRegexBudgetPerCall) {
  // Was: PCRE2's match limit applied per start position, ~20 ms per character.
  const auto tok = kvd::tokenizer_from_json(
      tiny_json_with(R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a|a){1,14}\\d"}, "behavior": "Isolated"})"),
      "", "t.json");
  const std::string text(2000, 'a');
  expect_error<kvd::TokenError>([&] { tok->encode(text, false, true); },
                                {"(a|a){1,14}\\d", "regex budget", std::to_string(2000 * kvd::kDefaultRegexUnitsPerByte + kvd::kRegexBudgetBase)});
  EXPECT_EQ(tok->encode("ab", false, true), (std::vector<int>{2}));  // the tokenizer still works
}

TEST(TokenizerLimits, DoublingReplaceNormalizersStopAtTheGrowthLimit) {
  // Was: 40 Replace steps doubling the text, 2 GB and then std::bad_alloc.
  std::string steps;
  for (int i = 0; i < 40; ++i)
    steps += std::string(i ? "," : "") + R"({"type": "Replace", "pattern": {"String": "a"}, "content": "aa"})";
  const auto tok = kvd::tokenizer_from_json(
      tiny_json_with(R"("normalizer": {"type": "Sequence", "normalizers": [)" + steps + "]}"), "", "t.json");
  const std::string text(100, 'a');
  expect_error<kvd::TokenError>([&] { tok->encode(text, false, true); },
                                {"normalizer step 3", std::to_string(100 * kvd::kMaxTextGrowth + kvd::kTextGrowthSlack),
                                 "the limit"});
}

TEST(TokenizerLimits, HugeMetaspaceReplacementStopsAtTheGrowthLimit) {
  const std::string big(100000, 'b');
  const auto tok = kvd::tokenizer_from_json(
      tiny_json_with(R"("pre_tokenizer": {"type": "Metaspace", "replacement": ")" + big + R"(", "prepend_scheme": "never"})"),
      "", "t.json");
  expect_error<kvd::TokenError>([&] { tok->encode("a a a", false, true); },
                                {"Metaspace pre-tokenizer", std::to_string(5 * kvd::kMaxTextGrowth + kvd::kTextGrowthSlack)});
  // Many short pieces share the one limit of their segment.
  const auto split = kvd::tokenizer_from_json(
      tiny_json_with(R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated"}, {"type": "Metaspace", "replacement": ")" +
                     std::string(40, 'b') + R"(", "prepend_scheme": "never"}]})"),
      "", "t.json");
  expect_error<kvd::TokenError>([&] { split->encode(std::string(1000, ' '), false, true); }, {"Metaspace pre-tokenizer", "the limit"});
}

TEST(TokenizerLimits, DoublingReplaceDecodersAreRefusedAtLoad) {
  std::string steps;
  for (int i = 0; i < 40; ++i)
    steps += std::string(i ? "," : "") + R"({"type": "Replace", "pattern": {"String": "a"}, "content": "aa"})";
  expect_json_error(tiny_json_with(R"("decoder": {"type": "Sequence", "decoders": [)" + steps + "]}"),
                    {"t.json", "decoder step 6", "token 0", std::to_string(1 * kvd::kMaxTextGrowth + kvd::kTextGrowthSlack),
                     "the limit"});
}

}  // namespace
