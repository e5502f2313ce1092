// tokenizer.json -> GGUF vocabulary (vocab_writer.hpp): each real tokenizer.json in
// ../shared/models/tokenizer-json written as tokenizer.ggml.* keys, read back by
// kvdecode's GGUF tokenizer and compared with the tokenizer.json tokenizer id for
// id (llama.cpp's reference cases and varied texts, with and without special
// tokens), decoding included; the written arrays compared element for element with
// llama.cpp's own vocab-llama3/vocab-qwen3.gguf; padding to a model's vocabulary;
// the conversion inside quantize_model; one test per refused tokenizer.
#include <gtest/gtest.h>

#include "vocab_cases.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/kvdecode.hpp"

#include <nlohmann/json.hpp>

using namespace kvd;
namespace fs = std::filesystem;

namespace {

const std::string kShared = KVDECODE_SHARED_DIR;
const std::string kJson = kShared + "/models/tokenizer-json/";
const std::string kVocab = kShared + "/models/vocab/";
const std::string kRef = kShared + "/reference/vocab/";

#define SKIP_IF_MISSING(path) \
  if (!fs::exists(path)) GTEST_SKIP() << "shared test file not found: " << (path) << " (../shared absent?)"

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("kvd_vocab_convert_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& n) const { return (path / n).string(); }
  std::string write(const std::string& n, const std::string& text) const {
    std::ofstream(file(n), std::ios::binary) << text;
    return file(n);
  }
};

using kvd_test::read_cases;
using kvd_test::read_ids;
using kvd_test::show;
using kvd_test::slurp;

/// The vocabulary-only GGUF file (bytes) that write_tokenizer_json_vocab makes.
GGUFFile convert(const std::string& path, int vocab_size = 0) {
  GGUFWriter w;
  w.set_string("general.architecture", "llama");
  write_tokenizer_json_vocab(w, path, vocab_size);
  return GGUFFile::from_bytes(w.bytes(), path + " (converted)");
}

// The big files are read once per run: each test that needs one shares it.
const TextTokenizer& json_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<BpeTokenizer>> cache;
  auto& t = cache[name];
  if (!t) t = load_tokenizer_json(kJson + name + "/tokenizer.json");
  return *t;
}
const GGUFFile& converted(const std::string& name, int vocab_size = 0) {
  static std::map<std::pair<std::string, int>, std::unique_ptr<GGUFFile>> cache;
  auto& f = cache[{name, vocab_size}];
  if (!f) f = std::make_unique<GGUFFile>(convert(kJson + name + "/tokenizer.json", vocab_size));
  return *f;
}

// Texts beyond llama.cpp's cases: special tokens, whitespace runs, digits, scripts.
std::vector<std::string> extra_texts(const std::vector<std::string>& specials) {
  std::vector<std::string> t = {
      "Hello world",
      " Hello  world\t\ttabs\n\n\nnewlines   ",
      "1234567890 3.14159 -42 1e10 0x1F",
      "   leading spaces and trailing   ",
      "naïve café — “quotes” ‘single’ … €100",
      "日本語のテキスト、中文文本，한국어 텍스트",
      "Здравствуй, мир! Γειά σου Κόσμε! مرحبا بالعالم",
      "emoji 🦙🚀👩‍💻 and flags 🇫🇷",
      "code: for (int i = 0; i < n; ++i) { x[i] += y[i]; }\n    return x;",
      "I'm, you're, they've, she'll, he'd, it's, DON'T",
      "\n",
      " ",
      "",
      "a",
  };
  for (const std::string& s : specials) {
    t.push_back(s + "Hello" + s + " world " + s);
    t.push_back("x" + s + "\n" + s + s + "  y");
  }
  return t;
}

/// Checks that `got` (the GGUF tokenizer) encodes and decodes `text` as `want`
/// (the tokenizer.json tokenizer) does, with and without special tokens.
void expect_same(const TextTokenizer& want, const TextTokenizer& got, const std::string& text, const std::string& what) {
  for (const bool special : {true, false}) {
    const std::vector<int> a = want.encode(text, special, special), b = got.encode(text, special, special);
    EXPECT_EQ(show(b), show(a)) << what << " (special " << special << "): '" << text << "'";
    if (a == b) {
      EXPECT_EQ(got.decode(b), want.decode(a)) << what << ": '" << text << "'";
    }
  }
}

