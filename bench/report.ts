/**
 * The benchmark's numbers: per-round ratios to the bare relay, the performance targets judged
 * from the measured figures, and the Markdown report (bench/run.ts measures, this file reads).
 */
import type { HeldResult } from './held.js';
import type { LoadResult } from './load.js';
import type { CommandCount } from './redis-commands.js';
import {
  CPU_RATIO_GOAL,
  HEADLINE_C,
  HELD_GROWTH_GOAL_BYTES,
  IDLE_RSS_GOAL_BYTES,
  MAX_REDIS_COMMANDS_PER_CALL,
  PEER_RPS_GOAL,
  PER_EVENT_US_GOAL,
  REAL_CPU_RATIO_GOAL,
  REAL_PEER_RPS_GOAL,
  type Storage,
} from './targets.js';
import { STREAM_EVENT_COUNT } from './fixtures.js';

/** plain; streamed, the answer in one write; streamed paced, one event per write. */
export type Kind = 'plain' | 'stream' | 'paced' | 'paired';
export const KIND_NAMES: Kind[] = ['plain', 'stream', 'paced', 'paired'];
/**
 * real: the SDK's default request to an alias (the gateway rewrites names, adds and drops the
 * usage chunk; the headline); kind: the client asks for usage and the upstream answers with
 * the listed name (the stream passes through untouched; every earlier run measured this).
 * bench/shapes.ts has both.
 */
export type Shape = 'real' | 'kind';
export const SHAPE_NAMES: Shape[] = ['real', 'kind'];
export type TargetId = 'bare' | Storage | 'peer';
/** Other load (cores) above which a measurement is flagged as disturbed. */
export const NOISY_CORES = 0.2;

export interface Cell {
  shape: Shape;
  kind: Kind;
  c: number;
  /** Each target's measurements in round order (the bare relay's: every one, several per round). */
  runs: Partial<Record<TargetId, LoadResult[]>>;
  /** For each relay's run (same index as in `runs`): the bare relay's runs just before and after it. */
  baselines: Partial<Record<TargetId, Array<[LoadResult, LoadResult]>>>;
}

export interface TargetSummary {
  rps: number;
  p50: number;
  p90: number;
  p99: number;
  /** Median CPU µs per call of the relay process. */
  cpuUsPerCall: number;
  /** Median CPU µs per call of the storage service's processes (PostgreSQL backends, Redis); NaN when none. */
  storageCpuUsPerCall: number;
  upstreamCpuUsPerCall: number;
  errors: number;
  /** Median cores used by processes outside the benchmark while this target was measured. */
  otherLoadCores: number;
  rounds: Array<{ rps: number; p50: number; p99: number; cpuUsPerCall: number; errors: number; otherLoadCores: number }>;
}

/** Medians over the rounds of (target / the bare relay's runs on either side of it). */
export interface Ratios {
  cpu: number;
  p99: number;
  rps: number;
  p50: number;
  /** Median over the rounds of the mean p99 (ms) of the bare runs next to this relay's: what its p99 ratio compares with. */
  bareP99: number;
  /** Median over the rounds of (CPU µs per call - the bare runs' next to it): the relay's own added cost. */
  addedUs: number;
  /** Each round's CPU ratio, in round order: the spread the median was taken from (the bare relay's: 1 per bare run). */
  cpuRounds: number[];
  /** Each round's added CPU µs per call, in round order (the per-event figure's spread is read from these). */
  addedUsRounds: number[];
}

export interface CellSummary {
  shape: Shape;
  kind: Kind;
  c: number;
  targets: Partial<Record<TargetId, TargetSummary>>;
  vsBare: Partial<Record<TargetId, Ratios>>;
}

export type Status = 'met' | 'not met' | 'no target' | 'skipped';
export interface Check {
  name: string;
  goal: string;
  actual: string;
  status: Status;
}

