// KVCache on its own: append, length, clear, truncate (rewind), exact memory
// accounting, storage layout, and the sliding-window ring that keeps only the
// last W positions while staying bit-identical to the banded-mask reference.
#include <gtest/gtest.h>

#include <cstdio>

#include "test_util.hpp"

using namespace kvd;
using kvd_test::make_tokens;

namespace {
ModelConfig cfg() { return kvd_test::small_config(4, 2, 10, 40, 3, 48, 50, 40); }
}  // namespace

TEST(KVCache, AppendStoresValuesAndCountsLength) {
  const ModelConfig c = cfg();
  KVCache<float> cache(c, 20);
  const int kv = c.kv_dim();
  std::vector<float> k(c.n_layers * kv), v(c.n_layers * kv);
  for (int pos = 0; pos < 20; ++pos) {
    for (int i = 0; i < c.n_layers * kv; ++i) { k[i] = pos * 1000.f + i; v[i] = -(pos * 1000.f + i); }
    cache.append(k.data(), v.data());
  }
  EXPECT_EQ(cache.length(), 20);
  for (int l = 0; l < c.n_layers; ++l)
    for (int pos = 0; pos < 20; pos += 7)
      for (int h = 0; h < c.n_kv_heads; ++h)
        for (int d = 0; d < c.head_dim; ++d) {
          const float want = pos * 1000.f + l * kv + h * c.head_dim + d;
          EXPECT_EQ(cache.key(l, pos, h, d), want);
          EXPECT_EQ(cache.value(l, pos, h, d), -want);
        }
  EXPECT_THROW(cache.append(k.data(), v.data()), CacheFullError);
  EXPECT_EQ(cache.length(), 20);
}

TEST(KVCache, MemoryAccountingIsExact) {
  const ModelConfig c = cfg();
  KVCache<float> cache(c, 20);
  // 2 (K, V) x 3 layers x 2 KV heads x 10 dims x 4 bytes
  EXPECT_EQ(cache.bytes_per_token(), 2u * 3 * 2 * 10 * 4);
  EXPECT_EQ(cache.bytes_per_token(), c.kv_bytes_per_token(DType::kF32));
  EXPECT_EQ(cache.bytes_used(), 0u);
  EXPECT_EQ(cache.bytes_reserved(), 32u * cache.bytes_per_token());  // 20 positions in blocks of 16
  Transformer<float> model(ModelWeights<float>::random(c, 1));
  model.prefill(make_tokens(13, c.vocab_size), cache);
  EXPECT_EQ(cache.bytes_used(), 13u * cache.bytes_per_token());
  KVCache<Eigen::bfloat16> half(c, 20);
  EXPECT_EQ(half.bytes_per_token() * 2, cache.bytes_per_token());
  KVCache<double> dbl(c, 20);
  EXPECT_EQ(dbl.bytes_per_token(), cache.bytes_per_token() * 2);
}

TEST(KVCache, ClearAndTruncateRewindExactly) {
  const ModelConfig c = cfg();
  Transformer<float> model(ModelWeights<float>::random(c, 2));
  const auto toks = make_tokens(30, c.vocab_size);
  const RowMatrix<float> ref = model.forward_reference(toks);
  KVCache<float> cache(c);
  model.prefill(std::vector<int>(toks.begin(), toks.begin() + 25), cache);
  cache.truncate(12);  // rewind and continue: exact
  EXPECT_EQ(cache.length(), 12);
  for (int t = 12; t < 30; ++t) {
    auto row = model.decode_step(toks[t], cache);
    ASSERT_TRUE(kvd_test::same_bits(row.data(), ref.row(t).data(), c.vocab_size)) << "t=" << t;
  }
  EXPECT_THROW(cache.truncate(31), CacheFullError);
  EXPECT_THROW(cache.truncate(-1), CacheFullError);
  EXPECT_EQ(cache.length(), 30);
  cache.clear();
  EXPECT_EQ(cache.length(), 0);
  auto first = model.prefill({toks[0]}, cache);
  EXPECT_TRUE(kvd_test::same_bits(first.data(), ref.row(0).data(), c.vocab_size));
}

