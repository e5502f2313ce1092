// Weight block formats: ggml's exact dequantization (hand-built blocks, and
// every tensor of the shared GGUF files against the sha256 of ggml's own
// dequantized floats), the f16/bf16 conversions, and the reference quantizers'
// round-trip error.
#include <gtest/gtest.h>

#include <iostream>

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <random>
#include <vector>

#include "kvdecode/weights/blocks.hpp"
#include "kvdecode/io/gguf.hpp"
#include "sha256.hpp"

namespace {
using namespace kvd;

using detail::bits_float;
using detail::float_bits;

const WeightType kBlockTypes[] = {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
                                  WeightType::kQ5_1, WeightType::kQ2_K, WeightType::kQ3_K, WeightType::kQ4_K,
                                  WeightType::kQ5_K, WeightType::kQ6_K};
/// The table types (levels looked up by a 4-bit code), which ../shared's llama.cpp
/// of February 2025 did not write: their golden floats are ik_llama.cpp's
/// (tests/data/table_types, see DequantizeFiles.TableTypesMatchIkLlamasFloats).
const WeightType kTableTypes[] = {WeightType::kIQ4_NL, WeightType::kIQ4_XS, WeightType::kMXFP4};

std::vector<float> gaussian(long n, unsigned seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (auto& v : x) v = nd(rng);
  return x;
}

double relative_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    s += double(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

std::vector<float> round_trip(WeightType t, const std::vector<float>& x) {
  const long n = static_cast<long>(x.size());
  std::vector<unsigned char> q(weight_row_bytes(t, static_cast<std::uint64_t>(n)));
  detail::quantize_row(t, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  detail::dequantize_row(t, q.data(), y.data(), n);
  return y;
}

// ---- f16 / bf16 ------------------------------------------------------------------

TEST(Fp16, EveryHalfConvertsExactlyAndBack) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = detail::fp16_to_fp32(static_cast<std::uint16_t>(h));
    const float eigen = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<std::uint16_t>(h)));
    if (std::isnan(eigen)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(detail::fp16_to_fp32(detail::fp32_to_fp16(f))));
      continue;
    }
    ASSERT_EQ(float_bits(f), float_bits(eigen)) << "half " << h;
    ASSERT_EQ(detail::fp32_to_fp16(f), h) << "half " << h;
  }
}

TEST(Fp16, RoundsToNearestEvenLikeEigen) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    // Mostly in binary16's range (exponents 96..144), some anywhere.
    std::uint32_t u = bits(rng);
    if (i % 4) u = (u & 0x807fffffu) | ((96u + u % 49u) << 23);
    const float f = bits_float(u);
    if (std::isnan(f)) continue;
    const auto want = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(f));
    ASSERT_EQ(detail::fp32_to_fp16(f), want) << "float bits " << std::hex << u;
  }
  // Ties: halfway between two halves goes to the even one.
  EXPECT_EQ(detail::fp32_to_fp16(1.f + 0x1p-11f), 0x3C00);            // 1 + half ulp -> 1
  EXPECT_EQ(detail::fp32_to_fp16(1.f + 3 * 0x1p-11f), 0x3C02);        // -> 1 + 2 ulp
  EXPECT_EQ(detail::fp32_to_fp16(65520.f), 0x7C00);                   // rounds up to inf
  EXPECT_EQ(detail::fp32_to_fp16(65519.f), 0x7BFF);
  EXPECT_EQ(detail::fp32_to_fp16(0x1p-25f), 0x0000);                  // half the smallest subnormal -> 0
  EXPECT_EQ(detail::fp32_to_fp16(0x1.8p-25f), 0x0001);
  EXPECT_EQ(detail::fp32_to_fp16(-0x1p-24f), 0x8001);
}

