/**
 * Routing across upstreams: a model with several targets is served by the next one when the
 * first fails (500, reset, hang, 429 with Retry-After), billed once, naming the target that
 * served; nothing is retried once a byte went to the client; equal-priority targets share the
 * calls by weight; one account's failing requests never open the circuit for the others; an
 * upstream's extra headers and query parameters reach it.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { GatewayOptions } from '../../src/index.js';
import { parseOptions } from '../../src/options.js';
import { createBreaker } from '../../src/upstream/breaker.js';
import { orderTargets } from '../../src/upstream/call.js';
import { chatCost, chargesOf } from '../helpers/billing.js';
import { eventually, postChat, type RunningGateway, sseData, startGateway, testConfig, testKey } from '../helpers/gateway.js';
import { VIDEO_TIERS } from '../helpers/media.js';
import { startMediaUpstream } from '../helpers/media-upstream.js';
import { type Behavior, startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const ROUTED = 'route/chat';
const BALANCED = 'route/balanced';

let a: TestUpstream;
let b: TestUpstream;
let c: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let account: string;

/** A reset: the upstream closes the connection without answering. */
const reset: Behavior = { kind: 'custom', handle: (req) => void req.socket.destroy() };
/** 429 with a Retry-After of `seconds`. */
const busy = (seconds: string): Behavior => ({
  kind: 'custom',
  handle(_req: IncomingMessage, res: ServerResponse) {
    res.writeHead(429, { 'content-type': 'application/json', 'retry-after': seconds });
    res.end(JSON.stringify({ error: { message: 'slow down', type: 'rate_limit_error', code: 'rate_limited' } }));
  },
});

beforeAll(async () => {
  [a, b, c] = await Promise.all([startTestUpstream(), startTestUpstream(), startTestUpstream()]);
  const setup = testConfig({
    upstreamUrl: a.url,
    models: [
      {
        id: ROUTED,
        type: 'text',
        pricing: { prompt: '0.000001', completion: '0.000002' },
        targets: [
          { upstream: 'c', upstreamModel: 'c-model', priority: 2 },
          { upstream: 'a', upstreamModel: 'a-model', priority: 0 },
          { upstream: 'b', upstreamModel: 'b-model', priority: 1 },
        ],
      },
      {
        id: BALANCED,
        type: 'text',
        pricing: { prompt: '0.000001', completion: '0.000002' },
        targets: [
          { upstream: 'a', weight: 3 },
          { upstream: 'b', weight: 1 },
        ],
      },
    ],
  });
  devKey = setup.devKey;
  account = setup.account;
  const options: GatewayOptions = {
    ...setup.options,
    upstreams: {
      ...setup.options.upstreams,
      // A short timeout: a hanging upstream is given up on quickly.
      a: { baseUrl: a.url, timeoutMs: 400 },
      b: { baseUrl: b.url, timeoutMs: 2_000 },
      c: { baseUrl: c.url, timeoutMs: 2_000 },
    },
    routing: { retries: 3, backoffMs: 5, maxRetryAfterMs: 1_500 },
  };
  gw = await startGateway(options);
});

afterAll(async () => {
  await gw?.close();
  await Promise.all([a?.close(), b?.close(), c?.close()]);
});

afterEach(() => {
  for (const up of [a, b, c]) {
    up.setBehavior({ kind: 'json' });
    up.requests.length = 0;
  }
});

async function noHoldLeft(): Promise<boolean> {
  const [holds, wallet] = await Promise.all([gw.stores.billing.openHolds(account), gw.stores.billing.wallet(account)]);
  return holds === 0 && wallet.held === 0n;
}

const ledgerIds = async () => new Set((await chargesOf(gw.gateway.admin.ledger(account))).map((e) => e.id));

/** Waits for the call's one ledger entry (the only one not in `before`) and no hold; returns it. */
async function billedOnce(before: Set<string>) {
  await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(account))).length === before.size + 1, 'a ledger entry');
  await eventually(noHoldLeft, 'no hold left');
  // Nothing more arrives afterwards.
  await new Promise((r) => setTimeout(r, 50));
  const ledger = await chargesOf(gw.gateway.admin.ledger(account));
  expect(ledger).toHaveLength(before.size + 1);
  return ledger.find((e) => !before.has(e.id))!;
}

