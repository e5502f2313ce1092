// GGUF reader and writer: every file llama.cpp wrote in ../shared parses with the
// facts its reference lists; writer -> reader round trips; and one test per
// rejection rule, each crafting a malformed file (with the writer, then patching
// bytes at offsets the reader itself reports for the valid file) and asserting a
// FormatError whose message names the field, its offset and the value.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "kvdecode/io/file.hpp"
#include "kvdecode/io/gguf.hpp"

// Largest single heap allocation, to show that a hostile count allocates nothing
// in proportion to it (replacing global operator new in this test program).
namespace {
std::atomic<std::size_t> g_largest_alloc{0};
void note_alloc(std::size_t n) {
  std::size_t cur = g_largest_alloc.load(std::memory_order_relaxed);
  while (n > cur && !g_largest_alloc.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
  }
}
}  // namespace
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  note_alloc(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

using namespace kvd;
namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

namespace {

std::string shared_dir() {
#ifdef KVDECODE_SHARED_DIR
  const std::string d = KVDECODE_SHARED_DIR;
  if (fs::exists(d + "/models/README.md")) return d;
#endif
  return "";
}

void put_u32(Bytes& b, std::uint64_t at, std::uint32_t v) {
  for (int k = 0; k < 4; ++k) b.at(at + k) = static_cast<unsigned char>(v >> (8 * k));
}
void put_u64(Bytes& b, std::uint64_t at, std::uint64_t v) {
  for (int k = 0; k < 8; ++k) b.at(at + k) = static_cast<unsigned char>(v >> (8 * k));
}

std::vector<float> iota_floats(std::size_t n, float start) {
  std::vector<float> v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = start + 0.25f * static_cast<float>(k);
  return v;
}

// A valid small file: a few keys of several types and three f32 tensors.
struct Sample {
  std::vector<float> a = iota_floats(8 * 3, 1.0f);  // [8, 3]
  std::vector<float> b = iota_floats(16, -2.0f);    // [16]
  std::vector<float> c = iota_floats(4 * 2 * 2, 7.0f);  // [4, 2, 2]
  GGUFWriter w;
  Sample() {
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 5);
    w.set_bool("test.flag", true);
    w.set_f32_array("test.floats", {1.5f, -2.0f, 3.25f});
    w.set_string_array("test.strings", {"a", "bc", "def"});
    w.set_i32_array("test.ints", {-1, 2, -3});
    w.add_tensor("a", WeightType::kF32, {8, 3}, a.data(), a.size() * 4);
    w.add_tensor("b", WeightType::kF32, {16}, b.data(), b.size() * 4);
    w.add_tensor("c", WeightType::kF32, {4, 2, 2}, c.data(), c.size() * 4);
  }
  Bytes bytes(std::uint32_t alignment = 32) const { return w.bytes(alignment); }
};

GGUFFile parse(Bytes b) { return GGUFFile::from_bytes(std::move(b), "crafted.gguf"); }

/// Parsing `b` throws FormatError whose message holds every piece of `want`.
void expect_format_error(Bytes b, const std::vector<std::string>& want) {
  try {
    parse(std::move(b));
    ADD_FAILURE() << "expected a FormatError";
  } catch (const FormatError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("crafted.gguf"), std::string::npos) << m;
    for (const auto& w : want) EXPECT_NE(m.find(w), std::string::npos) << "missing '" << w << "' in: " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a FormatError, got: " << e.what();
  }
}
std::string at(std::uint64_t off) { return "at offset " + std::to_string(off); }

// Offsets of one tensor record's fields, from the reader's own info_offset.
struct TensorFields {
  std::uint64_t n_dims, ne0, type, offset;
};
TensorFields fields_of(const GGUFTensorInfo& t) {
  const std::uint64_t n_dims = t.info_offset + 8 + t.name.size();
  const std::uint64_t type = n_dims + 4 + 8 * static_cast<std::uint64_t>(t.n_dims);
  return {n_dims, n_dims + 4, type, type + 4};
}

}  // namespace

// ---------------------------------------------------------------------------
// Files written by llama.cpp.

