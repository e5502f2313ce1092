// The matmul kernels against a plain scalar reference, bit for bit.
//
// The reference is the reduction-order rule of dense_kernels.hpp written as the
// simplest loop: acc = +0; for k ascending: acc = std::fma(x[m][k], W[n][k], acc).
// Every vector implementation this compiler can build (PortableVec16 always,
// Avx2Vec16 and Avx512Vec16 when enabled, NeonVec16 on aarch64) runs the same
// shapes and must match it exactly (memcmp), for M from 1 to 40 (decode,
// batched decode and the packed prefill path), N and K not multiples of 16, K
// spanning several k blocks, and 1, 2 or 3 threads. A row's result must also equal the 1-row
// product of that row alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvdecode/matmul/matmul.hpp"

namespace {

using kvd::PackedMatrix;
using kvd::RowMatrix;

/// Values spread over many binades, so that any change of summation order
/// changes the rounded result of most dot products.
template <class T>
RowMatrix<T> random_matrix(long rows, long cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> expo(-10, 10);
  RowMatrix<T> m(rows, cols);
  for (long i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(std::ldexp(mant(gen), expo(gen)));
  return m;
}

/// The reduction-order rule as a textbook loop: y (M, N).
template <class T>
std::vector<T> reference(const RowMatrix<T>& x, const RowMatrix<T>& w) {
  const long M = x.rows(), N = w.rows(), K = w.cols();
  std::vector<T> y(static_cast<std::size_t>(M * N));
  for (long m = 0; m < M; ++m)
    for (long n = 0; n < N; ++n) {
      T acc = T(0);
      for (long k = 0; k < K; ++k) acc = std::fma(x(m, k), w(n, k), acc);
      y[m * N + n] = acc;
    }
  return y;
}

/// Checks y (M rows, stride ldy, padded columns included) against the reference, bit for bit.
template <class T>
::testing::AssertionResult matches(const std::vector<T>& ref, const T* y, long M, long N, long n_pad, long ldy) {
  for (long m = 0; m < M; ++m) {
    for (long n = 0; n < N; ++n)
      if (std::memcmp(&ref[m * N + n], &y[m * ldy + n], sizeof(T)) != 0)
        return ::testing::AssertionFailure() << "y[" << m << "][" << n << "] = " << y[m * ldy + n]
                                             << ", reference " << ref[m * N + n] << " (diff "
                                             << y[m * ldy + n] - ref[m * N + n] << ")";
    for (long n = N; n < n_pad; ++n)
      if (!(y[m * ldy + n] == T(0) && !std::signbit(y[m * ldy + n])))
        return ::testing::AssertionFailure() << "padding column y[" << m << "][" << n << "] = " << y[m * ldy + n];
  }
  return ::testing::AssertionSuccess();
}

/// Runs y = x W^T with vector implementation V (or the public matmul when V is void).
template <class T, class V>
void run(const RowMatrix<T>& x, long M, const PackedMatrix<T>& w, T* y, long ldy) {
  if constexpr (std::is_void_v<V>)
    kvd::matmul(x.data(), x.cols(), M, w, y, ldy);
  else
    kvd::detail::matmul_with<T, V>(x.data(), x.cols(), M, w, y, ldy);
}

/// Restores the thread count when a test ends.
struct ThreadGuard {
  int saved = kvd::num_threads();
  ~ThreadGuard() { kvd::set_num_threads(saved); }
};

template <class T, class V>
void check_shapes(const std::vector<long>& Ms, const std::vector<long>& Ns, const std::vector<long>& Ks,
                  const std::vector<int>& threads) {
  ThreadGuard guard;
  for (long K : Ks)
    for (long N : Ns) {
      const auto wm = random_matrix<T>(N, K, static_cast<unsigned>(N * 1000 + K));
      const PackedMatrix<T> w({&wm});
      const long ldy = w.n_out_padded() + 16;  // a row stride wider than the output
      long max_m = 0;
      for (long M : Ms) max_m = std::max(max_m, M);
      const auto xall = random_matrix<T>(max_m, K + 3, static_cast<unsigned>(K + 17));  // ldx = K + 3 > K
      const RowMatrix<T> xk = xall.leftCols(K);
      const auto ref_all = reference(xk, wm);
      for (long M : Ms)
        for (int nt : threads) {
          kvd::set_num_threads(nt);
          std::vector<T> y(static_cast<std::size_t>(M * ldy), T(-7));
          run<T, V>(xall, M, w, y.data(), ldy);
          const std::vector<T> ref(ref_all.begin(), ref_all.begin() + M * N);
          ASSERT_TRUE(matches(ref, y.data(), M, N, w.n_out_padded(), ldy))
              << "M=" << M << " N=" << N << " K=" << K << " threads=" << nt;
        }
    }
}

template <class T>
class MatmulTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MatmulTest, Scalars);

std::vector<long> one_to(long n) {
  std::vector<long> v;
  for (long i = 1; i <= n; ++i) v.push_back(i);
  return v;
}

// The library's own path (Vec16<T>): every M from 1 to 40 covers decode,
// batched decode and the packed prefill path with partial row tiles; K = 600
// spans three k blocks; N = 17, 129, 300 leave partial panels and tiles.
TYPED_TEST(MatmulTest, MatchesScalarReferenceBitForBit) {
  check_shapes<TypeParam, void>(one_to(40), {1, 16, 17, 129, 300}, {1, 5, 16, 255, 600}, {1, 2});
}

// Row blocks larger than kMatmulMc, a long k, and 3 threads (uneven splits);
// few columns with many rows make the threads split rows instead of columns.
TYPED_TEST(MatmulTest, LargeShapesAndRowSplit) {
  check_shapes<TypeParam, void>({1, 8, 16, 100, 400}, {16, 48, 200}, {300, 1100}, {1, 2, 3});
}

// More rows than one shared packing super-block (kMatmulSuperRows), with a partial
// last one, and more than one chunk row block in each: the chunks the threads
// take dynamically must still give every row its 1-thread bits.
TYPED_TEST(MatmulTest, SeveralPackingSuperBlocks) {
  static_assert(kvd::detail::kMatmulSuperRows < 1100 && kvd::detail::kMatmulChunkRows < kvd::detail::kMatmulSuperRows);
  check_shapes<TypeParam, void>({kvd::detail::kMatmulSuperRows + 1, 1100}, {48, 140}, {300}, {1, 2, 3});
}

// The portable scalar path, as a build without AVX would compile it.
TYPED_TEST(MatmulTest, PortablePathMatchesReference) {
  using V = kvd::detail::PortableVec16<TypeParam>;
  check_shapes<TypeParam, V>({1, 2, 3, 5, 8, 13, 16, 17, 30, 40}, {17, 129}, {5, 300}, {1, 2});
}

#if defined(__AVX2__) && defined(__FMA__)
TYPED_TEST(MatmulTest, Avx2PathMatchesReference) {
  using V = kvd::detail::Avx2Vec16<TypeParam>;
  check_shapes<TypeParam, V>({1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 17, 30, 40}, {17, 129}, {5, 300}, {1, 2});
}
#endif

#if defined(__AVX512F__)
TYPED_TEST(MatmulTest, Avx512PathMatchesReference) {
  using V = kvd::detail::Avx512Vec16<TypeParam>;
  check_shapes<TypeParam, V>({1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 17, 30, 40}, {17, 129}, {5, 300}, {1, 2});
}
#endif

#if defined(KVDECODE_VEC_NEON)
TYPED_TEST(MatmulTest, NeonPathMatchesReference) {
  using V = kvd::detail::NeonVec16<TypeParam>;
  check_shapes<TypeParam, V>({1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 17, 30, 40}, {17, 129}, {5, 300}, {1, 2});
}
#endif

// Row m of an M-row product is the 1-row product of row m, bit for bit, for
// every m: the property that makes prefill, decode and batched decode agree.
TYPED_TEST(MatmulTest, RowOfBatchEqualsSingleRow) {
  using T = TypeParam;
  ThreadGuard guard;
  const long N = 200, K = 700;
  const auto wm = random_matrix<T>(N, K, 3);
  const PackedMatrix<T> w({&wm});
  const long ld = w.n_out_padded();
  for (long M : {2L, 7L, 8L, 9L, 16L, 17L, 33L, 40L})
    for (int nt : {1, 2}) {
      kvd::set_num_threads(nt);
      const auto x = random_matrix<T>(M, K, static_cast<unsigned>(M));
      std::vector<T> y(static_cast<std::size_t>(M * ld));
      kvd::matmul(x.data(), K, M, w, y.data(), ld);
      kvd::set_num_threads(1);
      std::vector<T> one(static_cast<std::size_t>(ld));
      for (long m = 0; m < M; ++m) {
        kvd::matmul(x.data() + m * K, K, 1, w, one.data(), ld);
        ASSERT_EQ(std::memcmp(one.data(), y.data() + m * ld, ld * sizeof(T)), 0)
            << "row " << m << " of M=" << M << " (threads " << nt << ") differs from its 1-row product";
      }
    }
}

// The inputs are spread widely enough that the test can tell orders apart:
// summing the same products in decreasing k changes many results.
TYPED_TEST(MatmulTest, ReferenceIsSensitiveToOrder) {
  using T = TypeParam;
  const long N = 64, K = 300;
  const auto wm = random_matrix<T>(N, K, 5);
  const auto x = random_matrix<T>(1, K, 6);
  const auto ref = reference(x, wm);
  long differ = 0;
  for (long n = 0; n < N; ++n) {
    T acc = T(0);
    for (long k = K - 1; k >= 0; --k) acc = std::fma(x(0, k), wm(n, k), acc);
    differ += std::memcmp(&acc, &ref[n], sizeof(T)) != 0;
  }
  EXPECT_GT(differ, N / 4);
}

// Signed zeros and non-finite values pass through the same chain as in the reference.
TYPED_TEST(MatmulTest, SpecialValuesFollowTheChain) {
  using T = TypeParam;
  const long N = 20, K = 40, M = 3;
  auto wm = random_matrix<T>(N, K, 8);
  auto x = random_matrix<T>(M, K, 9);
  for (long k = 0; k < K; ++k) x(0, k) = -T(0);  // all products are -0 or +0: result +0
  x(1, 7) = std::numeric_limits<T>::denorm_min();
  x(2, 5) = std::numeric_limits<T>::infinity();  // row 2: +-inf in every real column
  const PackedMatrix<T> w({&wm});
  std::vector<T> y(static_cast<std::size_t>(M * w.n_out_padded()));
  kvd::matmul(x.data(), K, M, w, y.data(), w.n_out_padded());
  const auto ref = reference(x, wm);
  for (long m = 0; m < M; ++m)
    for (long n = 0; n < N; ++n)
      EXPECT_EQ(std::memcmp(&ref[m * N + n], &y[m * w.n_out_padded() + n], sizeof(T)), 0)
          << "y[" << m << "][" << n << "] = " << y[m * w.n_out_padded() + n] << ", reference " << ref[m * N + n];
}

TYPED_TEST(MatmulTest, EmptyInnerDimensionGivesZeros) {
  using T = TypeParam;
  const RowMatrix<T> wm(20, 0);
  const PackedMatrix<T> w({&wm});
  std::vector<T> y(static_cast<std::size_t>(3 * w.n_out_padded()), T(5));
  const T x[1] = {T(0)};
  kvd::matmul(x, 0, 3, w, y.data(), w.n_out_padded());
  for (T v : y) EXPECT_EQ(v, T(0));
}

TEST(PackedMatrix, StacksMatricesAndReadsBack) {
  const auto a = random_matrix<float>(5, 7, 1), b = random_matrix<float>(30, 7, 2);
  const PackedMatrix<float> w({&a, &b});
  EXPECT_EQ(w.n_out(), 35);
  EXPECT_EQ(w.n_in(), 7);
  EXPECT_EQ(w.n_out_padded(), 48);
  EXPECT_EQ(w.n_panels(), 3);
  EXPECT_EQ(w.bytes(), 48u * 7u * sizeof(float));
  for (long k = 0; k < 7; ++k) {
    for (long n = 0; n < 5; ++n) EXPECT_EQ(w.at(n, k), a(n, k));
    for (long n = 0; n < 30; ++n) EXPECT_EQ(w.at(5 + n, k), b(n, k));
    for (long n = 35; n < 48; ++n) EXPECT_EQ(w.at(n, k), 0.0f);
  }
}

TEST(PackedMatrix, RejectsMismatchedInnerDimensions) {
  const auto a = random_matrix<float>(5, 7, 1), b = random_matrix<float>(5, 8, 2);
  EXPECT_THROW((PackedMatrix<float>({&a, &b})), kvd::ConfigError);
}

TEST(Threads, RejectsZeroThreads) { EXPECT_THROW(kvd::set_num_threads(0), kvd::ArgumentError); }

}  // namespace
