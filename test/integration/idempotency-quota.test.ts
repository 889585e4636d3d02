/**
 * Idempotency-Key answers cannot fill the store: an answer larger than
 * `idempotency.maxAnswerBytes` is not kept (a retry with its key is 409 while the first call
 * runs, then 422 idempotency_key_unreplayable, never a second call), and an account's stored
 * answers stay within `idempotency.maxBytesPerAccount`, its oldest evicted, other accounts'
 * untouched. On memory and on a real Redis.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteKeysWithPrefix, REDIS_URL, redisProblem } from '../../bench/redis-util.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, MODEL, postChat, startGateway, testConfig, testKey } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const redisUp = (await redisProblem(REDIS_URL)) === null;
const needRedis = redisUp || process.env.CI === 'true';
if (!needRedis) console.warn(`\n!!! SKIPPING the Redis Idempotency-Key quota tests: Redis at ${REDIS_URL} is unreachable (under CI=true this fails).\n`);
const PREFIX = `mgidq:${randomBytes(4).toString('hex')}:`;

let upstream: TestUpstream;
beforeAll(async () => {
  upstream = await startTestUpstream();
});
afterAll(async () => {
  await upstream?.close();
  if (!redisUp) return;
  const c = new Redis(REDIS_URL);
  await deleteKeysWithPrefix(c, PREFIX);
  c.disconnect();
});

const OTHER = 'acct_other';
const otherKey = testKey();

async function start(makeStores: () => Stores, idempotency: { maxAnswerBytes?: number; maxBytesPerAccount?: number } = {}) {
  const setup = testConfig({
    upstreamUrl: upstream.url,
    accounts: [{ id: OTHER, walletUsd: 10 }],
    keys: [{ key: otherKey, account: OTHER, kind: 'developer' }],
  });
  const gw = await startGateway({ ...setup.options, stores: makeStores(), ...(Object.keys(idempotency).length ? { idempotency } : {}) });
  const ask = (idem: string, key = setup.devKey) =>
    postChat(gw.baseURL, key, { model: MODEL, messages: [{ role: 'user', content: 'a long answer please' }] }, {
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'idempotency-key': idem },
    });
  return { gw, ask };
}

describe.each([
  ['memory', true, (): Stores => createMemoryStores()],
  ['redis', needRedis, (): Stores => createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX })],
] as const)('%s: what Idempotency-Key answers may take', (_name, enabled, makeStores) => {
  it.runIf(enabled)('an answer over maxAnswerBytes (1 MiB by default) is not kept: 409 while it runs, then 422 idempotency_key_unreplayable, with one upstream call', async () => {
    const { gw, ask } = await start(makeStores);
    try {
      const idem = `idem-${Math.random()}`;
      let open!: () => void;
      const gate = new Promise<void>((r) => (open = r));
      upstream.setBehavior({ kind: 'json', content: 'x'.repeat(1_200_000), gate });
      const calls = upstream.requests.length;
      const ledger = (await gw.gateway.admin.ledger(ACCOUNT)).length;
      const first = ask(idem);
      await upstream.waitForRequests(calls + 1);
      const during = await ask(idem);
      expect(during.status).toBe(409);
      expect(((await during.json()) as { error: { code: string } }).error.code).toBe('idempotency_conflict');
      open();
      const res = await first;
      expect(res.status).toBe(200);
      expect((await res.text()).length).toBeGreaterThan(1_200_000);

      for (let i = 0; i < 2; i++) {
        const retry = await ask(idem);
        expect(retry.status).toBe(422);
        const err = (await retry.json()) as { error: { code: string; param: string; type: string } };
        expect(err.error).toMatchObject({ code: 'idempotency_key_unreplayable', param: 'Idempotency-Key', type: 'invalid_request_error' });
      }
      expect(upstream.requests.length - calls).toBe(1);
      // Charged once.
      expect(await gw.gateway.admin.ledger(ACCOUNT)).toHaveLength(ledger + 1);
    } finally {
      await gw.close();
    }
  });

  it.runIf(enabled)("an account's stored answers stay within maxBytesPerAccount: its oldest are evicted, another account's are not", async () => {
    // Each answer is stored as about 12 KB (base64 of an ~8.5 KB body): two fit in 30,000 bytes, three do not.
    const { gw, ask } = await start(makeStores, { maxAnswerBytes: 20_000, maxBytesPerAccount: 30_000 });
    try {
      upstream.setBehavior({ kind: 'json', content: 'y'.repeat(8_000) });
      const theirs = `idem-${Math.random()}`;
      expect((await ask(theirs, otherKey)).status).toBe(200);
      const mine = Array.from({ length: 4 }, (_, i) => `idem-${i}-${Math.random()}`);
      for (const idem of mine) expect((await ask(idem)).status).toBe(200);

      const calls = upstream.requests.length;
      // The newest two replay; the other account's answer too.
      for (const idem of [mine[3]!, mine[2]!]) expect((await ask(idem)).headers.get('idempotent-replayed')).toBe('true');
      expect((await ask(theirs, otherKey)).headers.get('idempotent-replayed')).toBe('true');
      expect(upstream.requests.length).toBe(calls);
      // The oldest were evicted: the request runs again.
      const again = await ask(mine[0]!);
      expect(again.status).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBeNull();
      expect(upstream.requests.length).toBe(calls + 1);
    } finally {
      await gw.close();
    }
  });
});

describe('configuration', () => {
  it('maxAnswerBytes may not exceed maxBytesPerAccount', async () => {
    const { parseOptions } = await import('../../src/options.js');
    expect(() => parseOptions({ idempotency: { maxAnswerBytes: 2_000, maxBytesPerAccount: 1_000 } })).toThrow(/idempotency\.maxAnswerBytes/);
    expect(parseOptions({}).idempotency).toEqual({ maxAnswerBytes: 1_048_576, maxBytesPerAccount: 67_108_864 });
  });
});