TEST(GGUFShared, EveryFileParses) {
  const std::string d = shared_dir();
  if (d.empty()) GTEST_SKIP() << "../shared not found (configure with -DKVDECODE_SHARED_DIR=/path/to/shared)";
  int n = 0;
  for (const char* sub : {"/models/gguf", "/models/vocab"}) {
    for (const auto& e : fs::directory_iterator(d + sub)) {
      if (e.path().extension() != ".gguf") continue;
      SCOPED_TRACE(e.path().string());
      EXPECT_TRUE(is_gguf_file(e.path().string()));
      const GGUFFile f = GGUFFile::open(e.path().string());
      EXPECT_TRUE(f.version() == 2 || f.version() == 3);
      EXPECT_FALSE(f.metadata().empty());
      EXPECT_FALSE(f.get_string("general.architecture").empty());
      for (const auto& t : f.tensors()) {
        EXPECT_EQ(t.file_offset % f.alignment(), 0u) << t.name;
        EXPECT_LE(t.file_offset + t.n_bytes, f.file_size()) << t.name;
      }
      EXPECT_FALSE(f.describe(true).empty());
      ++n;
    }
  }
  EXPECT_GE(n, 24) << "expected the 19 model files and 5 vocabularies";
}

TEST(GGUFShared, Stories260KFacts) {
  const std::string d = shared_dir();
  if (d.empty()) GTEST_SKIP() << "../shared not found";
  const GGUFFile f = GGUFFile::open(d + "/models/gguf/stories260K-F32.gguf");
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_u32("llama.block_count"), 5u);
  EXPECT_EQ(f.get_u64("llama.embedding_length"), 64u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count"), 8u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 512u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")[1], "<s>");
  const GGUFTensorInfo* t = f.find_tensor("token_embd.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, WeightType::kF32);
  EXPECT_EQ(t->n_dims, 2);
  EXPECT_EQ(t->ne[0], 64u);
  EXPECT_EQ(t->ne[1], 512u);
  EXPECT_EQ(t->n_bytes, 64u * 512u * 4u);
  EXPECT_EQ(f.find_tensor("no.such.tensor"), nullptr);
  EXPECT_EQ(f.find("no.such.key"), nullptr);
  // Typed getters: wrong type and absent keys name the key.
  EXPECT_THROW(f.get_u32("general.architecture"), FormatError);
  EXPECT_THROW(f.get_string("no.such.key"), FormatError);
  EXPECT_EQ(f.get_u32_or("no.such.key", 77), 77u);
  EXPECT_THROW(f.get_u32_or("general.architecture", 1), FormatError);
  const std::string listing = f.describe(true);
  EXPECT_NE(listing.find("general.architecture: string = \"llama\""), std::string::npos) << listing;
  EXPECT_NE(listing.find("tokenizer.ggml.tokens: array<string>[512]"), std::string::npos) << listing;
  EXPECT_NE(listing.find("token_embd.weight f32 [64,512]"), std::string::npos) << listing;
}

