#!/usr/bin/env bash
# kvdecode beside llama.cpp and ik_llama.cpp on the same random-weight files of the
# TinyLlama-1.1B shape (issue 35; docs/performance.md, "Against llama.cpp and
# ik_llama.cpp"):
#   LLAMA_CPP_DIR=DIR IK_LLAMA_DIR=DIR bench/peers.sh [BUILD_DIR=build] [WORK_DIR=/tmp/kvd-peers]
# 1. Builds what is missing: llama-bench, llama-quantize and llama-batched-bench in
#    $LLAMA_CPP_DIR/build; llama-bench and llama-quantize in $IK_LLAMA_DIR/build (with
#    -DGGML_IQK_FA_ALL_QUANTS=OFF, about 20 minutes on 2 cores instead of an hour);
#    then kvdecode-generate, -random-gguf, -quantize and -peers-chart in BUILD_DIR.
# 2. Writes the files once into WORK_DIR: F16 from kvdecode-random-gguf (seed 1,
#    decay 0.9, context 16384), Q8_0 from kvdecode-quantize, Q4_0, Q4_K_M, Q5_K_M and Q6_K from
#    llama.cpp's llama-quantize (about 7 GB for all six).
# 3. Runs ROUNDS alternated rounds; in each, for every type: kvdecode --exact-activations
#    (float activations), kvdecode --fast-matmul, llama.cpp's llama-bench, ik_llama.cpp's
#    llama-bench -rtr 1. kvdecode's default is the fast mode's code for block types and the
#    exact mode's for F16 (engine "default" measures it by itself).
#    Metrics: ppN (prefill of N tokens into an empty cache), tgN (N decode steps from an
#    empty cache), tgN@D (N decode steps after a D-token prompt: ik's llama-bench -gp D,N;
#    llama.cpp of Feb 2025 has no depth option in llama-bench, so its figure comes from
#    llama-batched-bench -npp D -ntg N -npl 1, the same prefill then N one-token steps).
#    kvdecode: kvdecode-generate --json, one process per figure (prefill_tokens_per_second
#    of a random N-token prompt; decode_tokens_per_second of N steps after a 1-token or
#    D-token prompt), greedy, --ignore-eos, OpenMP's own wait policy (WAIT_POLICY), an f16 KV cache
#    as the peers' (CACHE). The
#    peers run at their own defaults (f16 KV cache; flash attention off in llama.cpp, on
#    in ik_llama.cpp), one repetition after their warm-up, batch 2048, ubatch 512.
#    Metric b8 adds kvdecode-roofline's decode_batch of 8 sequences against 1 at position
#    256 for B8_TYPES, default and fast mode (q8_0 has no fast mode), with decode against
#    the measured bandwidth bound; on its own random weights in our quantizer's schemes,
#    once after the rounds.
# Environment (lists take spaces or commas):
#   TYPES   (F16 Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K)    ROUNDS (2)    THREADS (2)
#   METRICS (pp256 pp1024 tg32 tg32@2048; add b8)  ENGINES (exact fast llama ik; also default)
#   B8_TYPES (Q4_K_M Q4_0 Q8_0)  OUT (WORK_DIR/results)  JOBS (2: build parallelism)
#   CACHE   (f16: kvdecode's --cache-dtype, the peers' default KV type; f32 or bf16)
#   SKIP_BUILD (0; 1: use BUILD_DIR's programs as they are)
#   ISA     (native: every engine built for this CPU; avx2: every engine built for AVX2 + FMA
#           + F16C, what a user of an AVX2-only CPU runs, on whatever CPU this is: the peers
#           with -DGGML_NATIVE=OFF in DIR/build-avx2, kvdecode with -march=x86-64-v3 in
#           BUILD_DIR, which must then be a tree of its own, e.g. build-avx2)
#   WAIT_POLICY (unset: libgomp's default, threads spin briefly between parallel regions as
#           the peers' threads do; PASSIVE: they sleep at once, kinder to a shared machine
#           but 20% slower in decode on an idle one and 40% on a mixture of experts)
#   FROM_RAW (unset; "a/raw.csv b/raw.csv": measure nothing, report the rounds of these runs)
# Output in OUT: raw.csv (every figure of every round, with the CPU share its process
# got: CPU seconds over wall seconds x THREADS), best.csv (best of the rounds),
# per_cpu.csv (tokens per CPU-second, mean of the rounds), table.md (both, with the
# ratios ours / each peer), peers.svg (the chart of best.csv),
# env.txt (machine, load, versions), roofline.txt (b8), logs/. Progress lines go to stderr; the table to stdout.
# The CPU share covers the whole process. kvdecode loads and repacks its file on one
# thread, so at THREADS > 1 its share is below 1 on an idle machine too (0.6-0.85 for
# these files) and per_cpu.csv flatters it: there, compare best.csv. At THREADS=1 the
# share measures only what other processes took.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
BUILD=$(mkdir -p "${1:-$repo/build}" && cd "${1:-$repo/build}" && pwd)
WORK=${2:-/tmp/kvd-peers}
: "${LLAMA_CPP_DIR:?set LLAMA_CPP_DIR to a llama.cpp checkout}"
: "${IK_LLAMA_DIR:?set IK_LLAMA_DIR to an ik_llama.cpp checkout}"
list() { echo "$1" | tr ',' ' '; }
TYPES=$(list "${TYPES:-F16 Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K}")
METRICS=$(list "${METRICS:-pp256 pp1024 tg32 tg32@2048}")
ENGINES=$(list "${ENGINES:-exact fast llama ik}")
B8_TYPES=$(list "${B8_TYPES:-Q4_K_M Q4_0 Q8_0}")
ROUNDS=${ROUNDS:-2}
CACHE=${CACHE:-f16}
THREADS=${THREADS:-2}
JOBS=${JOBS:-2}
OUT=${OUT:-$WORK/results}
CONTEXT=16384  # written into the F16 file; each run plans only for the positions it uses
mkdir -p "$WORK" "$OUT/logs"
log() { echo "[peers $(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "bench/peers.sh: $*" >&2; exit 2; }

for m in $METRICS; do
  [[ $m =~ ^(pp[0-9]+|tg[0-9]+|tg[0-9]+@[0-9]+|b8)$ ]] || die "metric '$m' is not ppN, tgN, tgN@D or b8"
  if [[ $m =~ ^tg([0-9]+)@([0-9]+)$ ]] && (( BASH_REMATCH[1] + BASH_REMATCH[2] + 1 > CONTEXT )); then
    die "metric '$m' needs more than the files' $CONTEXT positions"
  fi
done
for t in $TYPES; do
  [[ $t =~ ^(F16|Q8_0|Q4_0|Q4_K_M|Q5_K_M|Q6_K)$ ]] || die "type '$t' is not F16, Q8_0, Q4_0, Q4_K_M, Q5_K_M or Q6_K"
done
for e in $ENGINES; do
  [[ $e =~ ^(exact|default|fast|llama|ik)$ ]] || die "engine '$e' is not exact, default, fast, llama or ik"
done

BIN=$BUILD/bin
ISA=${ISA:-native}
case $ISA in
  native) peer_build=build peer_isa=(-DGGML_NATIVE=ON) ours_isa=() ;;
  avx2) peer_build=build-avx2 peer_isa=(-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
        ours_isa=(-DKVDECODE_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3) ;;
  *) die "ISA '$ISA' is not native or avx2" ;;
