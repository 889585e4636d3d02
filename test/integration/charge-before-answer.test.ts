/**
 * "The charge lands before the answer ends": a client that holds a whole
 * answer has been charged, whatever happens to the process next.
 *
 * A gateway process (the CLI, `serve`) answers one chat call, plain or streamed; the moment
 * the client holds the whole answer (the JSON body; the SSE stream up to and including
 * `data: [DONE]`) the process is killed with SIGKILL. A new process started on the same store
 * (and the same settle journal folder) must show the call's charge in the ledger (admin API),
 * in /key usage and in the wallet, with no hold left open.
 *
 * Each store is made slow to confirm the settle while the call ends, so that an answer sent
 * before its settle was confirmed is seen, every run, to lose the charge:
 * - PostgreSQL and Redis: after the first process started, the TCP fault proxy between it and
 *   the store switches to `delay` mode (every chunk, each way, 150 ms late: a store across a
 *   slow network). A settle sent when the answer goes out is still on its way when the process
 *   dies, and never arrives; a settle whose reply came back is in the store.
 * - SQLite (a file): when the call reaches the upstream (its hold is committed), the test takes
 *   the file's write lock with its own connection (as another process on the same file would,
 *   e.g. the CLI topping up a wallet) and keeps it until the client holds the whole answer, or
 *   for at most 1 s. A gateway that answers only once its settle is committed (or journaled)
 *   waits for the lock; one that answers first is killed before it could commit.
 * The restarted process talks to the store directly.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';
import { formatUsd } from '../../src/billing/money.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';
import { chatCost } from '../helpers/billing.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { COMPLETION_PRICE, MODEL, PROMPT_PRICE, eventually, sseData, testKey } from '../helpers/gateway.js';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/processes.js';
import { startTestUpstream, type Behavior, type TestUpstream } from '../helpers/upstream.js';

const STORE_LATENCY_MS = 150;
/** How long the SQLite write lock is kept at most while the client waits for its answer. */
const LOCK_MS = 1_000;
const USAGE = { prompt_tokens: 11, completion_tokens: 7 };
/** What one call costs at the test model's prices with the upstream's usage, nano-USD. */
const CALL = chatCost(USAGE.prompt_tokens, USAGE.completion_tokens);
const WALLET_NANO = 100_000_000_000n;

const pgProblem = await postgresProblem(POSTGRES_URL);
const redisDown = await redisProblem(REDIS_URL);
const CI = process.env.CI === 'true';
if (pgProblem !== null && !CI) {
  console.warn(`\n!!! SKIPPING the PostgreSQL charge-before-answer tests: PostgreSQL at ${POSTGRES_URL} is unreachable (${pgProblem}; under CI=true this fails).\n`);
}
if (redisDown !== null && !CI) {
  console.warn(`\n!!! SKIPPING the Redis charge-before-answer tests: Redis at ${REDIS_URL} is unreachable (${redisDown}; under CI=true this fails).\n`);
}

/** One account and key per case (each driver has its own store), so a ledger holds only its case's call. */
const cases = {
  plain: { account: 'acct_crash_plain', key: testKey() },
  stream: { account: 'acct_crash_stream', key: testKey() },
} as const;
type Case = keyof typeof cases;

let upstream: TestUpstream;
const running = new Set<GatewayProcess>();
/**
 * The cases of the three drivers run at once on one upstream: each call's message names its
 * case, and the upstream answers it with the behaviour registered under that name.
 */
const scripted = new Map<string, { behavior: Behavior; reached: () => void }>();

beforeAll(async () => {
  upstream = await startTestUpstream();
  upstream.setBehavior((rec) => {
    const messages = rec.body?.messages as Array<{ content: string }> | undefined;
    const script = scripted.get(messages?.[0]?.content ?? '');
    if (!script) return { kind: 'error', status: 500, message: 'unscripted call' };
    script.reached();
    return script.behavior;
  });
});
afterAll(async () => {
  await Promise.all([...running].map((g) => g.kill('SIGKILL')));
  await upstream?.close();
});

