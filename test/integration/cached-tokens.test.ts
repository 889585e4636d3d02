/**
 * Cached and reasoning tokens, golden to the nano-USD: an OpenAI-shaped upstream on loopback
 * reports cache reads (`cached_tokens`), cache writes (`cache_write_tokens`, OpenRouter's
 * field) and reasoning tokens, plain and streamed, on chat, Responses and legacy completions.
 * Each call's wallet debit, ledger entry (units naming each part) and /v1/key figures are
 * checked against a figure worked out by hand below, not recomputed with the gateway's code.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargesOf } from '../helpers/billing.js';
import { MODEL, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';

/**
 * Prices (USD per token): prompt 0.000003, cache read 0.0000003333, cache write 0.000003751,
 * completion 0.000015. In pico-USD: 3_000_000, 333_300, 3_751_000, 15_000_000.
 */
const CACHED_MODEL = 'test/cached';
const PRICING = { prompt: '0.000003', completion: '0.000015', cachedPrompt: '0.0000003333', cacheWrite: '0.000003751' };
/** The same prompt and completion prices, no cache prices: cache reads and writes cost the prompt price. */
const PLAIN_MODEL = 'test/uncached';

/** What the upstream reports: 2001 input tokens of which 1501 cache reads and 300 cache writes; 777 output tokens of which 500 reasoning. */
const PROMPT = 2001;
const CACHED = 1501;
const WRITTEN = 300;
const COMPLETION = 777;
const REASONING = 500;

/**
 *   uncached  (2001 - 1501 - 300) x 3_000_000  =    600_000_000 pico
 *   reads      1501 x   333_300               =    500_283_300
 *   writes      300 x 3_751_000               =  1_125_300_000
 *   completion  777 x 15_000_000              = 11_655_000_000   (reasoning inside, not added)
 *   total                                      = 13_880_583_300 pico -> rounded up: 13_880_584 nano
 */
const GOLDEN_NANO = 13_880_584n;
/** Without cache prices: 2001 x 3_000_000 + 777 x 15_000_000 = 17_658_000_000 pico = 17_658_000 nano. */
const PLAIN_NANO = 17_658_000n;

const UNITS = { kind: 'tokens', prompt: PROMPT, completion: COMPLETION, cachedPrompt: CACHED, cacheWrite: WRITTEN, reasoning: REASONING };

const chatUsage = {
  prompt_tokens: PROMPT,
  completion_tokens: COMPLETION,
  total_tokens: PROMPT + COMPLETION,
  prompt_tokens_details: { cached_tokens: CACHED, cache_write_tokens: WRITTEN, audio_tokens: 0 },
  completion_tokens_details: { reasoning_tokens: REASONING, audio_tokens: 0 },
};
const responsesUsage = {
  input_tokens: PROMPT,
  input_tokens_details: { cached_tokens: CACHED, cache_write_tokens: WRITTEN },
  output_tokens: COMPLETION,
  output_tokens_details: { reasoning_tokens: REASONING },
  total_tokens: PROMPT + COMPLETION,
};

/** Writes `frames` as SSE; `cut`: the connection is reset after them, before `[DONE]`. */
const sse = (res: ServerResponse, frames: unknown[], events?: string[], cut = false) => {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const [i, f] of frames.entries()) res.write(`${events ? `event: ${events[i]}\n` : ''}data: ${JSON.stringify(f)}\n\n`);
  if (cut) {
    setTimeout(() => res.socket?.destroy(), 50);
    return;
  }
  if (!events) res.write('data: [DONE]\n\n');
  res.end();
};

