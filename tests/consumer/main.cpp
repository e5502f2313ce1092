// A program outside the kvdecode tree that finds the installed package with
// find_package(kvdecode) and checks the core promise on a small random model.
#include <kvdecode/kvdecode.hpp>

#include <cstring>
#include <iostream>

float old_paths_first_logit(const kvd::ModelConfig& c);  // old_paths.cpp

int main() {
  kvd::ModelConfig c;
  c.vocab_size = 64; c.d_model = 32; c.n_layers = 2; c.n_heads = 4; c.n_kv_heads = 2;
  c.head_dim = 8; c.hidden_dim = 48; c.max_seq_len = 24;
  kvd::Transformer<float> model(kvd::ModelWeights<float>::random(c, 1));
  const std::vector<int> tokens{1, 5, 9, 13, 17, 21, 25, 29, 33, 37};
  const kvd::RowMatrix<float> ref = model.forward_reference(tokens);
  kvd::KVCache<float> cache(c);
  model.prefill({tokens[0], tokens[1], tokens[2]}, cache);
  bool same = true;
  for (std::size_t t = 3; t < tokens.size(); ++t) {
    auto row = model.decode_step(tokens[t], cache);
    same = same && std::memcmp(row.data(), ref.row(static_cast<long>(t)).data(), sizeof(float) * c.vocab_size) == 0;
  }
  // The tokenizers' dependencies (nlohmann_json, PCRE2, utf8proc) reach consumers too.
  const auto tok = kvd::tokenizer_from_json(
      R"({"normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\p{L}+"},
          "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})",
      "", "consumer.json");
  same = same && tok->encode("ab b\xC3\xA9" "a") == std::vector<int>{2, 1, 0};
  // The same step through the old flat paths (old_paths.cpp) gives the same bits.
  kvd::KVCache<float> fresh(c);
  const float first = model.decode_step(3, fresh).data()[0], old = old_paths_first_logit(c);
  same = same && std::memcmp(&first, &old, sizeof first) == 0;
  std::cout << "kvdecode " << kvd::kVersion << ": cached and cache-free logits "
            << (same ? "identical" : "DIFFERENT") << "\n";
  return same ? 0 : 1;
}
