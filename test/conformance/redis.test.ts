import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { connect, createServer, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_NANO } from '../../src/billing/money.js';
import { createRedisStores, RedisStoreError, CLOSED_MARKER_TTL_MS } from '../../src/stores/redis/entry.js';
import { type BatchOp, Batches, hashTagOf, MAX_GROUP } from '../../src/stores/redis/batches.js';
import { esc, RedisContext } from '../../src/stores/redis/connection.js';
import type { HoldRequest, SettleRequest, Stores } from '../../src/stores/types.js';
import { accountsKeysSuite } from './accounts-keys.suite.js';
import { billingSuite } from './billing.suite.js';
import { ledgerSuite } from './ledger.suite.js';
import { contentSuite } from './content.suite.js';
import { idempotencySuite } from './idempotency.suite.js';
import { responseCacheSuite } from './response-cache.suite.js';
import { type StoreHarness, uid } from './harness.js';
import { jobsSuite } from './jobs.suite.js';
import { batchesSuite } from './batches.suite.js';
import { limitsSuite } from './limits.suite.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';

/** Every key of this run starts with it; afterAll deletes them. */
const PREFIX = `mgtest:${randomUUID().slice(0, 8)}:`;
const MONTH = '2025-01';

const unreachable = await redisProblem(REDIS_URL);

/** Redis stores on the real clock: `advance` really sleeps. */
async function makeRedis(): Promise<StoreHarness> {
  const stores = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
  return { stores, advance: (ms) => sleep(ms), cleanup: () => stores.close() };
}

async function account(stores: Stores, balance: bigint) {
  const accountId = uid('acct');
  expect(await stores.accounts.create({ id: accountId, grants: [], createdAt: 0 }, balance)).toBe(true);
  return { accountId, keyId: uid('key') };
}

function hold(a: { accountId: string; keyId: string }, amount: bigint, extra: Partial<HoldRequest> = {}): HoldRequest {
  return { holdId: uid('hold'), ...a, amount, monthlyCap: null, month: MONTH, ttlMs: 60_000, ...extra };
}

function settleReq(a: { accountId: string; keyId: string }, holdId: string, cost: bigint): SettleRequest {
  return {
    holdId,
    accountId: a.accountId,
    month: MONTH,
    cost,
    entry: {
      id: holdId,
      accountId: a.accountId,
      keyId: a.keyId,
      model: 'm-1',
      units: { kind: 'tokens', prompt: 1, completion: 2 },
      measured: 'usage',
      at: 1,
    },
  };
}

