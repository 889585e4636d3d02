import type { LimitStore, WindowResult } from '../types.js';
import { int32, num, type PgContext, whole } from './connection.js';

/**
 * Rate windows and lease pools on PostgreSQL: `hit` and `acquireLease` are one function call
 * each under an advisory lock on the bucket or pool; renew, release and count are single
 * statements.
 */
export function createPostgresLimits(ctx: PgContext, sweep: () => void, windowsId: symbol): LimitStore {
  const { s } = ctx;
  return {
    windowsId,
    async hit(bucket: string, limit: number, windowMs: number): Promise<WindowResult> {
      sweep();
      const r = await ctx.one<{ o_allowed: boolean; o_remaining: number; o_reset: bigint }>(
        'hit',
        `SELECT * FROM ${s}.mg_hit($1, $2::integer, $3::bigint)`,
        [bucket, int32(limit), whole(windowMs)],
      );
      return { allowed: r?.o_allowed === true, limit, remaining: num(r?.o_remaining), resetMs: num(r?.o_reset) };
    },

    async acquireLease(pool: string, cap: number, leaseId: string, ttlMs: number): Promise<boolean> {
      const r = await ctx.one<{ ok: boolean }>(
        'acquireLease',
        `SELECT ${s}.mg_acquire_lease($1, $2::integer, $3, $4::bigint) AS ok`,
        [pool, int32(cap), leaseId, whole(ttlMs)],
      );
      return r?.ok === true;
    },

    async renewLease(pool: string, leaseId: string, ttlMs: number): Promise<boolean> {
      const rows = await ctx.q(
        'renewLease',
        `UPDATE ${s}.leases SET expires_at = ${s}.mg_now() + $3::bigint
          WHERE pool = $1 AND lease_id = $2 AND expires_at > ${s}.mg_now() RETURNING 1 AS one`,
        [pool, leaseId, whole(ttlMs)],
      );
      return rows.length === 1;
    },

    async releaseLease(pool: string, leaseId: string): Promise<void> {
      await ctx.q('releaseLease', `DELETE FROM ${s}.leases WHERE pool = $1 AND lease_id = $2`, [pool, leaseId]);
    },

    async activeLeases(pool: string): Promise<number> {
      const r = await ctx.one<{ n: bigint }>(
        'activeLeases',
        `SELECT count(*) AS n FROM ${s}.leases WHERE pool = $1 AND expires_at > ${s}.mg_now()`,
        [pool],
      );
      return num(r?.n);
    },
  };
}
