// open_model() and read_model_info() (model_loader.hpp, model_format.hpp) on the
// shared models of each format: a GGUF file, a Hugging Face folder and a llama2.c
// checkpoint give the same logits, bit for bit, as the format's own loader, and the
// same config without reading weights; the tokenizer, chat template and stop ids that
// come with them; and one test per way detection can fail, each naming the path.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <typeinfo>
#include <vector>

#include "kvdecode/io/checkpoint.hpp"
#include "kvdecode/io/file.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/io/hf_model.hpp"
#include "kvdecode/io/model_format.hpp"
#include "kvdecode/generate/prompt_cache.hpp"
#include "kvdecode/load/model_loader.hpp"
#include "kvdecode/model/transformer.hpp"
#include "test_util.hpp"

using namespace kvd;
namespace fs = std::filesystem;

namespace {

using kvd_test::TempDir;

const std::string kModels = std::string(KVDECODE_SHARED_DIR) + "/models/";
const std::string kGguf = kModels + "gguf/stories260K-F32.gguf";
const std::string kHf = kModels + "hf/stories260K";
const std::string kBin = kModels + "stories260K.bin";
const std::string kTok512 = kModels + "tok512.bin";

#define SKIP_IF_MISSING(path) \
  if (!fs::exists(path)) GTEST_SKIP() << "shared test file not found: " << (path) << " (needs ../shared beside the checkout)"

void expect_has(const std::string& m, const std::string& piece) {
  EXPECT_NE(m.find(piece), std::string::npos) << "'" << piece << "' not in: " << m;
}

const std::vector<int> kTokens = {1, 403, 407, 261, 378, 300, 2};

// Every position's logits of `model` over kTokens, (positions, V) row-major.
std::vector<float> all_logits(Transformer<float>& model) {
  const RowMatrix<float> l = model.forward_reference(kTokens, /*all_logits=*/true);
  return std::vector<float>(l.data(), l.data() + l.size());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.summary(), b.summary());
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.shared_classifier, b.shared_classifier);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
}

// What `f` throws, as E (fails the test if it throws nothing or something else).
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no " << typeid(E).name() << " thrown";
  return "";
}

// A copy of the first `n` bytes of `src` at `dst`.
void copy_prefix(const std::string& src, const std::string& dst, std::size_t n) {
  const std::string bytes = kvd_test::read_all(src);
  std::ofstream(dst, std::ios::binary) << bytes.substr(0, std::min(n, bytes.size()));
}

TEST(OpenModel, GgufGivesTheGgufLoadersLogitsAndItsVocabulary) {
  SKIP_IF_MISSING(kGguf);
  LoadedModel m = open_model(kGguf);
  Transformer<float> ref(load_gguf_model<float>(kGguf));
  EXPECT_TRUE(same_bits(all_logits(m.model), all_logits(ref)));
  EXPECT_EQ(m.info.format, ModelFormat::kGguf);
  EXPECT_EQ(m.info.architecture, "llama");
  EXPECT_EQ(m.info.path, kGguf);
  ASSERT_NE(m.tokenizer, nullptr);  // the file's own vocabulary
  EXPECT_EQ(m.tokenizer->vocab_size(), 512);
  EXPECT_EQ(m.stop_ids, m.tokenizer->eog_ids());
  EXPECT_FALSE(m.chat_template);  // the file holds none: said why
  expect_has(m.no_chat_template, kGguf);
}

// The numerics open_model() loads (LoadOptions::numerics): by default a file of block
// types runs its matrices with int8-rounded activations, the fast mode's bits, and a
// float file keeps float activations; Numerics::kExact gives the weight loader's
// float-activation bits. The prompt-cache identity tells the modes apart where they
// compute different K and V, and only there.
TEST(OpenModel, BlockTypesRoundActivationsByDefaultAndExactIsOneOptionAway) {
  const std::string q4 = kModels + "gguf/rand256-Q4_K_M.gguf";
  SKIP_IF_MISSING(q4);
  SKIP_IF_MISSING(kGguf);
  LoadedModel def = open_model(q4);
  EXPECT_EQ(def.model.numerics(), Numerics::kInt8Blocks);
  LoadOptions exact_options;
  exact_options.numerics = Numerics::kExact;
  LoadedModel exact = open_model(q4, exact_options);
  EXPECT_EQ(exact.model.numerics(), Numerics::kExact);

  Transformer<float> plain(load_gguf_model<float>(q4));
  Transformer<float> fast(load_gguf_model<float>(q4));
  fast.set_fast_matmul(true);
  const std::vector<float> l_def = all_logits(def.model), l_exact = all_logits(exact.model);
  EXPECT_TRUE(same_bits(l_def, all_logits(fast)));  // every matrix is a block type: kInt8Blocks == kFast
  EXPECT_TRUE(same_bits(l_exact, all_logits(plain)));
  EXPECT_FALSE(same_bits(l_def, l_exact));
  EXPECT_NE(model_fingerprint(def.model), model_fingerprint(exact.model));
  EXPECT_EQ(model_fingerprint(exact.model), model_fingerprint(plain));

  // An F32 file: nothing rounds in either mode, so the bits and the identity agree.
  LoadedModel f32_def = open_model(kGguf), f32_exact = open_model(kGguf, exact_options);
  EXPECT_TRUE(same_bits(all_logits(f32_def.model), all_logits(f32_exact.model)));
  EXPECT_EQ(model_fingerprint(f32_def.model), model_fingerprint(f32_exact.model));
}

