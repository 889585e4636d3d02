import { describe, expect, it } from 'vitest';
import { createRecentIds } from '../../src/stores/memory/recent-ids.js';

describe('createRecentIds', () => {
  it('remembers an id until it expires, and forgets the expired ones only', () => {
    const r = createRecentIds(10, 1_000);
    r.add('a', 0);
    r.add('b', 500);
    expect(r.has('a') && r.has('b')).toBe(true);
    r.expire(999);
    expect(r.has('a')).toBe(true);
    r.expire(1_000);
    expect(r.has('a')).toBe(false);
    expect(r.has('b')).toBe(true);
    expect(r.size).toBe(1);
    r.expire(1_500);
    expect(r.has('b')).toBe(false);
    expect(r.size).toBe(0);
  });

  it('once full, forgets the oldest id for each new one, in order, across many wraps of its ring', () => {
    const max = 7;
    const r = createRecentIds(max, 1e12);
    for (let i = 0; i < 100; i++) {
      r.add(`id${i}`, i);
      expect(r.size).toBe(Math.min(i + 1, max));
      // Exactly the newest `max` ids are remembered.
      for (let j = 0; j <= i; j++) expect(r.has(`id${j}`)).toBe(j > i - max);
    }
  });

  it('expires correctly after the ring has wrapped', () => {
    const r = createRecentIds(3, 10);
    for (let i = 0; i < 5; i++) r.add(`id${i}`, i); // id2, id3, id4 remain (expiring at 12, 13, 14)
    r.expire(12);
    expect([r.has('id2'), r.has('id3'), r.has('id4')]).toEqual([false, true, true]);
    r.add('id5', 13);
    r.expire(14);
    expect([r.has('id3'), r.has('id4'), r.has('id5')]).toEqual([false, false, true]);
    expect(r.size).toBe(1);
  });

  it('refuses a size that is not a positive integer', () => {
    expect(() => createRecentIds(0, 1)).toThrow(RangeError);
    expect(() => createRecentIds(1.5, 1)).toThrow(RangeError);
  });
});

describe('createRecentIds, expiring before it is full', () => {
  it('keeps its order when ids expire while the ring is still growing, then wraps into the freed slot', () => {
    const r = createRecentIds(4, 10);
    r.add('a', 0);
    r.add('b', 1);
    r.expire(10); // a goes: the oldest id now sits in the second slot
    expect([r.has('a'), r.has('b'), r.size]).toEqual([false, true, 1]);
    r.add('c', 10);
    r.add('d', 10);
    r.add('e', 10); // wraps into the first slot, freed by a: full again
    expect([r.has('b'), r.has('c'), r.has('d'), r.has('e'), r.size]).toEqual([true, true, true, true, 4]);
    r.add('f', 10); // full: b, the oldest, is forgotten
    expect([r.has('b'), r.has('f'), r.size]).toEqual([false, true, 4]);
    r.add('g', 11); // then c
    expect([r.has('c'), r.has('d'), r.has('g')]).toEqual([false, true, true]);
    r.expire(20); // d, e and f expire at 20; g at 21
    expect([r.has('d'), r.has('e'), r.has('f'), r.has('g'), r.size]).toEqual([false, false, false, true, 1]);
  });
});
