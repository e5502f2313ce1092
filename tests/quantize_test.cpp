// kvdecode-quantize's library part (quantize.hpp): the per-tensor type choice
// against its rules and against llama.cpp's own files, and whole-model round
// trips from the shared llama2.c checkpoint, GGUF file and Hugging Face folder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

// kv_cache.hpp first: on this base cache_interface.hpp names CacheShape, which the
// umbrella header reaches only later (see the report to the integrator).
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/kvdecode.hpp"
#include "test_util.hpp"

using namespace kvd;
namespace fs = std::filesystem;

namespace {

const std::string kShared = KVDECODE_SHARED_DIR;
const std::string kModels = kShared + "/models/";

#define SKIP_IF_MISSING(path) \
  if (!fs::exists(path)) GTEST_SKIP() << "shared test file not found: " << (path) << " (../shared absent?)"

TypeChoiceContext ctx(int layers, int heads = 8, int kv = 8, bool has_output = true) {
  TypeChoiceContext c;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv;
  c.has_output = has_output;
  return c;
}
std::string blk(int l, const char* kind) { return "blk." + std::to_string(l) + "." + kind + ".weight"; }

/// A fresh temporary folder, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("kvd_quantize_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& n) const { return (path / n).string(); }
};

std::vector<int> prompt_ids() {
  std::ifstream in(kShared + "/reference/gguf/prompt.ids");
  std::vector<int> ids;
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

RowMatrix<float> prefill_logits(Transformer<float>& m, const std::vector<int>& ids) {
  KVCache<float> cache(m.config(), static_cast<int>(ids.size()));
  return m.prefill(ids, cache, true);
}

/// max |a - b| / max |a| over all entries.
double rel_max_diff(const RowMatrix<float>& a, const RowMatrix<float>& b) {
  double worst = 0, top = 0;
  for (long i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a.data()[i]) - b.data()[i]));
    top = std::max(top, std::abs(double(a.data()[i])));
  }
  return worst / top;
}

/// The checkpoint matrix a GGUF llama name stands for (llama2.c: no permutation).
const WeightMatrix* checkpoint_matrix(const ModelWeights<float>& w, const std::string& name) {
  if (name == "token_embd.weight") return &w.token_embedding;
  if (name == "output.weight") return &w.classifier;
  const TensorKind k = tensor_kind(name);
  if (k.layer < 0) return nullptr;
  const auto& L = w.layers[static_cast<std::size_t>(k.layer)];
  if (k.kind == "attn_q") return &L.wq;
  if (k.kind == "attn_k") return &L.wk;
  if (k.kind == "attn_v") return &L.wv;
  if (k.kind == "attn_output") return &L.wo;
  if (k.kind == "ffn_gate") return &L.w1;
  if (k.kind == "ffn_down") return &L.w2;
  if (k.kind == "ffn_up") return &L.w3;
  return nullptr;
}

}  // namespace

// ---- Scheme names -----------------------------------------------------------------

TEST(QuantScheme, ParsesEveryNameCaseInsensitively) {
  EXPECT_EQ(parse_quant_scheme("Q4_K_M"), QuantScheme::kQ4_K_M);
  EXPECT_EQ(parse_quant_scheme("q8_0"), QuantScheme::kQ8_0);
  EXPECT_EQ(parse_quant_scheme("bf16"), QuantScheme::kBF16);
  EXPECT_EQ(parse_quant_scheme("Q4_K"), QuantScheme::kQ4_K);
  EXPECT_EQ(quant_scheme_type(QuantScheme::kQ3_K_M), WeightType::kQ3_K);
  for (const char* n : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q3_K_M", "Q4_K",
                        "Q4_K_M", "Q5_K", "Q5_K_M", "Q6_K"})
    EXPECT_STREQ(quant_scheme_name(parse_quant_scheme(n)), n);
}

TEST(QuantScheme, FileTypesAreLlamaCppsCodes) {
  EXPECT_EQ(static_cast<std::uint32_t>(quant_scheme_file_type(QuantScheme::kF32)), 0u);
  EXPECT_EQ(static_cast<std::uint32_t>(quant_scheme_file_type(QuantScheme::kF16)), 1u);
  EXPECT_EQ(static_cast<std::uint32_t>(quant_scheme_file_type(QuantScheme::kQ8_0)), 7u);
  EXPECT_EQ(static_cast<std::uint32_t>(quant_scheme_file_type(QuantScheme::kQ4_K_M)), 15u);
  EXPECT_EQ(static_cast<std::uint32_t>(quant_scheme_file_type(QuantScheme::kQ6_K)), 18u);
  EXPECT_EQ(static_cast<std::uint32_t>(quant_scheme_file_type(QuantScheme::kBF16)), 32u);
}

