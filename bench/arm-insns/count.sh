#!/usr/bin/env bash
# Instructions per decode step under emulation (docs/cpus.md, "ARM"): builds the
# counting plugin and decode_steps for aarch64 (the given -march) and for x86-64-v3,
# then for each model prints (count of 9 steps - count of 1 step) / 8.
#   bench/arm-insns/count.sh [INCLUDE_DIR] [MODEL.gguf ...]
# KVDECODE_ARM_MARCH picks the aarch64 level (default armv8-a); KVDECODE_FAST=1
# counts the fast mode (--fast-matmul) instead of the default numerics.
# INCLUDE_DIR (default: this checkout's include/) lets another version of the
# library be counted the same way (git archive OLD include | tar -x -C /tmp/old).
# Needs gcc, g++, g++-aarch64-linux-gnu, qemu-user, libgomp1:arm64, libeigen3-dev.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
inc=${1:-$root/include}
shift || true
models=("$@")
[ ${#models[@]} -gt 0 ] || models=("$root"/../shared/models/gguf/rand256-{F32,F16,BF16,Q8_0,Q4_K_M}.gguf)
out=${TMPDIR:-/tmp}/kvd-arm-insns
mkdir -p "$out"
march=${KVDECODE_ARM_MARCH:-armv8-a}
fast=()
[ "${KVDECODE_FAST:-0}" = 1 ] && fast=(fast)
gcc -shared -fPIC -O2 -o "$out/insn_count.so" "$root/bench/arm-insns/insn_count_plugin.c"
aarch64-linux-gnu-g++ -std=c++17 -O3 -march="$march" -fopenmp -I"$inc" -isystem /usr/include/eigen3 \
  "$root/bench/arm-insns/decode_steps.cpp" -o "$out/steps-arm"
g++ -std=c++17 -O3 -march=x86-64-v3 -fopenmp -I"$inc" -isystem /usr/include/eigen3 \
  "$root/bench/arm-insns/decode_steps.cpp" -o "$out/steps-x86"
count() {  # $1 emulator command, $2 program, $3 model, $4 steps
  OMP_NUM_THREADS=1 $1 -plugin "$out/insn_count.so" -d plugin "$2" "$3" "$4" "${fast[@]}" 2>&1 | sed -n 's/.*insns \([0-9]*\)$/\1/p'
}
echo "model  aarch64 -march=$march  x86-64-v3  (instructions per decode step${fast:+, fast mode})"
for m in "${models[@]}"; do
  a1=$(count qemu-aarch64 "$out/steps-arm" "$m" 1); a9=$(count qemu-aarch64 "$out/steps-arm" "$m" 9)
  x1=$(count "qemu-x86_64 -cpu max" "$out/steps-x86" "$m" 1); x9=$(count "qemu-x86_64 -cpu max" "$out/steps-x86" "$m" 9)
  echo "$(basename "$m" .gguf)  $(((a9 - a1) / 8))  $(((x9 - x1) / 8))"
done
