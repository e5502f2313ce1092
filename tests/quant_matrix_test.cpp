// QuantMatrix: the product with a quantized matrix equals, bit for bit, a plain
// scalar loop in the factored order (codes times activations per sub-block,
// then the sub-block's scale and offset) over ggml's blocks, on every path
// (fused in-register, buffered small, buffered large), every vector
// implementation, every M from 1 to 40 and 1 or 2 threads; and the factored
// form's c * D + N is ggml's dequantized value, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kvdecode/matmul/matmul.hpp"
#include "kvdecode/matmul/quant_kernels.hpp"
#include "kvdecode/matmul/quant_matrix.hpp"
#include "quant_rows.hpp"

namespace {
using namespace kvd;
using kvd_test::activations;
using kvd_test::factor_rows;
using kvd_test::make_rows;
using kvd_test::QuantRows;

const WeightType kTypes[] = {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
                             WeightType::kQ5_1, WeightType::kQ2_K, WeightType::kQ3_K, WeightType::kQ4_K,
                             WeightType::kQ5_K, WeightType::kQ6_K, WeightType::kIQ4_NL, WeightType::kIQ4_XS,
                             WeightType::kMXFP4};

/// The reduction-order rule, written out: one fma per k in increasing k from +0.
template <class T>
std::vector<T> scalar_product(const std::vector<T>& x, long M, const std::vector<float>& w, long N, long K, long ldy) {
  std::vector<T> y(static_cast<std::size_t>(M * ldy), T(0));
  for (long m = 0; m < M; ++m)
    for (long n = 0; n < N; ++n) {
      T acc = 0;
      for (long k = 0; k < K; ++k) acc = std::fma(x[m * K + k], static_cast<T>(w[n * K + k]), acc);
      y[m * ldy + n] = acc;
    }
  return y;
}

/// The factored order of quant_kernels.hpp, written out: per sub-block j of `sub`
/// values, t = one fma per k from +0 over the codes, then acc = fma(t, D, acc) and,
/// for a type with a min, acc = fma(xs, N, acc) with xs the sub-block's values
/// added in increasing k from +0.
template <class T>
std::vector<T> factored_product(const std::vector<T>& x, long M, const QuantRows& q, WeightType t, long N, long K,
                                long ldy) {
  const auto f = detail::quant_factoring(t);
  const long S = f.sub, J = K / S;
  std::vector<T> y(static_cast<std::size_t>(M * ldy), T(0));
  for (long m = 0; m < M; ++m)
    for (long n = 0; n < N; ++n) {
      T acc = 0;
      for (long j = 0; j < J; ++j) {
        T part = 0, xs = 0;
        for (long k = j * S; k < (j + 1) * S; ++k) {
          part = std::fma(x[m * K + k], static_cast<T>(q.c[n * K + k]), part);
          xs += x[m * K + k];
        }
        acc = std::fma(part, static_cast<T>(q.D[n * J + j]), acc);
        if (f.has_min) acc = std::fma(xs, static_cast<T>(q.N[n * J + j]), acc);
      }
      y[m * ldy + n] = acc;
    }
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class QuantMatrixTypes : public ::testing::TestWithParam<WeightType> {};

TEST_P(QuantMatrixTypes, EveryPathEveryMEveryThreadCountGivesTheScalarLoopsBits) {
  const WeightType t = GetParam();
  const long N = 200, K = 768;  // 13 panels (the last one padded), 3 super-blocks of 256
  const auto q = make_rows(t, N, K, 5);
  const QuantMatrix qm(t, N, K, q.bytes.data(), "w");
  RowMatrix<float> wf(N, K);
  std::memcpy(wf.data(), q.w.data(), q.w.size() * sizeof(float));
  const PackedMatrix<float> pf({&wf});
  const long ldy = qm.n_out_padded();
  ASSERT_EQ(pf.n_out_padded(), ldy);
  const int saved_threads = num_threads();
  for (long M = 1; M <= 40; ++M) {
    const auto x = activations(M, K, static_cast<unsigned>(100 + M));
    const auto plain = scalar_product(x, M, q.w, N, K, ldy);
    std::vector<float> fl(static_cast<std::size_t>(M * ldy));
    matmul(x.data(), K, M, pf, fl.data(), ldy);
    ASSERT_TRUE(same_bits(fl, plain)) << "float kernels on the dequantized weights, M " << M;
    const auto want = factored_product(x, M, q, t, N, K, ldy);
    // The factored order is another rounding of the same sum: close to the plain loop, not equal.
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(want[i], plain[i], 1e-4f * (1.f + std::fabs(plain[i]))) << "element " << i << ", M " << M;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      auto run = [&](auto path_tag, detail::QuantPath path, detail::QuantDequant how) {
        using V = decltype(path_tag);
        std::vector<float> y(static_cast<std::size_t>(M * ldy), -1.f);
        detail::matmul_quant_with<float, V>(x.data(), K, M, qm, y.data(), ldy, path, how);
        return y;
      };
      using detail::QuantDequant;
      using detail::QuantPath;
      const std::string where = weight_type_name(t) + " M " + std::to_string(M) + " threads " + std::to_string(threads);
      std::vector<float> y(static_cast<std::size_t>(M * ldy));
      matmul(x.data(), K, M, qm, y.data(), ldy);
      ASSERT_TRUE(same_bits(y, want)) << "matmul(), " << where;
      // kAvx512 asks for the best decoders the build has: AVX-512, AVX2 or NEON (aarch64).
      ASSERT_TRUE(same_bits(run(detail::Vec16<float>{}, QuantPath::kFused, QuantDequant::kAvx512), want)) << "fused, " << where;
      ASSERT_TRUE(same_bits(run(detail::Vec16<float>{}, QuantPath::kSmall, QuantDequant::kAvx512), want)) << "small, " << where;
      ASSERT_TRUE(same_bits(run(detail::Vec16<float>{}, QuantPath::kLarge, QuantDequant::kAvx512), want)) << "large, " << where;
      // The scalar paths (slow) on a spread of M: tile edges of every vector implementation.
      if (M <= 3 || M == 7 || M == 8 || M == 9 || M == 14 || M == 16 || M == 17 || M == 29 || M == 40) {
        ASSERT_TRUE(same_bits(run(detail::Vec16<float>{}, QuantPath::kSmall, QuantDequant::kPortable), want))
            << "small portable dequantization, " << where;
        ASSERT_TRUE(same_bits(run(detail::PortableVec16<float>{}, QuantPath::kLarge, QuantDequant::kPortable), want))
            << "portable large, " << where;
        ASSERT_TRUE(same_bits(run(detail::PortableVec16<float>{}, QuantPath::kSmall, QuantDequant::kPortable), want))
            << "portable small, " << where;
#if defined(__AVX2__) && defined(__FMA__)
        ASSERT_TRUE(same_bits(run(detail::Avx2Vec16<float>{}, QuantPath::kAuto, QuantDequant::kPortable), want))
            << "avx2, " << where;
#endif
      }
#if defined(__AVX2__) && defined(__FMA__)
      ASSERT_TRUE(same_bits(run(detail::Avx2Vec16<float>{}, QuantPath::kLarge, QuantDequant::kAvx512), want))
          << "avx2 large, " << where;
      // The AVX2 decoders (on an AVX-512 machine too): fused tiles, and the buffered paths' factoring.
      ASSERT_TRUE(same_bits(run(detail::Avx2Vec16<float>{}, QuantPath::kFused, QuantDequant::kAvx2), want))
          << "avx2 fused, " << where;
      ASSERT_TRUE(same_bits(run(detail::Avx2Vec16<float>{}, QuantPath::kSmall, QuantDequant::kAvx2), want))
          << "avx2 small, avx2 decoders, " << where;
      ASSERT_TRUE(same_bits(run(detail::Avx2Vec16<float>{}, QuantPath::kLarge, QuantDequant::kAvx2), want))
          << "avx2 large, avx2 decoders, " << where;
#endif
    }
  }
  set_num_threads(saved_threads);
}

TEST_P(QuantMatrixTypes, RowsReadBackAsStoredAndDequantizeAsGgml) {
  const WeightType t = GetParam();
  const long N = 37, K = 512;
  const auto q = make_rows(t, N, K, 6);
  const QuantMatrix qm(t, N, K, q.bytes.data());
  const std::size_t rb = weight_row_bytes(t, K);
  EXPECT_EQ(qm.n_panels(), 3);
  EXPECT_EQ(qm.bytes(), 3 * 16 * rb);
  std::vector<unsigned char> row(rb);
  std::vector<float> w(K);
  for (long n = 0; n < N; ++n) {
    qm.row_bytes(n, row.data());
    ASSERT_EQ(std::memcmp(row.data(), q.bytes.data() + n * rb, rb), 0) << n;
    qm.dequantize_row(n, w.data());
    ASSERT_EQ(std::memcmp(w.data(), q.w.data() + n * K, K * sizeof(float)), 0) << n;
  }
  // The padding rows are zero bytes, which dequantize to 0.
  qm.dequantize_row(40, w.data());
  for (float v : w) ASSERT_EQ(v, 0.f);
}

// Scales a file may hold that no quantizer writes: +-inf, NaN, the largest f16 and
// a subnormal. Dequantizing the packed panel blocks must still give what ggml's
// scalar code gives on the file's bytes (NaN for NaN, whatever its payload), on every lane.
TEST_P(QuantMatrixTypes, ExtremeScalesDequantizeAsTheScalarCode) {
  const WeightType t = GetParam();
  const long N = 16, K = 512;
  auto q = make_rows(t, N, K, 8);
  const auto tr = weight_type_traits(t);
  // Offset of the f16 scale d in each block (and of dmin/m where there is one).
  std::size_t d_at = 0;
  switch (t) {
    case WeightType::kQ2_K: d_at = 80; break;
    case WeightType::kQ3_K: d_at = 108; break;
    case WeightType::kQ6_K: d_at = 208; break;
    default: d_at = 0;
  }
  const std::uint16_t specials[] = {0x7C00, 0xFC00, 0x7E00, 0x7BFF, 0x0001, 0x8001};
  const std::size_t n_blocks = q.bytes.size() / tr.block_bytes;
  for (std::size_t b = 0; b < n_blocks; ++b) {
    if (b % 3 == 2) continue;  // some blocks keep their real scale
    const std::uint16_t v = specials[b % 6];
    std::memcpy(q.bytes.data() + b * tr.block_bytes + d_at, &v, 2);
  }
  const std::size_t rb = weight_row_bytes(t, K);
  for (long n = 0; n < N; ++n) detail::dequantize_row(t, q.bytes.data() + n * rb, q.w.data() + n * K, K);
  // The panel blocks' scalar dequantization (PackedMatrix::at, the double-compute
  // path) after the panel packing; the kernels' factored form is checked against
  // the same values in FactoredFormIsGgmlsDequantization.
  const QuantMatrix qm(t, N, K, q.bytes.data());
  const long bs = qm.panels().block_size();
  std::vector<float> out(static_cast<std::size_t>(bs * detail::kLanes));
  for (long kb = 0; kb < K / bs; ++kb) {
    detail::dequantize_panel_block_portable<float>(t, qm.panels().panel_block(0, kb), out.data());
    for (long k = kb * bs; k < (kb + 1) * bs; ++k)
      for (long lane = 0; lane < N; ++lane) {
        const float got = out[static_cast<std::size_t>((k - kb * bs) * detail::kLanes + lane)], want = q.w[lane * K + k];
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got)) << weight_type_name(t) << " row " << lane << " k " << k;
        } else {
          ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0)
              << weight_type_name(t) << " row " << lane << " k " << k << ": " << got << " against " << want;
        }
      }
  }
}