describe('fallbacks and retries', () => {
  it('a plain call: 500 from the first, a reset from the second, served by the third and billed once', async () => {
    const before = await ledgerIds();
    const balance = (await gw.stores.billing.wallet(account)).balance;
    a.setBehavior({ kind: 'error', status: 500, message: 'boom' });
    b.setBehavior(reset);
    c.setBehavior({ kind: 'json', content: 'from c', usage: { prompt_tokens: 11, completion_tokens: 7 } });

    const res = await postChat(gw.baseURL, devKey, { model: ROUTED, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { model: string; choices: Array<{ message: { content: string } }> };
    expect(body.choices[0]!.message.content).toBe('from c');
    expect(body.model).toBe(ROUTED);

    // Each target got the body with its own model name.
    expect(a.requests.map((r) => r.body?.model)).toEqual(['a-model']);
    expect(b.requests.map((r) => r.body?.model)).toEqual(['b-model']);
    expect(c.requests.map((r) => r.body?.model)).toEqual(['c-model']);

    const entry = await billedOnce(before);
    expect(entry.upstream).toBe('c');
    expect(entry.cost).toBe(chatCost(11, 7));
    expect((await gw.stores.billing.wallet(account)).balance).toBe(balance - chatCost(11, 7));
  });

  it('a plain answer that fails after its 200 (reset mid-body, then a body that stalls past the timeout) goes to the next target, billed once', async () => {
    const before = await ledgerIds();
    // a: headers and half a body, then the connection reset; b: headers, then nothing (a's
    // timeout is short, b's is 2 s); c answers.
    a.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"id":"chatcmpl-half","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"par', () => setTimeout(() => res.socket?.destroy(), 20));
      },
    });
    b.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"id":"chatcmpl-stall"');
      },
    });
    c.setBehavior({ kind: 'json', content: 'from c', usage: { prompt_tokens: 11, completion_tokens: 7 } });
    const res = await postChat(gw.baseURL, devKey, { model: ROUTED, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe('from c');
    expect([a.requests.length, b.requests.length, c.requests.length]).toEqual([1, 1, 1]);
    const entry = await billedOnce(before);
    expect(entry.upstream).toBe('c');
    expect(entry.cost).toBe(chatCost(11, 7));
  }, 15_000);

  it('a streamed call: the first hangs (timeout), the second answers 429 with Retry-After, served by the third and billed once', async () => {
    const before = await ledgerIds();
    a.setBehavior({ kind: 'hang' });
    b.setBehavior(busy('1'));
    c.setBehavior({ kind: 'stream', chunks: ['Hel', 'lo'], usageCounts: { prompt_tokens: 11, completion_tokens: 2 } });

    const res = await postChat(gw.baseURL, devKey, { model: ROUTED, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    const events = sseData(await res.text());
    expect(events[events.length - 1]).toBe('[DONE]');
    const text = events
      .filter((d) => d !== '[DONE]')
      .map((d) => (JSON.parse(d) as { choices: Array<{ delta?: { content?: string } }> }).choices[0]?.delta?.content ?? '')
      .join('');
    expect(text).toBe('Hello');
    expect(a.requests).toHaveLength(1);
    expect(b.requests).toHaveLength(1);
    expect(c.requests).toHaveLength(1);
    expect(c.requests[0]!.body?.stream_options).toEqual({ include_usage: true });

    const entry = await billedOnce(before);
    expect(entry.upstream).toBe('c');
    expect(entry.cost).toBe(chatCost(11, 2));
  });

  it("a short Retry-After of a model's only target is waited out, then the call is retried", async () => {
    const one = await startTestUpstream();
    const setup = testConfig({ upstreamUrl: one.url });
    const solo = await startGateway({ ...setup.options, routing: { retries: 2, backoffMs: 5, maxRetryAfterMs: 1_500 } });
    try {
      one.setBehavior((_rec, i) => (i === 0 ? busy('1') : { kind: 'json' }));
      const started = performance.now();
      const res = await postChat(solo.baseURL, setup.devKey, { model: 'test/chat', messages: [{ role: 'user', content: 'hi' }] });
      expect(res.status).toBe(200);
      expect(one.requests).toHaveLength(2);
      // The second attempt waited for the Retry-After (a lower bound: a timer never fires early).
      expect(performance.now() - started).toBeGreaterThanOrEqual(950);

      // A long one is not waited out: the 429 is relayed, nothing is charged.
      one.requests.length = 0;
      one.setBehavior(busy('30'));
      const refused = await postChat(solo.baseURL, setup.devKey, { model: 'test/chat', messages: [{ role: 'user', content: 'hi' }] });
      expect(refused.status).toBe(429);
      expect(refused.headers.get('retry-after')).toBe('30');
      expect(one.requests).toHaveLength(1);
      await eventually(async () => (await solo.stores.billing.openHolds(setup.account)) === 0, 'no hold');
      expect(await chargesOf(solo.gateway.admin.ledger(setup.account))).toHaveLength(1);
    } finally {
      await solo.close();
      await one.close();
    }
  });

  it('never retries once the first byte went to the client: a stream cut mid-way ends with an error event, billed once', async () => {
    const before = await ledgerIds();
    a.setBehavior({ kind: 'stream', chunks: ['one ', 'two ', 'three ', 'four'], resetAfter: 2, delayMs: 10 });
    const res = await postChat(gw.baseURL, devKey, { model: ROUTED, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    const events = sseData(await res.text());
    expect(events[events.length - 1]).toBe('[DONE]');
    const last = JSON.parse(events[events.length - 2]!) as { error?: unknown; choices: Array<{ finish_reason: string }> };
    expect(last.error).toBeDefined();
    expect(last.choices[0]!.finish_reason).toBe('error');
    // No other target was tried.
    expect(a.requests).toHaveLength(1);
    expect(b.requests).toHaveLength(0);
    expect(c.requests).toHaveLength(0);
    const entry = await billedOnce(before);
    expect(entry.upstream).toBe('a');
  });
});

describe('limits of retrying', () => {
  it('the retry budget: with every target failing, 1 + retries attempts in priority order, then 502, nothing charged', async () => {
    const before = await ledgerIds();
    for (const up of [a, b, c]) up.setBehavior({ kind: 'error', status: 503 });
    const res = await postChat(gw.baseURL, devKey, { model: ROUTED, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('upstream_error');
    // retries: 3 -> four attempts: a, b, c, then a again.
    expect([a.requests.length, b.requests.length, c.requests.length]).toEqual([2, 1, 1]);
    await eventually(noHoldLeft, 'no hold left');
    expect((await chargesOf(gw.gateway.admin.ledger(account))).length).toBe(before.size);
  });

  it('an upstream that asked for a long Retry-After is not tried again when the attempts cycle back to it', async () => {
    const before = await ledgerIds();
    a.setBehavior(busy('30'));
    for (const up of [b, c]) up.setBehavior({ kind: 'error', status: 503 });
    const res = await postChat(gw.baseURL, devKey, { model: ROUTED, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(502);
    // Four attempts: a (429, 30 s), b, c, then b again, not a.
    expect([a.requests.length, b.requests.length, c.requests.length]).toEqual([1, 2, 1]);
    await eventually(noHoldLeft, 'no hold left');
    expect((await chargesOf(gw.gateway.admin.ledger(account))).length).toBe(before.size);
  });

  it('the deadline: no attempt starts once it has passed (the first one hung past it)', async () => {
    const up = await startTestUpstream();
    const spare = await startTestUpstream();
    const setup = testConfig({
      models: [
        {
          id: 'route/deadline',
          type: 'text',
          pricing: { prompt: '0.000001', completion: '0.000002' },
          targets: [
            { upstream: 'slow', priority: 0 },
            { upstream: 'spare', priority: 1 },
          ],
        },
      ],
    });
    const dg = await startGateway({
      ...setup.options,
      upstreams: { ...setup.options.upstreams, slow: { baseUrl: up.url, timeoutMs: 300 }, spare: { baseUrl: spare.url } },
      routing: { retries: 3, backoffMs: 5, deadlineMs: 200 },
    });
    try {
      up.setBehavior({ kind: 'hang' });
      const res = await postChat(dg.baseURL, setup.devKey, { model: 'route/deadline', messages: [{ role: 'user', content: 'hi' }] });
      expect(res.status).toBe(504);
      expect(up.requests).toHaveLength(1);
      expect(spare.requests).toHaveLength(0);
    } finally {
      await dg.close();
      await Promise.all([up.close(), spare.close()]);
    }
  });
});

describe('configuration', () => {
  it('a model names exactly one of upstream and targets, and only configured upstreams', () => {
    const upstreams = { x: { baseUrl: 'http://127.0.0.1:1/v1' } };
    const pricing = { prompt: '0.000001', completion: '0.000001' };
    expect(() => parseOptions({ upstreams, models: [{ id: 'm', pricing }] })).toThrow(/exactly one of `upstream` or `targets`/);
    expect(() => parseOptions({ upstreams, models: [{ id: 'm', pricing, upstream: 'x', targets: [{ upstream: 'x' }] }] })).toThrow(
      /exactly one of/,
    );
    expect(() => parseOptions({ upstreams, models: [{ id: 'm', pricing, targets: [{ upstream: 'y' }] }] })).toThrow(
      /models\[0\]\.targets\[0\]\.upstream: no upstream named "y"/,
    );
    const ok = parseOptions({ upstreams, models: [{ id: 'm', pricing, targets: [{ upstream: 'x' }] }] });
    expect(ok.models[0]!.targets).toEqual([{ upstream: 'x', priority: 0, weight: 1 }]);
  });
});

describe('the breaker, on its own', () => {
  it('failures older than the window are forgotten; connection failures alone open it', () => {
    let clock = 0;
    const breaker = createBreaker(() => clock, { threshold: 5, windowMs: 1_000, minAccounts: 3 });
    for (const acct of ['p', 'q', 'r', 'p']) breaker.failure('u', acct);
    clock += 1_001;
    // The four old ones left the window: one new failure does not open it.
    breaker.failure('u', 's');
    expect(breaker.isOpen('u')).toBe(false);
    for (let i = 0; i < 3; i++) breaker.failure('u', 's');
    expect(breaker.isOpen('u')).toBe(false);
    for (let i = 0; i < 5; i++) breaker.failure('v', null);
    expect(breaker.isOpen('v')).toBe(true);
  });
});

describe('load balancing', () => {
  it('orderTargets: a seeded weighted draw puts each target first in proportion to its weight', () => {
    let seed = 42;
    // mulberry32: a small deterministic PRNG.
    const random = () => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    const targets = [
      { upstream: 'x', upstreamModel: 'm', priority: 0, weight: 3 },
      { upstream: 'y', upstreamModel: 'm', priority: 0, weight: 1 },
      { upstream: 'z', upstreamModel: 'm', priority: 1, weight: 100 },
    ];
    let x = 0;
    for (let i = 0; i < 10_000; i++) {
      const order = orderTargets(targets, random);
      if (order[0]!.upstream === 'x') x++;
      // The fallback priority always comes last, whatever its weight.
      expect(order[2]!.upstream).toBe('z');
    }
    expect(Math.abs(x / 10_000 - 0.75)).toBeLessThan(0.02);
  });

  it('1,000 calls to targets weighted 3:1 split within 5% of 75% / 25%', async () => {
    const calls = 1_000;
    for (let i = 0; i < calls; i += 50) {
      const batch = Array.from({ length: 50 }, () =>
        postChat(gw.baseURL, devKey, { model: BALANCED, messages: [{ role: 'user', content: 'hi' }] }).then(async (r) => {
          expect(r.status).toBe(200);
          await r.arrayBuffer();
        }),
      );
      await Promise.all(batch);
    }
    expect(a.requests.length + b.requests.length).toBe(calls);
    expect(Math.abs(a.requests.length / calls - 0.75)).toBeLessThan(0.05);
  }, 60_000);
});

describe('fair circuit breaking', () => {
  it("one account's failing requests leave the model served for others; failures across 3 accounts open it", async () => {
    const up = await startTestUpstream();
    const setup = testConfig({ upstreamUrl: up.url });
    const accounts = ['acct_1', 'acct_2', 'acct_3', 'acct_4'];
    const keys = Object.fromEntries(accounts.map((id) => [id, testKey()]));
    const fair = await startGateway({
      ...setup.options,
      accounts: [...setup.options.accounts!, ...accounts.map((id) => ({ id, walletUsd: 10 }))],
      keys: [...setup.options.keys!, ...accounts.map((id) => ({ key: keys[id]!, account: id, kind: 'developer' as const }))],
      routing: { retries: 0 },
    });
    // The upstream fails the requests that carry "poison" (a request it cannot handle).
    up.setBehavior((rec) =>
      rec.raw.includes('poison') ? { kind: 'error', status: 500, message: 'cannot' } : { kind: 'json' },
    );
    const ask = (id: string, content: string) =>
      postChat(fair.baseURL, keys[id]!, { model: 'test/chat', messages: [{ role: 'user', content }] });
    const status = async () => {
      const res = await fetch(`${fair.baseURL}/models`, { headers: { authorization: `Bearer ${keys.acct_4}` } });
      const list = (await res.json()) as { data: Array<{ id: string; status: string }> };
      return list.data.find((m) => m.id === 'test/chat')!.status;
    };
    try {
      for (let i = 0; i < 12; i++) expect((await ask('acct_1', 'poison')).status).toBe(502);
      expect(await status()).toBe('Active');
      expect((await ask('acct_4', 'hello')).status).toBe(200);

      // The same failures from three accounts: the upstream is failing, not one tenant.
      for (let i = 0; i < 2; i++) {
        for (const id of ['acct_1', 'acct_2', 'acct_3']) await ask(id, 'poison');
      }
      expect(await status()).toBe('Unavailable');
      const refused = await ask('acct_4', 'hello');
      expect(refused.status).toBe(503);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('model_unavailable');
    } finally {
      await fair.close();
      await up.close();
    }
  });

  it('connection failures open the circuit whoever sent the requests', async () => {
    // A port nothing listens on: connections are refused.
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    await new Promise<void>((r) => server.close(() => r()));
    const setup = testConfig({ upstreamUrl: `http://127.0.0.1:${port}/v1` });
    const down = await startGateway({ ...setup.options, routing: { retries: 0 } });
    try {
      for (let i = 0; i < 5; i++) {
        expect((await postChat(down.baseURL, setup.devKey, { model: 'test/chat', messages: [{ role: 'user', content: 'hi' }] })).status).toBe(502);
      }
      const res = await postChat(down.baseURL, setup.devKey, { model: 'test/chat', messages: [{ role: 'user', content: 'hi' }] });
      expect(res.status).toBe(503);
    } finally {
      await down.close();
    }
  });
});

/** A base URL on a port nothing listens on: connections are refused. */
async function closedPortUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((r) => server.close(() => r()));
  return `http://127.0.0.1:${port}/v1`;
}

describe('video jobs', () => {
  it('a job accepted by the fallback is polled and fetched there, and its ledger entry names it', async () => {
    const media = await startMediaUpstream();
    const setup = testConfig({
      models: [
        {
          id: 'route/video',
          type: 'video',
          pricing: { unit: 'second', from: '0.05', tiers: { ...VIDEO_TIERS } },
          targets: [
            { upstream: 'dead', upstreamModel: 'dead-video', priority: 0 },
            { upstream: 'media', upstreamModel: 'media-video', priority: 1 },
          ],
        },
      ],
    });
    const vg = await startGateway({
      ...setup.options,
      upstreams: { ...setup.options.upstreams, dead: { baseUrl: await closedPortUrl() }, media: { baseUrl: media.url } },
      routing: { retries: 2, backoffMs: 5 },
      limits: { ...setup.options.limits, jobPollIntervalMs: 20 },
    });
    const api = (path: string, init: RequestInit = {}) =>
      fetch(`${vg.baseURL}${path}`, { ...init, headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' } });
    try {
      const res = await api('/videos', { method: 'POST', body: JSON.stringify({ model: 'route/video', prompt: 'a dog', seconds: 4, resolution: '720P' }) });
      expect(res.status).toBe(202);
      const job = (await res.json()) as { id: string };
      expect(media.videos()).toHaveLength(1);
      expect(media.videos()[0]!.model).toBe('media-video');
      media.finishVideo(media.videos()[0]!.id);
      await eventually(async () => ((await (await api(`/videos/${job.id}`)).json()) as { status: string }).status === 'completed', 'the job to complete');
      const content = await api(`/videos/${job.id}/content`);
      expect(content.status).toBe(200);
      expect(Buffer.from(await content.arrayBuffer()).equals(media.clip)).toBe(true);
      await eventually(async () => (await chargesOf(vg.gateway.admin.ledger(setup.account))).length === 1, 'a ledger entry');
      const [entry] = await chargesOf(vg.gateway.admin.ledger(setup.account));
      expect(entry!.upstream).toBe('media');
    } finally {
      await vg.close();
      await media.close();
    }
  });
});

describe('upstream options for real providers', () => {
  it("Azure-style: an api-key header and an api-version query parameter reach the upstream, the gateway's key does not", async () => {
    const up = await startTestUpstream();
    const setup = testConfig({ upstreamUrl: up.url });
    const azure = await startGateway({
      ...setup.options,
      upstreams: {
        test: {
          baseUrl: `${up.origin}/openai/deployments/gpt`,
          headers: { 'api-key': 'azure-secret-1', 'anthropic-version': '2023-06-01' },
          query: { 'api-version': '2024-10-21' },
          maxConnections: 4,
        },
      },
    });
    try {
      const res = await postChat(azure.baseURL, setup.devKey, { model: 'test/chat', messages: [{ role: 'user', content: 'hi' }] });
      expect(res.status).toBe(200);
      const rec = up.requests[0]!;
      expect(rec.path).toBe('/openai/deployments/gpt/chat/completions?api-version=2024-10-21');
      expect(rec.headers['api-key']).toBe('azure-secret-1');
      expect(rec.headers['anthropic-version']).toBe('2023-06-01');
      expect(rec.headers.authorization).toBeUndefined();
    } finally {
      await azure.close();
      await up.close();
    }
  });
});
