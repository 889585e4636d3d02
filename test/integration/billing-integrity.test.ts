/**
 * Billing integrity, tried as a hostile client would: every way output could be had for free
 * or below list price, or a charge lost, against a running gateway (node:http, the official
 * `openai` client or raw HTTP) on memory storage and on a real Redis. Each case is one of the
 * holes the lifecycle closes; each failed on the gateway before it.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import OpenAI from 'openai';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteKeysWithPrefix, REDIS_URL, redisProblem } from '../../bench/redis-util.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { StoreUnavailableError } from '../../src/stores/errors.js';
import type { LedgerEntry, Stores } from '../../src/stores/types.js';
import { chatCost, loadTokenizer, promptBound } from '../helpers/billing.js';
import { eventually, MODEL, postChat, sseData, startGateway, testConfig, type RunningGateway, UPSTREAM_API_KEY } from '../helpers/gateway.js';
import { AUDIO, IMAGE, imageCost, mediaModels, SPEECH_PRICE, VIDEO, videoCost } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';
import { cost, parsePrice } from '../../src/billing/money.js';

const redisUp = (await redisProblem(REDIS_URL)) === null;
if (!redisUp && process.env.CI !== 'true') {
  console.warn(`\n!!! SKIPPING the Redis half of the billing-integrity tests: Redis at ${REDIS_URL} is unreachable (under CI=true this fails).\n`);
}
const PREFIX = `mgbi:${randomBytes(4).toString('hex')}:`;
const HOLD_TTL_MS = 600;

/** Stores whose billing.settle fails (as an unreachable store does) while `down` is set. */
function flaky(stores: Stores): { stores: Stores; setDown(down: boolean): void; failedSettles(): number } {
  let down = false;
  let failed = 0;
  const billing = Object.create(stores.billing) as Stores['billing'];
  billing.settle = async (req) => {
    if (down) {
      failed++;
      throw new StoreUnavailableError('billing store unreachable (injected)');
    }
    return stores.billing.settle(req);
  };
  return { stores: { ...stores, billing, close: () => stores.close() }, setDown: (d) => void (down = d), failedSettles: () => failed };
}

/** An SSE chat stream of `deltas`, never ending: no usage, no [DONE] (the client hangs up). */
function endlessStream(deltas: Record<string, unknown>[]) {
  return {
    kind: 'custom' as const,
    handle(_req: IncomingMessage, res: ServerResponse) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const delta of deltas) {
        res.write(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', model: 'm', choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`);
      }
      // ... and then nothing, until the gateway goes away.
    },
  };
}

const storages: Array<[string, boolean, () => Stores]> = [
  ['memory', true, () => createMemoryStores()],
  ['redis', redisUp || process.env.CI === 'true', () => createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX })],
];