TEST(Bf16, MatchesEigenAndIsExactBack) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 1000000; ++i) {
    const float f = bits_float(bits(rng));
    const std::uint16_t b = detail::fp32_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(detail::bf16_to_fp32(b)));
      continue;
    }
    ASSERT_EQ(b, Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(f))) << f;
    ASSERT_EQ(float_bits(detail::bf16_to_fp32(b)), std::uint32_t(b) << 16);
  }
}

// ---- Hand-built blocks -------------------------------------------------------------

constexpr std::uint16_t kHalfOne = 0x3C00, kHalfTwo = 0x4000, kHalfQuarter = 0x3400;

template <class Block>
std::vector<float> dequantize_one(WeightType t, const Block& b, int n) {
  std::vector<float> y(static_cast<std::size_t>(n));
  detail::dequantize_row(t, &b, y.data(), n);
  return y;
}

TEST(Dequantize, Q8_0) {
  detail::BlockQ8_0 b{};
  b.d = kHalfQuarter;
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<std::int8_t>(i * 8 - 128);
  const auto y = dequantize_one(WeightType::kQ8_0, b, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], (i * 8 - 128) * 0.25f);
}

TEST(Dequantize, Q4_0AndQ4_1NibbleOrder) {
  detail::BlockQ4_0 b{};
  b.d = kHalfTwo;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(j | (15 - j) << 4);
  auto y = dequantize_one(WeightType::kQ4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 2.f);         // low nibbles: values 0..15
    EXPECT_EQ(y[j + 16], (7 - j) * 2.f);    // high nibbles: values 16..31
  }
  detail::BlockQ4_1 c{};
  c.d = kHalfTwo;
  c.m = 0xBC00;  // -1
  std::memcpy(c.qs, b.qs, 16);
  y = dequantize_one(WeightType::kQ4_1, c, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 2.f - 1.f);
    EXPECT_EQ(y[j + 16], (15 - j) * 2.f - 1.f);
  }
}

TEST(Dequantize, Q5_0AndQ5_1FifthBit) {
  detail::BlockQ5_0 b{};
  b.d = kHalfOne;
  const std::uint32_t qh = 0x80000001u;  // values 0 and 31 have the fifth bit
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = 0x33;
  auto y = dequantize_one(WeightType::kQ5_0, b, 32);
  EXPECT_EQ(y[0], 19.f - 16.f);
  EXPECT_EQ(y[1], 3.f - 16.f);
  EXPECT_EQ(y[30], 3.f - 16.f);
  EXPECT_EQ(y[31], 19.f - 16.f);
  detail::BlockQ5_1 c{};
  c.d = kHalfOne;
  c.m = kHalfTwo;
  std::memcpy(c.qh, &qh, 4);
  std::memcpy(c.qs, b.qs, 16);
  y = dequantize_one(WeightType::kQ5_1, c, 32);
  EXPECT_EQ(y[0], 21.f);
  EXPECT_EQ(y[16], 5.f);
  EXPECT_EQ(y[31], 21.f);
}

TEST(Dequantize, Q2_KScalesAndShifts) {
  detail::BlockQ2_K b{};
  b.d = kHalfOne;
  b.dmin = kHalfQuarter;
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<std::uint8_t>((s % 15 + 1) | (s % 4) << 4);
  // value i holds code (i / 32) % 4 via the shift, plus byte-dependent choices
  for (int i = 0; i < 64; ++i) b.qs[i] = static_cast<std::uint8_t>(0xE4 ^ (i & 1 ? 0xFF : 0));  // codes 0,1,2,3 / 3,2,1,0
  const auto y = dequantize_one(WeightType::kQ2_K, b, 256);
  for (int i = 0; i < 256; ++i) {
    const int s = i / 16, byte = 32 * (i / 128) + i % 32, shift = (i % 128) / 32;
    const int code = byte & 1 ? 3 - shift : shift;
    EXPECT_EQ(y[i], float(s % 15 + 1) * code - 0.25f * float(s % 4)) << i;
  }
}