TEST(QuantScheme, TableTypesAreSchemesWithLlamaCppsFileTypes) {
  // llama.h: LLAMA_FTYPE_MOSTLY_IQ4_NL = 25, _IQ4_XS = 30, _MXFP4 (mainline's MXFP4_MOE) = 38.
  struct Row { const char* name; WeightType type; std::uint32_t file_type; };
  for (const Row& r : {Row{"IQ4_NL", WeightType::kIQ4_NL, 25u}, Row{"IQ4_XS", WeightType::kIQ4_XS, 30u},
                       Row{"MXFP4", WeightType::kMXFP4, 38u}}) {
    const QuantScheme s = parse_quant_scheme(r.name);
    EXPECT_STREQ(quant_scheme_name(s), r.name);
    EXPECT_EQ(quant_scheme_type(s), r.type) << r.name;
    EXPECT_EQ(static_cast<std::uint32_t>(quant_scheme_file_type(s)), r.file_type) << r.name;
  }
  // iq4_xs falls back to iq4_nl on rows of 32s, then f16; the classifier gets q6_K.
  const auto c = ctx(6, 6, 6);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kIQ4_XS, blk(1, "attn_q"), {288, 288}, c), WeightType::kIQ4_NL);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kIQ4_XS, blk(1, "ffn_down"), {768, 288}, c), WeightType::kIQ4_XS);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kIQ4_XS, blk(1, "attn_q"), {48, 48}, c), WeightType::kF16);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kMXFP4, blk(1, "attn_q"), {288, 288}, c), WeightType::kMXFP4);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kIQ4_NL, "output.weight", {4096, 32000}, ctx(32)), WeightType::kQ6_K);
}

TEST(QuantScheme, UnknownNameListsTheAccepted) {
  try {
    parse_quant_scheme("Q9_K");
    FAIL() << "no throw";
  } catch (const ArgumentError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'Q9_K'"), std::string::npos) << m;
    EXPECT_NE(m.find("Q4_K_M"), std::string::npos) << m;
    EXPECT_NE(m.find("BF16"), std::string::npos) << m;
  }
  EXPECT_THROW(parse_quant_scheme(""), ArgumentError);
  EXPECT_THROW(parse_quant_scheme("q4_k_m "), ArgumentError);
}

// ---- Type choice ---------------------------------------------------------------------

TEST(TypeChoice, VectorsAndNormsStayF32) {
  for (QuantScheme s : {QuantScheme::kF16, QuantScheme::kQ4_K_M, QuantScheme::kQ8_0}) {
    EXPECT_EQ(choose_tensor_type(s, "output_norm.weight", {4096}, ctx(32)), WeightType::kF32);
    EXPECT_EQ(choose_tensor_type(s, blk(3, "attn_norm"), {4096}, ctx(32)), WeightType::kF32);
    EXPECT_EQ(choose_tensor_type(s, "rope_freqs.weight", {64}, ctx(32)), WeightType::kF32);
  }
  EXPECT_EQ(choose_tensor_type(QuantScheme::kF16, blk(0, "attn_q"), {4096, 4096}, ctx(32)), WeightType::kF16);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kBF16, "output.weight", {288, 32000}, ctx(6)), WeightType::kBF16);
}

TEST(TypeChoice, Q4_K_M_GivesAttnVAndFfnDownMoreBitsOnUseMoreBitsLayers) {
  // 32 layers: use_more_bits = layers 0..3, 28..31, and 4 + 3k + 2 = 6, 9, ..., 27.
  for (int l = 0; l < 32; ++l) {
    const bool more = l < 4 || l >= 28 || (l - 4) % 3 == 2;
    const WeightType want = more ? WeightType::kQ6_K : WeightType::kQ4_K;
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, blk(l, "attn_v"), {4096, 1024}, ctx(32)), want) << l;
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, blk(l, "ffn_down"), {11008, 4096}, ctx(32)), want) << l;
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ5_K_M, blk(l, "attn_v"), {4096, 1024}, ctx(32)),
              more ? WeightType::kQ6_K : WeightType::kQ5_K) << l;
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, blk(l, "attn_q"), {4096, 4096}, ctx(32)), WeightType::kQ4_K);
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, blk(l, "ffn_up"), {4096, 11008}, ctx(32)), WeightType::kQ4_K);
    // The plain type has no mix.
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K, blk(l, "attn_v"), {4096, 1024}, ctx(32)), WeightType::kQ4_K);
  }
  EXPECT_FALSE(detail::use_more_bits(4, 32));
  EXPECT_TRUE(detail::use_more_bits(6, 32));
  EXPECT_TRUE(detail::use_more_bits(31, 32));
}

TEST(TypeChoice, Q3_K_M_And_Q2_K_Mixes) {
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ3_K_M, blk(l, "attn_v"), {4096, 1024}, ctx(32)),
              l < 2 ? WeightType::kQ5_K : WeightType::kQ4_K) << l;
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ3_K_M, blk(l, "ffn_down"), {11008, 4096}, ctx(32)),
              l < 2 ? WeightType::kQ5_K : WeightType::kQ4_K) << l;
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ3_K_M, blk(l, "attn_output"), {4096, 4096}, ctx(32)), WeightType::kQ4_K);
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ3_K_M, blk(l, "ffn_gate"), {4096, 11008}, ctx(32)), WeightType::kQ3_K);
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ2_K, blk(l, "attn_output"), {4096, 4096}, ctx(32)), WeightType::kQ3_K);
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ2_K, blk(l, "ffn_down"), {11008, 4096}, ctx(32)), WeightType::kQ3_K);
    EXPECT_EQ(choose_tensor_type(QuantScheme::kQ2_K, blk(l, "attn_k"), {4096, 1024}, ctx(32)), WeightType::kQ2_K);
  }
  // attn_v under Q2_K: q4_K with >= 4 query heads per KV head, else q3_K.
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ2_K, blk(0, "attn_v"), {4096, 1024}, ctx(32, 32, 8)), WeightType::kQ4_K);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ2_K, blk(0, "attn_v"), {4096, 4096}, ctx(32, 32, 32)), WeightType::kQ3_K);
}

