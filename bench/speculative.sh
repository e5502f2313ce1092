#!/bin/sh
# Speculative decoding on the TinyLlama-1.1B shape: a random f16 GGUF
# (kvdecode-random-gguf), quantized by kvdecode-quantize to Q8_0 (target) and
# Q4_K, Q2_K (drafts), then kvdecode-generate --json, greedy:
#   plain Q8_0 | -md Q4_K | -md Q2_K | plain and --lookup 3 on a prompt that the
#   output repeats (the prompt holds the plain run's own output once already).
# Prints one line per run: decode tokens/s, acceptance, target forwards.
#   bench/speculative.sh BUILD_DIR WORK_DIR [THREADS=2] [TOKENS=64] [REPEATS=2]
# The files take 4.4 GB in WORK_DIR (made once, reused). Figures on a shared
# machine are noisy: every configuration runs REPEATS times, interleaved.
set -e
BIN=$1/bin; DIR=$2; T=${3:-2}; N=${4:-64}; R=${5:-2}
[ -n "$1" ] && [ -n "$2" ] || { echo "usage: $0 BUILD_DIR WORK_DIR [THREADS] [TOKENS] [REPEATS]" >&2; exit 2; }
mkdir -p "$DIR"
[ -f "$DIR/f16.gguf" ] || "$BIN/kvdecode-random-gguf" "$DIR/f16.gguf"
for q in Q8_0 Q4_K Q2_K; do
  [ -f "$DIR/$q.gguf" ] || "$BIN/kvdecode-quantize" "$DIR/f16.gguf" "$DIR/$q.gguf" $q --threads "$T" --quiet
done
P=1,4000,5000,6000,7000,8000,9000,10000
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
ids() { sed -n 's/.*"generated_ids":\[\([0-9,]*\)\].*/\1/p'; }
run() {  # label, prompt, extra args
  label=$1; prompt=$2; shift 2
  out=$("$BIN/kvdecode-generate" -m "$DIR/Q8_0.gguf" --prompt-ids "$prompt" -n "$N" -t "$T" --json --quiet "$@" | tail -1)
  printf '%-22s %8s tok/s  accepted %5s of %5s  target forwards %4s  ids %s\n' "$label" \
    "$(echo "$out" | field decode_tokens_per_second)" "$(echo "$out" | field draft_accepted)" \
    "$(echo "$out" | field draft_proposed)" "$(echo "$out" | field target_forwards)" "$(echo "$out" | ids | cksum | cut -d' ' -f1)"
}
# The repeated prompt: P, the plain output, P again (greedy then repeats its output).
first=$("$BIN/kvdecode-generate" -m "$DIR/Q8_0.gguf" --prompt-ids $P -n "$N" -t "$T" --json --quiet | tail -1 | ids)
REP=$P,$first,$P
echo "threads $T, $N tokens, $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
i=0
while [ $i -lt "$R" ]; do
  run "plain" $P
  run "draft Q4_K" $P -md "$DIR/Q4_K.gguf"
  run "draft Q2_K" $P -md "$DIR/Q2_K.gguf"
  run "plain (repeated)" $REP
  run "lookup 3 (repeated)" $REP --lookup 3 --draft-tokens 8
  i=$((i + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