TEST(KVCache, ExplicitCopyIsIndependent) {
  const ModelConfig c = cfg();
  Transformer<float> model(ModelWeights<float>::random(c, 3));
  const auto toks = make_tokens(20, c.vocab_size);
  KVCache<float> a(c);
  model.prefill(std::vector<int>(toks.begin(), toks.begin() + 10), a);
  KVCache<float> b = a.copy();
  RowMatrix<float> ra = model.decode_step(toks[10], a);
  RowMatrix<float> rb = model.decode_step(toks[10], b);
  EXPECT_TRUE(kvd_test::same_bits(ra.data(), rb.data(), c.vocab_size));
  model.decode_step(toks[11], a);
  EXPECT_EQ(b.length(), 11);
  EXPECT_EQ(a.length(), 12);
}

TEST(KVCache, InvalidCapacityRejected) {
  const ModelConfig c = cfg();
  EXPECT_THROW(KVCache<float>(c, 41), ConfigError);
  EXPECT_THROW(KVCache<float>(c, -1), ConfigError);
  try {
    KVCache<float> x(c, 100);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("max_seq_len = 40"), std::string::npos);
  }
}

// ---------------------------------------------------------------- sliding window

namespace {
ModelConfig window_cfg(int window, int max_seq_len) {
  ModelConfig c = kvd_test::small_config(4, 2, 8, 32, 2, 40, 50, max_seq_len);
  c.sliding_window = window;
  return c;
}
}  // namespace

TEST(SlidingWindow, RingKeepsOnlyTheWindowAndStaysExact) {
  const ModelConfig c = window_cfg(6, 100);
  Transformer<float> model(ModelWeights<float>::random(c, 4));
  const auto toks = make_tokens(100, c.vocab_size);
  const RowMatrix<float> ref = model.forward_reference(toks);  // banded causal mask
  KVCache<float> cache(c, 0, 8);  // at most 8 rows per call: a ring of 2 blocks
  EXPECT_EQ(cache.stored_positions(), 32);
  EXPECT_EQ(cache.bytes_reserved(), 32u * cache.bytes_per_token());
  KVCache<float> full(kvd_test::small_config(4, 2, 8, 32, 2, 40, 50, 100));
  EXPECT_EQ(full.bytes_reserved(), 112u * full.bytes_per_token());
  // prefill of 50 is split into chunks of 8 by the model; all logits equal the reference
  RowMatrix<float> pf = model.prefill(std::vector<int>(toks.begin(), toks.begin() + 50), cache, true);
  ASSERT_EQ(pf.rows(), 50);
  for (int t = 0; t < 50; ++t) EXPECT_ROW_BITS_EQ(pf.row(t).data(), ref.row(t).data(), c.vocab_size) << "t=" << t;
  for (int t = 50; t < 100; ++t) {
    auto row = model.decode_step(toks[t], cache);
    ASSERT_TRUE(kvd_test::same_bits(row.data(), ref.row(t).data(), c.vocab_size)) << "decode t=" << t;
  }
  EXPECT_EQ(cache.first_position(), 100 - 6 + 1);
}

TEST(SlidingWindow, WindowChangesTheResult) {
  ModelConfig c = window_cfg(4, 30);
  Transformer<float> windowed(ModelWeights<float>::random(c, 5));
  c.sliding_window = 0;
  Transformer<float> plain(ModelWeights<float>::random(c, 5));
  const auto toks = make_tokens(30, c.vocab_size);
  const RowMatrix<float> a = windowed.forward_reference(toks), b = plain.forward_reference(toks);
  // positions inside the first window agree, later ones differ
  EXPECT_TRUE(kvd_test::same_bits(a.row(3).data(), b.row(3).data(), c.vocab_size));
  EXPECT_FALSE(kvd_test::same_bits(a.row(20).data(), b.row(20).data(), c.vocab_size));
}

TEST(SlidingWindow, BatchedDecodeOverRingsIsExact) {
  const ModelConfig c = window_cfg(5, 80);
  Transformer<float> model(ModelWeights<float>::random(c, 6));
  std::vector<std::vector<int>> seqs;
  std::vector<KVCache<float>> alone, batched;
  for (int b = 0; b < 3; ++b) {
    seqs.push_back(make_tokens(80, c.vocab_size, 40 + b));
    alone.emplace_back(c, 0, 4);
    batched.emplace_back(c, 0, 4);
    std::vector<int> p(seqs[b].begin(), seqs[b].begin() + 3 + 9 * b);
    model.prefill(p, alone[b]);
    model.prefill(p, batched[b]);
  }
  std::vector<KVCache<float>*> ptrs{&batched[0], &batched[1], &batched[2]};
  for (int step = 0; step < 50; ++step) {
    std::vector<int> t{seqs[0][batched[0].length()], seqs[1][batched[1].length()], seqs[2][batched[2].length()]};
    RowMatrix<float> rows = model.decode_batch(t, ptrs);
    for (int b = 0; b < 3; ++b) {
      auto one = model.decode_step(t[b], alone[b]);
      ASSERT_TRUE(kvd_test::same_bits(rows.row(b).data(), one.data(), c.vocab_size)) << step << " " << b;
    }
  }
}

