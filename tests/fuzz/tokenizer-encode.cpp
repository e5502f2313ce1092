// Fuzz target: the tokenizers' encoders on arbitrary bytes, with real vocabularies.
// The vocabularies are loaded once at startup with load_tokenizer() from
// $KVDECODE_FUZZ_VOCAB, a ':'-separated list of files or folders (tokenizer.bin,
// tokenizer.json folders, GGUF vocabularies); by default every one of
// KVDECODE_SHARED_DIR that exists. Absent ones are skipped (with none, so is every
// input). Each input is encoded with every vocabulary, with and without special-token
// parsing. Checks: ids in range; decode() gives valid UTF-8; the llama2.c
// tokenizer.bin round-trips valid UTF-8 exactly (decode(encode(text)) == text).
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>

#include "fuzz_util.hpp"
#include "kvdecode/kvdecode.hpp"

namespace {
struct Vocab {
  std::string path;
  std::unique_ptr<kvd::TextTokenizer> tok;
  bool llama2c = false;
};
std::vector<Vocab> g_vocabs;

[[noreturn]] void finding(const char* what, const Vocab& v, const std::string& text) {
  std::fprintf(stderr, "FINDING: %s (%zu input bytes, vocabulary %s)\n", what, text.size(), v.path.c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string shared = KVDECODE_SHARED_DIR;
  std::string list = shared + "/models/tokenizer.bin:" + shared + "/models/tok512.bin:" + shared +
                     "/models/tokenizer-json/llama3:" + shared + "/models/tokenizer-json/mistral:" + shared +
                     "/models/tokenizer-json/qwen3:" + shared + "/models/vocab/ggml-vocab-gpt-2.gguf:" + shared +
                     "/models/vocab/ggml-vocab-llama-spm.gguf:" + shared + "/models/vocab/ggml-vocab-phi-3.gguf:" +
                     shared + "/models/vocab/vocab-llama3.gguf:" + shared + "/models/vocab/vocab-qwen3.gguf";
  if (const char* env = std::getenv("KVDECODE_FUZZ_VOCAB"); env && *env) list = env;
  std::stringstream ss(list);
  for (std::string path; std::getline(ss, path, ':');) {
    std::error_code ec;
    if (path.empty() || !std::filesystem::exists(path, ec)) {
      std::fprintf(stderr, "kvdecode-fuzz-tokenizer-encode: %s is absent, skipped\n", path.c_str());
      continue;
    }
    Vocab v;
    v.path = path;
    v.llama2c = kvd::detect_tokenizer_format(path) == kvd::TokenizerFormat::kLlama2c;
    v.tok = kvd::load_tokenizer(path);  // a bad real vocabulary is not the fuzzer's input: let it throw
    std::fprintf(stderr, "kvdecode-fuzz-tokenizer-encode: %s\n", v.tok->describe().c_str());
    g_vocabs.push_back(std::move(v));
  }
  if (g_vocabs.empty()) std::fprintf(stderr, "kvdecode-fuzz-tokenizer-encode: no vocabulary, every input is skipped\n");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 2048) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool utf8 = kvd_fuzz::valid_utf8(text);
  for (const Vocab& v : g_vocabs) {
    kvd_fuzz::run([&] {
      for (bool special : {false, true}) {
        const std::vector<int> ids = v.tok->encode(text, special, special);
        for (int id : ids)
          if (id < 0 || id >= v.tok->vocab_size()) finding("encode returned an id out of range", v, text);
        const std::string back = v.tok->decode(ids, true);
        if (!kvd_fuzz::valid_utf8(back)) finding("decode produced invalid UTF-8", v, text);
        if (v.llama2c && utf8 && back != text) finding("decode(encode(text)) != text", v, text);
      }
    });
  }
  return 0;
}
