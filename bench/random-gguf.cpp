// kvdecode-random-gguf: writes a GGUF model of TinyLlama-1.1B's shape (d_model
// 2048, hidden 5632, 22 layers, 32 query / 4 KV heads, vocab 32000, context 2048 by default)
// with seeded random f16 weights and a synthetic SentencePiece-style vocabulary,
// so that kvdecode-quantize and kvdecode-generate (--draft-model, --lookup) can be
// measured on a model of that size without downloading one:
//   kvdecode-random-gguf OUT.gguf [LAYERS] [SEED] [DECAY] [CONTEXT]
// LAYERS (default 22) shrinks the model for a quicker run. CONTEXT (default 2048)
// is the context_length written, so a benchmark can decode at depth 2048 and beyond
// (bench/peers.sh); it changes no weight. Every matrix holds its own
// values, uniform in [-0.03, 0.03), from SplitMix64(seed, tensor index); norms are 1.
// The embedding and the classifier are drawn first, then the layers in order, so the
// file with fewer LAYERS and the same SEED and DECAY is the first layers of the larger
// one: a smaller model of the same family (a draft model for speculative decoding).
// DECAY (default 1) scales the two matrices that write into the residual stream
// (attn_output, ffn_down) of layer l by DECAY^l. At 1 the layers are equal and the
// random network is chaotic (a small change of its weights changes its greedy output
// within a few tokens); below 1 the later layers refine what the first ones decided,
// as in a trained model, and a few first layers predict most of its choices.
//
//   kvdecode-random-gguf --moe TYPE OUT.gguf [LAYERS] [SEED]
// writes a qwen3moe model of Qwen3-30B-A3B's layer shape instead (d_model 2048, 32
// query / 4 KV heads of 128, 128 experts of width 768, 8 used per token; vocab 32000
// here, not Qwen3's 151936, context 4096), LAYERS (default 4) of its 48 layers, every
// matrix of block type TYPE (q4_K, q8_0, ...) but the f32 router, as llama.cpp stores
// it. The rows are drawn from a pool of 64 quantized random rows (SplitMix64), so a
// file of several GB is written in seconds; every tensor still has its own bytes in
// the file, and a decode step reads them from memory: what the MoE decode benchmark
// measures (docs/models.md).
// Exit status: 0 success, 1 the file could not be written, 2 bad argument.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvdecode/kvdecode.hpp"

