/**
 * Redis books: a settle is idempotent per (account, hold id) for good, not only while its
 * marker lives; and books written before every wallet change was a ledger entry get their
 * opening-balance entry on first touch.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';
import { esc } from '../../src/stores/redis/connection.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import type { SettleRequest, Stores } from '../../src/stores/types.js';
import { uid } from './harness.js';

const PREFIX = `mgtest:${randomUUID().slice(0, 8)}:`;
const MONTH = '2025-01';
const unreachable = await redisProblem(REDIS_URL);
if (unreachable !== null && process.env.CI !== 'true') console.warn(`\n!!! SKIPPING the Redis ledger tests: ${unreachable}\n`);

function settleReq(accountId: string, keyId: string, holdId: string, cost: bigint): SettleRequest {
  const entry = { id: holdId, accountId, keyId, model: 'm', units: { kind: 'tokens' as const, prompt: 1, completion: 2 }, measured: 'usage' as const, at: 1 };
  return { holdId, accountId, month: MONTH, cost, entry };
}

async function ledgerSum(stores: Stores, accountId: string): Promise<bigint> {
  return (await stores.billing.ledger(accountId)).reduce((sum, e) => sum + e.cost, 0n);
}

describe.runIf(unreachable === null || process.env.CI === 'true')('redis: the ledger', () => {
  const c = new Redis(REDIS_URL);
  afterAll(async () => {
    await deleteKeysWithPrefix(c, PREFIX);
    c.disconnect();
  });

  it('a settle replayed after the closed-hold marker expired does not charge twice', async () => {
    const one = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
    const two = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
    try {
      const accountId = uid('acct');
      const keyId = uid('key');
      await one.accounts.create({ id: accountId, grants: [], createdAt: 0 }, 1_000n);
      const holdId = uid('hold');
      await one.billing.placeHold({ holdId, accountId, keyId, amount: 500n, monthlyCap: null, month: MONTH, ttlMs: 60_000 });
      expect(await one.billing.settle(settleReq(accountId, keyId, holdId, 300n))).toMatchObject({ settled: true, charged: 300n });
      // CLOSED_MARKER_TTL_MS passes: every key of the account that expires is gone.
      for (const key of await c.keys(`${PREFIX}*${esc(accountId)}*`)) if ((await c.pttl(key)) >= 0) await c.del(key);
      // Another instance replays the settle from its journal, with and without the hold open again.
      expect(await two.billing.settle(settleReq(accountId, keyId, holdId, 300n))).toEqual({ settled: false, charged: 0n });
      await two.billing.placeHold({ holdId, accountId, keyId, amount: 500n, monthlyCap: null, month: MONTH, ttlMs: 60_000 });
      expect(await two.billing.settle(settleReq(accountId, keyId, holdId, 300n))).toEqual({ settled: false, charged: 0n });
      expect(await two.billing.release(accountId, holdId)).toBe(true);

      expect(await one.billing.wallet(accountId)).toEqual({ balance: 700n, held: 0n });
      expect((await one.billing.ledger(accountId)).filter((e) => e.id === holdId)).toHaveLength(1);
      expect(await ledgerSum(one, accountId)).toBe(-700n);
      expect(await one.billing.keyUsage(accountId, keyId, MONTH)).toEqual({ total: 300n, monthly: 300n, held: 0n });
      // Nothing kept per settle expires (no marker a day long): the ledger index names it for good.
      for (const key of await c.keys(`${PREFIX}*${esc(accountId)}*settled*`)) expect(await c.get(key)).toBe('r');
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });

  it('books from before wallet changes were entries get one opening-balance entry on first touch', async () => {
    const prefix = `${PREFIX}up${randomUUID().slice(0, 6)}:`;
    const key = (id: string, suffix: string) => `${prefix}{a:${esc(id)}}:${suffix}`;
    const line = (id: string, hold: string, cost: bigint, units: object) =>
      JSON.stringify({ id: hold, accountId: id, keyId: cost > 0n ? 'key_1' : '', model: '', units, cost: String(cost), held: '0', exceededHold: false, measured: null, at: 5 });
    // Created with 2 USD and topped up 1 USD (no entries), credited 3.25 USD and charged 0.5 USD (entries).
    await c.sadd(`${prefix}{idx}:accounts`, 'acct', 'even');
    await c.hset(key('acct', 'acct'), 'id', 'acct', 'grants', '[]', 'createdAt', '1234');
    await c.set(key('acct', 'bal'), '5750000000');
    await c.rpush(key('acct', 'ledger'), line('acct', 'c1', -3_250_000_000n, { kind: 'credit', reason: 'gift' }), line('acct', 'h1', 500_000_000n, { kind: 'tokens', prompt: 1, completion: 1 }));
    await c.hset(key('even', 'acct'), 'id', 'even', 'grants', '[]', 'createdAt', '1');
    await c.set(key('even', 'bal'), '-7');
    await c.rpush(key('even', 'ledger'), line('even', 'h2', 7n, { kind: 'tokens', prompt: 1, completion: 1 }));

    const stores = [createRedisStores({ url: REDIS_URL, keyPrefix: prefix }), createRedisStores({ url: REDIS_URL, keyPrefix: prefix })];
    try {
      // Two instances start together: the upgrade happens once.
      const [w1, w2] = await Promise.all(stores.map((s) => s.billing.wallet('acct')));
      expect(w1).toEqual({ balance: 5_750_000_000n, held: 0n });
      expect(w2).toEqual(w1);
      const ledger = await stores[0]!.billing.ledger('acct');
      expect(ledger.map((e) => e.id)).toEqual(['c1', 'h1', 'opening-balance']);
      expect(ledger[2]).toMatchObject({ cost: -3_000_000_000n, units: { kind: 'credit', reason: 'opening balance' }, at: 1_234 });
      expect(await ledgerSum(stores[1]!, 'acct')).toBe(-5_750_000_000n);
      expect(await stores[1]!.billing.ledger('even')).toHaveLength(1);
      expect(await c.get(`${prefix}{idx}:ledger-upgraded`)).toBe('1');
      // The account's opening balance is in its ledger: created again, it is not credited again.
      await c.del(key('acct', 'acct'));
      expect(await stores[0]!.accounts.create({ id: 'acct', grants: [], createdAt: 9 }, 2_000_000_000n)).toBe(true);
      expect((await stores[0]!.billing.wallet('acct')).balance).toBe(5_750_000_000n);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });
});