TEST(Dequantize, Q3_KSignedScalesAndHighBit) {
  detail::BlockQ3_K b{};
  b.d = kHalfOne;
  // scale of sub-block s = s - 8 (stored s + 24, split 4 + 2 bits)
  for (int s = 0; s < 16; ++s) {
    const int l = s - 8 + 32;
    if (s < 8) b.scales[s] = static_cast<std::uint8_t>(l & 0xF);
    else b.scales[s - 8] = static_cast<std::uint8_t>(b.scales[s - 8] | (l & 0xF) << 4);
    b.scales[8 + s % 4] = static_cast<std::uint8_t>(b.scales[8 + s % 4] | (l >> 4) << (2 * (s / 4)));
  }
  for (int i = 0; i < 64; ++i) b.qs[i] = 0x1B;         // codes 3,2,1,0 by shift
  for (int i = 0; i < 32; ++i) b.hmask[i] = static_cast<std::uint8_t>(i % 2 ? 0xAA : 0x0F);
  const auto y = dequantize_one(WeightType::kQ3_K, b, 256);
  for (int i = 0; i < 256; ++i) {
    const int low = 3 - (i % 128) / 32, hb = (b.hmask[i % 32] >> (i / 32)) & 1;
    EXPECT_EQ(y[i], float(i / 16 - 8) * float(low - (hb ? 0 : 4))) << i;
  }
}

TEST(Dequantize, Q4_KAndQ5_KPackedScales) {
  detail::BlockQ4_K b{};
  b.d = kHalfOne;
  b.dmin = kHalfQuarter;
  const int sc[8] = {1, 2, 3, 63, 17, 40, 5, 33}, mn[8] = {0, 63, 7, 9, 16, 1, 48, 31};
  for (int s = 0; s < 8; ++s) {
    if (s < 4) {
      b.scales[s] = static_cast<std::uint8_t>(sc[s]);
      b.scales[s + 4] = static_cast<std::uint8_t>(mn[s]);
    } else {
      b.scales[s + 4] = static_cast<std::uint8_t>((sc[s] & 0xF) | (mn[s] & 0xF) << 4);
      b.scales[s - 4] = static_cast<std::uint8_t>(b.scales[s - 4] | (sc[s] >> 4) << 6);
      b.scales[s] = static_cast<std::uint8_t>(b.scales[s] | (mn[s] >> 4) << 6);
    }
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<std::uint8_t>((i % 16) | (15 - i % 16) << 4);
  auto y = dequantize_one(WeightType::kQ4_K, b, 256);
  for (int i = 0; i < 256; ++i) {
    const int byte = 32 * (i / 64) + i % 32, code = (i % 64) < 32 ? byte % 16 : 15 - byte % 16;
    EXPECT_EQ(y[i], float(sc[i / 32]) * code - 0.25f * float(mn[i / 32])) << i;
  }
  detail::BlockQ5_K c{};
  c.d = b.d;
  c.dmin = b.dmin;
  std::memcpy(c.scales, b.scales, 12);
  std::memcpy(c.qs, b.qs, 128);
  for (int i = 0; i < 32; ++i) c.qh[i] = static_cast<std::uint8_t>(i * 37);
  y = dequantize_one(WeightType::kQ5_K, c, 256);
  for (int i = 0; i < 256; ++i) {
    const int byte = 32 * (i / 64) + i % 32;
    const int code = ((i % 64) < 32 ? byte % 16 : 15 - byte % 16) + ((c.qh[i % 32] >> (i / 32)) & 1) * 16;
    EXPECT_EQ(y[i], float(sc[i / 32]) * code - 0.25f * float(mn[i / 32])) << i;
  }
}

TEST(Dequantize, Q6_KLayout) {
  detail::BlockQ6_K b{};
  b.d = kHalfQuarter;
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<std::int8_t>(s * 9 - 70);
  std::mt19937 rng(3);
  std::vector<int> code(256);
  for (auto& c : code) c = static_cast<int>(rng() % 64);
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int* u = code.data() + 128 * h + l;
      b.ql[64 * h + l] = static_cast<std::uint8_t>((u[0] & 0xF) | (u[64] & 0xF) << 4);
      b.ql[64 * h + 32 + l] = static_cast<std::uint8_t>((u[32] & 0xF) | (u[96] & 0xF) << 4);
      b.qh[32 * h + l] = static_cast<std::uint8_t>(u[0] >> 4 | (u[32] >> 4) << 2 | (u[64] >> 4) << 4 | (u[96] >> 4) << 6);
    }
  const auto y = dequantize_one(WeightType::kQ6_K, b, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], (0.25f * float(b.scales[i / 16])) * float(code[i] - 32)) << i;
}

