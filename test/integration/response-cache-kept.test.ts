/**
 * What the response cache keeps: an answer collected off a stream keeps the log probabilities
 * its chunks carried (chat and legacy completions), so a plain hit is the answer a plain call
 * gets; and an answer a fallback target gave is not kept under the key of the model's own
 * target (an outage would otherwise pin the fallback's answers for the entry's whole TTL).
 * Format and routing rules, the same on every store: run on the memory stores.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMPLETION_PRICE, MODEL, PROMPT_PRICE, type RunningGateway, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const TIERED = 'test/tiered';
const pricing = { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE };

/** One log-probability entry of a chat chunk. */
const lp = (token: string, logprob: number) => ({ token, logprob, bytes: [...Buffer.from(token)], top_logprobs: [] });

/** Writes `events` as an SSE stream, then [DONE]. */
function sse(res: ServerResponse, events: unknown[]): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const e of events) res.write(`data: ${JSON.stringify(e)}\n\n`);
  res.end('data: [DONE]\n\n');
}

let primary: TestUpstream;
let fallback: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let n = 0;
const fresh = (what: string) => `${what} ${++n} ${Date.now()}`;

beforeAll(async () => {
  [primary, fallback] = await Promise.all([startTestUpstream(), startTestUpstream()]);
  const setup = testConfig({
    upstreamUrl: fallback.url,
    models: [{ id: TIERED, type: 'text', pricing, targets: [{ upstream: 'primary', upstreamModel: 'big-model', priority: 0 }, { upstream: 'test', upstreamModel: 'backup-model', priority: 1 }] }],
  });
  devKey = setup.devKey;
  gw = await startGateway({
    ...setup.options,
    upstreams: { ...setup.options.upstreams, primary: { baseUrl: primary.url, timeoutMs: 5_000 } },
    routing: { retries: 1, backoffMs: 1, maxRetryAfterMs: 10 },
    cache: {},
  });
});
afterAll(async () => {
  await gw?.close();
  await Promise.all([primary?.close(), fallback?.close()]);
});

