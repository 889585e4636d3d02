import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { createSqliteStores, SqliteStoreError } from '../../src/stores/sqlite/entry.js';
import { openDatabase, SqliteContext } from '../../src/stores/sqlite/connection.js';
import { MIGRATIONS } from '../../src/stores/sqlite/schema.js';
import type { HoldRequest, SettleRequest, Stores } from '../../src/stores/types.js';
import { accountsKeysSuite } from './accounts-keys.suite.js';
import { billingSuite } from './billing.suite.js';
import { ledgerSuite } from './ledger.suite.js';
import { contentSuite } from './content.suite.js';
import { type StoreHarness, uid } from './harness.js';
import { idempotencySuite } from './idempotency.suite.js';
import { responseCacheSuite } from './response-cache.suite.js';
import { jobsSuite } from './jobs.suite.js';
import { batchesSuite } from './batches.suite.js';
import { limitsSuite } from './limits.suite.js';

/** Every database of this run lives here; afterAll deletes it. */
const dir = mkdtempSync(join(tmpdir(), 'mg-sqlite-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const MONTH = '2025-01';
const ROOT = join(import.meta.dirname, '..', '..');

/** SQLite stores on a real file and a fake clock: `advance` moves time instantly and exactly. */
async function makeSqlite(): Promise<StoreHarness & { now(): number; path: string }> {
  let t = Date.UTC(2025, 0, 15);
  const path = join(dir, `${uid('db')}.db`);
  const stores = createSqliteStores({ path, now: () => t });
  return {
    stores,
    path,
    now: () => t,
    advance(ms) {
      t += ms;
    },
    cleanup: () => stores.close(),
  };
}

accountsKeysSuite('sqlite', makeSqlite);
billingSuite('sqlite', makeSqlite);
ledgerSuite('sqlite', makeSqlite);
limitsSuite('sqlite', makeSqlite);
jobsSuite('sqlite', makeSqlite);
batchesSuite('sqlite', makeSqlite);
contentSuite('sqlite', makeSqlite);
idempotencySuite('sqlite', makeSqlite);
responseCacheSuite('sqlite', makeSqlite);

function hold(a: { accountId: string; keyId: string }, amount: bigint): HoldRequest {
  return { holdId: uid('hold'), ...a, amount, monthlyCap: null, month: MONTH, ttlMs: 60_000 };
}

function settleReq(a: { accountId: string; keyId: string }, holdId: string, cost: bigint): SettleRequest {
  return {
    holdId,
    accountId: a.accountId,
    month: MONTH,
    cost,
    entry: { id: holdId, accountId: a.accountId, keyId: a.keyId, model: 'm', units: { kind: 'tokens', prompt: 1, completion: 1 }, measured: 'usage', at: 1 },
  };
}

/** Runs a TypeScript file in its own node process; resolves with its stdout. */
function runProcess(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', ...args], { cwd: ROOT, timeout: 25_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout),
    );
  });
}

async function account(stores: Stores, balance: bigint) {
  const accountId = uid('acct');
  await stores.accounts.create({ id: accountId, grants: [], createdAt: 0 }, balance);
  return { accountId, keyId: uid('key') };
}