const float kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

TEST(Dequantize, IQ4_NLLayout) {
  detail::BlockIQ4_NL b{};
  b.d = kHalfQuarter;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(j | (15 - j) << 4);
  const auto y = dequantize_one(WeightType::kIQ4_NL, b, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.25f * kIq4Levels[i < 16 ? i : 31 - i]) << i;
}

TEST(Dequantize, IQ4_XSLayout) {
  detail::BlockIQ4_XS b{};
  b.d = kHalfQuarter;
  const int ls[8] = {0, 63, 32, 31, 1, 40, 17, 62};  // 6-bit scales, stored with offset 32
  for (int s = 0; s < 8; ++s) {
    b.scales_l[s / 2] = static_cast<std::uint8_t>(b.scales_l[s / 2] | (ls[s] & 15) << (4 * (s % 2)));
    b.scales_h = static_cast<std::uint16_t>(b.scales_h | (ls[s] >> 4) << (2 * s));
  }
  std::mt19937 rng(5);
  std::vector<int> code(256);
  for (auto& c : code) c = static_cast<int>(rng() % 16);
  for (int s = 0; s < 8; ++s)
    for (int j = 0; j < 16; ++j)
      b.qs[16 * s + j] = static_cast<std::uint8_t>(code[32 * s + j] | code[32 * s + 16 + j] << 4);
  const auto y = dequantize_one(WeightType::kIQ4_XS, b, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], (0.25f * float(ls[i / 32] - 32)) * kIq4Levels[code[i]]) << i;
}

TEST(Dequantize, MXFP4LayoutAndEveryScale) {
  // e2m1: sign bit 3, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; scale 2^(e - 127).
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  detail::BlockMXFP4 b{};
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(j | (15 - j) << 4);
  for (int e = 0; e < 255; ++e) {
    b.e = static_cast<std::uint8_t>(e);
    const auto y = dequantize_one(WeightType::kMXFP4, b, 32);
    for (int i = 0; i < 32; ++i) {
      const int c = i < 16 ? i : 31 - i;
      const double want = (c & 8 ? -1.0 : 1.0) * e2m1[c & 7] * std::ldexp(1.0, e - 127);
      // ggml's +0 for the code -0 (its doubled table holds 0 twice)
      if (want == 0) ASSERT_EQ(float_bits(y[i]), 0u) << e << " " << i;
      else if (std::fabs(want) > 3.4028234663852886e38) ASSERT_TRUE(std::isinf(y[i])) << e << " " << i;
      else ASSERT_EQ(double(y[i]), want) << e << " " << i;
    }
  }
}