/// The whole comparison for one folder and its reference case file.
void check_converted(const std::string& name, const std::string& cases_file, const std::vector<std::string>& specials) {
  const TextTokenizer* want = &json_tokenizer(name);
  const auto got = load_tokenizer_gguf(converted(name));
  ASSERT_EQ(got->vocab_size(), want->vocab_size());
  EXPECT_EQ(got->bos_id(), want->bos_id());
  EXPECT_EQ(got->eos_id(), want->eos_id());
  EXPECT_EQ(got->add_bos(), want->add_bos());
  for (int i = 0; i < want->vocab_size(); ++i) {
    ASSERT_EQ(got->token_text(i), want->token_text(i)) << name << " token " << i;
    ASSERT_EQ(got->token_to_piece(i, true), want->token_to_piece(i, true)) << name << " token " << i;
  }
  // llama.cpp's cases: the reference ids themselves, and text back on decoding.
  const auto cases = read_cases(kRef + cases_file + ".inp");
  const auto ids = read_ids(kRef + cases_file + ".out");
  ASSERT_EQ(cases.size(), ids.size());
  ASSERT_GT(cases.size(), 40u);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int> b = got->encode(cases[i], false, false);
    EXPECT_EQ(show(b), show(ids[i])) << name << " case " << i << ": '" << cases[i] << "'";
    EXPECT_EQ(got->decode(b), cases[i]) << name << " case " << i;
    expect_same(*want, *got, cases[i], name + " case " + std::to_string(i));
  }
  for (const std::string& t : extra_texts(specials)) expect_same(*want, *got, t, name);
}

