/**
 * Admin reports on SQLite must not stall other tenants. SQLite answers synchronously, so a
 * report that awaits page after page would run to its end in one turn of the event loop and
 * every other request would wait for it (seconds on a long ledger). With 200,000 ledger
 * entries (written straight into the database, for speed), the CSV export, the all-time
 * overview and the audit each take well over the longest pause they cause: the largest gap
 * between event-loop ticks, and the slowest `/health` answer, stay small while they run.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqliteStores } from '../../src/stores/sqlite/index.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';
import { ACCOUNT, MODEL, type RunningGateway, startGateway, testConfig } from '../helpers/gateway.js';

const ENTRIES = 200_000;
/**
 * The longest any request may wait behind a report: a few pages' work. On a shared machine
 * the process may be descheduled for longer than that, so the bound is also relative: a
 * report that stalls the event loop stalls it for about its whole length.
 */
const MAX_PAUSE_MS = 250;
/**
 * A quarter of the report's time: a stalling report (each was one stall before) fails it by
 * far. The audit still runs one statement over the account's whole ledger (its duplicate
 * hold id check, a GROUP BY), a few hundred milliseconds at this size: not yet paged.
 */
const pauseBound = (totalMs: number) => Math.max(MAX_PAUSE_MS, totalMs / 4);

let dir: string;
let gw: RunningGateway;

/** Appends `n` ledger entries to ACCOUNT in one statement (the ledger only refuses updates and deletes). */
function fillLedger(path: string, n: number): void {
  const db = new Database(path);
  try {
    db.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
       INSERT INTO ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)
       SELECT ?, 'hold_' || i, 'req_' || i, 'key_bulk', ?, '{"kind":"tokens","prompt":5,"completion":5}', 15000, 20000, 0, 'usage', 'test',
              1700000000000 + i * 1000, 1700000000000 + i * 1000
       FROM n`,
    ).run(n, ACCOUNT, MODEL);
  } finally {
    db.close();
  }
}

/**
 * Runs `report` while watching the event loop (a tick every 5 ms) and asking `/health` every
 * 20 ms: how long the report took, the largest gap between ticks, the slowest `/health`.
 */
async function watched(report: () => Promise<unknown>): Promise<{ totalMs: number; maxGapMs: number; slowestHealthMs: number }> {
  let last = performance.now();
  let maxGapMs = 0;
  const ticker = setInterval(() => {
    const t = performance.now();
    maxGapMs = Math.max(maxGapMs, t - last);
    last = t;
  }, 5);
  let running = true;
  let slowestHealthMs = 0;
  const health = (async () => {
    while (running) {
      const t = performance.now();
      const res = await fetch(`${gw.origin}/health`);
      await res.arrayBuffer();
      expect(res.status).toBe(200);
      slowestHealthMs = Math.max(slowestHealthMs, performance.now() - t);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const started = performance.now();
  try {
    await report();
  } finally {
    running = false;
    clearInterval(ticker);
  }
  const totalMs = performance.now() - started;
  await health;
  return { totalMs, maxGapMs, slowestHealthMs };
}

/** An admin GET: its status and body; a CSV body is read as it streams and only its lines counted. */
async function admin(path: string): Promise<{ lines: number; json?: Record<string, number> }> {
  const res = await fetch(`${gw.origin}/admin/v1${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  expect(res.status).toBe(200);
  if (!res.headers.get('content-type')?.startsWith('text/csv')) return { lines: 1, json: (await res.json()) as Record<string, number> };
  let lines = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) for (const byte of chunk) if (byte === 10) lines++;
  return { lines };
}

type Body = Awaited<ReturnType<typeof admin>>;

describe('admin reports on a long SQLite ledger', () => {
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mg-reports-'));
    const path = join(dir, 'gateway.db');
    const setup = testConfig();
    gw = await startGateway({ ...setup.options, stores: createSqliteStores({ path }), admin: { tokenSha256: ADMIN_SHA } });
    fillLedger(path, ENTRIES);
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    ['the CSV export', `/ledger?account=${ACCOUNT}&format=csv`, (r: Body) => expect(r.lines).toBeGreaterThan(ENTRIES)],
    ['the all-time overview', '/overview', (r: Body) => expect(r.json?.calls).toBe(ENTRIES)],
    ['the audit', '/audit', (r: Body) => expect(r.json?.entries).toBeGreaterThanOrEqual(ENTRIES)],
  ] as const)('%s lets other requests in between its pages', async (_what, path, check) => {
    let body: Body = { lines: 0 };
    const r = await watched(async () => {
      body = await admin(path);
    });
    check(body);
    console.log(`${_what}: ${Math.round(r.totalMs)} ms in all; longest event-loop gap ${Math.round(r.maxGapMs)} ms; slowest /health ${Math.round(r.slowestHealthMs)} ms`);
    // The report is long: a stall would be as long, at least twice the longest pause allowed (a
    // faster host runs these in about a second). No request waits more than a few pages.
    expect(r.totalMs).toBeGreaterThan(2 * MAX_PAUSE_MS);
    expect(r.maxGapMs).toBeLessThan(pauseBound(r.totalMs));
    expect(r.slowestHealthMs).toBeLessThan(pauseBound(r.totalMs));
  }, 120_000);
});
