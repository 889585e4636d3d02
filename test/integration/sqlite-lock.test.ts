/**
 * Another connection holding SQLite's write lock (an admin command of the CLI, a backup, a
 * stray `sqlite3` shell) must not block the event loop: the driver's busy wait is synchronous,
 * so the store waits only briefly inside it and tries again asynchronously, up to the store's
 * timeout. A call that meets the lock succeeds once it is released within the timeout, fails
 * with 503 service_unavailable and Retry-After when it is not, and the event loop keeps
 * turning meanwhile (other requests are served).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqliteStores } from '../../src/stores/sqlite/index.js';
import { MODEL, type RunningGateway, postChat, startGateway, testConfig } from '../helpers/gateway.js';

const TIMEOUT_MS = 1_500;
/** A turn of the event loop may be late on a loaded machine; a blocked one is late by seconds. */
const MAX_GAP_MS = 300;

let dir: string;
let path: string;
let gw: RunningGateway;
let devKey: string;

/** Runs `work` while a tick every 5 ms measures the largest gap between event-loop turns. */
async function watched<T>(work: () => Promise<T>): Promise<{ result: T; ms: number; maxGapMs: number }> {
  let last = performance.now();
  let maxGapMs = 0;
  const ticker = setInterval(() => {
    const t = performance.now();
    maxGapMs = Math.max(maxGapMs, t - last);
    last = t;
  }, 5);
  const started = performance.now();
  try {
    const result = await work();
    return { result, ms: performance.now() - started, maxGapMs };
  } finally {
    clearInterval(ticker);
  }
}

const chat = async () => {
  const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 });
  const body = (await res.json()) as { error?: { code: string } };
  return { status: res.status, retryAfter: res.headers.get('retry-after'), code: body.error?.code };
};

/** Another connection to the file, holding its write lock until released. */
function lockDatabase(): { release(): void } {
  const other = new Database(path);
  other.exec('BEGIN IMMEDIATE');
  return {
    release() {
      other.exec('COMMIT');
      other.close();
    },
  };
}

describe('SQLite locked by another connection', () => {
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mg-lock-'));
    path = join(dir, 'gateway.db');
    const setup = testConfig();
    devKey = setup.devKey;
    gw = await startGateway({ ...setup.options, stores: createSqliteStores({ path, timeoutMs: TIMEOUT_MS }) });
    expect((await chat()).status).toBe(200);
  }, 30_000);

  afterAll(async () => {
    await gw?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a lock released within the timeout: the call waits for it, the event loop does not', async () => {
    const lock = lockDatabase();
    // Released from a timer: a blocked event loop would hold it for the driver's whole wait.
    setTimeout(() => lock.release(), 500);
    const r = await watched(chat);
    expect(r.result.status).toBe(200);
    expect(r.ms).toBeGreaterThanOrEqual(450);
    expect(r.maxGapMs).toBeLessThan(MAX_GAP_MS);
  });

  it('a lock held past the timeout: 503 service_unavailable with Retry-After in time, then service resumes', async () => {
    const lock = lockDatabase();
    try {
      const r = await watched(chat);
      expect(r.result).toMatchObject({ status: 503, code: 'service_unavailable' });
      expect(r.result.retryAfter).not.toBeNull();
      expect(r.ms).toBeLessThan(TIMEOUT_MS + 1_000);
      expect(r.maxGapMs).toBeLessThan(MAX_GAP_MS);
    } finally {
      lock.release();
    }
    expect((await chat()).status).toBe(200);
  });
});
