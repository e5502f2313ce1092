// Fuzz target: the tokenizer's encoder on arbitrary bytes, with a real vocabulary.
// The vocabulary is read once at startup from $KVDECODE_FUZZ_VOCAB (default: the
// llama2.c tokenizer.bin in KVDECODE_SHARED_DIR); when it is absent every input is
// skipped. Formats: llama2.c tokenizer.bin (*.bin).
// Checks: encode never fails on bytes (vocabularies have byte fallback), every id
// is in range, decode_all(encode(text)) == text for valid UTF-8, and a
// StreamDecoder always yields valid UTF-8.
#include <cstdlib>
#include <fstream>
#include <memory>

#include "fuzz_util.hpp"
#include "kvdecode/kvdecode.hpp"

namespace {
std::unique_ptr<kvd::Tokenizer> g_tok;
std::string g_vocab;

void finding(const char* what, const std::string& text) {
  std::fprintf(stderr, "FINDING: %s (%zu input bytes, vocabulary %s)\n", what, text.size(), g_vocab.c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("KVDECODE_FUZZ_VOCAB");
  g_vocab = env && *env ? env : std::string(KVDECODE_SHARED_DIR) + "/models/tokenizer.bin";
  if (!std::ifstream(g_vocab).good()) {
    std::fprintf(stderr, "kvdecode-fuzz-tokenizer-encode: vocabulary %s is absent: every input is skipped "
                         "(set KVDECODE_FUZZ_VOCAB)\n", g_vocab.c_str());
    return 0;
  }
  g_tok = std::make_unique<kvd::Tokenizer>(kvd::Tokenizer::load(g_vocab));  // a bad file is not the fuzzer's input
  std::fprintf(stderr, "kvdecode-fuzz-tokenizer-encode: vocabulary %s, %d pieces\n", g_vocab.c_str(),
               g_tok->vocab_size());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (!g_tok || size > 4096) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  kvd_fuzz::run([&] {
    const kvd::Tokenizer& tok = *g_tok;
    const std::vector<int> ids = tok.encode(text, true, false);
    for (int id : ids)
      if (id < 0 || id >= tok.vocab_size()) finding("encode returned an id out of range", text);
    const std::string back = tok.decode_all(ids);
    if (kvd_fuzz::valid_utf8(text) && back != text) finding("decode_all(encode(text)) != text", text);
    kvd::StreamDecoder dec(tok, tok.bos_id());
    std::string streamed;
    for (int id : ids) streamed += dec.push(id);
    streamed += dec.flush();
    if (!kvd_fuzz::valid_utf8(streamed)) finding("StreamDecoder produced invalid UTF-8", text);
  });
  return 0;
}
