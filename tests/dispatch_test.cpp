// The x86-64 dispatch (dispatch.hpp): the CPU's features read right, the pick and
// its cap, and every level this CPU runs giving the baseline's bits for every
// weight type, row count and thread count, in the default mode and in the int8
// fast mode. The level tests run in a build with -DKVDECODE_DISPATCH=ON and skip
// elsewhere, saying so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvdecode/matmul/build_info.hpp"
#include "kvdecode/matmul/dispatch.hpp"
#include "kvdecode/matmul/matmul.hpp"
#include "quant_rows.hpp"
#include "test_util.hpp"

namespace {
using namespace kvd;

#define EXPECT_HAS(m, piece) EXPECT_NE((m).find(piece), std::string::npos) << "'" << (piece) << "' not in: " << (m)

// Sets an environment variable for one scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) had_ = true, old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

#if defined(__x86_64__)
// What this program was compiled for, the CPU must have (else it could not run).
TEST(CpuFeatures, HoldEverythingThisProgramWasCompiledFor) {
  const detail::CpuFeatures f = detail::read_cpu_features();
  EXPECT_EQ(detail::cpu_feature_bits(f) & detail::kCompiledFeatureBits, detail::kCompiledFeatureBits);
  EXPECT_TRUE(f.x86_64_v4() <= f.x86_64_v3() && f.x86_64_v3() <= f.x86_64_v2());
}

// The same answers as the compiler's own detection (libgcc / compiler-rt).
TEST(CpuFeatures, AgreeWithTheCompilersDetection) {
  const detail::CpuFeatures f = detail::read_cpu_features();
  __builtin_cpu_init();
  EXPECT_EQ(f.avx2, __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(f.fma, __builtin_cpu_supports("fma") != 0);
  EXPECT_EQ(f.sse42, __builtin_cpu_supports("sse4.2") != 0);
  EXPECT_EQ(f.popcnt, __builtin_cpu_supports("popcnt") != 0);
  EXPECT_EQ(f.avx512f, __builtin_cpu_supports("avx512f") != 0);
  EXPECT_EQ(f.avx512bw, __builtin_cpu_supports("avx512bw") != 0);
  EXPECT_EQ(f.avx512vl, __builtin_cpu_supports("avx512vl") != 0);
  EXPECT_EQ(f.avx512vnni, __builtin_cpu_supports("avx512vnni") != 0);
#if !defined(__clang__)  // clang 14 has no "avxvnni" feature name
  EXPECT_EQ(f.avxvnni, __builtin_cpu_supports("avxvnni") != 0);
#endif
}
#endif

#if defined(KVDECODE_DISPATCH)
const std::uint64_t kLayout = detail::kDispatchLayout;

TEST(Dispatch, UnknownCapIsAConfigErrorNamingItAndTheLevels) {
  ScopedEnv env("KVDECODE_MAX_ISA", "avx9000");
  try {
    detail::pick_dispatch_level(kLayout);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_HAS(m, "KVDECODE_MAX_ISA='avx9000'");
    EXPECT_HAS(m, "x86-64, x86-64-v3, x86-64-v3+vnni, x86-64-v4, x86-64-v4+vnni+bf16");
  }
}

TEST(Dispatch, CapAtTheBaselinePicksNoLevel) {
  ScopedEnv env("KVDECODE_MAX_ISA", "x86-64");
  const detail::DispatchChoice c = detail::pick_dispatch_level(kLayout);
  EXPECT_EQ(c.kernels, nullptr);
  EXPECT_EQ(c.name, "x86-64");
  EXPECT_HAS(c.levels, "x86-64-v3 (above KVDECODE_MAX_ISA)");
}

TEST(Dispatch, LevelBuiltFromOtherHeadersIsPassedOver) {
  ScopedEnv env("KVDECODE_MAX_ISA", nullptr);
  const detail::DispatchChoice c = detail::pick_dispatch_level(kLayout + 1);
  EXPECT_EQ(c.kernels, nullptr);
  EXPECT_HAS(c.levels, "x86-64-v3 (built from other headers)");
}

// The pick is the highest level the CPU has, and build_info() reports it.
TEST(Dispatch, PicksTheBestLevelThisCpuRunsAndReportsIt) {
  ScopedEnv env("KVDECODE_MAX_ISA", nullptr);
  const detail::DispatchChoice c = detail::pick_dispatch_level(kLayout);
  const detail::CpuFeatures f = detail::read_cpu_features();
  const char* want = f.x86_64_v4() && f.avx512vnni && f.avx512bf16 ? "x86-64-v4+vnni+bf16"
                     : f.x86_64_v4()                              ? "x86-64-v4"
                     : f.x86_64_v3() && f.avxvnni                 ? "x86-64-v3+vnni"
                     : f.x86_64_v3()                              ? "x86-64-v3"
                                                                  : "x86-64";
  EXPECT_EQ(c.name, want) << c.levels;
  const BuildInfo b = build_info();
  if (!std::getenv("KVDECODE_MAX_ISA")) EXPECT_EQ(b.dispatch.substr(0, std::strlen(want) + 1), std::string(want) + " ");
  std::cout << "dispatch: " << b.summary() << "\n";
}

struct Level {
  std::string name;
  const kvd_isa::LevelKernels* kernels;
};

// Every level this CPU runs (through pick_dispatch_level with each cap), in the
// order of dispatch.hpp's table: a new row is tested without touching this file.
std::vector<Level> runnable_levels() {
  std::vector<Level> out;
#define KVDECODE_TEST_LEVEL_NAME_(id, name, flags) name,
  for (const char* cap : {KVDECODE_DISPATCH_LEVELS(KVDECODE_TEST_LEVEL_NAME_)}) {
#undef KVDECODE_TEST_LEVEL_NAME_
    ScopedEnv env("KVDECODE_MAX_ISA", cap);
    const detail::DispatchChoice c = detail::pick_dispatch_level(kLayout);
    if (c.kernels && c.name == cap) out.push_back({cap, c.kernels});
  }
  return out;
}

// Every level gives the baseline kernels' bits: each weight type, rows 1 to 40,
// 1 and 2 threads; block types also in the int8 fast mode, whose integer sums are
// exact on every level.
TEST(Dispatch, EveryLevelGivesTheBaselinesBits) {
  const std::vector<Level> levels = runnable_levels();
  if (levels.empty()) GTEST_SKIP() << "this CPU runs no dispatch level above the baseline";
  const long N = 72, K = 512;
  const WeightType types[] = {WeightType::kF32,  WeightType::kF16,  WeightType::kBF16, WeightType::kQ8_0,
                              WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ5_1,
                              WeightType::kQ2_K, WeightType::kQ3_K, WeightType::kQ4_K, WeightType::kQ5_K,
                              WeightType::kQ6_K, WeightType::kIQ4_NL, WeightType::kIQ4_XS, WeightType::kMXFP4};
  const int saved = num_threads();
  long compared = 0;
  for (WeightType t : types) {
    WeightMatrix wm;
    if (t == WeightType::kF32 || t == WeightType::kF16 || t == WeightType::kBF16) {
      const RowMatrix<float> dense = RowMatrix<float>::Random(N, K);
      wm = WeightMatrix::from_dense(dense).converted_to(t);
    } else {
      const kvd_test::QuantRows r = kvd_test::make_rows(t, N, K, 7);
      wm = WeightMatrix::copy_of(t, N, K, r.bytes.data(), r.bytes.size());
    }
    PackedMatrix<float> pm({&wm});
    const long ldy = pm.n_out_padded();
    for (bool fast : {false, true}) {
      if (fast && !detail::is_quant_block_type(t)) continue;  // the bf16 fast mode rounds in hardware
      pm.set_fast_matmul(fast);
      for (long M : {1L, 3L, 16L, 17L, 40L}) {
        const std::vector<float> x = kvd_test::activations(M, K, 11);
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          std::vector<float> want(static_cast<std::size_t>(M * ldy));
          detail::matmul_with<float, detail::Vec16<float>>(x.data(), K, M, pm, want.data(), ldy);
          for (const Level& l : levels) {
            std::vector<float> got(want.size(), -1.f);
            const RowPrologue none;
            l.kernels->matmul_f32(x.data(), K, M, &pm, got.data(), ldy, &none, nullptr);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
                << l.name << ' ' << weight_type_name(t) << (fast ? " fast" : "") << " M " << M << " threads "
                << threads << ": " << kvd_test::first_difference(got.data(), want.data(), static_cast<long>(want.size()));
            ++compared;
          }
        }
      }
    }
  }
  set_num_threads(saved);
  EXPECT_GT(compared, 0);
}

// Double (the oracle's compute type) goes through the levels too.
TEST(Dispatch, EveryLevelGivesTheBaselinesBitsInDouble) {
  const std::vector<Level> levels = runnable_levels();
  if (levels.empty()) GTEST_SKIP() << "this CPU runs no dispatch level above the baseline";
  const long N = 40, K = 96, M = 9;
  const RowMatrix<double> dense = RowMatrix<double>::Random(N, K);
  PackedMatrix<double> pm({&dense});
  std::vector<double> x(static_cast<std::size_t>(M * K));
  std::mt19937 rng(3);
  std::normal_distribution<double> nd(0., 1.);
  for (double& v : x) v = nd(rng);
  const long ldy = pm.n_out_padded();
  std::vector<double> want(static_cast<std::size_t>(M * ldy));
  detail::matmul_with<double, detail::Vec16<double>>(x.data(), K, M, pm, want.data(), ldy);
  for (const Level& l : levels) {
    std::vector<double> got(want.size(), -1.);
    const RowPrologue none;
    l.kernels->matmul_f64(x.data(), K, M, &pm, got.data(), ldy, &none, nullptr);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(double)), 0) << l.name;
  }
}
#else
TEST(Dispatch, NeedsADispatchBuild) {
  GTEST_SKIP() << "built without KVDECODE_DISPATCH: configure with -DKVDECODE_DISPATCH=ON -DCMAKE_CXX_FLAGS=-march=x86-64 "
                  "to test the dispatch levels";
}
#endif

}  // namespace
