// Quantized KV caches (q8_0, q4_0; kv_cache.hpp, KVStore): keys and values stored as 32
// values along the head dimension per f16 scale, each read as float(q) * float(d).
//  * A double-precision oracle, written here from the definition and sharing no
//    code with the library, defines the rounding and the dequantization; the
//    codec and every value a cache hands back are held to it bit for bit.
//  * Every exactness suite holds bit for bit (memcmp) on these caches:
//    reference, prefill, prefill + decode, chunked prefill, batched decode,
//    paged and forked, 1 and 2 threads, sliding window; for K and V of the same
//    and of different types.
//  * A head_dim that is not a multiple of 32 is refused, naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.hpp"

using namespace kvd;
using kvd_test::make_tokens;

namespace {

// ---------------------------------------------------------------- the double oracle

// Rounds a double to the nearest IEEE binary16 value (ties to even), as a double.
double round_f16(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(std::fabs(x), &e);                  // |x| in [2^(e-1), 2^e)
  const int exp = std::max(e - 1, -14);          // binary16: normals down to 2^-14, then subnormals
  const double quantum = std::ldexp(1.0, exp - 10);  // 11 significant bits
  const double r = std::nearbyint(x / quantum) * quantum;  // the default rounding mode: ties to even
  return std::fabs(r) > 65504.0 ? std::copysign(INFINITY, x) : r;
}

// Rounds a double to the nearest float (exact: a double holds every float quotient
// to more than 2 x 24 + 2 bits, so this is the correctly rounded float operation).
double round_f32(double x) { return static_cast<double>(static_cast<float>(x)); }

// The values a q8_0 (bits = 8) or q4_0 (bits = 4) block stores for x[0..32), by the
// definition in kv_cache.hpp, KVStore, computed in double.
std::vector<double> oracle_block(const float* x, int bits) {
  double amax = 0, m = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(static_cast<double>(x[j])) > amax) {
      amax = std::fabs(static_cast<double>(x[j]));
      m = x[j];
    }
  const double d = bits == 8 ? round_f32(amax / 127.0) : round_f32(m / -8.0);
  const double lo = bits == 8 ? -127 : -8, hi = bits == 8 ? 127 : 7;
  std::vector<double> out(32);
  for (int j = 0; j < 32; ++j) {
    double r = d != 0 ? round_f32(x[j] / d) : 0.0;
    r = std::min(hi, std::max(lo, r));
    const double q = r < 0 ? -std::floor(-r + 0.5) : std::floor(r + 0.5);  // half away from zero
    out[j] = q * round_f16(d);
  }
  return out;
}

// The cache rotation of one head of n floats (model/hadamard.hpp), computed in double
// from the definition: the butterflies in their fixed order, then the scale
// s = 1 / sqrt(n), each operation rounded to float as the float code rounds it
// (round_f32 of a double sum, difference, product, quotient or square root of floats
// is the correctly rounded float operation).
std::vector<double> oracle_rotate(const float* x, int n) {
  std::vector<double> v(x, x + n);
  for (int len = 1; len < n; len *= 2)
    for (int i = 0; i < n; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const double a = v[j], b = v[j + len];
        v[j] = round_f32(a + b);
        v[j + len] = round_f32(a - b);
      }
  const double s = round_f32(1.0 / round_f32(std::sqrt(static_cast<double>(n))));
  for (auto& e : v) e = round_f32(e * s);
  return v;
}

// Blocks of 32 floats that exercise the rounding: several magnitudes, exact halves,
// ties for the largest |x|, an all-zero block, a lone value, negative maxima.
std::vector<std::vector<float>> oracle_cases() {
  std::vector<std::vector<float>> cases;
  std::mt19937 rng(7);
  for (double scale : {1e-6, 1e-3, 0.1, 1.0, 3.7, 100.0, 3000.0}) {
    std::normal_distribution<float> g(0.0f, static_cast<float>(scale));
    for (int r = 0; r < 40; ++r) {
      std::vector<float> b(32);
      for (auto& v : b) v = g(rng);
      cases.push_back(b);
    }
  }
  std::vector<float> zeros(32, 0.0f), lone(32, 0.0f), halves(32), ties(32), neg(32);
  lone[5] = -2.5f;
  for (int j = 0; j < 32; ++j) {
    halves[j] = (static_cast<float>(j) - 16.0f) * 0.5f;  // quotients on .5 for q4's d = 1
    ties[j] = j % 2 ? 4.0f : -4.0f;                       // largest |x| twice, opposite signs
    neg[j] = -static_cast<float>(j) / 7.0f;
  }
  for (auto* b : {&zeros, &lone, &halves, &ties, &neg}) cases.push_back(*b);
  return cases;
}

template <class S>
int bits_of() { return std::is_same_v<S, CacheQ8_0> ? 8 : 4; }

template <class S>
class KVQuantCodec : public ::testing::Test {};
using QuantTypes = ::testing::Types<CacheQ8_0, CacheQ4_0>;
struct QuantName {
  template <class S>
  static std::string GetName(int) { return std::is_same_v<S, CacheQ8_0> ? "q8_0" : "q4_0"; }
};
TYPED_TEST_SUITE(KVQuantCodec, QuantTypes, QuantName);

}  // namespace

// The codec's round trip equals the double oracle, bit for bit, on every case.
TYPED_TEST(KVQuantCodec, RoundTripEqualsDoubleOracle) {
  using S = TypeParam;
  long checked = 0;
  for (const auto& b : oracle_cases()) {
    std::vector<float> x = b;
    detail::KVStore<S>::round_trip(x.data(), 32);
    const std::vector<double> want = oracle_block(b.data(), bits_of<S>());
    for (int j = 0; j < 32; ++j, ++checked)
      ASSERT_EQ(static_cast<double>(x[j]), want[j]) << "value " << j << " = " << b[j] << " of a block";
  }
  EXPECT_GT(checked, 9000);
}

