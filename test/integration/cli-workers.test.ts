/**
 * `model-gateway serve --workers N`: the real CLI as N processes on one port over SQLite and
 * Redis. Calls are answered; SIGTERM drains every worker (a stream in flight finishes), the
 * primary exits 0, and every call's charge is in the books (the ledger has one per call, no
 * hold is left, the audit adds up). The memory driver is refused at start-up with a clear
 * message, and so is a bad --workers value.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';
import { COMPLETION_PRICE, PROMPT_PRICE, eventually, testKey } from '../helpers/gateway.js';
import { runCli, startGatewayProcess, tokenChargesOf, writeConfig } from '../helpers/processes.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const MODEL = 'test/chat';
const redisUp = (await redisProblem(REDIS_URL)) === null;
const ACCOUNT = 'acct_workers';

let up: TestUpstream;
beforeAll(async () => {
  up = await startTestUpstream();
});
afterAll(() => up.close());

function config(storage: Record<string, unknown>, journal: string, key: string) {
  return {
    upstreams: { test: { baseUrl: up.url, apiKey: 'upstream-key', timeoutMs: 20_000 } },
    models: [{ id: MODEL, upstream: 'test', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE } }],
    accounts: [{ id: ACCOUNT, walletUsd: 100 }],
    keys: [{ key, account: ACCOUNT }],
    limits: { keyRequestsPerMinute: 100_000, ipRequestsPerMinute: 100_000 },
    storage,
    settleJournalDir: journal,
    shutdownGraceMs: 20_000,
    metrics: { path: '/metrics' },
  };
}

/** The answered calls a scrape of `/metrics` counts (every 2xx of every route), on a connection of its own. */
async function answeredCalls(baseURL: string): Promise<number> {
  const res = await fetch(`${baseURL.replace(/\/v1$/, '')}/metrics`, { headers: { connection: 'close' } });
  expect(res.status).toBe(200);
  let n = 0;
  for (const line of (await res.text()).split('\n')) {
    if (line.startsWith('model_gateway_requests_total{') && /status="2\d\d"/.test(line) && line.includes(`model="${MODEL}"`)) n += Number(line.split(' ').at(-1));
  }
  return n;
}

