/**
 * Rate limits end to end: the per-key window across client addresses, the
 * per-IP throttle before auth (spoofed X-Forwarded-For ignored), trusted proxies, the exact
 * sliding window on an injected clock, the openai SDK's RateLimitError, and the rate headers
 * on every authenticated /v1 answer.
 *
 * Real client addresses: the gateway listens on 127.0.0.1 and clients bind their sockets to
 * 127.0.0.1 / 127.0.0.2 / 127.0.0.3 (undici Agent `localAddress`; in undici 7 a
 * `connect.localAddress` is overridden by the client option and has no effect).
 */
import { randomBytes } from 'node:crypto';
import OpenAI, { RateLimitError } from 'openai';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { Gateway } from '../../src/gateway.js';
import { leasePool } from '../../src/jobs/runner.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { createSqliteStores } from '../../src/stores/sqlite/entry.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { Stores } from '../../src/stores/types.js';
import { Redis } from 'ioredis';
import { deleteKeysWithPrefix, REDIS_URL, redisProblem } from '../../bench/redis-util.js';
import { IMAGE, AUDIO, VIDEO, mediaModels } from '../helpers/media.js';
import { ACCOUNT, MODEL, makeGateway, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { chargesOf } from '../helpers/billing.js';

const agents = new Map<string, Agent>();
/** A dispatcher whose sockets leave from `localAddress`. */
function from(localAddress: string): Agent {
  let a = agents.get(localAddress);
  if (!a) agents.set(localAddress, (a = new Agent({ localAddress })));
  return a;
}

interface Answer {
  status: number;
  headers: Headers;
  body: { error?: { code?: string; metadata?: { limit?: string } } } & Record<string, unknown>;
}

/** GET (or POST) over real HTTP from a given local address. */
async function call(
  url: string,
  opts: { key?: string; localAddress?: string; xff?: string; method?: string; body?: unknown } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (opts.key) headers.authorization = `Bearer ${opts.key}`;
  if (opts.xff !== undefined) headers['x-forwarded-for'] = opts.xff;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const res = await undiciFetch(url, {
    method: opts.method ?? 'GET',
    headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    dispatcher: from(opts.localAddress ?? '127.0.0.1'),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers as unknown as Headers, body: text ? JSON.parse(text) : {} };
}

const running: RunningGateway[] = [];
async function serve(input: Parameters<typeof testConfig>[0], extra: { trustProxy?: string[] } = {}) {
  const setup = testConfig(input);
  const gw = await startGateway({ ...setup.options, ...extra });
  running.push(gw);
  return { gw, setup };
}

afterEach(async () => {
  await Promise.all(running.splice(0).map((g) => g.close()));
});
afterAll(async () => {
  await Promise.all([...agents.values()].map((a) => a.close()));
});

/** Checks Retry-After against retry-after-ms: whole seconds, rounded up, 1..59. */
function expectRetryHeaders(headers: Headers): { seconds: number; ms: number } {
  const s = headers.get('retry-after');
  const ms = headers.get('retry-after-ms');
  expect(s).toMatch(/^\d+$/);
  expect(ms).toMatch(/^\d+$/);
  const seconds = Number(s);
  const millis = Number(ms);
  expect(seconds).toBeGreaterThanOrEqual(1);
  expect(seconds).toBeLessThan(60);
  expect(millis).toBeGreaterThanOrEqual(1);
  expect(millis).toBeLessThanOrEqual(60_000);
  expect(seconds).toBe(Math.min(59, Math.max(1, Math.ceil(millis / 1000))));
  return { seconds, ms: millis };
}

describe('per-key rate across client addresses (real sockets)', () => {
  it('130 calls with one key from 3 addresses: exactly 120 accepted, 10 refused with key_requests_per_minute', async () => {
    const { gw, setup } = await serve({ limits: { keyRequestsPerMinute: 120, ipRequestsPerMinute: 60 } });
    const peers = new Map<string, number>();
    gw.server.on('request', (req) => {
      const a = req.socket.remoteAddress ?? '?';
      peers.set(a, (peers.get(a) ?? 0) + 1);
    });
    const addresses = ['127.0.0.1', '127.0.0.2', '127.0.0.3'];
    const start = Date.now();
    const answers = await Promise.all(
      Array.from({ length: 130 }, (_, i) =>
        call(`${gw.baseURL}/models`, { key: setup.devKey, localAddress: addresses[i % 3] }),
      ),
    );
    const end = Date.now();

    // The gateway really saw three peers, 44 / 43 / 43: each under the IP throttle of 60.
    expect(Object.fromEntries(peers)).toEqual({ '127.0.0.1': 44, '127.0.0.2': 43, '127.0.0.3': 43 });

    const ok = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status === 429);
    expect(ok).toHaveLength(120);
    expect(refused).toHaveLength(10);
    for (const r of refused) {
      expect(r.body.error).toMatchObject({ code: 'rate_limit_exceeded', type: 'rate_limit_exceeded' });
      expect(r.body.error?.metadata?.limit).toBe('key_requests_per_minute');
      const { ms } = expectRetryHeaders(r.headers);
      // The oldest counted request was sent after `start`, the refusal came before `end`:
      // it leaves the window between 60 s - (end - start) and 60 s from the refusal.
      expect(ms).toBeGreaterThanOrEqual(60_000 - (end - start) - 1);
      expect(r.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      expect(r.headers.get('ratelimit-policy')).toBe('"key";q=120;w=60');
    }
    // Remaining counts 119..0 were each handed out exactly once.
    const remaining = ok.map((a) => Number(a.headers.get('x-ratelimit-remaining-requests'))).sort((a, b) => a - b);
    expect(remaining).toEqual(Array.from({ length: 120 }, (_, i) => i));
  });
});

describe('per-IP throttle (default 60 per minute), before auth', () => {
  it('one address, mixed keys and no key, spoofed X-Forwarded-For: the 61st request is refused', async () => {
    const k2 = testKey();
    const k3 = testKey();
    const { gw, setup } = await serve({
      limits: { keyRequestsPerMinute: 120, ipRequestsPerMinute: 60 },
      keys: [
        { key: k2, account: 'acct_test', kind: 'developer' },
        { key: k3, account: 'acct_test', kind: 'developer' },
      ],
    });
    const keys = [setup.devKey, k2, k3, undefined];
    const answers: Answer[] = [];
    for (let i = 0; i < 60; i++) {
      // Every request claims to come from somewhere else; nobody is a trusted proxy.
      answers.push(await call(`${gw.baseURL}/models`, { key: keys[i % 4], xff: `203.0.113.${i + 1}` }));
    }
    expect(answers.filter((a) => a.status === 200)).toHaveLength(45);
    expect(answers.filter((a) => a.status === 401)).toHaveLength(15);

    for (const key of [setup.devKey, undefined, k3]) {
      const r = await call(`${gw.baseURL}/models`, { key, xff: '198.51.100.77' });
      expect(r.status).toBe(429);
      expect(r.body.error).toMatchObject({ code: 'rate_limit_exceeded', metadata: { limit: 'ip_requests_per_minute' } });
      expectRetryHeaders(r.headers);
      // Refused before auth: no key was counted, so no key headers.
      expect(r.headers.get('ratelimit-policy')).toBeNull();
      expect(r.headers.get('x-request-id')).toMatch(/^req_/);
    }
    // Unknown /v1 routes are throttled too (the throttle runs before routing).
    expect((await call(`${gw.baseURL}/nope`, { key: setup.devKey })).status).toBe(429);

    // Another address is unaffected, and the key's window counted only its accepted requests:
    // devKey had 15 accepted calls (the refused ones above did not count).
    const other = await call(`${gw.baseURL}/models`, { key: setup.devKey, localAddress: '127.0.0.2' });
    expect(other.status).toBe(200);
    expect(other.headers.get('x-ratelimit-remaining-requests')).toBe(String(120 - 16));
  });
});

describe('trusted proxies', () => {
  it('forwarded clients get separate budgets; the rightmost untrusted hop is the client', async () => {
    const { gw, setup } = await serve({ limits: { ipRequestsPerMinute: 3 } }, { trustProxy: ['127.0.0.1'] });
    const get = (xff?: string, localAddress?: string) =>
      call(`${gw.baseURL}/models`, { key: setup.devKey, xff, localAddress });

    for (let i = 0; i < 3; i++) expect((await get('5.5.5.5')).status).toBe(200);
    const fourth = await get('5.5.5.5');
    expect(fourth.status).toBe(429);
    expect(fourth.body.error?.metadata?.limit).toBe('ip_requests_per_minute');
    // Another forwarded client has its own budget.
    for (let i = 0; i < 3; i++) expect((await get('6.6.6.6')).status).toBe(200);
    expect((await get('6.6.6.6')).status).toBe(429);
    // A client-supplied hop left of 5.5.5.5 changes nothing: 5.5.5.5 is the client.
    expect((await get('9.9.9.9, 5.5.5.5')).status).toBe(429);
    // ...so 9.9.9.9's own budget is untouched.
    expect((await get('9.9.9.9')).status).toBe(200);
    // The proxy itself (no header) is a client of its own.
    expect((await get()).status).toBe(200);

    // An untrusted peer's X-Forwarded-For is ignored: 127.0.0.2 is the client, whatever it claims.
    for (let i = 0; i < 3; i++) expect((await get(`7.7.7.${i}`, '127.0.0.2')).status).toBe(200);
    expect((await get('8.8.8.8', '127.0.0.2')).status).toBe(429);
  });

  it('with the next hop trusted too, the client is further left', async () => {
    const setup = testConfig({ limits: { ipRequestsPerMinute: 3 } });
    const { gateway } = await makeGateway({ ...setup.options, trustProxy: ['127.0.0.1', '5.5.5.5'] });
    try {
      const get = async (xff: string) =>
        gateway.fetch(
          new Request('http://gw.test/v1/models', {
            headers: { authorization: `Bearer ${setup.devKey}`, 'x-forwarded-for': xff },
          }),
          { clientAddress: '127.0.0.1' },
        );
      for (let i = 0; i < 3; i++) expect((await get('9.9.9.9, 5.5.5.5')).status).toBe(200);
      expect((await get('9.9.9.9, 5.5.5.5')).status).toBe(429);
      expect((await get('9.9.9.9')).status).toBe(429); // the same client, 9.9.9.9
      expect((await get('5.5.5.5')).status).toBe(200); // every hop trusted: the leftmost one
    } finally {
      await gateway.dispose();
    }
  });
});

describe('the window rolls (injected clock)', () => {
  const T0 = Date.UTC(2031, 2, 3, 10, 0, 0);
  let clock = T0;
  let gateway: Gateway;
  let devKey: string;

  afterEach(async () => {
    await gateway?.dispose();
  });

  const models = (addr = '192.0.2.1') =>
    gateway.fetch(new Request('http://gw.test/v1/models', { headers: { authorization: `Bearer ${devKey}` } }), {
      clientAddress: addr,
    });
  const batch = async (n: number) => {
    const out: Response[] = [];
    for (let i = 0; i < n; i++) out.push(await models(`192.0.2.${(i % 200) + 1}`));
    return out;
  };

  it('t=0 and t=30 s fill the window, t=45 s is refused with Retry-After 15, t=61 s fits exactly one batch', async () => {
    clock = T0;
    const setup = testConfig({ now: () => clock, limits: { keyRequestsPerMinute: 120, ipRequestsPerMinute: 60 } });
    devKey = setup.devKey;
    ({ gateway } = await makeGateway(setup.options));

    const first = await batch(60);
    expect(first.every((r) => r.status === 200)).toBe(true);
    expect(first[0]!.headers.get('ratelimit')).toBe('"key";r=119;t=60');
    expect(first[59]!.headers.get('ratelimit')).toBe('"key";r=60;t=60');

    clock = T0 + 30_000;
    const second = await batch(60);
    expect(second.every((r) => r.status === 200)).toBe(true);
    expect(second[0]!.headers.get('ratelimit')).toBe('"key";r=59;t=30');
    expect(second[59]!.headers.get('ratelimit')).toBe('"key";r=0;t=30');
    expect(second[59]!.headers.get('x-ratelimit-reset-requests')).toBe('30s');

    clock = T0 + 45_000;
    for (let i = 0; i < 5; i++) {
      const r = await models();
      expect(r.status).toBe(429);
      expect(r.headers.get('retry-after')).toBe('15');
      expect(r.headers.get('retry-after-ms')).toBe('15000');
      expect(r.headers.get('ratelimit')).toBe('"key";r=0;t=15');
      expect(((await r.json()) as Answer['body']).error?.metadata?.limit).toBe('key_requests_per_minute');
    }
    clock = T0 + 59_999;
    const almost = await models();
    expect(almost.status).toBe(429);
    expect(almost.headers.get('retry-after')).toBe('1');
    expect(almost.headers.get('retry-after-ms')).toBe('1');

    // t=61 s: the t=0 batch has left; the refusals at 45 s and 59.999 s were never counted,
    // so exactly 60 fit again, and then the t=30 batch is the oldest (it leaves at 90 s).
    clock = T0 + 61_000;
    const third = await batch(60);
    expect(third.every((r) => r.status === 200)).toBe(true);
    expect(third[59]!.headers.get('ratelimit')).toBe('"key";r=0;t=29');
    const over = await models();
    expect(over.status).toBe(429);
    expect(over.headers.get('retry-after')).toBe('29');
  });

  it('the IP throttle rolls the same way', async () => {
    clock = T0;
    const setup = testConfig({ now: () => clock, limits: { keyRequestsPerMinute: 1000, ipRequestsPerMinute: 60 } });
    devKey = setup.devKey;
    ({ gateway } = await makeGateway(setup.options));
    for (let i = 0; i < 30; i++) expect((await models('198.51.100.5')).status).toBe(200);
    clock = T0 + 20_000;
    for (let i = 0; i < 30; i++) expect((await models('198.51.100.5')).status).toBe(200);
    clock = T0 + 50_000;
    const refused = await models('198.51.100.5');
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('10');
    clock = T0 + 60_000; // exactly 60 s later the t=0 requests no longer count
    for (let i = 0; i < 30; i++) expect((await models('198.51.100.5')).status).toBe(200);
    const next = await models('198.51.100.5');
    expect(next.status).toBe(429);
    expect(next.headers.get('retry-after')).toBe('20');
  });
});

describe('the openai SDK', () => {
  it('gets a RateLimitError carrying retry-after and retry-after-ms', async () => {
    const { gw, setup } = await serve({ limits: { keyRequestsPerMinute: 2 } });
    const client = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
    await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'one' }] });
    await client.models.list();
    let err: unknown;
    try {
      await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'three' }] });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RateLimitError);
    const rl = err as RateLimitError;
    expect(rl.status).toBe(429);
    expect(rl.code).toBe('rate_limit_exceeded');
    expect(rl.type).toBe('rate_limit_exceeded');
    expect((rl.error as { metadata?: unknown }).metadata).toEqual({ limit: 'key_requests_per_minute' });
    expectRetryHeaders(rl.headers);
    expect(rl.headers.get('x-ratelimit-limit-requests')).toBe('2');
    expect(rl.requestID).toMatch(/^req_/);
    // Exactly the two accepted calls reached the gateway's handlers; the third was refused.
    expect(gw.requestCount()).toBe(3);
  });
});

