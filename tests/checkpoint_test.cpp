// Tests for kvdecode/io/checkpoint.hpp: the real stories260K file, round trips in
// both formats and scalar types, byte layouts checked against offsets computed
// here (independently of the library's tensor order), and one test per kind of
// malformed file. Every rejection must be a FileError naming the path and the problem.
#include "kvdecode/io/checkpoint.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

namespace fs = std::filesystem;
using kvd::CheckpointFormat;
using kvd::ModelConfig;
using kvd::ModelWeights;

static_assert(std::is_base_of_v<kvd::Error, kvd::FileError>, "FileError must be catchable as kvd::Error");

const std::string kStoriesPath = std::string(KVDECODE_SHARED_DIR) + "/models/stories260K.bin";

using Bytes = std::vector<unsigned char>;

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

void put_i32(Bytes& b, std::size_t at, std::int32_t v) {
  if (b.size() < at + 4) b.resize(at + 4, 0);
  std::memcpy(b.data() + at, &v, 4);  // the test host is little-endian, like the format
}

std::int32_t get_i32(const Bytes& b, std::size_t at) {
  std::int32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

/// float32 number `index` of the tensor data that starts at byte `data_start`.
float get_f32(const Bytes& b, std::size_t data_start, std::uint64_t index) {
  float v;
  std::memcpy(&v, b.data() + data_start + 4 * index, 4);
  return v;
}

/// The 7 header fields in llama2.c order: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len.
using Fields = std::array<std::int32_t, 7>;

Bytes legacy_header(const Fields& f) {
  Bytes b;
  for (int i = 0; i < 7; ++i) put_i32(b, 4 * i, f[i]);
  return b;
}

Bytes v1_header(std::int32_t version, const Fields& f, unsigned char shared) {
  Bytes b(256, 0);
  const std::uint32_t magic = 0x616b3432;
  std::memcpy(b.data(), &magic, 4);
  put_i32(b, 4, version);
  for (int i = 0; i < 7; ++i) put_i32(b, 8 + 4 * i, f[i]);
  b[36] = shared;
  return b;
}

/// A small GQA model: V=32, D=16, L=2, H=4, Hk=2, Dh=4, F=24, S=8.
ModelConfig small_config(bool shared) {
  ModelConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.hidden_dim = 24;
  c.max_seq_len = 8;
  c.shared_classifier = shared;
  return c;
}

/// Exact comparison of one tensor; on mismatch prints the shape or the largest difference.
template <class M>
void expect_tensor_eq(const std::string& name, const M& a, const M& b) {
  ASSERT_EQ(a.rows(), b.rows()) << name;
  ASSERT_EQ(a.cols(), b.cols()) << name;
  double max_diff = 0;
  long first = -1;
  for (long i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a.data()[i]) - static_cast<double>(b.data()[i]));
    if (a.data()[i] != b.data()[i] && first < 0) first = i;
    max_diff = std::max(max_diff, d);
  }
  EXPECT_EQ(first, -1) << name << ": first mismatch at flat index " << first << ", largest difference " << max_diff;
}

/// Exact comparison of two weight matrices: storage type, shape and every byte.
void expect_tensor_eq(const std::string& name, const kvd::WeightMatrix& a, const kvd::WeightMatrix& b) {
  ASSERT_EQ(a.type(), b.type()) << name;
  ASSERT_EQ(a.rows(), b.rows()) << name;
  ASSERT_EQ(a.cols(), b.cols()) << name;
  EXPECT_EQ(a.bytes() ? std::memcmp(a.data(), b.data(), a.bytes()) : 0, 0) << name << ": bytes differ";
}

