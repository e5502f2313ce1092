// Cache element types: a KVCache<float, S> with S = float, bfloat16 or half
// rounds K and V to S when it writes them, and forward_reference<S>() rounds at
// the same point, so for every S the exactness contract still holds bit for bit
// (memcmp, never a tolerance): prefill, prefill + decode, chunked prefill and
// batched decode all equal the cache-free reference.
// A narrower S halves the bytes per token and changes the logits, slightly.
#include <gtest/gtest.h>

#include <random>

#include "test_util.hpp"

using namespace kvd;
using kvd_test::make_tokens;

namespace {

using Shape = kvd_test::NamedConfig;

std::vector<Shape> shapes() {
  using kvd_test::small_config;
  using kvd_test::windowed;
  return {
      // name, H, Hk, Dh, D, L, F, V, S
      {"MHA_D40_Dh10_L2", small_config(4, 4, 10, 40, 2, 72, 97, 40)},
      {"GQA_D64_Dh16_S70", small_config(8, 2, 16, 64, 2, 96, 130, 70)},  // several 16-position blocks
      {"GQA_Window12_S50", windowed(small_config(4, 2, 10, 40, 2, 56, 61, 50), 12)},  // ring-buffer cache
  };
}

template <class S>
class CacheDtype : public ::testing::Test {};

using StorageTypes = ::testing::Types<float, Eigen::bfloat16, Eigen::half>;

struct StorageName {
  template <class S>
  static std::string GetName(int) {
    return dtype_name(DTypeOf<S>::value);
  }
};
TYPED_TEST_SUITE(CacheDtype, StorageTypes, StorageName);

}  // namespace

// Prefill of the whole sequence with every position's logits == forward_reference<S>.
TYPED_TEST(CacheDtype, PrefillMatchesReference) {
  using S = TypeParam;
  for (const Shape& shape : shapes()) {
    SCOPED_TRACE(shape.name);
    const ModelConfig& c = shape.config;
    Transformer<float> model(ModelWeights<float>::random(c, 31));
    const int n = c.max_seq_len, V = c.vocab_size;
    const auto tokens = make_tokens(n, V, 3);
    const RowMatrix<float> ref = model.forward_reference<S>(tokens);
    KVCache<float, S> cache(c);
    const RowMatrix<float> all = model.prefill(tokens, cache, true);
    ASSERT_EQ(all.rows(), n);
    for (int t = 0; t < n; ++t) EXPECT_ROW_BITS_EQ(all.row(t).data(), ref.row(t).data(), V) << "position " << t;
  }
}

// prefill(tokens[0..k]) then decode steps to the end, for every split k.
TYPED_TEST(CacheDtype, PrefillThenDecodeEverySplit) {
  using S = TypeParam;
  for (const Shape& shape : shapes()) {
    SCOPED_TRACE(shape.name);
    const ModelConfig& c = shape.config;
    Transformer<float> model(ModelWeights<float>::random(c, 32));
    const int n = c.max_seq_len, V = c.vocab_size;
    const auto tokens = make_tokens(n, V, 5);
    const RowMatrix<float> ref = model.forward_reference<S>(tokens);
    for (int k = 1; k <= n; ++k) {
      KVCache<float, S> cache(c);
      auto first = model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + k), cache);
      ASSERT_TRUE(kvd_test::same_bits(first.row(0).data(), ref.row(k - 1).data(), V))
          << "prefill of " << k << ": " << kvd_test::first_difference(first.row(0).data(), ref.row(k - 1).data(), V);
      for (int t = k; t < n; ++t) {
        auto row = model.decode_step(tokens[t], cache);
        ASSERT_TRUE(kvd_test::same_bits(row.row(0).data(), ref.row(t).data(), V))
            << "prefill " << k << " then decode to position " << t << ": "
            << kvd_test::first_difference(row.row(0).data(), ref.row(t).data(), V);
      }
      EXPECT_EQ(cache.length(), n);
    }
  }
}