/** The hash tag Redis Cluster hashes for `key` (the whole key when it has none). */
function hashTag(key: string): string {
  const open = key.indexOf('{');
  if (open < 0) return key;
  const close = key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

async function deleteRunKeys(): Promise<void> {
  const c = new Redis(REDIS_URL);
  try {
    await deleteKeysWithPrefix(c, PREFIX);
  } finally {
    c.disconnect();
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

async function eventually<T>(what: string, fn: () => Promise<T>, ok: (v: T) => boolean, ms = 10_000): Promise<T> {
  const until = Date.now() + ms;
  let last: unknown;
  while (Date.now() < until) {
    try {
      const v = await fn();
      if (ok(v)) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    await sleep(50);
  }
  throw new Error(`${what} did not happen in ${ms} ms (last: ${String(last)})`);
}

/** How long `p` takes to settle, and whether it rejected with a RedisStoreError. */
async function timed(p: Promise<unknown>): Promise<{ ms: number; storeError: boolean }> {
  const t0 = Date.now();
  try {
    await p;
    return { ms: Date.now() - t0, storeError: false };
  } catch (err) {
    return { ms: Date.now() - t0, storeError: err instanceof RedisStoreError };
  }
}

/**
 * Watches, through MONITOR, the commands sent under this run's prefix: those clients send, or
 * with `lua` those the scripts run instead. `during(op)` answers op's result and the commands
 * seen while it ran, between two ECHO marks of `client`.
 */
async function watchCommands(client: Redis, { lua = false } = {}) {
  const monitorClient = new Redis(REDIS_URL);
  const monitor = await monitorClient.monitor();
  const seen: string[][] = [];
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    // What scripts run inside Redis, only when asked for (then alone, with the markers).
    if ((source === 'lua') !== lua && !args.some((x) => x.startsWith('mgmark_'))) return;
    if (args.some((x) => x.includes(PREFIX) || x.startsWith('mgmark_'))) seen.push(args);
  });
  async function during<T>(op: () => Promise<T>): Promise<{ commands: string[][]; result: T }> {
    const [start, end] = [uid('mgmark'), uid('mgmark')];
    await client.echo(start);
    const result = await op();
    await client.echo(end);
    await eventually('monitor output', async () => seen.some((x) => x[1] === end), Boolean);
    const from = seen.findIndex((x) => x[1] === start);
    const to = seen.findIndex((x) => x[1] === end);
    return { commands: seen.slice(from + 1, to), result };
  }
  return { seen, during, stop: () => monitorClient.disconnect() };
}

if (unreachable !== null) {
  const notice = `Redis at ${REDIS_URL} is unreachable (${unreachable})`;
  if (process.env.CI === 'true') {
    describe('redis', () => {
      it('Redis is reachable (required under CI=true)', () => {
        throw new Error(`${notice}. Start one, or set REDIS_URL.`);
      });
    });
  } else {
    console.warn(
      `\n${'!'.repeat(78)}\n!!! SKIPPING the Redis store conformance tests: ${notice}.\n` +
        `!!! Start Redis (e.g. redis-server) or set REDIS_URL; under CI=true this fails.\n${'!'.repeat(78)}\n`,
    );
    // Deliberately skipped, and only outside CI: a developer without a local Redis still runs
    // every memory suite, and the report names what did not run. Under CI=true (above) it fails.
    describe.skip(`redis (skipped: ${notice})`, () => {
      it('conformance suites', () => {});
    });
  }
} else {
  afterAll(deleteRunKeys);

  // The suites measure expiries of 100-300 ms on Redis's real clock with ~50 ms margins. On a
  // loaded 2-core CI machine a timer can overshoot that, so a failed case is retried; the same
  // cases run exactly, on a fake clock, against the memory stores.
  describe('real clock', { retry: 2 }, () => {
    accountsKeysSuite('redis', makeRedis);
    billingSuite('redis', makeRedis);
    ledgerSuite('redis', makeRedis);
    limitsSuite('redis', makeRedis);
    jobsSuite('redis', makeRedis);
    batchesSuite('redis', makeRedis);
    contentSuite('redis', makeRedis);
    idempotencySuite('redis', makeRedis);
    responseCacheSuite('redis', makeRedis);
  });

  describe('redis: money across instances', () => {
    it('a replayed settle never debits twice, even after the hold is gone or re-opened', async () => {
      const one = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      // Another instance (or the same one after a reconnect) replays the settle.
      const two = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      try {
        const a = await account(one, 1_000n);
        const req = hold(a, 500n);
        expect(await one.billing.placeHold(req)).toEqual({ ok: true });
        expect(await one.billing.settle(settleReq(a, req.holdId, 300n))).toEqual({ settled: true, charged: 300n, held: 500n });
        expect(await two.billing.settle(settleReq(a, req.holdId, 300n))).toEqual({ settled: false, charged: 0n });

        // A replayed placeHold opens the id again; the replayed settle still changes nothing.
        expect(await two.billing.placeHold(req)).toEqual({ ok: true });
        expect(await two.billing.settle(settleReq(a, req.holdId, 300n))).toEqual({ settled: false, charged: 0n });
        expect(await one.billing.wallet(a.accountId)).toEqual({ balance: 700n, held: 500n });
        expect(await one.billing.release(a.accountId, req.holdId)).toBe(true);
        expect(await one.billing.wallet(a.accountId)).toEqual({ balance: 700n, held: 0n });
        expect(await one.billing.ledger(a.accountId)).toHaveLength(2);
        expect(await one.billing.keyUsage(a.accountId, a.keyId, MONTH)).toEqual({ total: 300n, monthly: 300n, held: 0n });

        // The marker lives about a day.
        const c = new Redis(REDIS_URL);
        const markers = await c.keys(`${PREFIX}*settled*`);
        const ttl = await c.pttl(markers.find((k) => k.includes(req.holdId)) ?? '');
        c.disconnect();
        expect(ttl).toBeGreaterThan(CLOSED_MARKER_TTL_MS - 60_000);
        expect(ttl).toBeLessThanOrEqual(CLOSED_MARKER_TTL_MS);
      } finally {
        await Promise.all([one.close(), two.close()]);
      }
    });

    it('200 concurrent holds from two clients against a wallet worth exactly 10 place exactly 10', async () => {
      const one = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      const two = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      try {
        const a = await account(one, 10n * 7_000n);
        const results = await Promise.all(
          Array.from({ length: 200 }, (_, i) => (i % 2 === 0 ? one : two).billing.placeHold(hold(a, 7_000n))),
        );
        expect(results.filter((r) => r.ok)).toHaveLength(10);
        for (const r of results) if (!r.ok) expect(r).toEqual({ ok: false, limitSource: 'wallet', available: 0n });
        expect(await two.billing.wallet(a.accountId)).toEqual({ balance: 70_000n, held: 70_000n });
        expect(await one.billing.openHolds(a.accountId)).toBe(10);
      } finally {
        await Promise.all([one.close(), two.close()]);
      }
    });

    it('concurrent settles of one hold from two clients charge once', async () => {
      const one = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      const two = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      try {
        const a = await account(one, 1_000n);
        const req = hold(a, 500n);
        await one.billing.placeHold(req);
        const results = await Promise.all(
          Array.from({ length: 40 }, (_, i) => (i % 2 ? one : two).billing.settle(settleReq(a, req.holdId, 300n))),
        );
        expect(results.filter((r) => r.settled)).toMatchObject([{ settled: true, charged: 300n }]);
        expect(await one.billing.wallet(a.accountId)).toEqual({ balance: 700n, held: 0n });
        expect(await two.billing.ledger(a.accountId)).toHaveLength(2);
      } finally {
        await Promise.all([one.close(), two.close()]);
      }
    });

    it('amounts up to 2^53 - 1 nano-USD stay exact through the Lua scripts', async () => {
      const h = await makeRedis();
      try {
        const { billing } = h.stores;
        const a = await account(h.stores, MAX_NANO);
        const req = hold(a, MAX_NANO, { monthlyCap: MAX_NANO });
        expect(await billing.placeHold(hold(a, MAX_NANO, { monthlyCap: MAX_NANO - 1n }))).toEqual({
          ok: false,
          limitSource: 'key_monthly_cap',
          available: MAX_NANO - 1n,
        });
        expect(await billing.placeHold(req)).toEqual({ ok: true });
        expect(await billing.wallet(a.accountId)).toEqual({ balance: MAX_NANO, held: MAX_NANO });
        expect(await billing.settle(settleReq(a, req.holdId, MAX_NANO - 2n))).toEqual({ settled: true, charged: MAX_NANO - 2n, held: MAX_NANO });
        expect(await billing.wallet(a.accountId)).toEqual({ balance: 2n, held: 0n });
        expect(await billing.keyUsage(a.accountId, a.keyId, MONTH)).toEqual({ total: MAX_NANO - 2n, monthly: MAX_NANO - 2n, held: 0n });
        expect((await billing.ledger(a.accountId)).at(-1)).toMatchObject({ cost: MAX_NANO - 2n, held: MAX_NANO, exceededHold: false });
        expect(await billing.topUp(a.accountId, MAX_NANO - 2n)).toBe(MAX_NANO);
      } finally {
        await h.cleanup();
      }
    });
  });

  describe('redis: limits across instances', () => {
    it('a sliding window shared by two clients allows exactly its limit', async () => {
      const one = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      const two = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      try {
        const bucket = uid('bucket');
        const results = await Promise.all(
          Array.from({ length: 80 }, (_, i) => (i % 2 ? one : two).limits.hit(bucket, 50, 60_000)),
        );
        expect(results.filter((r) => r.allowed)).toHaveLength(50);
        const remaining = results.filter((r) => r.allowed).map((r) => r.remaining).sort((x, y) => x - y);
        expect(remaining).toEqual(Array.from({ length: 50 }, (_, i) => i));
        expect(await one.limits.hit(bucket, 50, 60_000)).toMatchObject({ allowed: false, remaining: 0 });
      } finally {
        await Promise.all([one.close(), two.close()]);
      }
    });

    it('key hits folded into holds from two clients count exactly the limit and hold exactly the wallet', async () => {
      const one = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      const two = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      try {
        const a = await account(one, 30n * 7_000n);
        const hit = { bucket: `key:${a.keyId}`, limit: 50, windowMs: 60_000, accountId: a.accountId };
        const results = await Promise.all(
          Array.from({ length: 120 }, (_, i) => (i % 2 ? one : two).billing.hitAndPlaceHold!(hit, hold(a, 7_000n))),
        );
        expect(results.filter((r) => r.window.allowed)).toHaveLength(50);
        expect(results.filter((r) => r.hold?.ok)).toHaveLength(30);
        for (const r of results) if (!r.window.allowed) expect(r.hold).toBeNull();
        expect(await two.billing.wallet(a.accountId)).toEqual({ balance: 210_000n, held: 210_000n });
        // The stand-alone hit of the same window (GET routes) sees the folded hits.
        expect(await one.limits.hit(hit.bucket, 50, 60_000, a.accountId)).toMatchObject({ allowed: false, remaining: 0 });
        const c = new Redis(REDIS_URL);
        const windows = await c.keys(`${PREFIX}*:rl:*${a.keyId}*`);
        c.disconnect();
        // The key's window lives under its account's hash tag, beside the books.
        expect(windows.map(hashTag)).toEqual([`a:${a.accountId}`]);
      } finally {
        await Promise.all([one.close(), two.close()]);
      }
    });

    it('leases shared by two clients take exactly the cap', async () => {
      const one = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      const two = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      try {
        const pool = uid('pool');
        const results = await Promise.all(
          Array.from({ length: 40 }, (_, i) => (i % 2 ? one : two).limits.acquireLease(pool, 7, uid('lease'), 60_000)),
        );
        expect(results.filter(Boolean)).toHaveLength(7);
        expect(await two.limits.activeLeases(pool)).toBe(7);
      } finally {
        await Promise.all([one.close(), two.close()]);
      }
    });

    it('idle windows, pools and expired holds leave no keys behind', async () => {
      const h = await makeRedis();
      const c = new Redis(REDIS_URL);
      try {
        const bucket = uid('bucket');
        const pool = uid('pool');
        const a = await account(h.stores, 100n);
        await h.stores.limits.hit(bucket, 5, 200);
        await h.stores.limits.acquireLease(pool, 1, uid('lease'), 200);
        await h.stores.billing.placeHold(hold(a, 10n, { ttlMs: 200 }));
        const live = await c.keys(`${PREFIX}*`);
        expect(live.filter((k) => k.includes(bucket) || k.includes(pool)).length).toBe(2);
        expect(live.filter((k) => k.includes(a.accountId) && /:(holds|hexp|held)$/.test(k)).length).toBe(3);
        await sleep(300);
        const after = await c.keys(`${PREFIX}*`);
        expect(after.filter((k) => k.includes(bucket) || k.includes(pool))).toEqual([]);
        expect(after.filter((k) => k.includes(a.accountId) && /:(holds|hexp|held)$/.test(k))).toEqual([]);
        expect(await h.stores.billing.wallet(a.accountId)).toEqual({ balance: 100n, held: 0n });
      } finally {
        c.disconnect();
        await h.cleanup();
      }
    });
  });

  describe('redis: IdempotencyStore across instances', () => {
    it('concurrent begins from two clients start exactly one', async () => {
      const one = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      const two = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      try {
        const scope = uid('scope');
        const results = await Promise.all(
          Array.from({ length: 30 }, (_, i) => (i % 2 ? one : two).idempotency.begin(scope, `fp-${i}`, 60_000)),
        );
        expect(results.filter((r) => r.state === 'started')).toHaveLength(1);
      } finally {
        await Promise.all([one.close(), two.close()]);
      }
    });
  });

  describe('redis: round trips and Cluster safety', () => {
    it('placeHold, settle, hit and the other hot paths are one command each; every script keeps to one hash tag', async () => {
      const client = new Redis(REDIS_URL);
      const { seen, during, stop } = await watchCommands(client);
      const stores = createRedisStores({ client, keyPrefix: PREFIX });
      const commandsOf = async (op: () => Promise<unknown>) => (await during(op)).commands;
      const names = (cmds: string[][]) => cmds.map((x) => (x[0] ?? '').toLowerCase());

      try {
        const a = { accountId: uid('acct'), keyId: uid('key') };
        await stores.accounts.create({ id: a.accountId, grants: [], createdAt: 0 }, 1_000_000n);
        // Warm up: the first call of a script on a connection sends its body (EVAL).
        const warm = hold(a, 1n);
        await stores.billing.placeHold(warm);
        await stores.billing.settle(settleReq(a, warm.holdId, 1n));
        await stores.billing.release(a.accountId, uid('hold'));
        await stores.limits.hit(uid('bucket'), 5, 1_000);
        await stores.billing.hitAndPlaceHold!({ bucket: uid('bucket'), limit: 5, windowMs: 1_000, accountId: a.accountId }, hold(a, 1n));
        await stores.limits.acquireLease(uid('pool'), 5, uid('lease'), 1_000);

        const req = hold(a, 100n, { monthlyCap: 10_000n });
        const counts: Record<string, string[]> = {
          placeHold: names(await commandsOf(() => stores.billing.placeHold(req))),
          hitAndPlaceHold: names(
            await commandsOf(() =>
              stores.billing.hitAndPlaceHold!({ bucket: `key:${a.keyId}`, limit: 5, windowMs: 1_000, accountId: a.accountId }, hold(a, 1n)),
            ),
          ),
          settle: names(await commandsOf(() => stores.billing.settle(settleReq(a, req.holdId, 50n)))),
          release: names(await commandsOf(() => stores.billing.release(a.accountId, req.holdId))),
          hit: names(await commandsOf(() => stores.limits.hit(uid('bucket'), 5, 1_000))),
          acquireLease: names(await commandsOf(() => stores.limits.acquireLease(uid('pool'), 5, uid('lease'), 1_000))),
          findByDigest: names(await commandsOf(() => stores.keys.findByDigest(uid('digest')))),
        };
        expect(counts).toEqual({
          placeHold: ['evalsha'],
          hitAndPlaceHold: ['evalsha'],
          settle: ['evalsha'],
          release: ['evalsha'],
          hit: ['evalsha'],
          acquireLease: ['evalsha'],
          findByDigest: ['hmget'],
        });

        // A workload over every store: every script's keys share one hash tag.
        seen.length = 0;
        const k = { id: uid('key'), digest: uid('digest') };
        await stores.keys.insert({
          ...k,
          prefix: 'sk-mg-Ab12',
          accountId: a.accountId,
          kind: 'developer',
          model: null,
          label: null,
          monthlyCap: null,
          disabled: false,
          createdAt: 1,
        });
        await stores.keys.insert({ ...(await stores.keys.get(k.id))!, id: uid('key') });
        await stores.keys.setDisabled(k.id, true);
        await stores.accounts.setGrants(a.accountId, ['x']);
        const h2 = hold(a, 10n);
        await stores.billing.placeHold(h2);
        await stores.billing.hitAndPlaceHold!({ bucket: `key:${k.id}`, limit: 5, windowMs: 1_000, accountId: a.accountId }, hold(a, 10n));
        await stores.limits.hit(`key:${k.id}`, 5, 1_000, a.accountId);
        await stores.billing.settle(settleReq(a, h2.holdId, 5n));
        await stores.billing.topUp(a.accountId, 5n);
        await stores.billing.wallet(a.accountId);
        await stores.billing.keyUsage(a.accountId, a.keyId, MONTH);
        await stores.billing.openHolds(a.accountId);
        const pool = uid('pool');
        const lease = uid('lease');
        await stores.limits.acquireLease(pool, 1, lease, 1_000);
        await stores.limits.renewLease(pool, lease, 1_000);
        await stores.limits.activeLeases(pool);
        const jobId = uid('job');
        await stores.jobs.create({ id: jobId, status: 'queued' } as Parameters<typeof stores.jobs.create>[0], 10_000);
        await stores.jobs.update(jobId, { status: 'completed' }, ['queued']);
        await stores.jobs.listUnfinished();
        await stores.content.putDocument({ id: uid('doc'), accountId: a.accountId, brand: null, title: 't', text: 'x', createdAt: 1 });
        await stores.content.deleteDocument(a.accountId, uid('doc'));
        await stores.idempotency.begin(uid('scope'), 'fp', 1_000);
        await client.echo('mgmark_done');
        await eventually('monitor output', async () => seen.some((x) => x[1] === 'mgmark_done'), Boolean);

        const scripts = seen.filter((x) => ['evalsha', 'eval'].includes((x[0] ?? '').toLowerCase()));
        expect(scripts.length).toBeGreaterThanOrEqual(18);
        for (const x of scripts) {
          const keys = x.slice(3, 3 + Number(x[2]));
          expect(keys.length).toBeGreaterThan(0);
          expect(new Set(keys.map(hashTag)).size, `one hash tag in ${keys.join(' ')}`).toBe(1);
          for (const key of keys) expect(key.startsWith(PREFIX)).toBe(true);
        }
      } finally {
        await stores.close();
        expect(client.status).toBe('ready'); // a client we passed in is left open
        stop();
        client.disconnect();
      }
    });
  });

  describe('redis: per-call operations go out in batches, one batch in flight', () => {
    const turn = () => new Promise((r) => setImmediate(r));
    const op = (what: string, tag: string): BatchOp => ({ what, script: 'mgHit', keys: [`${PREFIX}{${tag}}:w`], args: [what] });
    /** Batches whose groups the test answers by hand; `sent` lists each group's operations. */
    function manualBatches() {
      const sent: string[][] = [];
      const answers: Array<{ answer: (replies: unknown[]) => void; fail: (err: Error) => void }> = [];
      const batches = new Batches((ops) => {
        sent.push(ops.map((o) => o.what));
        return new Promise<unknown[]>((resolve, reject) => answers.push({ answer: resolve, fail: reject }));
      });
      return { batches, sent, answers };
    }

    it('sends what is issued together in one batch (one group per hash tag), holds what comes later until every answer is in', async () => {
      const { batches, sent, answers } = manualBatches();
      const pa = batches.submit(op('a', 'x'));
      const pb = batches.submit(op('b', 'x'));
      const pc = batches.submit(op('c', 'y'));
      expect(sent).toEqual([]); // nothing goes before the turn's other operations can join
      await turn();
      expect(sent).toEqual([['a', 'b'], ['c']]);
      const pd = batches.submit(op('d', 'y'));
      const pe = batches.submit(op('e', 'x'));
      await turn();
      expect(sent).toHaveLength(2); // wait for the batch in flight
      answers[0]!.answer(['ra', new Error('WRONGTYPE')]);
      expect(await pa).toBe('ra');
      await expect(pb).rejects.toThrow('WRONGTYPE'); // a failure fails alone
      await turn();
      expect(sent).toHaveLength(2); // c is still out
      answers[1]!.fail(new Error('connection lost'));
      await expect(pc).rejects.toThrow('connection lost'); // a group that failed fails each of its operations
      await turn();
      expect(sent).toEqual([['a', 'b'], ['c'], ['d'], ['e']]); // in the order they came
      answers[2]!.answer(['rd']);
      answers[3]!.answer(['re']);
      expect(await Promise.all([pd, pe])).toEqual(['rd', 're']);
      // A reply short of an operation fails that operation rather than leaving it hanging.
      const pf = batches.submit(op('f', 'x'));
      const pg = batches.submit(op('g', 'x'));
      await turn();
      answers[4]!.answer(['rf']);
      expect(await pf).toBe('rf');
      await expect(pg).rejects.toThrow('got 1 replies');
    });

    it(`splits a hash tag's operations into groups of at most ${MAX_GROUP}, sent in order`, async () => {
      const { batches, sent, answers } = manualBatches();
      const all = Array.from({ length: MAX_GROUP + 2 }, (_, i) => batches.submit(op(String(i), 'x')));
      await turn();
      expect(sent.map((g) => g.length)).toEqual([MAX_GROUP, 2]);
      expect(sent.flat()).toEqual(all.map((_, i) => String(i)));
      for (const [i, g] of sent.entries()) answers[i]!.answer(g);
      expect(await Promise.all(all)).toEqual(all.map((_, i) => String(i)));
      expect(hashTagOf('mg:{a:b}:c')).toBe('a:b');
      expect(hashTagOf('mg:{}:c')).toBe('mg:{}:c'); // an empty tag: Redis hashes the whole key
    });

    it('gives up a batch whose connection closed: what waits behind it goes on (and fails promptly with the connection gone)', async () => {
      // A proxy to Redis that stops passing commands on when told. The client reconnects and
      // keeps its unanswered command to resend (no command timeout, no retry limit), so
      // nothing would ever answer the batch that command belongs to.
      const target = new URL(REDIS_URL);
      let frozen = false;
      const sockets = new Set<Socket>();
      const proxy = createServer((c) => {
        const up = connect(Number(target.port || 6379), target.hostname);
        sockets.add(c);
        c.on('data', (d) => {
          if (!frozen) up.write(d);
        });
        up.pipe(c);
        c.on('close', () => {
          sockets.delete(c);
          up.destroy();
        });
        up.on('close', () => c.destroy());
        c.on('error', () => {});
        up.on('error', () => {});
      });
      await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
      const port = (proxy.address() as { port: number }).port;
      const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: null, retryStrategy: () => 50 });
      client.on('error', () => {});
      try {
        await client.ping();
        frozen = true;
        const ctx = new RedisContext(client, PREFIX, 200);
        let stuckSettled = false;
        void ctx.batched('stuck', 'mgHit', [`${PREFIX}{x}:w`], [1, 1000, 'm1']).finally(() => {
          stuckSettled = true;
        }).catch(() => undefined);
        await turn();
        await turn();
        const waiting = timed(ctx.batched('next', 'mgHit', [`${PREFIX}{x}:w`], [1, 1000, 'm2']));
        await turn();
        const t0 = Date.now();
        for (const c of sockets) c.destroy(); // the connection closes under the client
        const r = await waiting;
        expect(stuckSettled).toBe(false); // the lost command is still unanswered
        expect(r.storeError).toBe(true); // what waited behind it went on, to a reconnecting client
        expect(Date.now() - t0).toBeLessThan(2_000);
        // Nothing is held up afterwards either.
        const after = await timed(ctx.batched('after', 'mgHit', [`${PREFIX}{x}:w`], [1, 1000, 'm3']));
        expect(after.storeError).toBe(true);
        expect(after.ms).toBeLessThan(2_000);
      } finally {
        client.disconnect();
        await new Promise((r) => proxy.close(r));
      }
    });

    it('an operation outside the batches never overtakes one issued before it on an idle connection', async () => {
      const stores = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      try {
        const a = await account(stores, 1_000n);
        const h = hold(a, 10n);
        expect(await stores.billing.placeHold(h)).toEqual({ ok: true });
        // As the gateway does: the settle is issued, not awaited, then the client's next
        // request reads the books.
        const settled = stores.billing.settle(settleReq(a, h.holdId, 7n));
        const [wallet, ledger] = await Promise.all([stores.billing.wallet(a.accountId), stores.billing.ledger(a.accountId)]);
        expect(wallet).toEqual({ balance: 993n, held: 0n });
        expect(ledger.map((e) => e.id)).toEqual(['opening-balance', h.holdId]);
        expect(await settled).toMatchObject({ settled: true, charged: 7n });
      } finally {
        await stores.close();
      }
    });

    it("one account's operations and one IP bucket's issued together: one script per hash tag, each answered as if sent alone", async () => {
      const client = new Redis(REDIS_URL);
      const { during, stop } = await watchCommands(client);
      const stores = createRedisStores({ client, keyPrefix: PREFIX });
      try {
        const a = await account(stores, 10_000n);
        const open = hold(a, 100n);
        expect(await stores.billing.placeHold(open)).toEqual({ ok: true });
        // Warm up both scripts (the first call of a script on a connection sends its body).
        const [w1, w2] = [hold(a, 1n), hold(a, 1n)];
        await Promise.all([stores.billing.placeHold(w1), stores.billing.placeHold(w2)]);
        await Promise.all([stores.billing.release(a.accountId, w1.holdId), stores.billing.release(a.accountId, w2.holdId)]);
        // An account window the script cannot read: its hit fails, and only its hit.
        const broken = uid('broken');
        await client.set(`${PREFIX}{a:${a.accountId}}:rl:${broken}`, 'not a window');
        const ip = uid('ip');
        const hits = [
          { bucket: `key:${a.keyId}`, limit: 2, windowMs: 60_000, accountId: a.accountId },
          { bucket: `key:${a.keyId}`, limit: 2, windowMs: 60_000, accountId: a.accountId },
          { bucket: `key:${a.keyId}`, limit: 2, windowMs: 60_000, accountId: a.accountId },
        ];
        const { commands: sent, result } = await during(() =>
          Promise.allSettled([
            ...hits.map((hit) => stores.billing.hitAndPlaceHold!(hit, hold(a, 1_000n))),
            stores.billing.settle(settleReq(a, open.holdId, 150n)),
            stores.limits.hit(broken, 5, 60_000, a.accountId),
            stores.limits.hit(`ip:${ip}`, 1, 60_000),
            stores.limits.hit(`ip:${ip}`, 1, 60_000),
            stores.billing.release(a.accountId, uid('hold')),
          ]),
        );
        const [h1, h2, h3, s, bad, i1, i2, rel] = result;
        // Two scripts: the account's seven operations, the IP bucket's two.
        expect(sent.map((x) => (x[0] ?? '').toLowerCase())).toEqual(['evalsha', 'evalsha']);
        expect(sent.map((x) => Number(x[2]))).toEqual([3 * 6 + 8 + 1 + 4, 2]);
        for (const x of sent) expect(new Set(x.slice(3, 3 + Number(x[2])).map(hashTag)).size).toBe(1);
        // Each answered as it would have been alone, in the order issued.
        expect(h1).toMatchObject({ status: 'fulfilled', value: { window: { allowed: true, remaining: 1 }, hold: { ok: true } } });
        expect(h2).toMatchObject({ status: 'fulfilled', value: { window: { allowed: true, remaining: 0 }, hold: { ok: true } } });
        expect(h3).toMatchObject({ status: 'fulfilled', value: { window: { allowed: false }, hold: null } });
        expect(s).toMatchObject({ status: 'fulfilled', value: { settled: true, charged: 150n, held: 100n } });
        expect(bad.status).toBe('rejected');
        expect((bad as PromiseRejectedResult).reason).toBeInstanceOf(RedisStoreError);
        expect(String((bad as PromiseRejectedResult).reason.message)).toMatch(/^Redis hit failed: .*WRONGTYPE/);
        expect(i1).toMatchObject({ status: 'fulfilled', value: { allowed: true } });
        expect(i2).toMatchObject({ status: 'fulfilled', value: { allowed: false } });
        expect(rel).toEqual({ status: 'fulfilled', value: false });
        expect(await stores.billing.wallet(a.accountId)).toEqual({ balance: 10_000n - 150n, held: 2_000n });
      } finally {
        await stores.close();
        stop();
        client.disconnect();
      }
    });

    it('a batch runs at one instant and shares the work: each window trimmed and read once, one prune and one expiry update per account', async () => {
      const client = new Redis(REDIS_URL);
      const { during, stop } = await watchCommands(client, { lua: true });
      const stores = createRedisStores({ client, keyPrefix: PREFIX });
      try {
        const a = await account(stores, 10_000n);
        // Run a batch before the one watched.
        const [w1, w2] = [hold(a, 1n), hold(a, 1n)];
        await Promise.all([stores.billing.placeHold(w1), stores.billing.placeHold(w2)]);
        await Promise.all([stores.billing.release(a.accountId, w1.holdId), stores.billing.release(a.accountId, w2.holdId)]);
        const tag = `{a:${a.accountId}}`;
        const holdKeys = ['hexp', 'holds', 'held'].map((k) => `${PREFIX}${tag}:${k}`);
        expect(await client.exists(...holdKeys)).toBe(0);
        // The first hold is settled in the batch that opened it, which drops the account's last
        // hold (its keys vanish), and the next opens another (they come back).
        const hit = { bucket: `key:${a.keyId}`, limit: 3, windowMs: 60_000, accountId: a.accountId };
        const holds = Array.from({ length: 4 }, () => hold(a, 100n));
        const { commands, result } = await during(() =>
          Promise.all([
            stores.billing.hitAndPlaceHold!(hit, holds[0] as HoldRequest),
            stores.billing.settle(settleReq(a, (holds[0] as HoldRequest).holdId, 70n)),
            ...holds.slice(1).map((h) => stores.billing.hitAndPlaceHold!(hit, h)),
          ]),
        );
        const [h0, settled, h1, h2, h3] = result;
        expect(h0).toMatchObject({ window: { allowed: true, remaining: 2 }, hold: { ok: true } });
        expect(settled).toMatchObject({ settled: true, charged: 70n, held: 100n });
        expect(h1).toMatchObject({ window: { allowed: true, remaining: 1 }, hold: { ok: true } });
        expect(h2).toMatchObject({ window: { allowed: true, remaining: 0 }, hold: { ok: true } });
        expect(h3).toMatchObject({ window: { allowed: false, remaining: 0 }, hold: null });
        // One clock reading: every hit of the window sees its oldest hit (the first, at this
        // very instant) leave a whole window later.
        for (const h of [h0, h1, h2, h3]) expect(h?.window.resetMs).toBe(60_000);
        expect(await stores.billing.wallet(a.accountId)).toEqual({ balance: 10_000n - 70n, held: 200n });
        // What the scripts ran for this account: one batch, so one trim, one count, one read and
        // one expiry of the window, one prune and one expiry update of the hold keys; one ZADD
        // per counted hit and per hold.
        const ran = commands.filter((c) => c.some((x) => x.includes(tag))).map((c) => (c[0] ?? '').toUpperCase());
        const times = (name: string) => ran.filter((c) => c === name).length;
        expect(times('ZREMRANGEBYSCORE')).toBe(1);
        expect(times('ZCARD')).toBe(1);
        expect(times('PEXPIRE')).toBe(1);
        expect(times('ZRANGEBYSCORE')).toBe(1);
        expect(times('ZADD')).toBe(3 + 3);
        expect(times('PEXPIREAT')).toBe(3);
        // The hold keys, gone and back within the batch, expire with their last hold.
        const [, last] = await client.zrange(holdKeys[0] as string, '-1', '-1', 'WITHSCORES');
        expect(Number(last)).toBeGreaterThan(Date.now());
        for (const k of holdKeys) expect(await client.call('PEXPIRETIME', k)).toBe(Number(last));
        expect(await client.pttl(`${PREFIX}${tag}:rl:${esc(hit.bucket)}`)).toBeGreaterThan(0);
      } finally {
        await stores.close();
        stop();
        client.disconnect();
      }
    });

    it('in a batch, a 0 ms window and a hold that expires at once count as they do sent alone', async () => {
      const stores = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      try {
        const a = await account(stores, 100n);
        const bucket = uid('zero');
        const [first, second] = [hold(a, 100n, { ttlMs: 0 }), hold(a, 100n)];
        // Issued in one turn: one batch, one script for the account and one for the bucket.
        const [z1, z2, h1, h2] = await Promise.all([
          stores.limits.hit(bucket, 1, 0),
          stores.limits.hit(bucket, 1, 0),
          stores.billing.placeHold(first),
          stores.billing.placeHold(second),
        ]);
        // A 0 ms window holds no hit past its instant, so each hit finds it empty.
        expect(z1).toMatchObject({ allowed: true });
        expect(z2).toMatchObject({ allowed: true });
        // The first hold expired at the instant it was placed: the second finds the wallet free.
        expect(h1).toEqual({ ok: true });
        expect(h2).toEqual({ ok: true });
        expect(await stores.billing.wallet(a.accountId)).toEqual({ balance: 100n, held: 100n });
      } finally {
        await stores.close();
      }
    });

    it('a malformed batch fails whole, before it writes anything', async () => {
      const client = new Redis(REDIS_URL);
      const ctx = new RedisContext(client, PREFIX, 1_000);
      try {
        const window = `${PREFIX}{${uid('w')}}:rl`;
        // A window hit (mgHit: code 1, one key, three arguments), then a code no script has.
        await expect(ctx.scripts.mgBatch([window], [1, 3, 5, 60_000, 'm1', 99, 0])).rejects.toThrow(/malformed operation/);
        // A key count that does not match the operations'.
        await expect(ctx.scripts.mgBatch([window, window], [1, 3, 5, 60_000, 'm1'])).rejects.toThrow(/take 1 keys, got 2/);
        expect(await client.exists(window)).toBe(0);
        expect(await ctx.scripts.mgBatch([window], [1, 3, 5, 60_000, 'm1'])).toEqual([[1, 4, 60_000]]);
      } finally {
        ctx.markClosed();
        client.disconnect();
      }
    });

    it('many calls at once on one account: every hold and settle lands exactly, as without batches', async () => {
      const stores = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      try {
        const a = await account(stores, 1_000_000n);
        const calls = Array.from({ length: 200 }, (_, i) => ({ req: hold(a, 1_000n), cost: BigInt(i % 7) * 100n }));
        await Promise.all(
          calls.map(async ({ req, cost }) => {
            const counted = await stores.billing.hitAndPlaceHold!({ bucket: `key:${a.keyId}`, limit: 1_000, windowMs: 60_000, accountId: a.accountId }, req);
            expect(counted.hold).toEqual({ ok: true });
            const s = await stores.billing.settle(settleReq(a, req.holdId, cost));
            expect(s).toMatchObject({ settled: true, charged: cost });
          }),
        );
        const spent = calls.reduce((sum, c) => sum + c.cost, 0n);
        expect(await stores.billing.wallet(a.accountId)).toEqual({ balance: 1_000_000n - spent, held: 0n });
        expect((await stores.billing.ledger(a.accountId)).length).toBe(201);
      } finally {
        await stores.close();
      }
    });
  });

  describe('redis: failures', () => {
    it('a store pointed at a dead port rejects promptly instead of hanging', async () => {
      const stores = createRedisStores({ url: 'redis://127.0.0.1:1', keyPrefix: PREFIX });
      try {
        const a = { accountId: uid('acct'), keyId: uid('key') };
        // Each watched as soon as it is issued: one failing while another is awaited would be
        // an unhandled rejection for a moment.
        const failed = await Promise.all([
          timed(stores.billing.placeHold(hold(a, 1n))),
          timed(stores.billing.settle(settleReq(a, uid('hold'), 1n))),
          timed(stores.limits.hit(uid('bucket'), 5, 1_000)),
          timed(stores.limits.acquireLease(uid('pool'), 1, uid('lease'), 1_000)),
          timed(stores.keys.findByDigest(uid('digest'))),
        ]);
        for (const r of failed) {
          expect(r.storeError).toBe(true);
          expect(r.ms).toBeLessThan(2_500);
        }
      } finally {
        const r = await timed(stores.close());
        expect(r.ms).toBeLessThan(2_500);
      }
    });

    const hasRedisServer = spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
    if (!hasRedisServer) console.warn('redis-server is not installed: skipping the Redis outage-and-recovery test');

    it.runIf(hasRedisServer)('fails fast while Redis is down and recovers without a restart', async () => {
      const port = await freePort();
      const url = `redis://127.0.0.1:${port}`;
      const start = (): ChildProcess =>
        spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
          stdio: 'ignore',
        });
      const ping = async () => {
        const c = new Redis(url, { lazyConnect: true, retryStrategy: () => null, enableOfflineQueue: false });
        c.on('error', () => {});
        try {
          await c.connect();
          return (await c.ping()) === 'PONG';
        } finally {
          c.disconnect();
        }
      };
      const stopped = (p: ChildProcess) =>
        new Promise<void>((resolve) => (p.exitCode !== null || p.signalCode !== null ? resolve() : p.once('exit', () => resolve())));

      let server = start();
      const stores = createRedisStores({ url, keyPrefix: PREFIX });
      try {
        await eventually('private redis-server up', ping, Boolean);
        const a = await account(stores, 1_000n);
        expect(await stores.billing.placeHold(hold(a, 100n))).toEqual({ ok: true });

        server.kill('SIGKILL');
        await stopped(server);
        // Both issued at once and each watched at once: one that fails while the other is still
        // awaited would otherwise be an unhandled rejection for a moment (the runner counts it).
        const failed = await Promise.all([timed(stores.billing.placeHold(hold(a, 1n))), timed(stores.limits.hit(uid('bucket'), 5, 1_000))]);
        for (const r of failed) {
          expect(r.storeError).toBe(true);
          expect(r.ms).toBeLessThan(2_500);
        }

        server = start();
        await eventually('private redis-server back', ping, Boolean);
        // The same store object works again once its client has reconnected.
        const bucket = uid('bucket');
        await eventually('store recovery', () => stores.limits.hit(bucket, 1_000, 60_000), (r) => r.allowed);
        const b = await account(stores, 50n);
        expect(await stores.billing.placeHold(hold(b, 50n))).toEqual({ ok: true });
      } finally {
        await stores.close();
        server.kill('SIGKILL');
        await stopped(server);
      }
    });

    it('close() leaves a client it was given open, and closes one it created', async () => {
      const client = new Redis(REDIS_URL);
      const given = createRedisStores({ client, keyPrefix: PREFIX });
      await given.limits.hit(uid('bucket'), 1, 1_000);
      await given.close();
      expect(await client.ping()).toBe('PONG');
      client.disconnect();

      const owned = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
      await owned.limits.hit(uid('bucket'), 1, 1_000);
      await owned.close();
      await expect(owned.limits.hit(uid('bucket'), 1, 1_000)).rejects.toBeInstanceOf(RedisStoreError);
    });

    it('refuses a key prefix that would break hash tags', () => {
      const client = new Redis({ lazyConnect: true });
      expect(() => createRedisStores({ client, keyPrefix: 'a{b}:' })).toThrow(RangeError);
      expect(() => createRedisStores({ url: REDIS_URL, keyPrefix: 'a}' })).toThrow(RangeError);
      client.disconnect();
    });
  });
}