esac
LLAMA=$LLAMA_CPP_DIR/$peer_build/bin
IK=$IK_LLAMA_DIR/$peer_build/bin
RAW=$OUT/raw.csv
if [ -n "${FROM_RAW:-}" ]; then
  # Report only: the raw.csv files of earlier (partial) runs, their rounds numbered on.
  log "merging $FROM_RAW into $RAW"
  # shellcheck disable=SC2046
  awk -F, -v OFS=, 'FNR == 1 { base = top; if (NR == 1) print; next } { $1 += base; if ($1 > top) top = $1; print }' \
    $(list "$FROM_RAW") > "$RAW.tmp"
  mv "$RAW.tmp" "$RAW"
  for f in $(list "$FROM_RAW"); do echo "== $f"; cat "$(dirname "$f")/env.txt" 2>/dev/null || true; done > "$OUT/env.txt"
else
# Our programs under the chosen OpenMP wait policy (WAIT_POLICY).
# (A function, not env(1): the command may be the shell function timed, which sets SHARE.)
omp_env() {
  local was_set=${OMP_WAIT_POLICY+x} was=${OMP_WAIT_POLICY:-} rc=0
  if [ -n "${WAIT_POLICY:-}" ]; then export OMP_WAIT_POLICY=$WAIT_POLICY; else unset OMP_WAIT_POLICY; fi
  "$@" || rc=$?
  if [ -n "$was_set" ]; then export OMP_WAIT_POLICY=$was; else unset OMP_WAIT_POLICY; fi
  return $rc
}

