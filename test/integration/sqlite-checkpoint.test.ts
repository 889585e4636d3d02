/**
 * SQLite's WAL checkpoints run on a thread of their own once the process is busy: the books
 * reach the database file itself while the gateway keeps writing, its event loop never waits
 * for a checkpoint's disk flush, and closing the stores still leaves no log behind. When the
 * thread cannot run, the writers' connection checkpoints inline again, as SQLite does by default.
 */
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { createSqliteStores } from '../../src/stores/sqlite/entry.js';
import { Checkpointer } from '../../src/stores/sqlite/checkpointer.js';
import { driverPath, openDatabase } from '../../src/stores/sqlite/connection.js';

const dir = mkdtempSync(join(tmpdir(), 'mg-ckpt-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Ledger rows in the database file alone, read from a copy without its log. */
function rowsInFileAlone(path: string, copy: string): number {
  copyFileSync(path, copy);
  const db = new Database(copy, { readonly: true });
  try {
    // The settles' entries: the account's opening balance is a ledger entry of its own.
    return (db.prepare(`SELECT count(*) AS n FROM ledger WHERE units NOT LIKE '{"kind":"credit"%'`).get() as { n: number }).n;
  } finally {
    db.close();
  }
}

describe('sqlite: checkpoints on their own thread', () => {
  it('a busy process gets its settles into the database file while it runs, and close leaves no log', async () => {
    const path = join(dir, 'busy.db');
    const stores = createSqliteStores({ path });
    await stores.accounts.create({ id: 'a', grants: [], createdAt: 0 }, 10n ** 12n);
    const N = 300;
    // One commit each (awaited one by one), enough to start the thread. SQLite by itself
    // checkpoints only inside a commit that finds the log past 1,000 pages, so without the
    // thread the last commits stay in the log until the next such commit or the close.
    for (let i = 0; i < N; i++) {
      const holdId = `h${String(i).padStart(4, '0')}`;
      await stores.billing.settle({
        holdId,
        accountId: 'a',
        month: '2026-11',
        cost: 5n,
        entry: { id: holdId, accountId: 'a', keyId: 'k', model: 'm', units: { kind: 'tokens', prompt: 1, completion: 1 }, measured: 'usage', at: 1 },
      });
    }
    expect(existsSync(`${path}-wal`)).toBe(true);
    let inFile = 0;
    for (let waited = 0; waited < 5_000 && inFile < N; waited += 50) {
      await sleep(50);
      inFile = rowsInFileAlone(path, join(dir, 'busy-copy.db'));
    }
    expect(inFile).toBe(N);
    await stores.close();
    expect(existsSync(`${path}-wal`)).toBe(false);
    const db = new Database(path, { readonly: true });
    // The settles and the account's opening balance.
    expect((db.prepare('SELECT count(*) AS n FROM ledger').get() as { n: number }).n).toBe(N + 1);
    db.close();
  });

  it('the writers stop checkpointing while the thread runs, and start again when it stops', async () => {
    const path = join(dir, 'switch.db');
    const db = openDatabase({ path, synchronous: 'normal', busyTimeoutMs: 1_000 });
    const c = new Checkpointer(db, { path, synchronous: 'normal', busyTimeoutMs: 1_000, driver: driverPath() });
    expect(db.pragma('wal_autocheckpoint', { simple: true })).toBe(1000);
    for (let i = 0; i < 200; i++) c.committed();
    for (let waited = 0; waited < 5_000 && !c.running; waited += 20) await sleep(20);
    expect(c.running).toBe(true);
    expect(db.pragma('wal_autocheckpoint', { simple: true })).toBe(0);
    await c.stop();
    expect(c.running).toBe(false);
    expect(db.pragma('wal_autocheckpoint', { simple: true })).toBe(1000);
    db.close();
  });

  it('a thread that cannot open the database leaves checkpoints inline, with a warning', async () => {
    const path = join(dir, 'broken.db');
    const db = openDatabase({ path, synchronous: 'normal', busyTimeoutMs: 1_000 });
    const c = new Checkpointer(db, { path, synchronous: 'normal', busyTimeoutMs: 1_000, driver: join(dir, 'no-such-driver.js') });
    const warned = new Promise<string>((resolve) => process.once('warning', (w) => resolve(w.message)));
    for (let i = 0; i < 200; i++) c.committed();
    expect(await warned).toMatch(/checkpoints moved back onto the main thread/);
    expect(c.running).toBe(false);
    expect(db.pragma('wal_autocheckpoint', { simple: true })).toBe(1000);
    await c.stop();
    db.close();
  });
});