describe.each(storages)('%s: billing integrity', (_name, enabled, makeStores) => {
  let up: TestUpstream;
  let media: MediaUpstream;
  let gw: RunningGateway;
  let injected: ReturnType<typeof flaky>;
  let n = 0;

  beforeAll(async () => {
    if (!enabled) return;
    up = await startTestUpstream();
    media = await startMediaUpstream();
    injected = flaky(makeStores());
    const { options } = testConfig({ upstreamUrl: up.url, limits: { holdTtlMs: HOLD_TTL_MS } });
    options.upstreams = { ...options.upstreams, media: { baseUrl: media.url, apiKey: 'media-upstream-key', timeoutMs: 10_000 } };
    options.models = [...(options.models ?? []), ...mediaModels('media')];
    gw = await startGateway({ ...options, stores: injected.stores });
  });

  afterAll(async () => {
    if (!enabled) return;
    await gw.close();
    await Promise.all([up.close(), media.close()]);
    if (_name === 'redis') {
      const c = new Redis(REDIS_URL);
      await deleteKeysWithPrefix(c, PREFIX);
      c.disconnect();
    }
  });

  /** A fresh account with `walletUsd` and a developer key. */
  async function account(walletUsd: string | number = 10) {
    const id = `acct_bi_${++n}_${randomBytes(3).toString('hex')}`;
    await gw.gateway.admin.createAccount({ id, walletUsd });
    const { key } = await gw.gateway.admin.createKey({ account: id, kind: 'developer' });
    return { id, key, client: new OpenAI({ baseURL: gw.baseURL, apiKey: key, maxRetries: 0 }) };
  }

  /** The account's charges: its ledger without the credits (the opening balance, top-ups). */
  async function charges(accountId: string): Promise<LedgerEntry[]> {
    return (await gw.stores.billing.ledger(accountId)).filter((e) => e.units.kind !== 'credit');
  }

  async function settledEntries(accountId: string, count = 1): Promise<LedgerEntry[]> {
    let entries: LedgerEntry[] = [];
    await eventually(async () => (entries = await charges(accountId)).length >= count, `${count} ledger entries`);
    return entries;
  }

  async function expectBalanced(accountId: string, walletUsd: number) {
    const entries = await charges(accountId);
    const debited = entries.reduce((s, e) => s + e.cost, 0n);
    const w = await gw.stores.billing.wallet(accountId);
    expect(w.balance).toBe(BigInt(walletUsd) * 1_000_000_000n - debited);
    // Every wallet change is an entry: the balance is minus the whole ledger's sum.
    expect(w.balance).toBe(-(await gw.stores.billing.ledger(accountId)).reduce((s, e) => s + e.cost, 0n));
    expect(w.held).toBe(0n);
    expect(await gw.stores.billing.openHolds(accountId)).toBe(0);
  }

  describe.runIf(enabled)('1. every kind of streamed output is billed when the client hangs up before usage', () => {
    const kinds: Array<[string, Record<string, unknown>[], string, number?]> = [
      [
        'legacy function_call arguments',
        [
          { role: 'assistant', function_call: { name: 'lookup_weather', arguments: '' } },
          { function_call: { arguments: '{"city": "Reykjavik", "unit": "celsius", "days": 7}' } },
        ],
        'lookup_weather{"city": "Reykjavik", "unit": "celsius", "days": 7}',
      ],
      [
        'a refusal',
        [{ role: 'assistant', refusal: "I'm sorry, " }, { refusal: 'but I cannot help with that request at all.' }],
        "I'm sorry, but I cannot help with that request at all.",
      ],
      [
        'audio (its transcript)',
        [
          { role: 'assistant', audio: { id: 'audio_1', transcript: 'Once upon a time, ' } },
          { audio: { data: 'UklGRg==', transcript: 'there was a gateway that billed every word.' } },
        ],
        'Once upon a time, there was a gateway that billed every word.',
        // The audio itself counts by its size too: 8 bytes of base64, 2 tokens.
        2,
      ],
    ];
    it.each(kinds)('%s', async (_kind, deltas, producedText, mediaTokens = 0) => {
      const a = await account();
      up.setBehavior(endlessStream(deltas));
      const before = up.requests.length;
      const ac = new AbortController();
      const res = await postChat(gw.baseURL, a.key, { model: MODEL, stream: true, messages: [{ role: 'user', content: 'go' }] }, { signal: ac.signal });
      expect(res.status).toBe(200);
      // Read until every produced chunk arrived, then hang up before any usage could come.
      const reader = res.body!.getReader();
      let text = '';
      while (sseData(text).length < deltas.length) {
        const { value, done } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString('utf8');
      }
      ac.abort();
      await up.requests[before]!.closed;
      const [entry] = await settledEntries(a.id);
      const tokenizer = await loadTokenizer();
      const completion = tokenizer.count(producedText) + mediaTokens;
      expect(completion).toBeGreaterThan(5);
      expect(entry!.units).toMatchObject({ kind: 'tokens', completion });
      expect(entry!.measured).toBe('tokenizer');
      expect(entry!.cost).toBe(chatCost((entry!.units as { prompt: number }).prompt, completion));
      await expectBalanced(a.id, 10);
    });
  });

  describe.runIf(enabled)('2. legacy functions count in the hold like tools', () => {
    // About 5,000 tokens: inside the model's context window (a 900 KB one is refused by that
    // check before any hold), far past what $0.01 holds after the output.
    const big = 'word '.repeat(5_000);
    for (const field of ['functions', 'tools'] as const) {
      it(`a 25 KB \`${field}\` payload is refused by a $0.01 wallet, and nothing reaches the upstream`, async () => {
        const a = await account('0.01');
        const before = up.requests.length;
        const definition =
          field === 'functions'
            ? [{ name: 'f', description: big, parameters: { type: 'object' } }]
            : [{ type: 'function', function: { name: 'f', description: big, parameters: { type: 'object' } } }];
        const res = await postChat(gw.baseURL, a.key, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], [field]: definition });
        expect(res.status).toBe(402);
        const body = (await res.json()) as { error: { code: string } };
        expect(body.error.code).toBe('insufficient_quota');
        expect(up.requests.length).toBe(before);
      });
    }
  });

  it.runIf(enabled)('3. image parts hold the model’s per-part maximum, and the upstream’s prompt count is debited in full', async () => {
    const a = await account();
    up.setBehavior({ kind: 'json', content: 'A cat.', usage: { prompt_tokens: 15_300, completion_tokens: 4 } });
    const parts = Array.from({ length: 20 }, (_, i) => ({ type: 'image_url' as const, image_url: { url: `https://img.example/${i}.png` } }));
    const answer = await a.client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is in these?' }, ...parts] }],
      max_tokens: 50,
    });
    expect(answer.choices[0]?.message.content).toBe('A cat.');
    const [entry] = await settledEntries(a.id);
    expect(entry!.cost).toBe(chatCost(15_300, 4));
    expect(entry!.measured).toBe('usage');
    // 20 parts at 1,500 tokens each were held: the upstream's count fits in the hold.
    expect(entry!.held >= chatCost(20 * 1_500, 50)).toBe(true);
    expect(entry!.exceededHold).toBe(false);
    await expectBalanced(a.id, 10);
  });

  it.runIf(enabled)('3b. usage past the hold is still debited in full, marked exceeded_hold', async () => {
    const a = await account();
    up.setBehavior({ kind: 'json', content: 'Long.', usage: { prompt_tokens: 40_000, completion_tokens: 9_000 } });
    await a.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 });
    const [entry] = await settledEntries(a.id);
    expect(entry!.cost).toBe(chatCost(40_000, 9_000));
    expect(entry!.exceededHold).toBe(true);
    expect(entry!.cost > entry!.held).toBe(true);
    await expectBalanced(a.id, 10);
  });

  it.runIf(enabled)('4. max_tokens: 1 beside max_completion_tokens: 1000 holds for 1,000 output tokens', async () => {
    const a = await account();
    up.setBehavior({ kind: 'json', content: 'many words', usage: { prompt_tokens: 9, completion_tokens: 1_000 } });
    const messages = [{ role: 'user' as const, content: 'Write a lot.' }];
    await a.client.chat.completions.create({ model: MODEL, messages, max_tokens: 1, max_completion_tokens: 1_000 });
    const [entry] = await settledEntries(a.id);
    expect(entry!.held).toBe(chatCost(promptBound(messages), 1_000));
    expect(entry!.cost).toBe(chatCost(9, 1_000));
    expect(entry!.exceededHold).toBe(false);
  });

  describe.runIf(enabled)('5. the media tier is the highest any size-setting field implies', () => {
    it('an image with resolution 480P and size 1920x1080 is billed at 1080P', async () => {
      const a = await account();
      const img = await a.client.images.generate({ model: IMAGE, prompt: 'a lighthouse', size: '1920x1080' as '1024x1024', resolution: '480P' } as never);
      expect(img.data?.length).toBe(1);
      const [entry] = await settledEntries(a.id);
      expect(entry!.units).toEqual({ kind: 'images', images: 1, tier: '1080P' });
      expect(entry!.cost).toBe(imageCost('1080P'));
    });

    it('a video in mode "fast" with a 1080p size is billed at 1080P; with a 4K size the model does not price, 400 naming size', async () => {
      const a = await account();
      const before = media.requests.length;
      const bad = await fetch(`${gw.baseURL}/videos`, {
        method: 'POST',
        headers: { authorization: `Bearer ${a.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: VIDEO, prompt: 'waves', seconds: 4, mode: 'fast', size: '3840x2160' }),
      });
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as { error: { param: string } }).error.param).toBe('size');
      expect(media.requests.length).toBe(before);

      const job = await a.client.videos.create({ model: VIDEO, prompt: 'waves', seconds: '4', size: '1920x1080', mode: 'fast' } as never);
      const upstreamJob = media.videos().at(-1)!;
      media.finishVideo(upstreamJob.id);
      const [entry] = await settledEntries(a.id);
      expect(job.id).toBe(entry!.id);
      expect(entry!.units).toEqual({ kind: 'seconds', seconds: 4, tier: '1080P' });
      expect(entry!.cost).toBe(videoCost('1080P', 4));
    });
  });

  it.runIf(enabled)('5b. a streamed image request, or a size of 0, is 400 naming the field, and nothing reaches the upstream', async () => {
    const a = await account();
    const before = media.requests.length;
    const post = (body: Record<string, unknown>) =>
      fetch(`${gw.baseURL}/images/generations`, { method: 'POST', headers: { authorization: `Bearer ${a.key}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: IMAGE, prompt: 'a lighthouse', ...body }) });
    for (const [body, param] of [
      [{ stream: true }, 'stream'],
      [{ stream: true, partial_images: 2 }, 'stream'],
      [{ partial_images: 1 }, 'partial_images'],
      [{ size: '0x0' }, 'size'],
      [{ size: '1024x0' }, 'size'],
    ] as const) {
      const r = await post(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(((await r.json()) as { error: { param: string } }).error.param, JSON.stringify(body)).toBe(param);
    }
    expect(media.requests.length).toBe(before);
    expect(await charges(a.id)).toEqual([]);
    // stream: false is what the SDK may send: taken.
    expect((await post({ stream: false })).status).toBe(200);
  });

  it.runIf(enabled)('6. a duplicate multipart field is 400 naming it, and nothing reaches the upstream', async () => {
    const a = await account();
    const before = media.requests.length;
    const form = new FormData();
    form.append('model', VIDEO);
    form.append('prompt', 'a long film');
    form.append('seconds', '120');
    form.append('seconds', '1');
    const res = await fetch(`${gw.baseURL}/videos`, { method: 'POST', headers: { authorization: `Bearer ${a.key}` }, body: form });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; param: string } };
    expect(body.error).toMatchObject({ code: 'invalid_request', param: 'seconds' });
    expect(media.requests.length).toBe(before);
    expect(await charges(a.id)).toEqual([]);
  });

  it.runIf(enabled)('7. speech bills its instructions as well as its input', async () => {
    const a = await account();
    const input = 'Welcome to the gateway.';
    const instructions = 'Speak slowly, warmly and with great care. '.repeat(95).slice(0, 4_000);
    const res = await a.client.audio.speech.create({ model: AUDIO, input, voice: 'alloy', instructions });
    expect((await res.arrayBuffer()).byteLength).toBeGreaterThan(0);
    const [entry] = await settledEntries(a.id);
    const tokenizer = await loadTokenizer();
    const tokens = tokenizer.count(input) + tokenizer.count(instructions);
    expect(tokens).toBeGreaterThan(500);
    expect(entry!.units).toEqual({ kind: 'speech_tokens', tokens });
    expect(entry!.cost).toBe(cost(parsePrice(SPEECH_PRICE), tokens));
  });

  it.runIf(enabled)('9a. a settle the store refuses is kept and lands once the store is back', async () => {
    const a = await account();
    up.setBehavior({ kind: 'json', content: 'ok', usage: { prompt_tokens: 100, completion_tokens: 50 } });
    injected.setDown(true);
    try {
      const answer = await a.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
      expect(answer.choices[0]?.message.content).toBe('ok');
      await eventually(() => injected.failedSettles() >= 2, 'the settle to be retried while the store is down');
      expect(await charges(a.id)).toEqual([]);
    } finally {
      injected.setDown(false);
    }
    const [entry] = await settledEntries(a.id);
    expect(entry!.cost).toBe(chatCost(100, 50));
    await expectBalanced(a.id, 10);
  });

  it.runIf(enabled)('9b. a stream that outlives the hold’s TTL keeps its hold and is billed in full', async () => {
    const a = await account();
    up.setBehavior({ kind: 'stream', chunks: Array.from({ length: 8 }, (_, i) => `part ${i} `), delayMs: 250, usageCounts: { prompt_tokens: 12, completion_tokens: 8 } });
    const stream = await a.client.chat.completions.create({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'slowly' }] });
    let seen = 0;
    let heldLate = -1;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) seen++;
      // Well past the 600 ms TTL the hold is still open.
      if (seen === 6) heldLate = await gw.stores.billing.openHolds(a.id);
    }
    expect(heldLate).toBe(1);
    const [entry] = await settledEntries(a.id);
    expect(entry!.cost).toBe(chatCost(12, 8));
    expect(entry!.held > 0n).toBe(true);
    await expectBalanced(a.id, 10);
  });

  it.runIf(enabled)('an abandoned stream frees its Idempotency-Key at once', async () => {
    const a = await account();
    up.setBehavior({ kind: 'stream', chunks: ['a', 'b', 'c', 'd'], delayMs: 300 });
    const headers = { authorization: `Bearer ${a.key}`, 'content-type': 'application/json', 'idempotency-key': `idem-${randomBytes(4).toString('hex')}` };
    const body = JSON.stringify({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'x' }] });
    const ac = new AbortController();
    const first = await fetch(`${gw.baseURL}/chat/completions`, { method: 'POST', headers, body, signal: ac.signal });
    const reader = first.body!.getReader();
    await reader.read();
    ac.abort();
    up.setBehavior({ kind: 'stream', chunks: ['again'] });
    await eventually(async () => (await gw.stores.billing.openHolds(a.id)) === 0, 'the abandoned call to end');
    // Within moments (not the 10-minute lock), a retry with the same key runs.
    let retry: Response | undefined;
    await eventually(async () => {
      retry = await fetch(`${gw.baseURL}/chat/completions`, { method: 'POST', headers, body });
      if (retry.status === 409) await retry.text();
      return retry.status !== 409;
    }, 'the key to be free', 2_000);
    expect(retry!.status).toBe(200);
    expect(sseData(await retry!.text()).at(-1)).toBe('[DONE]');
  });

  it.runIf(enabled)('a streamed chunk that echoes the upstream key reaches the client redacted', async () => {
    const a = await account();
    up.setBehavior({ kind: 'stream', chunks: ['your key is ', UPSTREAM_API_KEY, ' ok'] });
    const res = await postChat(gw.baseURL, a.key, { model: MODEL, stream: true, messages: [{ role: 'user', content: 'leak it' }] });
    const text = await res.text();
    expect(text).not.toContain(UPSTREAM_API_KEY);
    expect(text).toContain('[redacted]');
    expect(sseData(text).at(-1)).toBe('[DONE]');
  });
});