// Every tensor of every rand256 file has the name, type and shape its reference lists,
// and f32 tensors hold the reference's first values and sum.
TEST(GGUFShared, Rand256TensorsMatchReference) {
  const std::string d = shared_dir();
  if (d.empty()) GTEST_SKIP() << "../shared not found";
  int files = 0;
  for (const auto& e : fs::directory_iterator(d + "/reference/gguf")) {
    const std::string fname = e.path().filename().string();
    const std::string suffix = ".tensors.txt";
    if (fname.size() < suffix.size() || fname.compare(fname.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string stem = fname.substr(0, fname.size() - suffix.size());
    SCOPED_TRACE(stem);
    const GGUFFile f = GGUFFile::open(d + "/models/gguf/" + stem + ".gguf");
    std::ifstream in(e.path());
    std::string line;
    std::size_t listed = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      std::istringstream ls(line);
      std::string name, type, shape, sum_s;
      ls >> name >> type >> shape >> sum_s;
      SCOPED_TRACE(name);
      const GGUFTensorInfo* t = f.find_tensor(name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(weight_type_name(t->type), type);
      // The reference writes 1-D tensors as [n,1].
      std::string ours = t->shape_string();
      if (t->n_dims == 1) ours = "[" + std::to_string(t->ne[0]) + ",1]";
      EXPECT_EQ(ours, shape);
      if (t->type == WeightType::kF32) {
        const float* p = reinterpret_cast<const float*>(f.tensor_data(*t));
        double sum = 0;
        for (std::uint64_t k = 0; k < t->n_elements(); ++k) sum += p[k];
        const double want_sum = std::stod(sum_s.substr(4));
        EXPECT_NEAR(sum, want_sum, 1e-5 * std::max(1.0, std::fabs(want_sum)));
        const auto first_at = line.find("first=");
        ASSERT_NE(first_at, std::string::npos);
        std::istringstream fs_(line.substr(first_at + 6));
        std::string v;
        for (int k = 0; k < 8 && std::getline(fs_, v, ','); ++k) {
          const double want = std::stod(v);
          EXPECT_NEAR(p[k], want, 1e-7 + 1e-7 * std::fabs(want)) << "element " << k;
        }
      }
      ++listed;
    }
    EXPECT_EQ(listed, f.tensors().size()) << "the reference lists every tensor";
    ++files;
  }
  EXPECT_GE(files, 13);
}

// GGUFWriter, given a file's keys and tensors, writes llama.cpp's own files byte for byte.
TEST(GGUFShared, WriterReproducesLlamaCppFiles) {
  const std::string d = shared_dir();
  if (d.empty()) GTEST_SKIP() << "../shared not found";
  int n = 0;
  for (const char* sub : {"/models/gguf", "/models/vocab"}) {
    for (const auto& e : fs::directory_iterator(d + sub)) {
      if (e.path().extension() != ".gguf") continue;
      SCOPED_TRACE(e.path().string());
      const GGUFFile f = GGUFFile::open(e.path().string());
      GGUFWriter w;
      for (const auto& [k, v] : f.metadata()) w.set(k, v);
      for (const auto& t : f.tensors())
        w.add_tensor_ref(t.name, t.type, std::vector<std::uint64_t>(t.ne, t.ne + t.n_dims), f.tensor_data(t), t.n_bytes);
      const Bytes b = w.bytes(static_cast<std::uint32_t>(f.alignment()));
      const unsigned char* orig = f.file().data();
      if (f.tensors().empty() && b.size() > f.file_size()) {
        // llama.cpp's older C writer did not pad a file without tensors; gguf-py and we do.
        EXPECT_EQ(b.size(), f.data_offset());
        EXPECT_TRUE(std::all_of(b.begin() + static_cast<long>(f.file_size()), b.end(), [](unsigned char c) { return c == 0; }));
      } else {
        ASSERT_EQ(b.size(), f.file_size());
      }
      EXPECT_EQ(std::memcmp(b.data(), orig, static_cast<std::size_t>(f.file_size())), 0);
      ++n;
    }
  }
  EXPECT_GE(n, 24);
}

TEST(GGUFShared, VocabFilesHoldTokens) {
  const std::string d = shared_dir();
  if (d.empty()) GTEST_SKIP() << "../shared not found";
  const GGUFFile f = GGUFFile::open(d + "/models/vocab/vocab-llama3.gguf");
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_GT(f.get_string_array("tokenizer.ggml.tokens").size(), 100000u);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
}

// ---------------------------------------------------------------------------
// Writer -> reader.

TEST(GGUFRoundTrip, KeysValuesAndTensorBytes) {
  Sample s;
  s.w.set_u64("test.u64", 1ull << 40);
  s.w.set_i64("test.i64", -(1ll << 40));
  s.w.set_f64("test.f64", 0.1);
  s.w.set_u32_array("test.u32s", {1, 2, 4000000000u});
  for (std::uint32_t alignment : {32u, 64u, 8u}) {
    SCOPED_TRACE(alignment);
    const GGUFFile f = parse(s.bytes(alignment));
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.find("general.alignment") != nullptr, alignment != 32);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_u32("llama.block_count"), 5u);
    EXPECT_EQ(f.get_i64("llama.block_count"), 5);
    EXPECT_TRUE(f.get_bool("test.flag"));
    EXPECT_EQ(f.get_f64_array("test.floats"), (std::vector<double>{1.5, -2.0, 3.25}));
    EXPECT_EQ(f.get_string_array("test.strings"), (std::vector<std::string>{"a", "bc", "def"}));
    EXPECT_EQ(f.get_i64_array("test.ints"), (std::vector<std::int64_t>{-1, 2, -3}));
    EXPECT_EQ(f.get_u64("test.u64"), 1ull << 40);
    EXPECT_THROW(f.get_u32("test.u64"), FormatError);
    EXPECT_EQ(f.get_i64("test.i64"), -(1ll << 40));
    EXPECT_THROW(f.get_u64("test.i64"), FormatError);
    EXPECT_EQ(f.get_f64("test.f64"), 0.1);
    EXPECT_EQ(f.get_i64_array("test.u32s"), (std::vector<std::int64_t>{1, 2, 4000000000ll}));
    // Keys in insertion order.
    ASSERT_GE(f.metadata().size(), 6u);
    EXPECT_EQ(f.metadata()[0].first, "general.architecture");
    EXPECT_EQ(f.metadata()[1].first, "llama.block_count");
    ASSERT_EQ(f.tensors().size(), 3u);
    const std::vector<const std::vector<float>*> data = {&s.a, &s.b, &s.c};
    const char* names[] = {"a", "b", "c"};
    for (int k = 0; k < 3; ++k) {
      const auto& t = f.tensors()[k];
      EXPECT_EQ(t.name, names[k]);
      EXPECT_EQ(t.file_offset % alignment, 0u);
      ASSERT_EQ(t.n_bytes, data[k]->size() * 4);
      EXPECT_EQ(std::memcmp(f.tensor_data(t), data[k]->data(), t.n_bytes), 0) << t.name;
    }
    EXPECT_EQ(f.tensors()[2].n_dims, 3);
    EXPECT_EQ(f.tensors()[2].rows(), 4u);
  }
}

