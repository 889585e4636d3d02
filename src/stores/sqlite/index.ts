import { resolve } from 'node:path';
import { createSweeper } from '../memory/sweep.js';
import type { Stores } from '../types.js';
import { createSqliteAccounts, createSqliteKeys } from './accounts-keys.js';
import { createSqliteBatches } from './batches.js';
import { createSqliteBilling } from './billing.js';
import { Checkpointer } from './checkpointer.js';
import { driverPath, openDatabase, SqliteContext } from './connection.js';
import { createSqliteContent } from './content.js';
import { createSqliteIdempotency } from './idempotency.js';
import { createSqliteJobs } from './jobs.js';
import { createSqliteLimits } from './limits.js';
import { createSqliteResponseCache } from './response-cache.js';
import { WINDOW_ROWS_TTL_MS } from './windows.js';
import { sqliteIdentity } from '../identity.js';

export { SqliteStoreError } from './connection.js';

export interface SqliteStoreOptions {
  /**
   * The database file, created (with its directory) when missing. A relative path is taken
   * from the working directory. `":memory:"` gives a throwaway database (tests).
   * @example "./data/gateway.db"
   */
  path: string;
  /** The only clock the stores read (unix ms). Tests pass a fake one. Default: Date.now. */
  now?: () => number;
  /**
   * "normal" (default): a committed change survives the process being killed (a crash,
   * `kill -9`); a power loss or OS crash may lose the last few commits. "full": every
   * commit is fsynced, so it survives those too, at the cost of a disk flush per write.
   */
  synchronous?: 'normal' | 'full';
  /**
   * How long a write keeps trying while another process (an admin command of the CLI, a
   * backup) holds the write lock, before its call fails with 503 (default 5000 ms). The tries
   * wait asynchronously: other requests are served meanwhile.
   */
  timeoutMs?: number;
  /**
   * How long one try waits inside the driver, blocking the event loop (default 20 ms): kept
   * short, the waiting is done between tries.
   */
  busyTimeoutMs?: number;
}

/** How often (by the store's clock) expired holds, leases, jobs and records are deleted. */
const SWEEP_INTERVAL_MS = 60_000;
/** How long a closed hold id is remembered (as the other drivers do). */
const CLOSED_TTL_MS = 24 * 60 * 60 * 1000;

/**
 * Every store in one SQLite file (better-sqlite3, WAL mode): durable books for the gateway
 * process. Calls are synchronous underneath, so one process never interleaves two of them;
 * every read-then-write runs in an IMMEDIATE transaction, so it stays atomic even when
 * another process (an admin command of the CLI) writes to the same file. The per-call writes
 * (holds, settles) of one event-loop turn (of up to a millisecond under load) share one
 * transaction and one commit. Rate and token windows are in the file too, so processes that
 * share it share every limit (see createSqliteLimits).
 */
export function createSqliteStores(options: SqliteStoreOptions): Stores {
  if (typeof options?.path !== 'string' || options.path === '') throw new TypeError('createSqliteStores: `path` is required');
  const now = options.now ?? Date.now;
  const opened = { path: options.path, synchronous: options.synchronous ?? 'normal', busyTimeoutMs: options.busyTimeoutMs ?? 20 } as const;
  const db = openDatabase(opened);
  const ctx = new SqliteContext(db, now, options.timeoutMs ?? 5_000);
  // A file's checkpoints move to a thread of their own once the process is busy.
  // Its thread may wait on a lock as long as a write may (it blocks no event loop but its own).
  const checkpointer = db.memory
    ? null
    : new Checkpointer(db, { ...opened, busyTimeoutMs: options.timeoutMs ?? 5_000, path: resolve(opened.path), driver: driverPath() });
  if (checkpointer) ctx.committed = () => checkpointer.committed();

  // Lazy housekeeping on ordinary calls (no timer keeps the process alive). Expired rows
  // already count for nothing; this only keeps the file from growing.
  const sweepNow = (() => {
    const statements = [
      // A scan of the open holds (no expiry index: holds and settles would pay to keep it).
      ['DELETE FROM holds WHERE expires_at <= ?', 0],
      ['DELETE FROM closed_holds WHERE closed_at <= ?', CLOSED_TTL_MS],
      ['DELETE FROM leases WHERE expires_at <= ?', 0],
      ['DELETE FROM jobs WHERE gone_at <= ?', 0],
      ['DELETE FROM idempotency WHERE expires_at <= ?', 0],
      ['DELETE FROM response_cache WHERE expires_at <= ?', 0],
      // Windows nobody hit for an hour, their hits with them (a busy window trims itself on
      // every hit); in one transaction, so a window's count always matches its hits.
      ['DELETE FROM rate_hits WHERE bucket IN (SELECT bucket FROM rate_windows WHERE last <= ?)', WINDOW_ROWS_TTL_MS],
      ['DELETE FROM rate_windows WHERE last <= ?', WINDOW_ROWS_TTL_MS],
      ['DELETE FROM token_takes WHERE at <= ?', WINDOW_ROWS_TTL_MS],
    ] as const;
    const prepared = statements.map(([sql, age]) => [db.prepare(sql), age] as const);
    return (t: number) =>
      ctx
        .write('sweep', () => {
          for (const [s, age] of prepared) s.run(t - age);
        })
        // Housekeeping only: the next interval tries again.
        .catch(() => {});
  })();
  ctx.sweep = createSweeper(now, SWEEP_INTERVAL_MS, (t) => void sweepNow(t));

  const limits = createSqliteLimits(ctx);
  return {
    identity: sqliteIdentity(options.path),
    accounts: createSqliteAccounts(ctx),
    keys: createSqliteKeys(ctx),
    billing: createSqliteBilling(ctx, limits),
    limits,
    jobs: createSqliteJobs(ctx),
    content: createSqliteContent(ctx),
    idempotency: createSqliteIdempotency(ctx),
    responseCache: createSqliteResponseCache(ctx),
    batches: createSqliteBatches(ctx),
    async ping() {
      ctx.run('ping', () => db.prepare('SELECT 1').get());
    },
    async close() {
      // The checkpoint thread's connection closes first, so that this one is the last: its
      // close then checkpoints the whole log and deletes it.
      await checkpointer?.stop();
      ctx.close();
    },
  };
}