template <class T>
void expect_weights_eq(const ModelWeights<T>& a, const ModelWeights<T>& b) {
  EXPECT_EQ(a.config, b.config) << a.config.summary() << " vs " << b.config.summary();
  expect_tensor_eq("token_embedding", a.token_embedding, b.token_embedding);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (std::size_t l = 0; l < a.layers.size(); ++l) {
    const std::string at = "[layer " + std::to_string(l) + "]";
    expect_tensor_eq("attn_norm" + at, a.layers[l].attn_norm, b.layers[l].attn_norm);
    expect_tensor_eq("wq" + at, a.layers[l].wq, b.layers[l].wq);
    expect_tensor_eq("wk" + at, a.layers[l].wk, b.layers[l].wk);
    expect_tensor_eq("wv" + at, a.layers[l].wv, b.layers[l].wv);
    expect_tensor_eq("wo" + at, a.layers[l].wo, b.layers[l].wo);
    expect_tensor_eq("ffn_norm" + at, a.layers[l].ffn_norm, b.layers[l].ffn_norm);
    expect_tensor_eq("w1" + at, a.layers[l].w1, b.layers[l].w1);
    expect_tensor_eq("w2" + at, a.layers[l].w2, b.layers[l].w2);
    expect_tensor_eq("w3" + at, a.layers[l].w3, b.layers[l].w3);
  }
  expect_tensor_eq("final_norm", a.final_norm, b.final_norm);
  expect_tensor_eq("classifier", a.classifier, b.classifier);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("kvd_checkpoint_" + std::string(info->name()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  /// Saves random weights of small_config(shared) as `fmt` and returns the path.
  std::string save_small(CheckpointFormat fmt, bool shared, const std::string& name) {
    const auto w = ModelWeights<float>::random(small_config(shared), 7);
    const std::string path = file(name);
    kvd::save_checkpoint(w, path, fmt);
    return path;
  }

  /// Both entry points must throw FileError whose message names `path` and every keyword.
  static void expect_rejected(const std::string& path, const std::vector<std::string>& keywords) {
    auto check = [&](const char* api, auto&& call) {
      try {
        call();
        ADD_FAILURE() << api << "(" << path << ") did not throw";
      } catch (const kvd::FileError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(path), std::string::npos) << api << " message does not name the path: " << m;
        for (const auto& k : keywords)
          EXPECT_NE(m.find(k), std::string::npos) << api << " message lacks \"" << k << "\": " << m;
      } catch (const std::exception& e) {
        ADD_FAILURE() << api << " threw something other than FileError: " << e.what();
      }
    };
    check("read_checkpoint_info", [&] { kvd::read_checkpoint_info(path); });
    check("load_checkpoint<float>", [&] { kvd::load_checkpoint<float>(path); });
    check("load_checkpoint<double>", [&] { kvd::load_checkpoint<double>(path); });
  }

  fs::path dir_;
};

// ---------------------------------------------------------------------------
// The real model file.

TEST_F(CheckpointTest, Stories260KLoads) {
  if (!fs::exists(kStoriesPath)) GTEST_SKIP() << "shared model file not found: " << kStoriesPath;
  const auto w = kvd::load_checkpoint<float>(kStoriesPath);
  const ModelConfig& c = w.config;
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_NO_THROW(w.validate());

  // Offsets (in floats after the 28-byte header) from the format notes in models/README.md.
  const std::uint64_t D = 64, F = 172, L = 5, V = 512, S = 512, Dh = 8, KV = 4 * Dh;
  const std::uint64_t emb = 0, attn_norm = emb + V * D, wq = attn_norm + L * D, wk = wq + L * D * D,
                      wv = wk + L * KV * D, wo = wv + L * KV * D, ffn_norm = wo + L * D * D, w1 = ffn_norm + L * D,
                      w2 = w1 + L * F * D, w3 = w2 + L * D * F, final_norm = w3 + L * F * D, rope = final_norm + D,
                      end = rope + 2 * S * (Dh / 2);
  const Bytes b = read_bytes(kStoriesPath);
  ASSERT_EQ(b.size(), 28 + 4 * end);
  const std::size_t h = 28;

  EXPECT_EQ(w.token_embedding(3, 5), get_f32(b, h, emb + 3 * D + 5));
  EXPECT_EQ(w.token_embedding(511, 63), get_f32(b, h, emb + 511 * D + 63));
  EXPECT_EQ(w.layers[2].attn_norm(7), get_f32(b, h, attn_norm + 2 * D + 7));
  EXPECT_EQ(w.layers[4].wq(63, 0), get_f32(b, h, wq + 4 * D * D + 63 * D + 0));
  EXPECT_EQ(w.layers[1].wk(31, 63), get_f32(b, h, wk + 1 * KV * D + 31 * D + 63));
  EXPECT_EQ(w.layers[3].wv(10, 20), get_f32(b, h, wv + 3 * KV * D + 10 * D + 20));
  EXPECT_EQ(w.layers[0].wo(5, 60), get_f32(b, h, wo + 0 * D * D + 5 * D + 60));
  EXPECT_EQ(w.layers[4].ffn_norm(63), get_f32(b, h, ffn_norm + 4 * D + 63));
  EXPECT_EQ(w.layers[2].w1(171, 1), get_f32(b, h, w1 + 2 * F * D + 171 * D + 1));
  EXPECT_EQ(w.layers[4].w2(63, 171), get_f32(b, h, w2 + 4 * D * F + 63 * F + 171));
  EXPECT_EQ(w.layers[0].w3(100, 30), get_f32(b, h, w3 + 0 * F * D + 100 * D + 30));
  EXPECT_EQ(w.final_norm(0), get_f32(b, h, final_norm + 0));
  EXPECT_EQ(w.final_norm(63), get_f32(b, h, final_norm + 63));
  EXPECT_EQ(&w.output_matrix(), &w.token_embedding);

  // The double load holds exactly the same values.
  const auto wd = kvd::load_checkpoint<double>(kStoriesPath);
  expect_weights_eq(wd, w.cast<double>());
}

TEST_F(CheckpointTest, Stories260KInfoAgreesWithLoad) {
  if (!fs::exists(kStoriesPath)) GTEST_SKIP() << "shared model file not found: " << kStoriesPath;
  const kvd::CheckpointInfo info = kvd::read_checkpoint_info(kStoriesPath);
  const auto w = kvd::load_checkpoint<float>(kStoriesPath);
  EXPECT_EQ(info.format, CheckpointFormat::kLlama2cLegacy);
  EXPECT_EQ(info.config, w.config);
  EXPECT_EQ(info.file_bytes, fs::file_size(kStoriesPath));
  EXPECT_EQ(info.file_bytes, 1056540u);
  EXPECT_EQ(info.weight_bytes, 4 * w.config.n_params());
}

// ---------------------------------------------------------------------------
// Round trips: save -> load gives identical tensors.

template <class T>
void round_trip(const std::string& dir, CheckpointFormat fmt) {
  for (bool shared : {true, false}) {
    SCOPED_TRACE(shared ? "shared classifier" : "separate classifier");
    // Random float weights widened to T, so every value is exactly representable in float32.
    const auto w = ModelWeights<float>::random(small_config(shared), shared ? 11 : 12).template cast<T>();
    const std::string path = dir + (shared ? "/shared.bin" : "/separate.bin");
    kvd::save_checkpoint(w, path, fmt);
    const auto loaded = kvd::load_checkpoint<T>(path);
    expect_weights_eq(loaded, w);
    const kvd::CheckpointInfo info = kvd::read_checkpoint_info(path);
    EXPECT_EQ(info.format, fmt);
    EXPECT_EQ(info.config, w.config);
    EXPECT_FALSE(fs::exists(path + ".tmp")) << "temporary file left behind";
  }
}

TEST_F(CheckpointTest, RoundTripLegacyFloat) { round_trip<float>(dir_.string(), CheckpointFormat::kLlama2cLegacy); }
TEST_F(CheckpointTest, RoundTripLegacyDouble) { round_trip<double>(dir_.string(), CheckpointFormat::kLlama2cLegacy); }
TEST_F(CheckpointTest, RoundTripV1Float) { round_trip<float>(dir_.string(), CheckpointFormat::kLlama2cV1); }
TEST_F(CheckpointTest, RoundTripV1Double) { round_trip<double>(dir_.string(), CheckpointFormat::kLlama2cV1); }

TEST_F(CheckpointTest, SavingDoubleRoundsToFloat32) {
  const auto w = ModelWeights<double>::random(small_config(false), 5);
  const std::string path = file("double.bin");
  kvd::save_checkpoint(w, path, CheckpointFormat::kLlama2cV1);
  expect_weights_eq(kvd::load_checkpoint<double>(path), w.cast<float>().cast<double>());
}

TEST_F(CheckpointTest, ReadInfoAgreesWithLoad) {
  for (auto fmt : {CheckpointFormat::kLlama2cLegacy, CheckpointFormat::kLlama2cV1}) {
    for (bool shared : {true, false}) {
      SCOPED_TRACE(std::string(kvd::checkpoint_format_name(fmt)) + (shared ? ", shared" : ", separate"));
      const std::string path = save_small(fmt, shared, "m.bin");
      const kvd::CheckpointInfo info = kvd::read_checkpoint_info(path);
      const auto w = kvd::load_checkpoint<float>(path);
      EXPECT_EQ(info.format, fmt);
      EXPECT_EQ(info.config, w.config);
      EXPECT_EQ(info.file_bytes, fs::file_size(path));
      EXPECT_EQ(info.weight_bytes, 4 * w.config.n_params());
      const std::uint64_t header = fmt == CheckpointFormat::kLlama2cV1 ? 256 : 28;
      const std::uint64_t rope = fmt == CheckpointFormat::kLlama2cV1 ? 0 : 2 * 8 * (4 / 2) * 4;
      EXPECT_EQ(info.file_bytes, header + info.weight_bytes + rope);
    }
  }
}

// ---------------------------------------------------------------------------
// Byte layouts of what save_checkpoint writes, checked at offsets computed here.

TEST_F(CheckpointTest, LegacyLayoutMatchesFormatNotes) {
  const auto w = ModelWeights<float>::random(small_config(false), 3);
  const std::string path = file("legacy.bin");
  kvd::save_checkpoint(w, path, CheckpointFormat::kLlama2cLegacy);
  const Bytes b = read_bytes(path);
  EXPECT_EQ(get_i32(b, 0), 16);
  EXPECT_EQ(get_i32(b, 4), 24);
  EXPECT_EQ(get_i32(b, 8), 2);
  EXPECT_EQ(get_i32(b, 12), 4);
  EXPECT_EQ(get_i32(b, 16), 2);
  EXPECT_EQ(get_i32(b, 20), -32) << "separate classifier is flagged by a negative vocab_size";
  EXPECT_EQ(get_i32(b, 24), 8);

  const std::uint64_t D = 16, F = 24, L = 2, V = 32, S = 8, Dh = 4, KV = 2 * Dh;
  const std::uint64_t emb = 0, attn_norm = emb + V * D, wq = attn_norm + L * D, wk = wq + L * D * D,
                      wv = wk + L * KV * D, wo = wv + L * KV * D, ffn_norm = wo + L * D * D, w1 = ffn_norm + L * D,
                      w2 = w1 + L * F * D, w3 = w2 + L * D * F, final_norm = w3 + L * F * D, cos = final_norm + D,
                      sin = cos + S * (Dh / 2), cls = sin + S * (Dh / 2), end = cls + V * D;
  ASSERT_EQ(b.size(), 28 + 4 * end);
  const std::size_t h = 28;
  EXPECT_EQ(get_f32(b, h, emb + 31 * D + 15), w.token_embedding(31, 15));
  EXPECT_EQ(get_f32(b, h, attn_norm + 1 * D + 2), w.layers[1].attn_norm(2));
  EXPECT_EQ(get_f32(b, h, wq + 1 * D * D + 3 * D + 4), w.layers[1].wq(3, 4));
  EXPECT_EQ(get_f32(b, h, wk + 1 * KV * D + 7 * D + 15), w.layers[1].wk(7, 15));
  EXPECT_EQ(get_f32(b, h, wv + 0 * KV * D + 2 * D + 9), w.layers[0].wv(2, 9));
  EXPECT_EQ(get_f32(b, h, wo + 1 * D * D + 15 * D + 0), w.layers[1].wo(15, 0));
  EXPECT_EQ(get_f32(b, h, ffn_norm + 0 * D + 5), w.layers[0].ffn_norm(5));
  EXPECT_EQ(get_f32(b, h, w1 + 1 * F * D + 23 * D + 1), w.layers[1].w1(23, 1));
  EXPECT_EQ(get_f32(b, h, w2 + 0 * D * F + 15 * F + 23), w.layers[0].w2(15, 23));
  EXPECT_EQ(get_f32(b, h, w3 + 1 * F * D + 0 * D + 8), w.layers[1].w3(0, 8));
  EXPECT_EQ(get_f32(b, h, final_norm + 15), w.final_norm(15));
  EXPECT_EQ(get_f32(b, h, cls + 0), w.classifier(0, 0));
  EXPECT_EQ(get_f32(b, h, cls + 31 * D + 15), w.classifier(31, 15));
  // RoPE tables (S, Dh/2): angle pos * 10000^(-2i/Dh); frequency 1 for i = 0, 1/100 for i = 1.
  EXPECT_EQ(get_f32(b, h, cos + 0), 1.0f);
  EXPECT_EQ(get_f32(b, h, sin + 0), 0.0f);
  EXPECT_EQ(get_f32(b, h, cos + 1 * 2 + 0), static_cast<float>(std::cos(1.0)));
  EXPECT_EQ(get_f32(b, h, sin + 1 * 2 + 0), static_cast<float>(std::sin(1.0)));
  EXPECT_EQ(get_f32(b, h, sin + 7 * 2 + 1), static_cast<float>(std::sin(7.0 / 100.0)));
}

TEST_F(CheckpointTest, V1LayoutMatchesExportPy) {
  const auto w = ModelWeights<float>::random(small_config(false), 4);
  const std::string path = file("v1.bin");
  kvd::save_checkpoint(w, path, CheckpointFormat::kLlama2cV1);
  const Bytes b = read_bytes(path);
  ASSERT_GE(b.size(), 256u);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "24ka") << "magic 0x616b3432 stored little-endian";
  EXPECT_EQ(get_i32(b, 4), 1);
  const Fields expect = {16, 24, 2, 4, 2, 32, 8};  // vocab_size stays positive in v1
  for (int i = 0; i < 7; ++i) EXPECT_EQ(get_i32(b, 8 + 4 * i), expect[i]) << "header field " << i;
  EXPECT_EQ(b[36], 0) << "shared_classifier flag";
  for (std::size_t i = 37; i < 256; ++i) ASSERT_EQ(b[i], 0) << "header padding byte " << i;

  // version1_export order: all attention norms, all ffn norms, final norm, embedding,
  // then wq, wk, wv, wo, w1, w2, w3 for all layers each, then the classifier.
  const std::uint64_t D = 16, F = 24, L = 2, V = 32, KV = 8;
  const std::uint64_t attn_norm = 0, ffn_norm = attn_norm + L * D, final_norm = ffn_norm + L * D,
                      emb = final_norm + D, wq = emb + V * D, wk = wq + L * D * D, wv = wk + L * KV * D,
                      wo = wv + L * KV * D, w1 = wo + L * D * D, w2 = w1 + L * F * D, w3 = w2 + L * D * F,
                      cls = w3 + L * F * D, end = cls + V * D;
  ASSERT_EQ(b.size(), 256 + 4 * end);
  const std::size_t h = 256;
  EXPECT_EQ(get_f32(b, h, attn_norm + 1 * D + 3), w.layers[1].attn_norm(3));
  EXPECT_EQ(get_f32(b, h, ffn_norm + 0 * D + 15), w.layers[0].ffn_norm(15));
  EXPECT_EQ(get_f32(b, h, final_norm + 7), w.final_norm(7));
  EXPECT_EQ(get_f32(b, h, emb + 5 * D + 6), w.token_embedding(5, 6));
  EXPECT_EQ(get_f32(b, h, wq + 1 * D * D + 2 * D + 3), w.layers[1].wq(2, 3));
  EXPECT_EQ(get_f32(b, h, wk + 0 * KV * D + 7 * D + 1), w.layers[0].wk(7, 1));
  EXPECT_EQ(get_f32(b, h, wv + 1 * KV * D + 0 * D + 0), w.layers[1].wv(0, 0));
  EXPECT_EQ(get_f32(b, h, wo + 0 * D * D + 9 * D + 10), w.layers[0].wo(9, 10));
  EXPECT_EQ(get_f32(b, h, w1 + 1 * F * D + 20 * D + 11), w.layers[1].w1(20, 11));
  EXPECT_EQ(get_f32(b, h, w2 + 1 * D * F + 3 * F + 22), w.layers[1].w2(3, 22));
  EXPECT_EQ(get_f32(b, h, w3 + 0 * F * D + 23 * D + 15), w.layers[0].w3(23, 15));
  EXPECT_EQ(get_f32(b, h, cls + 30 * D + 2), w.classifier(30, 2));
}