/** A gateway config on `storage`; `journal` is the settle journal folder both processes share. */
function config(storage: Record<string, unknown>, journal: string) {
  return {
    upstreams: { test: { baseUrl: upstream.url, apiKey: 'upstream-key-charge', timeoutMs: 20_000 } },
    models: [{ id: MODEL, upstream: 'test', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE } }],
    accounts: Object.values(cases).map((c) => ({ id: c.account, walletUsd: 100 })),
    keys: Object.values(cases).map((c) => ({ key: c.key, account: c.account })),
    limits: { keyRequestsPerMinute: 10_000, ipRequestsPerMinute: 1_000_000 },
    admin: { tokenSha256: ADMIN_SHA },
    settleJournalDir: journal,
    storage,
  };
}

async function start(storage: Record<string, unknown>, journal: string): Promise<GatewayProcess> {
  const g = await startGatewayProcess(writeConfig(config(storage, journal)));
  running.add(g);
  return g;
}

async function kill(g: GatewayProcess): Promise<void> {
  await g.kill('SIGKILL');
  running.delete(g);
}

/** Whether a settle journal folder holds anything (a settle kept there by a killed process). */
function journaled(dir: string): boolean {
  if (!existsSync(dir)) return false;
  return readdirSync(dir).some((name) => {
    const file = join(dir, name);
    return statSync(file).isFile() && readFileSync(file, 'utf8').trim() !== '';
  });
}

const auth = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
const origin = (g: GatewayProcess) => g.baseURL.replace(/\/v1$/, '');

/**
 * Makes one call on `g` and kills `g` with SIGKILL the moment the client holds the whole
 * answer. `reached` runs (in this process) when the call reaches the upstream, before the
 * upstream answers. Returns the call's request id.
 */
async function callThenKill(g: GatewayProcess, tag: string, which: Case, reached: () => void): Promise<string> {
  const stream = which === 'stream';
  const behavior: Behavior = stream
    ? { kind: 'stream', chunks: ['Hel', 'lo', ' there'], delayMs: 10, usageCounts: USAGE }
    : { kind: 'json', content: 'Hello there', usage: USAGE };
  scripted.set(tag, { behavior, reached });
  const messages = [{ role: 'user', content: tag }];
  const res = await fetch(`${g.baseURL}/chat/completions`, {
    method: 'POST',
    headers: auth(cases[which].key),
    body: JSON.stringify({ model: MODEL, messages, max_tokens: 50, ...(stream ? { stream: true } : {}) }),
  });
  if (res.status !== 200) {
    const text = await res.text();
    await kill(g);
    throw new Error(`the call answered ${res.status}: ${text}\n${g.output()}`);
  }
  const requestId = res.headers.get('x-request-id');
  expect(requestId).toMatch(/^req_/);

  if (!stream) {
    const text = await res.text();
    // The client holds the whole answer: kill at once.
    await kill(g);
    const body = JSON.parse(text) as { choices: Array<{ message: { content: string } }>; usage: Record<string, number> };
    expect(body.choices[0]!.message.content).toBe('Hello there');
    expect(body.usage).toMatchObject(USAGE);
    return requestId!;
  }

  // Streamed: read until the client holds `data: [DONE]`, then kill at once.
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (value) text += decoder.decode(value, { stream: true });
    if (text.includes('data: [DONE]')) break;
    if (done) {
      await kill(g);
      throw new Error(`the stream ended without [DONE]:\n${text}`);
    }
  }
  await kill(g);
  await reader.cancel().catch(() => undefined);
  const data = sseData(text);
  expect(data.at(-1)).toBe('[DONE]');
  const content = data
    .slice(0, -1)
    .map((d) => JSON.parse(d) as { choices: Array<{ delta?: { content?: string } }> })
    .map((c) => c.choices[0]?.delta?.content ?? '')
    .join('');
  expect(content).toBe('Hello there');
  return requestId!;
}

