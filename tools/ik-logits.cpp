// ik-logits: records an outside implementation's logits for the reference tests.
// Runs a GGUF model in ik_llama.cpp (or llama.cpp) through its C API, one token per
// llama_decode from position 0, and writes every position's logits as float32 rows
// (vocab values each), the layout of ../shared/reference/gguf/*.logits.
//   ik-logits MODEL.gguf IDS OUT.logits [K_TYPE V_TYPE [FLASH]]
// IDS is a file of comma-separated token ids; K_TYPE and V_TYPE are ggml type ids of
// the KV cache (1 = f16, the default; 0 = f32, which ik_llama.cpp takes only with
// flash attention), FLASH 1 turns flash attention on. One thread, so the run does
// not depend on a thread split. A warm-up decode comes first (see below).
// Not part of kvdecode's build; against ik_llama.cpp built in /tmp/ik_llama.cpp/build:
//   g++ -std=c++17 -O1 tools/ik-logits.cpp -I/tmp/ik_llama.cpp/include -I/tmp/ik_llama.cpp/ggml/include \
//       -L/tmp/ik_llama.cpp/build/src -lllama -Wl,-rpath,/tmp/ik_llama.cpp/build/src -o /tmp/ik-logits
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: ik-logits MODEL.gguf IDS OUT.logits [K_TYPE V_TYPE [FLASH]]\n");
    return 2;
  }
  std::vector<llama_token> ids;
  {
    std::ifstream in(argv[2]);
    std::string item;
    while (std::getline(in, item, ',')) ids.push_back(std::atoi(item.c_str()));
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "ik-logits: cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 64;
  cp.n_ubatch = 64;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  if (argc >= 6) {
    cp.type_k = static_cast<ggml_type>(std::atoi(argv[4]));
    cp.type_v = static_cast<ggml_type>(std::atoi(argv[5]));
  }
  cp.flash_attn = argc == 7 && std::atoi(argv[6]) != 0;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "ik-logits: cannot create a context with these cache types\n");
    return 1;
  }
  // ik_llama.cpp treats a context's first decode of a lone BOS as a warm-up and runs
  // every expert of a mixture of experts for it; decode it once and clear the cache,
  // so that the recorded run routes position 0 as every later one.
  {
    llama_token first = ids.empty() ? 0 : ids[0];
    if (llama_decode(ctx, llama_batch_get_one(&first, 1, 0, 0)) != 0) {
      std::fprintf(stderr, "ik-logits: the warm-up decode failed\n");
      return 1;
    }
    llama_synchronize(ctx);  // counts the decode (llama_context::n_eval), which ends the warm-up
    llama_kv_cache_clear(ctx);
  }
  const int n_vocab = llama_n_vocab(model);
  std::ofstream out(argv[3], std::ios::binary);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    llama_batch b = llama_batch_get_one(&ids[i], 1, static_cast<llama_pos>(i), 0);
    if (llama_decode(ctx, b) != 0) {
      std::fprintf(stderr, "ik-logits: llama_decode failed at position %zu\n", i);
      return 1;
    }
    const float* l = llama_get_logits_ith(ctx, -1);
    out.write(reinterpret_cast<const char*>(l), static_cast<std::streamsize>(n_vocab * sizeof(float)));
  }
  std::fprintf(stderr, "ik-logits: %zu positions x %d logits -> %s\n", ids.size(), n_vocab, argv[3]);
  llama_free(ctx);
  llama_free_model(model);
  llama_backend_free();
  return 0;
}
