// Decode steps of a GGUF model for instruction counting (count.sh): loads the
// model, prefills 8 ids, runs argv[2] decode steps on one thread and prints the
// kernels' name (build_info) and a checksum of the logits. "fast": the fast mode
// (--fast-matmul, Transformer::set_fast_matmul) instead of the default numerics.
//   decode_steps MODEL.gguf STEPS [fast]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/matmul/build_info.hpp"
#include "kvdecode/model/transformer.hpp"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4 || (argc == 4 && std::string(argv[3]) != "fast")) {
    std::fprintf(stderr, "usage: %s MODEL.gguf STEPS [fast]\n", argv[0]);
    return 2;
  }
  const int steps = std::atoi(argv[2]);
  if (steps < 0 || steps > 56) {
    std::fprintf(stderr, "STEPS must be in [0, 56] (the cache holds 64 positions)\n");
    return 2;
  }
  kvd::set_num_threads(1);
  kvd::Transformer<float> model(kvd::load_gguf_model<float>(argv[1]));
  model.set_fast_matmul(argc == 4);
  const int V = model.config().vocab_size;
  kvd::KVCache<float> cache(model.config(), 64);
  std::vector<int> head;
  for (int i = 0; i < 8; ++i) head.push_back((i * 37 + 1) % V);
  model.prefill(head, cache, false);
  float sum = 0;
  for (int i = 0; i < steps; ++i) sum += model.decode_step((i * 11 + 3) % V, cache)(0, 0);
  std::printf("%s %g\n", kvd::build_info().isa, sum);
  return 0;
}
