// Fuzz target: Hugging Face tokenizer.json (tokenizer_json.hpp): the JSON, the
// BPE model (vocab, merges, byte fallback), normalizer, pre-tokenizer, decoder
// and added tokens. tokenizer_from_json, then encode a short text (with and
// without special-token parsing) and decode it: ids must be in range and the
// decoded text valid UTF-8. Then the same file as a GGUF vocabulary
// (vocab_writer.hpp): whatever the writer accepts, the GGUF reader must load,
// with as many tokens.
#include <string>

#include "fuzz_util.hpp"
#include "kvdecode/kvdecode.hpp"
#include "kvdecode/text/tokenizer_json.hpp"
#include "kvdecode/convert/vocab_writer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvd_fuzz::run([&] {
    const std::string json(reinterpret_cast<const char*>(data), size);
    const auto tok = kvd::tokenizer_from_json(json, "", "fuzz-tokenizer.json");
    (void)tok->describe();
    for (bool special : {true, false}) {
      const std::vector<int> ids = tok->encode(std::string(kvd_fuzz::kSampleText) + "<|endoftext|></s>", special, special);
      for (int id : ids)
        if (id < 0 || id >= tok->vocab_size()) {
          std::fprintf(stderr, "FINDING: encode returned id %d outside [0, %d)\n", id, tok->vocab_size());
          std::abort();
        }
      const std::string text = tok->decode(ids, !special);
      if (!kvd_fuzz::valid_utf8(text)) {
        std::fprintf(stderr, "FINDING: decode produced invalid UTF-8 (%zu bytes)\n", text.size());
        std::abort();
      }
    }
    std::vector<std::pair<std::string, kvd::GGUFValue>> keys;
    try {
      keys = kvd::detail::tokenizer_spec_keys(kvd::tokenizer_json_spec(json, "", "fuzz-tokenizer.json"),
                                              "fuzz-tokenizer.json", 0);
    } catch (const kvd::ConfigError&) {
      return;  // a tokenizer GGUF cannot express
    }
    kvd::GGUFWriter w;
    for (auto& [k, v] : keys) w.set(k, std::move(v));
    try {
      const auto g = kvd::load_tokenizer_gguf(kvd::GGUFFile::from_bytes(w.bytes(), "fuzz-converted.gguf"));
      if (g->vocab_size() != tok->vocab_size()) {
        std::fprintf(stderr, "FINDING: converted vocabulary has %d tokens for %d\n", g->vocab_size(), tok->vocab_size());
        std::abort();
      }
    } catch (const kvd::Error& e) {
      std::fprintf(stderr, "FINDING: the GGUF reader refuses a converted vocabulary: %s\n", e.what());
      std::abort();
    }
  });
  return 0;
}