const post = (path: string, body: Record<string, unknown>) =>
  fetch(`${gw.baseURL}${path}`, { method: 'POST', headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('an answer collected off a stream', () => {
  it('chat: keeps each chunk’s log probabilities, in order, for a plain hit', async () => {
    fallback.setBehavior({
      kind: 'custom',
      handle: (_req, res) => {
        const base = { id: 'chatcmpl-lp', object: 'chat.completion.chunk', created: 1, model: 'provider-chat' };
        sse(res, [
          { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] },
          { ...base, choices: [{ index: 0, delta: { content: 'Hel' }, logprobs: { content: [lp('Hel', -0.1)], refusal: null }, finish_reason: null }] },
          { ...base, choices: [{ index: 0, delta: { content: 'lo' }, logprobs: { content: [lp('lo', -0.2)], refusal: null }, finish_reason: null }] },
          { ...base, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }] },
          { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } },
        ]);
      },
    });
    const body = { model: MODEL, logprobs: true, messages: [{ role: 'user', content: fresh('logprobs') }] };
    const streamed = await post('/chat/completions', { ...body, stream: true });
    expect(streamed.headers.get('x-cache')).toBe('MISS');
    expect(await streamed.text()).toContain('"token":"lo"');
    const calls = fallback.requests.length;

    const plain = await post('/chat/completions', body);
    expect(plain.headers.get('x-cache')).toBe('HIT');
    const json = (await plain.json()) as { choices: { message: { content: string }; logprobs: { content: unknown[]; refusal: unknown } }[] };
    expect(json.choices[0]!.message.content).toBe('Hello');
    expect(json.choices[0]!.logprobs).toEqual({ content: [lp('Hel', -0.1), lp('lo', -0.2)], refusal: null });
    // And a streamed hit carries them again.
    const again = await post('/chat/completions', { ...body, stream: true });
    expect(again.headers.get('x-cache')).toBe('HIT');
    expect(await again.text()).toContain(JSON.stringify({ content: [lp('Hel', -0.1), lp('lo', -0.2)], refusal: null }));
    expect(fallback.requests.length).toBe(calls);
  });

  it('completions: keeps the tokens and their log probabilities, in order, for a plain hit', async () => {
    fallback.setBehavior({
      kind: 'custom',
      handle: (_req, res) => {
        const base = { id: 'cmpl-lp', object: 'text_completion', created: 1, model: 'provider-chat' };
        sse(res, [
          { ...base, choices: [{ index: 0, text: 'Hel', logprobs: { tokens: ['Hel'], token_logprobs: [-0.1], top_logprobs: [{ Hel: -0.1 }], text_offset: [0] }, finish_reason: null }] },
          { ...base, choices: [{ index: 0, text: 'lo', logprobs: { tokens: ['lo'], token_logprobs: [-0.2], top_logprobs: [{ lo: -0.2 }], text_offset: [3] }, finish_reason: null }] },
          { ...base, choices: [{ index: 0, text: '', logprobs: null, finish_reason: 'stop' }] },
          { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } },
        ]);
      },
    });
    const body = { model: MODEL, logprobs: 1, prompt: fresh('completions logprobs') };
    const streamed = await post('/completions', { ...body, stream: true });
    expect(streamed.headers.get('x-cache')).toBe('MISS');
    await streamed.text();
    const plain = await post('/completions', body);
    expect(plain.headers.get('x-cache')).toBe('HIT');
    const json = (await plain.json()) as { choices: { text: string; logprobs: unknown }[] };
    expect(json.choices[0]).toMatchObject({ text: 'Hello', logprobs: { tokens: ['Hel', 'lo'], token_logprobs: [-0.1, -0.2], top_logprobs: [{ Hel: -0.1 }, { lo: -0.2 }], text_offset: [0, 3] } });
  });

  it('of tool calls opened by an empty content delta has content null, as the plain answer has', async () => {
    fallback.setBehavior({
      kind: 'custom',
      handle: (_req, res) => {
        const base = { id: 'chatcmpl-tools', object: 'chat.completion.chunk', created: 1, model: 'provider-chat' };
        const call = (args: string, first: boolean) => ({ index: 0, ...(first ? { id: 'call_1', type: 'function', function: { name: 'lookup', arguments: args } } : { function: { arguments: args } }) });
        sse(res, [
          { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] },
          { ...base, choices: [{ index: 0, delta: { tool_calls: [call('{"q":', true)] }, logprobs: null, finish_reason: null }] },
          { ...base, choices: [{ index: 0, delta: { tool_calls: [call('"kettles"}', false)] }, logprobs: null, finish_reason: null }] },
          { ...base, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'tool_calls' }] },
          { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 6, total_tokens: 15 } },
        ]);
      },
    });
    const body = { model: MODEL, messages: [{ role: 'user', content: fresh('tools') }], tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }] };
    await (await post('/chat/completions', { ...body, stream: true })).text();
    const plain = await post('/chat/completions', body);
    expect(plain.headers.get('x-cache')).toBe('HIT');
    const json = (await plain.json()) as { choices: { message: Record<string, unknown>; finish_reason: string }[] };
    expect(json.choices[0]).toMatchObject({
      finish_reason: 'tool_calls',
      message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":"kettles"}' } }] },
    });
  });

  it('with no log probabilities in its chunks keeps logprobs null', async () => {
    fallback.setBehavior({ kind: 'stream', chunks: ['Hi', '!'] });
    const body = { model: MODEL, messages: [{ role: 'user', content: fresh('no logprobs') }] };
    await (await post('/chat/completions', { ...body, stream: true })).text();
    const plain = await post('/chat/completions', body);
    expect(plain.headers.get('x-cache')).toBe('HIT');
    expect(((await plain.json()) as { choices: { logprobs: unknown }[] }).choices[0]!.logprobs).toBeNull();
  });
});

describe('an answer a fallback target gave', () => {
  it('is not kept under the key of the model’s own target: once that target is back, it answers (plain and streamed)', async () => {
    for (const stream of [false, true]) {
      primary.setBehavior({ kind: 'error', status: 503, message: 'overloaded' });
      fallback.setBehavior(stream ? { kind: 'stream', chunks: ['from ', 'backup'] } : { kind: 'json', content: 'from backup' });
      const body = { model: TIERED, stream, messages: [{ role: 'user', content: fresh(`tiered ${stream}`) }] };
      const first = await post('/chat/completions', body);
      expect(first.status).toBe(200);
      expect(first.headers.get('x-cache')).toBe('MISS');
      expect(await first.text()).toContain('backup');
      expect(fallback.requests.at(-1)!.body!.model).toBe('backup-model');

      // The model's own target is back: the same request reaches it, and its answer is kept.
      primary.setBehavior(stream ? { kind: 'stream', chunks: ['from ', 'primary'] } : { kind: 'json', content: 'from primary' });
      const before = primary.requests.length;
      const second = await post('/chat/completions', body);
      expect(second.headers.get('x-cache')).toBe('MISS');
      expect(await second.text()).toContain('primary');
      expect(primary.requests.length).toBe(before + 1);
      const third = await post('/chat/completions', body);
      expect(third.headers.get('x-cache')).toBe('HIT');
      expect(await third.text()).toContain('primary');
      expect(primary.requests.length).toBe(before + 1);
    }
  });
});
