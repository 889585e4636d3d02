/**
 * Idempotency-Key on billable POSTs (Stripe's semantics, scoped per API key): a replay never
 * reaches the upstream twice nor charges twice.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { deleteKeysWithPrefix, REDIS_URL, redisProblem } from '../../bench/redis-util.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, eventually, MODEL, postChat, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';
import { chargesOf } from '../helpers/billing.js';

let upstream: TestUpstream;
let gw: RunningGateway;
let devKey: string;
const secondKey = testKey();

beforeAll(async () => {
  upstream = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: upstream.url, keys: [{ key: secondKey, account: ACCOUNT, kind: 'developer' }] });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

beforeEach(() => upstream.setBehavior({ kind: 'json', content: 'first answer' }));

const body = { model: MODEL, messages: [{ role: 'user', content: 'charge me once' }] };
const withKey = (k: string) => ({ headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json', 'idempotency-key': k } });
const ledgerSize = async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;

describe('Idempotency-Key', () => {
  it('the same key and body replays the first answer without a second upstream call or charge', async () => {
    const idem = `idem-${Math.random()}`;
    const calls = upstream.requests.length;
    const ledger = await ledgerSize();
    const first = await postChat(gw.baseURL, devKey, body, withKey(idem));
    const firstText = await first.text();
    expect(first.status).toBe(200);
    upstream.setBehavior({ kind: 'json', content: 'a different answer' });
    const second = await postChat(gw.baseURL, devKey, body, withKey(idem));
    expect(second.status).toBe(200);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.headers.get('x-request-id')).toMatch(/^req_/);
    expect(await second.text()).toBe(firstText);
    expect(upstream.requests.length - calls).toBe(1);
    expect((await ledgerSize()) - ledger).toBe(1);
  });

  it('the same key with a different body is 422; nothing reaches the upstream', async () => {
    const idem = `idem-${Math.random()}`;
    expect((await postChat(gw.baseURL, devKey, body, withKey(idem))).status).toBe(200);
    const calls = upstream.requests.length;
    const res = await postChat(gw.baseURL, devKey, { ...body, temperature: 0.5 }, withKey(idem));
    expect(res.status).toBe(422);
    const err = (await res.json()) as { error: { code: string; param: string } };
    expect(err.error.code).toBe('idempotency_mismatch');
    expect(err.error.param).toBe('Idempotency-Key');
    expect(upstream.requests.length).toBe(calls);
  });

  it('a duplicate while the first is in flight is 409', async () => {
    const idem = `idem-${Math.random()}`;
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    upstream.setBehavior({ kind: 'json', content: 'slow', gate });
    const first = postChat(gw.baseURL, devKey, body, withKey(idem));
    await upstream.waitForRequests(upstream.requests.length + 1);
    const dup = await postChat(gw.baseURL, devKey, body, withKey(idem));
    expect(dup.status).toBe(409);
    expect(((await dup.json()) as { error: { code: string } }).error.code).toBe('idempotency_conflict');
    open();
    expect((await first).status).toBe(200);
  });

  it('keys are scoped per API key', async () => {
    const idem = `idem-${Math.random()}`;
    const calls = upstream.requests.length;
    expect((await postChat(gw.baseURL, devKey, body, withKey(idem))).status).toBe(200);
    const other = await fetch(`${gw.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secondKey}`, 'content-type': 'application/json', 'idempotency-key': idem },
      body: JSON.stringify(body),
    });
    expect(other.status).toBe(200);
    expect(other.headers.get('idempotent-replayed')).toBeNull();
    expect(upstream.requests.length - calls).toBe(2);
  });

  it('a streamed answer is replayed byte for byte', async () => {
    const idem = `idem-${Math.random()}`;
    upstream.setBehavior({ kind: 'stream', chunks: ['Hel', 'lo', '!'] });
    const streamBody = { ...body, stream: true };
    const first = await postChat(gw.baseURL, devKey, streamBody, withKey(idem));
    const firstText = await first.text();
    expect(firstText).toContain('data: [DONE]');
    const calls = upstream.requests.length;
    const second = await postChat(gw.baseURL, devKey, streamBody, withKey(idem));
    expect(second.headers.get('content-type')).toMatch(/text\/event-stream/);
    expect(await second.text()).toBe(firstText);
    expect(upstream.requests.length).toBe(calls);
  });

  it('a failed request is not kept: the same key runs again', async () => {
    const idem = `idem-${Math.random()}`;
    upstream.setBehavior({ kind: 'error', status: 500 });
    expect((await postChat(gw.baseURL, devKey, body, withKey(idem))).status).toBe(502);
    upstream.setBehavior({ kind: 'json', content: 'recovered' });
    const retry = await postChat(gw.baseURL, devKey, body, withKey(idem));
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
  });

  it('a stream that failed after its 200 (an error event, not [DONE]) is not kept: the same key runs again', async () => {
    const idem = `idem-${Math.random()}`;
    const streamBody = { ...body, stream: true };
    upstream.setBehavior({ kind: 'stream', chunks: ['a', 'b', 'c', 'd'], resetAfter: 2 });
    const first = await postChat(gw.baseURL, devKey, streamBody, withKey(idem));
    expect(first.status).toBe(200);
    expect(await first.text()).toContain('"finish_reason":"error"');
    upstream.setBehavior({ kind: 'stream', chunks: ['whole'] });
    const calls = upstream.requests.length;
    const retry = await postChat(gw.baseURL, devKey, streamBody, withKey(idem));
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await retry.text()).toContain('whole');
    expect(upstream.requests.length).toBe(calls + 1);
  });

  it("an upstream's own failed Responses answer (response.failed), streamed or plain, is not kept: the same key runs again", async () => {
    const failed = { id: 'resp_1', object: 'response', status: 'failed', model: 'm', output: [], error: { code: 'server_error', message: 'The model failed' }, usage: null };
    for (const stream of [true, false]) {
      const idem = `idem-${Math.random()}`;
      upstream.setBehavior({
        kind: 'custom',
        handle(_req, res) {
          if (!stream) {
            res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(failed));
            return;
          }
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.end([{ type: 'response.created', sequence_number: 0, response: { ...failed, status: 'in_progress', error: null } }, { type: 'response.failed', sequence_number: 1, response: failed }].map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join(''));
        },
      });
      const send = () =>
        fetch(`${gw.baseURL}/responses`, { method: 'POST', ...withKey(idem), body: JSON.stringify({ model: MODEL, input: 'hi', stream }) });
      const first = await send();
      expect(first.status).toBe(200);
      expect(await first.text()).toContain('failed');
      const calls = upstream.requests.length;
      const retry = await send();
      await retry.text();
      expect(retry.headers.get('idempotent-replayed'), `stream: ${stream}`).toBeNull();
      expect(upstream.requests.length, `stream: ${stream}`).toBe(calls + 1);
    }
  });

  it('a malformed key is 400 naming the header', async () => {
    const res = await postChat(gw.baseURL, devKey, body, withKey('has spaces in it'));
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe('Idempotency-Key');
  });
});

const redisUp = (await redisProblem(REDIS_URL)) === null;
const needRedis = redisUp || process.env.CI === 'true';
if (!needRedis) console.warn(`\n!!! SKIPPING the Redis Idempotency-Key renewal test: Redis at ${REDIS_URL} is unreachable (under CI=true this fails).\n`);
const PREFIX = `mgidem:${randomBytes(4).toString('hex')}:`;
afterAll(async () => {
  if (!redisUp) return;
  const c = new Redis(REDIS_URL);
  await deleteKeysWithPrefix(c, PREFIX);
  c.disconnect();
});

/** A short in-flight marker TTL, so a call can outlive it many times over within a test. */
const LOCK_TTL_MS = 300;