TEST(TypeChoice, ClassifierGetsQ6_KOrQ8_0) {
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, "output.weight", {4096, 32000}, ctx(32)), WeightType::kQ6_K);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_0, "output.weight", {4096, 32000}, ctx(32)), WeightType::kQ6_K);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ2_K, "output.weight", {4096, 32000}, ctx(32)), WeightType::kQ6_K);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ8_0, "output.weight", {4096, 32000}, ctx(32)), WeightType::kQ8_0);
  // Separate classifier: the embedding keeps the scheme's type; tied: it is the classifier.
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, "token_embd.weight", {4096, 32000}, ctx(32)), WeightType::kQ4_K);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, "token_embd.weight", {4096, 32000}, ctx(32, 8, 8, false)),
            WeightType::kQ6_K);
  // A classifier row not a multiple of 256 -> q8_0 (stories15M: 288).
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, "token_embd.weight", {288, 32000}, ctx(6, 6, 6, false)),
            WeightType::kQ8_0);
}

TEST(TypeChoice, RowsNotMultipleOfTheBlockFallBack) {
  // stories15M: d_model 288 = 9 * 32, not a multiple of 256.
  const auto c = ctx(6, 6, 6);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, blk(1, "attn_q"), {288, 288}, c), WeightType::kQ5_0);
  // 6 layers: use_more_bits picks layers 2 and 5 (q6_K -> q8_0), not 0 (q4_K -> q5_0).
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, blk(5, "attn_v"), {288, 288}, c), WeightType::kQ8_0);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, blk(2, "attn_v"), {288, 288}, c), WeightType::kQ8_0);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, blk(0, "attn_v"), {288, 288}, c), WeightType::kQ5_0);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ5_K_M, blk(1, "attn_q"), {288, 288}, c), WeightType::kQ5_1);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ6_K, blk(1, "attn_q"), {288, 288}, c), WeightType::kQ8_0);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ2_K, blk(1, "attn_q"), {288, 288}, c), WeightType::kQ4_0);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ3_K_M, blk(1, "attn_q"), {288, 288}, c), WeightType::kQ4_0);
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ3_K_M, blk(2, "attn_v"), {288, 288}, c), WeightType::kQ5_0);
  // stories15M's ffn_down has rows of 768 = 3 * 256: no fallback.
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_K_M, blk(1, "ffn_down"), {768, 288}, c), WeightType::kQ4_K);
  // Rows of 48 and 172: not a multiple of 32 either -> f16, for K and legacy types alike.
  for (QuantScheme s : {QuantScheme::kQ4_K_M, QuantScheme::kQ6_K, QuantScheme::kQ8_0, QuantScheme::kQ4_0, QuantScheme::kQ2_K}) {
    EXPECT_EQ(choose_tensor_type(s, blk(1, "attn_q"), {48, 48}, c), WeightType::kF16) << quant_scheme_name(s);
    EXPECT_EQ(choose_tensor_type(s, blk(1, "ffn_down"), {172, 64}, c), WeightType::kF16) << quant_scheme_name(s);
  }
  EXPECT_EQ(choose_tensor_type(QuantScheme::kQ4_0, blk(1, "attn_q"), {64, 64}, c), WeightType::kQ4_0);
  // Whatever the input, the choice divides the row into whole blocks.
  for (std::uint64_t n : {16u, 32u, 48u, 64u, 96u, 172u, 256u, 288u, 768u, 4096u})
    for (const auto& i : detail::quant_schemes()) {
      const WeightType t = choose_tensor_type(i.scheme, blk(0, "attn_v"), {n, 8}, c);
      EXPECT_EQ(n % weight_type_traits(t).block_size, 0u) << i.name << " " << n;
    }
}

// llama.cpp's llama-quantize wrote these files: our choice reproduces every tensor's type.
TEST(TypeChoice, MatchesLlamaCppsFiles) {
  const char* files[][2] = {{"rand256-Q2_K", "Q2_K"},     {"rand256-Q3_K_M", "Q3_K_M"}, {"rand256-Q4_K_M", "Q4_K_M"},
                            {"rand256-Q5_K_M", "Q5_K_M"}, {"rand256-Q6_K", "Q6_K"},     {"rand256-Q4_0", "Q4_0"},
                            {"rand256-Q4_1", "Q4_1"},     {"rand256-Q5_0", "Q5_0"},     {"rand256-Q5_1", "Q5_1"},
                            {"rand256-Q8_0", "Q8_0"},     {"rand256-F16", "F16"},       {"rand256-BF16", "BF16"},
                            {"stories260K-Q4_K_M", "Q4_K_M"}, {"stories260K-Q6_K", "Q6_K"},
                            {"stories260K-F16", "F16"}};
  int checked = 0;
  for (const auto& [file, scheme] : files) {
    const std::string path = kModels + "gguf/" + file + ".gguf";
    SKIP_IF_MISSING(path);
    const GGUFFile f = GGUFFile::open(path);
    TypeChoiceContext c;
    c.n_layers = static_cast<int>(f.get_u64("llama.block_count"));
    c.n_heads = static_cast<int>(f.get_u64("llama.attention.head_count"));
    c.n_kv_heads = static_cast<int>(f.get_u64("llama.attention.head_count_kv"));
    c.has_output = f.find_tensor("output.weight") != nullptr;
    const QuantScheme s = parse_quant_scheme(scheme);
    EXPECT_EQ(f.get_u64("general.file_type"), static_cast<std::uint64_t>(quant_scheme_file_type(s))) << file;
    for (const GGUFTensorInfo& t : f.tensors()) {
      const std::vector<std::uint64_t> ne(t.ne, t.ne + t.n_dims);
      EXPECT_EQ(weight_type_name(choose_tensor_type(s, t.name, ne, c)), weight_type_name(t.type)) << file << " " << t.name;
      ++checked;
    }
  }
  std::cout << "  " << checked << " tensor types agree with llama.cpp's\n";
}