describe('rate headers on every authenticated /v1 answer', () => {
  it('success and error, JSON and streams, text and media', async () => {
    const T = Date.UTC(2031, 5, 1, 8);
    const setup = testConfig({
      now: () => T,
      limits: { keyRequestsPerMinute: 120, ipRequestsPerMinute: 1000 },
      models: mediaModels('test'),
    });
    const { gateway } = await makeGateway(setup.options);
    const bearer = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
    const req = (path: string, init: { method?: string; body?: unknown; key?: string } = {}) =>
      gateway.fetch(
        new Request(`http://gw.test/v1${path}`, {
          method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
          headers: bearer(init.key ?? setup.devKey),
          body: init.body === undefined ? undefined : typeof init.body === 'string' ? init.body : JSON.stringify(init.body),
        }),
        { clientAddress: '192.0.2.10' },
      );
    try {
      const video = await req('/videos', { body: { model: VIDEO, prompt: 'a bike', seconds: 4 } });
      const videoId = ((await video.clone().json()) as { id: string }).id;
      const answers: Array<[string, Response]> = [
        ['video', video],
        ['models', await req('/models')],
        ['models?type=image', await req('/models?type=image')],
        ['key', await req('/key')],
        ['brands', await req('/brands')],
        ['knowledge', await req('/knowledge')],
        ['chat', await req('/chat/completions', { body: { model: MODEL, messages: [{ role: 'user', content: 'hi' }] } })],
        [
          'chat stream',
          await req('/chat/completions', { body: { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] } }),
        ],
        ['image', await req('/images/generations', { body: { model: IMAGE, prompt: 'a bike' } })],
        ['speech', await req('/audio/speech', { body: { model: AUDIO, input: 'hello', voice: 'alloy' } })],
        ['video job', await req(`/videos/${videoId}`)],
        ['image job 404', await req('/images/img_nope')],
        ['400 invalid_json', await req('/chat/completions', { body: '{oops' })],
        ['400 param n', await req('/images/generations', { body: { model: IMAGE, prompt: 'x', n: 11 } })],
        ['404 model', await req('/images/generations', { body: { model: 'nope', prompt: 'x' } })],
        ['403 agent on media', await req('/audio/speech', { key: setup.agentKey, body: { model: AUDIO, input: 'x', voice: 'a' } })],
        ['403 agent model', await req('/chat/completions', { key: setup.agentKey, body: { model: 'other', messages: [] } })],
      ];
      const devRemaining: number[] = [];
      for (const [what, res] of answers) {
        const h = res.headers;
        expect(h.get('ratelimit-policy'), what).toBe('"key";q=120;w=60');
        const m = /^"key";r=(\d+);t=(\d+)$/.exec(h.get('ratelimit') ?? '');
        expect(m, `${what}: ${h.get('ratelimit')}`).not.toBeNull();
        expect(m![2], what).toBe('60'); // the clock stands still: the oldest request leaves in 60 s
        expect(h.get('x-ratelimit-limit-requests'), what).toBe('120');
        expect(h.get('x-ratelimit-remaining-requests'), what).toBe(m![1]);
        expect(h.get('x-ratelimit-reset-requests'), what).toBe('60s');
        expect(h.get('x-request-id'), what).toMatch(/^req_/);
        if (!what.includes('agent')) devRemaining.push(Number(m![1]));
        await res.arrayBuffer();
      }
      // One request, one count: the developer key's remaining count went down by one each time.
      expect(devRemaining).toEqual(Array.from({ length: devRemaining.length }, (_, i) => 119 - i));

      // Unauthenticated answers carry no key headers.
      const anon = await gateway.fetch(new Request('http://gw.test/v1/models'), { clientAddress: '192.0.2.10' });
      expect(anon.status).toBe(401);
      expect(anon.headers.get('ratelimit-policy')).toBeNull();
    } finally {
      await gateway.dispose();
    }
  });
});