// Random splits of the sequence into prefill chunks, each returning all its logits.
TYPED_TEST(CacheDtype, ChunkedPrefill) {
  using S = TypeParam;
  for (const Shape& shape : shapes()) {
    SCOPED_TRACE(shape.name);
    const ModelConfig& c = shape.config;
    Transformer<float> model(ModelWeights<float>::random(c, 33));
    const int n = c.max_seq_len, V = c.vocab_size;
    const auto tokens = make_tokens(n, V, 9);
    const RowMatrix<float> ref = model.forward_reference<S>(tokens);
    std::mt19937 rng(4321);
    for (int trial = 0; trial < 8; ++trial) {
      KVCache<float, S> cache(c);
      int pos = 0;
      while (pos < n) {
        const int len = std::min(n - pos, 1 + static_cast<int>(rng() % (trial % 2 == 0 ? 3 : 19)));
        auto rows = model.prefill(std::vector<int>(tokens.begin() + pos, tokens.begin() + pos + len), cache, true);
        ASSERT_EQ(rows.rows(), len);
        for (int i = 0; i < len; ++i)
          ASSERT_TRUE(kvd_test::same_bits(rows.row(i).data(), ref.row(pos + i).data(), V))
              << "trial " << trial << ", chunk at " << pos << ", row " << i << ": "
              << kvd_test::first_difference(rows.row(i).data(), ref.row(pos + i).data(), V);
        pos += len;
      }
    }
  }
}

// Sequences of different lengths decoded in one batch == each decoded alone == the reference.
TYPED_TEST(CacheDtype, DecodeBatchMatchesSingleAndReference) {
  using S = TypeParam;
  for (const Shape& shape : shapes()) {
    SCOPED_TRACE(shape.name);
    const ModelConfig& c = shape.config;
    Transformer<float> model(ModelWeights<float>::random(c, 34));
    const int V = c.vocab_size, B = 3;
    std::vector<std::vector<int>> seqs;
    std::vector<RowMatrix<float>> refs;
    std::vector<KVCache<float, S>> alone, batched;
    for (int b = 0; b < B; ++b) {
      seqs.push_back(make_tokens(c.max_seq_len, V, 40 + b));
      refs.push_back(model.forward_reference<S>(seqs[b]));
      alone.emplace_back(c);
      batched.emplace_back(c);
      const std::vector<int> prompt(seqs[b].begin(), seqs[b].begin() + 1 + 7 * b);
      model.prefill(prompt, alone[b]);
      model.prefill(prompt, batched[b]);
    }
    std::vector<KVCache<float, S>*> ptrs;
    for (auto& cache : batched) ptrs.push_back(&cache);
    for (int step = 0; batched[B - 1].length() < c.max_seq_len; ++step) {
      std::vector<int> toks;
      for (int b = 0; b < B; ++b) toks.push_back(seqs[b][batched[b].length()]);
      std::vector<int> positions;
      for (int b = 0; b < B; ++b) positions.push_back(batched[b].length());
      const RowMatrix<float> rows = model.decode_batch(toks, ptrs);
      for (int b = 0; b < B; ++b) {
        auto one = model.decode_step(toks[b], alone[b]);
        ASSERT_TRUE(kvd_test::same_bits(rows.row(b).data(), one.row(0).data(), V)) << "step " << step << " seq " << b;
        ASSERT_TRUE(kvd_test::same_bits(rows.row(b).data(), refs[b].row(positions[b]).data(), V))
            << "step " << step << " seq " << b << " position " << positions[b] << ": "
            << kvd_test::first_difference(rows.row(b).data(), refs[b].row(positions[b]).data(), V);
      }
    }
  }
}