TEST(TypeChoice, TensorKindParsesLayerAndKind) {
  EXPECT_EQ(tensor_kind("blk.12.ffn_down.weight").kind, "ffn_down");
  EXPECT_EQ(tensor_kind("blk.12.ffn_down.weight").layer, 12);
  EXPECT_EQ(tensor_kind("output.weight").kind, "output");
  EXPECT_EQ(tensor_kind("output.weight").layer, -1);
  EXPECT_EQ(tensor_kind("token_embd.weight").kind, "token_embd");
  EXPECT_EQ(tensor_kind("blk.x.attn_q.weight").layer, -1);
}

// ---- Whole models -------------------------------------------------------------------

TEST(Quantize, CheckpointRoundTrips) {
  const std::string bin = kModels + "stories260K.bin";
  SKIP_IF_MISSING(bin);
  TempDir dir;
  const ModelWeights<float> src = load_checkpoint<float>(bin);
  Transformer<float> ref(load_checkpoint<float>(bin));
  const std::vector<int> ids = prompt_ids();
  ASSERT_EQ(ids.size(), 40u);
  const RowMatrix<float> ref_logits = prefill_logits(ref, ids);

  // F32: the very same model, logits byte for byte.
  const std::string f32 = dir.file("f32.gguf");
  const QuantizeResult r32 = quantize_model(bin, f32, QuantScheme::kF32);
  EXPECT_EQ(r32.input_format, "llama2.c legacy");
  EXPECT_FALSE(r32.wrote_vocabulary);
  EXPECT_EQ(r32.file_bytes, fs::file_size(f32));
  {
    const GGUFFile g = GGUFFile::open(f32);
    EXPECT_EQ(g.get_string("general.architecture"), "llama");
    EXPECT_EQ(g.get_u64("general.file_type"), 0u);
    EXPECT_EQ(g.get_u64("llama.context_length"), 512u);
    EXPECT_EQ(g.get_u64("llama.rope.dimension_count"), 8u);
    EXPECT_EQ(g.find("tokenizer.ggml.tokens"), nullptr);
    EXPECT_EQ(g.find_tensor("output.weight"), nullptr);  // shared classifier stays shared
  }
  Transformer<float> m32(load_gguf_model<float>(f32));
  const RowMatrix<float> l32 = prefill_logits(m32, ids);
  ASSERT_EQ(l32.size(), ref_logits.size());
  EXPECT_EQ(std::memcmp(l32.data(), ref_logits.data(), sizeof(float) * static_cast<std::size_t>(l32.size())), 0);

  struct Case {
    QuantScheme scheme;
    double bound;
  };
  for (const Case& cs : {Case{QuantScheme::kQ8_0, 0.005}, Case{QuantScheme::kQ4_K_M, 0.2}}) {
    const std::string out = dir.file(std::string(quant_scheme_name(cs.scheme)) + ".gguf");
    const QuantizeResult r = quantize_model(bin, out, cs.scheme);
    const GGUFFile g = GGUFFile::open(out);
    EXPECT_EQ(g.get_u64("general.file_type"), static_cast<std::uint64_t>(quant_scheme_file_type(cs.scheme)));
    // Every matrix holds exactly dequantize(quantize(x)) of the source floats.
    int matrices = 0;
    for (const GGUFTensorInfo& t : g.tensors()) {
      const WeightMatrix* m = checkpoint_matrix(src, t.name);
      if (!m) {
        EXPECT_EQ(t.type, WeightType::kF32) << t.name;
        continue;
      }
      ++matrices;
      const long n = m->cols();
      ASSERT_EQ(t.ne[0], static_cast<std::uint64_t>(n)) << t.name;
      ASSERT_EQ(t.rows(), static_cast<std::uint64_t>(m->rows())) << t.name;
      const std::uint64_t rb = weight_row_bytes(t.type, t.ne[0]);
      std::vector<float> x(n), want(n), got(n);
      std::vector<unsigned char> q(rb);
      for (long row = 0; row < m->rows(); ++row) {
        m->dequantize_row(row, x.data());
        detail::quantize_row(t.type, x.data(), q.data(), n);
        detail::dequantize_row(t.type, q.data(), want.data(), n);
        detail::dequantize_row(t.type, g.tensor_data(t) + row * rb, got.data(), n);
        ASSERT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * n), 0) << t.name << " row " << row;
      }
    }
    EXPECT_EQ(matrices, 1 + 7 * 5);
    Transformer<float> mq(load_gguf_model<float>(out));
    const RowMatrix<float> lq = prefill_logits(mq, ids);
    const double d = rel_max_diff(l32, lq);
    std::cout << "  " << quant_scheme_name(cs.scheme) << ": " << r.file_bytes << " bytes, " << r.bits_per_weight()
              << " bits/weight, max |dlogit| / max |logit| vs F32 = " << d << "\n";
    EXPECT_GT(d, 0.0);
    EXPECT_LT(d, cs.bound);
    // Prefill of all but the last, then a decode step: the same bits as the one prefill.
    KVCache<float> cache(mq.config(), static_cast<int>(ids.size()));
    mq.prefill(std::vector<int>(ids.begin(), ids.end() - 1), cache);
    const auto step = mq.decode_step(ids.back(), cache);
    EXPECT_TRUE(kvd_test::same_bits(step.row(0).data(), lq.row(lq.rows() - 1).data(), mq.config().vocab_size));
  }
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string b(std::istreambuf_iterator<char>(in), {});
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// Every scheme writes a file kvdecode loads; the figures are docs/quantization.md's table.
// stories260K's rows (64, 172) make every K type fall back; rand256 (rows of 256
// and 768, untied classifier) exercises the K types themselves, and there
// llama.cpp's own llama-quantize output of the same model (reference logits in
// ../shared/reference/gguf) is the yardstick: our error stays within 1.3 times its.
TEST(Quantize, EverySchemeLoadsAndRuns) {
  const std::string ref_dir = kShared + "/reference/gguf/";
  for (const char* input : {"stories260K.bin", "gguf/rand256-F32.gguf"}) {
    const std::string in = kModels + input;
    SKIP_IF_MISSING(in);
    TempDir dir;
    const bool is_bin = std::string(input).find(".bin") != std::string::npos;
    Transformer<float> ref(is_bin ? load_checkpoint<float>(in) : load_gguf_model<float>(in));
    const std::vector<int> ids = prompt_ids();
    const RowMatrix<float> base = prefill_logits(ref, ids);
    std::cout << "  " << input << "\n  | type | file bytes | bits/weight | max abs dlogit / max abs logit | llama.cpp's |\n";
    for (const auto& i : detail::quant_schemes()) {
      const std::string out = dir.file(std::string(i.name) + ".gguf");
      const QuantizeResult r = quantize_model(in, out, i.scheme);
      Transformer<float> m(load_gguf_model<float>(out));
      const double d = rel_max_diff(base, prefill_logits(m, ids));
      double theirs = -1;
      const std::string a = ref_dir + "rand256-" + i.name + ".logits", b = ref_dir + "rand256-F32.logits";
      if (!is_bin && i.scheme != QuantScheme::kF32 && fs::exists(a) && fs::exists(b)) {
        const std::vector<float> q = read_floats(a), f = read_floats(b);
        double worst = 0, top = 0;
        for (std::size_t k = 0; k < f.size() && k < q.size(); ++k) {
          worst = std::max(worst, std::abs(double(q[k]) - f[k]));
          top = std::max(top, std::abs(double(f[k])));
        }
        theirs = worst / top;
      }
      std::cout << "  | " << i.name << " | " << r.file_bytes << " | " << r.bits_per_weight() << " | " << d << " | "
                << (theirs >= 0 ? std::to_string(theirs) : std::string("-")) << " |\n";
      if (i.scheme == QuantScheme::kF32) {
        EXPECT_EQ(d, 0.0) << input;
        continue;
      }
      EXPECT_GT(d, 0.0) << input << " " << i.name;
      if (theirs >= 0) EXPECT_LT(d, 1.3 * theirs) << input << " " << i.name;
      else EXPECT_LT(d, i.scheme == QuantScheme::kF16 || i.scheme == QuantScheme::kBF16 ? 0.02 : 0.5) << input << " " << i.name;
    }
  }
}