TEST(VocabConvert, Llama3EncodesAsTokenizerJson) {
  SKIP_IF_MISSING(kJson + "llama3/tokenizer.json");
  check_converted("llama3", "ggml-vocab-llama-bpe.gguf", {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>"});
}

TEST(VocabConvert, Qwen3EncodesAsTokenizerJson) {
  SKIP_IF_MISSING(kJson + "qwen3/tokenizer.json");
  check_converted("qwen3", "ggml-vocab-qwen2.gguf", {"<|im_start|>", "<|im_end|>", "<think>", "<|endoftext|>"});
}

TEST(VocabConvert, MistralEncodesAsTokenizerJson) {
  SKIP_IF_MISSING(kJson + "mistral/tokenizer.json");
  check_converted("mistral", "mistral-tokenizer-json", {"<s>", "</s>", "<unk>"});
}

TEST(VocabConvert, MistralIsLlamaWithScoresInMergeOrder) {
  SKIP_IF_MISSING(kJson + "mistral/tokenizer.json");
  const GGUFFile& f = converted("mistral");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_space_prefix"));
  EXPECT_EQ(f.find("tokenizer.ggml.merges"), nullptr);
  const std::vector<std::int64_t> types = f.get_i64_array("tokenizer.ggml.token_type");
  ASSERT_EQ(types.size(), 32000u);
  // SentencePiece's types, as ggml-vocab-llama-spm.gguf has them.
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(types[2], 3);
  EXPECT_EQ(types[3], 6);
  EXPECT_EQ(types[258], 6);
  EXPECT_EQ(types[259], 1);
  const std::vector<double> scores = f.get_f64_array("tokenizer.ggml.scores");
  EXPECT_EQ(scores[0], kNoMergeScore);
  EXPECT_EQ(scores[261], -1.0);  // "▁t", made by the first merge, "▁ t"
  EXPECT_EQ(scores[262], -2.0);  // "in"
  EXPECT_EQ(scores[263], -3.0);  // "er"
  // "▁▁" has the lowest id of the merged pieces but a late merge: scores follow the
  // merges, not the ids.
  EXPECT_LT(scores[259], -50000.0);
  EXPECT_EQ(f.get_u64("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f.get_u64("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(f.get_u64("tokenizer.ggml.unknown_token_id"), 0u);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_eos_token"));
}

/// The written arrays against llama.cpp's converter's file, element for element.
void check_same_as_llama_cpp(const std::string& name, const std::string& gguf) {
  const GGUFFile& ours = converted(name);
  const GGUFFile theirs = GGUFFile::open(kVocab + gguf);
  for (const char* k : {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.chat_template"})
    EXPECT_EQ(ours.get_string(k), theirs.get_string(k)) << k;
  for (const char* k : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}) {
    const auto& a = ours.get_string_array(k);
    const auto& b = theirs.get_string_array(k);
    ASSERT_EQ(a.size(), b.size()) << k;
    std::size_t diffs = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i] && ++diffs <= 5) ADD_FAILURE() << k << "[" << i << "]: '" << a[i] << "' vs '" << b[i] << "'";
    EXPECT_EQ(diffs, 0u) << k;
  }
  const auto ta = ours.get_i64_array("tokenizer.ggml.token_type");
  const auto tb = theirs.get_i64_array("tokenizer.ggml.token_type");
  ASSERT_EQ(ta.size(), tb.size());
  std::size_t diffs = 0;
  for (std::size_t i = 0; i < ta.size(); ++i)
    if (ta[i] != tb[i] && ++diffs <= 5) ADD_FAILURE() << "token_type[" << i << "]: " << ta[i] << " vs " << tb[i];
  EXPECT_EQ(diffs, 0u);
  for (const char* k : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
    ASSERT_EQ(ours.find(k) != nullptr, theirs.find(k) != nullptr) << k;
    if (theirs.find(k)) {
      EXPECT_EQ(ours.get_u64(k), theirs.get_u64(k)) << k;
    }
  }
}

TEST(VocabConvert, Llama3ArraysEqualLlamaCppFile) {
  SKIP_IF_MISSING(kJson + "llama3/tokenizer.json");
  SKIP_IF_MISSING(kVocab + "vocab-llama3.gguf");
  check_same_as_llama_cpp("llama3", "vocab-llama3.gguf");
}

TEST(VocabConvert, Qwen3ArraysEqualLlamaCppFile) {
  SKIP_IF_MISSING(kJson + "qwen3/tokenizer.json");
  SKIP_IF_MISSING(kVocab + "vocab-qwen3.gguf");
  check_same_as_llama_cpp("qwen3", "vocab-qwen3.gguf");
}

TEST(VocabConvert, Qwen3PaddedToModelVocab) {
  SKIP_IF_MISSING(kJson + "qwen3/tokenizer.json");
  // Qwen3's embedding has 151936 rows for 151669 tokens.
  const GGUFFile& f = converted("qwen3", 151936);
  const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
  const auto types = f.get_i64_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 151936u);
  ASSERT_EQ(types.size(), 151936u);
  EXPECT_EQ(tokens[151668], "</think>");
  EXPECT_EQ(tokens[151669], "[PAD151669]");
  EXPECT_EQ(tokens[151935], "[PAD151935]");
  EXPECT_EQ(types[151669], 5);
  EXPECT_EQ(types[151935], 5);
  const auto got = load_tokenizer_gguf(f);
  const TextTokenizer& want = json_tokenizer("qwen3");
  EXPECT_EQ(got->vocab_size(), 151936);
  const std::string text = "<|im_start|>user\nHello [PAD151700] world<|im_end|>";
  EXPECT_EQ(show(got->encode(text)), show(want.encode(text)));
  EXPECT_EQ(got->decode({151700}), "");  // unused tokens have no text
}

TEST(VocabConvert, ModelVocabSmallerThanTokenizerIsRefused) {
  SKIP_IF_MISSING(kJson + "mistral/tokenizer.json");
  GGUFWriter w;
  w.set_u32("a.key", 7);
  try {
    write_tokenizer_json_vocab(w, kJson + "mistral", 31999);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("32000 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("vocab_size is 31999"), std::string::npos) << m;
  }
  // Nothing was written.
  GGUFWriter untouched;
  untouched.set_u32("a.key", 7);
  EXPECT_EQ(w.bytes(), untouched.bytes());
}

// --- small hand-made tokenizer.json files: what GGUF can and cannot say --------

// A byte-level BPE over the letters a, b, c and the space ("Ġ").
std::string byte_level_json(const std::string& pre_tokenizer, const std::string& extra = "",
                            const std::string& added = "[]") {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "Ġab": 5)" + extra +
         R"(}, "merges": ["a b", "Ġ ab"]}, "pre_tokenizer": )" + pre_tokenizer +
         R"(, "decoder": {"type": "ByteLevel"}, "added_tokens": )" + added + "}";
}
const char* const kGpt2Pre = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";

TEST(VocabConvert, SmallByteLevelFileIsGpt2) {
  TempDir d;
  const std::string p = d.write("tokenizer.json", byte_level_json(kGpt2Pre));
  const GGUFFile f = convert(p);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges"), (std::vector<std::string>{"a b", "Ġ ab"}));
  EXPECT_EQ(f.find("tokenizer.ggml.scores"), nullptr);
  EXPECT_EQ(f.find("tokenizer.chat_template"), nullptr);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
  const auto got = load_tokenizer_gguf(f);
  EXPECT_EQ(got->encode("ab ab c", false, false), (std::vector<int>{4, 5, 3, 2}));
}

TEST(VocabConvert, ChatTemplateStringListAndJinjaFile) {
  TempDir d;
  const std::string p = d.write("tokenizer.json", byte_level_json(kGpt2Pre));
  d.write("tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  EXPECT_EQ(convert(p).get_string("tokenizer.chat_template"), "{{ messages }}");
  d.write("tokenizer_config.json",
          R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool use", "template": "T"}]})");
  const GGUFFile f = convert(p);
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), "D");
  EXPECT_EQ(f.get_string("tokenizer.chat_template.tool_use"), "T");
  EXPECT_EQ(f.get_string_array("tokenizer.chat_templates"), (std::vector<std::string>{"tool_use"}));
  d.write("tokenizer_config.json", "{}");
  d.write("chat_template.jinja", "J{{ x }}");
  EXPECT_EQ(convert(p).get_string("tokenizer.chat_template"), "J{{ x }}");
}

TEST(VocabConvert, MalformedChatTemplateIsFormatError) {
  TempDir d;
  const std::string p = d.write("tokenizer.json", byte_level_json(kGpt2Pre));
  d.write("tokenizer_config.json", R"({"chat_template": 42})");
  GGUFWriter w;
  try {
    write_tokenizer_json_vocab(w, p);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("chat_template"), std::string::npos) << e.what();
  }
  const GGUFFile f = GGUFFile::from_bytes(w.bytes(), "w");
  EXPECT_EQ(f.find("tokenizer.ggml.tokens"), nullptr);
}

