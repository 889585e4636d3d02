import type { LimitStore, WindowResult } from '../types.js';
import { createSweeper } from './sweep.js';
import { createMemoryTokenWindows } from './tokens.js';

interface Bucket {
  /** Times of the counted hits, oldest first, from index `head` on. */
  hits: number[];
  /** Hits before this index left the window (a queue: trimming must not shift the array). */
  head: number;
  /** The window this bucket was last used with, so the sweep knows when it is idle. */
  windowMs: number;
}

const counted = (b: Bucket) => b.hits.length - b.head;

const SWEEP_INTERVAL_MS = 60_000;

/**
 * Drops the hits at or before `t - windowMs`; they no longer count. Amortised O(1): the head
 * index moves, and the array is compacted only once the dropped part outweighs the rest
 * (a busy window holds `limit` entries; shifting them on every hit would cost O(limit)).
 */
function trim(bucket: Bucket, t: number): void {
  const edge = t - bucket.windowMs;
  const hits = bucket.hits;
  let head = bucket.head;
  while (head < hits.length && (hits[head] as number) <= edge) head++;
  if (head > 1024 && head * 2 > hits.length) {
    bucket.hits = hits.slice(head);
    head = 0;
  } else if (head === hits.length) {
    hits.length = 0;
    head = 0;
  }
  bucket.head = head;
}

/** The memory limit store, with its hit as a synchronous call (billing counts one inside a hold). */
export interface MemoryLimits extends LimitStore {
  readonly windowsId: symbol;
  hitNow(bucket: string, limit: number, windowMs: number): WindowResult;
}

/**
 * Rate windows and lease pools in one process. Each method reads and writes synchronously,
 * so it is atomic. Memory stays bounded: hits that left their window are dropped on every
 * hit, and idle buckets and empty pools are deleted by a lazy sweep.
 */
export function createMemoryLimits(now: () => number): MemoryLimits {
  const buckets = new Map<string, Bucket>();
  const tokens = createMemoryTokenWindows(now);
  /** pool -> lease id -> expiry (unix ms). */
  const pools = new Map<string, Map<string, number>>();

  /** The pool's unexpired leases, dropping the expired ones (and the pool once empty). */
  function livePool(pool: string, t: number): Map<string, number> | undefined {
    const leases = pools.get(pool);
    if (!leases) return undefined;
    for (const [id, expiresAt] of leases) if (expiresAt <= t) leases.delete(id);
    if (leases.size === 0) {
      pools.delete(pool);
      return undefined;
    }
    return leases;
  }

  const sweep = createSweeper(now, SWEEP_INTERVAL_MS, (t) => {
    for (const [name, bucket] of buckets) {
      trim(bucket, t);
      if (counted(bucket) === 0) buckets.delete(name);
    }
    for (const pool of [...pools.keys()]) livePool(pool, t);
    tokens.sweep(t);
  });

  function hitNow(name: string, limit: number, windowMs: number): WindowResult {
    sweep();
    const t = now();
    const bucket = buckets.get(name) ?? { hits: [], head: 0, windowMs };
    bucket.windowMs = windowMs;
    trim(bucket, t);
    const allowed = counted(bucket) < limit;
    if (allowed) bucket.hits.push(t);
    if (counted(bucket) > 0) buckets.set(name, bucket);
    else buckets.delete(name);
    const oldest = bucket.hits[bucket.head];
    return {
      allowed,
      limit,
      remaining: allowed ? limit - counted(bucket) : 0,
      resetMs: oldest === undefined ? 0 : Math.max(0, oldest + windowMs - t),
    };
  }

  return {
    windowsId: Symbol('memory windows'),
    hitNow,
    async hit(name: string, limit: number, windowMs: number): Promise<WindowResult> {
      return hitNow(name, limit, windowMs);
    },

    async takeTokens(bucket, takeId, n, limit, windowMs) {
      sweep();
      return tokens.take(bucket, takeId, n, limit, windowMs);
    },

    async setTokens(bucket, takeId, n) {
      tokens.set(bucket, takeId, n);
    },

    async acquireLease(pool: string, cap: number, leaseId: string, ttlMs: number): Promise<boolean> {
      sweep();
      const t = now();
      const leases = livePool(pool, t) ?? new Map<string, number>();
      // Acquiring a lease already held just extends it: a retry never takes a second slot.
      if (!leases.has(leaseId) && leases.size >= cap) return false;
      leases.set(leaseId, t + ttlMs);
      pools.set(pool, leases);
      return true;
    },

    async renewLease(pool: string, leaseId: string, ttlMs: number): Promise<boolean> {
      const t = now();
      const leases = livePool(pool, t);
      if (!leases?.has(leaseId)) return false;
      leases.set(leaseId, t + ttlMs);
      return true;
    },

    async releaseLease(pool: string, leaseId: string): Promise<void> {
      const leases = pools.get(pool);
      if (!leases) return;
      leases.delete(leaseId);
      if (leases.size === 0) pools.delete(pool);
    },

    async activeLeases(pool: string): Promise<number> {
      return livePool(pool, now())?.size ?? 0;
    },
  };
}