TEST(GGUFRoundTrip, FileOnDiskIsMappedAndReleaseKeepsData) {
  Sample s;
  const std::string path = (fs::temp_directory_path() / "kvd_gguf_roundtrip.gguf").string();
  s.w.write(path, 64);
  EXPECT_TRUE(is_gguf_file(path));
  EXPECT_FALSE(is_gguf_file(path + ".missing"));
  {
    const GGUFFile f = GGUFFile::open(path);
    EXPECT_TRUE(f.file().is_mapped());
    const GGUFTensorInfo* a = f.find_tensor("a");
    ASSERT_NE(a, nullptr);
    f.release(*a);
    EXPECT_EQ(std::memcmp(f.tensor_data(*a), s.a.data(), a->n_bytes), 0);
    // Same bytes as bytes() gives.
    EXPECT_EQ(Bytes(f.file().data(), f.file().data() + f.file_size()), s.bytes(64));
  }
  fs::remove(path);
}

TEST(GGUFRoundTrip, QuantizedTensorsAndBlockSizes) {
  GGUFWriter w;
  w.set_string("general.architecture", "llama");
  const Bytes q(2 * 34, 0x11);  // two q8_0 blocks = one row of 64
  w.add_tensor("q", WeightType::kQ8_0, {64}, q.data(), q.size());
  const GGUFFile f = parse(w.bytes());
  EXPECT_EQ(f.tensors()[0].n_bytes, 68u);
  EXPECT_EQ(std::memcmp(f.tensor_data(f.tensors()[0]), q.data(), 68), 0);
  // The writer refuses what the reader would refuse.
  EXPECT_THROW(w.add_tensor("bad", WeightType::kQ8_0, {48}, q.data(), 51), ArgumentError);
  EXPECT_THROW(w.add_tensor("q", WeightType::kQ8_0, {64}, q.data(), 68), ArgumentError);
  EXPECT_THROW(w.add_tensor("n", WeightType::kQ8_0, {64}, q.data(), 67), ArgumentError);
  EXPECT_THROW(w.bytes(48), ArgumentError);
}