// What a cache hands back (key(), value(), for every head, lane and position of two
// blocks) is the oracle's value of what was written, and equal to the reference's round trip.
TYPED_TEST(KVQuantCodec, CacheReadsBackTheOracleValues) {
  using S = TypeParam;
  const ModelConfig c = kvd_test::small_config(4, 2, 64, 64, 2, 96, 50, 40);
  KVCache<float, S> cache(c);
  BlockPool<float, S> pool(c, 4, 32);
  PagedSequence<float, S> paged(pool);
  const int n = 35, kv = c.n_kv_heads * c.head_dim, L = c.n_layers;
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 2.0f);
  std::vector<float> k(static_cast<std::size_t>(n) * L * kv), v(k.size());
  for (auto& x : k) x = g(rng);
  for (auto& x : v) x = g(rng) * 0.01f;
  for (int p = 0; p < n; ++p) cache.append(k.data() + p * L * kv, v.data() + p * L * kv);
  paged.prepare_append(n);
  for (int p = 0; p < n; ++p)
    for (int l = 0; l < L; ++l) paged.write(l, p, k.data() + (p * L + l) * kv, v.data() + (p * L + l) * kv);
  paged.commit_append(n);
  for (int p = 0; p < n; ++p)
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h)
        for (int b = 0; b < c.head_dim / 32; ++b) {
          const float* kx = k.data() + (p * L + l) * kv + h * c.head_dim + b * 32;
          const float* vx = v.data() + (p * L + l) * kv + h * c.head_dim + b * 32;
          const std::vector<double> kw = oracle_block(kx, bits_of<S>()), vw = oracle_block(vx, bits_of<S>());
          for (int j = 0; j < 32; ++j) {
            const int d = b * 32 + j;
            ASSERT_EQ(static_cast<double>(cache.key(l, p, h, d)), kw[j]) << "K pos " << p << " layer " << l << " head " << h << " d " << d;
            ASSERT_EQ(static_cast<double>(cache.value(l, p, h, d)), vw[j]) << "V pos " << p << " layer " << l << " head " << h << " d " << d;
            ASSERT_EQ(static_cast<double>(paged.key(l, p, h, d)), kw[j]) << "paged K pos " << p;
            ASSERT_EQ(static_cast<double>(paged.value(l, p, h, d)), vw[j]) << "paged V pos " << p;
          }
        }
}

// The vector loads the kernels use give the same values as element reads.
TYPED_TEST(KVQuantCodec, LaneLoadsEqualElementReads) {
  using S = TypeParam;
  const ModelConfig c = kvd_test::small_config(2, 2, 64, 64, 1, 96, 50, 32);
  KVCache<float, S> cache(c);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> k(128), v(128);
  for (int p = 0; p < 16; ++p) {
    for (auto& x : k) x = g(rng);
    for (auto& x : v) x = g(rng);
    cache.append(k.data(), v.data());
  }
  const auto kb = cache.k_block(0, 0);
  const auto vb = cache.v_block(0, 0);
  float got[16];
  for (long i = 0; i < 2 * 64 * 16; i += 16) {
    detail::load_lanes<float>(kb + i).store(got);
    for (int j = 0; j < 16; ++j) ASSERT_EQ(got[j], kb[i + j]) << "K index " << i + j;
    detail::load_lanes<float>(vb + i).store(got);
    for (int j = 0; j < 16; ++j) ASSERT_EQ(got[j], vb[i + j]) << "V index " << i + j;
  }
}

// ---------------------------------------------------------------- exactness on quantized caches

namespace {

template <class K, class V>
struct Pair {
  using Key = K;
  using Value = V;
};

template <class P>
class KVQuantExact : public ::testing::Test {};
using Pairs = ::testing::Types<Pair<CacheQ8_0, CacheQ8_0>, Pair<CacheQ4_0, CacheQ4_0>, Pair<CacheQ8_0, Eigen::half>,
                               Pair<float, CacheQ4_0>, Pair<CacheQ4_0, CacheQ8_0>>;
struct PairName {
  template <class P>
  static std::string GetName(int) {
    auto name = [](DType t) { return std::string(t == DType::kQ8 ? "q8_0" : t == DType::kQ4 ? "q4_0" : dtype_name(t)); };
    return "K_" + name(DTypeOf<typename P::Key>::value) + "_V_" + name(DTypeOf<typename P::Value>::value);
  }
};
TYPED_TEST_SUITE(KVQuantExact, Pairs, PairName);

// `c` with its caches' heads stored rotated (ModelConfig::kv_rotation).
ModelConfig rotated(ModelConfig c, KVRotation rotation) {
  c.kv_rotation = rotation;
  return c;
}

std::vector<kvd_test::NamedConfig> shapes(KVRotation rotation = KVRotation::kNone) {
  using kvd_test::small_config;
  using kvd_test::windowed;
  return {
      // name, H, Hk, Dh, D, L, F, V, S
      {"MHA_Dh32", rotated(small_config(2, 2, 32, 64, 2, 72, 97, 40), rotation)},
      {"GQA_Dh64_S70", rotated(small_config(4, 2, 64, 128, 2, 96, 130, 70), rotation)},  // several 16-position blocks
      {"GQA_Window12_S50", rotated(windowed(small_config(4, 2, 32, 64, 2, 56, 61, 50), 12), rotation)},  // ring-buffer cache
  };
}

// Both rotations, for the rotated variants of the suites below.
constexpr KVRotation kRotations[] = {KVRotation::kKeys, KVRotation::kKeysValues};

// A suite's test, unrotated as Name and rotated both ways (keys; keys and values) as RotatedName.
#define KVD_EXACT_WITH_ROTATIONS(Name, check)                                       \
  TYPED_TEST(KVQuantExact, Name) {                                                  \
    check<typename TypeParam::Key, typename TypeParam::Value>(KVRotation::kNone);   \
  }                                                                                 \
  TYPED_TEST(KVQuantExact, Rotated##Name) {                                         \
    for (KVRotation r : kRotations) {                                               \
      SCOPED_TRACE(kv_rotation_name(r));                                            \
      check<typename TypeParam::Key, typename TypeParam::Value>(r);                 \
    }                                                                               \
  }

template <class T, class Cache>
RowMatrix<T> prefill_then_decode(Transformer<T>& model, const std::vector<int>& tokens, int k, Cache& cache) {
  const int n = static_cast<int>(tokens.size()), V = model.config().vocab_size;
  RowMatrix<T> out(n, V);
  out.topRows(k) = model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + k), cache, true);
  for (int t = k; t < n; ++t) out.row(t) = model.decode_step(tokens[t], cache).row(0);
  return out;
}

