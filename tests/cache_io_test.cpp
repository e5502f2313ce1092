// Cache files. Saving a cache and loading it back is exact: generation that
// continues from a loaded cache gives the logits, bit for bit (memcmp), of
// generation that never left memory, for every cache element type. Every
// malformed or mismatched file is its own test: the typed error, a message
// naming the file, the bad value and the limit, and a target cache left
// exactly as it was (same length, same bits, and it still decodes correctly).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "kvdecode/cache/cache_io.hpp"
#include "test_util.hpp"

using namespace kvd;
using kvd_test::make_tokens;
namespace fs = std::filesystem;

namespace {

using kvd_test::TempDir;

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void put_u32(std::vector<unsigned char>& b, std::size_t offset, std::uint32_t v) {
  detail::store_u32_le(b.data() + offset, v);
}
void put_u64(std::vector<unsigned char>& b, std::size_t offset, std::uint64_t v) {
  detail::store_u64_le(b.data() + offset, v);
}

/// Recomputes the trailing checksum, so that a deliberately edited header is
/// rejected by the check meant for it and not by the checksum.
void reseal(std::vector<unsigned char>& b) {
  put_u64(b, b.size() - 8, detail::fnv1a64(b.data(), b.size() - 8));
}

// Header offsets (see cache_io.hpp).
constexpr std::size_t kVersionAt = 4, kLayersAt = 12, kCapacityAt = 28, kLengthAt = 32, kDtypeAt = 36,
                      kModelIdAt = 40, kDataBytesAt = 48, kWindowAt = 56, kFirstAt = 60, kHeader = 64;

/// Every K/V element of positions [first_position, length) as T, in a fixed order.
template <class T, class S>
std::vector<T> contents(const KVCache<T, S>& cache) {
  std::vector<T> out;
  const CacheShape& s = cache.shape();
  for (int l = 0; l < s.n_layers; ++l)
    for (int p = cache.first_position(); p < cache.length(); ++p)
      for (int h = 0; h < s.n_kv_heads; ++h)
        for (int d = 0; d < s.head_dim; ++d) {
          out.push_back(cache.key(l, p, h, d));
          out.push_back(cache.value(l, p, h, d));
        }
  return out;
}

template <class E, class F>
std::string expect_throw(F&& f) {
  try {
    f();
  } catch (const E& e) {
    const kvd::Error& root = e;  // the hierarchy is rooted at kvd::Error
    return root.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception thrown";
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "message: " << (haystack) << "\nmissing: " << (needle)

}  // namespace

// ------------------------------------------------------------ building blocks

TEST(CacheIoChecksum, Fnv1a64KnownVectors) {
  auto h = [](const std::string& s) {
    return detail::fnv1a64(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  };
  EXPECT_EQ(h(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(h("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(h("foobar"), 0x85944171f73967e8ull);
  // Incremental hashing equals hashing the concatenation.
  const std::string s = "foobar";
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  EXPECT_EQ(detail::fnv1a64(p + 3, 3, detail::fnv1a64(p, 3)), h("foobar"));
}

TEST(CacheIoFingerprint, SameConfigSameIdAnyFieldChangesIt) {
  const ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 50, 20);
  EXPECT_EQ(config_fingerprint(c), config_fingerprint(ModelConfig(c)));
  ModelConfig other = c;
  other.rope_theta = 500000.0;
  EXPECT_NE(config_fingerprint(other), config_fingerprint(c));
  other = c;
  other.vocab_size += 1;
  EXPECT_NE(config_fingerprint(other), config_fingerprint(c));
  other = c;
  other.sliding_window = 8;
  EXPECT_NE(config_fingerprint(other), config_fingerprint(c));
  // The architecture fields change K (RoPE, biases, k norm) as much as the shapes do.
  other = c;
  other.rope_style = RopeStyle::kHalves;
  EXPECT_NE(config_fingerprint(other), config_fingerprint(c));
  other = c;
  other.rope_dim = c.head_dim / 2;
  EXPECT_NE(config_fingerprint(other), config_fingerprint(c));
  other = c;
  other.qkv_bias = true;
  EXPECT_NE(config_fingerprint(other), config_fingerprint(c));
  other = c;
  other.qk_norm = true;
  EXPECT_NE(config_fingerprint(other), config_fingerprint(c));
}

// ------------------------------------------------------------ exact round trip

namespace {
template <class T_, class S_>
struct Types {
  using T = T_;
  using S = S_;
};

template <class P>
class CacheIoRoundTrip : public ::testing::Test {};

using RoundTripTypes = ::testing::Types<Types<float, float>, Types<float, Eigen::bfloat16>, Types<float, Eigen::half>,
                                        Types<double, double>>;
struct RoundTripName {
  template <class P>
  static std::string GetName(int) {
    return std::string(std::is_same_v<typename P::T, float> ? "float" : "double") + "_compute_" +
           dtype_name(DTypeOf<typename P::S>::value) + "_cache";
  }
};
TYPED_TEST_SUITE(CacheIoRoundTrip, RoundTripTypes, RoundTripName);
}  // namespace

// Prefill + some decode steps, save, load; then many decode steps on the loaded
// cache give the same logits as on the cache that was never saved, and as the
// cache-free reference.
TYPED_TEST(CacheIoRoundTrip, ContinuingAfterLoadIsBitIdentical) {
  using T = typename TypeParam::T;
  using S = typename TypeParam::S;
  TempDir dir;
  const ModelConfig c = kvd_test::small_config(8, 2, 16, 64, 2, 96, 130, 70);  // GQA, several 16-position blocks
  Transformer<T> model(ModelWeights<T>::random(c, 51));
  const int n = c.max_seq_len, V = c.vocab_size, saved_at = 29;
  const auto tokens = make_tokens(n, V, 17);
  const RowMatrix<T> ref = model.template forward_reference<S>(tokens);

  KVCache<T, S> never_saved(c);
  model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 21), never_saved);
  for (int t = 21; t < saved_at; ++t) model.decode_step(tokens[t], never_saved);
  const std::string path = dir.file("seq.kvdc");
  save_cache(never_saved, path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  KVCache<T, S> loaded = load_cache<T, S>(path, c);
  ASSERT_EQ(loaded.length(), saved_at);
  EXPECT_EQ(loaded.capacity(), never_saved.capacity());
  const std::vector<T> a = contents(never_saved), b = contents(loaded);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(kvd_test::same_bits(a.data(), b.data(), static_cast<long>(a.size())));

  // The same file restored into a cache that already held something else.
  KVCache<T, S> restored(c);
  model.prefill(make_tokens(40, V, 99), restored);
  restore_cache(path, restored);
  ASSERT_EQ(restored.length(), saved_at);

  // Each step's logits from the three caches: copied out, since a view lives until the next call.
  auto step = [&](KVCache<T, S>& cache, int t) {
    auto row = model.decode_step(tokens[t], cache);
    return std::vector<T>(row.data(), row.data() + V);
  };
  for (int t = saved_at; t < n; ++t) {
    const std::vector<T> want = step(never_saved, t), got = step(loaded, t), got2 = step(restored, t);
    ASSERT_TRUE(kvd_test::same_bits(got.data(), want.data(), V))
        << "loaded cache, position " << t << ": " << kvd_test::first_difference(got.data(), want.data(), V);
    ASSERT_TRUE(kvd_test::same_bits(got2.data(), want.data(), V))
        << "restored cache, position " << t << ": " << kvd_test::first_difference(got2.data(), want.data(), V);
    ASSERT_TRUE(kvd_test::same_bits(want.data(), ref.row(t).data(), V))
        << "reference, position " << t << ": " << kvd_test::first_difference(want.data(), ref.row(t).data(), V);
  }
  EXPECT_EQ(loaded.length(), n);
}

// A sliding-window cache (a ring of blocks) saves only the window later rows can
// attend to, and continues exactly after loading, also into rings of other sizes.
template <class S>
void check_window_round_trip() {
  TempDir dir;
  ModelConfig c = kvd_test::small_config(8, 2, 16, 64, 2, 96, 130, 90);
  c.sliding_window = 24;
  Transformer<float> model(ModelWeights<float>::random(c, 55));
  const int n = c.max_seq_len, V = c.vocab_size, saved_at = 53;
  const auto tokens = make_tokens(n, V, 18);
  const RowMatrix<float> ref = model.forward_reference<S>(tokens);

  KVCache<float, S> never_saved(c);
  model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 40), never_saved);
  for (int t = 40; t < saved_at; ++t) model.decode_step(tokens[t], never_saved);
  ASSERT_EQ(never_saved.first_position(), saved_at - 24 + 1);
  const std::string path = dir.file("window.kvdc");
  save_cache(never_saved, path);
  EXPECT_EQ(fs::file_size(path), 64 + 23 * never_saved.bytes_per_token() + 8);  // the window only
  const CacheFileInfo info = read_cache_info(path);
  EXPECT_EQ(info.first, saved_at - 23);
  EXPECT_EQ(info.length, saved_at);
  EXPECT_EQ(info.shape.sliding_window, 24);

  CacheLoadOptions small_ring;
  small_ring.max_append = 3;  // a smaller ring than the saved cache's
  KVCache<float, S> loaded = load_cache<float, S>(path, c, small_ring);
  KVCache<float, S> restored(c, 0, 40);  // a larger ring, holding another sequence first
  model.prefill(make_tokens(80, V, 98), restored);
  restore_cache(path, restored);
  ASSERT_EQ(loaded.length(), saved_at);
  ASSERT_EQ(restored.length(), saved_at);
  EXPECT_EQ(contents(loaded), contents(never_saved));
  EXPECT_EQ(contents(restored), contents(never_saved));

  auto step = [&](KVCache<float, S>& cache, int t) {
    auto row = model.decode_step(tokens[t], cache);
    return std::vector<float>(row.data(), row.data() + V);
  };
  for (int t = saved_at; t < n; ++t) {
    const std::vector<float> want = step(never_saved, t), got = step(loaded, t), got2 = step(restored, t);
    ASSERT_TRUE(kvd_test::same_bits(got.data(), want.data(), V)) << "loaded, position " << t;
    ASSERT_TRUE(kvd_test::same_bits(got2.data(), want.data(), V)) << "restored, position " << t;
    ASSERT_TRUE(kvd_test::same_bits(want.data(), ref.row(t).data(), V))
        << "reference, position " << t << ": " << kvd_test::first_difference(want.data(), ref.row(t).data(), V);
  }
}

// A restored window cache holds [first, length) only: rewinding to a length whose
// window needs older positions is refused and changes nothing; a rewind the saved
// window covers is allowed and exact.
TEST(CacheIoWindow, RestoredCacheRefusesRewindPastWhatWasRestored) {
  TempDir dir;
  ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 60, 90);
  c.sliding_window = 10;
  Transformer<float> model(ModelWeights<float>::random(c, 56));
  const auto tokens = make_tokens(60, c.vocab_size, 19);
  KVCache<float> cache(c);
  model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 50), cache);
  const std::string path = dir.file("w.kvdc");
  save_cache(cache, path);  // holds positions [41, 50)
  KVCache<float> restored = load_cache<float>(path, c);
  EXPECT_EQ(restored.oldest_resident(), 41);
  EXPECT_THROW(restored.truncate(49), CacheFullError);  // its window would start at 40
  EXPECT_EQ(restored.length(), 50);
  restored.truncate(50);
  const RowMatrix<float> ref = model.forward_reference(std::vector<int>(tokens.begin(), tokens.begin() + 51));
  auto row = model.decode_step(tokens[50], restored);
  EXPECT_TRUE(kvd_test::same_bits(row.data(), ref.row(50).data(), c.vocab_size));
}