// ---------------------------------------------------------------------------
// save_checkpoint failures.

TEST_F(CheckpointTest, SaveRejectsConfigTheFormatCannotExpress) {
  ModelConfig c = small_config(true);
  c.head_dim = 8;  // n_heads * head_dim = 32 != d_model = 16: llama2.c derives head_dim = dim / n_heads
  const auto w = ModelWeights<float>::random(c, 1);
  const std::string path = file("bad.bin");
  try {
    kvd::save_checkpoint(w, path, CheckpointFormat::kLlama2cV1);
    ADD_FAILURE() << "save_checkpoint did not throw";
  } catch (const kvd::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(CheckpointTest, SaveIntoMissingDirectoryFails) {
  const auto w = ModelWeights<float>::random(small_config(true), 1);
  const std::string path = file("no_such_dir/m.bin");
  try {
    kvd::save_checkpoint(w, path, CheckpointFormat::kLlama2cLegacy);
    ADD_FAILURE() << "save_checkpoint did not throw";
  } catch (const kvd::FileError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, FailedSaveLeavesExistingFileUntouched) {
  const std::string path = save_small(CheckpointFormat::kLlama2cLegacy, true, "m.bin");
  const Bytes before = read_bytes(path);
  ModelConfig c = small_config(true);
  c.rope_theta = 500000.0;  // not expressible in a llama2.c file
  EXPECT_THROW(kvd::save_checkpoint(ModelWeights<float>::random(c, 2), path, CheckpointFormat::kLlama2cV1),
               kvd::ConfigError);
  EXPECT_EQ(read_bytes(path), before);
}

// ---------------------------------------------------------------------------
// Malformed files: one test per problem. Every one must fail before allocating tensors.

TEST_F(CheckpointTest, TruncatedByOneByte) {
  for (auto fmt : {CheckpointFormat::kLlama2cLegacy, CheckpointFormat::kLlama2cV1}) {
    SCOPED_TRACE(kvd::checkpoint_format_name(fmt));
    const std::string path = save_small(fmt, false, "m.bin");
    const auto size = fs::file_size(path);
    fs::resize_file(path, size - 1);
    expect_rejected(path, {"truncated", std::to_string(size - 1), std::to_string(size)});
  }
}

TEST_F(CheckpointTest, ExtendedByOneByte) {
  for (auto fmt : {CheckpointFormat::kLlama2cLegacy, CheckpointFormat::kLlama2cV1}) {
    SCOPED_TRACE(kvd::checkpoint_format_name(fmt));
    const std::string path = save_small(fmt, true, "m.bin");
    const auto size = fs::file_size(path);
    fs::resize_file(path, size + 1);
    expect_rejected(path, {"extra", std::to_string(size + 1), std::to_string(size)});
  }
}

TEST_F(CheckpointTest, HeaderShorterThan28Bytes) {
  const std::string path = file("short.bin");
  Bytes b = legacy_header({64, 172, 5, 8, 4, 512, 512});
  b.resize(27);
  write_bytes(path, b);
  expect_rejected(path, {"header", "27 bytes"});
}

TEST_F(CheckpointTest, EmptyFile) {
  const std::string path = file("empty.bin");
  write_bytes(path, {});
  expect_rejected(path, {"empty"});
}

TEST_F(CheckpointTest, ZeroDim) {
  const std::string path = file("m.bin");
  write_bytes(path, legacy_header({0, 172, 5, 8, 4, 512, 512}));
  expect_rejected(path, {"dim = 0", "positive"});
}

TEST_F(CheckpointTest, NegativeNLayers) {
  const std::string path = file("m.bin");
  write_bytes(path, legacy_header({64, 172, -5, 8, 4, 512, 512}));
  expect_rejected(path, {"n_layers = -5", "positive"});
}

TEST_F(CheckpointTest, NHeadsNotDividingDim) {
  const std::string path = file("m.bin");
  write_bytes(path, legacy_header({64, 172, 5, 6, 3, 512, 512}));
  expect_rejected(path, {"n_heads = 6", "does not divide", "dim = 64"});
}

TEST_F(CheckpointTest, NHeadsNotMultipleOfNKvHeads) {
  const std::string path = file("m.bin");
  write_bytes(path, legacy_header({64, 172, 5, 8, 3, 512, 512}));
  expect_rejected(path, {"not a multiple", "n_kv_heads = 3"});
}

TEST_F(CheckpointTest, OddHeadDim) {
  const std::string path = file("m.bin");
  write_bytes(path, legacy_header({24, 172, 5, 8, 4, 512, 512}));  // head_dim 3
  expect_rejected(path, {"head_dim", "even"});
}

TEST_F(CheckpointTest, SizeOverflows64Bits) {
  // n_layers x per-layer weights = 2^30 x ~7 * 2^60 floats: the product overflows 64 bits.
  const std::string path = file("m.bin");
  const std::int32_t big = 1 << 30;
  write_bytes(path, legacy_header({big, big, big, 1, 1, big, 1}));
  expect_rejected(path, {"overflow"});
}

TEST_F(CheckpointTest, SizeExceedsModelLimits) {
  // Fits 64-bit arithmetic, but vocab_size x dim = 2^32 elements exceeds ModelConfig's per-matrix limit.
  const std::string path = file("m.bin");
  write_bytes(path, legacy_header({65536, 1, 1, 2, 1, 65536, 1}));
  expect_rejected(path, {"invalid model", "exceeds the limit"});
}

TEST_F(CheckpointTest, MinIntVocabSize) {
  const std::string path = file("m.bin");
  write_bytes(path, legacy_header({64, 172, 5, 8, 4, INT32_MIN, 512}));
  expect_rejected(path, {"vocab_size", "out of range"});
}

TEST_F(CheckpointTest, WrongMagic) {
  // A v1 file whose magic lost one bit is read as a legacy header; the message must say why.
  const std::string path = save_small(CheckpointFormat::kLlama2cV1, true, "m.bin");
  Bytes b = read_bytes(path);
  b[0] ^= 0x01;
  write_bytes(path, b);
  expect_rejected(path, {"magic", "ak42"});
}

TEST_F(CheckpointTest, UnsupportedVersion) {
  const std::string path = file("m.bin");
  Bytes b = v1_header(2, {16, 24, 2, 4, 2, 32, 8}, 1);
  b.resize(4096, 0);
  write_bytes(path, b);
  expect_rejected(path, {"version 2", "unsupported"});
}

TEST_F(CheckpointTest, V1HeaderTruncated) {
  const std::string path = file("m.bin");
  Bytes b = v1_header(1, {16, 24, 2, 4, 2, 32, 8}, 1);
  b.resize(100);
  write_bytes(path, b);
  expect_rejected(path, {"v1 header truncated", "100 bytes"});
}

TEST_F(CheckpointTest, V1BadSharedClassifierFlag) {
  const std::string path = save_small(CheckpointFormat::kLlama2cV1, true, "m.bin");
  Bytes b = read_bytes(path);
  b[36] = 7;
  write_bytes(path, b);
  expect_rejected(path, {"shared_classifier = 7"});
}

// Issue 12 finding: a v1 file has no RoPE tables, so its seq_len is not bounded by the
// file size; a small file with seq_len 2^20 made the model and a default cache take
// 1.5 GB. What a header may demand per seq_len is capped, and the message says so.
TEST_F(CheckpointTest, V1SeqLenDemandingMoreThanTheFileMayIsRejected) {
  const std::string path = save_small(CheckpointFormat::kLlama2cV1, true, "m.bin");
  Bytes b = read_bytes(path);
  put_i32(b, 8 + 24, 4096);  // seq_len 4096: 4096 x (16 + 128) bytes, well under the limit
  write_bytes(path, b);
  EXPECT_EQ(kvd::read_checkpoint_info(path).config.max_seq_len, 4096);
  put_i32(b, 8 + 24, 1 << 20);  // same file size, 2^20 x 144 bytes = 151 MB demanded
  write_bytes(path, b);
  expect_rejected(path, {"seq_len = 1048576", "demands 150994944 bytes", "limit of 67108864 bytes",
                         "v1 files carry no RoPE tables"});
}

// Issue 33: -c / max_seq_len was ignored for checkpoints. It caps the planned
// context, and the demand check counts the capped context.
TEST_F(CheckpointTest, MaxSeqLenCapsTheContextAndItsDemand) {
  const std::string path = save_small(CheckpointFormat::kLlama2cV1, true, "m.bin");
  Bytes b = read_bytes(path);
  put_i32(b, 8 + 24, 1 << 20);  // 151 MB demanded, over the limit
  write_bytes(path, b);
  expect_rejected(path, {"seq_len = 1048576", "limit of 67108864 bytes"});
  kvd::CheckpointLoadOptions lo;
  lo.max_seq_len = 64;
  const auto w = kvd::load_checkpoint<float>(path, lo);
  EXPECT_EQ(w.config.max_seq_len, 64);
  lo.max_seq_len = 1 << 20;  // a cap above seq_len changes nothing
  EXPECT_THROW(kvd::load_checkpoint<float>(path, lo), kvd::FileError);
}

TEST_F(CheckpointTest, MissingFile) { expect_rejected(file("does_not_exist.bin"), {"does not exist"}); }

TEST_F(CheckpointTest, Directory) { expect_rejected(dir_.string(), {"directory"}); }

}  // namespace