template <class T>
void expect_rows_eq(const RowMatrix<T>& got, const RowMatrix<T>& ref, const std::string& what) {
  ASSERT_EQ(got.cols(), ref.cols());
  ASSERT_EQ(got.rows(), ref.rows());
  for (long r = 0; r < got.rows(); ++r)
    ASSERT_TRUE(kvd_test::same_bits(got.row(r).data(), ref.row(r).data(), got.cols()))
        << what << ", row " << r << ": " << kvd_test::first_difference(got.row(r).data(), ref.row(r).data(), got.cols());
}

// Prefill of k tokens then decode of the rest, with 1 and with 2 threads, == ref.
template <class K, class V>
void expect_threads_match(Transformer<float>& model, const std::vector<int>& tokens, const RowMatrix<float>& ref,
                          int k) {
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    KVCache<float, K, V> cache(model.config());
    const RowMatrix<float> out = prefill_then_decode(model, tokens, k, cache);
    set_num_threads(saved);
    expect_rows_eq(out, ref, std::to_string(threads) + " thread(s)");
  }
}

}  // namespace

// Prefill (all logits), and prefill + decode at several splits, == forward_reference<K, V>.
template <class K, class V>
void prefill_and_decode_match(KVRotation rotation) {
  for (const auto& shape : shapes(rotation)) {
    SCOPED_TRACE(shape.name);
    const ModelConfig& c = shape.config;
    Transformer<float> model(ModelWeights<float>::random(c, 31));
    const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 3);
    const RowMatrix<float> ref = model.forward_reference<K, V>(tokens);
    for (int k : {1, 15, 16, 17, 33, c.max_seq_len}) {
      KVCache<float, K, V> cache(c);
      expect_rows_eq(prefill_then_decode(model, tokens, k, cache), ref, "prefill " + std::to_string(k) + " then decode");
    }
  }
}
KVD_EXACT_WITH_ROTATIONS(PrefillAndDecodeMatchReference, prefill_and_decode_match)

// Chunked prefill (pieces of 5, 16 and 23) == the reference.
template <class K, class V>
void chunked_prefill_matches(KVRotation rotation) {
  for (const auto& shape : shapes(rotation)) {
    SCOPED_TRACE(shape.name);
    const ModelConfig& c = shape.config;
    Transformer<float> model(ModelWeights<float>::random(c, 32));
    const int n = c.max_seq_len;
    const auto tokens = make_tokens(n, c.vocab_size, 4);
    const RowMatrix<float> ref = model.forward_reference<K, V>(tokens);
    for (int piece : {5, 16, 23}) {
      KVCache<float, K, V> cache(c);
      RowMatrix<float> out(n, c.vocab_size);
      for (int s = 0; s < n; s += piece) {
        const int e = std::min(n, s + piece);
        out.middleRows(s, e - s) = model.prefill(std::vector<int>(tokens.begin() + s, tokens.begin() + e), cache, true);
      }
      expect_rows_eq(out, ref, "chunks of " + std::to_string(piece));
    }
  }
}
KVD_EXACT_WITH_ROTATIONS(ChunkedPrefillMatchesReference, chunked_prefill_matches)

// decode_batch over contiguous caches and over paged sequences (sharing a forked
// prefix) == each sequence decoded alone == the reference.
template <class K, class V>
void batched_paged_forked_match(KVRotation rotation) {
  const ModelConfig c = rotated(kvd_test::small_config(4, 2, 64, 128, 2, 96, 130, 70), rotation);
  Transformer<float> model(ModelWeights<float>::random(c, 33));
  const int B = 4, steps = 30, prompt_len[B] = {1, 16, 21, 33};
  std::vector<std::vector<int>> tokens;
  std::vector<RowMatrix<float>> ref;
  std::vector<KVCache<float, K, V>> alone;
  BlockPool<float, K, V> pool(c, 40, 16);
  std::vector<PagedSequence<float, K, V>> paged;
  for (int b = 0; b < B; ++b) {
    tokens.push_back(make_tokens(prompt_len[b] + steps, c.vocab_size, 60 + b));
    if (b == 3) std::copy(tokens[2].begin(), tokens[2].begin() + 21, tokens[3].begin());  // shares 2's prompt
    ref.push_back(model.forward_reference<K, V>(tokens[b]));
    alone.emplace_back(c);
    model.prefill(std::vector<int>(tokens[b].begin(), tokens[b].begin() + prompt_len[b]), alone[b]);
  }
  for (int b = 0; b < 3; ++b) {
    paged.emplace_back(pool);
    model.prefill(std::vector<int>(tokens[b].begin(), tokens[b].begin() + prompt_len[b]), paged[b]);
  }
  paged.push_back(paged[2].fork());  // 21 positions shared, copy-on-write in the partly filled block
  model.prefill(std::vector<int>(tokens[3].begin() + 21, tokens[3].begin() + prompt_len[3]), paged[3]);
  std::vector<KVCache<float, K, V>> batched;
  for (int b = 0; b < B; ++b) {
    batched.emplace_back(c);
    model.prefill(std::vector<int>(tokens[b].begin(), tokens[b].begin() + prompt_len[b]), batched[b]);
  }
  std::vector<KVCache<float, K, V>*> bp;
  std::vector<PagedSequence<float, K, V>*> pp;
  for (int b = 0; b < B; ++b) {
    bp.push_back(&batched[b]);
    pp.push_back(&paged[b]);
  }
  for (int step = 0; step < steps; ++step) {
    std::vector<int> toks;
    for (int b = 0; b < B; ++b) toks.push_back(tokens[b][prompt_len[b] + step]);
    const RowMatrix<float> rows = model.decode_batch(toks, bp);
    const RowMatrix<float> prow = model.decode_batch(toks, pp);
    for (int b = 0; b < B; ++b) {
      const int pos = prompt_len[b] + step;
      const RowMatrix<float> one = model.decode_step(toks[b], alone[b]);
      ASSERT_TRUE(kvd_test::same_bits(one.row(0).data(), ref[b].row(pos).data(), c.vocab_size)) << "alone, seq " << b << " step " << step;
      ASSERT_TRUE(kvd_test::same_bits(rows.row(b).data(), one.row(0).data(), c.vocab_size)) << "batched, seq " << b << " step " << step;
      ASSERT_TRUE(kvd_test::same_bits(prow.row(b).data(), one.row(0).data(), c.vocab_size)) << "paged, seq " << b << " step " << step;
    }
  }
}
KVD_EXACT_WITH_ROTATIONS(BatchedPagedAndForkedMatchReference, batched_paged_forked_match)

