// Fuzz target: llama2.c tokenizer.bin.
// Llama2cTokenizer::load, then encode a short text, decode it back with decode_all and
// with a StreamDecoder, whose output must always be valid UTF-8.
#include "fuzz_util.hpp"
#include "kvdecode/kvdecode.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kvd_fuzz::remove_scratch_at_exit("tokenizer.bin");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvd_fuzz::run([&] {
    const std::string& path = kvd_fuzz::write_scratch("tokenizer.bin", data, size);
    const kvd::Llama2cTokenizer tok = kvd::Llama2cTokenizer::load(path);
    for (int id = 0; id < tok.vocab_size(); ++id) (void)tok.find(tok.piece(id));
    const std::vector<int> ids = tok.encode(kvd_fuzz::kSampleText, true, true);
    const std::string text = tok.decode_all(ids);
    kvd::StreamDecoder dec(tok);
    std::string streamed;
    for (int id : ids) streamed += dec.push(id);
    streamed += dec.flush();
    if (!kvd_fuzz::valid_utf8(streamed)) {
      std::fprintf(stderr, "FINDING: StreamDecoder produced invalid UTF-8 (%zu bytes)\n", streamed.size());
      std::abort();
    }
    (void)text;
  });
  return 0;
}