TEST(OpenModel, HfFolderGivesTheHfLoadersLogits) {
  SKIP_IF_MISSING(kHf);
  LoadedModel m = open_model(kHf);
  Transformer<float> ref(load_hf_model<float>(kHf));
  EXPECT_TRUE(same_bits(all_logits(m.model), all_logits(ref)));
  EXPECT_EQ(m.info.format, ModelFormat::kHfFolder);
  EXPECT_EQ(m.info.architecture, "LlamaForCausalLM");
  EXPECT_EQ(m.tokenizer, nullptr);  // no tokenizer.json in this folder
  EXPECT_TRUE(m.stop_ids.empty());
}

TEST(OpenModel, Llama2cCheckpointGivesTheCheckpointLoadersLogitsAndTheGivenTokenizer) {
  SKIP_IF_MISSING(kBin);
  SKIP_IF_MISSING(kTok512);
  LoadOptions o;
  o.tokenizer = kTok512;
  LoadedModel m = open_model(kBin, o);
  Transformer<float> ref(load_checkpoint<float>(kBin));
  EXPECT_TRUE(same_bits(all_logits(m.model), all_logits(ref)));
  EXPECT_EQ(m.info.format, ModelFormat::kLlama2c);
  EXPECT_EQ(m.info.description, "llama2.c legacy");
  ASSERT_NE(m.tokenizer, nullptr);
  const Llama2cTokenizer tok = Llama2cTokenizer::load(kTok512, 512);
  EXPECT_EQ(m.tokenizer->encode("Once upon a time"), tok.encode("Once upon a time", true, false));
  EXPECT_EQ(open_model(kBin).tokenizer, nullptr);  // a checkpoint has none of its own
}

TEST(OpenModel, MaxSeqLenCapsEveryFormat) {
  for (const std::string& path : {kGguf, kHf, kBin}) {
    SKIP_IF_MISSING(path);
    LoadOptions o;
    o.max_seq_len = 64;
    o.chat_template = false;
    LoadedModel m = open_model(path, o);
    EXPECT_EQ(m.model.config().max_seq_len, 64) << path;
    EXPECT_EQ(m.info.config.max_seq_len, 64) << path;
  }
}

TEST(ReadModelInfo, GivesTheLoadedConfigAndTheBytesOfEachFormat) {
  struct Case {
    std::string path;
    std::uint64_t weight_bytes;  // the tensors the model uses, as stored
  };
  // stories260K: 260,032 parameters (tied), 292,800 with the GGUF's separate output.weight.
  for (const Case& c : {Case{kGguf, 292800 * 4}, Case{kHf, 260032 * 4}, Case{kBin, 260032 * 4},
                        Case{kModels + "hf/stories260K-bf16-sharded", 260032 * 2}}) {
    SKIP_IF_MISSING(c.path);
    const ModelInfo info = read_model_info(c.path);
    LoadOptions o;
    o.chat_template = false;
    LoadedModel m = open_model(c.path, o);
    expect_same_config(info.config, m.model.config());
    EXPECT_EQ(info.weight_bytes, c.weight_bytes) << c.path;
    std::uint64_t sum = 0;
    for (const auto& [type, bytes] : info.bytes_by_type) sum += bytes;
    EXPECT_EQ(sum, info.weight_bytes) << c.path;
    EXPECT_EQ(info.file_context, static_cast<std::uint64_t>(info.config.max_seq_len)) << c.path;
  }
}

// Page faults of this process so far (first touches of mapped or allocated pages).
long page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt + u.ru_majflt;
}

