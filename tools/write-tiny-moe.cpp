// write-tiny-moe: writes tests/data/qwen3moe-tiny-F32.gguf, the small random qwen3moe
// model the MoE reference test runs (tests/moe_test.cpp), with kvdecode's own GGUF
// writer (the quantizer's keys and tensors) and stories260K's vocabulary (512
// SentencePiece pieces, copied from ../shared/models/gguf/stories260K-F32.gguf):
//   d_model 64, 2 layers, 4 query / 2 KV heads of 16, 8 experts of width 32, 2 per
//   token (softmax, top-2, normalised), RoPE theta 1e6, context 256, f32 weights,
//   ModelWeights::random(seed 38).
// ik_llama.cpp loads it, and `tools/ik_reference.cpp steps` records its logits as the reference.
// Not part of the build:
//   g++ -std=c++17 -O1 -fopenmp -Iinclude -I/usr/include/eigen3 tools/write-tiny-moe.cpp -o /tmp/write-tiny-moe \
//       -lpcre2-8 -lutf8proc
//   /tmp/write-tiny-moe ../shared/models/gguf/stories260K-F32.gguf tests/data/qwen3moe-tiny-F32.gguf
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kvdecode/convert/quantize.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write-tiny-moe VOCAB.gguf OUT.gguf\n");
    return 2;
  }
  try {
    kvd::ModelConfig c;
    c.vocab_size = 512; c.d_model = 64; c.n_layers = 2; c.n_heads = 4; c.n_kv_heads = 2; c.head_dim = 16;
    c.hidden_dim = 32; c.max_seq_len = 256; c.rope_theta = 1e6; c.norm_eps = 1e-6;
    c.rope_style = kvd::RopeStyle::kHalves; c.qk_norm = true; c.shared_classifier = false;
    c.n_experts = 8; c.n_experts_used = 2; c.norm_topk_prob = true;
    auto w = std::make_shared<const kvd::ModelWeights<float>>(kvd::ModelWeights<float>::random(c, 38));
    kvd::GGUFWriter g;
    kvd::detail::write_model_keys(g, c, "qwen3moe-tiny");
    kvd::detail::write_vocab(g, argv[1], c.vocab_size);
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
    g.write(argv[2]);
    std::fprintf(stderr, "wrote %s\n", argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write-tiny-moe: %s\n", e.what());
    return 1;
  }
  return 0;
}
