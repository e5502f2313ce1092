// A program that only includes kvdecode: tests/flags/refuse_flags_test.cmake
// compiles it with floating-point flags that break the exactness contract and
// expects the build to fail (#error) or the program to stop before main (the
// run-time probe in core/simd.hpp); compiled without them it must run.
#include <cstdio>

#include "kvdecode/kvdecode.hpp"

int main() {
  std::printf("float sums keep their order: %d\n", static_cast<int>(kvd::detail::float_sums_keep_their_order()));
  return 0;
}