TEST(CacheIoWindow, ContinuingAfterLoadIsBitIdenticalF32) { check_window_round_trip<float>(); }
TEST(CacheIoWindow, ContinuingAfterLoadIsBitIdenticalBF16) { check_window_round_trip<Eigen::bfloat16>(); }
TEST(CacheIoWindow, ContinuingAfterLoadIsBitIdenticalF16) { check_window_round_trip<Eigen::half>(); }

// Files hold the live positions only, and read_cache_info reports the header.
TEST(CacheIoFormat, FileHoldsOnlyLivePositions) {
  TempDir dir;
  const ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 3, 48, 50, 64);
  Transformer<float> model(ModelWeights<float>::random(c, 52));
  KVCache<float, Eigen::half> cache(c, 48);
  model.prefill(make_tokens(19, c.vocab_size), cache);
  const std::string path = dir.file("half.kvdc");
  save_cache(cache, path, 0x1234);
  const std::uint64_t per_token = 2ull * 3 * 2 * 8 * 2;
  ASSERT_EQ(cache.bytes_per_token(), per_token);
  EXPECT_EQ(fs::file_size(path), 64 + 19 * per_token + 8);
  const CacheFileInfo info = read_cache_info(path);
  EXPECT_TRUE(info.shape == CacheShape::of(c));
  EXPECT_EQ(info.dtype, DType::kF16);
  EXPECT_EQ(info.capacity, 48);
  EXPECT_EQ(info.length, 19);
  EXPECT_EQ(info.first, 0);
  EXPECT_EQ(info.model_id, 0x1234u);
  EXPECT_EQ(info.data_bytes, 19 * per_token);
  EXPECT_EQ(info.file_bytes, fs::file_size(path));
  const auto bytes = read_bytes(path);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "KVDC");
}