describe('sqlite: a file', () => {
  it('keeps the books across a reopen: balances, holds, spend, the ledger, keys, leases, windows', async () => {
    const h = await makeSqlite();
    const a = await account(h.stores, 1_000n);
    const open = hold(a, 100n);
    const settled = hold(a, 300n);
    await h.stores.billing.placeHold(open);
    await h.stores.billing.placeHold(settled);
    await h.stores.billing.settle(settleReq(a, settled.holdId, 250n));
    await h.stores.limits.hit('bucket', 2, 60_000);
    await h.stores.limits.acquireLease('pool', 1, 'job-1', 60_000);
    await h.stores.close();

    const again = createSqliteStores({ path: h.path, now: h.now });
    try {
      expect(await again.billing.wallet(a.accountId)).toEqual({ balance: 750n, held: 100n });
      expect(await again.billing.keyUsage(a.accountId, a.keyId, MONTH)).toEqual({ total: 250n, monthly: 250n, held: 100n });
      expect((await again.billing.ledger(a.accountId)).map((e) => e.cost)).toEqual([-1_000n, 250n]);
      // The hold id stays closed, and the account is not credited again.
      expect(await again.billing.settle(settleReq(a, settled.holdId, 250n))).toEqual({ settled: false, charged: 0n });
      expect(await again.accounts.create({ id: a.accountId, grants: [], createdAt: 0 }, 1_000n)).toBe(false);
      // A media job's slot outlives a restart, and so does a rate window (it is in the file).
      expect(await again.limits.acquireLease('pool', 1, 'job-2', 60_000)).toBe(false);
      expect(await again.limits.hit('bucket', 2, 60_000)).toMatchObject({ allowed: true, remaining: 0 });
    } finally {
      await again.close();
    }
  });

  it('keeps money exact up to 2^53 - 1 and beyond, in INTEGER columns', async () => {
    const h = await makeSqlite();
    try {
      const a = await account(h.stores, 2n ** 62n);
      expect(await h.stores.billing.topUp(a.accountId, 1n)).toBe(2n ** 62n + 1n);
      const req = hold(a, 2n ** 53n + 1n);
      expect(await h.stores.billing.placeHold(req)).toEqual({ ok: true });
      expect(await h.stores.billing.settle(settleReq(a, req.holdId, 2n ** 53n + 3n))).toEqual({ settled: true, charged: 2n ** 53n + 3n, held: 2n ** 53n + 1n });
      expect(await h.stores.billing.wallet(a.accountId)).toEqual({ balance: 2n ** 62n + 1n - (2n ** 53n + 3n), held: 0n });
      const db = new Database(h.path, { readonly: true });
      const types = db.prepare('SELECT typeof(balance) AS t FROM wallets UNION SELECT typeof(cost) FROM ledger').all();
      db.close();
      expect(types).toEqual([{ t: 'integer' }]);
    } finally {
      await h.cleanup();
    }
  });

  it('refuses to change or delete a ledger entry', async () => {
    const h = await makeSqlite();
    try {
      const a = await account(h.stores, 1_000n);
      const req = hold(a, 10n);
      await h.stores.billing.placeHold(req);
      await h.stores.billing.settle(settleReq(a, req.holdId, 10n));
      const db = new Database(h.path);
      expect(() => db.prepare('UPDATE ledger SET cost = 0').run()).toThrow(/append-only/);
      expect(() => db.prepare('DELETE FROM ledger').run()).toThrow(/append-only/);
      db.close();
      expect((await h.stores.billing.ledger(a.accountId)).at(-1)?.cost).toBe(10n);
    } finally {
      await h.cleanup();
    }
  });

  it('two store objects on one file (two processes, e.g. the CLI beside a server) never overdraw', async () => {
    const h = await makeSqlite();
    const other = createSqliteStores({ path: h.path, now: h.now });
    try {
      const a = await account(h.stores, 10n * 7_000n);
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => (i % 2 ? h.stores : other).billing.placeHold(hold(a, 7_000n))),
      );
      expect(results.filter((r) => r.ok)).toHaveLength(10);
      expect(await other.billing.wallet(a.accountId)).toEqual({ balance: 70_000n, held: 70_000n });
    } finally {
      await other.close();
      await h.cleanup();
    }
  });

  it('three processes folding key hits into holds on one file share one window and hold exactly the wallet', async () => {
    const h = await makeSqlite();
    try {
      const a = await account(h.stores, 30n * 7_000n);
      await h.stores.close();
      const startAt = Date.now() + 4_000;
      const runs = await Promise.all(
        Array.from({ length: 3 }, () =>
          runProcess(['test/helpers/sqlite-fold-process.ts', h.path, a.accountId, a.keyId, '40', '30', '7000', String(startAt)]),
        ),
      );
      const perProcess = runs.map((out) => JSON.parse(out) as [boolean, boolean | null][]);
      // The key's window is in the file: across the three processes exactly 30 of 120 pass it.
      for (const results of perProcess) {
        expect(results).toHaveLength(40);
        for (const [allowed, held] of results) if (!allowed) expect(held).toBeNull();
      }
      expect(perProcess.flat().filter(([allowed]) => allowed)).toHaveLength(30);
      // The holds are books, in the file: across the processes exactly what the wallet covers.
      expect(perProcess.flat().filter(([, held]) => held === true)).toHaveLength(30);
      const again = createSqliteStores({ path: h.path });
      try {
        expect(await again.billing.wallet(a.accountId)).toEqual({ balance: 210_000n, held: 210_000n });
        // A restarted process finds the window as the others left it: full.
        expect(await again.limits.hit(`key:${a.keyId}`, 30, 60_000, a.accountId)).toMatchObject({ allowed: false, remaining: 0 });
      } finally {
        await again.close();
      }
    } finally {
      await h.cleanup();
    }
  }, 30_000);

  it('uses WAL mode, creates the directory, and fails clearly when closed or unopenable', async () => {
    const path = join(dir, uid('nested'), 'deeper', 'gateway.db');
    const stores = createSqliteStores({ path });
    const db = new Database(path, { readonly: true });
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    db.close();
    await stores.close();
    await expect(stores.billing.wallet('a')).rejects.toBeInstanceOf(SqliteStoreError);
    // A path under a plain file cannot be created.
    expect(() => createSqliteStores({ path: join(path, 'inside-a-file.db') })).toThrow(SqliteStoreError);
    expect(() => createSqliteStores({ path: join(path, 'inside-a-file.db') })).toThrow(/cannot open SQLite database/);
    expect(() => createSqliteStores({ path: '' })).toThrow(/path/);
  });

  it('the lazy sweep drops expired rows, and live windows keep counting exactly', async () => {
    const h = await makeSqlite();
    try {
      const { limits, billing } = h.stores;
      expect((await limits.hit('live', 2, 600_000)).allowed).toBe(true);
      expect((await limits.hit('live', 2, 600_000)).allowed).toBe(true);
      const a = await account(h.stores, 100n);
      await billing.placeHold({ ...hold(a, 10n), ttlMs: 1_000 });
      await limits.acquireLease('pool', 1, 'l', 1_000);
      h.advance(120_000);
      // The ten-minute window survives the sweep that this hold runs first.
      await billing.placeHold(hold(a, 1n));
      expect(await limits.hit('live', 2, 600_000)).toMatchObject({ allowed: false, remaining: 0, resetMs: 480_000 });
      const db = new Database(h.path, { readonly: true });
      const count = (sql: string) => (db.prepare(sql).get() as { n: number }).n;
      expect(count('SELECT count(*) AS n FROM holds')).toBe(1);
      expect(count('SELECT count(*) AS n FROM leases')).toBe(0);
      // The live window's hits are kept; a window idle for an hour goes with the sweep.
      expect(count("SELECT count(*) AS n FROM rate_hits WHERE bucket = 'live'")).toBe(1);
      await limits.hit('idle', 2, 60_000);
      h.advance(3_600_000);
      await billing.placeHold(hold(a, 1n));
      expect(count("SELECT count(*) AS n FROM rate_hits WHERE bucket = 'idle'")).toBe(0);
      db.close();
    } finally {
      await h.cleanup();
    }
  });

  it('writes of one turn of the event loop commit together, each atomic on its own', async () => {
    const path = join(dir, `${uid('db')}.db`);
    const db = openDatabase({ path, synchronous: 'normal', busyTimeoutMs: 1_000 });
    const ctx = new SqliteContext(db, Date.now);
    const put = db.prepare('INSERT INTO wallets (account_id, balance) VALUES (?, ?)');
    try {
      const outcomes = await Promise.allSettled([
        ctx.batch('a', () => put.run('a', 1)),
        ctx.batch('b', () => {
          put.run('b', 2);
          throw new Error('b fails half-way');
        }),
        ctx.batch('c', () => put.run('c', 3).changes),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect((outcomes[1] as PromiseRejectedResult).reason).toBeInstanceOf(SqliteStoreError);
      expect((outcomes[2] as PromiseFulfilledResult<number>).value).toBe(1);
      // b's own write was rolled back with it; a's and c's are in.
      expect(db.prepare('SELECT account_id FROM wallets ORDER BY account_id').pluck().all()).toEqual(['a', 'c']);
      // What another connection sees: one commit for two writes.
      const other = new Database(path);
      const seen = () => Number(other.pragma('data_version', { simple: true }));
      const before = seen();
      await Promise.all([ctx.batch('d', () => put.run('d', 4)), ctx.batch('e', () => put.run('e', 5))]);
      expect(seen() - before).toBe(1);
      other.close();
    } finally {
      ctx.close();
    }
  });

  it('close() commits the writes still queued; a write after it fails', async () => {
    const h = await makeSqlite();
    const a = await account(h.stores, 1_000n);
    const req = hold(a, 100n);
    await h.stores.billing.placeHold(req);
    const settled = h.stores.billing.settle(settleReq(a, req.holdId, 70n));
    await h.stores.close();
    expect(await settled).toEqual({ settled: true, charged: 70n, held: 100n });
    await expect(h.stores.billing.placeHold(hold(a, 1n))).rejects.toBeInstanceOf(SqliteStoreError);
    const again = createSqliteStores({ path: h.path, now: h.now });
    try {
      expect(await again.billing.wallet(a.accountId)).toEqual({ balance: 930n, held: 0n });
    } finally {
      await again.close();
    }
  });

  it('an upgrade from schema 2 keeps the books; the windows the file held then start empty', async () => {
    const path = join(dir, `${uid('db')}.db`);
    const old = new Database(path);
    for (const m of MIGRATIONS.slice(0, 2)) old.exec(m);
    old.pragma('user_version = 2');
    const t = Date.now();
    old.prepare('INSERT INTO rate_hits (bucket, at) VALUES (?, ?)').run('key:k', t - 500);
    old.prepare('INSERT INTO rate_windows (bucket, hits, until) VALUES (?, ?, ?)').run('key:k', 1, t - 500 + 60_000);
    old.prepare('INSERT INTO wallets (account_id, balance) VALUES (?, ?)').run('acct', 5_000);
    old.close();
    const stores = createSqliteStores({ path, now: () => t });
    try {
      expect(await stores.billing.wallet('acct')).toEqual({ balance: 5_000n, held: 0n });
      expect(await stores.limits.hit('key:k', 4, 60_000)).toMatchObject({ allowed: true, remaining: 3 });
    } finally {
      await stores.close();
    }
    const db = new Database(path, { readonly: true });
    try {
      expect(db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.length);
      // Schema 4 dropped them; schema 9 brought the windows back, empty, in a new shape.
      expect(db.prepare("SELECT hits FROM rate_windows WHERE bucket = 'key:k'").get()).toEqual({ hits: 1 });
      expect(db.prepare("SELECT count(*) AS n FROM rate_hits WHERE bucket = 'key:k'").get()).toEqual({ n: 1 });
    } finally {
      db.close();
    }
  });

  it('an upgrade from schema 4 gives each wallet its ledger doesn’t explain an opening-balance entry', async () => {
    const path = join(dir, `${uid('db')}.db`);
    const old = new Database(path);
    for (const m of MIGRATIONS.slice(0, 4)) old.exec(m);
    old.pragma('user_version = 4');
    // Schema 4's books: created with 2 USD and topped up 1 USD without entries, credited 3.25 USD
    // and charged 0.5 USD with entries; a wallet the ledger explains; a wallet with no account.
    const append = old.prepare(
      `INSERT INTO ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)
       VALUES (?, ?, ?, ?, 'm', ?, ?, 0, 0, NULL, NULL, 5, 5)`,
    );
    old.prepare('INSERT INTO accounts (id, grants, created_at) VALUES (?, ?, ?)').run('acct', '[]', 1_234);
    old.prepare('INSERT INTO wallets (account_id, balance) VALUES (?, ?)').run('acct', 5_750_000_000);
    append.run('acct', 'credit:c1', 'c1', '', '{"kind":"credit","reason":"gift"}', -3_250_000_000);
    append.run('acct', 'h1', 'r1', 'key_1', '{"kind":"tokens","prompt":1,"completion":1}', 500_000_000);
    old.prepare('INSERT INTO wallets (account_id, balance) VALUES (?, ?)').run('even', -7);
    append.run('even', 'h2', 'r2', 'key_2', '{"kind":"tokens","prompt":1,"completion":1}', 7);
    old.prepare('INSERT INTO wallets (account_id, balance) VALUES (?, ?)').run('orphan', 40);
    old.close();
    const t = 1_700_000_000_000;
    const stores = createSqliteStores({ path, now: () => t });
    try {
      for (const id of ['acct', 'even', 'orphan']) {
        const sum = (await stores.billing.ledger(id)).reduce((total, e) => total + e.cost, 0n);
        expect(-sum, id).toBe((await stores.billing.wallet(id)).balance);
      }
      const ledger = await stores.billing.ledger('acct');
      expect(ledger.map((e) => e.id)).toEqual(['c1', 'r1', 'opening-balance']);
      expect(ledger[2]).toMatchObject({ cost: -3_000_000_000n, keyId: '', units: { kind: 'credit', reason: 'opening balance' }, at: 1_234 });
      expect(await stores.billing.ledger('even')).toHaveLength(1);
      expect((await stores.billing.keyUsage('acct', 'key_1', '2025-01')).total).toBe(0n);
      // An account whose opening balance is in its ledger is never credited one again.
      expect(await stores.accounts.create({ id: 'orphan', grants: [], createdAt: t }, 99n)).toBe(true);
      expect(await stores.billing.wallet('orphan')).toEqual({ balance: 40n, held: 0n });
    } finally {
      await stores.close();
    }
  });

  it('refuses a database written by a newer schema', async () => {
    const path = join(dir, `${uid('db')}.db`);
    const db = new Database(path);
    db.pragma('user_version = 999');
    db.close();
    expect(() => createSqliteStores({ path })).toThrow(/newer model-gateway/);
  });
});
