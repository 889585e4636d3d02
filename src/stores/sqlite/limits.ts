import type { LimitStore } from '../types.js';
import { num, type SqliteContext } from './connection.js';
import { createSqliteWindows, type SqliteWindows } from './windows.js';

/**
 * Limits for the SQLite driver. Rate windows and token windows live in the file (windows.ts),
 * so every process that shares it (`serve --workers N`, an admin command) counts in the same
 * windows: each limit is exact across them.
 *
 * In-flight lease pools (media jobs) are in the file too: a job outlives a restart, and so must
 * the slot it holds. Taking a slot runs inside an IMMEDIATE transaction (drop the expired,
 * count, insert), so the count and the insert are one step.
 */
export interface SqliteLimits extends LimitStore {
  readonly windowsId: symbol;
  /** The rate windows, so billing can count a key's hit inside its hold's transaction. */
  readonly windows: SqliteWindows;
}

export function createSqliteLimits(ctx: SqliteContext): SqliteLimits {
  const windows = createSqliteWindows(ctx);
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
    windowsId: Symbol('sqlite windows'),
    windows,
    hit(bucket, limit, windowMs) {
      ctx.sweep();
      return windows.hit(bucket, limit, windowMs);
    },
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
