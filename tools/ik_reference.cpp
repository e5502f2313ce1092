// ik-reference: outside references computed by ik_llama.cpp's ggml and llama (not
// kvdecode's code), for the tests that hold kvdecode to an independent implementation:
//
//   ik-reference tensors MODEL.gguf         one line per tensor: name, ggml type name
//                                           and the sha256 of ggml's dequantized floats
//                                           (to_float, row by row)
//   ik-reference logits MODEL.gguf IDS OUT  the logits of every position of the prompt
//                                           IDS through one llama_decode, as float32
//                                           rows (vocab values each) to OUT
//   ik-reference steps MODEL.gguf IDS OUT   the same, one token per llama_decode from
//                                           position 0, after a warm-up decode (below)
//
// IDS is comma-separated token ids, or @FILE for a file of them. One thread, so a run
// does not depend on a thread split; an f16 K and V cache without flash attention (ik
// takes an f16 V cache only then). ik_llama.cpp treats a context's first decode of a
// lone BOS as a warm-up that runs every expert of a mixture of experts, so `steps`
// decodes the first token once and clears the cache before the recorded run.
//
// Not part of kvdecode's build: it links ik_llama.cpp's libllama and libggml.
//
//   g++ -std=c++17 -O2 tools/ik_reference.cpp -Itests -I$IK/include -I$IK/ggml/include \
//       -L$IK/build/src -L$IK/build/ggml/src -lllama -lggml -Wl,-rpath,$IK/build/src:$IK/build/ggml/src \
//       -o /tmp/ik-reference
//
// The files of tests/data/ik, for T in IQ4_NL IQ4_XS MXFP4 ($IK/build/bin; the prompt
// is ../shared/reference/gguf/prompt.ids):
//
//   llama-quantize --pure ../shared/models/gguf/rand256-F32.gguf rand256-$T.gguf $T 1
//   ik-reference tensors rand256-$T.gguf > rand256-$T.tensors.txt
//   llama-quantize --allow-requantize rand256-$T.gguf /tmp/deq-$T.gguf F32 1
//   ik-reference logits /tmp/deq-$T.gguf @../shared/reference/gguf/prompt.ids rand256-$T.logits
//
// tests/data/qwen3moe-tiny-F32.ik.logits (the prompt: kPromptIds of tests/moe_test.cpp):
//
//   ik-reference steps tests/data/qwen3moe-tiny-F32.gguf IDS tests/data/qwen3moe-tiny-F32.ik.logits
//
// tests/data/gemma3-tiny-F32.ik.logits (the prompt: kPromptIds of tests/gemma3_test.cpp):
//
//   ik-reference steps tests/data/gemma3-tiny-F32.gguf IDS tests/data/gemma3-tiny-F32.ik.logits
//
// tests/data/gpt-oss-tiny-F32.ik.logits (the prompt: kPromptIds of tests/gpt_oss_test.cpp;
// ik takes the sinks without flash attention, in its soft_max):
//
//   ik-reference steps tests/data/gpt-oss-tiny-F32.gguf IDS tests/data/gpt-oss-tiny-F32.ik.logits
//
// The hash is tests/sha256.hpp's, the one tests/quant_test.cpp compares with.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ggml.h"
#include "llama.h"
#include "sha256.hpp"