// An empty cache saves and loads as an empty cache.
TEST(CacheIoFormat, EmptyCacheRoundTrips) {
  TempDir dir;
  const ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 50, 20);
  KVCache<float> cache(c, 5);
  const std::string path = dir.file("empty.kvdc");
  save_cache(cache, path);
  EXPECT_EQ(fs::file_size(path), 64u + 8u);
  KVCache<float> loaded = load_cache<float>(path, c);
  EXPECT_EQ(loaded.length(), 0);
  EXPECT_EQ(loaded.capacity(), 5);
}

// A cache loaded with a larger capacity than it was saved with decodes past the old limit.
TEST(CacheIoFormat, LoadWithLargerCapacityKeepsDecodingExactly) {
  TempDir dir;
  const ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 50, 40);
  Transformer<float> model(ModelWeights<float>::random(c, 53));
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 8);
  const RowMatrix<float> ref = model.forward_reference<Eigen::bfloat16>(tokens);
  KVCache<float, Eigen::bfloat16> small(c, 16);
  model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + 16), small);
  const std::string path = dir.file("grow.kvdc");
  save_cache(small, path);
  CacheLoadOptions opt;
  opt.capacity = c.max_seq_len;
  auto big = load_cache<float, Eigen::bfloat16>(path, c, opt);
  EXPECT_EQ(big.capacity(), c.max_seq_len);
  for (int t = 16; t < c.max_seq_len; ++t) {
    auto row = model.decode_step(tokens[t], big);
    ASSERT_TRUE(kvd_test::same_bits(row.data(), ref.row(t).data(), c.vocab_size)) << "position " << t;
  }
}