TEST(GGUFFile, MissingFileIsFileError) {
  EXPECT_THROW(GGUFFile::open("/nonexistent/model.gguf"), FileError);
  try {
    GGUFFile::open("/nonexistent/model.gguf");
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos);
  }
  EXPECT_THROW(GGUFFile::open(fs::temp_directory_path().string()), FileError);
}

// ---------------------------------------------------------------------------
// One test per rejection rule.

TEST(GGUFReject, BadMagic) {
  Bytes b = Sample().bytes();
  b[0] = 'X';
  expect_format_error(b, {"magic", at(0), "0x46554758", "not a GGUF file"});
}

TEST(GGUFReject, Version1) {
  Bytes b = Sample().bytes();
  put_u32(b, 4, 1);
  expect_format_error(b, {"version", at(4), "1 is not supported", "versions 2 and 3"});
}

TEST(GGUFReject, FutureVersion) {
  Bytes b = Sample().bytes();
  put_u32(b, 4, 4);
  expect_format_error(b, {"version", at(4), "4 is not supported"});
}

TEST(GGUFReject, Version2IsAccepted) {
  Bytes b = Sample().bytes();
  put_u32(b, 4, 2);  // v2 and v3 share the layout
  EXPECT_EQ(parse(b).version(), 2u);
}

TEST(GGUFReject, TruncatedHeader) {
  Bytes b = Sample().bytes();
  b.resize(12);
  expect_format_error(b, {"tensor count", at(8), "needs 8 bytes but only 4 remain"});
}

TEST(GGUFReject, TensorCountTooLarge) {
  Bytes b = Sample().bytes();
  put_u64(b, 8, 1ull << 60);
  expect_format_error(b, {"tensor count", at(8), std::to_string(1ull << 60), "cannot fit"});
}

TEST(GGUFReject, KeyCountTooLarge) {
  Bytes b = Sample().bytes();
  put_u64(b, 16, 1ull << 40);
  expect_format_error(b, {"metadata key count", at(16), std::to_string(1ull << 40), "cannot fit"});
}

TEST(GGUFReject, ArrayCountTooLarge) {
  Bytes b = Sample().bytes();
  const auto v = *parse(b).find("test.floats");
  put_u64(b, v.file_offset + 4, 1000);  // 1000 f32 need 4000 bytes
  expect_format_error(b, {"key 'test.floats' array count", at(v.file_offset + 4), "count 1000", "4 bytes"});
}

TEST(GGUFReject, StringArrayCountCountsEightBytesPerString) {
  Bytes b = Sample().bytes();
  const std::uint64_t left = b.size();
  const auto v = *parse(b).find("test.strings");
  const std::uint64_t n = left / 8;  // fits as bytes, not as 8-byte string lengths
  put_u64(b, v.file_offset + 4, n);
  expect_format_error(b, {"key 'test.strings' array count", at(v.file_offset + 4), std::to_string(n), "8 bytes"});
}

TEST(GGUFReject, KeyLengthTooLarge) {
  Bytes b = Sample().bytes();
  const auto v = *parse(b).find("llama.block_count");
  put_u64(b, v.key_offset, 1ull << 50);
  expect_format_error(b, {"metadata key", at(v.key_offset), "string length " + std::to_string(1ull << 50)});
}

TEST(GGUFReject, StringValueLengthTooLarge) {
  Bytes b = Sample().bytes();
  const auto v = *parse(b).find("general.architecture");
  put_u64(b, v.file_offset, b.size());
  expect_format_error(b, {"key 'general.architecture'", at(v.file_offset), "string length " + std::to_string(b.size())});
}

TEST(GGUFReject, StringInArrayLengthTooLarge) {
  Bytes b = Sample().bytes();
  const auto v = *parse(b).find("test.strings");
  const std::uint64_t first = v.file_offset + 4 + 8;
  put_u64(b, first, ~0ull);
  expect_format_error(b, {"key 'test.strings' array element", at(first), "string length " + std::to_string(~0ull)});
}

