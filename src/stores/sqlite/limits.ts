import type { LimitStore, WindowResult } from '../types.js';
import { num, type SqliteContext } from './connection.js';

/** The SQLite limit store, with its hit as a step of a transaction already open (billing counts one inside a hold). */
export interface SqliteLimits extends LimitStore {
  readonly windowsId: symbol;
  /** Counts a hit at time `t`; the caller runs it inside its IMMEDIATE transaction. */
  hitInTransaction(bucket: string, limit: number, windowMs: number, t: number): WindowResult;
}

/**
 * Rate windows and lease pools on SQLite. `hit` and `acquireLease` are one IMMEDIATE
 * transaction each (drop what left the window or expired, count, insert), so the count and
 * the insert are one step. A window keeps one row per counted hit and its count beside them,
 * so a hit costs O(log n) however high the limit.
 */
export function createSqliteLimits(ctx: SqliteContext): SqliteLimits {
  const q = {
    trim: ctx.prepare('DELETE FROM rate_hits WHERE bucket = ? AND at <= ?'),
    counted: ctx.prepare('SELECT hits FROM rate_windows WHERE bucket = ?'),
    count: ctx.prepare('INSERT INTO rate_hits (bucket, at) VALUES (?, ?)'),
    save: ctx.prepare(
      'INSERT INTO rate_windows (bucket, hits, until) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET hits = excluded.hits, until = max(until, excluded.until)',
    ),
    oldest: ctx.prepare('SELECT min(at) AS oldest FROM rate_hits WHERE bucket = ?'),
    expire: ctx.prepare('DELETE FROM leases WHERE pool = ? AND expires_at <= ?'),
    holds: ctx.prepare('SELECT 1 FROM leases WHERE pool = ? AND lease_id = ?'),
    size: ctx.prepare('SELECT count(*) AS n FROM leases WHERE pool = ? AND expires_at > ?'),
    take: ctx.prepare(
      'INSERT INTO leases (pool, lease_id, expires_at) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET expires_at = excluded.expires_at',
    ),
    renew: ctx.prepare('UPDATE leases SET expires_at = ? WHERE pool = ? AND lease_id = ? AND expires_at > ?'),
    release: ctx.prepare('DELETE FROM leases WHERE pool = ? AND lease_id = ?'),
  };

  function hitInTransaction(bucket: string, limit: number, windowMs: number, t: number): WindowResult {
    const left = q.trim.run(bucket, t - windowMs).changes;
    let n = num((q.counted.get(bucket) as { hits: number } | undefined)?.hits) - left;
    const allowed = n < limit;
    if (allowed) {
      q.count.run(bucket, t);
      n++;
    }
    q.save.run(bucket, n, allowed ? t + windowMs : 0);
    const oldest = (q.oldest.get(bucket) as { oldest: number | null }).oldest;
    return {
      allowed,
      limit,
      remaining: allowed ? limit - n : 0,
      resetMs: oldest === null ? 0 : Math.max(0, num(oldest) + windowMs - t),
    };
  }

  return {
    windowsId: Symbol('sqlite windows'),
    hitInTransaction,
    async hit(bucket: string, limit: number, windowMs: number): Promise<WindowResult> {
      ctx.sweep();
      return ctx.write('hit', () => hitInTransaction(bucket, limit, windowMs, ctx.now()));
    },

    async acquireLease(pool: string, cap: number, leaseId: string, ttlMs: number): Promise<boolean> {
      return ctx.write('acquireLease', () => {
        const t = ctx.now();
        q.expire.run(pool, t);
        // Acquiring a lease already held just extends it: a retry never takes a second slot.
        if (!q.holds.get(pool, leaseId) && num((q.size.get(pool, t) as { n: number }).n) >= cap) return false;
        q.take.run(pool, leaseId, t + ttlMs);
        return true;
      });
    },

    async renewLease(pool: string, leaseId: string, ttlMs: number): Promise<boolean> {
      const t = ctx.now();
      return ctx.run('renewLease', () => q.renew.run(t + ttlMs, pool, leaseId, t).changes === 1);
    },

    async releaseLease(pool: string, leaseId: string): Promise<void> {
      ctx.run('releaseLease', () => q.release.run(pool, leaseId));
    },

    async activeLeases(pool: string): Promise<number> {
      const t = ctx.now();
      return ctx.run('activeLeases', () => num((q.size.get(pool, t) as { n: number }).n));
    },
  };
}
