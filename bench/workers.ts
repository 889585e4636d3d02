/**
 * `serve --workers 2` against one process, on the same storage in the same run: req/s of
 * plain calls of one shape at c = 50, alternating one and two workers round by round, with the CPU of
 * every gateway process (the primary and its workers) per call. On a 2-core machine the
 * upstream and the load generator share the cores with the workers, so this shows what a
 * second core buys here, not what it buys on a machine with cores to spare.
 */
import { readFileSync } from 'node:fs';
import { runLoad } from './load.js';
import { type Child, sleep, startNode } from './procs.js';

export interface WorkersResult {
  storage: string;
  /** The call shape measured (bench/shapes.ts): plain calls of that shape. */
  shape: string;
  /** Median req/s and CPU µs per call (every gateway process) with 1 and 2 workers. */
  one: { rps: number; cpuUsPerCall: number };
  two: { rps: number; cpuUsPerCall: number };
  rounds: number;
  otherLoadCores: number;
}

/** The processes a gateway runs as: the primary and the workers it forked. */
function processTree(pid: number): number[] {
  try {
    const kids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    return [pid, ...kids];
  } catch {
    return [pid];
  }
}

const median = (xs: number[]) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

export async function workersThroughput(o: {
  storage: string;
  shape: string;
  /** Node arguments of `serve` for this storage (the config's gateway). */
  serveArgs: string[];
  cwd: string;
  request: string;
  answer: string;
  headers: Record<string, string>;
  duration: number;
  settleS: number;
  rounds: number;
  benchPids: number[];
}): Promise<WorkersResult> {
  const started: Child[] = [];
  try {
    const one = await startNode(`gateway (${o.storage}, 1 worker)`, o.serveArgs, o.cwd);
    started.push(one);
    const two = await startNode(`gateway (${o.storage}, 2 workers)`, [...o.serveArgs, '--workers', '2'], o.cwd, 120_000);
    started.push(two);
    const runs: Record<'one' | 'two', Array<{ rps: number; cpu: number; other: number }>> = { one: [], two: [] };
    const measure = async (which: 'one' | 'two', child: Child, duration: number, settleS: number) => {
      const pids = processTree(child.pid);
      const r = await runLoad({
        url: `${child.url}/v1/chat/completions`,
        body: o.request,
        expectBody: o.answer,
        headers: o.headers,
        connections: 50,
        duration,
        settleS,
        cpuPids: { target: pids },
        benchPids: [...o.benchPids, ...pids],
      });
      if (r.errors) throw new Error(`${child.name}: ${r.errors} calls failed: ${JSON.stringify(r.errorDetail)}`);
      if (duration === o.duration) runs[which].push({ rps: r.rps, cpu: r.cpuMsPer1k.target ?? NaN, other: r.otherLoadCores });
    };
    // Warm both (JIT, pools, the tokenizer's first load in each worker).
    await measure('one', one, 2, 0);
    await measure('two', two, 2, 0);
    for (let round = 0; round < o.rounds; round++) {
      const order: Array<['one' | 'two', Child]> = round % 2 === 0 ? [['one', one], ['two', two]] : [['two', two], ['one', one]];
      for (const [which, child] of order) {
        await measure(which, child, o.duration, o.settleS);
        await sleep(500);
      }
    }
    const sum = (k: 'one' | 'two') => ({ rps: median(runs[k].map((r) => r.rps)), cpuUsPerCall: median(runs[k].map((r) => r.cpu)) });
    return { storage: o.storage, shape: o.shape, one: sum('one'), two: sum('two'), rounds: o.rounds, otherLoadCores: median([...runs.one, ...runs.two].map((r) => r.other)) };
  } finally {
    await Promise.allSettled(started.map((c) => c.stop(20_000)));
  }
}