const call = (baseURL: string, key: string, stream: boolean, i: number) =>
  fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: `call ${i}` }], max_tokens: 8, stream }),
  });

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Two workers over `storage`: calls, a drain with a stream in flight, then the books. */
async function twoWorkers(storage: Record<string, unknown>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mg-workers-'));
  const key = testKey();
  const file = writeConfig(config(storage, join(dir, 'journal'), key));
  try {
    const gw = await startGatewayProcess(file, {}, [], { args: ['--workers', '2'], startMs: 150_000 });
    const pids = /2 worker processes on one port \(pids (\d+), (\d+)\)/.exec(gw.output());
    expect(pids, gw.output()).not.toBeNull();
    const workerPids = [Number(pids![1]), Number(pids![2])];
    expect(workerPids.every(alive)).toBe(true);

    // Plain and streamed calls, several at once so both workers take some.
    up.setBehavior({ kind: 'json' });
    for (const a of await Promise.all(Array.from({ length: 6 }, (_, i) => call(gw.baseURL, key, false, i)))) {
      expect(a.status).toBe(200);
      expect(((await a.json()) as { object: string }).object).toBe('chat.completion');
    }
    up.setBehavior({ kind: 'stream', chunks: ['one ', 'two ', 'three'] });
    for (const a of await Promise.all(Array.from({ length: 6 }, (_, i) => call(gw.baseURL, key, true, i)))) {
      expect(a.status).toBe(200);
      expect((await a.text()).trimEnd().endsWith('data: [DONE]')).toBe(true);
    }

    // A scrape reaches one worker, and answers for both: every scrape counts all 12 calls.
    await eventually(async () => (await answeredCalls(gw.baseURL)) === 12, 'the 12 calls counted');
    for (let i = 0; i < 6; i++) expect(await answeredCalls(gw.baseURL)).toBe(12);

    // A stream in flight when SIGTERM comes is finished, not cut.
    up.setBehavior({ kind: 'stream', chunks: Array.from({ length: 8 }, (_, i) => `c${i} `), delayMs: 150 });
    const inFlight = await call(gw.baseURL, key, true, 99);
    expect(inFlight.status).toBe(200);
    const rest = inFlight.text();
    await eventually(() => (up.requests.at(-1)?.chunksSent ?? 0) >= 2, 'the stream to start');
    const exit = new Promise<number | null>((resolve) => gw.child.once('exit', (code) => resolve(code)));
    gw.child.kill('SIGTERM');
    const tail = await rest;
    expect(tail.trimEnd().endsWith('data: [DONE]'), tail).toBe(true);
    expect(await exit, gw.output()).toBe(0);
    expect(workerPids.some(alive)).toBe(false);
    expect(gw.output()).toMatch(/draining 2 workers/);

    // Every call's charge is in the books, and nothing is left held.
    const charges = await tokenChargesOf(file, ACCOUNT);
    expect(charges).toHaveLength(13);
    for (const c of charges) expect(Number(c.cost_usd)).toBeGreaterThan(0);
    const wallet = await runCli(['wallet', 'show', '--config', file, '--account', ACCOUNT]);
    expect(JSON.parse(wallet.stdout)).toMatchObject({ heldUsd: '0' });
    const audit = await runCli(['audit', '--config', file, '--account', ACCOUNT]);
    expect(audit.code, audit.stdout + audit.stderr).toBe(0);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * How many of `n` calls at once (each on a connection of its own, so both workers take some)
 * pass `key`'s limits. The upstream holds every admitted call until all have been answered or
 * refused: a call's take from the tokens window is corrected at its settle, so one that ended
 * early would free tokens for the rest.
 */
async function admitted(baseURL: string, key: string, n: number, maxTokens: number): Promise<number> {
  let release = () => {};
  up.setBehavior({ kind: 'json', gate: new Promise<void>((r) => (release = r)) });
  const before = up.requests.length;
  let refused = 0;
  const calls = Array.from({ length: n }, async (_, i) => {
    const res = await fetch(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', connection: 'close' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: `limit ${i}` }], max_tokens: maxTokens }),
      dispatcher: new Agent({ pipelining: 0 }),
    } as RequestInit);
    if (res.status === 429) refused++;
    else expect(res.status).toBe(200);
    await res.arrayBuffer();
    return res.status;
  });
  await eventually(() => refused + up.requests.length - before === n, 'every call answered or at the upstream', 20_000);
  release();
  return (await Promise.all(calls)).filter((status) => status === 200).length;
}

/** Admitted calls of a rate-limited key and of a tokens-limited key, on one process or on `--workers 2`. */
async function limitsOn(workers: 1 | 2): Promise<[number, number]> {
  const dir = mkdtempSync(join(tmpdir(), 'mg-workers-limits-'));
  const [rated, metered] = [testKey(), testKey()];
  const base = config({ driver: 'sqlite', path: join(dir, 'books.db') }, join(dir, 'journal'), rated);
  const file = writeConfig({
    ...base,
    limits: { keyRequestsPerMinute: 5, ipRequestsPerMinute: 100_000 },
    keys: [{ key: rated, account: ACCOUNT }, { key: metered, account: ACCOUNT, tokensPerMinute: 1_000 }],
  });
  try {
    const gw = await startGatewayProcess(file, {}, [], workers === 2 ? { args: ['--workers', '2'], startMs: 150_000 } : {});
    try {
      return [await admitted(gw.baseURL, rated, 12, 8), await admitted(gw.baseURL, metered, 8, 400)];
    } finally {
      await gw.kill();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('serve --workers', () => {
  it('limits are exact across two workers over SQLite: a key admits as many calls as on one process', async () => {
    const one = await limitsOn(1);
    // 5 requests a minute; 1,000 tokens a minute held as ~410 a call (max_tokens 400): 2.
    expect(one).toEqual([5, 2]);
    expect(await limitsOn(2)).toEqual(one);
  }, 300_000);


  it('refuses the memory driver before starting anything, saying why', async () => {
    const file = writeConfig({ ...config({ driver: 'memory' }, '/nonexistent', testKey()), settleJournalDir: null });
    const r = await runCli(['serve', '--config', file, '--port', '0', '--workers', '2']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^--workers 2 needs storage that processes share: "memory" keeps its books inside one process/);
    expect(r.stdout).not.toMatch(/listening/);
  }, 60_000);

  it('refuses a --workers that is not a count', async () => {
    const file = writeConfig({ storage: { driver: 'sqlite', path: join(tmpdir(), 'never-opened.db') } });
    for (const bad of ['0', 'two', '-1', '1000']) {
      const r = await runCli(['serve', '--config', file, '--port', '0', '--workers', bad]);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/^--workers must be a whole number from 1 to 256, or auto/);
    }
  }, 120_000);

  it('two workers over SQLite: answered, drained on SIGTERM with exit 0, every charge in the books', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mg-workers-db-'));
    try {
      await twoWorkers({ driver: 'sqlite', path: join(dir, 'books.db') });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 300_000);

  const prefix = `mgworkers:${randomBytes(4).toString('hex')}:`;
  afterAll(async () => {
    if (!redisUp) return;
    const c = new Redis(REDIS_URL);
    await deleteKeysWithPrefix(c, prefix);
    c.disconnect();
  });

  it.runIf(redisUp || process.env.CI === 'true')('two workers over Redis: the same', async () => {
    expect(redisUp, `Redis at ${REDIS_URL} must answer under CI=true`).toBe(true);
    await twoWorkers({ driver: 'redis', url: REDIS_URL, keyPrefix: prefix });
  }, 300_000);
});