interface EntryView {
  id: string;
  account: string;
  model: string | null;
  units: { kind: string; prompt?: number; completion?: number };
  costUsd: string;
}

async function charges(g: GatewayProcess, account: string): Promise<EntryView[]> {
  const res = await fetch(`${origin(g)}/admin/v1/ledger?account=${account}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: EntryView[] }).data.filter((e) => e.units.kind === 'tokens');
}

/** Checks, on a fresh process on the same store, that the call `requestId` of `which` was charged. */
async function expectCharged(g: GatewayProcess, which: Case, requestId: string, journaledSettle: boolean): Promise<void> {
  const { account, key } = cases[which];
  // A settle the killed process kept in the settle journal lands when the new process replays
  // it, shortly after its start.
  if (journaledSettle) await eventually(async () => (await charges(g, account)).length > 0, 'the journaled charge in the ledger', 5_000);
  const found = await charges(g, account);
  expect(found.map((e) => e.id), `the ledger of ${account} after the restart holds the charge of ${requestId}`).toEqual([requestId]);
  expect(found[0]).toMatchObject({
    model: MODEL,
    units: { kind: 'tokens', prompt: USAGE.prompt_tokens, completion: USAGE.completion_tokens },
    costUsd: formatUsd(CALL),
  });

  const res = await fetch(`${g.baseURL}/key`, { headers: auth(key) });
  expect(res.status).toBe(200);
  const data = ((await res.json()) as { data: { usage: number; wallet: { balance: number; held: number } } }).data;
  expect(data.usage).toBe(Number(CALL) / 1e9);
  expect(data.wallet).toEqual({ balance: Number(WALLET_NANO - CALL) / 1e9, held: 0 });
}

/** How one driver is run: the storage of each process, and how its store is slowed down. */
interface Harness {
  /** Storage of the process that is killed. */
  slow(): Record<string, unknown>;
  /** Storage of the process started after it. */
  direct(): Record<string, unknown>;
  /** The settle journal folder both processes share. */
  journal: string;
  /** After the first process started, before the call. */
  before?(g: GatewayProcess): Promise<void>;
  /** When the call reaches the upstream (its hold is in the store). */
  reached?(): void;
  /** After the first process was killed. */
  after?(): Promise<void> | void;
}

/** Runs `fn`s one after another (a driver's cases share its store link). */
function serial() {
  let last: Promise<unknown> = Promise.resolve();
  return <T>(fn: () => Promise<T>): Promise<T> => {
    const next = last.then(fn, fn);
    last = next.catch(() => undefined);
    return next;
  };
}

/**
 * The plain and the streamed case of one driver, one after the other (they share the driver's
 * store link); the drivers run beside each other.
 */
function crashCases(driver: string, enabled: boolean, harness: () => Harness) {
  const inTurn = serial();
  for (const which of ['plain', 'stream'] as const) {
    it.runIf(enabled)(
      `${driver}, ${which}: killed with SIGKILL as soon as the client holds the whole answer, a restarted gateway shows the charge`,
      { concurrent: true, timeout: 90_000 },
      () =>
        inTurn(async () => {
          const h = harness();
          const first = await start(h.slow(), h.journal);
          let requestId: string;
          try {
            await h.before?.(first);
            requestId = await callThenKill(first, `${driver} ${which}`, which, () => h.reached?.());
          } finally {
            await kill(first);
            await h.after?.();
          }
          const journaledSettle = journaled(h.journal);
          const second = await start(h.direct(), h.journal);
          try {
            await expectCharged(second, which, requestId, journaledSettle);
          } finally {
            await kill(second);
          }
        }),
    );
  }
}

/** Polls /ready until it answers 200 (the store answers through the slow link). */
async function ready(g: GatewayProcess): Promise<void> {
  await eventually(async () => (await fetch(`${origin(g)}/ready`)).status === 200, 'the gateway ready through the slow link', 15_000);
}

const dir = mkdtempSync(join(tmpdir(), 'mg-charge-'));
const schema = freshSchema('mgcharge');
const prefix = `mgcharge:${freshSchema('r')}:`;
let pgProxy: FaultProxy | undefined;
let redisProxy: FaultProxy | undefined;

/** `url` with its host and port replaced by the proxy's. */
function via(url: string, proxy: FaultProxy | undefined): string {
  const u = new URL(url);
  u.hostname = '127.0.0.1';
  u.port = String(proxy?.port);
  return u.toString();
}
const target = (url: string, port: number) => {
  const u = new URL(url);
  return `http://${u.hostname}:${u.port || port}`;
};

// SQLite: the test's own connection to the gateway's file, to take its write lock.
const sqlitePath = join(dir, 'books.db');
let lock: Database.Database | null = null;
let lockTimer: NodeJS.Timeout | undefined;
const releaseLock = () => {
  clearTimeout(lockTimer);
  if (lock?.inTransaction) lock.exec('ROLLBACK');
};

/** A slow link both ways, then a gateway that answers through it. */
async function slowDown(proxy: FaultProxy | undefined, g: GatewayProcess): Promise<void> {
  await proxy!.setMode({ kind: 'delay', ms: STORE_LATENCY_MS });
  await ready(g);
}

describe('the charge lands before the answer ends: kill -9 right after a whole answer', () => {
  beforeAll(async () => {
    if (pgProblem === null) pgProxy = await startFaultProxy(target(POSTGRES_URL, 5432));
    if (redisDown === null) redisProxy = await startFaultProxy(target(REDIS_URL, 6379));
  });
  afterAll(async () => {
    await Promise.all([...running].map((g) => g.kill('SIGKILL')));
    running.clear();
    releaseLock();
    lock?.close();
    await pgProxy?.close();
    await redisProxy?.close();
    if (pgProblem === null) await dropSchema(schema);
    if (redisDown === null) {
      const c = new Redis(REDIS_URL);
      try {
        await deleteKeysWithPrefix(c, prefix);
      } finally {
        c.disconnect();
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it.runIf(CI)('PostgreSQL and Redis answer (required under CI=true)', () => {
    expect(pgProblem, `PostgreSQL at ${POSTGRES_URL} must answer under CI=true`).toBeNull();
    expect(redisDown, `Redis at ${REDIS_URL} must answer under CI=true`).toBeNull();
  });

  crashCases('SQLite', true, () => ({
    slow: () => ({ driver: 'sqlite', path: sqlitePath }),
    direct: () => ({ driver: 'sqlite', path: sqlitePath }),
    journal: join(dir, 'journal-sqlite'),
    reached() {
      // The hold is committed: take the file's write lock until the client holds its answer
      // (or LOCK_MS passed: a gateway that waits for its commit gets it then).
      lock ??= new Database(sqlitePath, { timeout: 5_000 });
      lock.exec('BEGIN IMMEDIATE');
      lockTimer = setTimeout(releaseLock, LOCK_MS);
    },
    after: releaseLock,
  }));

  crashCases('PostgreSQL behind a slow link', pgProblem === null, () => ({
    slow: () => ({ driver: 'postgres', url: via(POSTGRES_URL, pgProxy), schema }),
    direct: () => ({ driver: 'postgres', url: POSTGRES_URL, schema }),
    journal: join(dir, 'journal-postgres'),
    before: (g) => slowDown(pgProxy, g),
    after: () => pgProxy!.setMode({ kind: 'pass' }),
  }));

  crashCases('Redis behind a slow link', redisDown === null, () => ({
    slow: () => ({ driver: 'redis', url: via(REDIS_URL, redisProxy), keyPrefix: prefix }),
    direct: () => ({ driver: 'redis', url: REDIS_URL, keyPrefix: prefix }),
    journal: join(dir, 'journal-redis'),
    before: (g) => slowDown(redisProxy, g),
    after: () => redisProxy!.setMode({ kind: 'pass' }),
  }));
});