export function median(xs: number[]): number {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export const fmtInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');
export const fmtMs = (n: number) => (!Number.isFinite(n) ? 'n/a' : n < 10 ? n.toFixed(2) : n < 100 ? n.toFixed(1) : n.toFixed(0));
export const fmtX = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}x` : 'n/a');
/**
 * The median of per-round figures with their spread, " (lowest - highest over N rounds)": a
 * ratio to the bare relay moves with the bare relay's own cost from round to round on a shared
 * machine, so a median is read with how far the rounds it came from lay apart.
 */
export function withSpread(median: string, rounds: number[], fmt: (n: number) => string): string {
  const xs = rounds.filter((x) => Number.isFinite(x));
  if (xs.length < 2) return median;
  return `${median} (${fmt(Math.min(...xs))} - ${fmt(Math.max(...xs))} over ${xs.length} rounds)`;
}

export const fmtMb = (bytes: number) => (Number.isFinite(bytes) ? `${(bytes / 1024 / 1024).toFixed(1)} MB` : 'n/a');

function summarizeTarget(runs: LoadResult[]): TargetSummary {
  return {
    rps: median(runs.map((r) => r.rps)),
    p50: median(runs.map((r) => r.latency.p50)),
    p90: median(runs.map((r) => r.latency.p90)),
    p99: median(runs.map((r) => r.latency.p99)),
    cpuUsPerCall: median(runs.map((r) => r.cpuMsPer1k.target ?? NaN)),
    storageCpuUsPerCall: median(runs.map((r) => r.cpuMsPer1k.storage ?? NaN)),
    upstreamCpuUsPerCall: median(runs.map((r) => r.cpuMsPer1k.upstream ?? NaN)),
    errors: runs.reduce((s, r) => s + r.errors, 0),
    otherLoadCores: median(runs.map((r) => r.otherLoadCores)),
    rounds: runs.map((r) => ({
      rps: r.rps,
      p50: r.latency.p50,
      p99: r.latency.p99,
      cpuUsPerCall: r.cpuMsPer1k.target ?? NaN,
      errors: r.errors,
      otherLoadCores: r.otherLoadCores,
    })),
  };
}

/**
 * Every ratio compares a relay's run with the mean of the bare relay's runs just before and
 * just after it, and the reported ratio is the median of those per-round ratios: drift within
 * a round and between rounds cancels out.
 */
export function summarizeCell(cell: Cell): CellSummary {
  const out: CellSummary = { shape: cell.shape, kind: cell.kind, c: cell.c, targets: {}, vsBare: {} };
  for (const [id, runs] of Object.entries(cell.runs) as Array<[TargetId, LoadResult[]]>) {
    out.targets[id] = summarizeTarget(runs);
    if (id === 'bare') {
      out.vsBare.bare = { cpu: 1, p99: 1, rps: 1, p50: 1, bareP99: out.targets.bare!.p99, addedUs: 0, cpuRounds: runs.map(() => 1), addedUsRounds: runs.map(() => 0) };
      continue;
    }
    const sides = cell.baselines[id] ?? [];
    const base = (f: (r: LoadResult) => number, i: number) => (sides[i] ? (f(sides[i]![0]) + f(sides[i]![1])) / 2 : NaN);
    const rounds = (f: (r: LoadResult) => number) => runs.map((r, i) => f(r) / base(f, i));
    const per = (f: (r: LoadResult) => number) => median(rounds(f));
    const p99 = (r: LoadResult) => r.latency.p99;
    const cpu = (r: LoadResult) => r.cpuMsPer1k.target ?? NaN;
    const cpuRounds = rounds(cpu);
    const addedUsRounds = runs.map((r, i) => cpu(r) - base(cpu, i));
    out.vsBare[id] = {
      cpu: median(cpuRounds),
      p99: per(p99),
      rps: per((r) => r.rps),
      p50: per((r) => r.latency.p50),
      bareP99: median(runs.map((_, i) => base(p99, i))),
      addedUs: median(addedUsRounds),
      cpuRounds,
      addedUsRounds,
    };
  }
  return out;
}

export interface StorageState {
  storage: Storage;
  /** Why this storage was not measured (its service did not answer), or null. */
  skipped: string | null;
}

export interface Evaluation {
  cells: CellSummary[];
  kinds: Kind[];
  shapes: Shape[];
  storages: StorageState[];
  held: Partial<Record<'bare' | Storage, HeldResult>>;
  heldCount: number;
  /** The Redis command count, why it was not taken, or how it failed; null when Redis was not asked for. */
  redisCommands: CommandCount | { skipped: string } | { failed: string } | null;
  /** RSS of each gateway's CLI just after it started, before any call. */
  idleRss: Partial<Record<Storage, number>>;
  /** RSS 1 s after listening, shown beside the settled figure the target judges. */
  startRss?: Partial<Record<Storage, number>>;
  /** Whether the peer ran (its req/s targets are judged only then). */
  peerMeasured: boolean;
}

/** The cells of one shape: every figure below is read within one shape, never across two. */
export const cellsOf = (cells: CellSummary[], shape: Shape) => cells.filter((c) => c.shape === shape);
/** What a check or heading of the real shape starts with; the kind shape's keep their old names. */
export const shapePrefix = (shape: Shape, sep: string) => (shape === 'kind' ? '' : `real shape${sep}`);

export const kindName = (k: Kind) => (k === 'plain' ? 'plain' : k === 'stream' ? 'stream, one write' : k === 'paced' ? 'stream, paced' : 'stream, paired');

/** The cell of `kind` at the judged concurrency, among one shape's cells. */
export const headlineCell = (cells: CellSummary[], kind: Kind) => cells.find((x) => x.kind === kind && x.c === HEADLINE_C);

const addedUs = (cells: CellSummary[], id: TargetId, kind: Kind) => headlineCell(cells, kind)?.vsBare[id]?.addedUs ?? NaN;

/**
 * The gateway's CPU per streamed event over the bare relay's, the judged figure: what it adds
 * per call when the answer comes one event per read, less what it adds when the same answer
 * comes two events per read over the same time, over the 11 reads that makes extra. Both calls
 * last as long, so they come at about the same rate and what a store does per call (and how
 * well its round trips batch) cancels out. NaN when either shape was not measured. `cells`: one
 * shape's (cellsOf).
 */
export function perEventUs(cells: CellSummary[], id: TargetId): number {
  return (addedUs(cells, id, 'paced') - addedUs(cells, id, 'paired')) / (STREAM_EVENT_COUNT / 2);
}

/** The per-event figure of each round (that round's paced and paired runs), in round order. */
export function perEventRounds(cells: CellSummary[], id: TargetId): number[] {
  const at = (kind: Kind) => headlineCell(cells, kind)?.vsBare[id]?.addedUsRounds ?? [];
  const paired = at('paired');
  return at('paced').map((paced, i) => (paced - (paired[i] ?? NaN)) / (STREAM_EVENT_COUNT / 2));
}

/**
 * The older, cruder figure, reported beside it: paced less one write, over the 21 extra reads.
 * A one-write call comes at two to three times a paced call's rate, so a store that batches
 * its round trips across calls costs more per paced call for that alone, and the streamed
 * path's own per-call cost is in it too: it errs high, the more so on a networked store.
 */
export function perEventVsOneWriteUs(cells: CellSummary[], id: TargetId): number {
  return (addedUs(cells, id, 'paced') - addedUs(cells, id, 'stream')) / (STREAM_EVENT_COUNT - 1);
}

/** One storage's targets in one shape: CPU per call per call kind, per event, req/s against the peer's. */
function shapeChecks(e: Evaluation, storage: Storage, shape: Shape): Check[] {
  const checks: Check[] = [];
  const cells = cellsOf(e.cells, shape);
  const cellAt = (kind: Kind) => headlineCell(cells, kind);
  const prefix = shapePrefix(shape, ', ');
  const goals = (shape === 'kind' ? CPU_RATIO_GOAL : REAL_CPU_RATIO_GOAL)[storage];
  for (const kind of e.kinds) {
    const r = cellAt(kind)?.vsBare[storage];
    const goal = goals?.[kind] ?? null;
    const name = `${storage}: ${prefix}${kindName(kind)}, CPU per call, c=${HEADLINE_C}`;
    if (!r) checks.push({ name, goal: goal === null ? 'none set' : `<= ${goal.toFixed(1)}x bare`, actual: `c=${HEADLINE_C} not measured`, status: 'skipped' });
    else if (goal === null) checks.push({ name, goal: 'none set', actual: withSpread(fmtX(r.cpu), r.cpuRounds, fmtX), status: 'no target' });
    else checks.push({ name, goal: `<= ${goal.toFixed(1)}x bare`, actual: withSpread(fmtX(r.cpu), r.cpuRounds, fmtX), status: r.cpu <= goal ? 'met' : 'not met' });
  }
  if (e.kinds.includes('paced') && e.kinds.includes('paired')) {
    const us = perEventUs(cells, storage);
    const name = `${storage}: ${prefix}CPU per streamed event over the bare relay`;
    const actual = withSpread(`${us.toFixed(1)} µs`, perEventRounds(cells, storage), (x) => `${x.toFixed(1)} µs`);
    checks.push({ name, goal: `<= ${PER_EVENT_US_GOAL} µs`, actual, status: Number.isFinite(us) && us <= PER_EVENT_US_GOAL ? 'met' : 'not met' });
  }
  if (e.peerMeasured) {
    for (const kind of ['plain', 'stream'] as const) {
      const cell = cellAt(kind);
      const ratio = (cell?.targets[storage]?.rps ?? NaN) / (cell?.targets.peer?.rps ?? NaN);
      const goal = (shape === 'kind' ? PEER_RPS_GOAL : REAL_PEER_RPS_GOAL)[kind];
      const name = `${storage}: ${prefix}${kindName(kind)}, req/s vs the peer's`;
      // Each round's: the gateway's req/s over the peer's in the same round.
      const peerRounds = cell?.targets.peer?.rounds ?? [];
      const rounds = (cell?.targets[storage]?.rounds ?? []).map((r, i) => r.rps / (peerRounds[i]?.rps ?? NaN));
      checks.push({ name, goal: `>= ${goal}x`, actual: withSpread(fmtX(ratio), rounds, fmtX), status: ratio >= goal ? 'met' : 'not met' });
    }
  }
  return checks;
}

