/**
 * One measured load: autocannon in this process, with exact (sub-ms) latencies, the targets'
 * CPU, and how much CPU the rest of the machine used meanwhile.
 *
 * autocannon opens all its connections at once when it starts, and the first few hundred
 * responses of a run wait behind that burst. With 256 connections this start-up queue alone
 * reaches p99 (a relay takes 0.5-1.5 s to drain it). So the first `settleS` seconds of every
 * run are not counted. Throughput counts the calls that complete after that. Latency counts
 * the calls that start after it. CPU is measured over the same window.
 */
import autocannon from 'autocannon';
import { cpuMsOf, machineCpuMs, selfCpuMs } from './procs.js';

export interface LoadSpec {
  url: string;
  body: string;
  headers: Record<string, string>;
  connections: number;
  /** Seconds measured (after `settleS`). */
  duration: number;
  /** Seconds of load at the start that are not counted. Default 0. */
  settleS?: number;
  /** A response whose body differs counts as an error. */
  expectBody: string;
  /** Instead of `expectBody`: a response for which this returns false counts as an error. */
  verifyBody?: (body: string) => boolean;
  /** Replace `[<id>]` in the body with a fresh id per call (default true). */
  uniqueIds?: boolean;
  /**
   * Processes whose CPU time is measured over the window (e.g. the target and the upstream);
   * a list is summed (e.g. the database backends that serve the target).
   */
  cpuPids?: Record<string, number | number[]>;
  /** Every benchmark process besides this one: CPU the machine spent beyond them is "other load". */
  benchPids?: number[];
}

export interface LoadResult {
  /** Completed 2xx responses per second over the measured window. */
  rps: number;
  requests: number;
  seconds: number;
  /** Milliseconds, from every response's own timing (not autocannon's 1 ms histogram). */
  latency: { p50: number; p90: number; p99: number; max: number; mean: number };
  /** Errors over the whole run, settle time included. */
  errors: number;
  errorDetail: { connection: number; timeouts: number; non2xx: number; mismatches: number };
  /** CPU ms each watched process (or list of processes) used per 1,000 responses, i.e. µs per call. */
  cpuMsPer1k: Record<string, number>;
  /**
   * How many cores' worth of CPU processes outside the benchmark used during the window,
   * plus time the hypervisor stole. Above about 0.2 on a 2-core machine, the cell is not
   * trustworthy.
   */
  otherLoadCores: number;
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

class Floats {
  data = new Float64Array(65_536);
  length = 0;
  push(x: number): void {
    if (this.length === this.data.length) {
      const grown = new Float64Array(this.data.length * 2);
      grown.set(this.data);
      this.data = grown;
    }
    this.data[this.length++] = x;
  }
}

interface Snapshot {
  at: number;
  responses: number;
  pids: Record<string, number>;
  machine: number;
  ours: number;
}

export function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const settleMs = (spec.settleS ?? 0) * 1000;
  const benchPids = spec.benchPids ?? [];
  const snapshot = (responses: number): Snapshot => ({
    at: performance.now(),
    responses,
    pids: Object.fromEntries(
      Object.entries(spec.cpuPids ?? {}).map(([k, pids]) => [k, typeof pids === 'number' ? cpuMsOf(pids) : pids.reduce((sum, pid) => sum + cpuMsOf(pid), 0)]),
    ),
    machine: machineCpuMs().busy,
    ours: benchPids.reduce((sum, pid) => sum + (cpuMsOf(pid) || 0), selfCpuMs()),
  });

  return new Promise((resolve, reject) => {
    const done = new Floats(); // completion time of each 2xx response (ms since start)
    const took = new Floats(); // its latency (ms)
    const t0 = performance.now();
    let start: Snapshot | null = settleMs > 0 ? null : snapshot(0);
    const settleTimer = settleMs > 0 ? setTimeout(() => (start = snapshot(done.length)), settleMs) : undefined;

    const instance = autocannon(
      {
        url: spec.url,
        method: 'POST',
        headers: { 'content-type': 'application/json', ...spec.headers },
        body: spec.body,
        connections: spec.connections,
        pipelining: 1,
        duration: spec.duration + settleMs / 1000,
        timeout: 10,
        ...(spec.verifyBody ? { verifyBody: spec.verifyBody } : { expectBody: spec.expectBody }),
        // `[<id>]` in the body becomes a fresh id on every call (see fixtures.ts).
        idReplacement: spec.uniqueIds ?? true,
        renderProgressBar: false,
        renderResultsTable: false,
        renderLatencyTable: false,
      },
      (err, result) => {
        clearTimeout(settleTimer);
        if (err) return reject(err);
        const end = snapshot(done.length);
        const from = start ?? end;
        const n = end.responses - from.responses;
        const seconds = (end.at - from.at) / 1000;
        const windowStart = from.at - t0;
        const lat: number[] = [];
        let sum = 0;
        for (let i = from.responses; i < done.length; i++) {
          const l = took.data[i]!;
          if (done.data[i]! - l >= windowStart) {
            lat.push(l);
            sum += l;
          }
        }
        const sorted = Float64Array.from(lat).sort();
        const cpuMsPer1k: Record<string, number> = {};
        for (const k of Object.keys(spec.cpuPids ?? {})) cpuMsPer1k[k] = n ? ((end.pids[k]! - from.pids[k]!) / n) * 1000 : NaN;
        const foreignMs = end.machine - from.machine - (end.ours - from.ours);
        resolve({
          rps: seconds > 0 ? n / seconds : NaN,
          requests: n,
          seconds,
          latency: {
            p50: percentile(sorted, 50),
            p90: percentile(sorted, 90),
            p99: percentile(sorted, 99),
            max: percentile(sorted, 100),
            mean: sorted.length ? sum / sorted.length : NaN,
          },
          errors: result.errors + result.non2xx + result.mismatches,
          errorDetail: {
            connection: result.errors - result.timeouts,
            timeouts: result.timeouts,
            non2xx: result.non2xx,
            mismatches: result.mismatches,
          },
          cpuMsPer1k,
          otherLoadCores: seconds > 0 ? Math.max(0, foreignMs) / 1000 / seconds : NaN,
        });
      },
    );
    instance.on('response', (_client, status, _bytes, ms) => {
      if (status < 200 || status >= 300) return;
      done.push(performance.now() - t0);
      took.push(ms);
    });
  });
}
