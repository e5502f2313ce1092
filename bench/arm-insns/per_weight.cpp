// One block-type product y = x W^T (M rows, N = 512, K = 1024, one thread) run
// `reps` times, for the instruction-count plugin (per_weight.sh): the count of 3
// runs minus the count of 1, divided by 2 N K, is the instructions per weight.
//   per_weight TYPE portable|best|fast-portable|fast M REPS
// "portable": the scalar decoders (weights/blocks.hpp) with the build's Vec16 tiles;
// "best": the build's own decoders and fused tiles (NEON on aarch64); "fast-portable"
// and "fast": the int8 fast mode (--fast-matmul, fast_int8.hpp), its scalar loop or
// the build's tiles (NEON on aarch64).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvdecode/matmul/fast_int8.hpp"
#include "kvdecode/matmul/quant_kernels.hpp"
#include "kvdecode/matmul/quant_matrix.hpp"
#include "kvdecode/weights/blocks.hpp"

int main(int argc, char** argv) {
  using namespace kvd;
  const WeightType t = parse_weight_type(argv[1]);
  const std::string how_s = argv[2];
  const long M = std::atol(argv[3]);
  const int reps = std::atoi(argv[4]);
  const long N = 512, K = 1024;
  set_num_threads(1);
  std::vector<float> w(N * K), x(M * K);
  unsigned s = 1;
  for (auto& v : w) { s = s * 1664525u + 1013904223u; v = static_cast<float>((s >> 8) % 2001) / 1000.f - 1.f; }
  for (auto& v : x) { s = s * 1664525u + 1013904223u; v = static_cast<float>((s >> 8) % 2001) / 1000.f - 1.f; }
  const std::size_t rb = weight_row_bytes(t, K);
  std::vector<unsigned char> bytes(rb * N);
  for (long n = 0; n < N; ++n) detail::quantize_row(t, w.data() + n * K, bytes.data() + n * rb, K);
  const QuantMatrix qm(t, N, K, bytes.data());
  std::vector<float> y(M * N);
  const auto how = how_s == "portable" ? detail::QuantDequant::kPortable : detail::kQuantDequantBest;
  const bool fast = how_s.rfind("fast", 0) == 0;
  const auto fast_path = how_s == "fast-portable" ? detail::FastPath::kPortable : detail::FastPath::kAuto;
  for (int r = 0; r < reps; ++r) {
    if (fast) detail::matmul_fast_with(x.data(), K, M, qm.panels(), y.data(), N, fast_path);
    else detail::matmul_quant_with<float, detail::Vec16<float>>(x.data(), K, M, qm, y.data(), N, detail::QuantPath::kAuto, how);
  }
  double sum = 0;
  for (float v : y) sum += v;
  std::printf("%s %s M %ld sum %.9g\n", argv[1], how_s.c_str(), M, sum);
}