# ---------------------------------------------------------------- 1. builds
build_peer() {  # dir, label, targets (space-separated), extra cmake options...
  local dir=$1 label=$2 targets=$3 missing=""
  shift 3
  for t in $targets; do [ -x "$dir/$peer_build/bin/$t" ] || missing="$missing $t"; done
  [ -z "$missing" ] && return 0
  log "building $label:$missing (in $dir/$peer_build, log $OUT/logs/build-$label.log)"
  cmake -S "$dir" -B "$dir/$peer_build" -DCMAKE_BUILD_TYPE=Release "${peer_isa[@]}" -DLLAMA_CURL=OFF "$@" \
    > "$OUT/logs/build-$label.log" 2>&1
  # shellcheck disable=SC2086
  nice -n 5 cmake --build "$dir/$peer_build" -j "$JOBS" --target $missing >> "$OUT/logs/build-$label.log" 2>&1
}
build_peer "$LLAMA_CPP_DIR" llama.cpp "llama-bench llama-quantize llama-batched-bench"
build_peer "$IK_LLAMA_DIR" ik_llama.cpp "llama-bench llama-quantize" \
  -DGGML_IQK_FA_ALL_QUANTS=OFF -DGGML_IQK_FLASH_ATTENTION=ON -DBUILD_SHARED_LIBS=ON
# A tree configured for the other ISA would measure the wrong code.
if [ -f "$BUILD/CMakeCache.txt" ]; then
  tree_isa=native
  grep -q '^KVDECODE_NATIVE:BOOL=OFF' "$BUILD/CMakeCache.txt" && grep -q '^CMAKE_CXX_FLAGS:STRING=.*-march=x86-64-v3' "$BUILD/CMakeCache.txt" &&
    tree_isa=avx2
  [ "$tree_isa" = "$ISA" ] || die "$BUILD is configured for $tree_isa, not ISA=$ISA: name another BUILD_DIR"
fi
if [ "${SKIP_BUILD:-0}" = 0 ]; then
  [ -f "$BUILD/CMakeCache.txt" ] ||
    cmake -S "$repo" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKVDECODE_BUILD_BENCHMARKS=ON "${ours_isa[@]}" > "$OUT/logs/build-kvdecode.log" 2>&1
  ours_targets="kvdecode-generate kvdecode-random-gguf kvdecode-quantize kvdecode-peers-chart"
  [[ " $METRICS " == *" b8 "* ]] && ours_targets="$ours_targets kvdecode-roofline"
  log "building $ours_targets (in $BUILD, log $OUT/logs/build-kvdecode.log)"
  # shellcheck disable=SC2086
  nice -n 5 cmake --build "$BUILD" -j "$JOBS" --target $ours_targets >> "$OUT/logs/build-kvdecode.log" 2>&1
fi

