/**
 * Request ids (also hold ids and ledger entry ids) are UUIDv7-shaped: the time first, so the
 * books' indexes on them grow at their end, then random bits, so they stay unique.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { newRequestId } from '../../src/http/request-id.js';

const SHAPE = /^req_([0-9a-f]{12})7[0-9a-f]{3}[89ab][0-9a-f]{15}$/;

describe('request ids', () => {
  it('are req_ and a UUIDv7 in hex: version 7, RFC 9562 variant, the unix ms first', () => {
    const now = Date.UTC(2026, 10, 25, 1, 2, 3, 456);
    const id = newRequestId(now);
    const m = SHAPE.exec(id);
    expect(m, id).not.toBeNull();
    expect(Number.parseInt(m![1]!, 16)).toBe(now);
    expect(SHAPE.test(newRequestId())).toBe(true);
  });

  it('sort by the time they were made, as strings', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 47 }), fc.integer({ min: 1, max: 2 ** 40 }), (t, dt) => {
        expect(newRequestId(t) < newRequestId(t + dt)).toBe(true);
      }),
    );
  });

  it('do not repeat within one millisecond', () => {
    const now = Date.now();
    const ids = new Set(Array.from({ length: 20_000 }, () => newRequestId(now)));
    expect(ids.size).toBe(20_000);
  });
});
