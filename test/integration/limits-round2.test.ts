/**
 * Tokens per minute, budgets with periods and model allow-lists, through the gateway, on every
 * driver: memory and SQLite (one instance), PostgreSQL and Redis (two instances sharing the
 * store). The upstream holds its answers until a gate opens, so a burst of calls is admitted
 * (or refused) before any of them settles: the counts are exact, not a race.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';
import type { Gateway } from '../../src/gateway.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { createSqliteStores } from '../../src/stores/sqlite/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, MODEL, makeGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

/** Prompt tokens are free on this model, so a hold is exactly max_tokens x 0.000001 USD. */
const BUDGET_MODEL = 'test/budget';
const USAGE = { prompt_tokens: 11, completion_tokens: 7 };
const body = (model: string, maxTokens: number) => ({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens });

interface Driver {
  name: string;
  /** Stores for `count` instances sharing one backend, on the gateway clock `now` where the driver takes one. */
  open(count: number, now: () => number): Promise<Stores[]>;
  problem(): Promise<string | null>;
  cleanup(): Promise<void>;
}

const dir = mkdtempSync(join(tmpdir(), 'mg-limits2-'));
const schema = freshSchema('mglim');
const prefix = `mglim:${Math.random().toString(36).slice(2, 10)}:`;

const drivers: Driver[] = [
  { name: 'memory', open: async (_n, now) => [createMemoryStores({ now })], problem: async () => null, cleanup: async () => undefined },
  {
    name: 'sqlite',
    open: async (_n, now) => [createSqliteStores({ path: join(dir, `${Math.random().toString(36).slice(2)}.db`), now })],
    problem: async () => null,
    cleanup: async () => rmSync(dir, { recursive: true, force: true }),
  },
  {
    name: 'postgres',
    open: (n) => Promise.all(Array.from({ length: n }, () => createPostgresStores({ url: POSTGRES_URL, schema, maxConnections: 8 }))),
    problem: () => postgresProblem(POSTGRES_URL),
    cleanup: () => dropSchema(schema),
  },
  {
    name: 'redis',
    open: async (n) => Array.from({ length: n }, () => createRedisStores({ url: REDIS_URL, keyPrefix: prefix })),
    problem: () => redisProblem(REDIS_URL),
    async cleanup() {
      const client = new Redis(REDIS_URL);
      await deleteKeysWithPrefix(client, prefix);
      client.disconnect();
    },
  },
];

const problems = new Map<string, string | null>();
for (const d of drivers) problems.set(d.name, await d.problem());