TEST(Dequantize, EveryProductIsExactSoOnlyTheLastAddRounds) {
  // A scale is an f16 (11 significant bits) times a sub-block scale of at most
  // 8 bits, times a code of at most 6 bits: at most 24 bits, so every product in
  // ggml's dequantization is exact in float, and y = s * q - m rounds once
  // whether or not the compiler fuses it (the kernels use fma freely). Checked
  // for every (sub-scale, code) pair of each type, over halves of every exponent.
  struct Widths { const char* type; int sc_lo, sc_hi, q_lo, q_hi; };
  const Widths widths[] = {{"q8_0", 1, 1, -128, 127}, {"q4_0/q4_1", 1, 1, -8, 15}, {"q5_0/q5_1", 1, 1, -16, 31},
                           {"q2_K", 0, 15, 0, 3},     {"q3_K", -32, 31, -4, 3},   {"q4_K", 0, 63, 0, 15},
                           {"q5_K", 0, 63, 0, 31},    {"q6_K", -128, 127, -32, 31}, {"iq4_nl", 1, 1, -127, 113},
                           {"iq4_xs", -32, 31, -127, 113}};
  for (const auto& w : widths)
    for (std::uint32_t h = 0x0001; h < 0x7C00; h += 97) {
      const float d = detail::fp16_to_fp32(static_cast<std::uint16_t>(h | 0x3FF));  // all 11 bits set
      for (int sc = w.sc_lo; sc <= w.sc_hi; ++sc) {
        const float ds = d * float(sc);
        ASSERT_EQ(std::fma(d, float(sc), -ds), 0.f) << w.type;
        for (int q = w.q_lo; q <= w.q_hi; ++q) ASSERT_EQ(std::fma(ds, float(q), -(ds * float(q))), 0.f) << w.type;
      }
    }
}

// ---- Every tensor of the shared GGUF files ----------------------------------------

const std::string kShared = KVDECODE_SHARED_DIR;

/// name -> sha256 from ../shared/reference/gguf/<file>.tensors.txt.
std::map<std::string, std::string> reference_hashes(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto sp = line.find(' '), h = line.find("sha256=");
    if (sp != std::string::npos && h != std::string::npos) out[line.substr(0, sp)] = line.substr(h + 7, 64);
  }
  return out;
}

/// The sha256 of tensor t's floats, dequantized row by row.
std::string dequantized_hash(const GGUFFile& f, const GGUFTensorInfo& t) {
  const std::uint64_t n = t.ne[0] * t.rows(), row_bytes = weight_row_bytes(t.type, t.ne[0]);
  std::vector<float> y(n);
  for (std::uint64_t r = 0; r < t.rows(); ++r)
    detail::dequantize_row(t.type, f.tensor_data(t) + r * row_bytes, y.data() + r * t.ne[0], static_cast<std::int64_t>(t.ne[0]));
  return kvd_test::sha256_hex(y.data(), n * 4);
}

TEST(DequantizeFiles, EveryTensorMatchesGgmlsFloats) {
  const std::string models = kShared + "/models/gguf", refs = kShared + "/reference/gguf";
  if (!std::filesystem::is_directory(models) || !std::filesystem::is_directory(refs))
    GTEST_SKIP() << "shared GGUF models not found at " << models << " (configure with -DKVDECODE_SHARED_DIR=...)";
  int files = 0, tensors = 0;
  std::map<WeightType, int> per_type;
  for (const auto& entry : std::filesystem::directory_iterator(models)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".gguf" || (name.rfind("rand256-", 0) != 0 && name.rfind("stories260K-", 0) != 0))
      continue;
    const auto want = reference_hashes(refs + "/" + entry.path().stem().string() + ".tensors.txt");
    ASSERT_FALSE(want.empty()) << "no reference hashes for " << name;
    const GGUFFile f = GGUFFile::open(entry.path().string());
    ASSERT_EQ(f.tensors().size(), want.size()) << name;
    for (const auto& t : f.tensors()) {
      ASSERT_EQ(weight_row_bytes(t.type, t.ne[0]) * t.rows(), t.n_bytes) << name << " " << t.name;
      const auto it = want.find(t.name);
      ASSERT_NE(it, want.end()) << name << " " << t.name;
      EXPECT_EQ(dequantized_hash(f, t), it->second) << name << " " << t.name << " " << weight_type_name(t.type);
      ++tensors;
      ++per_type[t.type];
    }
    ++files;
  }
  EXPECT_EQ(files, 18);
  // Every type this header dequantizes occurs in the files.
  for (WeightType t : kBlockTypes) EXPECT_GT(per_type[t], 0) << weight_type_name(t);
  EXPECT_GT(per_type[WeightType::kF16], 0);
  EXPECT_GT(per_type[WeightType::kBF16], 0);
  EXPECT_GT(per_type[WeightType::kF32], 0);
  std::ostringstream os;
  for (const auto& [type, count] : per_type) os << " " << weight_type_name(type) << ":" << count;
  std::cout << "checked " << tensors << " tensors of " << files << " files;" << os.str() << "\n";
}

