import type { LimitStore, WindowResult } from '../types.js';
import { num, type SqliteContext } from './connection.js';

/** The SQLite limit store, with its hit as a step of a transaction already open (billing counts one inside a hold). */
export interface SqliteLimits extends LimitStore {
  readonly windowsId: symbol;
  /** Counts a hit at time `t`; the caller runs it inside its IMMEDIATE transaction. */
  hitInTransaction(bucket: string, limit: number, windowMs: number, t: number): WindowResult;
}

/**
 * `until` of a window (when its newest hit leaves it) is kept rounded up to the next whole
 * minute: the sweep then drops the window at most a minute late, and an ordinary hit does not
 * move it, so it leaves the `until` index (a page write) alone.
 */
const UNTIL_STEP_MS = 60_000;

/**
 * Rate windows and lease pools on SQLite. `hit` (a step of a group commit) and `acquireLease`
 * run inside an IMMEDIATE transaction (drop what left the window or expired, count, insert),
 * so the count and the insert are one step. A window keeps its hits as one row per millisecond (with how many
 * hits it counted) and their total beside them, so a hit costs O(log n) however high the
 * limit and rate.
 */
export function createSqliteLimits(ctx: SqliteContext): SqliteLimits {
  const q = {
    trim: ctx.prepare('DELETE FROM rate_hits WHERE bucket = ? AND at <= ? RETURNING n'),
    window: ctx.prepare('SELECT hits, until FROM rate_windows WHERE bucket = ?'),
    count: ctx.prepare('INSERT INTO rate_hits (bucket, at, n) VALUES (?, ?, 1) ON CONFLICT DO UPDATE SET n = n + 1'),
    create: ctx.prepare('INSERT INTO rate_windows (bucket, hits, until) VALUES (?, ?, ?)'),
    setHits: ctx.prepare('UPDATE rate_windows SET hits = ? WHERE bucket = ?'),
    setHitsUntil: ctx.prepare('UPDATE rate_windows SET hits = ?, until = ? WHERE bucket = ?'),
    oldest: ctx.prepare('SELECT at FROM rate_hits WHERE bucket = ? ORDER BY at LIMIT 1').pluck(),
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
    let left = 0;
    for (const row of q.trim.all(bucket, t - windowMs) as { n: number }[]) left += row.n;
    const saved = q.window.get(bucket) as { hits: number; until: number } | undefined;
    let n = (saved?.hits ?? 0) - left;
    const allowed = n < limit;
    if (allowed) {
      q.count.run(bucket, t);
      n++;
    }
    const until = allowed ? Math.ceil((t + windowMs) / UNTIL_STEP_MS) * UNTIL_STEP_MS : 0;
    if (!saved) {
      if (n > 0) q.create.run(bucket, n, until);
    } else if (until > saved.until) q.setHitsUntil.run(n, until, bucket);
    else if (n !== saved.hits) q.setHits.run(n, bucket);
    const oldest = n > 0 ? (q.oldest.get(bucket) as number | undefined) : undefined;
    return {
      allowed,
      limit,
      remaining: allowed ? limit - n : 0,
      resetMs: oldest === undefined ? 0 : Math.max(0, oldest + windowMs - t),
    };
  }

  return {
    windowsId: Symbol('sqlite windows'),
    hitInTransaction,
    async hit(bucket: string, limit: number, windowMs: number): Promise<WindowResult> {
      ctx.sweep();
      return ctx.batch('hit', () => hitInTransaction(bucket, limit, windowMs, ctx.now()));
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