TEST(SlidingWindow, RewindPastTheRingIsRefusedAndChangesNothing) {
  const ModelConfig c = window_cfg(6, 100);
  Transformer<float> model(ModelWeights<float>::random(c, 7));
  const auto toks = make_tokens(90, c.vocab_size);
  KVCache<float> cache(c, 0, 8);
  model.prefill(toks, cache);
  try {
    cache.truncate(20);
    FAIL() << "rewinding to 20 needs positions 15.. which the 32-position ring no longer holds";
  } catch (const CacheFullError& e) {
    EXPECT_NE(std::string(e.what()).find("overwritten"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(), 90);
  cache.truncate(85);  // within the ring: allowed and exact
  const RowMatrix<float> ref = model.forward_reference(toks);
  auto row = model.decode_step(toks[85], cache);
  EXPECT_ROW_BITS_EQ(row.data(), ref.row(85).data(), c.vocab_size);
}

TEST(SlidingWindow, TooManyRowsInOneForwardIsTypedError) {
  const ModelConfig c = window_cfg(6, 100);
  Transformer<float> model(ModelWeights<float>::random(c, 8));
  KVCache<float> cache(c, 0, 8);
  std::vector<Row> rows;
  for (int i = 0; i < 9; ++i) rows.push_back(Row{1, 0, i, true});
  KVCache<float>* p = &cache;
  EXPECT_THROW(model.forward(rows.data(), 9, &p, 1), CacheFullError);
  EXPECT_EQ(cache.length(), 0);
}

TEST(SlidingWindow, CacheWithoutWindowRejectedByWindowedModel) {
  ModelConfig c = window_cfg(6, 40);
  Transformer<float> model(ModelWeights<float>::random(c, 9));
  c.sliding_window = 0;
  KVCache<float> plain(c);
  EXPECT_THROW(model.decode_step(1, plain), CacheMismatchError);
}

// ---- Size bounds (issue 12): every size a cache forms is bounded by validate() ----

namespace {
// The config of issue 12: it passed validate() (every field <= 2^20, every weight
// matrix <= 2^31 elements), but 2^20 layers x 1024 KV heads x 2^20 head_dim x 16
// positions wrapped the cache size to a small number.
ModelConfig wrapping_cache_config() {
  ModelConfig c;
  c.vocab_size = 2; c.d_model = 1; c.n_layers = 1 << 20; c.n_heads = 1024; c.n_kv_heads = 1024;
  c.head_dim = 1 << 20; c.hidden_dim = 2; c.max_seq_len = 16;
  return c;
}
std::string config_error_of(const ModelConfig& c) {
  try {
    c.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(CacheSizeBounds, WrappingCacheConfigIsRejectedByValidate) {
  const std::string m = config_error_of(wrapping_cache_config());
  EXPECT_NE(m.find("q_dim"), std::string::npos) << m;
  EXPECT_NE(m.find("1048576"), std::string::npos) << m;  // the limit
}

TEST(CacheSizeBounds, WrappingCacheConfigCannotBuildACache) {
  EXPECT_THROW((void)KVCache<float>(wrapping_cache_config()), ConfigError);
  EXPECT_THROW(KVCache<double>(wrapping_cache_config(), 16), ConfigError);
}

TEST(CacheSizeBounds, LoadCacheWithWrappingConfigIsAConfigErrorNotBadAlloc) {
  // A 72-byte file (header + checksum, no data) claiming the wrapping shape.
  std::vector<unsigned char> b(72, 0);
  std::memcpy(b.data(), "KVDC", 4);
  auto put32 = [&](std::size_t o, std::uint32_t v) { detail::store_u32_le(b.data() + o, v); };
  put32(4, 1); put32(8, 64); put32(12, 1u << 20); put32(16, 1024); put32(20, 1u << 20); put32(24, 16);
  put32(28, 16); put32(32, 0); b[36] = 0; b[37] = 4;
  detail::store_u64_le(b.data() + 64, detail::fnv1a64(b.data(), 64));
  const std::string path = ::testing::TempDir() + "kvdecode_wrapping_cache.kvdc";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  try {
    (void)load_cache<float>(path, wrapping_cache_config());
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("q_dim"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(CacheSizeBounds, FullCacheElementsAreBounded) {
  ModelConfig c = wrapping_cache_config();
  c.n_heads = c.n_kv_heads = 4;
  c.head_dim = 1 << 18;                 // q_dim = 2^20: at the limit
  c.max_seq_len = 1 << 20;              // 2 x 2^20 x 4 x 2^18 x 2^20 = 2^61 elements
  const std::string m = config_error_of(c);
  EXPECT_NE(m.find("full KV cache"), std::string::npos) << m;
  EXPECT_NE(m.find("1099511627776"), std::string::npos) << m;  // 2^40
  EXPECT_THROW(KVCache<float>(c, 16), ConfigError);
  c.n_layers = 1 << 9;                  // 2 x 2^9 x 4 x 2^18 x 2^10 = 2^40: at the limit
  c.max_seq_len = 1 << 10;
  EXPECT_NO_THROW(c.validate());
  c.max_seq_len += 1;
  EXPECT_THROW(c.validate(), ConfigError);
}

TEST(CacheSizeBounds, NKvHeadsIsBounded) {
  ModelConfig c = cfg();
  c.n_kv_heads = (1 << 20) + 1;
  c.n_heads = c.n_kv_heads;
  EXPECT_FALSE(config_error_of(c).empty());
}

TEST(CacheSizeBounds, SlidingWindowIsBounded) {
  ModelConfig c = cfg();
  c.sliding_window = 1 << 20;
  EXPECT_NO_THROW(c.validate());
  c.sliding_window = (1 << 20) + 1;
  const std::string m = config_error_of(c);
  EXPECT_NE(m.find("sliding_window = 1048577"), std::string::npos) << m;
}

TEST(CacheSizeBounds, QDimIsBounded) {
  ModelConfig c = cfg();
  c.d_model = 1;
  c.n_heads = c.n_kv_heads = 2048;
  c.head_dim = 1024;  // q_dim = 2^21; q_dim x d_model = 2^21 passed the matrix bound
  c.n_layers = 1; c.max_seq_len = 16;
  const std::string m = config_error_of(c);
  EXPECT_NE(m.find("q_dim = n_heads x head_dim = 2048 x 1024 = 2097152"), std::string::npos) << m;
}

// ------------------------------------------------------------ the cache interface as a trait

namespace {
// A cache that has everything but write(): Transformer::forward must refuse it at compile time.
struct CacheWithoutWrite {
  CacheShape shape() const { return {}; }
  int length() const { return 0; }
  int capacity() const { return 0; }
  void check_room(int) const {}
  void prepare_append(int) {}
  void cancel_append(int) {}
  void commit_append(int) {}
  const float* k_block(int, int) const { return nullptr; }
  const float* v_block(int, int) const { return nullptr; }
};
struct CacheWithWrite : CacheWithoutWrite {
  void write(int, int, const float*, const float*) {}
};
}  // namespace

TEST(CacheInterface, LibraryCachesSatisfyItAndAMissingMemberIsDetected) {
  static_assert(is_kv_cache_v<KVCache<float>, float>);
  EXPECT_TRUE((is_kv_cache_v<KVCache<float>, float>));
  EXPECT_TRUE((is_kv_cache_v<KVCache<double>, double>));
  EXPECT_TRUE((is_kv_cache_v<PagedSequence<float>, float>));
  EXPECT_TRUE((is_kv_cache_v<CacheWithWrite, float>));
  EXPECT_FALSE((is_kv_cache_v<CacheWithoutWrite, float>));
  EXPECT_FALSE((detail::cache_has_write<CacheWithoutWrite, float>::value));
  // write() takes the compute type: a float cache is not a double one.
  EXPECT_FALSE((is_kv_cache_v<CacheWithWrite, double>));
  EXPECT_FALSE((is_kv_cache_v<int, float>));
}