// ik_llama.cpp's llama-quantize wrote rand256-F32 as iq4_nl, iq4_xs and mxfp4
// (tests/data/ik); tools/ik_reference.cpp hashed ik's ggml's dequantized floats of
// every tensor. Ours are the same, bit for bit.
TEST(DequantizeFiles, TableTypesMatchIkLlamasFloats) {
  const std::string dir = std::string(KVDECODE_TEST_DATA_DIR) + "/ik/";
  std::map<WeightType, int> per_type;
  for (const char* name : {"rand256-IQ4_NL", "rand256-IQ4_XS", "rand256-MXFP4"}) {
    const std::string path = dir + name + ".gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "test data not found: " << path;
    const auto want = reference_hashes(dir + name + ".tensors.txt");
    const GGUFFile f = GGUFFile::open(path);
    ASSERT_EQ(f.tensors().size(), want.size()) << name;
    for (const auto& t : f.tensors()) {
      const auto it = want.find(t.name);
      ASSERT_NE(it, want.end()) << name << " " << t.name;
      EXPECT_EQ(dequantized_hash(f, t), it->second) << name << " " << t.name << " " << weight_type_name(t.type);
      ++per_type[t.type];
    }
  }
  for (WeightType t : kTableTypes) EXPECT_GT(per_type[t], 0) << weight_type_name(t);
}

// ---- Bad input -------------------------------------------------------------------

TEST(Dequantize, RowNotAMultipleOfTheBlockIsRefused) {
  std::vector<unsigned char> q(1000);
  std::vector<float> y(300, 7.f);
  EXPECT_THROW(detail::dequantize_row(WeightType::kQ4_K, q.data(), y.data(), 128), ConfigError);
  EXPECT_THROW(detail::dequantize_row(WeightType::kQ8_0, q.data(), y.data(), 33), ConfigError);
  EXPECT_THROW(detail::quantize_row(WeightType::kQ6_K, y.data(), q.data(), 300), ConfigError);
  for (float v : y) EXPECT_EQ(v, 7.f);
}

TEST(Dequantize, UnsupportedTypeIsRefusedByName) {
  std::vector<unsigned char> q(1000);
  std::vector<float> y(256);
  try {
    detail::dequantize_row(WeightType::kIQ2_XXS, q.data(), y.data(), 256);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("iq2_xxs"), std::string::npos) << e.what();
  }
  EXPECT_THROW(detail::quantize_row(WeightType::kQ8_K, y.data(), q.data(), 256), ConfigError);
  EXPECT_THROW(detail::quantize_row(WeightType::kF64, y.data(), q.data(), 256), ConfigError);
}

// ---- Reference quantizers ------------------------------------------------------------

struct ErrorBound {
  WeightType type;
  double max_rel_rmse;  // on unit Gaussian rows (measured values are about 80% of these)
};

