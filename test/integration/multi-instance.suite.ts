/**
 * Several gateway processes (the CLI, `serve`) sharing one Redis, whatever its shape (one
 * server, a Cluster, a Sentinel-watched primary): limits, holds, jobs and in-flight slots are
 * exact across them; a killed instance's slots and image jobs are recovered by the others.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { worstCaseHold } from '../helpers/billing.js';
import { COMPLETION_PRICE, PROMPT_PRICE, eventually, testKey } from '../helpers/gateway.js';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/processes.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';
import { deleteKeysWithPrefix } from '../../bench/redis-util.js';

export const MODEL = 'test/chat';
export const IMAGE_MODEL = 'sim/image';
export const keys = { limit: testKey(), holdsA: testKey(), holdsB: testKey(), images: testKey(), crash: testKey(), empty: testKey() };
export const messages = [{ role: 'user', content: 'hi' }];
export const MAX_TOKENS = 500;

/** What `storage` of a gateway config holds for Redis: one URL, a Cluster or Sentinel. */
export type RedisStorage = { driver: 'redis'; keyPrefix: string } & ({ url: string } | { cluster: string[] } | { sentinels: string[]; name: string });

export function baseConfig(upstreamUrl: string, storage: RedisStorage, walletNano: bigint) {
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
      { id: 'acct_empty', walletUsd: 0 },
    ],
    keys: [
      { key: keys.limit, account: 'acct_rich' },
      { key: keys.holdsA, account: 'acct_holds' },
      { key: keys.holdsB, account: 'acct_holds' },
      { key: keys.images, account: 'acct_rich' },
      { key: keys.crash, account: 'acct_crash' },
      { key: keys.empty, account: 'acct_empty' },
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

export const auth = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
export const chat = (g: GatewayProcess, key: string) =>
  fetch(`${g.baseURL}/chat/completions`, {
    method: 'POST',
    headers: auth(key),
    body: JSON.stringify({ model: MODEL, messages, max_tokens: MAX_TOKENS }),
  });
export const image = (g: GatewayProcess, key: string, prompt = 'a slow lighthouse') =>
  fetch(`${g.baseURL}/images/generations`, { method: 'POST', headers: auth(key), body: JSON.stringify({ model: IMAGE_MODEL, prompt }) });
export const getJson = async (url: string, key: string) => (await (await fetch(url, { headers: auth(key) })).json()) as Record<string, any>;

/** Polls every 250 ms: the keys here allow only 40 requests a minute. */
export async function poll(check: () => Promise<boolean>, what: string, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

export async function cleanupPrefix(url: string, prefix: string) {
  const c = new Redis(url);
  try {
    await deleteKeysWithPrefix(c, prefix);
  } finally {
    c.disconnect();
  }
}

/**
 * Three gateway processes (the CLI) started from one config on `storage()`: `storage` is read
 * in beforeAll, so a Redis the caller starts in its own beforeAll can be named. `cleanup`
 * deletes the run's keys.
 */
export function multiInstanceSuite(label: string, storage: () => RedisStorage, cleanup: () => Promise<void>): void {
  let upstream: TestUpstream;
  let instances: GatewayProcess[] = [];
  let tenHolds: bigint;

  describe(`several gateway processes on ${label}`, () => {
    beforeAll(async () => {
      upstream = await startTestUpstream();
      tenHolds = 10n * (await worstCaseHold(messages, MAX_TOKENS));
      const file = writeConfig(baseConfig(upstream.url, storage(), tenHolds));
      // Three instances start from one config: seeding must not credit the wallet three times.
      instances = await Promise.all([0, 1, 2].map(() => startGatewayProcess(file)));
      // A process's first token count loads the tokenizer's tables, a synchronous stall of about
      // half a second (more on a busy machine): a 402 from an empty wallet counts its prompt
      // for the message. Taken here, one process at a time, so that no stall of three fresh
      // processes at once makes the store commands in flight time out in the tests below.
      for (const g of instances) expect((await chat(g, keys.empty)).status).toBe(402);
    }, 60_000);

    afterAll(async () => {
      await Promise.all(instances.map((g) => g.kill('SIGKILL')));
      await upstream?.close();
      await cleanup();
    });

    it('seeding from one config by three instances credited the wallet once', async () => {
      const body = await getJson(`${instances[0]!.baseURL}/key`, keys.holdsA);
      expect(body.data.wallet.balance).toBe(Number(tenHolds) / 1e9);
    });

    it('the per-key limit is exact across instances', async () => {
      const results = await Promise.all(
        Array.from({ length: 60 }, (_, i) => fetch(`${instances[i % 3]!.baseURL}/models`, { headers: auth(keys.limit) })),
      );
      const statuses = results.map((r) => r.status);
      expect(statuses.filter((s) => s === 200)).toHaveLength(40);
      const refused = results.filter((r) => r.status === 429);
      expect(refused).toHaveLength(20);
      const body = (await refused[0]!.json()) as { error: { metadata: { limit: string } } };
      expect(body.error.metadata.limit).toBe('key_requests_per_minute');
      expect(Number(refused[0]!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    });

    it('50 concurrent calls across instances against 10 holds: exactly 10 succeed', async () => {
      let open!: () => void;
      const gate = new Promise<void>((r) => (open = r));
      upstream.setBehavior({ kind: 'json', content: 'ok', usage: { prompt_tokens: 5, completion_tokens: 5 }, gate });
      const calls = Array.from({ length: 50 }, (_, i) => chat(instances[i % 3]!, i % 2 ? keys.holdsA : keys.holdsB));
      // Every refusal comes back while the 10 accepted calls are still held at the upstream.
      const settledRefusals: Response[] = [];
      const tracked = calls.map((p) =>
        p.then((r) => {
          if (r.status === 402) settledRefusals.push(r);
          return r;
        }),
      );
      await eventually(() => settledRefusals.length === 40, '40 refusals', 20_000);
      open();
      const results = await Promise.all(tracked);
      expect(results.filter((r) => r.status === 200)).toHaveLength(10);
      expect(results.filter((r) => r.status === 402)).toHaveLength(40);
      // A call is answered before its settle lands (settles run in the background): the holds
      // close soon after the last answer, not necessarily before it.
      let body: Record<string, any> = {};
      await eventually(async () => (body = await getJson(`${instances[1]!.baseURL}/key`, keys.holdsA)).data.wallet.held === 0, 'every hold to close', 10_000);
      expect(body.data.wallet.held).toBe(0);
      expect(body.data.wallet.balance).toBeGreaterThanOrEqual(0);
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
      // One image at 0.02 USD, charged once, whichever instance was polled.
      const usage = await getJson(`${instances[1]!.baseURL}/key`, keys.images);
      expect(usage.data.usage).toBe(0.02);
      expect(usage.data.wallet.held).toBe(0);
    });

    it('the in-flight cap counts across instances, and frees on completion', async () => {
      const [a, b] = await Promise.all([image(instances[0]!, keys.images), image(instances[1]!, keys.images)]);
      expect([a.status, b.status]).toEqual([202, 202]);
      const third = await image(instances[2]!, keys.images);
      expect(third.status).toBe(429);
      expect(third.headers.get('retry-after')).toBeNull();
      expect(((await third.json()) as { error: { metadata: { limit: string } } }).error.metadata.limit).toBe('in_flight_image_jobs');
      const ids = [((await a.json()) as { id: string }).id, ((await b.json()) as { id: string }).id];
      for (const id of ids) {
        await poll(
          async () => (await getJson(`${instances[2]!.baseURL}/images/${id}`, keys.images)).status === 'completed',
          'slow images completed',
          10_000,
        );
      }
      await poll(async () => (await image(instances[2]!, keys.images, 'after')).status !== 429, 'slot freed', 5_000);
    });

    it('kill -9 of an instance: its slot frees within the lease TTL and its image job fails as job_lost, uncharged', async () => {
      const victim = await startGatewayProcess(writeConfig(baseConfig(upstream.url, storage(), tenHolds)));
      const res = await image(victim, keys.crash);
      expect(res.status).toBe(202);
      const job = (await res.json()) as { id: string };
      await victim.kill('SIGKILL');
      let last: Record<string, any> = {};
      await poll(
        async () => (last = await getJson(`${instances[0]!.baseURL}/images/${job.id}`, keys.crash)).status === 'failed',
        'lost job failed',
        10_000,
      );
      expect(last.error.code).toBe('job_lost');
      const key = await getJson(`${instances[1]!.baseURL}/key`, keys.crash);
      expect(key.data.usage).toBe(0);
      expect(key.data.wallet).toEqual({ balance: 100, held: 0 });
      // Both slots of the account are usable again.
      const [x, y] = await Promise.all([image(instances[1]!, keys.crash, 'x'), image(instances[2]!, keys.crash, 'y')]);
      expect([x.status, y.status]).toEqual([202, 202]);
    });
  });
}
