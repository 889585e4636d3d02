/**
 * A bounded memory of ids, each forgotten after `ttlMs` or once `max` newer ids arrived,
 * oldest first. Adding, checking and forgetting cost O(1) however full it is.
 *
 * The order lives in a ring of the ids with their expiry times beside the lookup set. A
 * Map used as a queue (drop `keys().next()`, the oldest) would be simpler, but V8 leaves a
 * deleted entry in place until the table is rebuilt, so once the Map is full every look for
 * its first entry walks over all the deleted ones before it, and each call gets slower as the
 * holes pile up.
 */
export interface RecentIds {
  has(id: string): boolean;
  /** Remembers `id` from time `t` on (the caller checks `has` first: an id is added once). */
  add(id: string, t: number): void;
  /** Forgets the ids that expired by `t`. */
  expire(t: number): void;
  readonly size: number;
}

export function createRecentIds(max: number, ttlMs: number): RecentIds {
  if (!Number.isInteger(max) || max < 1) throw new RangeError('max must be a positive integer');
  const ids = new Set<string>();
  // Both grow to `max` slots as ids arrive (a store that sees few calls never pays for all of
  // them), then the ring wraps around.
  const ring: Array<string | undefined> = [];
  const expiry: number[] = [];
  /** The oldest id's slot, and how many slots are in use after it (wrapping around). */
  let head = 0;
  let count = 0;

  const dropOldest = () => {
    ids.delete(ring[head]!);
    ring[head] = undefined;
    head = (head + 1) % max;
    count--;
  };

  return {
    has: (id) => ids.has(id),
    add(id, t) {
      if (count === max) dropOldest();
      const slot = (head + count) % max;
      // Until the ring is full for the first time, the used slots end at its length.
      if (slot === ring.length) {
        ring.push(id);
        expiry.push(t + ttlMs);
      } else {
        ring[slot] = id;
        expiry[slot] = t + ttlMs;
      }
      count++;
      ids.add(id);
    },
    expire(t) {
      // Oldest first, and every id lives equally long: the first unexpired one ends the walk.
      while (count > 0 && expiry[head]! <= t) dropOldest();
    },
    get size() {
      return count;
    },
  };
}