TEST(GGUFReject, UnknownValueType) {
  Bytes b = Sample().bytes();
  const auto v = *parse(b).find("llama.block_count");
  put_u32(b, v.file_offset - 4, 13);
  expect_format_error(b, {"key 'llama.block_count' value type", at(v.file_offset - 4), "13 is not a GGUF value type"});
}

TEST(GGUFReject, UnknownArrayElementType) {
  Bytes b = Sample().bytes();
  const auto v = *parse(b).find("test.ints");
  put_u32(b, v.file_offset, 99);
  expect_format_error(b, {"key 'test.ints' array element type", at(v.file_offset), "99 is not a GGUF value type"});
}

TEST(GGUFReject, NestedArray) {
  Bytes b = Sample().bytes();
  const auto v = *parse(b).find("test.ints");
  put_u32(b, v.file_offset, 9);
  expect_format_error(b, {"key 'test.ints' array element type", at(v.file_offset), "arrays of arrays are not supported"});
}

TEST(GGUFReject, BoolNotZeroOrOne) {
  Bytes b = Sample().bytes();
  const auto v = *parse(b).find("test.flag");
  b[v.file_offset] = 2;
  expect_format_error(b, {"key 'test.flag'", at(v.file_offset), "bool value 2"});
}

TEST(GGUFReject, DuplicateKey) {
  GGUFWriter w;
  w.set_u32("key.aa", 1);
  w.set_u32("key.ab", 2);
  Bytes b = w.bytes();
  const GGUFFile f = parse(b);
  const auto& second = *f.find("key.ab");
  b[second.key_offset + 8 + 5] = 'a';  // "key.ab" -> "key.aa"
  expect_format_error(b, {"metadata key", at(second.key_offset), "'key.aa' appears twice",
                          "first at offset " + std::to_string(f.find("key.aa")->key_offset)});
}

TEST(GGUFReject, DuplicateTensorName) {
  Bytes b = Sample().bytes();
  const auto t = parse(b).tensors()[1];  // "b"
  b[t.info_offset + 8] = 'a';
  expect_format_error(b, {"tensor name", at(t.info_offset), "'a' appears twice"});
}

TEST(GGUFReject, UnknownTensorType) {
  Bytes b = Sample().bytes();
  const auto t = parse(b).tensors()[0];
  const auto o = fields_of(t).type;
  put_u32(b, o, 4);  // ggml removed type 4 (q4_2)
  expect_format_error(b, {"tensor 'a' type", at(o), "4 is not a ggml tensor type"});
}

TEST(GGUFReject, ZeroDims) {
  Bytes b = Sample().bytes();
  const auto o = fields_of(parse(b).tensors()[0]).n_dims;
  put_u32(b, o, 0);
  expect_format_error(b, {"tensor 'a' n_dims", at(o), "0 is outside 1..4"});
}

TEST(GGUFReject, FiveDims) {
  Bytes b = Sample().bytes();
  const auto o = fields_of(parse(b).tensors()[0]).n_dims;
  put_u32(b, o, 5);
  expect_format_error(b, {"tensor 'a' n_dims", at(o), "5 is outside 1..4"});
}

TEST(GGUFReject, ZeroDimension) {
  Bytes b = Sample().bytes();
  const auto o = fields_of(parse(b).tensors()[0]).ne0 + 8;  // ne[1]
  put_u64(b, o, 0);
  expect_format_error(b, {"tensor 'a' ne[1]", at(o), "dimension 0"});
}

TEST(GGUFReject, NegativeDimension) {
  Bytes b = Sample().bytes();
  const auto o = fields_of(parse(b).tensors()[0]).ne0;
  put_u64(b, o, 1ull << 63);
  expect_format_error(b, {"tensor 'a' ne[0]", at(o), "dimension " + std::to_string(1ull << 63), "negative"});
}

