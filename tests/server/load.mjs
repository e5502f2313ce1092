// A bounded load test of kvdecode-server (tests/server/run.sh starts it): N clients
// on loopback send a fixed number of requests each, completions and chats, streamed
// and not, with shared prefixes; every fourth streamed request is dropped midway
// (the client disconnects). At the end every request that was not dropped answered
// 200 with text, and /metrics shows no request running or queued and no cache block
// held by a request. Uses fetch only (Node 18+), no package.
const [baseURL, clientsText, perClientText] = process.argv.slice(2);
const clients = Number(clientsText), perClient = Number(perClientText);
const system = 'Once upon a time, there was a little girl named Lily. She liked to play in the park with her dog. ';

let errors = 0, answered = 0, dropped = 0;
async function one(client, k) {
  const stream = (client + k) % 2 === 0;
  const drop = stream && (client * perClient + k) % 4 === 0;
  const chat = k % 3 === 0;
  const body = chat
    ? { messages: [{ role: 'system', content: system }, { role: 'user', content: `Story ${client}-${k}.` }] }
    : { prompt: system + `Day ${k} of client ${client}:` };
  Object.assign(body, { max_tokens: 8 + ((client * 7 + k * 5) % 40), temperature: 0.8, seed: client * 1000 + k, stream });
  const url = baseURL + (chat ? '/v1/chat/completions' : '/v1/completions');
  const ctl = new AbortController();
  try {
    const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                   body: JSON.stringify(body), signal: ctl.signal });
    if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
    if (drop) {
      const reader = res.body.getReader();
      await reader.read();  // the first bytes, then go away
      ctl.abort();
      dropped++;
      return;
    }
    const text = await res.text();
    if (stream ? !text.includes('data: [DONE]') : !JSON.parse(text).choices) throw new Error('bad answer: ' + text.slice(0, 200));
    answered++;
  } catch (e) {
    if (drop && e.name === 'AbortError') { dropped++; return; }
    errors++;
    console.error(`client ${client} request ${k}: ${e}`);
  }
}

const t0 = Date.now();
await Promise.all(Array.from({ length: clients }, async (_, c) => {
  for (let k = 0; k < perClient; ++k) await one(c, k);
}));
const seconds = (Date.now() - t0) / 1000;

// The engine publishes its state after each step; wait for it to settle.
let metrics = '';
const value = (name) => Number((metrics.match(new RegExp(`^${name} (\\S+)$`, 'm')) || [])[1]);
for (let i = 0; i < 100; ++i) {
  metrics = await (await fetch(baseURL + '/metrics')).text();
  if (value('kvdecode_requests_running') === 0 && value('kvdecode_cache_blocks_running') === 0) break;
  await new Promise((r) => setTimeout(r, 100));
}
console.log(`${clients} clients x ${perClient} requests in ${seconds.toFixed(1)} s: ${answered} answered, ${dropped} dropped midway, ${errors} errors`);
console.log(`metrics: running ${value('kvdecode_requests_running')}, queued ${value('kvdecode_queue_depth')}, ` +
            `blocks held by requests ${value('kvdecode_cache_blocks_running')}, in use ${value('kvdecode_cache_blocks_in_use')} ` +
            `of ${value('kvdecode_cache_blocks_total')}, prefix-cache hits ${value('kvdecode_prefix_cache_hit_tokens_total')} tokens`);
const ok = errors === 0 && answered + dropped === clients * perClient && dropped > 0 &&
           value('kvdecode_requests_running') === 0 && value('kvdecode_queue_depth') === 0 &&
           value('kvdecode_cache_blocks_running') === 0 &&
           value('kvdecode_cache_blocks_in_use') <= value('kvdecode_cache_blocks_total') &&
           value('kvdecode_prefix_cache_hit_tokens_total') > 0;
console.log(ok ? 'load test passed' : 'FAIL: load test');
process.exit(ok ? 0 : 1);