TEST(CacheIoFormat, SaveReplacesAnExistingFile) {
  TempDir dir;
  const ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 50, 20);
  Transformer<float> model(ModelWeights<float>::random(c, 54));
  KVCache<float> cache(c);
  const std::string path = dir.file("seq.kvdc");
  write_bytes(path, std::vector<unsigned char>(1000, 0xAB));
  model.prefill(make_tokens(3, c.vocab_size), cache);
  save_cache(cache, path);
  EXPECT_EQ(read_cache_info(path).length, 3);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(CacheIoFormat, SaveIntoMissingDirectoryThrowsFileError) {
  TempDir dir;
  const ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 50, 20);
  KVCache<float> cache(c);
  const std::string path = dir.file("no/such/dir/seq.kvdc");
  const std::string m = expect_throw<FileError>([&] { save_cache(cache, path); });
  EXPECT_HAS(m, path);
  EXPECT_HAS(m, "cannot open");
  EXPECT_FALSE(fs::exists(path));
}

// ------------------------------------------------------------ malformed and mismatched files
// A sound file `good` of 10 positions (capacity 16) and a target cache holding 7
// other positions. Each test damages a copy of `good` in one way and checks the
// error from restore_cache (target unchanged) and from load_cache.

namespace {
struct BadCacheFile : ::testing::Test {
  ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 48, 50, 20);
  Transformer<float> model{ModelWeights<float>::random(c, 61)};
  TempDir dir;
  std::string good = dir.file("good.kvdc");
  std::string bad = dir.file("bad.kvdc");
  std::vector<int> target_tokens = make_tokens(7, c.vocab_size, 77);
  KVCache<float> target{c};
  std::vector<float> snapshot;

  void SetUp() override {
    KVCache<float> source(c, 16);
    model.prefill(make_tokens(10, c.vocab_size, 3), source);
    save_cache(source, good);
    model.prefill(target_tokens, target);
    snapshot = contents(target);
  }
  std::vector<unsigned char> good_bytes() const { return read_bytes(good); }