TEST(GGUFReject, DimensionProductOverflows) {
  Bytes b = Sample().bytes();
  const auto f = fields_of(parse(b).tensors()[0]);
  put_u64(b, f.ne0, 1ull << 32);
  put_u64(b, f.ne0 + 8, 1ull << 32);
  expect_format_error(b, {"tensor 'a' ne[1]", at(f.ne0 + 8), "dimension 4294967296", "overflow"});
}

TEST(GGUFReject, TensorBytesOverflow) {
  Bytes b = Sample().bytes();
  const auto f = fields_of(parse(b).tensors()[0]);
  put_u64(b, f.ne0, 1ull << 31);
  put_u64(b, f.ne0 + 8, 1ull << 31);  // 2^62 elements fit int64, 2^62 * 8 bytes (f64) do not fit 64 bits
  put_u32(b, f.type, static_cast<std::uint32_t>(WeightType::kF64));
  expect_format_error(b, {"tensor 'a' shape", at(f.n_dims), "[2147483648,2147483648]", "overflows 64 bits"});
}

TEST(GGUFReject, RowLengthNotMultipleOfBlock) {
  Bytes b = Sample().bytes();
  const auto f = fields_of(parse(b).tensors()[0]);
  put_u32(b, f.type, static_cast<std::uint32_t>(WeightType::kQ8_0));  // ne[0] = 8, block of 32
  expect_format_error(b, {"tensor 'a' ne[0]", at(f.ne0), "row length 8", "q8_0's block size 32"});
}

TEST(GGUFReject, AlignmentZero) {
  Bytes b = Sample().bytes(64);
  const auto v = *parse(b).find("general.alignment");
  put_u32(b, v.file_offset, 0);
  expect_format_error(b, {"key 'general.alignment'", at(v.file_offset), "value 0"});
}

TEST(GGUFReject, AlignmentNotPowerOfTwo) {
  Bytes b = Sample().bytes(64);
  const auto v = *parse(b).find("general.alignment");
  put_u32(b, v.file_offset, 48);
  expect_format_error(b, {"key 'general.alignment'", at(v.file_offset), "value 48 is not a power of two"});
}

TEST(GGUFReject, AlignmentNotU32) {
  Bytes b = Sample().bytes(64);
  const auto v = *parse(b).find("general.alignment");
  put_u32(b, v.file_offset - 4, static_cast<std::uint32_t>(GGUFType::kI32));
  expect_format_error(b, {"key 'general.alignment'", at(v.file_offset), "has type i32, expected u32"});
}

TEST(GGUFReject, MisalignedOffset) {
  Bytes b = Sample().bytes();
  const auto t = parse(b).tensors()[1];
  const auto o = fields_of(t).offset;
  put_u64(b, o, t.offset + 4);
  expect_format_error(b, {"tensor 'b' offset", at(o), std::to_string(t.offset + 4), "not a multiple of the alignment 32"});
}

TEST(GGUFReject, OffsetPastEnd) {
  Bytes b = Sample().bytes();
  const auto t = parse(b).tensors()[1];
  const auto o = fields_of(t).offset;
  put_u64(b, o, 1ull << 40);
  expect_format_error(b, {"tensor 'b' offset", at(o), std::to_string(1ull << 40), "past the end"});
}

TEST(GGUFReject, TensorBytesPastEnd) {
  Sample s;
  Bytes b = s.bytes();
  const auto t = parse(b).tensors()[2];  // the last tensor
  b.resize(b.size() - 4);
  expect_format_error(b, {"tensor 'c' offset", at(fields_of(t).offset), std::to_string(t.offset), "64 bytes",
                          "exceeds the data section"});
}

TEST(GGUFReject, TensorsOverlap) {
  Bytes b = Sample().bytes();
  const GGUFFile f = parse(b);
  const auto& tb = f.tensors()[1];
  const auto o = fields_of(tb).offset;
  put_u64(b, o, 64);  // "a" covers bytes 0..96
  expect_format_error(b, {"tensor 'b' offset", at(o), "64 overlaps tensor 'a'"});
}