namespace {

constexpr long long kDefaultContext = 2048, kMinContext = 16, kMaxContext = 1 << 20;

// A synthetic SentencePiece-style vocabulary of V tokens: <unk>, <s>, </s>, the 256
// byte pieces, then "▁t<i>" pieces.
void write_vocab(kvd::GGUFWriter& w, std::uint64_t V) {
  std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
  std::vector<std::int32_t> types{2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    tokens.push_back(piece);
    types.push_back(6);  // byte
  }
  while (tokens.size() < V) {
    tokens.push_back("\xE2\x96\x81t" + std::to_string(tokens.size()));
    types.push_back(1);  // normal
  }
  std::vector<float> scores(V);
  for (std::uint64_t i = 0; i < V; ++i) scores[i] = -static_cast<float>(i);
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
}

// The --moe file (see the top of this file).
int run_moe(int argc, char** argv) {
  if (argc < 4 || argc > 6)
    throw kvd::ArgumentError("usage: kvdecode-random-gguf --moe TYPE OUT.gguf [LAYERS (1..48, default 4)] [SEED]");
  const kvd::WeightType type = kvd::parse_weight_type(argv[2]);  // ArgumentError naming it
  const std::string path = argv[3];
  const int layers = argc > 4 ? std::stoi(argv[4]) : 4;
  const std::uint64_t seed = argc > 5 ? std::stoull(argv[5]) : 1;
  if (layers < 1 || layers > 48) throw kvd::ArgumentError(kvd::detail::msg("LAYERS = ", layers, " must be in [1, 48]"));
  kvd::ModelConfig c;
  c.d_model = 2048; c.n_layers = layers; c.n_heads = 32; c.n_kv_heads = 4; c.head_dim = 128; c.hidden_dim = 768;
  c.vocab_size = 32000; c.max_seq_len = 4096; c.rope_theta = 1e6; c.norm_eps = 1e-6; c.rope_style = kvd::RopeStyle::kHalves;
  c.qk_norm = true; c.n_experts = 128; c.n_experts_used = 8; c.norm_topk_prob = true; c.shared_classifier = false;
  c.validate();
  kvd::GGUFWriter w;
  kvd::detail::write_model_keys(w, c, "random Qwen3-30B-A3B layer shape");
  write_vocab(w, static_cast<std::uint64_t>(c.vocab_size));
  // A pool of quantized rows of every width the model has (D, F, H * Dh).
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull;
  constexpr std::uint64_t kPool = 64;
  auto pool_of = [&](std::uint64_t n) {
    std::vector<unsigned char> pool(kPool * kvd::weight_row_bytes(type, n));
    std::vector<float> x(n);
    for (std::uint64_t r = 0; r < kPool; ++r) {
      for (auto& v : x) v = static_cast<float>(static_cast<double>(kvd::splitmix64(state) >> 11) * 0x1.0p-53 * 0.06 - 0.03);
      kvd::detail::quantize_row(type, x.data(), pool.data() + r * kvd::weight_row_bytes(type, n), static_cast<std::int64_t>(n));
    }
    return pool;
  };
  std::vector<std::vector<unsigned char>> data;
  data.reserve(64 + 16 * static_cast<std::size_t>(layers));
  std::vector<float> ones(static_cast<std::size_t>(c.d_model), 1.f);
  kvd::for_each_gguf_file_tensor(c, [&](const kvd::TensorSpec& s, int l) {
    if (s.presence == kvd::Presence::kIfStored) return;
    const std::string name = kvd::gguf_tensor_name(s, l);
    const std::vector<std::uint64_t> ne = kvd::gguf_tensor_ne(s, c);
    if (!s.matrix) return w.add_tensor_ref(name, kvd::WeightType::kF32, ne, ones.data(), ne[0] * 4);
    const std::uint64_t rows = kvd::tensor_rows(s, c), cols = kvd::tensor_cols(s, c);
    const kvd::WeightType t = s.id == kvd::TensorId::kRouter ? kvd::WeightType::kF32 : type;
    const std::uint64_t row_bytes = kvd::weight_row_bytes(t, cols);
    const std::vector<unsigned char> pool = t == type ? pool_of(cols) : std::vector<unsigned char>();
    data.emplace_back(rows * row_bytes);
    for (std::uint64_t r = 0; r < rows; ++r) {
      if (t == kvd::WeightType::kF32) {
        float* row = reinterpret_cast<float*>(data.back().data() + r * row_bytes);
        for (std::uint64_t i = 0; i < cols; ++i)
          row[i] = static_cast<float>(static_cast<double>(kvd::splitmix64(state) >> 11) * 0x1.0p-53 * 0.2 - 0.1);
      } else {
        std::memcpy(data.back().data() + r * row_bytes, pool.data() + (kvd::splitmix64(state) % kPool) * row_bytes, row_bytes);
      }
    }
    w.add_tensor_ref(name, t, ne, data.back().data(), data.back().size());
  });
  w.write(path);
  std::cerr << "wrote " << path << " (qwen3moe, " << layers << " layers, " << kvd::weight_type_name(type) << ")\n";
  return 0;
}

int run(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--moe") return run_moe(argc, argv);
  if (argc < 2 || argc > 6 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cerr << "usage: kvdecode-random-gguf OUT.gguf [LAYERS (1..22, default 22)] [SEED (default 1)] [DECAY (0..1, "
                 "default 1)] [CONTEXT (16..1048576, default 2048)]\n"
                 "  A random f16 model of the TinyLlama-1.1B shape. Fewer LAYERS with the same SEED and DECAY give the\n"
                 "  first layers of the larger model. DECAY scales layer l's attn_output and ffn_down by DECAY^l.\n"
                 "  CONTEXT is the context_length written (the weights do not depend on it).\n";
    return argc < 2 || argc > 6 ? 2 : 0;
  }
  const std::string path = argv[1];
  const int layers = argc > 2 ? std::stoi(argv[2]) : 22;
  const std::uint64_t seed = argc > 3 ? std::stoull(argv[3]) : 1;
  const double decay = argc > 4 ? std::stod(argv[4]) : 1.0;
  std::size_t used = 0;
  const long long context = argc > 5 ? std::stoll(argv[5], &used) : kDefaultContext;
  if (argc > 5 && used != std::string(argv[5]).size())
    throw kvd::ArgumentError(kvd::detail::msg("CONTEXT = '", argv[5], "' is not a whole number in [", kMinContext, ", ",
                                              kMaxContext, "]"));
  if (layers < 1 || layers > 22) throw kvd::ArgumentError(kvd::detail::msg("LAYERS = ", layers, " must be in [1, 22]"));
  if (!(decay > 0 && decay <= 1)) throw kvd::ArgumentError(kvd::detail::msg("DECAY = ", argv[4], " must be in (0, 1]"));
  if (context < kMinContext || context > kMaxContext)
    throw kvd::ArgumentError(kvd::detail::msg("CONTEXT = ", context, " must be in [", kMinContext, ", ", kMaxContext, "]"));
  const std::uint64_t d = 2048, ff = 5632, H = 32, KV = 4, V = 32000, dh = 64;

  kvd::GGUFWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "random TinyLlama-1.1B shape");
  w.set_u32("llama.context_length", static_cast<std::uint32_t>(context));
  w.set_u32("llama.embedding_length", d);
  w.set_u32("llama.block_count", static_cast<std::uint32_t>(layers));
  w.set_u32("llama.feed_forward_length", ff);
  w.set_u32("llama.attention.head_count", H);
  w.set_u32("llama.attention.head_count_kv", KV);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32("llama.rope.freq_base", 10000.f);
  write_vocab(w, V);