  // restore_cache(path, target) throws E; the target is exactly as it was and still decodes
  // like the cache-free reference. Returns the message.
  template <class E>
  std::string restore_fails(const std::string& path, std::uint64_t model_id = 0) {
    const std::string m = expect_throw<E>([&] { restore_cache(path, target, model_id); });
    EXPECT_EQ(target.length(), 7);
    EXPECT_EQ(target.capacity(), c.max_seq_len);
    const std::vector<float> now = contents(target);
    EXPECT_EQ(now, snapshot);  // exact float equality, element by element
    std::vector<int> toks = target_tokens;
    toks.push_back(5);
    const RowMatrix<float> ref = model.forward_reference(toks);
    auto row = model.decode_step(5, target);
    EXPECT_ROW_BITS_EQ(row.data(), ref.row(7).data(), c.vocab_size);
    target.truncate(7);
    return m;
  }
  // load_cache<float>(path, c) throws E with the same message.
  template <class E>
  void load_fails(const std::string& path, const std::string& restore_message) {
    const std::string m = expect_throw<E>([&] { load_cache<float>(path, c); });
    EXPECT_EQ(m, restore_message);
  }
};
}  // namespace

TEST_F(BadCacheFile, SoundFileRestores) {
  restore_cache(good, target);
  EXPECT_EQ(target.length(), 10);
  EXPECT_EQ(read_cache_info(good).length, 10);
}

TEST_F(BadCacheFile, TruncatedData) {
  auto b = good_bytes();
  const std::size_t full = b.size();
  b.resize(full - 1);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "truncated");
  EXPECT_HAS(m, std::to_string(full - 1) + " bytes");
  EXPECT_HAS(m, "implies " + std::to_string(full));
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, TruncatedHeader) {
  auto b = good_bytes();
  b.resize(30);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "truncated: the file has 30 bytes");
  EXPECT_HAS(m, "needs 64");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, EmptyFile) {
  write_bytes(bad, {});
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "empty (0 bytes)");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, ExtraBytesAtTheEnd) {
  auto b = good_bytes();
  const std::size_t full = b.size();
  b.push_back(0);
  b.push_back(0);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, std::to_string(full + 2) + " bytes");
  EXPECT_HAS(m, "implies " + std::to_string(full));
  EXPECT_HAS(m, "2 extra bytes");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, FlippedDataByteFailsTheChecksum) {
  auto b = good_bytes();
  b[kHeader + (b.size() - kHeader - 8) / 2] ^= 0x01;
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "checksum mismatch");
  EXPECT_HAS(m, "corrupt");
  load_fails<FileError>(bad, m);
}

// FNV-1a changes on any single changed byte, so every byte of the data and every
// header byte no other check looks at is covered.
TEST_F(BadCacheFile, EveryFlippedDataOrModelIdByteFailsTheChecksum) {
  const auto original = good_bytes();
  std::vector<std::size_t> offsets;
  for (std::size_t i = kModelIdAt; i < kModelIdAt + 8; ++i) offsets.push_back(i);
  for (std::size_t i = kHeader; i < original.size(); ++i) offsets.push_back(i);  // data and checksum
  for (std::size_t i : offsets) {
    auto b = original;
    b[i] ^= 0x80;
    write_bytes(bad, b);
    const std::string m = expect_throw<FileError>([&] { restore_cache(bad, target); });
    ASSERT_NE(m.find("checksum mismatch"), std::string::npos) << "byte " << i << ": " << m;
  }
  EXPECT_EQ(target.length(), 7);
  const std::vector<float> now = contents(target);
  EXPECT_TRUE(kvd_test::same_bits(now.data(), snapshot.data(), static_cast<long>(now.size())));
}