/** The upstream: answers chat, completions and Responses, plain or streamed, always with the usage above. */
function answer(path: string, body: Record<string, unknown>, res: ServerResponse): void {
  const model = String(body.model);
  const created = 1_700_000_000;
  if (path === '/v1/chat/completions') {
    const base = { id: 'chatcmpl-1', created, model, system_fingerprint: null };
    if (body.stream !== true) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ...base, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'cached hello', refusal: null }, logprobs: null, finish_reason: 'stop' }], usage: chatUsage }));
      return;
    }
    const chunk = (choices: unknown[], extra = {}) => ({ ...base, object: 'chat.completion.chunk', choices, ...extra });
    sse(res, [
      chunk([{ index: 0, delta: { role: 'assistant', content: 'cached' }, finish_reason: null }]),
      chunk([{ index: 0, delta: { content: ' hello' }, finish_reason: null }]),
      chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]),
      chunk([], { usage: chatUsage }),
    ], undefined, body.user === 'cut');
    return;
  }
  if (path === '/v1/completions') {
    const base = { id: 'cmpl-1', object: 'text_completion', created, model };
    if (body.stream !== true) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ...base, choices: [{ index: 0, text: 'cached hello', logprobs: null, finish_reason: 'stop' }], usage: chatUsage }));
      return;
    }
    sse(res, [{ ...base, choices: [{ index: 0, text: 'cached hello', logprobs: null, finish_reason: 'stop' }] }, { ...base, choices: [], usage: chatUsage }]);
    return;
  }
  // /v1/responses
  const message = { id: 'msg_1', type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'cached hello', annotations: [], logprobs: [] }] };
  const done = { id: 'resp_1', object: 'response', created_at: created, model, status: 'completed', output: [message], usage: responsesUsage };
  if (body.stream !== true) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(done));
    return;
  }
  const events = [
    { type: 'response.created', sequence_number: 0, response: { ...done, status: 'in_progress', output: [], usage: null } },
    { type: 'response.output_text.delta', sequence_number: 1, item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'cached hello', logprobs: [] },
    { type: 'response.output_text.done', sequence_number: 2, item_id: 'msg_1', output_index: 0, content_index: 0, text: 'cached hello', logprobs: [] },
    { type: 'response.completed', sequence_number: 3, response: done },
  ];
  sse(res, events, events.map((e) => e.type));
}

let upstream: Server;
let gw: RunningGateway;
let key: string;
let account: string;