TEST(Quantize, RoundTripErrorPerType) {
  const ErrorBound bounds[] = {
      {WeightType::kF16, 3e-4},  {WeightType::kBF16, 2.2e-3}, {WeightType::kQ8_0, 0.0068}, {WeightType::kQ4_0, 0.095},
      {WeightType::kQ4_1, 0.085}, {WeightType::kQ5_0, 0.048}, {WeightType::kQ5_1, 0.041},  {WeightType::kQ2_K, 0.32},
      {WeightType::kQ3_K, 0.175}, {WeightType::kQ4_K, 0.082}, {WeightType::kQ5_K, 0.043},  {WeightType::kQ6_K, 0.021},
      {WeightType::kIQ4_NL, 0.085}, {WeightType::kIQ4_XS, 0.09}, {WeightType::kMXFP4, 0.16}};
  const auto x = gaussian(256 * 32, 11);
  for (const auto& b : bounds) {
    const double e = relative_rmse(x, round_trip(b.type, x));
    EXPECT_LT(e, b.max_rel_rmse) << weight_type_name(b.type);
    EXPECT_GT(e, 0.0) << weight_type_name(b.type);
  }
}

TEST(Quantize, MoreBitsGiveLessError) {
  const auto x = gaussian(256 * 16, 12, 0.02f);
  auto err = [&](WeightType t) { return relative_rmse(x, round_trip(t, x)); };
  EXPECT_LT(err(WeightType::kQ3_K), err(WeightType::kQ2_K));
  EXPECT_LT(err(WeightType::kQ4_K), err(WeightType::kQ3_K));
  EXPECT_LT(err(WeightType::kQ5_K), err(WeightType::kQ4_K));
  EXPECT_LT(err(WeightType::kQ6_K), err(WeightType::kQ5_K));
  EXPECT_LT(err(WeightType::kQ8_0), err(WeightType::kQ6_K));
  EXPECT_LT(err(WeightType::kQ5_0), err(WeightType::kQ4_0));
  EXPECT_LT(err(WeightType::kQ5_1), err(WeightType::kQ4_1));
}

TEST(Quantize, SearchBeatsPlainMaxScaling) {
  // The plain scheme (ggml's quantize_row_q4_0_ref: d = max / -8, codes by
  // rounding) is a baseline that the error-minimising search must not lose to.
  const auto x = gaussian(32 * 512, 13);
  std::vector<float> plain(x.size());
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    const float* xb = x.data() + 32 * b;
    float amax = 0, max = 0;
    for (int i = 0; i < 32; ++i)
      if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), max = xb[i];
    const float d = detail::fp16_to_fp32(detail::fp32_to_fp16(max / -8.f));
    for (int i = 0; i < 32; ++i) plain[32 * b + i] = float(std::clamp(detail::nearest_int(xb[i] / d), -8, 7)) * d;
  }
  EXPECT_LT(relative_rmse(x, round_trip(WeightType::kQ4_0, x)), relative_rmse(x, plain));
}

TEST(Quantize, TableTypesBeatTheirPlainCousins) {
  // iq4_nl's levels fit Gaussian weights better than q4_0's evenly spaced ones at
  // the same 4.5 bits; iq4_xs (4.25 bits) stays close to q4_K (4.5 bits).
  const auto x = gaussian(256 * 64, 15);
  auto err = [&](WeightType t) { return relative_rmse(x, round_trip(t, x)); };
  EXPECT_LT(err(WeightType::kIQ4_NL), err(WeightType::kQ4_0));
  EXPECT_LT(err(WeightType::kIQ4_XS), 1.1 * err(WeightType::kQ4_K));
}

TEST(Quantize, ZeroAndConstantBlocks) {
  std::vector<WeightType> types(std::begin(kBlockTypes), std::end(kBlockTypes));
  types.insert(types.end(), std::begin(kTableTypes), std::end(kTableTypes));
  for (WeightType t : types) {
    const std::vector<float> zero(256, 0.f);
    for (float v : round_trip(t, zero)) ASSERT_EQ(v, 0.f) << weight_type_name(t);
    const std::vector<float> constant(256, 0.5f);
    const auto y = round_trip(t, constant);
    for (float v : y) ASSERT_NEAR(v, 0.5f, 0.5f * 0.02f) << weight_type_name(t);
  }
}