# ---------------------------------------------------------------- 2. the files
if [ ! -f "$WORK/F16.gguf" ]; then
  log "writing $WORK/F16.gguf (random f16 weights, 2.2 GB)"
  "$BIN/kvdecode-random-gguf" "$WORK/F16.gguf.tmp" 22 1 0.9 "$CONTEXT" 2> "$OUT/logs/random-gguf.log"
  mv "$WORK/F16.gguf.tmp" "$WORK/F16.gguf"
fi
for t in $TYPES; do
  f=$WORK/$t.gguf
  [ -f "$f" ] && continue
  log "writing $f"
  case $t in
    Q8_0) "$BIN/kvdecode-quantize" "$WORK/F16.gguf" "$f.tmp" Q8_0 --threads "$THREADS" --quiet \
            > "$OUT/logs/quantize-$t.log" 2>&1 ;;
    Q4_0|Q4_K_M|Q5_K_M|Q6_K) "$LLAMA/llama-quantize" "$WORK/F16.gguf" "$f.tmp" "$t" "$THREADS" \
            > "$OUT/logs/quantize-$t.log" 2>&1 ;;
  esac
  mv "$f.tmp" "$f"
done

# ---------------------------------------------------------------- 3. the rounds
# A fixed pseudo-random prompt of n ids in [3, 32000) (no BOS/EOS), comma-separated.
prompt_ids() { awk -v n="$1" 'BEGIN { s = 12345; for (i = 0; i < n; ++i) { s = (s * 16807) % 2147483647;
  printf "%s%d", (i ? "," : ""), 3 + s % 31997 } }'; }
field() { sed -n "s/.*\"$1\": *\([^,}]*\).*/\1/p" | head -1; }
echo "round,type,engine,metric,tokens_per_second,cpu_share" > "$RAW"
# Runs a command under /usr/bin/time; SHARE is then the CPU time it got over its wall
# time and THREADS cores (1: it never waited for a core; on a shared machine, less).
SHARE=""
timed() {
  local tf=$OUT/logs/time.txt rc=0
  /usr/bin/time -f '%e %U %S' -o "$tf" "$@" || rc=$?
  SHARE=$(tail -1 "$tf" | awk -v t="$THREADS" '$1 > 0 { printf "%.2f", ($2 + $3) / ($1 * t) }')
  return $rc
}
record() {  # round, type, engine, metric, value
  if [ -z "$5" ]; then log "  $3 $2 $4: no figure (see $OUT/logs)"; return; fi
  echo "$1,$2,$3,$4,$5,$SHARE" >> "$RAW"
  log "  $3 $2 $4: $5 tok/s (CPU share $SHARE)"
}

# kvdecode: one process per figure, so each starts from the same state.
run_ours() {  # round, type, engine (exact|default|fast), metric
  local r=$1 t=$2 e=$3 m=$4 n prompt steps key json
  local flags=()
  [ "$e" = fast ] && flags=(--fast-matmul)
  [ "$e" = exact ] && flags=(--exact-activations)
  case $m in
    pp*) n=${m#pp}; prompt=$(prompt_ids "$n"); steps=1; key=prefill_tokens_per_second ;;
    tg*@*) n=${m%@*}; n=${n#tg}; prompt=$(prompt_ids "${m#*@}"); steps=$((n + 1)); key=decode_tokens_per_second ;;
    tg*) n=${m#tg}; prompt=$(prompt_ids 1); steps=$((n + 1)); key=decode_tokens_per_second ;;
  esac
  local positions=$(( $(echo "$prompt" | tr ',' '\n' | wc -l) + steps ))
  local base=$OUT/logs/ours-$e-$t-$m-r$r
  omp_env timed "$BIN/kvdecode-generate" -m "$WORK/$t.gguf" -c "$positions" --prompt-ids "$prompt" \
    -n "$steps" -t "$THREADS" --temp 0 --ignore-eos --cache-dtype "$CACHE" --json --quiet "${flags[@]}" > "$base.json" 2> "$base.err" || true
  json=$(tail -1 "$base.json")
  record "$r" "$t" "$e" "$m" "$(echo "$json" | field "$key")"
}