/**
 * A billable request's key check is counted in the same store step as its hold (where the
 * stores allow it), yet clients see the order of checks unchanged: the key's 429 comes before
 * any validation, model, in-flight or payment answer, and every request that passed the key
 * check counts once, whatever it was answered. Run on a store that folds the two steps (memory,
 * SQLite) and on one whose limits live apart from the books (two steps).
 */
/** Every Redis key the suite below writes starts with this (a fresh prefix per test under it); deleted after. */
const REDIS_PREFIX = `mglim:${randomBytes(4).toString('hex')}:`;
const redisUp = (await redisProblem(REDIS_URL)) === null;
if (!redisUp && process.env.CI !== 'true') {
  console.warn(`\n!!! SKIPPING the Redis case of the deferred key check: Redis at ${REDIS_URL} is unreachable (under CI=true this fails).\n`);
}
afterAll(async () => {
  if (!redisUp) return;
  const client = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  await deleteKeysWithPrefix(client, REDIS_PREFIX).catch(() => {});
  client.disconnect();
});

describe.each([
  ['memory: hit and hold in one step', (now: () => number) => createMemoryStores({ now })],
  ['sqlite: hit and hold in one transaction', (now: () => number) => createSqliteStores({ path: ':memory:', now })],
  [
    'limits apart from the books: two steps',
    (now: () => number) => ({ ...createMemoryStores({ now }), limits: createMemoryStores({ now }).limits }),
  ],
  // Redis counts by its own clock (TIME), not the injected one; every test here runs well inside one window.
  ...(redisUp || process.env.CI === 'true'
    ? [['redis: hit and hold in one script', () => createRedisStores({ url: REDIS_URL, keyPrefix: `${REDIS_PREFIX}${randomBytes(4).toString('hex')}:` })] as const]
    : []),
] as const)('the key check deferred to the hold (%s)', (_, makeStores) => {
  const T = Date.UTC(2031, 6, 1, 9);
  let gateway: Gateway | undefined;
  let stores: Stores;
  afterEach(async () => {
    await gateway?.dispose();
    await stores?.close();
    gateway = undefined;
  });

  async function start(input: Parameters<typeof testConfig>[0], extra: { metrics?: { path: string } } = {}) {
    const setup = testConfig({ now: () => T, models: mediaModels('test'), ...input });
    stores = makeStores(() => T);
    ({ gateway } = await makeGateway({ ...setup.options, stores, ...extra }));
    const send = (path: string, body?: unknown, headers: Record<string, string> = {}, clientAddress = '192.0.2.20') =>
      gateway!.fetch(
        new Request(`http://gw.test/v1${path}`, {
          method: body === undefined ? 'GET' : 'POST',
          headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json', ...headers },
          body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
        }),
        { clientAddress },
      );
    return { setup, send };
  }
  const chat = { model: MODEL, messages: [{ role: 'user', content: 'hi' }] };
  async function answer(res: Response) {
    const body = (await res.json()) as Answer['body'];
    return { status: res.status, code: body.error?.code, limit: body.error?.metadata?.limit, remaining: res.headers.get('x-ratelimit-remaining-requests') };
  }

  it('refused requests count; a limited key gets 429 before 400 invalid_request, 400 invalid_json and 404 model_not_found', async () => {
    const { send } = await start({ limits: { keyRequestsPerMinute: 4 } });
    expect(await answer(await send('/chat/completions', { model: MODEL }))).toMatchObject({ status: 400, code: 'invalid_request', remaining: '3' });
    expect(await answer(await send('/chat/completions', { ...chat, model: 'nope/nope' }))).toMatchObject({ status: 404, code: 'model_not_found', remaining: '2' });
    expect(await answer(await send('/chat/completions', '{oops'))).toMatchObject({ status: 400, code: 'invalid_json', remaining: '1' });
    const ok = await send('/chat/completions', chat);
    expect(ok.status).toBe(200);
    expect(ok.headers.get('ratelimit')).toBe('"key";r=0;t=60');
    await ok.arrayBuffer();

    for (const body of [{ model: MODEL }, { ...chat, model: 'nope/nope' }, '{oops', chat]) {
      const res = await send('/chat/completions', body);
      expect(await answer(res), JSON.stringify(body)).toMatchObject({ status: 429, code: 'rate_limit_exceeded', limit: 'key_requests_per_minute', remaining: '0' });
      expect(res.headers.get('retry-after')).toBe('59'); // capped at 59
    }
    expect(await answer(await send('/embeddings', { model: MODEL }))).toMatchObject({ status: 429, limit: 'key_requests_per_minute' });
    expect(await answer(await send('/audio/speech', { model: AUDIO }))).toMatchObject({ status: 429, limit: 'key_requests_per_minute' });
    expect(await answer(await send('/models'))).toMatchObject({ status: 429, limit: 'key_requests_per_minute' });
    // Only the one accepted call was billed, and no hold was left behind by the refusals.
    expect(await chargesOf(stores.billing.ledger(ACCOUNT))).toHaveLength(1);
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
  });

  it('a call the wallet refuses (402) counts and carries the rate headers; a limited key gets 429, not 402', async () => {
    const { send } = await start({ walletUsd: 0, limits: { keyRequestsPerMinute: 2 } });
    const first = await send('/chat/completions', chat);
    expect(first.headers.get('x-should-retry')).toBe('false');
    expect(await answer(first)).toMatchObject({ status: 402, code: 'insufficient_quota', remaining: '1' });
    expect(await answer(await send('/chat/completions', { ...chat, stream: true }))).toMatchObject({ status: 402, remaining: '0' });
    expect(await answer(await send('/chat/completions', chat))).toMatchObject({ status: 429, limit: 'key_requests_per_minute' });
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
  });

  it('a replayed Idempotency-Key answer counts like any request, and a limited key gets 429 instead of the replay', async () => {
    const { send } = await start({ limits: { keyRequestsPerMinute: 2 } });
    const first = await send('/chat/completions', chat, { 'idempotency-key': 'k-1' });
    expect(first.status).toBe(200);
    const text = await first.text();
    const replay = await send('/chat/completions', chat, { 'idempotency-key': 'k-1' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(await replay.text()).toBe(text);
    expect(await answer(await send('/chat/completions', chat, { 'idempotency-key': 'k-1' }))).toMatchObject({ status: 429, limit: 'key_requests_per_minute' });
    expect(await chargesOf(stores.billing.ledger(ACCOUNT))).toHaveLength(1);
  });

  it('a billed call counts its key once and reaches the store in as few steps as the stores allow (metrics wrap them)', async () => {
    const { send: sendAny } = await start({ limits: { keyRequestsPerMinute: 5 } }, { metrics: { path: '/metrics' } });
    const send = async (path: string, body?: unknown) => {
      const res = await sendAny(path, body);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      return res;
    };
    const counts = async () => {
      const text = await (await gateway!.fetch(new Request('http://gw.test/metrics'))).text();
      const calls = (op: string) => Number(new RegExp(`store_call_seconds_count\\{operation="${op}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
      // A window hit is `limits.hit`, or `limits.hitNow` on a store that counts in memory.
      return { hitAndPlaceHold: calls('billing.hitAndPlaceHold'), placeHold: calls('billing.placeHold'), hits: calls('limits.hit') + calls('limits.hitNow') };
    };
    // The key is looked up once, by a first request; the billed call finds it cached.
    await send('/models');
    const before = await counts();
    const res = await send('/chat/completions', chat);
    expect(res.headers.get('x-ratelimit-remaining-requests')).toBe('3');
    const after = await counts();
    const folded = stores.billing.windowsId !== undefined && stores.billing.windowsId === stores.limits.windowsId;
    expect({
      hitAndPlaceHold: after.hitAndPlaceHold - before.hitAndPlaceHold,
      placeHold: after.placeHold - before.placeHold,
      hits: after.hits - before.hits,
    }).toEqual(folded ? { hitAndPlaceHold: 1, placeHold: 0, hits: 1 } : { hitAndPlaceHold: 0, placeHold: 1, hits: 2 });
  });

  it('the IP check still comes first: an IP over its limit gets 429 whatever else it would get, counts nothing against the key and holds nothing', async () => {
    const { send } = await start({ limits: { keyRequestsPerMinute: 10, ipRequestsPerMinute: 3 } });
    const ok = await send('/chat/completions', chat);
    expect(ok.status).toBe(200);
    await ok.arrayBuffer();
    expect(await answer(await send('/chat/completions', { model: MODEL }))).toMatchObject({ status: 400, remaining: '8' });
    expect(await answer(await send('/chat/completions', { ...chat, model: 'nope/nope' }))).toMatchObject({ status: 404, remaining: '7' });
    // A key nobody has: looked up in the store only once the IP is let through.
    const lookups: string[] = [];
    const find = stores.keys.findByDigest.bind(stores.keys);
    stores.keys.findByDigest = (digest) => {
      lookups.push(digest);
      return find(digest);
    };
    const stranger = { authorization: `Bearer ${testKey()}` };
    for (const [body, headers] of [[chat, {}], [{ model: MODEL }, {}], ['{oops', {}], [{ ...chat, stream: true }, {}], [chat, stranger], [chat, { authorization: '' }]] as const) {
      const res = await send('/chat/completions', body, headers);
      expect(await answer(res), JSON.stringify([body, headers])).toMatchObject({ status: 429, code: 'rate_limit_exceeded', limit: 'ip_requests_per_minute' });
      // Refused before the key was counted: no key headers.
      expect(res.headers.get('ratelimit-policy')).toBeNull();
    }
    expect(lookups).toEqual([]);
    // Another address: the stranger's key is looked up (and refused), and the developer key's
    // window counted only the three requests its IP let through.
    expect((await send('/chat/completions', chat, stranger, '192.0.2.99')).status).toBe(401);
    expect(lookups).toHaveLength(1);
    const other = await send('/chat/completions', chat, {}, '192.0.2.98');
    expect(other.status).toBe(200);
    expect(other.headers.get('x-ratelimit-remaining-requests')).toBe('6');
    await other.arrayBuffer();
    expect(await chargesOf(stores.billing.ledger(ACCOUNT))).toHaveLength(2);
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
  });

  it('the key check comes before the in-flight cap, and a limited key never takes a slot', async () => {
    const { send } = await start({ limits: { keyRequestsPerMinute: 2, inFlightImageJobs: 1 } });
    const pool = leasePool('image', ACCOUNT);
    expect(await stores.limits.acquireLease(pool, 1, 'busy', 60_000)).toBe(true);
    expect(await answer(await send('/images/generations', { model: IMAGE, prompt: 'a bike' }))).toMatchObject({ status: 429, limit: 'in_flight_image_jobs', remaining: '1' });
    await stores.limits.releaseLease(pool, 'busy');
    const ok = await send('/images/generations', { model: IMAGE, prompt: 'a bike' });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    await ok.arrayBuffer();
    expect(await stores.limits.acquireLease(pool, 1, 'busy', 60_000)).toBe(true);
    expect(await answer(await send('/images/generations', { model: IMAGE, prompt: 'a bike' }))).toMatchObject({ status: 429, limit: 'key_requests_per_minute' });
    expect(await answer(await send('/videos', { model: VIDEO, prompt: 'a bike', seconds: 4 }))).toMatchObject({ status: 429, limit: 'key_requests_per_minute' });
    expect(await stores.limits.activeLeases(pool)).toBe(1);
    expect(await stores.limits.activeLeases(leasePool('video', ACCOUNT))).toBe(0);
  });
});