TEST(VocabConvert, NonSpecialAddedTokenIsUserDefinedAndMatchedInText) {
  TempDir d;
  const std::string p = d.write(
      "tokenizer.json", byte_level_json(kGpt2Pre, R"(, "<|x|>": 6, "<|y|>": 7)",
                                        R"([{"id": 6, "content": "<|x|>", "special": false},
                                            {"id": 7, "content": "<|y|>", "special": true}])"));
  const GGUFFile f = convert(p);
  EXPECT_EQ(f.get_i64_array("tokenizer.ggml.token_type"), (std::vector<std::int64_t>{1, 1, 1, 1, 1, 1, 4, 3}));
  const auto got = load_tokenizer_gguf(f);
  const auto want = load_tokenizer_json(p);
  for (const std::string text : {"ab<|x|>c<|y|>", "<|y|><|x|>"}) expect_same(*want, *got, text, "user-defined");
  EXPECT_EQ(got->encode("c<|x|>", false, false), (std::vector<int>{2, 6}));
  EXPECT_EQ(got->decode({6, 7}), "<|x|>");
}

void expect_refused(const std::string& json, const std::string& needle) {
  TempDir d;
  const std::string p = d.write("tokenizer.json", json);
  GGUFWriter w;
  try {
    write_tokenizer_json_vocab(w, p);
    FAIL() << "no error for " << needle;
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    EXPECT_NE(m.find(p), std::string::npos) << m;
  }
}

TEST(VocabConvert, UnknownPreTokenizerRegexIsRefused) {
  expect_refused(byte_level_json(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "Isolated"},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})"),
                 "'\\p{L}+'");
}

TEST(VocabConvert, ByteLevelPrefixSpaceIsRefused) {
  expect_refused(byte_level_json(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})"),
                 "add_prefix_space");
}

TEST(VocabConvert, SplitOnStringIsRefused) {
  expect_refused(byte_level_json(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated"},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})"),
                 "String pattern");
}