// A count of 2^60 in a file of 40 bytes is refused before anything is allocated for it.
TEST(GGUFReject, HugeCountAllocatesNothing) {
  Bytes b(40, 0);
  put_u32(b, 0, detail::kGGUFMagic);
  put_u32(b, 4, 3);
  put_u64(b, 8, 0);
  put_u64(b, 16, 1);
  // key "k" whose value is an array of 2^60 u64
  put_u64(b, 24, 1);
  b[32] = 'k';
  put_u32(b, 33, static_cast<std::uint32_t>(GGUFType::kArray));
  b.resize(49, 0);
  put_u32(b, 37, static_cast<std::uint32_t>(GGUFType::kU64));
  put_u64(b, 41, 1ull << 60);
  g_largest_alloc = 0;
  expect_format_error(b, {"key 'k' array count", at(41), std::to_string(1ull << 60)});
  EXPECT_LT(g_largest_alloc.load(), std::size_t{4096}) << "largest single allocation while parsing";
  // The same count as the tensor count.
  Bytes c = Sample().bytes();
  put_u64(c, 8, 1ull << 60);
  g_largest_alloc = 0;
  const std::size_t file_bytes = c.size();
  expect_format_error(c, {"tensor count", at(8)});
  EXPECT_LE(g_largest_alloc.load(), file_bytes + 4096);
}

TEST(MappedFile, ReadFallbackGivesTheMappedBytes) {
  Sample s;
  const std::string path = (fs::temp_directory_path() / "kvd_mapped_fallback.gguf").string();
  s.w.write(path);
  const detail::MappedFile mapped = detail::MappedFile::open(path);
  const detail::MappedFile read = detail::MappedFile::read(path);
  EXPECT_TRUE(mapped.is_mapped());
  EXPECT_FALSE(read.is_mapped());
  ASSERT_EQ(read.size(), mapped.size());
  EXPECT_EQ(std::memcmp(read.data(), mapped.data(), read.size()), 0);
  read.release(0, read.size());  // a no-op without a mapping
  fs::remove(path);
}

TEST(MappedFile, EmptyFileIsRejectedAsTruncated) {
  const std::string path = (fs::temp_directory_path() / "kvd_empty.gguf").string();
  { std::ofstream out(path, std::ios::binary); }
  try {
    GGUFFile::open(path);
    ADD_FAILURE() << "expected a FormatError";
  } catch (const FormatError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path + ": magic at offset 0: needs 4 bytes but only 0 remain"), std::string::npos) << m;
  }
  fs::remove(path);
}

TEST(MappedFile, NonRegularFileIsRefused) {
#if defined(__linux__)
  try {
    detail::MappedFile::open("/dev/null");
    ADD_FAILURE() << "expected a FileError";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("'/dev/null' is not a regular file"), std::string::npos) << e.what();
  }
#else
  GTEST_SKIP() << "needs /dev/null";
#endif
}

// ---------------------------------------------------------------------------
// The cursor itself.

TEST(ByteCursor, ReadsLittleEndianAndNamesFields) {
  const Bytes b = {1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0xff};
  detail::ByteCursor c(b.data(), b.size(), "mem", 100);
  EXPECT_EQ(c.u32("x"), 1u);
  EXPECT_EQ(c.u64("y"), 2u);
  EXPECT_EQ(c.offset(), 112u);
  EXPECT_EQ(c.i8("z"), -1);
  try {
    c.u8("past");
    ADD_FAILURE();
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()), "mem: past at offset 113: needs 1 bytes but only 0 remain (file ends at offset 113)");
  }
  EXPECT_EQ(c.offset(), 113u);
}

TEST(ByteCursor, CheckedArithmetic) {
  EXPECT_EQ(detail::checked_mul(1ull << 31, 1ull << 32, "x"), 1ull << 63);
  EXPECT_THROW(detail::checked_mul(1ull << 32, 1ull << 32, "x"), FormatError);
  EXPECT_THROW(detail::checked_add(~0ull, 1, "x"), FormatError);
  EXPECT_EQ(detail::checked_add(~0ull - 1, 1, "x"), ~0ull);
}
