// Load generator for bench/server.sh (any OpenAI-compatible server: kvdecode-server,
// llama-server). Node 18+, fetch only.
//   node server_bench.mjs URL throughput N TOKENS   N concurrent streamed completions of
//        TOKENS tokens each (distinct 8-token prompts given as ids, greedy, ignore_eos):
//        aggregate generated tokens/s, p50/p99 time to first token, and whether a repeat
//        of the same requests gave identical text
//   node server_bench.mjs URL prefix PREFIX_TOKENS  time to first token (max_tokens 1) of a
//        prompt of PREFIX_TOKENS + 8 ids, cold (a prefix never seen) and warm (the same
//        prefix, another 8-token ending), each the median of 3
// Prompts are token ids in [100, 30000), so the measure does not depend on the
// vocabulary's text.
// Prints one JSON object.
const [url, mode, a, b] = process.argv.slice(2);

async function stream(prompt, max_tokens) {
  const t0 = performance.now();
  const res = await fetch(url + '/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens, temperature: 0, seed: 1, ignore_eos: true, stream: true,
                           n_predict: max_tokens, cache_prompt: true }) });
  if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '', text = '', ttft = null, tokens = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const c = JSON.parse(line.slice(6));
      if (!c.choices || !c.choices.length) continue;
      const t = c.choices[0].text ?? '';
      if (ttft === null) ttft = performance.now() - t0;
      if (t.length || c.choices[0].finish_reason === null) tokens++;
      text += t;
    }
  }
  return { ms: performance.now() - t0, ttft, tokens, text };
}

const pct = (xs, p) => { const s = [...xs].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const median = (xs) => pct(xs, 0.5);

if (mode === 'throughput') {
  const n = Number(a), max = Number(b);
  const prompts = Array.from({ length: n }, (_, i) => [1, 100 + i, 200 + i, 300 + i, 400, 500, 600, 700]);
  const run = async () => {
    const t0 = performance.now();
    const rs = await Promise.all(prompts.map((p) => stream(p, max)));
    return { seconds: (performance.now() - t0) / 1000, rs };
  };
  await stream([1, 2000, 3000], 4);
  const first = await run();
  const second = await run();
  const tokens = first.rs.length * max;
  const ttfts = [...first.rs, ...second.rs].map((r) => r.ttft);
  console.log(JSON.stringify({
    streams: n, tokens_per_stream: max,
    aggregate_tokens_per_second: +(2 * tokens / (first.seconds + second.seconds)).toFixed(2),
    ttft_p50_ms: +median(ttfts).toFixed(1), ttft_p99_ms: +pct(ttfts, 0.99).toFixed(1),
    repeat_identical: first.rs.every((r, i) => r.text === second.rs[i].text),
  }));
} else if (mode === 'prefix') {
  const n = Number(a);
  const ids = (seed, len) => Array.from({ length: len }, (_, i) => 100 + ((i * 7919 + seed * 104729) % 29900));
  const cold = [], warm = [];
  for (let k = 0; k < 3; ++k) {
    const prefix = [1, ...ids(1000 + k + Math.floor(Math.random() * 1e6), n)];
    cold.push((await stream([...prefix, ...ids(1, 8)], 1)).ms);
    warm.push((await stream([...prefix, ...ids(2, 8)], 1)).ms);
  }
  console.log(JSON.stringify({ prefix_tokens: n, ttft_cold_ms: +median(cold).toFixed(1), ttft_warm_ms: +median(warm).toFixed(1),
                               warm_over_cold: +(median(warm) / median(cold)).toFixed(3) }));
}