// One and two threads give the same bits.
template <class K, class V>
void one_and_two_threads_identical(KVRotation rotation) {
  const ModelConfig c = rotated(kvd_test::small_config(4, 2, 64, 128, 2, 96, 130, 70), rotation);
  Transformer<float> model(ModelWeights<float>::random(c, 35));
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 36);
  const RowMatrix<float> ref = model.forward_reference<K, V>(tokens);
  expect_threads_match<K, V>(model, tokens, ref, 40);
}
KVD_EXACT_WITH_ROTATIONS(OneAndTwoThreadsIdentical, one_and_two_threads_identical)

// Wide GQA groups, which decode reads as one item per KV head (or a part of one when
// there are fewer KV heads than threads), in passes of up to 8 query heads sharing
// every K and V load: 8 query heads per KV head (multi-query), 3 (a pass of 2 and one
// of 1), and 16 over 2 KV heads (two passes). Prefill + decode == the reference,
// with 1 and 2 threads.
template <class K, class V>
void expect_wide_groups_exact() {
  using kvd_test::small_config;
  const std::vector<kvd_test::NamedConfig> wide = {
      {"MQA_H8_Dh32", small_config(8, 1, 32, 64, 2, 56, 61, 40)},
      {"GQA_H6_Hk2_Dh64", small_config(6, 2, 64, 96, 2, 56, 61, 37)},
      {"GQA_H16_Hk2_Dh32_Window9", kvd_test::windowed(small_config(16, 2, 32, 64, 1, 56, 61, 45), 9)},
  };
  for (const auto& shape : wide) {
    SCOPED_TRACE(shape.name);
    const ModelConfig& c = shape.config;
    Transformer<float> model(ModelWeights<float>::random(c, 39));
    const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 40);
    expect_threads_match<K, V>(model, tokens, model.forward_reference<K, V>(tokens), 5);
  }
}

TYPED_TEST(KVQuantExact, WideGroupsMatchReference) {
  expect_wide_groups_exact<typename TypeParam::Key, typename TypeParam::Value>();
}
TEST(KVQuantExactPlain, WideGroupsMatchReference) {
  expect_wide_groups_exact<float, float>();
  expect_wide_groups_exact<Eigen::half, Eigen::half>();
  expect_wide_groups_exact<Eigen::bfloat16, Eigen::bfloat16>();
}

// The double model quantizes the same way (its values rounded to float first), exactly too.
TEST(KVQuantExactDouble, Q8AndQ4MatchReference) {
  const ModelConfig c = kvd_test::small_config(4, 2, 32, 64, 2, 56, 61, 40);
  Transformer<double> model(ModelWeights<double>::random(c, 37));
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 38);
  const RowMatrix<double> ref8 = model.forward_reference<CacheQ8_0>(tokens);
  const RowMatrix<double> ref4 = model.forward_reference<CacheQ4_0>(tokens);
  KVCache<double, CacheQ8_0> c8(c);
  KVCache<double, CacheQ4_0> c4(c);
  expect_rows_eq(prefill_then_decode(model, tokens, 17, c8), ref8, "q8_0");
  expect_rows_eq(prefill_then_decode(model, tokens, 17, c4), ref4, "q4_0");
}

// ---------------------------------------------------------------- quality, size, refusals

// A quantized cache changes the logits (rounding happened) but stays close to the
// f32 cache's: q8_0 within 2%, q4_0 within 25% of the largest |logit| (random weights).
TEST(KVQuantQuality, LogitsDifferFromF32ButAreClose) {
  const ModelConfig c = kvd_test::small_config(4, 2, 64, 128, 2, 96, 130, 70);
  Transformer<float> model(ModelWeights<float>::random(c, 36));
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 12);
  const RowMatrix<float> wide = model.forward_reference<float>(tokens);
  auto worst = [&](const RowMatrix<float>& narrow) {
    double w = 0;
    for (long t = 0; t < wide.rows(); ++t) {
      double scale = 0, diff = 0;
      for (long v = 0; v < wide.cols(); ++v) {
        scale = std::max(scale, std::abs(static_cast<double>(wide(t, v))));
        diff = std::max(diff, std::abs(static_cast<double>(wide(t, v)) - narrow(t, v)));
      }
      w = std::max(w, diff / scale);
    }
    return w;
  };
  const double w8 = worst(model.forward_reference<CacheQ8_0>(tokens)), w4 = worst(model.forward_reference<CacheQ4_0>(tokens));
  std::cout << "  largest |logit difference| / largest |logit|: q8_0 " << w8 << ", q4_0 " << w4 << '\n';
  EXPECT_GT(w8, 0.0);
  EXPECT_LT(w8, 0.02);
  EXPECT_GT(w4, w8);
  EXPECT_LT(w4, 0.25);
}