// The cache really stores S: layer 0's K and V (which depend on nothing rounded
// before them) are exactly the float cache's, rounded to S.
TYPED_TEST(CacheDtype, LayerZeroHoldsFloatCacheRoundedToStorage) {
  using S = TypeParam;
  const ModelConfig c = shapes()[1].config;
  Transformer<float> model(ModelWeights<float>::random(c, 35));
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 6);
  KVCache<float> wide(c);
  KVCache<float, S> narrow(c);
  model.prefill(tokens, wide);
  model.prefill(tokens, narrow);
  EXPECT_EQ(narrow.dtype(), DTypeOf<S>::value);
  long rounded = 0;
  for (int p = 0; p < c.max_seq_len; ++p)
    for (int h = 0; h < c.n_kv_heads; ++h)
      for (int d = 0; d < c.head_dim; ++d) {
        const float k = wide.key(0, p, h, d), v = wide.value(0, p, h, d);
        const float k_s = detail::from_storage<float>(detail::to_storage<S>(k));
        const float v_s = detail::from_storage<float>(detail::to_storage<S>(v));
        const float got_k = narrow.key(0, p, h, d), got_v = narrow.value(0, p, h, d);
        ASSERT_TRUE(kvd_test::same_bits(&got_k, &k_s, 1)) << "K pos " << p << " head " << h << " d " << d;
        ASSERT_TRUE(kvd_test::same_bits(&got_v, &v_s, 1)) << "V pos " << p << " head " << h << " d " << d;
        rounded += (k_s != k) + (v_s != v);
      }
  if (std::is_same_v<S, float>) EXPECT_EQ(rounded, 0);
  else EXPECT_GT(rounded, 0) << "no value changed when rounded to " << dtype_name(DTypeOf<S>::value);
}

TEST(CacheDtypeSize, BytesPerTokenHalvesForBf16AndF16) {
  const ModelConfig c = kvd_test::small_config(8, 2, 16, 64, 3, 96, 130, 70);
  KVCache<float> f32(c);
  KVCache<float, Eigen::bfloat16> bf16(c);
  KVCache<float, Eigen::half> f16(c);
  EXPECT_EQ(f32.bytes_per_token(), 2ull * 3 * 2 * 16 * 4);
  EXPECT_EQ(bf16.bytes_per_token() * 2, f32.bytes_per_token());
  EXPECT_EQ(f16.bytes_per_token() * 2, f32.bytes_per_token());
  EXPECT_EQ(f32.bytes_per_token(), c.kv_bytes_per_token(DType::kF32));
  EXPECT_EQ(bf16.bytes_per_token(), c.kv_bytes_per_token(DType::kBF16));
  EXPECT_EQ(f16.bytes_per_token(), c.kv_bytes_per_token(DType::kF16));
  EXPECT_EQ(bf16.bytes_reserved() * 2, f32.bytes_reserved());
  EXPECT_EQ(f16.bytes_reserved() * 2, f32.bytes_reserved());
  EXPECT_EQ(f32.dtype(), DType::kF32);
  EXPECT_EQ(bf16.dtype(), DType::kBF16);
  EXPECT_EQ(f16.dtype(), DType::kF16);
}

namespace {
// Logits over a whole sequence (prefill of 1 token, then decode steps) with a cache of element type S.
template <class S>
RowMatrix<float> decode_all(Transformer<float>& model, const std::vector<int>& tokens) {
  const ModelConfig& c = model.config();
  KVCache<float, S> cache(c);
  RowMatrix<float> out(static_cast<long>(tokens.size()), c.vocab_size);
  out.row(0) = model.prefill({tokens[0]}, cache);
  for (std::size_t t = 1; t < tokens.size(); ++t) out.row(static_cast<long>(t)) = model.decode_step(tokens[t], cache);
  return out;
}

// A narrow cache's logits are not the float cache's (rounding happens), but are close:
// within rel_tol of the largest |logit| at every position.
template <class S>
void check_rounded_but_close(double rel_tol) {
  for (const Shape& shape : shapes()) {
    SCOPED_TRACE(shape.name);
    const ModelConfig& c = shape.config;
    Transformer<float> model(ModelWeights<float>::random(c, 36));
    const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 12);
    const RowMatrix<float> wide = decode_all<float>(model, tokens);
    const RowMatrix<float> narrow = decode_all<S>(model, tokens);
    EXPECT_FALSE(kvd_test::same_bits(wide.data(), narrow.data(), wide.size()))
        << dtype_name(DTypeOf<S>::value) << " cache gave the float cache's logits bit for bit: no rounding happened";
    // The reference rounds too.
    const RowMatrix<float> ref_wide = model.forward_reference<float>(tokens);
    const RowMatrix<float> ref_narrow = model.forward_reference<S>(tokens);
    EXPECT_FALSE(kvd_test::same_bits(ref_wide.data(), ref_narrow.data(), ref_wide.size()));
    double worst = 0;
    for (long t = 0; t < wide.rows(); ++t) {
      double scale = 0, diff = 0;
      for (long v = 0; v < wide.cols(); ++v) {
        scale = std::max(scale, std::abs(static_cast<double>(wide(t, v))));
        diff = std::max(diff, std::abs(static_cast<double>(wide(t, v)) - static_cast<double>(narrow(t, v))));
      }
      EXPECT_LE(diff, rel_tol * scale) << "position " << t;
      worst = std::max(worst, diff / scale);
    }
    std::cout << "  [" << shape.name << "] " << dtype_name(DTypeOf<S>::value)
              << " cache: largest |logit difference| / largest |logit| = " << worst << '\n';
  }
}
}  // namespace