TEST(VocabConvert, IgnoreMergesDifferentFromPreTokenizerIsRefused) {
  std::string j = byte_level_json(kGpt2Pre);
  j.replace(j.find(R"("type": "BPE")"), 13, R"("type": "BPE", "ignore_merges": true)");
  expect_refused(j, "ignore_merges");
}

TEST(VocabConvert, LstripAddedTokenIsRefused) {
  expect_refused(byte_level_json(kGpt2Pre, R"(, "<m>": 6)",
                                 R"([{"id": 6, "content": "<m>", "special": true, "lstrip": true}])"),
                 "'<m>'");
}

TEST(VocabConvert, LowercaseNormalizerIsRefused) {
  std::string j = byte_level_json(kGpt2Pre);
  j.insert(1, R"("normalizer": {"type": "Lowercase"}, )");
  expect_refused(j, "NFC");
}

TEST(VocabConvert, PlainBpeIsRefused) {
  expect_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})",
                 "neither byte-level");
}

// Byte fallback on "▁" text, as Mistral's, but split by Metaspace (newer files).
TEST(VocabConvert, MetaspaceByteFallbackIsRefused) {
  std::string vocab = R"("<unk>": 0)";
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) vocab += std::string(", \"<0x") + hex[b >> 4] + hex[b & 15] + ">\": " + std::to_string(1 + b);
  expect_refused(R"({"model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "vocab": {)" + vocab +
                     R"(, "▁": 257, "a": 258, "▁a": 259}, "merges": ["▁ a"]},
                     "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},
                     "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}})",
                 "normalizer");
}

// A byte-fallback file whose post_processor names only BOS and that has no
// tokenizer_config.json: no EOS, which GGUF llama must be told (its default is 2).
TEST(VocabConvert, LlamaWithoutEosSaysNone) {
  std::string vocab = R"("<unk>": 0, "<s>": 1, "</s>": 2)";
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) vocab += std::string(", \"<0x") + hex[b >> 4] + hex[b & 15] + ">\": " + std::to_string(3 + b);
  TempDir d;
  const std::string p = d.write("tokenizer.json", R"({"model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "vocab": {)" + vocab +
      R"(, "▁": 259, "a": 260, "▁a": 261}, "merges": ["▁ a"]},
      "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true},
                       {"id": 2, "content": "</s>", "special": true}],
      "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                     {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
      "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}}]},
      "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                  {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}})");
  const GGUFFile f = convert(p);
  EXPECT_EQ(f.get_u64("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f.get_u64("tokenizer.ggml.eos_token_id"), 0xFFFFFFFFu);
  const auto got = load_tokenizer_gguf(f);
  const auto want = load_tokenizer_json(p);
  EXPECT_EQ(want->eos_id(), -1);
  EXPECT_EQ(got->eos_id(), -1);
  EXPECT_EQ(got->bos_id(), 1);
  EXPECT_TRUE(got->add_bos());
  for (const std::string text : {"a a", " aa b", "<s>a</s>"}) expect_same(*want, *got, text, "llama without EOS");
}

// --- inside quantize_model --------------------------------------------------------

// tok512.bin as the tokenizer.json Hugging Face's converter (SpmConverter) makes of
// a SentencePiece BPE model: "▁" pieces, byte fallback, and every split of every
// piece into two pieces as a merge, ranked by the piece's score (ties by id).
std::string tok512_as_tokenizer_json(const Llama2cTokenizer& t) {
  nlohmann::json vocab = nlohmann::json::object();
  std::vector<std::string> pieces;
  for (int i = 0; i < t.vocab_size(); ++i) {
    std::string p;
    if (i == Llama2cTokenizer::kUnkId) p = "<unk>";
    else if (i == Llama2cTokenizer::kBosId) p = "<s>";
    else if (i == Llama2cTokenizer::kEosId) p = "</s>";
    else for (char ch : t.piece(i)) p += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
    vocab[p] = i;
    pieces.push_back(p);
  }
  struct M { std::string a, b; float score; };
  std::vector<M> merges;
  for (int i = 0; i < t.vocab_size(); ++i) {
    std::vector<std::pair<int, int>> local;
    const std::string& p = pieces[static_cast<std::size_t>(i)];
    for (std::size_t k = 1; k < p.size(); ++k)
      if (vocab.contains(p.substr(0, k)) && vocab.contains(p.substr(k)))
        local.emplace_back(vocab[p.substr(0, k)].get<int>(), vocab[p.substr(k)].get<int>());
    std::sort(local.begin(), local.end());
    for (const auto& [l, r] : local) merges.push_back({pieces[static_cast<std::size_t>(l)], pieces[static_cast<std::size_t>(r)], t.score(i)});
  }
  std::stable_sort(merges.begin(), merges.end(), [](const M& x, const M& y) { return x.score > y.score; });
  nlohmann::json m = nlohmann::json::array();
  for (const M& x : merges) m.push_back(x.a + " " + x.b);
  nlohmann::json added = nlohmann::json::array();
  for (int i : {0, 1, 2}) added.push_back({{"id", i}, {"content", pieces[static_cast<std::size_t>(i)]}, {"special", true}});
  nlohmann::json j = {
      {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"fuse_unk", true}, {"unk_token", "<unk>"}, {"vocab", vocab}, {"merges", m}}},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                                              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"pre_tokenizer", nullptr},
      {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                                        {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
  };
  return j.dump();
}