// q8_0: 34 bytes per 32 values, q4_0: 18; keys and values counted by their own types.
TEST(KVQuantSize, BytesPerTokenAndReserved) {
  const ModelConfig c = kvd_test::small_config(4, 2, 64, 128, 3, 96, 130, 64);
  KVCache<float> f32(c);
  KVCache<float, CacheQ8_0> q8(c);
  KVCache<float, CacheQ4_0> q4(c);
  KVCache<float, CacheQ8_0, Eigen::half> mixed(c);
  EXPECT_EQ(q8.bytes_per_token(), 2ull * 3 * 2 * 2 * 34);
  EXPECT_EQ(q4.bytes_per_token(), 2ull * 3 * 2 * 2 * 18);
  EXPECT_EQ(mixed.bytes_per_token(), 3ull * 2 * (2 * 34 + 64 * 2));
  EXPECT_EQ(q8.bytes_per_token(), c.kv_bytes_per_token(DType::kQ8));
  EXPECT_EQ(q4.bytes_per_token(), c.kv_bytes_per_token(DType::kQ4));
  EXPECT_EQ(q8.bytes_reserved(), q8.bytes_per_token() * 64);
  EXPECT_EQ(q4.bytes_reserved(), q4.bytes_per_token() * 64);
  EXPECT_EQ(q8.dtype(), DType::kQ8);
  EXPECT_EQ(mixed.value_dtype(), DType::kF16);
  BlockPool<float, CacheQ4_0> pool(c, 3, 32);
  EXPECT_EQ(pool.bytes_per_block(), pool.bytes_per_token() * 32);
  EXPECT_EQ(pool.bytes_per_token(), q4.bytes_per_token());
}

namespace {
template <class F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no ConfigError";
}
}  // namespace

// head_dim 48 is not a multiple of 32: every quantized cache and the reference refuse it, naming both.
TEST(KVQuantRefused, HeadDimNotAMultipleOf32) {
  const ModelConfig c = kvd_test::small_config(2, 2, 48, 96, 1, 56, 61, 20);
  for (const std::string& m :
       {config_error([&] { KVCache<float, CacheQ8_0> x(c); }), config_error([&] { KVCache<float, float, CacheQ4_0> x(c); }),
        config_error([&] { BlockPool<float, CacheQ4_0> x(c, 2); }), config_error([&] {
          Transformer<float> model(ModelWeights<float>::random(c, 1));
          model.forward_reference<CacheQ8_0>(make_tokens(3, c.vocab_size));
        })}) {
    EXPECT_NE(m.find("head_dim 48"), std::string::npos) << m;
    EXPECT_NE(m.find("multiple of 32"), std::string::npos) << m;
  }
  KVCache<float, Eigen::half> fine(c);  // a plain type takes any head_dim
  EXPECT_EQ(fine.length(), 0);
}

// Names: q8_0 and q4_0 parse, and name their DType.
TEST(KVQuantNames, ParseAndName) {
  EXPECT_EQ(parse_dtype("q8_0"), DType::kQ8);
  EXPECT_EQ(parse_dtype("q4_0"), DType::kQ4);
  EXPECT_EQ(parse_dtype("q4"), DType::kQ4);
  EXPECT_STREQ(dtype_name(DType::kQ4), "q4");
  EXPECT_EQ(dtype_bytes_for(DType::kQ4, 64), 36u);
}

// ---------------------------------------------------------------- cache files and prompt caches