describe.each([
  ['memory', true, (): Stores => createMemoryStores()],
  ['redis', needRedis, (): Stores => createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX })],
] as const)('%s: an Idempotency-Key protects a call longer than its lock TTL', (_name, enabled, makeStores) => {
  it.runIf(enabled)('a retry during a stream that outlived the TTL several times is 409, with no second upstream call', async () => {
    const setup = testConfig({ upstreamUrl: upstream.url, limits: { idempotencyLockTtlMs: LOCK_TTL_MS } });
    const long = await startGateway({ ...setup.options, stores: makeStores() });
    try {
      const idem = `idem-${Math.random()}`;
      const headers = { headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json', 'idempotency-key': idem } };
      const streamBody = { ...body, stream: true };
      // 16 chunks 100 ms apart: the stream runs about 1.6 s, more than five lock TTLs.
      upstream.setBehavior({ kind: 'stream', chunks: Array.from({ length: 16 }, (_, i) => `w${i} `), delayMs: 100 });
      const calls = upstream.requests.length;
      const first = await postChat(long.baseURL, setup.devKey, streamBody, headers);
      expect(first.status).toBe(200);
      const firstText = first.text();
      const rec = upstream.requests.at(-1)!;
      // Past three TTLs since the marker was written, the call still runs.
      await eventually(() => rec.chunksSent >= 10, 'the stream to outlive its lock TTL', 5_000);
      expect(rec.chunksSent).toBeLessThan(16);
      const retry = await postChat(long.baseURL, setup.devKey, streamBody, headers);
      expect(retry.status).toBe(409);
      expect(((await retry.json()) as { error: { code: string } }).error.code).toBe('idempotency_conflict');
      expect(upstream.requests.length - calls).toBe(1);

      const text = await firstText;
      expect(text).toContain('data: [DONE]');
      // Once finished, the same key replays the answer, still without a second call.
      const replayed = await postChat(long.baseURL, setup.devKey, streamBody, headers);
      expect(replayed.headers.get('idempotent-replayed')).toBe('true');
      expect(await replayed.text()).toBe(text);
      expect(upstream.requests.length - calls).toBe(1);
      expect(await chargesOf(long.gateway.admin.ledger(ACCOUNT))).toHaveLength(1);
    } finally {
      await long.close();
    }
  });
});
