import { describe, expect, it } from 'vitest';
import { parseCollection } from '../../bench/gc.js';

// Lines as node 20's --trace-gc-nvp prints them (shortened: the fields bench/gc.ts reads are kept).
const SCAVENGE =
  '[6170:0x43504f00]     5145 ms: pause=9.1 mutator=160.4 gc=s reduce_memory=0 scavenge=9.03 scavenge.parallel=8.28 ' +
  'background.scavenge.parallel=12.44 scavenge_throughput=1410264 allocated=13440328 promoted=1907136 new_space_survived=1765048 ' +
  'nodes_promoted=0 promotion_ratio=12.3% new_space_survive_rate_=11.4%';
const MARK_COMPACT = '[6170:0x43504f00]     6011 ms: pause=20.5 mutator=90.1 gc=mc reduce_memory=0 promoted=4046568 new_space_survived=0';

describe('bench/gc.ts trace lines', () => {
  it('reads a scavenge: its pause, its helper threads, what it promoted and copied', () => {
    expect(parseCollection(SCAVENGE)).toEqual({ kind: 's', pauseMs: 9.1, helperMs: 12.44, promoted: 1907136, survived: 1765048 });
  });

  it('reads a mark-compact, whose line has no helper-thread figure', () => {
    expect(parseCollection(MARK_COMPACT)).toEqual({ kind: 'mc', pauseMs: 20.5, helperMs: 0, promoted: 4046568, survived: 0 });
  });

  it('skips what is not a collection (the access log, the listening line)', () => {
    expect(parseCollection('{"level":30,"msg":"access","route":"/v1/chat/completions"}')).toBeNull();
    expect(parseCollection('model-gateway listening on http://127.0.0.1:8799/v1')).toBeNull();
  });
});
