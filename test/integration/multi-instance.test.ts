/**
 * Several gateway processes (the CLI, `serve`) sharing one real Redis (the shared suite in
 * multi-instance.suite.ts); and a Redis outage: 503 quickly, service resumes after.
 * test/integration/redis-cluster.test.ts runs the same suite on a Redis Cluster.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, testKey } from '../helpers/gateway.js';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/processes.js';
import { freePort } from '../helpers/redis-servers.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';
import { REDIS_URL, redisProblem } from '../../bench/redis-util.js';
import { baseConfig, chat, cleanupPrefix, multiInstanceSuite } from './multi-instance.suite.js';

const redisAnswers = async (url: string) => (await redisProblem(url)) === null;

const reachable = await redisAnswers(REDIS_URL);
if (!reachable && process.env.CI !== 'true') {
  console.warn(`\n!!! SKIPPING the multi-instance tests: Redis at ${REDIS_URL} is unreachable (under CI=true this fails).\n`);
}

const PREFIX = `mgmi:${randomBytes(4).toString('hex')}:`;

describe.runIf(reachable || process.env.CI === 'true')('one Redis', () => {
  it('answers (required under CI=true)', () => {
    expect(reachable, `Redis at ${REDIS_URL} must answer under CI=true`).toBe(true);
  });
  multiInstanceSuite(
    'one Redis',
    () => ({ driver: 'redis', url: REDIS_URL, keyPrefix: PREFIX }),
    async () => {
      if (reachable) await cleanupPrefix(REDIS_URL, PREFIX);
    },
  );
});

const hasRedisServer = spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;

describe.runIf(hasRedisServer || process.env.CI === 'true')('Redis stopped mid-test', () => {
  // A port the OS says is free (a random one could be taken, and redis-server would just exit);
  // kept for the whole test, so the restarted server comes back where the gateway looks.
  let port = 0;
  let url = '';
  const dir = mkdtempSync(join(tmpdir(), 'mg-redis-'));
  let redis: ChildProcess | undefined;
  let gw: GatewayProcess | undefined;
  let up: TestUpstream;
  const key = testKey();

  const startRedis = async () => {
    redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir], {
      stdio: 'ignore',
    });
    await eventually(() => redisAnswers(url), 'private redis-server up', 10_000);
  };
  const stopRedis = async () => {
    const r = redis;
    if (!r || r.exitCode !== null) return;
    const exited = new Promise((res) => r.once('exit', res));
    r.kill('SIGKILL');
    await exited;
  };

  beforeAll(async () => {
    expect(hasRedisServer, 'redis-server must be installed under CI=true').toBe(true);
    up = await startTestUpstream();
    port = await freePort();
    url = `redis://127.0.0.1:${port}`;
    await startRedis();
    gw = await startGatewayProcess(
      writeConfig({
        ...baseConfig(up.url, { driver: 'redis', url, keyPrefix: 'mgout:' }, 1_000_000_000n),
        keys: [{ key, account: 'acct_rich' }],
      }),
    );
  }, 60_000);

  afterAll(async () => {
    await gw?.kill('SIGKILL');
    await stopRedis();
    await up?.close();
  });

  it('answers 503 quickly with no upstream call, and resumes when Redis returns', async () => {
    expect((await chat(gw!, key)).status).toBe(200);
    await stopRedis();
    const before = up.requests.length;
    const t0 = Date.now();
    const down = await chat(gw!, key);
    const elapsed = Date.now() - t0;
    expect(down.status).toBe(503);
    expect(down.headers.get('retry-after')).toBe('1');
    expect(((await down.json()) as { error: { code: string } }).error.code).toBe('service_unavailable');
    // "Quickly" is a behaviour (no hanging queue), bounded generously, not a speed benchmark.
    expect(elapsed).toBeLessThan(5_000);
    expect(up.requests.length).toBe(before);
    await startRedis();
    await eventually(async () => (await chat(gw!, key)).status === 200, 'service resumed without a restart', 15_000);
  });
});
