/**
 * Several gateway processes (the CLI, `serve`) sharing one real PostgreSQL schema: limits,
 * holds, jobs and in-flight slots are exact across them; a killed instance's slots and image
 * jobs are recovered by the others; a settled charge survives kill -9 of every instance.
 * Also: PostgreSQL books with the limits on Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';
import { chatCost, worstCaseHold } from '../helpers/billing.js';
import { COMPLETION_PRICE, PROMPT_PRICE, eventually, testKey } from '../helpers/gateway.js';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/processes.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';
import { Redis } from 'ioredis';

const reachable = (await postgresProblem(POSTGRES_URL)) === null;
if (!reachable && process.env.CI !== 'true') {
  console.warn(`\n!!! SKIPPING the PostgreSQL multi-instance tests: PostgreSQL at ${POSTGRES_URL} is unreachable (under CI=true this fails).\n`);
}

const SCHEMA = freshSchema('mgmi');
const MODEL = 'test/chat';
const IMAGE_MODEL = 'sim/image';
const keys = { limit: testKey(), holdsA: testKey(), holdsB: testKey(), holdsView: testKey(), images: testKey(), crash: testKey(), durable: testKey(), durableView: testKey() };
const messages = [{ role: 'user', content: 'hi' }];
const MAX_TOKENS = 500;
const USAGE = { prompt_tokens: 5, completion_tokens: 5 };

let upstream: TestUpstream;
let instances: GatewayProcess[] = [];
let tenHolds: bigint;

function baseConfig(upstreamUrl: string, walletNano: bigint, storage: Record<string, unknown>) {
  const walletUsd = `${walletNano / 1_000_000_000n}.${(walletNano % 1_000_000_000n).toString().padStart(9, '0')}`;
  return {
    upstreams: {
      test: { baseUrl: upstreamUrl, apiKey: 'upstream-key', timeoutMs: 20_000 },
      sim: { simulate: true, imageDelayMs: 1500, videoDurationMs: 500, chunkDelayMs: 0 },
    },
    models: [
      { id: MODEL, upstream: 'test', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE } },
      { id: IMAGE_MODEL, type: 'image', upstream: 'sim', pricing: { unit: 'image', from: '0.02', tiers: {} } },
    ],
    accounts: [
      { id: 'acct_holds', walletUsd },
      { id: 'acct_rich', walletUsd: 100 },
      { id: 'acct_crash', walletUsd: 100 },
      { id: 'acct_durable', walletUsd: 100 },
    ],
    keys: [
      { key: keys.limit, account: 'acct_rich' },
      { key: keys.holdsA, account: 'acct_holds' },
      { key: keys.holdsB, account: 'acct_holds' },
      // Read-only views of the accounts, so polling never spends the calling keys' rate limit.
      { key: keys.holdsView, account: 'acct_holds' },
      { key: keys.durableView, account: 'acct_durable' },
      { key: keys.images, account: 'acct_rich' },
      { key: keys.crash, account: 'acct_crash' },
      { key: keys.durable, account: 'acct_durable' },
    ],
    limits: {
      keyRequestsPerMinute: 40,
      ipRequestsPerMinute: 1_000_000,
      inFlightImageJobs: 2,
      inlineImageDeadlineMs: 200,
      inFlightLeaseTtlMs: 1000,
      jobPollIntervalMs: 100,
    },
    storage,
  };
}

const pgStorage = { driver: 'postgres', url: POSTGRES_URL, schema: SCHEMA };
const auth = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
const chat = (g: GatewayProcess, key: string) =>
  fetch(`${g.baseURL}/chat/completions`, { method: 'POST', headers: auth(key), body: JSON.stringify({ model: MODEL, messages, max_tokens: MAX_TOKENS }) });
const image = (g: GatewayProcess, key: string, prompt = 'a slow lighthouse') =>
  fetch(`${g.baseURL}/images/generations`, { method: 'POST', headers: auth(key), body: JSON.stringify({ model: IMAGE_MODEL, prompt }) });
const getJson = async (url: string, key: string) => (await (await fetch(url, { headers: auth(key) })).json()) as Record<string, any>;

/** Polls every 250 ms: the keys here allow only 40 requests a minute. */
async function poll(check: () => Promise<boolean>, what: string, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe.runIf(reachable || process.env.CI === 'true')('several gateway processes on one PostgreSQL', () => {
  beforeAll(async () => {
    expect(reachable, `PostgreSQL at ${POSTGRES_URL} must answer under CI=true`).toBe(true);
    upstream = await startTestUpstream();
    tenHolds = 10n * (await worstCaseHold(messages, MAX_TOKENS));
    const file = writeConfig(baseConfig(upstream.url, tenHolds, pgStorage));
    // Three instances start at once on a new schema: migrations run once, wallets are credited once.
    instances = await Promise.all([0, 1, 2].map(() => startGatewayProcess(file)));
  }, 60_000);

  afterAll(async () => {
    await Promise.all(instances.map((g) => g.kill('SIGKILL')));
    await upstream?.close();
    if (reachable) await dropSchema(SCHEMA);
  });

  it('seeding from one config by three instances credited the wallet once', async () => {
    const body = await getJson(`${instances[0]!.baseURL}/key`, keys.holdsA);
    expect(body.data.wallet.balance).toBe(Number(tenHolds) / 1e9);
  });

  it('the per-key limit is exact across instances', async () => {
    const results = await Promise.all(
      Array.from({ length: 60 }, (_, i) => fetch(`${instances[i % 3]!.baseURL}/models`, { headers: auth(keys.limit) })),
    );
    expect(results.filter((r) => r.status === 200)).toHaveLength(40);
    const refused = results.filter((r) => r.status === 429);
    expect(refused).toHaveLength(20);
    const body = (await refused[0]!.json()) as { error: { metadata: { limit: string } } };
    expect(body.error.metadata.limit).toBe('key_requests_per_minute');
    expect(Number(refused[0]!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  });

  it('50 concurrent calls across instances against 10 holds: exactly 10 succeed', async () => {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    upstream.setBehavior({ kind: 'json', content: 'ok', usage: USAGE, gate });
    const refusals: Response[] = [];
    const calls = Array.from({ length: 50 }, (_, i) =>
      chat(instances[i % 3]!, i % 2 ? keys.holdsA : keys.holdsB).then((r) => {
        if (r.status === 402) refusals.push(r);
        return r;
      }),
    );
    // Every refusal comes back while the 10 accepted calls are still held at the upstream.
    await eventually(() => refusals.length === 40, '40 refusals', 20_000);
    open();
    const results = await Promise.all(calls);
    expect(results.filter((r) => r.status === 200)).toHaveLength(10);
    expect(results.filter((r) => r.status === 402)).toHaveLength(40);
    await poll(async () => (await getJson(`${instances[1]!.baseURL}/key`, keys.holdsView)).data.wallet.held === 0, 'holds settled', 10_000);
    const body = await getJson(`${instances[1]!.baseURL}/key`, keys.holdsView);
    expect(body.data.wallet.balance).toBe(Number(tenHolds - 10n * chatCost(USAGE.prompt_tokens, USAGE.completion_tokens)) / 1e9);
    upstream.setBehavior({ kind: 'json', content: 'ok' });
  });

  it('an image job submitted on one instance is polled on another, billed once', async () => {
    const res = await image(instances[0]!, keys.images);
    expect(res.status).toBe(202);
    const job = (await res.json()) as { id: string };
    let last: Record<string, any> = {};
    await poll(
      async () => (last = await getJson(`${instances[2]!.baseURL}/images/${job.id}`, keys.images)).status === 'completed',
      'job completed on another instance',
      10_000,
    );
    expect(last.result.data).toHaveLength(1);
    const usage = await getJson(`${instances[1]!.baseURL}/key`, keys.images);
    expect(usage.data.usage).toBe(0.02);
    expect(usage.data.wallet.held).toBe(0);
  });

  it('the in-flight cap counts across instances, and frees on completion', async () => {
    const [a, b] = await Promise.all([image(instances[0]!, keys.images), image(instances[1]!, keys.images)]);
    expect([a.status, b.status]).toEqual([202, 202]);
    const third = await image(instances[2]!, keys.images);
    expect(third.status).toBe(429);
    expect(((await third.json()) as { error: { metadata: { limit: string } } }).error.metadata.limit).toBe('in_flight_image_jobs');
    for (const r of [a, b]) {
      const id = ((await r.json()) as { id: string }).id;
      await poll(async () => (await getJson(`${instances[2]!.baseURL}/images/${id}`, keys.images)).status === 'completed', 'slow images completed', 10_000);
    }
    await poll(async () => (await image(instances[2]!, keys.images, 'after')).status !== 429, 'slot freed', 5_000);
  });

  it('kill -9 of an instance: its slot frees within the lease TTL and its image job fails as job_lost, uncharged', async () => {
    const victim = await startGatewayProcess(writeConfig(baseConfig(upstream.url, tenHolds, pgStorage)));
    const res = await image(victim, keys.crash);
    expect(res.status).toBe(202);
    const job = (await res.json()) as { id: string };
    await victim.kill('SIGKILL');
    let last: Record<string, any> = {};
    await poll(async () => (last = await getJson(`${instances[0]!.baseURL}/images/${job.id}`, keys.crash)).status === 'failed', 'lost job failed', 10_000);
    expect(last.error.code).toBe('job_lost');
    const key = await getJson(`${instances[1]!.baseURL}/key`, keys.crash);
    expect(key.data.usage).toBe(0);
    expect(key.data.wallet).toEqual({ balance: 100, held: 0 });
    const [x, y] = await Promise.all([image(instances[1]!, keys.crash, 'x'), image(instances[2]!, keys.crash, 'y')]);
    expect([x.status, y.status]).toEqual([202, 202]);
  });

  it('kill -9 of every instance, then a restart, loses no settled charge', async () => {
    upstream.setBehavior({ kind: 'json', content: 'ok', usage: USAGE });
    for (let i = 0; i < 6; i++) expect((await chat(instances[i % 3]!, keys.durable)).status).toBe(200);
    const cost = Number(6n * chatCost(USAGE.prompt_tokens, USAGE.completion_tokens)) / 1e9;
    await poll(async () => (await getJson(`${instances[0]!.baseURL}/key`, keys.durable)).data.usage === cost, 'six settles seen', 10_000);
    const before = (await getJson(`${instances[0]!.baseURL}/key`, keys.durableView)).data;
    await Promise.all(instances.map((g) => g.kill('SIGKILL')));
    instances = [await startGatewayProcess(writeConfig(baseConfig(upstream.url, tenHolds, pgStorage)))];
    const after = (await getJson(`${instances[0]!.baseURL}/key`, keys.durableView)).data;
    expect((await getJson(`${instances[0]!.baseURL}/key`, keys.durable)).data.usage).toBe(cost);
    expect(after.wallet).toEqual(before.wallet);
    expect(after.wallet.balance).toBe(Number(100_000_000_000n - 6n * chatCost(USAGE.prompt_tokens, USAGE.completion_tokens)) / 1e9);
  });
});

const redisReachable = (await redisProblem(REDIS_URL)) === null;

describe.runIf((reachable && redisReachable) || process.env.CI === 'true')('PostgreSQL books with limits on Redis', () => {
  const schema = freshSchema('mgrl');
  const prefix = `${schema}:`;
  let up: TestUpstream;
  let pair: GatewayProcess[] = [];

  beforeAll(async () => {
    up = await startTestUpstream();
    const file = writeConfig(
      baseConfig(up.url, 1_000_000_000n, { ...pgStorage, schema, limits: { driver: 'redis', url: REDIS_URL, keyPrefix: prefix } }),
    );
    pair = await Promise.all([0, 1].map(() => startGatewayProcess(file)));
  }, 60_000);

  afterAll(async () => {
    await Promise.all(pair.map((g) => g.kill('SIGKILL')));
    await up?.close();
    await dropSchema(schema);
    const c = new Redis(REDIS_URL);
    try {
      await deleteKeysWithPrefix(c, prefix);
    } finally {
      c.disconnect();
    }
  });

  it('the per-key limit is exact across instances and its windows live in Redis', async () => {
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => fetch(`${pair[i % 2]!.baseURL}/models`, { headers: auth(keys.limit) })),
    );
    expect(results.filter((r) => r.status === 200)).toHaveLength(40);
    const c = new Redis(REDIS_URL);
    try {
      expect((await c.keys(`${prefix}*`)).length).toBeGreaterThan(0);
    } finally {
      c.disconnect();
    }
    expect((await getJson(`${pair[0]!.baseURL}/key`, keys.holdsA)).data.wallet.balance).toBe(1);
  });
});
