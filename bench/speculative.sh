#!/bin/sh
# Speculative decoding on the TinyLlama-1.1B shape: a random f16 GGUF
# (kvdecode-random-gguf), quantized by kvdecode-quantize to Q8_0 (target) and
# Q4_K, Q2_K (drafts), then kvdecode-generate --json, greedy:
#   plain Q8_0 | -md Q4_K | -md Q2_K | plain and --lookup 3 on a prompt that the
#   output repeats (the prompt holds the plain run's own output once already).
# Then two model families where a small model predicts most of the large one's
# choices (kvdecode-random-gguf's DECAY: layer l writes into the residual stream
# scaled by DECAY^l, so the later layers refine): a 22-layer Q8_0 target and its own
# first 2 layers in Q8_0 as the draft, at DECAY 0.15 and 0.3; at DECAY 0.3 also the
# same target unquantized (f16, 2.2 GB), where a verified row costs less beside the
# bytes it streams.
# Prints one line per run: decode tokens/s, acceptance, target forwards.
#   bench/speculative.sh BUILD_DIR WORK_DIR [THREADS=2] [TOKENS=64] [REPEATS=2]
# The files take 9.4 GB in WORK_DIR (made once, reused). Figures on a shared
# machine are noisy: every configuration runs REPEATS times, interleaved.
set -e
BIN=$1/bin; DIR=$2; T=${3:-2}; N=${4:-64}; R=${5:-2}
[ -n "$1" ] && [ -n "$2" ] || { echo "usage: $0 BUILD_DIR WORK_DIR [THREADS] [TOKENS] [REPEATS]" >&2; exit 2; }
mkdir -p "$DIR"
[ -f "$DIR/f16.gguf" ] || "$BIN/kvdecode-random-gguf" "$DIR/f16.gguf"
for q in Q8_0 Q4_K Q2_K; do
  [ -f "$DIR/$q.gguf" ] || "$BIN/kvdecode-quantize" "$DIR/f16.gguf" "$DIR/$q.gguf" $q --threads "$T" --quiet
done
for d in 0.15 0.3; do
  if [ ! -f "$DIR/family$d-Q8_0.gguf" ] || { [ $d = 0.3 ] && [ ! -f "$DIR/family$d-F16.gguf" ]; }; then
    "$BIN/kvdecode-random-gguf" "$DIR/family.tmp.gguf" 22 1 $d
    "$BIN/kvdecode-quantize" "$DIR/family.tmp.gguf" "$DIR/family$d-Q8_0.gguf" Q8_0 --threads "$T" --quiet
    if [ $d = 0.3 ]; then mv "$DIR/family.tmp.gguf" "$DIR/family$d-F16.gguf"; fi
  fi
  if [ ! -f "$DIR/family$d-2layers-Q8_0.gguf" ]; then
    "$BIN/kvdecode-random-gguf" "$DIR/family.tmp.gguf" 2 1 $d
    "$BIN/kvdecode-quantize" "$DIR/family.tmp.gguf" "$DIR/family$d-2layers-Q8_0.gguf" Q8_0 --threads "$T" --quiet
  fi
  rm -f "$DIR/family.tmp.gguf"
done
P=1,4000,5000,6000,7000,8000,9000,10000
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
ids() { sed -n 's/.*"generated_ids":\[\([0-9,]*\)\].*/\1/p'; }
run() {  # label, target, prompt, extra args
  label=$1; target=$2; prompt=$3; shift 3
  out=$("$BIN/kvdecode-generate" -m "$DIR/$target" --prompt-ids "$prompt" -n "$N" -t "$T" --json --quiet "$@" | tail -1)
  printf '%-24s %8s tok/s  accepted %5s of %5s  target forwards %4s  draft s %6s  ids %s\n' "$label" \
    "$(echo "$out" | field decode_tokens_per_second)" "$(echo "$out" | field draft_accepted)" \
    "$(echo "$out" | field draft_proposed)" "$(echo "$out" | field target_forwards)" \
    "$(echo "$out" | field draft_seconds)" "$(echo "$out" | ids | cksum | cut -d' ' -f1)"
}
# The repeated prompt: P, the plain output, P again (greedy then repeats its output).
first=$("$BIN/kvdecode-generate" -m "$DIR/Q8_0.gguf" --prompt-ids $P -n "$N" -t "$T" --json --quiet | tail -1 | ids)
REP=$P,$first,$P
echo "threads $T, $N tokens, $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
i=0
while [ $i -lt "$R" ]; do
  run "plain" Q8_0.gguf $P
  run "draft Q4_K" Q8_0.gguf $P -md "$DIR/Q4_K.gguf"
  run "draft Q2_K" Q8_0.gguf $P -md "$DIR/Q2_K.gguf"
  run "plain (repeated)" Q8_0.gguf $REP
  run "lookup 3 (repeated)" Q8_0.gguf $REP --lookup 3 --draft-tokens 8
  for d in 0.15 0.3; do
    run "family $d plain" family$d-Q8_0.gguf $P
    run "family $d 2-layer draft" family$d-Q8_0.gguf $P -md "$DIR/family$d-2layers-Q8_0.gguf"
  done
  run "family 0.3 F16 plain" family0.3-F16.gguf $P
  run "family 0.3 F16, draft" family0.3-F16.gguf $P -md "$DIR/family0.3-2layers-Q8_0.gguf"
  i=$((i + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