/// Bitwise equality, any NaN equal to any NaN.
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

// The factored form the kernels compute with is ggml's dequantization: c * D + N
// (one rounding, as ggml's s * q - m) gives the dequantized value on every
// lane, for ordinary and extreme scales, and the AVX-512, AVX2 and NEON decoders
// factor exactly as the scalar code does.
TEST_P(QuantMatrixTypes, FactoredFormIsGgmlsDequantization) {
  const WeightType t = GetParam();
  const auto f = detail::quant_factoring(t);
  ASSERT_GT(f.sub, 0);
  const long N = 16, K = 512, J = K / f.sub;
  // mode 0: the quantizer's scales; 1: every f16 field of every third block replaced by
  // +-inf, NaN, the largest f16 or a subnormal; 2: every scale negated and every min +0,
  // so that code 0 dequantizes to -0 (ggml's c*d - m = -0 - (+0)), which c*D + N must give too
  for (int mode : {0, 1, 2}) {
    auto q = make_rows(t, N, K, 11);
    if (mode > 0) {
      const auto layout = detail::quant_layout(t);
      const std::uint16_t specials[] = {0x7C00, 0xFC00, 0x7E00, 0x7BFF, 0x0001, 0x8001};
      const auto tr = weight_type_traits(t);
      for (std::size_t b = 0; b < q.bytes.size() / tr.block_bytes; ++b) {
        int rank = 0;  // 0: the scale d, 1: the min (the panel layouts list d first)
        for (int fi = 0; fi < layout.n_fields; ++fi) {
          if (layout.fields[fi].width != 2) continue;
          unsigned char* at = q.bytes.data() + b * tr.block_bytes + layout.fields[fi].offset;
          std::uint16_t v;
          std::memcpy(&v, at, 2);
          if (mode == 1 && b % 3 == 0) v = specials[(b / 3 + fi) % 6];
          if (mode == 2) v = rank == 0 ? static_cast<std::uint16_t>(v | 0x8000) : 0x0000;
          std::memcpy(at, &v, 2);
          ++rank;
        }
      }
      const std::size_t rb = weight_row_bytes(t, K);
      for (long n = 0; n < N; ++n) detail::dequantize_row(t, q.bytes.data() + n * rb, q.w.data() + n * K, K);
      factor_rows(t, N, K, q);
    }
    for (long n = 0; n < N; ++n)
      for (long k = 0; k < K; ++k) {
        const long i = n * K + k, j = n * J + k / f.sub;
        const float v = f.has_min ? std::fma(q.c[i], q.D[j], q.N[j]) : q.c[i] * q.D[j];
        ASSERT_TRUE(same_float(v, q.w[i])) << weight_type_name(t) << " row " << n << " k " << k << ": " << v
                                           << " against " << q.w[i] << " (mode " << mode << ")";
      }
    const QuantMatrix qm(t, N, K, q.bytes.data());
    std::vector<float> c[4], D[4], Nn[4];
    int h = 0;
    for (auto how : {detail::QuantDequant::kAvx512, detail::QuantDequant::kAvx2, detail::QuantDequant::kNeon,
                     detail::QuantDequant::kPortable}) {
      c[h].assign(static_cast<std::size_t>(K * detail::kLanes), -1.f);
      D[h].assign(static_cast<std::size_t>(J * detail::kLanes), -1.f);
      Nn[h].assign(static_cast<std::size_t>(J * detail::kLanes), -1.f);
      detail::factor_panels(qm.panels(), 0, 1, 0, K, c[h].data(), D[h].data(), f.has_min ? Nn[h].data() : nullptr, how);
      for (long k = 0; k < K; ++k)
        for (long lane = 0; lane < N; ++lane)
          ASSERT_EQ(c[h][static_cast<std::size_t>(k * detail::kLanes + lane)], q.c[lane * K + k])
              << weight_type_name(t) << " code of row " << lane << " k " << k << " how " << h;
      for (long jj = 0; jj < J; ++jj)
        for (long lane = 0; lane < N; ++lane) {
          const std::size_t at = static_cast<std::size_t>(jj * detail::kLanes + lane);
          ASSERT_TRUE(same_float(D[h][at], q.D[lane * J + jj])) << weight_type_name(t) << " D row " << lane << " how " << h;
          if (f.has_min) {
            ASSERT_TRUE(same_float(Nn[h][at], q.N[lane * J + jj])) << weight_type_name(t) << " N row " << lane << " how " << h;
          }
        }
      ++h;
    }
  }
}

