/**
 * WAL checkpoints on a thread of their own. In WAL mode every commit appends to the log, and a
 * checkpoint copies the log back into the database file and, with synchronous NORMAL or FULL,
 * flushes both to disk. SQLite's default runs one inside whichever commit finds the log past
 * 1,000 pages: on the gateway's event loop, which then waits for the disk while every call in
 * flight waits with it (a commit that checkpointed took 8 to 19 ms at c = 50, against 0.6 ms
 * for one that did not). Here a worker thread with its own connection runs a PASSIVE
 * checkpoint a few times a second: it never blocks a writer, and the writers' connection
 * stops checkpointing for as long as the worker is up. A busy process starts the worker after
 * its first group commits (a one-off admin command never does); if the worker fails, the
 * writers' connection checkpoints inline again, as by default.
 */
import { Worker } from 'node:worker_threads';
import type { Database } from './connection.js';

/** Group commits before the worker starts: a process that writes a little never needs it. */
const START_AFTER_COMMITS = 200;
/** How often the worker checkpoints (ms). At 5,000 calls a second the log stays a few hundred pages. */
const EVERY_MS = 100;
/** SQLite's own default, restored when the worker is gone. */
const INLINE_PAGES = 1000;

/** The worker: CommonJS, evaluated, given the driver's resolved path (it runs from no file of ours). */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const message = (err) => String((err && err.message) || err);
let db = null;
try {
  const Driver = require(workerData.driver);
  db = new Driver(workerData.path, { timeout: workerData.busyTimeoutMs });
  db.pragma('synchronous = ' + workerData.synchronous);
  parentPort.postMessage({ ready: true });
} catch (err) {
  parentPort.postMessage({ failed: message(err) });
}
if (db) {
  const stop = () => {
    clearInterval(timer);
    try { db.close(); } catch {}
    parentPort.close();
  };
  const timer = setInterval(() => {
    try {
      db.pragma('wal_checkpoint(PASSIVE)');
    } catch (err) {
      parentPort.postMessage({ failed: message(err) });
      stop();
    }
  }, workerData.everyMs);
  parentPort.on('message', (m) => { if (m === 'stop') stop(); });
}
`;

export interface CheckpointerOptions {
  path: string;
  synchronous: 'normal' | 'full';
  busyTimeoutMs: number;
  /** better-sqlite3's resolved entry point. */
  driver: string;
}

export class Checkpointer {
  private commits = 0;
  private worker: Worker | null = null;
  /** Settles when the worker has exited, whenever that was. */
  private exited: Promise<void> = Promise.resolve();
  /** True while the worker checkpoints and the writers' connection does not. */
  private active = false;
  private stopped = false;

  constructor(
    private readonly db: Database,
    private readonly options: CheckpointerOptions,
  ) {}

  /** Whether checkpoints run on the worker now (tests read it). */
  get running(): boolean {
    return this.active;
  }

  /** Called after each group commit; starts the worker once the process is busy. */
  committed(): void {
    if (this.worker !== null || this.stopped || ++this.commits < START_AFTER_COMMITS) return;
    this.start();
  }

  private start(): void {
    let worker: Worker;
    try {
      worker = new Worker(WORKER_SOURCE, {
        eval: true,
        workerData: { ...this.options, synchronous: this.options.synchronous === 'full' ? 'FULL' : 'NORMAL', everyMs: EVERY_MS },
      });
    } catch (err) {
      this.fail(err);
      return;
    }
    this.worker = worker;
    this.exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
    // Never what keeps the process alive.
    worker.unref();
    worker.on('message', (m: { ready?: true; failed?: string }) => {
      if (m.ready && !this.stopped) {
        this.db.pragma('wal_autocheckpoint = 0');
        this.active = true;
      } else if (m.failed !== undefined) {
        this.fail(m.failed);
      }
    });
    worker.on('error', (err) => this.fail(err));
    worker.on('exit', () => {
      if (!this.stopped) this.fail('the checkpoint thread exited');
    });
  }

  /** Back to checkpoints inside commits, as SQLite does by default. */
  private fail(err: unknown): void {
    if (this.stopped) return;
    this.stopped = true;
    this.inline();
    process.emitWarning(
      `model-gateway: SQLite checkpoints moved back onto the main thread: ${err instanceof Error ? err.message : String(err)}`,
    );
  }

  private inline(): void {
    if (this.active && this.db.open) this.db.pragma(`wal_autocheckpoint = ${INLINE_PAGES}`);
    this.active = false;
  }

  /**
   * Stops the worker and waits for its connection to close, so that the writers' connection,
   * closed next, is the last one: SQLite then checkpoints the whole log and deletes it.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    this.inline();
    const worker = this.worker;
    if (worker === null) return;
    worker.postMessage('stop');
    const timer = setTimeout(() => void worker.terminate(), 2_000);
    await this.exited;
    clearTimeout(timer);
  }
}
