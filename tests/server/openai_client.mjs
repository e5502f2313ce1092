// kvdecode-server driven by the official `openai` npm package (tests/server/run.sh
// starts the server and passes its URL, key and the text kvdecode-generate produced
// for the same prompt and seed). Checks, non-streamed and streamed:
//   - /v1/completions gives kvdecode-generate's text for the same prompt and seed,
//     and /v1/chat/completions its --conversation reply for the same messages;
//   - streamed and non-streamed answers are the same text, for completions and chat;
//   - usage, finish_reason, logprobs and the model list have OpenAI's shapes;
//   - a wrong key is refused with the SDK's AuthenticationError (401).
// Prints one line per check; exits 1 on the first failure.
import OpenAI from 'openai';

const [baseURL, apiKey, prompt, expected, seedText, maxText, tempText, expectedChat] = process.argv.slice(2);
const seed = Number(seedText), max_tokens = Number(maxText), temperature = Number(tempText);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });

function check(ok, what, detail = '') {
  if (!ok) {
    console.error(`FAIL: ${what}${detail ? ': ' + detail : ''}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

const models = await client.models.list();
check(models.data.length === 1 && typeof models.data[0].id === 'string', 'models.list has the model');

const base = { model: models.data[0].id, prompt, max_tokens, temperature, seed };
const whole = await client.completions.create(base);
check(whole.object === 'text_completion', 'completion object');
check(whole.choices[0].text === expected, 'completion text is kvdecode-generate\'s for the same prompt and seed',
      JSON.stringify({ server: whole.choices[0].text, generate: expected }));
check(['stop', 'length'].includes(whole.choices[0].finish_reason), 'completion finish_reason');
check(whole.usage.completion_tokens > 0 && whole.usage.total_tokens === whole.usage.prompt_tokens + whole.usage.completion_tokens,
      'completion usage adds up');

let streamed = '', finish = null;
const stream = await client.completions.create({ ...base, stream: true });
for await (const chunk of stream) {
  if (chunk.choices.length) {
    streamed += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
}
check(streamed === whole.choices[0].text, 'streamed completion text equals the non-streamed one');
check(finish === whole.choices[0].finish_reason, 'streamed finish_reason equals the non-streamed one');

const chatBase = { model: base.model, messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: prompt }],
                   max_tokens, temperature, seed, logprobs: true, top_logprobs: 2 };
const chat = await client.chat.completions.create(chatBase);
check(chat.object === 'chat.completion' && chat.choices[0].message.role === 'assistant', 'chat completion object');
check(chat.choices[0].message.content === expectedChat,
      'chat reply is kvdecode-generate --conversation\'s for the same messages and seed',
      JSON.stringify({ server: chat.choices[0].message.content, generate: expectedChat }));
check(chat.choices[0].logprobs.content.length === chat.usage.completion_tokens, 'one logprob entry per token');
check(chat.choices[0].logprobs.content.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2), 'logprobs are log-probabilities with 2 alternatives');

let chatText = '', usage = null;
const logprobs = [];
const chatStream = await client.chat.completions.create({ ...chatBase, stream: true, stream_options: { include_usage: true } });
for await (const chunk of chatStream) {
  if (chunk.usage) usage = chunk.usage;
  if (!chunk.choices.length) continue;
  chatText += chunk.choices[0].delta.content ?? '';
  if (chunk.choices[0].logprobs) logprobs.push(...chunk.choices[0].logprobs.content);
}
check(chatText === chat.choices[0].message.content, 'streamed chat text equals the non-streamed one');
check(JSON.stringify(logprobs) === JSON.stringify(chat.choices[0].logprobs.content), 'streamed chat logprobs equal the non-streamed ones, bit for bit');
check(usage && usage.completion_tokens === chat.usage.completion_tokens, 'stream_options.include_usage sends the usage');
check(usage.prompt_tokens_details.cached_tokens > 0, 'the repeated chat prompt came from the prefix cache',
      JSON.stringify(usage));

const wrong = new OpenAI({ baseURL, apiKey: 'not-the-key', maxRetries: 0 });
try {
  await wrong.completions.create(base);
  check(false, 'a wrong key is refused');
} catch (e) {
  check(e instanceof OpenAI.AuthenticationError && e.status === 401, 'a wrong key is refused with 401', String(e));
}
try {
  await client.chat.completions.create({ ...chatBase, messages: [] });
  check(false, 'empty messages are refused');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && /messages/.test(e.message), 'empty messages are a 400 naming the field', String(e));
}
console.log('all checks passed');
