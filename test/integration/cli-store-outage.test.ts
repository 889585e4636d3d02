/**
 * The CLI through a store outage, with a redis-server of the test's own that it stops and
 * starts again on the same port, or PostgreSQL behind a TCP proxy the test closes and opens:
 * - `serve` started while Redis is down listens, answers 503 service_unavailable until Redis
 *   answers (as its start-up message says), then serves normally, without a restart;
 * - `serve --workers 2`: with Redis down, a worker killed (as an OOM kill would) is replaced;
 *   the primary never stops the healthy worker nor exits, and once Redis is back both
 *   workers serve;
 * - `serve --workers 2` on PostgreSQL, which a worker cannot start without (its migrations
 *   need the server): a replacement that fails to start is retried with backoff until the
 *   server is back, and the healthy worker and the primary keep running.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { COMPLETION_PRICE, PROMPT_PRICE, eventually, testKey } from '../helpers/gateway.js';
import { type GatewayProcess, startGatewayProcess, writeConfig } from '../helpers/processes.js';
import { freePort, hasRedisServer, type RedisProcess, startRedisServer } from '../helpers/redis-servers.js';

const MODEL = 'test/chat';
const ACCOUNT = 'acct_outage';
const key = testKey();

function config(redisPort: number, storage?: Record<string, unknown>) {
  return {
    upstreams: { sim: { simulate: true, chunkDelayMs: 0 } },
    models: [{ id: MODEL, upstream: 'sim', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE } }],
    accounts: [{ id: ACCOUNT, walletUsd: 100 }],
    keys: [{ key, account: ACCOUNT }],
    limits: { keyRequestsPerMinute: 100_000, ipRequestsPerMinute: 100_000 },
    storage: storage ?? { driver: 'redis', url: `redis://127.0.0.1:${redisPort}`, keyPrefix: `mg-outage-${randomBytes(4).toString('hex')}:` },
    settleJournalDir: null,
    shutdownGraceMs: 2_000,
  };
}

const chat = async (g: GatewayProcess) => {
  const res = await fetch(`${g.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }),
  });
  const body = (await res.json()) as { error?: { code: string } };
  return { status: res.status, code: body.error?.code, retryAfter: res.headers.get('retry-after') };
};

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const exited = (g: GatewayProcess) => g.child.exitCode !== null || g.child.signalCode !== null;

describe.runIf(hasRedisServer)('the CLI through a Redis outage', () => {
  let redis: RedisProcess | undefined;
  let gateway: GatewayProcess | undefined;

  beforeAll(() => undefined);
  afterAll(async () => {
    await gateway?.kill('SIGKILL');
    await redis?.kill();
  });

  it('serve started while Redis is down serves 503s, then serves normally once it answers', async () => {
    const port = await freePort();
    gateway = await startGatewayProcess(writeConfig(config(port)), {}, [], { startMs: 60_000 });
    expect(gateway.output()).toMatch(/Serving anyway: calls get 503 until it answers/);
    for (let i = 0; i < 3; i++) {
      const r = await chat(gateway);
      expect(r).toMatchObject({ status: 503, code: 'service_unavailable' });
      expect(r.retryAfter).not.toBeNull();
    }
    redis = await startRedisServer([], port);
    await eventually(async () => (await chat(gateway!)).status === 200, 'a call succeeds once Redis answers', 20_000);
    expect(exited(gateway)).toBe(false);
    await gateway.kill('SIGTERM');
    gateway = undefined;
    await redis.kill();
    redis = undefined;
  }, 120_000);

  it('--workers: a worker killed during the outage is replaced; the others and the primary stay', async () => {
    redis = await startRedisServer();
    const port = redis.port;
    gateway = await startGatewayProcess(writeConfig(config(port)), {}, [], { args: ['--workers', '2'], startMs: 90_000 });
    const pids = /pids (\d+), (\d+)/.exec(gateway.output())!.slice(1).map(Number);
    expect(pids).toHaveLength(2);
    expect((await chat(gateway)).status).toBe(200);

    await redis.kill();
    redis = undefined;
    // The worker dies as an OOM kill would; the other keeps answering 503s.
    process.kill(pids[0]!, 'SIGKILL');
    await eventually(() => /starting another/.test(gateway!.output()), 'the primary replaces the worker', 20_000);
    // Long enough for a replacement to start (and fail, were it going to) and be retried.
    await new Promise((r) => setTimeout(r, 8_000));
    expect(exited(gateway), gateway.output()).toBe(false);
    expect(alive(pids[1]!), 'the healthy worker still runs').toBe(true);
    expect(gateway.output()).not.toMatch(/stopping/);
    for (let i = 0; i < 4; i++) expect((await chat(gateway)).status).toBe(503);

    redis = await startRedisServer([], port);
    // Both workers serve: every call of a run succeeds (the port spreads them over both).
    await eventually(
      async () => (await Promise.all(Array.from({ length: 6 }, () => chat(gateway!)))).every((r) => r.status === 200),
      'every call succeeds once Redis is back',
      30_000,
    );
    expect(exited(gateway)).toBe(false);
    await gateway.kill('SIGTERM');
    expect(gateway.child.exitCode).toBe(0);
    gateway = undefined;
  }, 180_000);
});

const pgDown = await postgresProblem(POSTGRES_URL);

describe.runIf(pgDown === null || process.env.CI === 'true')('--workers through a PostgreSQL outage', () => {
  const schema = freshSchema('mgworkers');
  let gateway: GatewayProcess | undefined;
  afterAll(async () => {
    await gateway?.kill('SIGKILL');
    if (pgDown === null) await dropSchema(schema);
  });

  it('a worker that cannot start is retried with backoff; the healthy one and the primary stay', async () => {
    expect(pgDown, `PostgreSQL at ${POSTGRES_URL}`).toBeNull();
    const target = new URL(POSTGRES_URL);
    const proxy = await startFaultProxy(`http://${target.hostname}:${target.port || 5432}`);
    try {
      target.host = `127.0.0.1:${proxy.port}`;
      const storage = { driver: 'postgres', url: target.toString(), schema, timeoutMs: 1_000 };
      gateway = await startGatewayProcess(writeConfig(config(0, storage)), {}, [], { args: ['--workers', '2'], startMs: 90_000 });
      const pids = /pids (\d+), (\d+)/.exec(gateway.output())!.slice(1).map(Number);
      expect((await chat(gateway)).status).toBe(200);

      // PostgreSQL goes away (connections refused); a worker dies; its replacement cannot
      // run its migrations, so it exits before it listens, again and again.
      await proxy.stopListening();
      process.kill(pids[0]!, 'SIGKILL');
      await eventually(() => (gateway!.output().match(/exited while starting/g) ?? []).length >= 2, 'replacements fail and are retried', 30_000);
      expect(exited(gateway), gateway.output()).toBe(false);
      expect(alive(pids[1]!), 'the healthy worker still runs').toBe(true);
      expect((await chat(gateway)).status).toBe(503);

      await proxy.listen();
      await eventually(
        async () => (await Promise.all(Array.from({ length: 6 }, () => chat(gateway!)))).every((r) => r.status === 200),
        'every call succeeds once PostgreSQL is back',
        40_000,
      );
      expect(exited(gateway)).toBe(false);
      await gateway.kill('SIGTERM');
      expect(gateway.child.exitCode).toBe(0);
      gateway = undefined;
    } finally {
      await proxy.close();
    }
  }, 180_000);
});
