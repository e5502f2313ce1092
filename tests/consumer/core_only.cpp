// A program that links kvdecode::core alone (Eigen and OpenMP, no tokenizer
// dependencies) and includes the model and cache headers by their folders.
#include <kvdecode/cache/kv_cache.hpp>
#include <kvdecode/model/transformer.hpp>
#include <kvdecode/version.hpp>

#include <cstring>
#include <iostream>

int main() {
  kvd::ModelConfig c;
  c.vocab_size = 64; c.d_model = 32; c.n_layers = 2; c.n_heads = 4; c.n_kv_heads = 2;
  c.head_dim = 8; c.hidden_dim = 48; c.max_seq_len = 24;
  kvd::Transformer<> model(kvd::ModelWeights<float>::random(c, 1));
  const std::vector<int> tokens{1, 5, 9, 13, 17, 21};
  const kvd::RowMatrix<float> ref = model.forward_reference(tokens);
  kvd::KVCache<float> cache(c);
  model.prefill({tokens[0], tokens[1]}, cache);
  bool same = true;
  for (std::size_t t = 2; t < tokens.size(); ++t) {
    auto row = model.decode_step(tokens[t], cache);
    same = same && std::memcmp(row.data(), ref.row(static_cast<long>(t)).data(), sizeof(float) * c.vocab_size) == 0;
  }
  std::cout << "kvdecode::core " << kvd::kVersion << ": cached and cache-free logits "
            << (same ? "identical" : "DIFFERENT") << "\n";
  return same ? 0 : 1;
}
