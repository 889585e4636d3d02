/**
 * The benchmark's Targets table gives each judged ratio with the spread of the rounds its
 * median came from: on a shared machine the bare relay's own cost moves from round to round,
 * and a median alone hides whether every round met the goal or one lucky round did.
 */
import { describe, expect, it } from 'vitest';
import type { LoadResult } from '../../bench/load.js';
import { type Cell, evaluate, perEventRounds, summarizeCell, withSpread } from '../../bench/report.js';

/** A run of `cpu` µs per call at `rps`. */
const run = (cpu: number, rps = 1000): LoadResult => ({
  rps,
  requests: rps * 4,
  seconds: 4,
  latency: { p50: 5, p90: 8, p99: 10, max: 12, mean: 6 },
  errors: 0,
  errorDetail: { connection: 0, timeouts: 0, non2xx: 0, mismatches: 0 },
  cpuMsPer1k: { target: cpu },
  otherLoadCores: 0,
});

/** One cell: the gateway's runs (memory) against bare runs of `bare` µs on either side, the peer at `peerRps`. */
function cell(kind: Cell['kind'], gateway: number[], bare: number, gatewayRps = [1000, 1000, 1000], peerRps = [250, 250, 250]): Cell {
  const sides = gateway.map(() => [run(bare), run(bare)] as [LoadResult, LoadResult]);
  return {
    shape: 'real',
    kind,
    c: 50,
    runs: { bare: gateway.map(() => run(bare)), memory: gateway.map((g, i) => run(g, gatewayRps[i])), peer: gateway.map((_, i) => run(bare * 10, peerRps[i])) },
    baselines: { memory: sides, peer: sides },
  };
}

describe('the benchmark report', () => {
  it('gives a CPU ratio target as the median of its rounds with their lowest and highest', () => {
    const s = summarizeCell(cell('plain', [200, 180, 230], 100, [1000, 900, 1200], [250, 300, 200]));
    expect(s.vsBare.memory!.cpuRounds).toEqual([2, 1.8, 2.3]);
    expect(s.vsBare.memory!.cpu).toBe(2);
    const checks = evaluate({
      cells: [s],
      kinds: ['plain'],
      shapes: ['real'],
      storages: [{ storage: 'memory', skipped: null }],
      held: {},
      heldCount: 0,
      redisCommands: null,
      idleRss: {},
      peerMeasured: true,
    });
    const plain = checks.find((c) => c.name === 'memory: real shape, plain, CPU per call, c=50')!;
    expect(plain.actual).toBe('2.00x (1.80x - 2.30x over 3 rounds)');
    expect(plain.status).toBe('not met');
    // Each round's gateway req/s over the peer's in that round: 4x, 3x, 6x (the median of the
    // req/s, 1000 / 250, is judged).
    const peer = checks.find((c) => c.name === "memory: real shape, plain, req/s vs the peer's")!;
    expect(peer.actual).toBe('4.00x (3.00x - 6.00x over 3 rounds)');
  });

  it('gives the per-event figure of each round from that round\'s paced and paired runs', () => {
    const paced = summarizeCell(cell('paced', [700, 733, 711], 600));
    const paired = summarizeCell(cell('paired', [650, 645, 656], 600));
    // (added paced - added paired) over the 11 extra reads: 50/11, 88/11, 55/11.
    expect(perEventRounds([paced, paired], 'memory').map((x) => x.toFixed(2))).toEqual(['4.55', '8.00', '5.00']);
  });

  it('gives one round as its figure alone', () => {
    expect(withSpread('1.50x', [1.5], (x) => `${x}x`)).toBe('1.50x');
    expect(withSpread('1.50x', [1.5, Number.NaN], (x) => `${x}x`)).toBe('1.50x');
  });
});