# A peer's llama-bench: every ppN and tgN in one process (one load, one repack), and
# for ik every tgN@D (-gp D,N); llama.cpp's depth figures come from llama-batched-bench.
run_peer() {  # round, type, engine (llama|ik)
  local r=$1 t=$2 e=$3 pp="" tg="" gp=() np ng ts bin extra=()
  for m in $METRICS; do
    case $m in
      pp*) pp="$pp,${m#pp}" ;;
      tg*@*) ;;
      tg*) tg="$tg,${m#tg}" ;;
    esac
  done
  if [ "$e" = ik ]; then
    bin=$IK; extra=(-rtr 1)
    for m in $METRICS; do [[ $m == tg*@* ]] && gp+=(-gp "${m#*@},$(echo "${m%@*}" | tr -d tg)"); done
  else
    bin=$LLAMA
  fi
  if [ -n "$pp$tg" ] || [ ${#gp[@]} -gt 0 ]; then
    pp=${pp#,}; tg=${tg#,}
    timed "$bin/llama-bench" -m "$WORK/$t.gguf" -t "$THREADS" -r 1 -p "${pp:-0}" -n "${tg:-0}" "${extra[@]}" "${gp[@]}" \
      -o json > "$OUT/logs/$e-$t-r$r.json" 2> "$OUT/logs/$e-$t-r$r.err" || true
    # -o json writes one field per line (ik_llama.cpp has no jsonl): n_prompt, n_gen, then avg_ts
    while read -r np ng ts; do
      if [ "$ng" = 0 ]; then m=pp$np; elif [ "$np" = 0 ]; then m=tg$ng; else m=tg$ng@$np; fi
      record "$r" "$t" "$e" "$m" "$ts"
    done < <(awk -F': ' '/"n_prompt":/ { np = $2 + 0 } /"n_gen":/ { ng = $2 + 0 }
                         /"avg_ts":/ { print np, ng, $2 + 0 }' "$OUT/logs/$e-$t-r$r.json")
  fi
  [ "$e" = llama ] || return 0
  for m in $METRICS; do
    [[ $m == tg*@* ]] || continue
    local d=${m#*@} g
    g=${m%@*}; g=${g#tg}
    timed "$bin/llama-batched-bench" -m "$WORK/$t.gguf" -t "$THREADS" -c $((d + g)) -b 2048 -ub 512 -npp "$d" -ntg "$g" \
      -npl 1 --output-format jsonl > "$OUT/logs/$e-$t-$m-r$r.jsonl" 2> "$OUT/logs/$e-$t-$m-r$r.err" || true
    record "$r" "$t" "$e" "$m" "$(field speed_tg < "$OUT/logs/$e-$t-$m-r$r.jsonl")"
  done
}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
  echo "isa: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_bf16|avxvnni)$' | tr '\n' ' ')"
  echo "kvdecode: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "builds: ISA=$ISA (kvdecode in $BUILD, peers in $peer_build)"
  echo "threads: $THREADS, rounds: $ROUNDS, types: $TYPES, metrics: $METRICS, kvdecode cache: $CACHE"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/env.txt"
log "$(tr '\n' ';' < "$OUT/env.txt")"
for r in $(seq 1 "$ROUNDS"); do
  for t in $TYPES; do
    log "round $r/$ROUNDS, $t (load $(cut -d' ' -f1 /proc/loadavg))"
    for e in $ENGINES; do
      case $e in
        exact|default|fast) for m in $METRICS; do [ "$m" = b8 ] || run_ours "$r" "$t" "$e" "$m"; done ;;
        llama|ik) run_peer "$r" "$t" "$e" ;;
      esac
    done
  done
done

# Batched decode (b8): kvdecode-roofline on its own random weights, our quantizer's schemes.
if [[ " $METRICS " == *" b8 "* ]]; then
  schemes=$(echo "$B8_TYPES" | tr ' ' ',')
  log "b8: kvdecode-roofline --weight-types $schemes --fast-matmul (log $OUT/logs/roofline.log)"
  omp_env "$BIN/kvdecode-roofline" --weight-types "$schemes" --fast-matmul --threads "$THREADS" \
    --max-others 100 --patience 0 --out-dir "$OUT/roofline" > "$OUT/roofline.txt" 2> "$OUT/logs/roofline.log" || true
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"
for e in llama ik; do
  f=$(find "$OUT/logs" -name "$e-*-r1.json" | head -1)
  if [ -n "$f" ]; then
    echo "$e: build $(field build_number < "$f") ($(field build_commit < "$f" | tr -d '"'))" >> "$OUT/env.txt"
  fi
done

fi

# ---------------------------------------------------------------- 4. the results
BEST=$OUT/best.csv
awk -F, 'NR > 1 { k = $2 "," $4 "," $3; if (!(k in best) || $5 + 0 > best[k] + 0) best[k] = $5; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
  END { print "type,metric,engine,tokens_per_second"; for (i = 0; i < n; ++i) print order[i] "," best[order[i]] }' "$RAW" > "$BEST"
# Per CPU-second: tokens/s over the CPU share of the process, the mean of the rounds. On a
# shared machine this is close to the speed on THREADS idle cores (for THREADS 1; with more
# threads, waiting at a barrier for a descheduled thread is not CPU time).
PER_CPU=$OUT/per_cpu.csv
awk -F, 'NR > 1 && $6 > 0 { k = $2 "," $4 "," $3; sum[k] += $5 / $6; n[k]++; if (!(k in seen)) { seen[k] = 1; order[m++] = k } }
  END { print "type,metric,engine,tokens_per_cpu_second"; for (i = 0; i < m; ++i) printf "%s,%.2f\n", order[i], sum[order[i]] / n[order[i]] }' \
  "$RAW" > "$PER_CPU"
table() {  # CSV (type,metric,engine,value)
  awk -F, -v types="$TYPES" -v metrics="$METRICS" 'NR > 1 { v[$1 "," $2 "," $3] = $4 }
  function cell(x) { return x == "" ? "-" : sprintf("%.1f", x) }
  function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "-" : sprintf("%.2f", a / b) }
  END {
    print "| type | metric | ours exact | ours fast | llama.cpp | ik_llama.cpp | exact / llama.cpp | exact / ik | fast / llama.cpp | fast / ik |"
    print "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    nt = split(types, T, " "); nm = split(metrics, M, " ")
    for (i = 1; i <= nt; ++i) for (j = 1; j <= nm; ++j) {
      if (M[j] == "b8") continue
      k = T[i] "," M[j]; d = v[k ",exact"]; f = v[k ",fast"]; l = v[k ",llama"]; ik = v[k ",ik"]
      if (d f l ik == "") continue
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", T[i], M[j], cell(d), cell(f), cell(l), cell(ik),
             ratio(d, l), ratio(d, ik), ratio(f, l), ratio(f, ik)
    }
  }' "$1"
}
{
  echo "Tokens/s, best of the rounds (wall clock):"; echo; table "$BEST"; echo
  echo "Tokens per CPU-second (tokens/s over the process's CPU share), mean of the rounds:"; echo; table "$PER_CPU"
} > "$OUT/table.md"
if [ -x "$BIN/kvdecode-peers-chart" ]; then
  "$BIN/kvdecode-peers-chart" "$BEST" "$OUT/peers.svg" \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $THREADS threads, best of $ROUNDS round(s)" \
    2> "$OUT/logs/chart.log" || log "the chart failed: $(cat "$OUT/logs/chart.log")"
else
  log "no chart: $BIN/kvdecode-peers-chart is not built"
fi
cat "$OUT/env.txt"
cat "$OUT/table.md"
if [[ " $METRICS " == *" b8 "* ]]; then
  echo; echo "b8 and the bandwidth bound (kvdecode-roofline, $OUT/roofline.txt):"; cat "$OUT/roofline.txt"
fi
log "done: $(find "$OUT" -maxdepth 1 -type f -printf '%f ' | sort)in $OUT"