namespace {

int tensors(const char* path) {
  ggml_context* meta = nullptr;
  gguf_init_params params = {true, &meta};
  gguf_context* g = gguf_init_from_file(path, params);
  if (!g) {
    std::fprintf(stderr, "cannot read %s\n", path);
    return 1;
  }
  std::ifstream in(path, std::ios::binary);
  const std::size_t data = gguf_get_data_offset(g);
  for (int i = 0; i < gguf_get_n_tensors(g); ++i) {
    const char* name = gguf_get_tensor_name(g, i);
    const ggml_tensor* t = ggml_get_tensor(meta, name);
    const ggml_type type = gguf_get_tensor_type(g, i);
    const std::int64_t n = ggml_nelements(t), ne0 = t->ne[0], rows = n / ne0;
    const std::size_t row_bytes = ggml_row_size(type, ne0);
    std::vector<unsigned char> bytes(row_bytes * static_cast<std::size_t>(rows));
    in.seekg(static_cast<std::streamoff>(data + gguf_get_tensor_offset(g, i)));
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    std::vector<float> y(static_cast<std::size_t>(n));
    const ggml_type_traits_t tr = ggml_internal_get_type_traits(type);
    for (std::int64_t r = 0; r < rows; ++r) {
      const unsigned char* src = bytes.data() + static_cast<std::size_t>(r) * row_bytes;
      float* dst = y.data() + r * ne0;
      if (type == GGML_TYPE_F32)
        std::copy(reinterpret_cast<const float*>(src), reinterpret_cast<const float*>(src) + ne0, dst);
      else
        tr.to_float(src, dst, ne0);
    }
    std::printf("%s %s sha256=%s\n", name, ggml_type_name(type), kvd_test::sha256_hex(y.data(), y.size() * 4).c_str());
  }
  gguf_free(g);
  ggml_free(meta);
  return 0;
}

std::vector<llama_token> read_ids(const std::string& arg) {
  std::string text = arg;
  if (!arg.empty() && arg[0] == '@') {
    std::ifstream in(arg.substr(1));
    std::stringstream all;
    all << in.rdbuf();
    text = all.str();
  }
  std::vector<llama_token> ids;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) ids.push_back(std::atoi(item.c_str()));
  return ids;
}

// Runs the prompt (in one decode, or one token per decode after a warm-up) and writes
// every position's logits.
int logits(const char* path, const std::string& ids_arg, const char* out, bool steps) {
  const std::vector<llama_token> ids = read_ids(ids_arg);
  if (ids.empty()) {
    std::fprintf(stderr, "ik-reference: no token ids in %s\n", ids_arg.c_str());
    return 2;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(path, mp);
  if (!model) {
    std::fprintf(stderr, "ik-reference: cannot load %s\n", path);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 64;
  cp.n_ubatch = 64;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = GGML_TYPE_F16;
  cp.type_v = GGML_TYPE_F16;
  cp.flash_attn = false;
  cp.logits_all = !steps;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "ik-reference: cannot create a context\n");
    return 1;
  }
  const int V = llama_n_vocab(model);
  std::ofstream o(out, std::ios::binary);
  auto put = [&](int i) {
    o.write(reinterpret_cast<const char*>(llama_get_logits_ith(ctx, i)), static_cast<std::streamsize>(V * sizeof(float)));
  };
  if (steps) {
    llama_token first = ids[0];
    if (llama_decode(ctx, llama_batch_get_one(&first, 1, 0, 0)) != 0) return 1;
    llama_synchronize(ctx);  // counts the decode (llama_context::n_eval), which ends the warm-up
    llama_kv_cache_clear(ctx);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      llama_token t = ids[i];
      if (llama_decode(ctx, llama_batch_get_one(&t, 1, static_cast<llama_pos>(i), 0)) != 0) {
        std::fprintf(stderr, "ik-reference: llama_decode failed at position %zu\n", i);
        return 1;
      }
      put(-1);
    }
  } else {
    std::vector<llama_token> all = ids;
    if (llama_decode(ctx, llama_batch_get_one(all.data(), static_cast<int>(all.size()), 0, 0)) != 0) return 1;
    for (std::size_t i = 0; i < ids.size(); ++i) put(static_cast<int>(i));
  }
  std::fprintf(stderr, "ik-reference: %zu positions x %d logits -> %s\n", ids.size(), V, out);
  llama_free(ctx);
  llama_free_model(model);
  llama_backend_free();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (argc == 3 && cmd == "tensors") return tensors(argv[2]);
  if (argc == 5 && (cmd == "logits" || cmd == "steps")) return logits(argv[2], argv[3], argv[4], cmd == "steps");
  std::fprintf(stderr, "usage: %s tensors MODEL.gguf | logits MODEL.gguf IDS OUT | steps MODEL.gguf IDS OUT\n", argv[0]);
  return 2;
}