TEST(Quantize, ThreadCountDoesNotChangeTheBytes) {
  const std::string bin = kModels + "stories260K.bin";
  SKIP_IF_MISSING(bin);
  TempDir dir;
  QuantizeOptions one, two;
  one.threads = 1;
  two.threads = 2;
  quantize_model(bin, dir.file("1.gguf"), QuantScheme::kQ4_K_M, one);
  quantize_model(bin, dir.file("2.gguf"), QuantScheme::kQ4_K_M, two);
  auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(read(dir.file("1.gguf")), read(dir.file("2.gguf")));
}

TEST(Quantize, CheckpointWithTokenizerBinWritesTheVocabulary) {
  const std::string bin = kModels + "stories260K.bin", tok = kModels + "tok512.bin",
                    ref = kModels + "gguf/stories260K-F32.gguf";
  SKIP_IF_MISSING(bin);
  SKIP_IF_MISSING(tok);
  SKIP_IF_MISSING(ref);
  TempDir dir;
  QuantizeOptions o;
  o.tokenizer = tok;
  const QuantizeResult r = quantize_model(bin, dir.file("v.gguf"), QuantScheme::kQ8_0, o);
  EXPECT_TRUE(r.wrote_vocabulary);
  const GGUFFile ours = GGUFFile::open(dir.file("v.gguf")), theirs = GGUFFile::open(ref);
  // As llama.cpp's converter stored the same tok512.bin.
  EXPECT_EQ(ours.get_string_array("tokenizer.ggml.tokens"), theirs.get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(ours.get_i64_array("tokenizer.ggml.token_type"), theirs.get_i64_array("tokenizer.ggml.token_type"));
  EXPECT_EQ(ours.get_f64_array("tokenizer.ggml.scores"), theirs.get_f64_array("tokenizer.ggml.scores"));
  const auto a = load_tokenizer_gguf_file(dir.file("v.gguf")), b = load_tokenizer_gguf_file(ref);
  for (const char* text : {"Once upon a time", "The little dog ran to the park. It was happy!"})
    EXPECT_EQ(a->encode(text, true, false), b->encode(text, true, false)) << text;
}

TEST(Quantize, GGUFInputKeepsMetadataAndVocabulary) {
  const std::string in = kModels + "gguf/stories260K-F32.gguf";
  SKIP_IF_MISSING(in);
  TempDir dir;
  const std::string out = dir.file("q8.gguf");
  const QuantizeResult r = quantize_model(in, out, QuantScheme::kQ8_0);
  EXPECT_EQ(r.input_format, "gguf");
  EXPECT_TRUE(r.wrote_vocabulary);
  const GGUFFile a = GGUFFile::open(in), b = GGUFFile::open(out);
  EXPECT_EQ(b.get_u64("general.file_type"), 7u);
  for (const auto& [key, v] : a.metadata()) {
    if (key == "general.file_type") continue;
    const GGUFValue* w = b.find(key);
    ASSERT_NE(w, nullptr) << key;
    EXPECT_EQ(static_cast<int>(w->type), static_cast<int>(v.type)) << key;
    EXPECT_EQ(w->u, v.u) << key;
    EXPECT_EQ(w->i, v.i) << key;
    EXPECT_EQ(w->f, v.f) << key;
    EXPECT_EQ(w->s, v.s) << key;
    EXPECT_EQ(w->as, v.as) << key;
    EXPECT_EQ(w->af, v.af) << key;
    EXPECT_EQ(w->ai, v.ai) << key;
    EXPECT_EQ(w->au, v.au) << key;
  }
  EXPECT_EQ(b.tensors().size(), a.tensors().size());
  for (const GGUFTensorInfo& t : b.tensors()) {
    const GGUFTensorInfo* s = a.find_tensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(t.shape_string(), s->shape_string()) << t.name;
  }
  EXPECT_EQ(b.find_tensor("blk.0.attn_q.weight")->type, WeightType::kQ8_0);
  EXPECT_EQ(b.find_tensor("blk.0.ffn_down.weight")->type, WeightType::kF16);  // rows of 172
  const auto ta = load_tokenizer_gguf_file(in), tb = load_tokenizer_gguf_file(out);
  EXPECT_EQ(ta->encode("Once upon a time", true, false), tb->encode("Once upon a time", true, false));
  EXPECT_EQ(tb->encode("Once upon a time", true, false).size(), ta->encode("Once upon a time", true, false).size());
  // And the model runs close to the F32 file.
  const std::vector<int> ids = prompt_ids();
  Transformer<float> ma(load_gguf_model<float>(in)), mb(load_gguf_model<float>(out));
  const double d = rel_max_diff(prefill_logits(ma, ids), prefill_logits(mb, ids));
  std::cout << "  GGUF F32 -> Q8_0: max |dlogit| / max |logit| = " << d << "\n";
  EXPECT_LT(d, 0.02);
}

TEST(Quantize, GGUFInputOfAnotherArchitectureKeepsIt) {
  const std::string in = kModels + "gguf/qwen2arch-F32.gguf";
  SKIP_IF_MISSING(in);
  TempDir dir;
  const std::string out = dir.file("qwen2-q8.gguf");
  quantize_model(in, out, QuantScheme::kQ8_0);
  const GGUFFile g = GGUFFile::open(out);
  EXPECT_EQ(g.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(g.find_tensor("blk.0.attn_q.bias")->type, WeightType::kF32);
  EXPECT_EQ(g.find_tensor("blk.0.attn_q.weight")->type, WeightType::kQ8_0);
  Transformer<float> a(load_gguf_model<float>(in)), b(load_gguf_model<float>(out));
  EXPECT_TRUE(b.config().qkv_bias);
  const std::vector<int> ids = prompt_ids();
  const double d = rel_max_diff(prefill_logits(a, ids), prefill_logits(b, ids));
  std::cout << "  qwen2arch F32 -> Q8_0: max |dlogit| / max |logit| = " << d << "\n";
  EXPECT_GT(d, 0.0);
  EXPECT_LT(d, 0.05);
}

TEST(Quantize, HFFolderPermutesQKIntoTheLlamaLayout) {
  const std::string in = kModels + "hf/stories260K";
  SKIP_IF_MISSING(in + "/config.json");
  TempDir dir;
  const std::string out = dir.file("hf.gguf");
  const QuantizeResult r = quantize_model(in, out, QuantScheme::kF32);
  EXPECT_EQ(r.input_format, "hf");
  Transformer<float> hf(load_hf_model<float>(in)), gg(load_gguf_model<float>(out));
  EXPECT_EQ(gg.config().rope_style, RopeStyle::kAdjacent);
  const std::vector<int> ids = prompt_ids();
  const double d = rel_max_diff(prefill_logits(hf, ids), prefill_logits(gg, ids));
  std::cout << "  HF -> GGUF F32: max |dlogit| / max |logit| = " << d << "\n";
  EXPECT_LT(d, 1e-5);
  // The permuted q rows are the checkpoint's (llama2.c stores the llama layout).
  const std::string bin = kModels + "stories260K.bin";
  if (fs::exists(bin)) {
    const GGUFFile g = GGUFFile::open(out);
    const ModelWeights<float> w = load_checkpoint<float>(bin);
    const GGUFTensorInfo* q = g.find_tensor("blk.2.attn_q.weight");
    ASSERT_NE(q, nullptr);
    std::vector<float> x(64);
    for (long row = 0; row < 64; ++row) {
      w.layers[2].wq.dequantize_row(row, x.data());
      EXPECT_EQ(std::memcmp(x.data(), g.tensor_data(*q) + row * 256, 256), 0) << "row " << row;
    }
  }
}

/// Writes w (RoPE on halves, as Hugging Face stores q and k) as a Hugging Face folder
/// for `arch` (Qwen2ForCausalLM, Qwen3ForCausalLM, ...): config.json and one F32
/// model.safetensors, written here byte by byte from the format's definition.
void write_hf_folder(const fs::path& dir, const ModelWeights<float>& w, const std::string& arch) {
  const ModelConfig& c = w.config;
  std::vector<kvd_test::F32Tensor> ts;
  auto mat = [&](const std::string& n, const WeightMatrix& m) {
    kvd_test::F32Tensor t{n, {static_cast<std::uint64_t>(m.rows()), static_cast<std::uint64_t>(m.cols())}, {}};
    t.data.resize(static_cast<std::size_t>(m.rows() * m.cols()));
    for (long r = 0; r < m.rows(); ++r) m.dequantize_row(r, t.data.data() + r * m.cols());
    ts.push_back(std::move(t));
  };
  auto vec = [&](const std::string& n, const Vector<float>& v) {
    ts.push_back({n, {static_cast<std::uint64_t>(v.size())}, std::vector<float>(v.data(), v.data() + v.size())});
  };
  mat("model.embed_tokens.weight", w.token_embedding);
  vec("model.norm.weight", w.final_norm);
  if (!c.shared_classifier) mat("lm_head.weight", w.classifier);
  for (int l = 0; l < c.n_layers; ++l) {
    const auto& L = w.layers[static_cast<std::size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    mat(p + "self_attn.q_proj.weight", L.wq);
    mat(p + "self_attn.k_proj.weight", L.wk);
    mat(p + "self_attn.v_proj.weight", L.wv);
    mat(p + "self_attn.o_proj.weight", L.wo);
    if (c.qkv_bias) {
      vec(p + "self_attn.q_proj.bias", L.bq);
      vec(p + "self_attn.k_proj.bias", L.bk);
      vec(p + "self_attn.v_proj.bias", L.bv);
    }
    if (c.qk_norm) {
      vec(p + "self_attn.q_norm.weight", L.q_norm);
      vec(p + "self_attn.k_norm.weight", L.k_norm);
    }
    vec(p + "input_layernorm.weight", L.attn_norm);
    vec(p + "post_attention_layernorm.weight", L.ffn_norm);
    mat(p + "mlp.gate_proj.weight", L.w1);
    mat(p + "mlp.down_proj.weight", L.w2);
    mat(p + "mlp.up_proj.weight", L.w3);
  }
  kvd_test::write_safetensors_f32(dir / "model.safetensors", ts);
  std::ofstream cfg(dir / "config.json");
  cfg << "{\"architectures\":[\"" << arch << "\"],\"hidden_size\":" << c.d_model
      << ",\"intermediate_size\":" << c.hidden_dim << ",\"num_hidden_layers\":" << c.n_layers
      << ",\"num_attention_heads\":" << c.n_heads << ",\"num_key_value_heads\":" << c.n_kv_heads
      << ",\"head_dim\":" << c.head_dim << ",\"vocab_size\":" << c.vocab_size
      << ",\"max_position_embeddings\":" << c.max_seq_len << ",\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0"
      << ",\"tie_word_embeddings\":" << (c.shared_classifier ? "true" : "false")
      << ",\"attention_bias\":" << (c.qkv_bias ? "true" : "false") << "}";
}

TEST(Quantize, QwenFoldersBecomeQwen2AndQwen3GGUFWithIdenticalLogits) {
  for (const bool qwen3 : {false, true}) {
    SCOPED_TRACE(qwen3 ? "qwen3" : "qwen2");
    ModelConfig c;
    c.vocab_size = 96; c.d_model = 64; c.n_layers = 2; c.n_heads = 4; c.n_kv_heads = 2; c.head_dim = 16;
    c.hidden_dim = 80; c.max_seq_len = 32; c.rope_style = RopeStyle::kHalves; c.rope_theta = 1e6; c.norm_eps = 1e-6;
    c.qkv_bias = !qwen3; c.qk_norm = qwen3; c.shared_classifier = qwen3;
    TempDir dir;
    fs::create_directories(dir.path / "hf");
    write_hf_folder(dir.path / "hf", ModelWeights<float>::random(c, 11), qwen3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM");
    const std::string out = dir.file("q.gguf");
    const QuantizeResult r = quantize_model((dir.path / "hf").string(), out, QuantScheme::kF32);
    EXPECT_EQ(r.input_format, "hf");
    EXPECT_EQ(GGUFFile::open(out).get_string("general.architecture"), qwen3 ? "qwen3" : "qwen2");
    Transformer<float> hf(load_hf_model<float>((dir.path / "hf").string())), gg(load_gguf_model<float>(out));
    EXPECT_EQ(gg.config().rope_style, RopeStyle::kHalves);
    EXPECT_EQ(gg.config().qkv_bias, !qwen3);
    EXPECT_EQ(gg.config().qk_norm, qwen3);
    // The same weights, RoPE style, biases and norms: the same computation, bit for bit.
    const std::vector<int> ids = {1, 5, 17, 42, 3, 88, 9, 60};
    const RowMatrix<float> a = hf.forward_reference(ids), b = gg.forward_reference(ids);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(float)), 0);
    // A quantized scheme loads and runs too.
    const std::string q8 = dir.file("q8.gguf");
    quantize_model((dir.path / "hf").string(), q8, QuantScheme::kQ8_0);
    Transformer<float> gq(load_gguf_model<float>(q8));
    EXPECT_LT(rel_max_diff(gq.forward_reference(ids), a), 0.05);
  }
}

/// The ConfigError message of f(), or "" when it does not throw one.
template <class F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(QuantizeBadInput, WhatNoGGUFArchitectureExpressesIsRefusedNamingIt) {
  ModelConfig c;
  c.vocab_size = 96; c.d_model = 64; c.n_layers = 1; c.n_heads = 4; c.n_kv_heads = 2; c.head_dim = 16;
  c.hidden_dim = 80; c.max_seq_len = 32; c.rope_style = RopeStyle::kHalves;
  EXPECT_EQ(detail::gguf_arch_for(c), "llama");
  c.qkv_bias = c.qk_norm = true;
  EXPECT_NE(config_error_of([&] { detail::gguf_arch_for(c); }).find("both q/k/v biases (qwen2) and q/k norms (qwen3)"), std::string::npos);
  c.qk_norm = false;
  c.rope_style = RopeStyle::kAdjacent;
  EXPECT_NE(config_error_of([&] { detail::gguf_arch_for(c); }).find("GGUF qwen2: it rotates adjacent pairs"), std::string::npos);
  c.qkv_bias = false;
  c.sliding_window = 8;
  EXPECT_NE(config_error_of([&] { detail::gguf_arch_for(c); }).find("sliding_window = 8"), std::string::npos);
}

// ---- Bad input --------------------------------------------------------------------------

TEST(QuantizeBadInput, MissingInputIsAFileErrorNamingIt) {
  TempDir dir;
  try {
    quantize_model(dir.file("absent.bin"), dir.file("out.gguf"), QuantScheme::kQ8_0);
    FAIL() << "no throw";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("absent.bin"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
}

TEST(QuantizeBadInput, NeitherFormatIsAFormatErrorNamingIt) {
  TempDir dir;
  {
    std::ofstream f(dir.file("junk.txt"));
    f << "this is not a model at all, just some text that goes on for a while\n";
  }
  try {
    quantize_model(dir.file("junk.txt"), dir.file("out.gguf"), QuantScheme::kQ8_0);
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("junk.txt"), std::string::npos) << m;
    EXPECT_NE(m.find("neither"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
  fs::create_directories(dir.file("empty_folder"));
  EXPECT_THROW(quantize_model(dir.file("empty_folder"), dir.file("out.gguf"), QuantScheme::kQ8_0), FormatError);
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
}

TEST(QuantizeBadInput, TruncatedGGUFIsAFormatError) {
  const std::string in = kModels + "gguf/stories260K-F32.gguf";
  SKIP_IF_MISSING(in);
  TempDir dir;
  {
    std::ifstream src(in, std::ios::binary);
    std::string bytes(std::istreambuf_iterator<char>(src), {});
    std::ofstream f(dir.file("cut.gguf"), std::ios::binary);
    f << bytes.substr(0, bytes.size() / 2);
  }
  EXPECT_THROW(quantize_model(dir.file("cut.gguf"), dir.file("out.gguf"), QuantScheme::kQ8_0), FormatError);
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
}

TEST(QuantizeBadInput, UnwritableOutputIsAFileError) {
  const std::string bin = kModels + "stories260K.bin";
  SKIP_IF_MISSING(bin);
  TempDir dir;
  EXPECT_THROW(quantize_model(bin, dir.file("no/such/dir/out.gguf"), QuantScheme::kQ8_0), FileError);
}

TEST(QuantizeBadInput, TensorOfATypeWithoutDequantizationIsNamed) {
  TempDir dir;
  GGUFWriter w;
  w.set_string("general.architecture", "llama");
  std::vector<unsigned char> bytes(110 * 4, 0);  // iq3_s: 110 bytes per 256 values; 4 rows of 256
  w.add_tensor("blk.0.attn_q.weight", WeightType::kIQ3_S, {256, 4}, bytes.data(), bytes.size());
  w.write(dir.file("iq.gguf"));
  try {
    quantize_model(dir.file("iq.gguf"), dir.file("out.gguf"), QuantScheme::kQ8_0);
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("blk.0.attn_q.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("iq3_s"), std::string::npos) << m;
    EXPECT_NE(m.find("iq.gguf"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
}

TEST(QuantizeBadInput, TokenizerOfAnotherVocabularyIsRefused) {
  const std::string bin = kModels + "stories260K.bin", tok = kModels + "tokenizer.bin";  // 32000 pieces, model has 512
  SKIP_IF_MISSING(bin);
  SKIP_IF_MISSING(tok);
  TempDir dir;
  QuantizeOptions o;
  o.tokenizer = tok;
  EXPECT_THROW(quantize_model(bin, dir.file("out.gguf"), QuantScheme::kQ8_0, o), FileError);
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
  o.tokenizer = dir.file("absent.bin");
  EXPECT_THROW(quantize_model(bin, dir.file("out.gguf"), QuantScheme::kQ8_0, o), FileError);
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
}
