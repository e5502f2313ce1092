// Quantized GGUF models keep their block types in memory: every matrix of a
// model is packed with the file's own bytes (plus zero rows padding the last
// panel), never expanded to floats, and a PackedMatrix of block-type parts
// computes what the scalar loop in the factored order over ggml's blocks
// computes (kvdecode/matmul/quant_kernels.hpp).
// (Reference logits and the exactness suites on these files are in
// gguf_model_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/model/transformer.hpp"

namespace {
using namespace kvd;

const std::string kGGUF = std::string(KVDECODE_SHARED_DIR) + "/models/gguf/";

std::uint64_t tensor_bytes(const GGUFFile& f, const std::string& name) {
  const GGUFTensorInfo* t = f.find_tensor(name);
  return t ? t->n_bytes : 0;
}

TEST(QuantModel, MatricesKeepTheFilesBytes) {
  for (const char* name : {"rand256-Q8_0", "rand256-Q4_0", "rand256-Q5_1", "rand256-Q2_K", "rand256-Q3_K_M",
                           "rand256-Q4_K_M", "rand256-Q5_K_M", "rand256-Q6_K"}) {
    const std::string path = kGGUF + name + ".gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared test file not found: " << path;
    const GGUFFile f = GGUFFile::open(path);
    Transformer<float> m(load_gguf_model<float>(path));
    // d_model 256, kv_dim 64, hidden 768, vocab 512: every n_out is a multiple of 16, so nothing is added.
    EXPECT_EQ(m.classifier().bytes(), tensor_bytes(f, "output.weight")) << name;
    for (int l = 0; l < 2; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      const auto& blk = m.blocks()[l];
      EXPECT_EQ(blk.attention().wqkv().bytes(),
                tensor_bytes(f, b + "attn_q.weight") + tensor_bytes(f, b + "attn_k.weight") + tensor_bytes(f, b + "attn_v.weight"))
          << name << " layer " << l;
      EXPECT_EQ(blk.attention().wo().bytes(), tensor_bytes(f, b + "attn_output.weight")) << name;
      EXPECT_EQ(blk.mlp().w13().bytes(), tensor_bytes(f, b + "ffn_gate.weight") + tensor_bytes(f, b + "ffn_up.weight"))
          << name;
      EXPECT_EQ(blk.mlp().w2().bytes(), tensor_bytes(f, b + "ffn_down.weight")) << name;
    }
    EXPECT_NE(m.classifier().type(), WeightType::kF32) << name;
  }
}

TEST(QuantModel, MixedBlockTypesStackedComputeTheScalarLoop) {
  // q4_K rows | q6_K rows | f32 rows in one PackedMatrix (three segments), against
  // the reduction-order rules written out: the factored order over the blocks'
  // codes, scales and offsets, one fma per k over the f32 rows.
  const long K = 512;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 0.05f);
  auto make = [&](WeightType t, long rows) {
    std::vector<float> src(static_cast<std::size_t>(rows * K));
    for (auto& v : src) v = nd(rng);
    std::vector<unsigned char> bytes(weight_row_bytes(t, K) * rows);
    for (long r = 0; r < rows; ++r) detail::quantize_row(t, src.data() + r * K, bytes.data() + r * weight_row_bytes(t, K), K);
    return WeightMatrix::copy_of(t, rows, K, bytes.data(), bytes.size());
  };
  const WeightMatrix a = make(WeightType::kQ4_K, 40), b = make(WeightType::kQ6_K, 24), c = make(WeightType::kF32, 9);
  const PackedMatrix<float> w({&a, &b, &c});
  ASSERT_EQ(w.segments().size(), 3u);
  const long ldy = w.n_out_padded();
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (long M : {1L, 2L, 5L, 8L, 9L, 16L, 17L, 40L}) {
      std::vector<float> x(static_cast<std::size_t>(M * K));
      for (auto& v : x) v = nd(rng) * 20;
      std::vector<float> y(static_cast<std::size_t>(M * ldy));
      matmul(x.data(), K, M, w, y.data(), ldy);
      const WeightMatrix* parts[3] = {&a, &b, &c};
      std::vector<float> row(K), codes(K), D(K), Nn(K);
      for (int pi = 0; pi < 3; ++pi)
        for (long r = 0; r < parts[pi]->rows(); ++r) {
          parts[pi]->dequantize_row(r, row.data());
          const WeightType t = parts[pi]->type();
          const auto f = detail::quant_factoring(t);
          if (f.sub > 0) detail::factor_row(t, parts[pi]->row_data(r), codes.data(), D.data(), Nn.data(), K);
          const long col = w.part_col(static_cast<std::size_t>(pi)) + r;
          for (long m = 0; m < M; ++m) {
            float acc = 0;
            if (f.sub == 0) {  // f32: one fma per k
              for (long k = 0; k < K; ++k) acc = std::fma(x[m * K + k], row[k], acc);
            } else {  // block types: the factored order (quant_kernels.hpp)
              for (long j = 0; j < K / f.sub; ++j) {
                float part = 0, xs = 0;
                for (long k = j * f.sub; k < (j + 1) * f.sub; ++k) {
                  part = std::fma(x[m * K + k], codes[k], part);
                  xs += x[m * K + k];
                }
                acc = std::fma(part, D[j], acc);
                if (f.has_min) acc = std::fma(xs, Nn[j], acc);
              }
            }
            float got = y[m * ldy + col];
            ASSERT_EQ(std::memcmp(&acc, &got, 4), 0) << "part " << pi << " row " << r << " M " << M << " threads " << threads;
            ASSERT_EQ(w.at(col, 7), row[7]);
          }
        }
    }
  }
  set_num_threads(saved);
}

}  // namespace