TEST_P(QuantMatrixTypes, DoubleComputeMatchesTheDoubleScalarLoop) {
  const WeightType t = GetParam();
  const long N = 48, K = 256;
  const auto q = make_rows(t, N, K, 7);
  const QuantMatrix qm(t, N, K, q.bytes.data());
  for (long M : {1L, 5L, 17L, 33L}) {
    const auto xf = activations(M, K, 9);
    const std::vector<double> x(xf.begin(), xf.end());
    const auto want = factored_product(x, M, q, t, N, K, N);
    std::vector<double> y(static_cast<std::size_t>(M * N));
    matmul(x.data(), K, M, qm, y.data(), N);
    ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(double)), 0) << weight_type_name(t) << " M " << M;
  }
}

INSTANTIATE_TEST_SUITE_P(AllBlockTypes, QuantMatrixTypes, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return weight_type_name(info.param); });

TEST(QuantMatrix, StackedPartsEqualOneMatrixOfAllRows) {
  const WeightType t = WeightType::kQ4_K;
  const long K = 256;
  const auto a = make_rows(t, 20, K, 1), b = make_rows(t, 12, K, 2);
  const QuantMatrix stacked(t, K, {{a.bytes.data(), 20}, {b.bytes.data(), 12}});
  std::vector<unsigned char> all(a.bytes);
  all.insert(all.end(), b.bytes.begin(), b.bytes.end());
  const QuantMatrix one(t, 32, K, all.data());
  ASSERT_EQ(stacked.bytes(), one.bytes());
  for (long p = 0; p < one.n_panels(); ++p)
    ASSERT_EQ(std::memcmp(stacked.panel_block(p, 0), one.panel_block(p, 0), one.panel_block_bytes()), 0);
}

