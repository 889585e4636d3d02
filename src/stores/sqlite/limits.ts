import type { LimitStore } from '../types.js';
import { createMemoryLimits, type MemoryLimits } from '../memory/limits.js';
import { num, type SqliteContext } from './connection.js';

/**
 * Limits for the SQLite driver, which serves one gateway process.
 *
 * Rate windows (and token windows) live in that process's memory, not in the file: they are counted exactly
 * there (one process sees every hit), they are not books (nothing is owed or paid by a
 * window), and writing two window hits per call into the file was most of what SQLite
 * storage cost beyond the books themselves. They start empty when the process restarts.
 * Several gateway processes that must share windows take their limits from Redis
 * (`storage.limits`).
 *
 * In-flight lease pools (media jobs) stay in the file: a job outlives a restart, and so must
 * the slot it holds. Taking a slot runs inside an IMMEDIATE transaction (drop the expired,
 * count, insert), so the count and the insert are one step.
 */
export interface SqliteLimits extends LimitStore {
  readonly windowsId: symbol;
  /** The rate windows, so billing can count a key's hit synchronously beside its hold. */
  readonly windows: MemoryLimits;
}

export function createSqliteLimits(ctx: SqliteContext): SqliteLimits {
  const windows = createMemoryLimits(ctx.now);
  const q = {
    expire: ctx.prepare('DELETE FROM leases WHERE pool = ? AND expires_at <= ?'),
    holds: ctx.prepare('SELECT 1 FROM leases WHERE pool = ? AND lease_id = ?'),
    size: ctx.prepare('SELECT count(*) AS n FROM leases WHERE pool = ? AND expires_at > ?'),
    take: ctx.prepare(
      'INSERT INTO leases (pool, lease_id, expires_at) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET expires_at = excluded.expires_at',
    ),
    renew: ctx.prepare('UPDATE leases SET expires_at = ? WHERE pool = ? AND lease_id = ? AND expires_at > ?'),
    release: ctx.prepare('DELETE FROM leases WHERE pool = ? AND lease_id = ?'),
  };

  return {
    windowsId: windows.windowsId,
    windows,
    hit: (bucket, limit, windowMs) => windows.hit(bucket, limit, windowMs),
    hitNow: (bucket, limit, windowMs) => windows.hitNow(bucket, limit, windowMs),
    // Token windows, like rate windows, live in the one process's memory.
    takeTokens: (bucket, takeId, tokens, limit, windowMs) => windows.takeTokens(bucket, takeId, tokens, limit, windowMs),
    setTokens: (bucket, takeId, tokens) => windows.setTokens(bucket, takeId, tokens),

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
