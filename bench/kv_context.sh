#!/bin/sh
# Decode tokens/s against context length per KV-cache type (f32, f16, q8_0, q4_0) on
# the TinyLlama-1.1B shape with Q4_K_M weights, 2 threads, side by side in one run
# (kvdecode-kv_context): writes OUT_DIR/kv_context.csv and OUT_DIR/kv_context.svg and
# prints a Markdown table with the bytes each step reads (weights and cache).
#   bench/kv_context.sh [MODEL (default /tmp/tl-q4km.gguf)] [OUT_DIR (default docs/figures)] [options...]
# The model is made once (a random model of the 1.1B shape, quantized):
#   build/bin/kvdecode-random-gguf /tmp/tl-f16.gguf
#   build/bin/kvdecode-quantize /tmp/tl-f16.gguf /tmp/tl-q4km.gguf Q4_K_M
# Extra options go to kvdecode-kv_context (--contexts, --types, --steps, --rounds).
set -eu
model=${1:-/tmp/tl-q4km.gguf}
out=${2:-docs/figures}
[ $# -gt 2 ] && shift 2 || set --
if [ ! -f "$model" ]; then
  echo "bench/kv_context.sh: $model is missing; make it with kvdecode-random-gguf and kvdecode-quantize (see this script's head)" >&2
  exit 2
fi
OMP_NUM_THREADS=2 OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-ACTIVE} build/bin/kvdecode-kv_context "$model" --threads 2 --out-dir "$out" "$@"
