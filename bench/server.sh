#!/usr/bin/env bash
# kvdecode-server under load (docs/serving.md, "Benchmark"), optionally beside
# llama.cpp's llama-server on the same file and the same load:
#   bench/server.sh MODEL.gguf [LLAMA_SERVER]
# Both servers get 2 threads, 8 slots (-np 8), a context of 2048 per slot (llama-server:
# -c 16384 shared by its 8 slots) and their prompt caches on. For each server:
# aggregate tokens/s of 1 and of 8 concurrent streams (128 tokens each, greedy,
# ignore_eos), p50/p99 time to first token, whether repeating the same 8 requests gave
# identical text, and the time to first token of a 1000-token prompt cold and with its
# prefix cached. Prints one JSON line per measurement. THREADS (2), WAIT_POLICY (unset),
# CACHE (f16: kvdecode-server's --cache-dtype, llama-server's default KV type).
set -euo pipefail
model=${1:?usage: bench/server.sh MODEL.gguf [LLAMA_SERVER]}
llama=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
server=${KVDECODE_SERVER:-$here/../build/bin/kvdecode-server}
threads=${THREADS:-2}
port=18431

wait_ready() {
  for _ in $(seq 1 600); do
    [ "$(node -e "fetch('http://127.0.0.1:$port/health').then(r=>console.log(r.status)).catch(()=>console.log(0))")" = 200 ] && return 0
    sleep 0.2
  done
  echo "server not ready" >&2
  return 1
}

measure() {  # name
  local url=http://127.0.0.1:$port
  for n in 1 8; do
    echo "{\"server\": \"$1\", \"measure\": $(node "$here/server_bench.mjs" "$url" throughput $n 128)}"
  done
  echo "{\"server\": \"$1\", \"measure\": $(node "$here/server_bench.mjs" "$url" prefix 1000)}"
}

# OpenMP's own wait policy unless WAIT_POLICY names one (PASSIVE: threads sleep at once
# between parallel regions, kinder to a shared machine, slower on an idle one), as
# bench/peers.sh; llama-server's threads spin at its barriers.
if [ -n "${WAIT_POLICY:-}" ]; then export OMP_WAIT_POLICY=$WAIT_POLICY; else unset OMP_WAIT_POLICY; fi
"$server" -m "$model" -t "$threads" -c 2048 -np 8 --cache-dtype "${CACHE:-f16}" --port $port --quiet &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_ready
measure kvdecode-server
echo "{\"server\": \"kvdecode-server\", \"peak_rss_kb\": $(awk '/^VmHWM/ {print $2}' /proc/$pid/status)}"
kill $pid; wait $pid 2>/dev/null || true

if [ -n "$llama" ]; then
  "$llama" -m "$model" -t "$threads" -c 16384 -np 8 --port $port --log-disable >/dev/null 2>&1 &
  pid=$!
  wait_ready
  measure llama-server
  echo "{\"server\": \"llama-server\", \"peak_rss_kb\": $(awk '/^VmHWM/ {print $2}' /proc/$pid/status)}"
  kill $pid; wait $pid 2>/dev/null || true
fi
