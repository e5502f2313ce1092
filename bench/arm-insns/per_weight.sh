#!/usr/bin/env bash
# Instructions per weight of one block-type product under emulation (docs/cpus.md,
# "ARM"): builds the counting plugin and per_weight.cpp for aarch64 (the given
# -march), then for each type prints the scalar decoders' count and the NEON one's.
#   bench/arm-insns/per_weight.sh [M] [TYPE ...]
# KVDECODE_ARM_MARCH picks the aarch64 level (default armv8-a); KVDECODE_FAST=1
# counts the fast mode (--fast-matmul): its portable loop and the build's tiles.
# Needs gcc, g++-aarch64-linux-gnu, qemu-user, libgomp1:arm64, libeigen3-dev.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
M=${1:-1}
shift || true
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(q8_0 q4_0 q4_1 q5_0 q5_1 q2_K q3_K q4_K q5_K q6_K iq4_nl iq4_xs mxfp4)
out=${TMPDIR:-/tmp}/kvd-arm-insns
mkdir -p "$out"
march=${KVDECODE_ARM_MARCH:-armv8-a}
slow=portable best=best cols="scalar decoders  NEON"
[ "${KVDECODE_FAST:-0}" = 1 ] && slow=fast-portable best=fast cols="fast mode: portable loop  NEON tiles"
gcc -shared -fPIC -O2 -o "$out/insn_count.so" "$root/bench/arm-insns/insn_count_plugin.c"
aarch64-linux-gnu-g++ -std=c++17 -O3 -march="$march" -fopenmp -I"$root/include" -isystem /usr/include/eigen3 \
  "$root/bench/arm-insns/per_weight.cpp" -o "$out/per-weight-arm"
count() {  # type, how, reps
  OMP_NUM_THREADS=1 qemu-aarch64 -plugin "$out/insn_count.so" -d plugin "$out/per-weight-arm" "$1" "$2" "$M" "$3" 2>&1 |
    sed -n 's/.*insns \([0-9]*\)$/\1/p'
}
echo "type  $cols  (instructions per weight, M = $M, -march=$march)"
for t in "${types[@]}"; do
  p1=$(count "$t" $slow 1); p3=$(count "$t" $slow 3); n1=$(count "$t" $best 1); n3=$(count "$t" $best 3)
  echo "$t  $(echo "scale=2; ($p3 - $p1) / 2 / 524288" | bc)  $(echo "scale=2; ($n3 - $n1) / 2 / 524288" | bc)"
done
