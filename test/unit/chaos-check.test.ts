/**
 * The chaos soak's one allowance for an Idempotency-Key that ran twice: the documented double
 * fault (its answer went out while the store could not keep it, then its instance was killed
 * before the save landed). Anything else stays a problem.
 */
import { describe, expect, it } from 'vitest';
import { type Attempt, lostToACrash } from '../../bench/chaos.js';

const at = (round: number, ms: number, status: number, whole = false, replayed = false): Attempt => ({
  kind: 'idem',
  requestId: `req_${round}_${ms}`,
  status,
  whole,
  replayed,
  idemKey: 'k',
  round,
  at: ms,
});

describe('chaos: an Idempotency-Key answered twice', () => {
  it('is allowed after an unkept answer (409s while its save was retried) and a kill (the soak that found it)', () => {
    expect(lostToACrash([at(3, 0, 200, true), at(3, 447, 409), at(3, 861, 409), at(4, 0, 200, true)])).toBe(true);
  });

  it('is allowed when the attempt between died with the instance (seed 584380916): no replay, then a kill', () => {
    expect(lostToACrash([at(3, 0, 200, true), at(3, 325, 0), at(4, 0, 200, true)])).toBe(true);
  });

  it('is a problem without the kill, or with a replay between showing the answer was kept', () => {
    expect(lostToACrash([at(3, 0, 200, true), at(3, 447, 409), at(3, 900, 200, true)])).toBe(false);
    // A replay in between says the answer was kept: a later run is a problem.
    expect(lostToACrash([at(3, 0, 200, true), at(3, 300, 409), at(3, 400, 200, true, true), at(4, 0, 200, true)])).toBe(false);
  });
});