namespace {

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
// Recomputes the trailing checksum, so an edited file meets the check meant for the edit.
void reseal(std::vector<unsigned char>& b) {
  detail::store_u64_le(b.data() + b.size() - 8, detail::fnv1a64(b.data(), b.size() - 8));
}

// Every K and V value of positions [first_position, length), in a fixed order.
template <class Cache>
std::vector<float> values_of(const Cache& cache, int first) {
  std::vector<float> out;
  const CacheShape& s = cache.shape();
  for (int l = 0; l < s.n_layers; ++l)
    for (int p = first; p < cache.length(); ++p)
      for (int h = 0; h < s.n_kv_heads; ++h)
        for (int d = 0; d < s.head_dim; ++d) {
          out.push_back(cache.key(l, p, h, d));
          out.push_back(cache.value(l, p, h, d));
        }
  return out;
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "message: " << (haystack) << "\nmissing: " << (needle)

}  // namespace

// ---------------------------------------------------------------- the cache rotation

// The rotation of a head (hadamard_rotate) equals the double oracle bit for bit, for
// every power-of-two width up to 256, and a rotated head row quantized and read back
// (what a rotated q8_0 / q4_0 cache holds) equals the oracle's rotation then the
// oracle's quantization.
TEST(KVQuantRotation, RotationEqualsDoubleOracle) {
  std::mt19937 rng(17);
  std::normal_distribution<float> g(0.0f, 2.0f);
  for (int n = 1; n <= 256; n *= 2)
    for (int r = 0; r < 20; ++r) {
      std::vector<float> x(n);
      for (auto& v : x) v = g(rng);
      if (r == 0) x[0] = 40.0f;  // one outlier, which the rotation spreads
      const std::vector<double> want = oracle_rotate(x.data(), n);
      std::vector<float> got = x;
      detail::hadamard_rotate(got.data(), 1, n);
      for (int i = 0; i < n; ++i) ASSERT_EQ(static_cast<double>(got[i]), want[i]) << "width " << n << ", index " << i;
      if (n < 32) continue;
      for (int bits : {8, 4}) {
        std::vector<float> stored = got;
        if (bits == 8) detail::KVStore<CacheQ8_0>::round_trip(stored.data(), n);
        else detail::KVStore<CacheQ4_0>::round_trip(stored.data(), n);
        std::vector<float> rotated_f(want.begin(), want.end());
        for (int b = 0; b < n; b += 32) {
          const std::vector<double> q = oracle_block(rotated_f.data() + b, bits);
          for (int j = 0; j < 32; ++j)
            ASSERT_EQ(static_cast<double>(stored[b + j]), q[j]) << "q" << bits << ", width " << n << ", index " << b + j;
        }
      }
    }
}

// The rotation keeps q.k: scores of rotated q and k differ from the unrotated ones only
// by rounding (an orthonormal transform), and rotating twice gives the row back
// within rounding. A sanity check of the transform, not of exactness.
TEST(KVQuantRotation, PreservesDotProductsAndIsItsOwnInverse) {
  std::mt19937 rng(18);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> q(64), k(64);
  for (auto& v : q) v = g(rng);
  for (auto& v : k) v = g(rng);
  double dot = 0;
  for (int i = 0; i < 64; ++i) dot += q[i] * k[i];
  std::vector<double> qr = q, kr = k;
  detail::hadamard_rotate(qr.data(), 1, 64);
  detail::hadamard_rotate(kr.data(), 1, 64);
  double dot_r = 0;
  for (int i = 0; i < 64; ++i) dot_r += qr[i] * kr[i];
  EXPECT_NEAR(dot_r, dot, 1e-12);
  detail::hadamard_rotate(qr.data(), 1, 64);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(qr[i], q[i], 1e-14);
}

// A rotation needs a power-of-two head_dim: the config, a cache and the model refuse
// head_dim 48 naming it and the rotation; an unrotated one takes it.
TEST(KVQuantRotation, HeadDimNotAPowerOfTwoRefused) {
  ModelConfig c = kvd_test::small_config(2, 2, 48, 96, 1, 56, 61, 20);
  c.validate();
  c.kv_rotation = KVRotation::kKeys;
  const std::string e = error_of<ConfigError>([&] { c.validate(); });
  EXPECT_NE(e.find("head_dim = 48"), std::string::npos) << e;
  EXPECT_NE(e.find("power of two"), std::string::npos) << e;
  EXPECT_THROW((KVCache<float, Eigen::half>(c)), ConfigError);
  c.kv_rotation = static_cast<KVRotation>(7);
  c.head_dim = 32;
  c.d_model = 64;
  EXPECT_NE(error_of<ConfigError>([&] { c.validate(); }).find("kv_rotation = 7"), std::string::npos);
}

// A rotated cache means nothing to an unrotated model, and the other way round:
// the model refuses the cache (CacheMismatchError naming the rotation), and so does
// a cache file restored into a cache of the other rotation.
TEST(KVQuantRotation, RotatedAndUnrotatedDoNotMix) {
  kvd_test::TempDir dir;
  const ModelConfig plain = kvd_test::small_config(4, 2, 32, 64, 1, 56, 61, 40);
  const ModelConfig rot = rotated(plain, KVRotation::kKeys);
  Transformer<float> model(ModelWeights<float>::random(plain, 45));
  KVCache<float, CacheQ4_0> rotated_cache(rot);
  const std::string e = error_of<CacheMismatchError>([&] { model.decode_step(1, rotated_cache); });
  EXPECT_NE(e.find("rotation k"), std::string::npos) << e;
  EXPECT_EQ(rotated_cache.length(), 0);
  Transformer<float> rot_model(ModelWeights<float>::random(rot, 45));
  rot_model.prefill(make_tokens(9, rot.vocab_size, 46), rotated_cache);
  const std::string path = dir.file("rot.kvdc");
  save_cache(rotated_cache, path, 3);
  EXPECT_EQ(read_cache_info(path).shape.rotation, KVRotation::kKeys);
  KVCache<float, CacheQ4_0> unrotated(plain);
  const std::string f = error_of<CacheMismatchError>([&] { restore_cache(path, unrotated, 3); });
  EXPECT_NE(f.find("rotation k"), std::string::npos) << f;
  EXPECT_EQ(unrotated.length(), 0);
  // A rotated cache of one plain type is a version 3 file (version 1 has no room for it).
  KVCache<float, Eigen::half> rotated_f16(rot);
  rot_model.prefill(make_tokens(9, rot.vocab_size, 46), rotated_f16);
  const std::string path16 = dir.file("rot16.kvdc");
  save_cache(rotated_f16, path16, 3);
  const std::vector<unsigned char> bytes = read_bytes(path16);
  EXPECT_EQ(detail::load_u32_le(bytes.data() + 4), 3u);
  EXPECT_EQ(bytes[38], 1u);
  KVCache<float, Eigen::half> back(rot);
  restore_cache(path16, back, 3);
  EXPECT_EQ(values_of(back, 0), values_of(rotated_f16, 0));
}

// Header byte 38 of a cache file: a rotation code that is none of 0, 1, 2 is refused
// naming it; in a version 1 file it stays a reserved byte that must be 0; a rotation
// with a head_dim that is not a power of two is refused naming head_dim. The target
// cache stays empty.
TEST(KVQuantRotation, BadRotationByteRefused) {
  kvd_test::TempDir dir;
  const ModelConfig plain = kvd_test::small_config(4, 2, 32, 64, 1, 56, 61, 40);
  const ModelConfig rot = rotated(plain, KVRotation::kKeysValues);
  Transformer<float> model(ModelWeights<float>::random(rot, 47));
  KVCache<float, Eigen::half> cache(rot);
  model.prefill(make_tokens(5, rot.vocab_size, 48), cache);
  const std::string path = dir.file("r.kvdc");
  save_cache(cache, path, 0);
  auto bytes = read_bytes(path);
  ASSERT_EQ(bytes[38], 2u);
  bytes[38] = 3;
  reseal(bytes);
  write_bytes(path, bytes);
  KVCache<float, Eigen::half> target(rot);
  EXPECT_HAS(error_of<FileError>([&] { restore_cache(path, target, 0); }), "rotation = 3");
  EXPECT_EQ(target.length(), 0);
  // head_dim 48 (and d_model 96) in a rotated file
  bytes[38] = 1;
  detail::store_u32_le(bytes.data() + 20, 48);
  reseal(bytes);
  write_bytes(path, bytes);
  EXPECT_HAS(error_of<FileError>([&] { read_cache_info(path); }), "head_dim = 48");
  // version 1 (an unrotated f16 cache): byte 38 is reserved
  Transformer<float> plain_model(ModelWeights<float>::random(plain, 47));
  KVCache<float, Eigen::half> plain_cache(plain);
  plain_model.prefill(make_tokens(5, plain.vocab_size, 48), plain_cache);
  save_cache(plain_cache, path, 0);
  bytes = read_bytes(path);
  ASSERT_EQ(detail::load_u32_le(bytes.data() + 4), 1u);
  bytes[38] = 1;
  reseal(bytes);
  write_bytes(path, bytes);
  KVCache<float, Eigen::half> plain_target(plain);
  EXPECT_HAS(error_of<FileError>([&] { restore_cache(path, plain_target, 0); }), "reserved header byte 38");
  EXPECT_EQ(plain_target.length(), 0);
}

// save_cache then restore_cache (contiguous and paged) and load_cache: the same values,
// a version 3 file naming both types, and decoding on equals the reference.
template <class K, class V>
void cache_file_round_trip(KVRotation rotation) {
  kvd_test::TempDir dir;
  for (const auto& shape : shapes(rotation)) {
    SCOPED_TRACE(shape.name);
    const ModelConfig& c = shape.config;
    Transformer<float> model(ModelWeights<float>::random(c, 41));
    const int n = c.max_seq_len, k = 29;
    const auto tokens = make_tokens(n, c.vocab_size, 42);
    const RowMatrix<float> ref = model.forward_reference<K, V>(tokens);
    KVCache<float, K, V> source(c);
    model.prefill(std::vector<int>(tokens.begin(), tokens.begin() + k), source);
    const std::string path = dir.file("q.kvdc");
    save_cache(source, path, 7);
    const CacheFileInfo info = read_cache_info(path);
    EXPECT_EQ(info.dtype, (DTypeOf<K>::value));
    EXPECT_EQ(info.value_dtype, (DTypeOf<V>::value));
    EXPECT_EQ(info.data_bytes, source.bytes_per_token() * static_cast<std::uint64_t>(k - source.first_position()));
    EXPECT_EQ(detail::load_u32_le(read_bytes(path).data() + 4), 3u);
    KVCache<float, K, V> restored(c);
    restore_cache(path, restored, 7);
    EXPECT_EQ(values_of(restored, source.first_position()), values_of(source, source.first_position()));
    KVCache<float, K, V> loaded = load_cache<float, K, V>(path, c, {0, 0, 7});
    BlockPool<float, K, V> pool(c, 12, 16);
    PagedSequence<float, K, V> paged(pool);
    restore_cache(path, paged, 7);
    for (int t = k; t < n; ++t) {
      const RowMatrix<float> a = model.decode_step(tokens[t], restored);
      const RowMatrix<float> b = model.decode_step(tokens[t], loaded);
      const RowMatrix<float> p = model.decode_step(tokens[t], paged);
      ASSERT_TRUE(kvd_test::same_bits(a.data(), ref.row(t).data(), c.vocab_size)) << "restored, position " << t;
      ASSERT_TRUE(kvd_test::same_bits(b.data(), ref.row(t).data(), c.vocab_size)) << "loaded, position " << t;
      ASSERT_TRUE(kvd_test::same_bits(p.data(), ref.row(t).data(), c.vocab_size)) << "paged, position " << t;
    }
    // A paged sequence saves the same data (its file records capacity max_seq_len).
    const std::string paged_path = dir.file("p.kvdc");
    save_cache(paged, paged_path, 7);
    save_cache(restored, path, 7);
    auto a = read_bytes(path), b = read_bytes(paged_path);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(std::equal(a.begin() + 64, a.end() - 8, b.begin() + 64));
  }
}
KVD_EXACT_WITH_ROTATIONS(CacheFileRoundTripIsExact, cache_file_round_trip)

// A prompt cache of a quantized conversation restores and continues exactly.
template <class K, class V>
void prompt_cache_round_trip(KVRotation rotation) {
  kvd_test::TempDir dir;
  const ModelConfig c = rotated(kvd_test::small_config(4, 2, 32, 64, 2, 56, 61, 50), rotation);
  Transformer<float> model(ModelWeights<float>::random(c, 43));
  const auto tokens = make_tokens(c.max_seq_len, c.vocab_size, 44);
  const RowMatrix<float> ref = model.forward_reference<K, V>(tokens);
  const std::string path = dir.file("prompt.kvdp");
  {
    KVCache<float, K, V> cache(c);
    const std::vector<int> head(tokens.begin(), tokens.begin() + 21);
    model.prefill(head, cache);
    save_prompt_cache(cache, head, c.vocab_size, path, 9);
  }
  KVCache<float, K, V> restored(c);
  EXPECT_EQ(restore_prompt_cache(path, restored, 9), std::vector<int>(tokens.begin(), tokens.begin() + 21));
  for (int t = 21; t < c.max_seq_len; ++t)
    ASSERT_TRUE(kvd_test::same_bits(model.decode_step(tokens[t], restored).data(), ref.row(t).data(), c.vocab_size))
        << "position " << t;
  KVCache<float> other(c);
  EXPECT_HAS(error_of<CacheMismatchError>([&] { restore_prompt_cache(path, other, 9); }), "holds");
}
KVD_EXACT_WITH_ROTATIONS(PromptCacheRoundTripIsExact, prompt_cache_round_trip)

// Bad version 3 files: one targeted change each to a sound file of q8_0 keys and
// q4_0 values (or f16 values), resealed so the check meant for it fires; the target
// cache stays as it was.
namespace {
struct BadQuantFile : ::testing::Test {
  ModelConfig c = kvd_test::small_config(4, 2, 64, 128, 2, 56, 61, 40);
  Transformer<float> model{ModelWeights<float>::random(c, 45)};
  kvd_test::TempDir dir;
  std::string good = dir.file("good.kvdc"), mixed = dir.file("mixed.kvdc"), bad = dir.file("bad.kvdc");
  KVCache<float, CacheQ8_0, CacheQ4_0> target{c};
  KVCache<float, CacheQ8_0, Eigen::half> mixed_target{c};
  std::vector<float> snapshot;
  // Row bytes: a q8_0 row of 64 = 2 blocks of 34; a q4_0 row = 2 blocks of 18.
  static constexpr std::size_t kHeader = 64, kKRow = 68, kVRowQ4 = 36;