TEST(VocabConvert, QuantizeHfFolderWithTok512TokenizerJsonEncodesAsLlama2c) {
  const std::string hf = kShared + "/models/hf/stories260K";
  SKIP_IF_MISSING(hf + "/config.json");
  SKIP_IF_MISSING(kShared + "/models/tok512.bin");
  const Llama2cTokenizer t = Llama2cTokenizer::load(kShared + "/models/tok512.bin");
  TempDir d;
  const fs::path folder = d.path / "model";
  fs::create_directories(folder);
  for (const auto& e : fs::directory_iterator(hf)) fs::copy_file(e.path(), folder / e.path().filename());
  std::ofstream((folder / "tokenizer.json").string()) << tok512_as_tokenizer_json(t);
  std::ofstream((folder / "tokenizer_config.json").string())
      << R"({"add_bos_token": true, "add_eos_token": false, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})";
  const QuantizeResult r = quantize_model(folder.string(), d.file("out.gguf"), QuantScheme::kQ8_0);
  EXPECT_TRUE(r.wrote_vocabulary);
  const GGUFFile f = GGUFFile::open(d.file("out.gguf"));
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  const auto got = load_tokenizer_gguf(f);
  const auto json = load_tokenizer_json((folder / "tokenizer.json").string());
  ASSERT_EQ(got->vocab_size(), 512);
  std::vector<std::string> texts = {"Once upon a time", "Once upon a time, there was a little girl named Lily.",
                                    "  two  spaces and\ttabs\n", "Hello, World! 12345", "naïve café 日本 🦙", "a", ""};
  for (const std::string& text : texts) {
    const std::vector<int> want = t.encode(text, true, false);
    EXPECT_EQ(show(got->encode(text)), show(want)) << "'" << text << "'";
    EXPECT_EQ(show(json->encode(text)), show(want)) << "'" << text << "'";
    EXPECT_EQ(got->decode(got->encode(text)), json->decode(json->encode(text))) << "'" << text << "'";
  }
  // The case llama2.c's own encoder was recorded on (reference/tok512_cases.json).
  EXPECT_EQ(got->encode("Once upon a time"), (std::vector<int>{1, 403, 407, 261, 378}));
}

TEST(VocabConvert, QuantizeHfFolderWritesItsTokenizerJsonOrRefusesItsSize) {
  const std::string hf = kShared + "/models/hf/stories260K";
  SKIP_IF_MISSING(hf + "/config.json");
  SKIP_IF_MISSING(kJson + "mistral/tokenizer.json");
  TempDir d;
  const fs::path folder = d.path / "model";
  fs::create_directories(folder);
  for (const auto& e : fs::directory_iterator(hf)) fs::copy_file(e.path(), folder / e.path().filename());
  // Mistral's 32000 tokens do not fit stories260K's 512 rows: refused, naming both.
  fs::copy_file(kJson + "mistral/tokenizer.json", folder / "tokenizer.json");
  fs::copy_file(kJson + "mistral/tokenizer_config.json", folder / "tokenizer_config.json");
  try {
    quantize_model(folder.string(), d.file("out.gguf"), QuantScheme::kF32);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("32000 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("vocab_size is 512"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(d.file("out.gguf")));
}

}  // namespace
