// write-tiny-model: writes the small random-weight models that the reference tests
// run against ik_llama.cpp, with kvdecode's own GGUF writer (the quantizer's keys and
// tensors), f32 weights and stories260K's vocabulary (512 SentencePiece pieces,
// copied from ../shared/models/gguf/stories260K-F32.gguf). ARCH picks the model:
//   qwen3moe  tests/data/qwen3moe-tiny-F32.gguf (tests/moe_test.cpp): d_model 64,
//             2 layers, 4 query / 2 KV heads of 16, 8 experts of width 32, 2 per token
//             (softmax, top-2, normalised), RoPE theta 1e6, context 256, seed 38.
//   gemma3    tests/data/gemma3-tiny-F32.gguf (tests/gemma3_test.cpp): d_model 64,
//             6 layers (five local, then one global), 4 query / 2 KV heads of 16, GeGLU
//             of width 48, local window 19, RoPE theta 1e6 (global, linear scaling 8)
//             and 10000 (local), context 256, tied output, seed 39.
//   gpt-oss   tests/data/gpt-oss-tiny-F32.gguf (tests/gpt_oss_test.cpp): d_model 64,
//             4 layers (local, full, local, full), 4 query / 2 KV heads of 16 with
//             q/k/v/o biases and sinks, local window 19, 8 experts of width 16, 4 per
//             token (top-4, then softmax) with biases, the clamped SwiGLU, RoPE theta
//             150000 with YaRN (factor 32, trained context 4096) on every layer, context
//             256, separate output, seed 40.
// ik_llama.cpp loads them, and `tools/ik_reference.cpp steps` records their logits as
// the references. Not part of the build:
//   g++ -std=c++17 -O1 -fopenmp -Iinclude -I/usr/include/eigen3 tools/write-tiny-model.cpp \
//       -o /tmp/write-tiny-model -lpcre2-8 -lutf8proc
//   /tmp/write-tiny-model qwen3moe ../shared/models/gguf/stories260K-F32.gguf tests/data/qwen3moe-tiny-F32.gguf
//   /tmp/write-tiny-model gemma3 ../shared/models/gguf/stories260K-F32.gguf tests/data/gemma3-tiny-F32.gguf
//   /tmp/write-tiny-model gpt-oss ../shared/models/gguf/stories260K-F32.gguf tests/data/gpt-oss-tiny-F32.gguf
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kvdecode/convert/quantize.hpp"

namespace {

// The shape every tiny model shares: d_model 64, 4 query / 2 KV heads of 16, RoPE on halves.
kvd::ModelConfig base_config() {
  kvd::ModelConfig c;
  c.vocab_size = 512; c.d_model = 64; c.n_heads = 4; c.n_kv_heads = 2; c.head_dim = 16;
  c.max_seq_len = 256; c.rope_theta = 1e6; c.norm_eps = 1e-6;
  c.rope_style = kvd::RopeStyle::kHalves; c.qk_norm = true;
  return c;
}

kvd::ModelConfig qwen3moe_config() {
  kvd::ModelConfig c = base_config();
  c.n_layers = 2; c.hidden_dim = 32; c.shared_classifier = false;
  c.n_experts = 8; c.n_experts_used = 2; c.norm_topk_prob = true;
  return c;
}

kvd::ModelConfig gemma3_config() {
  kvd::ModelConfig c = base_config();
  c.n_layers = 6; c.hidden_dim = 48; c.shared_classifier = true;
  c.norm_eps = 0x1p-20;  // exact in f32, so the file's config is this one
  c.embed_scale = true; c.post_norms = true; c.ffn_activation = kvd::Activation::kGeluTanh;
  c.swa_pattern = 6; c.local_window = 19; c.rope_theta_local = 10000.0; c.rope_scale = 8.0;
  c.query_pre_attn_scalar = c.head_dim;
  return c;
}

// gpt-oss's block (the options tests/test_util.hpp's gpt_oss_like sets, written out here).
kvd::ModelConfig gpt_oss_config() {
  kvd::ModelConfig c = base_config();
  c.n_layers = 4; c.hidden_dim = 16; c.shared_classifier = false; c.qk_norm = false;
  c.norm_eps = 0x1p-17;  // exact in f32, so the file's config is this one
  c.rope_theta = 150000.0; c.qkv_bias = true;
  c.n_experts = 8; c.n_experts_used = 4; c.router_order = kvd::RouterOrder::kTopKSoftmax;
  c.attn_sinks = true; c.attn_out_bias = true; c.moe_bias = true; c.ffn_activation = kvd::Activation::kSwigluOai;
  c.swa_pattern = 2; c.local_window = 19; c.rope_theta_local = c.rope_theta; c.rope_scale_local = true;
  c.rope_scaling = kvd::RopeScaling::kYarn; c.rope_scale = 32.0; c.yarn_orig_ctx = 4096;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string arch = argc == 4 ? argv[1] : "";
  if (arch != "qwen3moe" && arch != "gemma3" && arch != "gpt-oss") {
    std::fprintf(stderr, "usage: write-tiny-model qwen3moe|gemma3|gpt-oss VOCAB.gguf OUT.gguf\n");
    return 2;
  }
  try {
    const kvd::ModelConfig c = arch == "gemma3" ? gemma3_config() : arch == "gpt-oss" ? gpt_oss_config() : qwen3moe_config();
    const std::uint64_t seed = arch == "gemma3" ? 39 : arch == "gpt-oss" ? 40 : 38;
    auto w = std::make_shared<const kvd::ModelWeights<float>>(kvd::ModelWeights<float>::random(c, seed));
    kvd::GGUFWriter g;
    kvd::detail::write_model_keys(g, c, arch + "-tiny");
    kvd::detail::write_vocab(g, argv[2], c.vocab_size);
    g.set_u32("general.file_type", 0);  // all f32
    std::vector<std::vector<float>> data;
    const auto sources = kvd::detail::sources_from_weights(w);
    data.reserve(sources.size());
    for (const kvd::detail::QuantSource& s : sources) {
      std::uint64_t rows = 1;
      for (std::size_t d = 1; d < s.ne.size(); ++d) rows *= s.ne[d];
      data.emplace_back(static_cast<std::size_t>(rows * s.ne[0]));
      for (std::uint64_t r = 0; r < rows; ++r) s.row(r, data.back().data() + r * s.ne[0]);
      g.add_tensor_ref(s.name, kvd::WeightType::kF32, s.ne, data.back().data(), data.back().size() * 4);
    }
    g.write(argv[3]);
    std::fprintf(stderr, "wrote %s\n", argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write-tiny-model: %s\n", e.what());
    return 1;
  }
  return 0;
}