TEST(ReadModelInfo, ReadsNoTensorData) {
  // rand256-F32.gguf holds 7.1 MB of tensors: reading them faults in about 110 pages
  // (the kernel maps 64 KB per fault); read_model_info parses the header only.
  const std::string path = kModels + "gguf/rand256-F32.gguf";
  SKIP_IF_MISSING(path);
  read_model_info(path);  // the heap's first pages, once
  const long f0 = page_faults();
  const ModelInfo info = read_model_info(path);
  const long info_faults = page_faults() - f0;
  const detail::MappedFile file = detail::MappedFile::open(path);
  unsigned sum = 0;
  const long f1 = page_faults();
  for (std::uint64_t i = 0; i < file.size(); i += 64) sum += file.data()[i];
  const long read_faults = page_faults() - f1;
  EXPECT_GT(info.weight_bytes, std::uint64_t{6} << 20);
  EXPECT_LT(info_faults * 2, read_faults) << "read_model_info faulted " << info_faults << " pages, reading the file "
                                          << read_faults << " (checksum " << sum << ")";
}

TEST(OpenModel, HfStopIdsAddGenerationConfigEos) {
  SKIP_IF_MISSING(kHf);
  TempDir dir;
  fs::copy_file(kHf + "/config.json", dir.file("config.json"));
  fs::create_symlink(kHf + "/model.safetensors", dir.file("model.safetensors"));
  std::ofstream(dir.file("generation_config.json")) << R"({"eos_token_id": [2, 5]})";
  LoadOptions o;
  o.tokenizer = kTok512;
  LoadedModel m = open_model(dir.str(), o);
  ASSERT_NE(m.tokenizer, nullptr);
  std::vector<int> want = m.tokenizer->eog_ids();  // 2 (EOS) among them, so only 5 is added
  want.push_back(5);
  EXPECT_EQ(m.stop_ids, want);
}

TEST(OpenModel, TokenizerLargerThanTheVocabularyIsAFileErrorNamingBothSizes) {
  const std::string big = kModels + "tokenizer-json/mistral/tokenizer.json";  // 32000 tokens
  SKIP_IF_MISSING(kBin);
  SKIP_IF_MISSING(big);
  LoadOptions o;
  o.tokenizer = big;
  const std::string m = error_of<FileError>([&] { open_model(kBin, o); });
  expect_has(m, big);
  expect_has(m, "32000 tokens");
  expect_has(m, "vocab_size 512");
}

TEST(DetectModelFormat, TellsTheFormatsApartByContent) {
  SKIP_IF_MISSING(kGguf);
  SKIP_IF_MISSING(kBin);
  SKIP_IF_MISSING(kHf);
  TempDir dir;
  fs::copy_file(kGguf, dir.file("model.bin"));  // the name says nothing
  fs::copy_file(kBin, dir.file("model.gguf"));
  EXPECT_EQ(detect_model_format(dir.file("model.bin")), ModelFormat::kGguf);
  EXPECT_EQ(detect_model_format(dir.file("model.gguf")), ModelFormat::kLlama2c);
  EXPECT_EQ(detect_model_format(kHf), ModelFormat::kHfFolder);
}

TEST(DetectModelFormat, TextFileIsAFormatErrorNamingThePath) {
  TempDir dir;
  const std::string path = dir.file("notes.txt");
  std::ofstream(path) << "this is not a model at all, just some text that goes on for a while\n";
  const std::string m = error_of<FormatError>([&] { read_model_info(path); });
  expect_has(m, path);
  expect_has(m, "neither a GGUF file");
  expect_has(error_of<FormatError>([&] { open_model(path); }), path);
}

TEST(DetectModelFormat, EmptyFolderIsAFormatErrorNamingThePath) {
  TempDir dir;
  const std::string m = error_of<FormatError>([&] { read_model_info(dir.str()); });
  expect_has(m, dir.str());
  expect_has(m, "without config.json");
}

TEST(DetectModelFormat, MissingPathIsAFileErrorNamingIt) {
  TempDir dir;
  const std::string m = error_of<FileError>([&] { open_model(dir.file("absent.gguf")); });
  expect_has(m, dir.file("absent.gguf"));
}

TEST(ReadModelInfo, TruncatedGgufIsAFormatErrorNamingThePath) {
  SKIP_IF_MISSING(kGguf);
  TempDir dir;
  const std::string path = dir.file("cut.gguf");
  copy_prefix(kGguf, path, 4096);  // the magic, then a header cut short
  EXPECT_EQ(detect_model_format(path), ModelFormat::kGguf);
  const std::string m = error_of<FormatError>([&] { read_model_info(path); });
  expect_has(m, path);
  expect_has(error_of<FormatError>([&] { open_model(path); }), path);
}

}  // namespace