/** The targets, each judged from the measured figures only. */
export function evaluate(e: Evaluation): Check[] {
  const checks: Check[] = [];
  for (const { storage, skipped } of e.storages) {
    if (skipped) {
      checks.push({ name: `${storage}: every target`, goal: '', actual: skipped, status: 'skipped' });
      continue;
    }
    for (const shape of e.shapes) checks.push(...shapeChecks(e, storage, shape));
    const idle = e.idleRss[storage];
    if (idle !== undefined) {
      const name = `${storage}: idle RSS of the CLI`;
      const started = e.startRss?.[storage];
      const actual = `${fmtMb(idle)}${started === undefined ? '' : ` (1 s after listening: ${fmtMb(started)})`}`;
      checks.push({ name, goal: `<= ${fmtMb(IDLE_RSS_GOAL_BYTES)}`, actual, status: idle <= IDLE_RSS_GOAL_BYTES ? 'met' : 'not met' });
    }
    if (e.heldCount > 0) {
      const h = e.held[storage];
      const name = `${storage}: ${e.heldCount.toLocaleString('en-US')} held streams, RSS over idle`;
      const goal = `< ${fmtMb(HELD_GROWTH_GOAL_BYTES)}`;
      if (!h) checks.push({ name, goal, actual: 'not measured', status: 'skipped' });
      else {
        // The figure only counts when the upstream really held every stream at once.
        const allHeld = h.upstreamHeld === h.count;
        checks.push({
          name,
          goal,
          actual: `${fmtMb(h.growth)}${allHeld ? '' : ` (the upstream held only ${h.upstreamHeld})`}`,
          status: h.growth < HELD_GROWTH_GOAL_BYTES && allHeld ? 'met' : 'not met',
        });
      }
    }
  }
  if (e.redisCommands) {
    const name = 'redis: commands per billed chat call';
    const goal = `<= ${MAX_REDIS_COMMANDS_PER_CALL}`;
    if ('skipped' in e.redisCommands) checks.push({ name, goal, actual: e.redisCommands.skipped, status: 'skipped' });
    else if ('failed' in e.redisCommands) checks.push({ name, goal, actual: `the count failed: ${e.redisCommands.failed}`, status: 'not met' });
    else {
      const rc = e.redisCommands;
      checks.push({
        name,
        goal,
        actual: `${rc.perCall.toFixed(2)} (${Object.entries(rc.byCommand)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')} over ${rc.calls} calls)`,
        status: rc.perCall <= MAX_REDIS_COMMANDS_PER_CALL ? 'met' : 'not met',
      });
    }
  }
  // Errors of the gateways and the bare relay: a wrong or failed answer is never speed.
  const ours = (id: TargetId) => id !== 'peer';
  const loadErrors = e.cells.reduce(
    (s, c) => s + (Object.entries(c.targets) as Array<[TargetId, TargetSummary]>).filter(([id]) => ours(id)).reduce((t, [, x]) => t + x.errors, 0),
    0,
  );
  const heldErrors = Object.values(e.held).reduce((s, h) => s + h.errors + (h.count - h.opened), 0);
  const errs = loadErrors + heldErrors;
  checks.push({ name: 'errors, every gateway cell and held stream', goal: '0', actual: String(errs), status: errs === 0 ? 'met' : 'not met' });
  return checks;
}
