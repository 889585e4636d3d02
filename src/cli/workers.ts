/**
 * `serve --workers N`: N gateway processes answering on one port (node:cluster), one per core.
 *
 * The primary process serves nothing itself: it forks the workers one after the other (each
 * starts only once the one before listens, so schema migrations and SQLite's switch to WAL
 * never race), prints the start-up line once all listen, and replaces a worker that dies.
 * Each worker is a whole gateway with its own store connections and its own settle journal
 * file (journal files are per process, locked by their owner, in the folder they share). On
 * SIGTERM, SIGINT or SIGHUP the primary passes SIGTERM to every worker, each drains like a single
 * gateway does (calls in flight finish within the grace, every charge settles), and the
 * primary exits once all have: 0 when every worker exited cleanly.
 *
 * Books must be shared between processes, so the memory driver (and SQLite's ":memory:") is
 * refused before anything starts. SQLite is safe across processes: its file is in WAL mode,
 * every write is an IMMEDIATE transaction, and a busy database is waited for (off the event
 * loop, up to storage.timeoutMs).
 */
import cluster, { type Worker } from 'node:cluster';
import { availableParallelism } from 'node:os';
import { AggregatorRegistry, type PrometheusContentType } from 'prom-client';
import { CLUSTER_METRICS, GATEWAY_WORKER_ENV } from '../observability/metrics.js';
import { parseOptions } from '../options.js';
import { loadConfigFile } from './config-file.js';

/** What a worker tells the primary once it listens: its start-up text. */
const LISTENING = 'model-gateway:listening';

/** The most workers one machine gets: far more than cores only adds context switches. */
const MAX_WORKERS = 256;

export class WorkersError extends Error {}

/** `--workers`: a whole number from 1, or `auto` (the cores this process may use). Default 1. */
export function workerCount(value: string | undefined): number {
  if (value === undefined) return 1;
  if (value === 'auto') return availableParallelism();
  const n = /^\d{1,3}$/.test(value) ? Number(value) : NaN;
  if (!(n >= 1 && n <= MAX_WORKERS)) throw new WorkersError(`--workers must be a whole number from 1 to ${MAX_WORKERS}, or auto; got "${value}"`);
  return n;
}

/** True in a process the primary forked. */
export const isWorker = (): boolean => cluster.isWorker;

/** The signals that drain a serving process (primary or worker) instead of ending it. */
export const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

/** A worker's start-up text goes to the primary, which prints one for all; a lone gateway prints its own. */
export function announce(text: string): void {
  if (cluster.isWorker && process.send) process.send({ kind: LISTENING, text });
  else process.stdout.write(text);
}

/** Refuses, before any process starts, a config whose books live in one process's memory. */
export async function checkShareable(configFile: string, workers: number): Promise<void> {
  const loaded = await loadConfigFile(configFile);
  // A config that names no storage gets the CLI's default, SQLite in a file.
  if (loaded.storage === undefined) return;
  const { storage } = parseOptions(loaded as Parameters<typeof parseOptions>[0]);
  const inMemory = storage.driver === 'memory' || (storage.driver === 'sqlite' && storage.path === ':memory:');
  if (inMemory) {
    throw new WorkersError(
      `--workers ${workers} needs storage that processes share: "${storage.driver}"${storage.driver === 'sqlite' ? ' at :memory:' : ''} keeps ` +
        'its books inside one process, so each worker would have books of its own. Use sqlite (a file), postgres or redis, or --workers 1.',
    );
  }
}

/** The primary's gatherer of its workers' metrics (made on the first scrape). */
let gatherer: AggregatorRegistry<PrometheusContentType> | undefined;
const aggregator = (): AggregatorRegistry<PrometheusContentType> => (gatherer ??= new AggregatorRegistry());

/** The first wait before replacing a worker that failed; it doubles while they keep failing. */
const RESTART_FIRST_MS = 250;
const RESTART_CAP_MS = 10_000;
/** A worker that ran at least this long was healthy: the next failure waits the first delay again. */
const HEALTHY_MS = 10_000;

/**
 * Runs the workers until a signal drains them; resolves with the exit code. When no worker
 * has ever listened, one that exits while starting (a port in use, a bad config: it said why
 * on stderr) stops them all with code 1. After that, a worker that dies or cannot start is
 * replaced, waiting longer while replacements keep failing (from 250 ms, doubling to 10 s): the
 * primary never stops the healthy workers for it, nor exits.
 */
export function superviseWorkers(count: number): Promise<number> {
  return new Promise((resolve) => {
    const live = new Set<Worker>();
    const listened = new WeakSet<Worker>();
    const startedAt = new WeakMap<Worker, number>();
    let restartWait = RESTART_FIRST_MS;
    let ready = 0;
    let stopping = false;
    let failed = false;
    const stopAll = () => {
      for (const w of live) w.process.kill('SIGTERM');
      if (live.size === 0) resolve(failed ? 1 : 0);
    };
    const fork = (): void => {
      if (stopping) return;
      const worker = cluster.fork({ [GATEWAY_WORKER_ENV]: '1' });
      startedAt.set(worker, Date.now());
      live.add(worker);
      worker.on('message', (m: { kind?: unknown; text?: unknown; id?: unknown } | null) => {
        if (m?.kind === CLUSTER_METRICS && typeof m.id === 'number') {
          // A scrape reached this worker: it answers every worker's metrics, summed here.
          const id = m.id;
          void aggregator()
            .clusterMetrics()
            .then(
              (text) => text,
              () => null,
            )
            .then((text) => {
              if (worker.isConnected()) worker.send({ kind: CLUSTER_METRICS, id, text });
            });
          return;
        }
        if (m?.kind !== LISTENING || typeof m.text !== 'string' || listened.has(worker)) return;
        listened.add(worker);
        if (ready === count) return; // a replacement: the start-up line was printed already
        ready++;
        if (ready < count) return fork();
        process.stdout.write(`${m.text}${count} worker processes on one port (pids ${[...live].map((w) => w.process.pid).join(', ')})\n`);
      });
      worker.on('exit', (code, signal) => {
        live.delete(worker);
        const how = signal ?? `code ${code}`;
        if (!stopping && ready === 0 && !listened.has(worker)) {
          stopping = failed = true;
          process.stderr.write(`model-gateway: a worker exited while starting (${how}); stopping\n`);
          return stopAll();
        }
        if (stopping) {
          // One still starting had no calls to drain: its end on the signal is no failure.
          if (code !== 0 && listened.has(worker)) failed = true;
          if (live.size === 0) resolve(failed ? 1 : 0);
          return;
        }
        // A worker that ran a while was healthy: its replacement starts at once-ish; one that
        // failed soon after starting waits longer each time, so a crash loop does not spin.
        if (listened.has(worker) && Date.now() - (startedAt.get(worker) ?? 0) >= HEALTHY_MS) restartWait = RESTART_FIRST_MS;
        const wait = restartWait;
        restartWait = Math.min(RESTART_CAP_MS, restartWait * 2);
        const what = listened.has(worker) ? 'exited' : 'exited while starting';
        process.stderr.write(`model-gateway: worker ${worker.process.pid} ${what} (${how}); starting another in ${wait} ms\n`);
        setTimeout(fork, wait);
      });
    };
    const stop = () => {
      if (stopping) return;
      stopping = true;
      process.stdout.write(`model-gateway shutting down: draining ${live.size} workers\n`);
      stopAll();
    };
    // Kept for every repeat, as each worker keeps its own: a primary ended by a second
    // signal would take its workers' connections to it down mid-drain.
    for (const signal of STOP_SIGNALS) process.on(signal, stop);
    fork();
  });
}
