/**
 * Opening a SQLite database for the stores: load better-sqlite3 (an optional peer, loaded
 * only when SQLite storage is used), set WAL mode, run the migrations, and map driver
 * failures to StoreUnavailableError.
 */
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import { StoreUnavailableError } from '../errors.js';
import { MIGRATIONS } from './schema.js';

/**
 * The least time between two group commits while writes keep coming (ms). Under load a commit
 * then carries a millisecond's writes; a write that finds the database idle commits at once.
 */
const GROUP_MS = 1;

export type Database = BetterSqlite3.Database;
export type Statement = BetterSqlite3.Statement;

/** Thrown when the database cannot be read or written (the gateway answers 503). */
export class SqliteStoreError extends StoreUnavailableError {
  override readonly name = 'SqliteStoreError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** better-sqlite3's resolved entry point (the checkpoint thread loads it from there). */
export function driverPath(): string {
  return createRequire(import.meta.url).resolve('better-sqlite3');
}

/** better-sqlite3, loaded on first use so that only SQLite users need it installed. */
function loadDriver(): typeof BetterSqlite3 {
  const require = createRequire(import.meta.url);
  try {
    return require('better-sqlite3') as typeof BetterSqlite3;
  } catch (err) {
    const code = (err as { code?: string }).code;
    const hint =
      code === 'MODULE_NOT_FOUND'
        ? 'install it: npm install better-sqlite3 (npm 11 also needs its install script allowed: npm install-scripts approve better-sqlite3)'
        : 'its native module did not load; rebuild it: npm rebuild better-sqlite3';
    throw new SqliteStoreError(`storage driver "sqlite" needs the better-sqlite3 package: ${hint}. (${(err as Error).message})`, {
      cause: err,
    });
  }
}

export interface OpenOptions {
  path: string;
  synchronous: 'normal' | 'full';
  busyTimeoutMs: number;
}

export function openDatabase({ path, synchronous, busyTimeoutMs }: OpenOptions): Database {
  const Driver = loadDriver();
  const memory = path === ':memory:';
  let db: Database;
  try {
    if (!memory) mkdirSync(dirname(resolve(path)), { recursive: true });
    db = new Driver(path, { timeout: busyTimeoutMs });
  } catch (err) {
    throw new SqliteStoreError(`cannot open SQLite database ${path}: ${(err as Error).message}${permissionHint(err, path)}`, { cause: err });
  }
  try {
    // WAL: readers never block the writer, and a commit is one append to the log. With
    // synchronous=NORMAL a committed transaction survives the process being killed (the OS
    // has the log), and a power loss or OS crash may lose the last transactions but never
    // corrupts the database (the log is fsynced at each checkpoint); FULL also fsyncs every
    // commit, so it survives power loss too, at the cost of a disk flush per commit.
    if (!memory) db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${synchronous === 'full' ? 'FULL' : 'NORMAL'}`);
    migrate(db);
  } catch (err) {
    db.close();
    throw err instanceof SqliteStoreError ? err : new SqliteStoreError(`cannot prepare SQLite database ${path}: ${(err as Error).message}${permissionHint(err, path)}`, { cause: err });
  }
  return db;
}

/**
 * What to check when the file cannot be written or opened: usually who owns it (a command run
 * as another user, root, created the file or its folder), not a storage outage.
 */
function permissionHint(err: unknown, path: string): string {
  const code = String((err as { code?: unknown }).code ?? '');
  if (!/^(SQLITE_READONLY|SQLITE_CANTOPEN|SQLITE_PERM|EACCES|EPERM)/.test(code)) return '';
  return ` (check that the user running the gateway may write ${resolve(path)}, its -wal and -shm files and their folder: a command run as another user, such as root, may have created them)`;
}

function migrate(db: Database): void {
  db.transaction(() => {
    const applied = db.pragma('user_version', { simple: true }) as number;
    if (applied > MIGRATIONS.length) {
      throw new SqliteStoreError(
        `the database was written by a newer model-gateway (schema version ${applied}; this one knows ${MIGRATIONS.length})`,
      );
    }
    for (let v = applied; v < MIGRATIONS.length; v++) db.exec(MIGRATIONS[v] as string);
    // PRAGMA takes no parameters; the value is a trusted integer.
    db.pragma(`user_version = ${MIGRATIONS.length}`);
  }).immediate();
}

interface Queued {
  what: string;
  /** When the write gives up waiting for another process's write lock (performance.now()). */
  deadline: number;
  fn: () => unknown;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

type Outcome = { ok: true; value: unknown } | { ok: false; err: unknown };

/** Whether a driver error is SQLITE_BUSY: another connection holds the write lock. */
function isBusy(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}

/** How long to wait before the next try at a locked database: doubling from 2 ms to 100 ms. */
const busyBackoff = (attempt: number) => Math.min(100, 2 ** (attempt + 1));

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** What every SQLite store shares: the database, the clock, and error mapping. */
export class SqliteContext {
  private closed = false;
  /** One transaction wrapper for every write: `fn` is its argument, not a new wrapper per call. */
  private readonly tx: BetterSqlite3.Transaction<(fn: () => unknown) => unknown>;
  /** Writes waiting for the next group commit (see `batch`). */
  private queue: Queued[] = [];
  /** When the last group commit ran (performance.now()). */
  private lastFlush = Number.NEGATIVE_INFINITY;
  private readonly flushQueued = () => this.flush();
  /** Lazy housekeeping, called by the busiest writes (placeHold, hit); set by the factory. */
  sweep: () => void = () => {};
  /** Called after each group commit that committed (the checkpointer counts them). */
  committed: () => void = () => {};
  /** Group commits in a row that found the database locked (0: none, not backing off). */
  private busyTries = 0;

  /**
   * @param timeoutMs how long a write keeps trying while another process holds the write
   *   lock, before it fails (503). The driver's own busy wait blocks the event loop, so it is
   *   kept short (`busyTimeoutMs` when opening) and the tries after it wait asynchronously.
   */
  constructor(
    readonly db: Database,
    readonly now: () => number,
    readonly timeoutMs = 5_000,
  ) {
    this.tx = db.transaction((fn: () => unknown) => fn());
  }

  /** Prepares a statement whose integers come back as bigints (money must stay exact). */
  exact(sql: string): Statement {
    return this.db.prepare(sql).safeIntegers(true);
  }

  prepare(sql: string): Statement {
    return this.db.prepare(sql);
  }

  /**
   * Runs `fn` in one IMMEDIATE transaction: it takes the write lock before reading, so its
   * reads and writes are one atomic step, also against other processes on the same file.
   */
  async write<T>(what: string, fn: () => T): Promise<T> {
    const deadline = performance.now() + this.timeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return this.run(what, () => this.tx.immediate(fn) as T);
      } catch (err) {
        const cause = (err as { cause?: unknown }).cause;
        if (!isBusy(cause)) throw err;
        const left = deadline - performance.now();
        if (left <= 0) throw this.lockedError(what, cause);
        await sleep(Math.min(busyBackoff(attempt), left));
      }
    }
  }

  private lockedError(what: string, cause: unknown): SqliteStoreError {
    return new SqliteStoreError(`SQLite ${what} failed: the database stayed locked by another connection for ${this.timeoutMs} ms`, { cause });
  }

  /**
   * Runs `fn` as one atomic step of a group commit: the writes queued during this turn of the
   * event loop (or, while the database is busy, during the GROUP_MS since the last commit)
   * run one after another in one IMMEDIATE transaction and commit together; one that throws
   * is rolled back alone and rejects alone (see commitGroup). The promise
   * settles once the commit is done, so a resolved write is as durable as one committed on its
   * own. In WAL mode a commit writes every page the transaction changed: the busy calls of a
   * turn share their pages (the wallet, the window, the ledger's last page) and one commit.
   */
  batch<T>(what: string, fn: () => T): Promise<T> {
    if (this.closed) return Promise.reject(new SqliteStoreError(`SQLite ${what} failed: the database is closed`));
    return new Promise<T>((resolve, reject) => {
      const deadline = performance.now() + this.timeoutMs;
      if (this.queue.push({ what, deadline, fn, resolve: resolve as (v: unknown) => void, reject }) === 1 && this.busyTries === 0) {
        // An idle database commits at once; a busy one at most once per GROUP_MS, so that a
        // commit (most of what a write costs) is shared by the writes of that millisecond,
        // not only by those of one event-loop turn.
        const since = performance.now() - this.lastFlush;
        if (since >= GROUP_MS) setImmediate(this.flushQueued);
        else setTimeout(this.flushQueued, Math.ceil(GROUP_MS - since));
      }
    });
  }

  /** Commits the queued writes (see `batch`). */
  private flush(): void {
    const ops = this.queue;
    if (ops.length === 0) return;
    this.queue = [];
    this.lastFlush = performance.now();
    let outcomes: Outcome[];
    try {
      if (this.closed) throw new SqliteStoreError('the database is closed');
      outcomes = this.commitGroup(ops);
    } catch (err) {
      // BEGIN or COMMIT failed: nothing of the group was written.
      if (isBusy(err) && !this.closed) {
        this.retryLocked(ops, err);
        return;
      }
      this.busyTries = 0;
      for (const op of ops) op.reject(this.storeError(op.what, err));
      return;
    }
    this.busyTries = 0;
    this.committed();
    ops.forEach((op, i) => {
      const o = outcomes[i]!;
      if (o.ok) op.resolve(o.value);
      else op.reject(this.storeError(op.what, o.err));
    });
  }

  /**
   * Another connection holds the write lock: the group waits (off the event loop) and tries
   * again, with the writes queued meanwhile; a write whose deadline passed fails (503).
   */
  private retryLocked(ops: Queued[], err: unknown): void {
    const t = performance.now();
    const waiting: Queued[] = [];
    for (const op of ops) {
      if (op.deadline <= t) op.reject(this.lockedError(op.what, err));
      else waiting.push(op);
    }
    this.queue = [...waiting, ...this.queue];
    if (this.queue.length === 0) {
      this.busyTries = 0;
      return;
    }
    const next = Math.min(busyBackoff(this.busyTries++), Math.max(1, Math.min(...this.queue.map((op) => op.deadline)) - t));
    setTimeout(this.flushQueued, next);
  }

  /**
   * Runs a group's writes in one transaction and commits it. Writes almost never throw, so
   * the group first runs plainly, one write after another; if one throws, that whole attempt
   * is rolled back and the group runs again with each write in its own savepoint, so that the
   * one that throws is rolled back alone and the others commit. (A savepoint for every write
   * of every group cost two more statements per write.) Each write is a pure function of the
   * database, so running it again after the rollback is the same as running it once.
   */
  private commitGroup(ops: Queued[]): Outcome[] {
    const values: unknown[] = [];
    let threw = false;
    try {
      this.tx.immediate(() => {
        for (const op of ops) {
          try {
            values.push(op.fn());
          } catch (err) {
            threw = true;
            throw err;
          }
        }
      });
      return values.map((value) => ({ ok: true, value }));
    } catch (err) {
      if (!threw) throw err;
    }
    const outcomes: Outcome[] = [];
    this.tx.immediate(() => {
      for (const op of ops) {
        try {
          // Inside the transaction, the wrapper runs `fn` in a savepoint.
          outcomes.push({ ok: true, value: this.tx(op.fn) });
        } catch (err) {
          // Some failures (a full disk, an I/O error) roll back the whole transaction, not
          // only the savepoint: the writes after it would then each commit on their own, so
          // the whole group fails instead.
          if (!this.db.inTransaction) throw err;
          outcomes.push({ ok: false, err });
        }
      }
    });
    return outcomes;
  }

  private storeError(what: string, err: unknown): unknown {
    if (err instanceof SqliteStoreError || err instanceof RangeError) return err;
    return new SqliteStoreError(`SQLite ${what} failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }

  /** Runs several reads in one transaction, so they see one snapshot. */
  read<T>(what: string, fn: () => T): T {
    return this.run(what, () => this.tx.deferred(fn) as T);
  }

  /**
   * Runs one statement: a read, or a write that is atomic by itself. Writes still queued for
   * the group commit are committed first, so every read and write sees all the writes this
   * process issued before it (a settle queued in this turn is in the ledger read after it).
   */
  run<T>(what: string, fn: () => T): T {
    if (this.closed) throw new SqliteStoreError(`SQLite ${what} failed: the database is closed`);
    // While the group waits for another connection's lock, its retry timer commits it.
    if (this.queue.length > 0 && this.busyTries === 0) this.flush();
    try {
      return fn();
    } catch (err) {
      throw this.storeError(what, err);
    }
  }

  close(): void {
    if (this.closed) return;
    // Writes already queued are committed first: their callers were told nothing yet.
    this.flush();
    this.closed = true;
    this.db.close();
  }
}

/** A bigint column (or null) as a number: for times and counts, which stay far below 2^53. */
export function num(v: unknown): number {
  return v === null || v === undefined ? 0 : Number(v);
}

/** A bigint column (or null) as a bigint. */
export function big(v: unknown): bigint {
  if (v === null || v === undefined) return 0n;
  return typeof v === 'bigint' ? v : BigInt(v as number);
}
