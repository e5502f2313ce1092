#!/usr/bin/env bash
# kvdecode-server's integration tests, run by ctest (tests/CMakeLists.txt):
#   run.sh openai SERVER GENERATE SHARED WORKDIR   the official `openai` npm package
#                                                 against the server, checked against
#                                                 kvdecode-generate's completion and
#                                                 --conversation chat (openai_client.mjs)
#   run.sh load   SERVER GENERATE SHARED WORKDIR   N clients, disconnects midway, then
#                                                 /metrics back to zero and bounded RSS (load.mjs)
#   run.sh browser SERVER GENERATE SHARED WORKDIR  Debian's chromium, headless, types into
#                                                 the chat page and sees streamed text (browser.mjs)
# Exit 77 (ctest: skipped) with a message when node, npm, the npm registry,
# chromium or ../shared is missing.
set -uo pipefail
mode=$1 server=$2 generate=$3 shared=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
model=$shared/models/gguf/stories260K-F32.gguf
skip() { echo "SKIPPED: $*"; exit 77; }
[ -x "$server" ] || skip "kvdecode-server was not built (needs libcpp-httplib-dev)"
[ -f "$model" ] || skip "../shared is absent ($model)"
command -v node >/dev/null || skip "node is not installed"
mkdir -p "$work"

if [ "$mode" = openai ] || [ "$mode" = browser ]; then
  command -v npm >/dev/null || skip "npm is not installed"
  # The client package, installed from the lock file into the build folder.
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  if [ ! -d "$work/node_modules/openai" ] || [ "$here/package-lock.json" -nt "$work/node_modules/.package-lock.json" ]; then
    (cd "$work" && npm ci --no-audit --no-fund >npm.log 2>&1) || skip "npm ci failed (no network?): $(tail -3 "$work/npm.log")"
  fi
  cp "$here/openai_client.mjs" "$here/browser.mjs" "$work/"
fi
if [ "$mode" = browser ]; then
  chromium=$(command -v chromium || command -v chromium-browser || true)
  [ -n "$chromium" ] || skip "chromium is not installed (apt-get install chromium)"
fi

port=$(node -e "const s=require('net').createServer();s.listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
key=test-key
args=(-m "$model" -c 256 -np 4 --chat-template chatml --port "$port" --quiet)
[ "$mode" = openai ] && args+=(--api-key "$key")
[ "$mode" = load ] && args+=(--max-queue 64)
OMP_NUM_THREADS=1 "$server" "${args[@]}" >"$work/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
url=http://127.0.0.1:$port
for _ in $(seq 1 300); do
  code=$(node -e "fetch('$url/health').then(r=>console.log(r.status)).catch(()=>console.log(0))")
  [ "$code" = 200 ] && break
  kill -0 $pid 2>/dev/null || { echo "server exited:"; cat "$work/server.log"; exit 1; }
  sleep 0.1
done
[ "$code" = 200 ] || { echo "server not ready"; cat "$work/server.log"; exit 1; }

rss_kb() { awk '/^VmRSS/ {print $2}' /proc/$pid/status; }
case "$mode" in
  openai)
    prompt="Once upon a time" seed=7 n=24 temp=0.8
    json=$("$generate" -m "$model" -c 256 -p "$prompt" -n $n --temp $temp --seed $seed --json --quiet | tail -1)
    expected=$(node -e "const j=JSON.parse(process.argv[1]); const p=process.argv[2];
      if (!j.text.startsWith(p)) { console.error('generate text does not start with the prompt'); process.exit(1); }
      process.stdout.write(j.text.slice(p.length))" "$json" "$prompt") || exit 1
    # The same chat (system + user message, chatml) through kvdecode-generate --conversation.
    printf '%s' "$prompt" | node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>console.log(JSON.stringify([s])))" >"$work/conversation.json"
    chat_json=$("$generate" -m "$model" -c 256 --chat-template chatml --conversation "$work/conversation.json" \
                -sys "You tell stories." -n $n --temp $temp --seed $seed --json --quiet | tail -1)
    expected_chat=$(node -e "process.stdout.write(JSON.parse(process.argv[1]).turns[0].text)" "$chat_json") || exit 1
    (cd "$work" && node openai_client.mjs "$url/v1" "$key" "$prompt" "$expected" $seed $n $temp "$expected_chat") ;;
  load)
    before=$(rss_kb)
    node "$here/load.mjs" "$url" 8 6 || exit 1
    node "$here/load.mjs" "$url" 8 6 >/dev/null || exit 1
    after=$(rss_kb)
    echo "server RSS: ${before} kB after start, ${after} kB after 96 requests"
    # Bounded: the cache pool is allocated at start; requests add only transient buffers.
    # Not in a sanitized build (KVDECODE_SANITIZED=1, tests/CMakeLists.txt): ASan's
    # allocator keeps freed memory (its quarantine, its free lists), so its server
    # grows by about 66 MB over these requests where the release one grows by 4 MB.
    if [ "${KVDECODE_SANITIZED:-0}" = 1 ]; then
      echo "RSS bound not checked: a sanitized build's allocator keeps freed memory"
    else
      [ $((after - before)) -lt 65536 ] || { echo "FAIL: RSS grew by $((after - before)) kB"; exit 1; }
    fi ;;
  browser)
    (cd "$work" && node browser.mjs "$chromium" "$url") ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
