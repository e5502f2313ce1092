// Vocabulary tests: every tokenizer format against llama.cpp's reference cases
// (../shared/reference/vocab: texts and the ids the Hugging Face tokenizers give),
// decoding round trips, special tokens, invalid UTF-8, streaming, long inputs,
// and one test per malformed or unsupported tokenizer file.
#include "kvdecode/bpe_tokenizer.hpp"
#include "kvdecode/text_tokenizer.hpp"
#include "kvdecode/tokenizer_json.hpp"
#include "kvdecode/tokenizer_loader.hpp"

#include <gtest/gtest.h>

#include <filesystem>
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

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// llama.cpp's case file: texts separated by "\n__ggml_vocab_test__\n" (the last one
// is followed by the separator too).
std::vector<std::string> read_cases(const std::string& path) {
  const std::string all = slurp(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  std::size_t pos = 0;
  for (std::size_t hit; (hit = all.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
    cases.push_back(all.substr(pos, hit - pos));
  if (pos < all.size()) cases.push_back(all.substr(pos));
  return cases;
}

std::vector<std::vector<int>> read_ids(const std::string& path) {
  std::vector<std::vector<int>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<int> ids;
    for (int id; ls >> id;) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

std::string show(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += " " + std::to_string(id);
  return s;
}

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

}  // namespace