beforeAll(async () => {
  upstream = createServer((req: IncomingMessage, res) => {
    let text = '';
    req.on('data', (d: Buffer) => (text += d.toString()));
    req.on('end', () => answer(req.url ?? '', JSON.parse(text) as Record<string, unknown>, res));
  });
  upstream.listen(0, '127.0.0.1');
  await once(upstream, 'listening');
  const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`;
  const setup = testConfig({
    upstreamUrl: url,
    models: [
      { id: CACHED_MODEL, type: 'text', upstream: 'test', pricing: PRICING },
      { id: PLAIN_MODEL, type: 'text', upstream: 'test', pricing: { prompt: PRICING.prompt, completion: PRICING.completion } },
    ],
  });
  gw = await startGateway(setup.options);
  key = setup.devKey;
  account = setup.account;
});
afterAll(async () => {
  await gw?.close();
  await new Promise((r) => upstream?.close(r));
});

const post = (path: string, body: unknown) =>
  fetch(`${gw.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

const balance = async () => (await gw.stores.billing.wallet(account)).balance;

/** Calls, reads the whole answer, and returns what it debited and its ledger entry. */
async function billed(path: string, body: Record<string, unknown>) {
  const before = await balance();
  const charges = (await chargesOf(gw.stores.billing.ledger(account))).length;
  const res = await post(path, body);
  const text = await res.text();
  expect(res.status, text).toBe(200);
  const entries = await chargesOf(gw.stores.billing.ledger(account));
  expect(entries).toHaveLength(charges + 1);
  return { debit: before - (await balance()), entry: entries[entries.length - 1]!, text };
}

const cases: Array<[string, string, Record<string, unknown>]> = [
  ['chat, plain', '/chat/completions', { messages: [{ role: 'user', content: 'hi' }] }],
  ['chat, streamed', '/chat/completions', { messages: [{ role: 'user', content: 'hi' }], stream: true }],
  ['chat, streamed with the usage chunk asked for', '/chat/completions', { messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } }],
  ['Responses, plain', '/responses', { input: 'hi' }],
  ['Responses, streamed', '/responses', { input: 'hi', stream: true }],
  ['completions, plain', '/completions', { prompt: 'hi' }],
  ['completions, streamed', '/completions', { prompt: 'hi', stream: true }],
];

describe('cache reads, cache writes and reasoning billed exactly', () => {
  it.each(cases)('%s: debit, ledger units and cost to the nano-USD', async (_name, path, body) => {
    const { debit, entry } = await billed(path, { model: CACHED_MODEL, ...body });
    expect(debit).toBe(GOLDEN_NANO);
    expect(entry.cost).toBe(GOLDEN_NANO);
    expect(entry.units).toEqual(UNITS);
    expect(entry.measured).toBe('usage');
    expect(entry.model).toBe(CACHED_MODEL);
  });

  it.each(cases)('%s, a model without cache prices: every prompt token at the prompt price', async (_name, path, body) => {
    const { debit, entry } = await billed(path, { model: PLAIN_MODEL, ...body });
    expect(debit).toBe(PLAIN_NANO);
    expect(entry.units).toEqual(UNITS);
  });

  it('a stream cut after its usage (no [DONE]) still bills the usage parts, measured by the tokenizer', async () => {
    const { debit, entry } = await billed('/chat/completions', { model: CACHED_MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true, user: 'cut' });
    // The usage is not final (the stream did not end), so the output is counted as well; the
    // larger completion (the usage's 777) and the usage's prompt parts are billed.
    expect(entry.measured).toBe('tokenizer');
    expect(entry.units).toEqual(UNITS);
    expect(debit).toBe(GOLDEN_NANO);
  });

  it('a client that asked for the usage chunk gets the upstream details relayed', async () => {
    const { text } = await billed('/chat/completions', { model: CACHED_MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });
    const usage = text
      .split('\n\n')
      .map((b) => b.replace(/^data: /, ''))
      .filter((d) => d.startsWith('{'))
      .map((d) => JSON.parse(d) as { usage?: unknown })
      .find((c) => c.usage)?.usage;
    expect(usage).toEqual(chatUsage);
  });

  it('/v1/key counts every charge at its exact cost', async () => {
    const res = await fetch(`${gw.baseURL}/key`, { headers: { authorization: `Bearer ${key}` } });
    const { data } = (await res.json()) as { data: { usage: number; wallet: { balance: number } } };
    const charges = await chargesOf(gw.stores.billing.ledger(account));
    const total = charges.reduce((n, e) => n + e.cost, 0n);
    // The two tables above, the cut stream and the relay check: 7 golden, 7 plain, 2 golden.
    expect(total).toBe(9n * GOLDEN_NANO + 7n * PLAIN_NANO);
    expect(data.usage).toBe(Number(total) / 1e9);
    expect(data.wallet.balance).toBe(Number(100_000_000_000n - total) / 1e9);
  });

  it('/v1/models lists the cache prices of a model that has them, and only then', async () => {
    const res = await fetch(`${gw.baseURL}/models`, { headers: { authorization: `Bearer ${key}` } });
    const { data } = (await res.json()) as { data: Array<{ id: string; pricing: Record<string, string> }> };
    expect(data.find((m) => m.id === CACHED_MODEL)?.pricing).toEqual({
      prompt: '0.000003',
      completion: '0.000015',
      input_cache_read: '0.0000003333',
      input_cache_write: '0.000003751',
    });
    expect(data.find((m) => m.id === PLAIN_MODEL)?.pricing).toEqual({ prompt: '0.000003', completion: '0.000015' });
    expect(data.find((m) => m.id === MODEL)?.pricing).not.toHaveProperty('input_cache_read');
  });
});