for (const driver of drivers) {
  const problem = problems.get(driver.name);
  if (problem && process.env.CI !== 'true') {
    console.warn(`\n!!! SKIPPING the ${driver.name} limits tests: ${problem} (under CI=true this fails).\n`);
  }
  const shared = driver.name === 'postgres' || driver.name === 'redis';
  describe.skipIf(problem !== null && problem !== undefined && process.env.CI !== 'true')(`limits round 2 on ${driver.name}`, () => {
    let upstream: TestUpstream;
    let stores: Stores[] = [];
    let gateways: Gateway[] = [];
    let clock = Date.UTC(2026, 10, 26, 23, 0, 0);
    /** A gate the upstream's answers wait for; `open()` lets them through. */
    let gate = { promise: Promise.resolve(), open: () => {} };

    const closeGate = () => {
      let open!: () => void;
      const promise = new Promise<void>((r) => (open = r));
      gate = { promise, open };
    };

    beforeAll(async () => {
      upstream = await startTestUpstream();
      upstream.setBehavior(() => ({ kind: 'json', usage: USAGE, gate: gate.promise }));
      stores = await driver.open(shared ? 2 : 1, () => clock);
      const setup = testConfig({
        upstreamUrl: upstream.url,
        now: () => clock,
        models: [
          { id: BUDGET_MODEL, upstream: 'test', pricing: { prompt: '0', completion: '0.000001' }, maxOutputTokens: 100_000 },
          { id: 'acme/one', upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000001' } },
          { id: 'other/two', upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000001' } },
        ],
      });
      for (const s of stores) gateways.push((await makeGateway({ ...setup.options, stores: s })).gateway);
    }, 60_000);

    afterAll(async () => {
      gate.open();
      await Promise.all(gateways.map((g) => g.dispose()));
      await Promise.all(stores.map((s) => s.close()));
      await upstream?.close();
      gateways = [];
      await driver.cleanup();
    }, 60_000);

    /** POSTs `payload` to /v1/chat/completions through gateway `i` (every other call to the second instance). */
    const call = async (key: string, payload: unknown, i = 0): Promise<Response> =>
      (gateways[i % gateways.length] as Gateway).fetch(
        new Request('http://gw/v1/chat/completions', {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify(payload),
        }),
      );
    const get = async (key: string, path: string, i = 0): Promise<Response> =>
      (gateways[i % gateways.length] as Gateway).fetch(new Request(`http://gw/v1${path}`, { headers: { authorization: `Bearer ${key}` } }));

    it('130 concurrent calls against a tokens-per-minute window admit exactly what fits, then the window holds what they used', async () => {
      const admin = (gateways[0] as Gateway).admin;
      // The call's estimate (prompt as the hold counts it, plus max_tokens), read off a probe.
      const probe = await admin.createKey({ account: ACCOUNT, tokensPerMinute: 1_000_000 });
      const first = await call(probe.key, body(MODEL, 100));
      expect(first.status).toBe(200);
      const estimate = 1_000_000 - Number(first.headers.get('x-ratelimit-remaining-tokens'));
      expect(estimate).toBeGreaterThan(100);
      expect(first.headers.get('ratelimit-policy')).toContain('"tokens";q=1000000;w=60');
      expect(first.headers.get('ratelimit-policy')).toContain('"key";q=');

      // Exactly 100 estimates fit.
      const limit = 100 * estimate + estimate - 1;
      const { key } = await admin.createKey({ account: ACCOUNT, tokensPerMinute: limit });
      const before = upstream.requests.length;
      closeGate();
      const calls = Array.from({ length: 130 }, (_, i) => call(key, body(MODEL, 100), i));
      const settled: Response[] = [];
      for (const c of calls) void c.then((r) => settled.push(r));
      // Every refusal answers at once; the 100 admitted wait at the upstream.
      await upstream.waitForRequests(before + 100);
      for (let i = 0; i < 500 && settled.length < 30; i++) await new Promise((r) => setTimeout(r, 10));
      const refused = settled.filter((r) => r.status === 429);
      expect(refused).toHaveLength(30);
      for (const r of refused) {
        const err = (await r.json()) as { error: { code: string; metadata: { limit: string } } };
        expect(err.error.code).toBe('rate_limit_exceeded');
        expect(err.error.metadata.limit).toBe('key_tpm');
        const retry = Number(r.headers.get('retry-after'));
        expect(retry).toBeGreaterThanOrEqual(1);
        expect(retry).toBeLessThan(60);
      }
      expect(upstream.requests.length).toBe(before + 100);
      gate.open();
      const answers = await Promise.all(calls);
      expect(answers.filter((r) => r.status === 200)).toHaveLength(100);

      // Each admitted call was corrected to the 18 tokens it used: the next take sees 1800 used.
      const next = await call(key, body(MODEL, 100), 1);
      expect(next.status).toBe(200);
      expect(Number(next.headers.get('x-ratelimit-remaining-tokens'))).toBe(limit - 100 * 18 - estimate);
      expect(Number(next.headers.get('x-ratelimit-limit-tokens'))).toBe(limit);
    }, 60_000);

    it('a call that can never fit the window is refused without Retry-After', async () => {
      const { key } = await (gateways[0] as Gateway).admin.createKey({ account: ACCOUNT, tokensPerMinute: 50 });
      const r = await call(key, body(MODEL, 100));
      expect(r.status).toBe(429);
      expect(r.headers.get('retry-after')).toBeNull();
      expect(((await r.json()) as { error: { metadata: { limit: string } } }).error.metadata.limit).toBe('key_tpm');
    });

    it('a daily budget refuses the calls that would pass it under 50 concurrent calls, and resets at 00:00 UTC', async () => {
      clock = Date.UTC(2026, 10, 26, 23, 0, 0);
      const admin = (gateways[0] as Gateway).admin;
      // Each call holds 1000 x 0.000001 = 0.001 USD: exactly 20 fit in 0.0205.
      const { key } = await admin.createKey({ account: ACCOUNT, budgets: [{ usd: '0.0205', period: 'day' }, { usd: '5', period: 'month' }] });
      closeGate();
      const calls = Array.from({ length: 50 }, (_, i) => call(key, body(BUDGET_MODEL, 1000), i));
      const before = upstream.requests.length;
      const settled: Response[] = [];
      for (const c of calls) void c.then((r) => settled.push(r));
      await upstream.waitForRequests(before + 20);
      for (let i = 0; i < 500 && settled.length < 30; i++) await new Promise((r) => setTimeout(r, 10));
      expect(settled.filter((r) => r.status === 402)).toHaveLength(30);
      for (const r of settled) {
        const err = (await r.json()) as { error: { code: string; metadata: { limit_source: string } } };
        expect(err.error.code).toBe('insufficient_quota');
        expect(err.error.metadata.limit_source).toBe('key_daily_budget');
      }
      gate.open();
      const answers = await Promise.all(calls);
      expect(answers.filter((r) => r.status === 200)).toHaveLength(20);

      // Spent: 20 calls x 7 output tokens x 0.000001 = 0.00014; the daily budget is the tightest.
      const view = (await (await get(key, '/key', 1)).json()) as { data: Record<string, unknown> };
      expect(view.data).toMatchObject({ limit: 0.0205, limit_remaining: 0.02036, limit_reset: 'daily', resets_at: '2026-11-27T00:00:00.000Z' });

      // One call that would pass what is left is refused until midnight, then admitted.
      const big = body(BUDGET_MODEL, 20_400);
      clock = Date.UTC(2026, 10, 26, 23, 59, 59, 999);
      const late = await call(key, big);
      expect(late.status).toBe(402);
      expect(((await late.json()) as { error: { metadata: { limit_source: string } } }).error.metadata.limit_source).toBe('key_daily_budget');
      clock = Date.UTC(2026, 10, 27, 0, 0, 0);
      const fresh = await call(key, big, 1);
      expect(fresh.status).toBe(200);
    }, 60_000);

    it("an account's weekly budget binds all its keys together", async () => {
      clock = Date.UTC(2026, 10, 24, 12, 0, 0);
      const admin = (gateways[0] as Gateway).admin;
      const account = `acct_week_${Math.random().toString(36).slice(2, 8)}`;
      await admin.createAccount({ id: account, walletUsd: 10, budgets: [{ usd: '0.00101', period: 'week' }] });
      const one = await admin.createKey({ account });
      const two = await admin.createKey({ account });
      expect((await call(one.key, body(BUDGET_MODEL, 1000))).status).toBe(200);
      expect((await call(two.key, body(BUDGET_MODEL, 1000), 1)).status).toBe(200);
      // Spent 2 x 0.000007; a third hold of 0.001 passes 0.00101, whichever key asks.
      const third = await call(two.key, body(BUDGET_MODEL, 1000));
      expect(third.status).toBe(402);
      expect(((await third.json()) as { error: { metadata: { limit_source: string } } }).error.metadata.limit_source).toBe('account_weekly_budget');
      // The week starts on Monday 2026-11-30.
      clock = Date.UTC(2026, 10, 30, 0, 0, 0);
      expect((await call(two.key, body(BUDGET_MODEL, 1000), 1)).status).toBe(200);
    }, 60_000);

    it('a model allow-list refuses the models outside it and hides them from /v1/models', async () => {
      const admin = (gateways[0] as Gateway).admin;
      const { key, id } = await admin.createKey({ account: ACCOUNT, models: ['acme/*', MODEL] });
      const refused = await call(key, body('other/two', 10), 1);
      expect(refused.status).toBe(403);
      const err = ((await refused.json()) as { error: { code: string; param: string; message: string } }).error;
      expect(err).toMatchObject({ code: 'model_not_allowed', param: 'model' });
      expect(err.message).toContain('other/two');
      expect((await call(key, body('acme/one', 10))).status).toBe(200);
      expect((await call(key, body(MODEL, 10), 1)).status).toBe(200);

      const listed = (await (await get(key, '/models', 1)).json()) as { data: { id: string }[] };
      expect(listed.data.map((m) => m.id).sort()).toEqual(['acme/one', MODEL].sort());
      expect((await get(key, '/models/other/two')).status).toBe(404);
      expect((await get(key, '/models/acme/one', 1)).status).toBe(200);

      // Widening the list lets the model through (the instance that changed it forgot its cached key).
      await admin.setKeyLimits(id, { models: ['*'] });
      expect((await call(key, body('other/two', 10), 0)).status).toBe(200);
    }, 60_000);
  });
}