TEST(Quantize, ExactGridValuesSurvive) {
  // Values that are exactly a small integer times a power of two fit q8_0's
  // grid: the round trip must give them back exactly.
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = float((i * 37) % 255 - 127) * 0x1p-6f;
  x[0] = 127 * 0x1p-6f;
  x[32] = -127 * 0x1p-6f;
  EXPECT_EQ(round_trip(WeightType::kQ8_0, x), x);
}

TEST(Quantize, RowLayoutMatchesBlockByBlock) {
  // quantize_row over many blocks = the blocks quantized one at a time.
  std::vector<WeightType> types(std::begin(kBlockTypes), std::end(kBlockTypes));
  types.insert(types.end(), std::begin(kTableTypes), std::end(kTableTypes));
  for (WeightType t : types) {
    const auto tr = weight_type_traits(t);
    const auto x = gaussian(512, 14);
    std::vector<unsigned char> whole(weight_row_bytes(t, 512)), parts(whole.size());
    detail::quantize_row(t, x.data(), whole.data(), 512);
    for (int b = 0; b < 512 / static_cast<int>(tr.block_size); ++b)
      detail::quantize_row(t, x.data() + b * tr.block_size, parts.data() + b * tr.block_bytes, tr.block_size);
    EXPECT_EQ(whole, parts) << weight_type_name(t);
  }
}


// The block-type table (weights/block_types.hpp): exactly the thirteen types kvdecode
// computes with have a row, each row agrees with weight_type_traits() and fills its
// block with its panel layout, and the quantizer's fallback types are the ones the
// converter has always written.
TEST(BlockTypes, OneRowPerComputedTypeAgreeingWithTheTypeTable) {
  const std::map<WeightType, WeightType> fallback = {
      {WeightType::kQ8_0, WeightType::kF16}, {WeightType::kQ4_0, WeightType::kF16}, {WeightType::kQ4_1, WeightType::kF16},
      {WeightType::kQ5_0, WeightType::kF16}, {WeightType::kQ5_1, WeightType::kF16}, {WeightType::kQ2_K, WeightType::kQ4_0},
      {WeightType::kQ3_K, WeightType::kQ4_0}, {WeightType::kQ4_K, WeightType::kQ5_0}, {WeightType::kQ5_K, WeightType::kQ5_1},
      {WeightType::kQ6_K, WeightType::kQ8_0}, {WeightType::kIQ4_NL, WeightType::kF16},
      {WeightType::kIQ4_XS, WeightType::kIQ4_NL}, {WeightType::kMXFP4, WeightType::kF16}};
  int rows = 0;
  for (std::uint32_t code = 0; code < 64; ++code) {
    const auto t = static_cast<WeightType>(code);
    const auto tr = weight_type_traits(t);
    const bool has_row = detail::visit_block_type(t, [&](auto row) {
      using Row = decltype(row);
      EXPECT_EQ(Row::kType, t) << code;
      EXPECT_EQ(static_cast<std::uint32_t>(Row::kValues), tr.block_size) << code;
      EXPECT_EQ(sizeof(typename Row::Block), tr.block_bytes) << code;
      int bytes = 0;
      for (int f = 0; f < Row::kLayout.n_fields; ++f) bytes += Row::kLayout.fields[f].width * Row::kLayout.fields[f].count;
      EXPECT_EQ(static_cast<std::uint32_t>(bytes), tr.block_bytes) << code;
      EXPECT_EQ(detail::quant_factoring(t).sub, Row::kSub) << code;
    });
    EXPECT_EQ(has_row, fallback.count(t) == 1) << code;
    EXPECT_EQ(detail::is_block_type(t), has_row) << code;
    EXPECT_EQ(detail::block_type_fallback(t), has_row ? fallback.at(t) : WeightType::kF16) << code;
    rows += has_row;
  }
  EXPECT_EQ(rows, 13);
}

}  // namespace