TEST_F(BadCacheFile, WrongMagic) {
  auto b = good_bytes();
  b[3] = 'X';
  reseal(b);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "not a kvdecode cache file");
  EXPECT_HAS(m, "\"KVDX\"");
  EXPECT_HAS(m, "\"KVDC\"");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, WrongVersion) {
  auto b = good_bytes();
  put_u32(b, kVersionAt, 2);
  reseal(b);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "unsupported cache file version 2");
  EXPECT_HAS(m, "reads version 1");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, LengthAboveCapacity) {
  // A self-consistent file (data for 17 positions, checksum valid) whose length exceeds its capacity of 16.
  auto b = good_bytes();
  const std::uint64_t per_token = KVCache<float>(c, 1).bytes_per_token();
  b.resize(b.size() - 8);
  b.insert(b.end(), 7 * per_token, 0);
  b.insert(b.end(), 8, 0);
  put_u32(b, kLengthAt, 17);
  put_u64(b, kDataBytesAt, 17 * per_token);
  reseal(b);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "length = 17 exceeds the cache's capacity = 16");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, CapacityAboveMaxSeqLen) {
  auto b = good_bytes();
  put_u32(b, kCapacityAt, 21);
  reseal(b);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "capacity = 21 must be in [1, max_seq_len = 20]");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, ZeroLayersInHeader) {
  auto b = good_bytes();
  put_u32(b, kLayersAt, 0);
  reseal(b);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "n_layers = 0 must be in [1, 1048576]");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, UnknownDtypeCode) {
  auto b = good_bytes();
  b[kDtypeAt] = 4;  // q8: not a cache element type
  reseal(b);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "dtype = 4 is not a cache element type");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, DataBytesFieldDisagreesWithShape) {
  auto b = good_bytes();
  put_u64(b, kDataBytesAt, 12345);
  reseal(b);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "data bytes = 12345");
  EXPECT_HAS(m, "need " + std::to_string(b.size() - 72));
  load_fails<FileError>(bad, m);
}

// Issue 12 finding: 2^20 layers x 2^20 KV heads x 2^20 head_dim x 8 positions x 2 x 4 bytes
// is 2^66, which wrapped to 0 data bytes, so a 72-byte file claiming it was accepted.
TEST_F(BadCacheFile, ShapeProductWrapping64BitsIsRejected) {
  std::vector<unsigned char> b(72, 0);
  std::memcpy(b.data(), "KVDC", 4);
  put_u32(b, kVersionAt, 1);
  put_u32(b, 8, 64);
  put_u32(b, kLayersAt, 1u << 20);
  put_u32(b, 16, 1u << 20);  // n_kv_heads
  put_u32(b, 20, 1u << 20);  // head_dim
  put_u32(b, 24, 16);        // max_seq_len
  put_u32(b, kCapacityAt, 16);
  put_u32(b, kLengthAt, 8);
  b[kDtypeAt] = 0;  // f32
  b[37] = 4;
  put_u64(b, kDataBytesAt, 0);  // what the wrapped product gave
  reseal(b);
  write_bytes(bad, b);
  const std::string m = expect_throw<FormatError>([&] { read_cache_info(bad); });
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "more data than 64-bit sizes hold");
  EXPECT_HAS(m, "n_layers 1048576 x n_kv_heads 1048576 x head_dim 1048576");
  EXPECT_EQ(restore_fails<FormatError>(bad), m);
  load_fails<FormatError>(bad, m);
}

TEST_F(BadCacheFile, NonzeroReservedByte) {
  auto b = good_bytes();
  b[38] = 7;
  reseal(b);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "reserved header byte 38 = 7 must be 0");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, FirstPositionInconsistentWithLength) {
  auto b = good_bytes();
  put_u32(b, kFirstAt, 3);  // without a window the file must start at position 0
  reseal(b);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "first = 3 must be 0 for length 10 and sliding_window 0");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, SlidingWindowAboveLimit) {
  auto b = good_bytes();
  put_u32(b, kWindowAt, (1u << 20) + 1);
  reseal(b);
  write_bytes(bad, b);
  const std::string m = restore_fails<FileError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "sliding_window = 1048577 must be in [0, 1048576]");
  load_fails<FileError>(bad, m);
}

TEST_F(BadCacheFile, ShapeMismatch) {
  ModelConfig other = c;
  other.n_layers = 3;
  KVCache<float> cache(other, 16);
  Transformer<float>(ModelWeights<float>::random(other, 62)).prefill(make_tokens(10, c.vocab_size), cache);
  save_cache(cache, bad);
  const std::string m = restore_fails<CacheMismatchError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "saved for cache shape (layers 3, kv_heads 2, head_dim 8, max_seq_len 20, sliding_window 0)");
  EXPECT_HAS(m, "the model's cache shape is (layers 2, kv_heads 2, head_dim 8, max_seq_len 20, sliding_window 0)");
  load_fails<CacheMismatchError>(bad, m);
}

TEST_F(BadCacheFile, MaxSeqLenMismatch) {
  ModelConfig other = c;
  other.max_seq_len = 32;
  KVCache<float> cache(other, 16);
  Transformer<float>(ModelWeights<float>::random(other, 63)).prefill(make_tokens(10, c.vocab_size), cache);
  save_cache(cache, bad);
  const std::string m = restore_fails<CacheMismatchError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "max_seq_len 32, sliding_window 0)");
  EXPECT_HAS(m, "max_seq_len 20, sliding_window 0)");
  load_fails<CacheMismatchError>(bad, m);
}

