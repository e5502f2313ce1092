// The flat header paths of kvdecode 0.1 (kvdecode/transformer.hpp, ...) still
// compile: each forwards to its folder (kvdecode/model/transformer.hpp, ...).
#include <kvdecode/gguf_model.hpp>
#include <kvdecode/kernels.hpp>
#include <kvdecode/kv_cache.hpp>
#include <kvdecode/quant_matrix.hpp>
#include <kvdecode/tokenizer.hpp>
#include <kvdecode/transformer.hpp>

/// A decode step through the old paths: the logits' first value.
float old_paths_first_logit(const kvd::ModelConfig& c) {
  kvd::Transformer<float> model(kvd::ModelWeights<float>::random(c, 1));
  kvd::KVCache<float> cache(c);
  return model.decode_step(3, cache).data()[0];
}