  // Tensors reference their buffers until write(), so all are kept (2.2 GB at 22 layers).
  std::vector<std::vector<std::uint16_t>> mats;
  std::vector<float> ones(d, 1.f);
  mats.reserve(2 + 7 * static_cast<std::size_t>(layers));
  auto mat = [&](const std::string& name, std::uint64_t cols, std::uint64_t rows, double scale = 1.0) {
    std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + mats.size();
    mats.emplace_back(cols * rows);
    for (auto& x : mats.back()) {
      const double u = static_cast<double>(kvd::splitmix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
      x = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(static_cast<float>(scale * (0.06 * u - 0.03))));
    }
    w.add_tensor_ref(name, kvd::WeightType::kF16, {cols, rows}, mats.back().data(), cols * rows * 2);
  };
  auto norm = [&](const std::string& name) {
    w.add_tensor_ref(name, kvd::WeightType::kF32, {d}, ones.data(), d * 4);
  };
  // Every tensor of a llama model with a separate classifier, in the tensor table's order.
  kvd::ModelConfig c;
  c.d_model = static_cast<int>(d); c.hidden_dim = static_cast<int>(ff); c.n_layers = layers;
  c.n_heads = static_cast<int>(H); c.n_kv_heads = static_cast<int>(KV); c.head_dim = static_cast<int>(dh);
  c.vocab_size = static_cast<int>(V); c.shared_classifier = false;
  kvd::for_each_tensor_spec(c, [&](const kvd::TensorSpec& s, int l) {
    if (s.presence == kvd::Presence::kIfStored) return;
    const std::string name = kvd::gguf_tensor_name(s, l);
    if (!s.matrix) return norm(name);
    // The matrices writing into the residual stream (attn_output, ffn_down: the rows
    // random() scales by half) decay with depth.
    const double scale = l >= 0 && s.init == kvd::RandomInit::kHalfFanIn ? std::pow(decay, l) : 1.0;
    mat(name, kvd::tensor_cols(s, c), kvd::tensor_rows(s, c), scale);
  });
  w.write(path);
  std::cerr << "wrote " << path << " (" << layers << " layers, f16, decay " << decay << ", context " << context << ")\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::logic_error& e) {  // std::stoi's invalid_argument / out_of_range: a bad LAYERS or SEED
    std::cerr << "kvdecode-random-gguf: bad number: " << e.what() << "\n";
    return 2;
  } catch (const kvd::ArgumentError& e) {
    std::cerr << "kvdecode-random-gguf: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kvdecode-random-gguf: " << e.what() << "\n";
    return 1;
  }
}