TEST_F(BadCacheFile, SlidingWindowMismatch) {
  ModelConfig other = c;
  other.sliding_window = 6;
  KVCache<float> cache(other, 16);
  Transformer<float>(ModelWeights<float>::random(other, 64)).prefill(make_tokens(10, c.vocab_size), cache);
  save_cache(cache, bad);
  const std::string m = restore_fails<CacheMismatchError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "saved for cache shape (layers 2, kv_heads 2, head_dim 8, max_seq_len 20, sliding_window 6)");
  EXPECT_HAS(m, "the model's cache shape is (layers 2, kv_heads 2, head_dim 8, max_seq_len 20, sliding_window 0)");
  load_fails<CacheMismatchError>(bad, m);
}

TEST_F(BadCacheFile, DtypeMismatch) {
  KVCache<float, Eigen::bfloat16> cache(c, 16);
  model.prefill(make_tokens(10, c.vocab_size), cache);
  save_cache(cache, bad);
  const std::string m = restore_fails<CacheMismatchError>(bad);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "holds bf16 elements, but the cache stores f32");
  load_fails<CacheMismatchError>(bad, m);
}

TEST_F(BadCacheFile, ModelIdMismatch) {
  KVCache<float> cache(c, 16);
  model.prefill(make_tokens(10, c.vocab_size), cache);
  save_cache(cache, bad, config_fingerprint(c));
  const std::uint64_t other = config_fingerprint(c) ^ 1;
  const std::string m = restore_fails<CacheMismatchError>(bad, other);
  EXPECT_HAS(m, bad);
  EXPECT_HAS(m, "model_id");
  std::ostringstream ids;
  ids << std::hex << "0x" << config_fingerprint(c) << ", expected 0x" << other;
  EXPECT_HAS(m, ids.str());
  CacheLoadOptions opt;
  opt.model_id = other;
  EXPECT_EQ(expect_throw<CacheMismatchError>([&] { load_cache<float>(bad, c, opt); }), m);
  // The right id loads.
  opt.model_id = config_fingerprint(c);
  EXPECT_EQ(load_cache<float>(bad, c, opt).length(), 10);
}

TEST_F(BadCacheFile, TargetCacheTooSmall) {
  KVCache<float> small(c, 8);
  model.prefill(make_tokens(3, c.vocab_size), small);
  const std::vector<float> before = contents(small);
  const std::string m = expect_throw<CacheFullError>([&] { restore_cache(good, small); });
  EXPECT_HAS(m, good);
  EXPECT_HAS(m, "holds 10 positions, more than the target cache's capacity of 8");
  EXPECT_EQ(small.length(), 3);
  EXPECT_EQ(contents(small), before);
  CacheLoadOptions opt;
  opt.capacity = 9;
  const std::string m2 = expect_throw<CacheFullError>([&] { load_cache<float>(good, c, opt); });
  EXPECT_HAS(m2, "holds 10 positions, more than the requested capacity of 9");
}

TEST_F(BadCacheFile, MissingFile) {
  const std::string missing = dir.file("missing.kvdc");
  const std::string m = restore_fails<FileError>(missing);
  EXPECT_HAS(m, missing);
  EXPECT_HAS(m, "does not exist");
  load_fails<FileError>(missing, m);
}

TEST_F(BadCacheFile, Directory) {
  const std::string d = dir.file("a_directory");
  fs::create_directory(d);
  const std::string m = restore_fails<FileError>(d);
  EXPECT_HAS(m, d);
  EXPECT_HAS(m, "is a directory");
  load_fails<FileError>(d, m);
}

TEST_F(BadCacheFile, NotACacheFileAtAll) {
  const std::string text = dir.file("notes.txt");
  const std::string s = "hello, this is text and not a cache file at all. It is long enough for a header.........";
  write_bytes(text, std::vector<unsigned char>(s.begin(), s.end()));
  const std::string m = restore_fails<FileError>(text);
  EXPECT_HAS(m, text);
  EXPECT_HAS(m, "starts with \"hell\", expected the magic \"KVDC\"");
  load_fails<FileError>(text, m);
}