TEST(QuantMatrix, RepackedBytesAreTheFilesBytes) {
  // TinyLlama-1.1B's shapes: every n_out is a multiple of 16, so nothing is added.
  for (WeightType t : {WeightType::kQ4_K, WeightType::kQ6_K, WeightType::kQ8_0}) {
    const long n_out = 256, n_in = 2048;
    std::vector<unsigned char> rows(weight_row_bytes(t, n_in) * n_out, 0);
    const QuantMatrix qm(t, n_out, n_in, rows.data());
    EXPECT_EQ(qm.bytes(), rows.size()) << weight_type_name(t);
  }
}

TEST(QuantMatrix, UnsupportedTypeIsRefusedNamingTensorAndType) {
  std::vector<unsigned char> rows(4096);
  try {
    QuantMatrix qm(WeightType::kIQ3_S, 4, 256, rows.data(), "blk.3.ffn_down.weight");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("blk.3.ffn_down.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("iq3_s"), std::string::npos) << m;
  }
  EXPECT_THROW(QuantMatrix(WeightType::kF16, 4, 256, rows.data(), "x"), ConfigError);
}

TEST(QuantMatrix, RowLengthNotAMultipleOfTheBlockIsRefused) {
  std::vector<unsigned char> rows(4096);
  try {
    QuantMatrix qm(WeightType::kQ4_K, 2, 200, rows.data(), "blk.0.attn_q.weight");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("blk.0.attn_q.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("256"), std::string::npos) << m;
  }
  EXPECT_THROW(QuantMatrix(WeightType::kQ8_0, 2, 48, rows.data()), ConfigError);
}

}  // namespace