// bf16 keeps 8 significant bits (relative rounding error up to 2^-9), f16 11 (2^-12).
TEST(CacheDtypeRounding, Bf16LogitsDifferFromF32ButAreClose) { check_rounded_but_close<Eigen::bfloat16>(1e-2); }
TEST(CacheDtypeRounding, F16LogitsDifferFromF32ButAreClose) { check_rounded_but_close<Eigen::half>(2e-3); }

// A cache type chosen at run time from its name (visit_dtype) is the same cache as
// the one named at compile time: its dtype, and the same logits bit for bit.
TEST(CacheDtypeAtRunTime, NameChoosesTheSameCacheAndBits) {
  const ModelConfig c = kvd_test::small_config(4, 2, 16, 64, 2, 96, 130, 70);
  Transformer<float> model(ModelWeights<float>::random(c, 21));
  const std::vector<int> prompt = make_tokens(7, c.vocab_size, 4);
  for (const char* name : {"f32", "bf16", "f16"}) {
    const DType want = parse_dtype(name);
    const std::vector<float> got = visit_dtype(want, [&](auto s) {
      KVCache<float, decltype(s)> cache(c);
      EXPECT_EQ(cache.dtype(), want) << name;
      auto l = model.prefill(prompt, cache);
      return std::vector<float>(l.row(0).data(), l.row(0).data() + c.vocab_size);
    });
    std::vector<float> ref;
    auto direct = [&](auto cache) {
      auto l = model.prefill(prompt, cache);
      ref.assign(l.row(0).data(), l.row(0).data() + c.vocab_size);
    };
    if (want == DType::kF32) direct(KVCache<float, float>(c));
    if (want == DType::kBF16) direct(KVCache<float, Eigen::bfloat16>(c));
    if (want == DType::kF16) direct(KVCache<float, Eigen::half>(c));
    EXPECT_TRUE(kvd_test::same_bits(got.data(), ref.data(), c.vocab_size)) << name;
  }
}

TEST(CacheDtypeAtRunTime, Q8HasNoElementTypeAndFIsNotCalled) {
  bool called = false;
  try {
    visit_dtype(DType::kQ8, [&](auto) { called = true; return 0; });
    ADD_FAILURE() << "no error";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("dtype q8 has no element type"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(called);
}

// visit_dtype_among: only the listed types are compiled and called; another type
// is an ArgumentError naming it and the list, and f is not called.
TEST(CacheDtypeAtRunTime, AmongCallsTheListedTypeAndRefusesOthers) {
  const auto size_of = [](DType t) {
    return visit_dtype_among<float, Eigen::half>(t, [](auto s) { return sizeof(s); });
  };
  EXPECT_EQ(size_of(DType::kF32), sizeof(float));
  EXPECT_EQ(size_of(DType::kF16), sizeof(Eigen::half));
  for (DType t : {DType::kBF16, DType::kF64, DType::kQ8}) {
    bool called = false;
    try {
      visit_dtype_among<float, Eigen::half>(t, [&](auto) { called = true; return 0; });
      ADD_FAILURE() << "no error for " << dtype_name(t);
    } catch (const ArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("dtype ") + dtype_name(t) + " is not one of the storage types here: f32, f16"),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(called);
  }
}