  void SetUp() override {
    KVCache<float, CacheQ8_0, CacheQ4_0> source(c);
    model.prefill(make_tokens(10, c.vocab_size, 3), source);
    save_cache(source, good);
    KVCache<float, CacheQ8_0, Eigen::half> source2(c);
    model.prefill(make_tokens(10, c.vocab_size, 3), source2);
    save_cache(source2, mixed);
    model.prefill(make_tokens(7, c.vocab_size, 77), target);
    snapshot = values_of(target, 0);
  }
  // restore_cache(bad, target) throws E; target unchanged; returns the message.
  template <class E>
  std::string restore_fails(const std::vector<unsigned char>& bytes) {
    write_bytes(bad, bytes);
    const std::string m = error_of<E>([&] { restore_cache(bad, target); });
    EXPECT_EQ(target.length(), 7);
    EXPECT_EQ(values_of(target, 0), snapshot);
    EXPECT_HAS(m, bad);
    return m;
  }
};
}  // namespace

TEST_F(BadQuantFile, SoundFilesRestore) {
  restore_cache(good, target);
  EXPECT_EQ(target.length(), 10);
  restore_cache(mixed, mixed_target);
  EXPECT_EQ(mixed_target.length(), 10);
}

TEST_F(BadQuantFile, NonFiniteScale) {
  auto b = read_bytes(good);
  b[kHeader + kKRow + 0] = 0x00;  // layer 0, kv head 1, block 0: scale = +inf
  b[kHeader + kKRow + 1] = 0x7C;
  reseal(b);
  const std::string m = restore_fails<FormatError>(b);
  EXPECT_HAS(m, "non-finite q8_0 scale");
  EXPECT_HAS(m, "K row at position 0, layer 0, kv head 1, block 0");
  EXPECT_HAS(m, "file offset 132");
}

TEST_F(BadQuantFile, Q8BlockNoQuantizerWrites) {
  auto b = read_bytes(good);
  b[kHeader + 2 + 5] = 0x80;  // code -128: outside [-127, 127]
  reseal(b);
  const std::string m = restore_fails<FormatError>(b);
  EXPECT_HAS(m, "a q8_0 block no quantizer writes");
  EXPECT_HAS(m, "largest code must be +-127 (codes in [-127, 127])");
}

TEST_F(BadQuantFile, Q4BlockWithoutItsLargestCode) {
  auto b = read_bytes(good);
  const std::size_t v0 = kHeader + 2 * 2 * kKRow;  // position 0: K of 2 layers x 2 heads, then V
  for (int j = 0; j < 16; ++j) b[v0 + 2 + j] = 0x99;  // every code +1: none is -8
  reseal(b);
  const std::string m = restore_fails<FormatError>(b);
  EXPECT_HAS(m, "a q4_0 block no quantizer writes in V row at position 0, layer 0, kv head 0, block 0");
  EXPECT_HAS(m, "largest code must be -8 (codes in [-8, 7])");
}

TEST_F(BadQuantFile, NonFiniteF16ValueInAMixedFile) {
  auto b = read_bytes(mixed);
  const std::size_t v0 = kHeader + 2 * 2 * kKRow;
  b[v0 + 2 * 3] = 0x00;  // V layer 0 head 0, index 3: f16 NaN
  b[v0 + 2 * 3 + 1] = 0x7E;
  reseal(b);
  write_bytes(bad, b);
  const std::string m = error_of<FormatError>([&] { restore_cache(bad, mixed_target); });
  EXPECT_HAS(m, "non-finite V row at position 0, layer 0, kv head 0, index 3");
}

TEST_F(BadQuantFile, UnknownKeyType) {
  auto b = read_bytes(good);
  b[36] = 6;
  reseal(b);
  const std::string m = restore_fails<FormatError>(b);
  EXPECT_HAS(m, "K dtype = 6 is not a cache type (0 f32, 1 f64, 2 bf16, 3 f16, 4 q8_0, 5 q4_0)");
}

TEST_F(BadQuantFile, Version3OfOnePlainTypeIsRefused) {
  // A sound f32 cache file (version 1) relabelled version 3 with K = V = f32: the
  // same data, but not the file kvdecode writes for it (fuzz finding: restoring and
  // saving it gave a version 1 file).
  KVCache<float> plain(c), plain_target(c);
  model.prefill(make_tokens(5, c.vocab_size, 8), plain);
  save_cache(plain, bad);
  auto b = read_bytes(bad);
  ASSERT_EQ(detail::load_u32_le(b.data() + 4), 1u);
  detail::store_u32_le(b.data() + 4, 3);
  b[37] = b[36];
  reseal(b);
  write_bytes(bad, b);
  const std::string m = error_of<FormatError>([&] { restore_cache(bad, plain_target); });
  EXPECT_HAS(m, "K dtype = V dtype = f32 in a version 3 file");
  EXPECT_EQ(plain_target.length(), 0);
}

TEST_F(BadQuantFile, BlockTypeWithHeadDimNotAMultipleOf32) {
  auto b = read_bytes(good);
  detail::store_u32_le(b.data() + 20, 48);  // head_dim
  reseal(b);
  const std::string m = restore_fails<FormatError>(b);
  EXPECT_HAS(m, "K dtype = q8_0 needs a head_dim that is a multiple of 32, but head_dim = 48");
}

TEST_F(BadQuantFile, TruncatedData) {
  auto b = read_bytes(good);
  b.resize(b.size() - 20);
  const std::string m = restore_fails<FormatError>(b);
  EXPECT_HAS(m, "truncated");
  EXPECT_HAS(m, "20 bytes missing");
}

TEST_F(BadQuantFile, OtherTypesAreCacheMismatchError) {
  KVCache<float, CacheQ8_0> q8(c);
  const std::string m = error_of<CacheMismatchError>([&] { restore_cache(good, q8); });
  EXPECT_HAS(m, "holds q8_0 keys and q4_0 values, but the cache stores q8_0 keys and q8_0 values");
  KVCache<float> f32(c);
  EXPECT_HAS(error_of<CacheMismatchError>([&] { restore_cache(good, f32); }), "f32 keys and f32 values");
}
