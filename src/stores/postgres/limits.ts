import type { LimitStore, WindowResult } from '../types.js';
import { int32, num, type PgContext, whole } from './connection.js';
import { functionLanes } from './lanes.js';

/**
 * Rate windows and lease pools on PostgreSQL: `hit` (batched per bucket) and `acquireLease`
 * are one function call each under an advisory lock on the bucket or pool, and so are a token
 * window's take and correction; renew, release and
 * count are single statements.
 */
export function createPostgresLimits(ctx: PgContext, sweep: () => void, windowsId: symbol): LimitStore {
  const { s } = ctx;
  // A bucket's hits go through its lane (see lanes.ts): the hits that arrive while one call
  // for the bucket runs go together in the next, one mg_hits call, counted in arrival order.
  const buckets = functionLanes<[number, number], [boolean | null, number | null, string | null]>(ctx, 'hit', 'mg_hits');
  return {
    windowsId,
    async hit(bucket: string, limit: number, windowMs: number): Promise<WindowResult> {
      sweep();
      const [allowed, remaining, reset] = await buckets.submit(bucket, [int32(limit), whole(windowMs)]);
      return { allowed: allowed === true, limit, remaining: num(remaining), resetMs: num(reset) };
    },

    async takeTokens(bucket, takeId, tokens, limit, windowMs) {
      const r = await ctx.one<{ o_allowed: boolean; o_remaining: bigint; o_reset: bigint }>(
        'takeTokens',
        `SELECT * FROM ${s}.mg_tokens_take($1, $2, $3::bigint, $4::bigint, $5::bigint)`,
        [bucket, takeId, whole(tokens), whole(limit), whole(windowMs)],
      );
      return { allowed: r?.o_allowed === true, limit, remaining: num(r?.o_remaining), resetMs: num(r?.o_reset) };
    },

    async setTokens(bucket, takeId, tokens) {
      await ctx.q('setTokens', `SELECT ${s}.mg_tokens_set($1, $2, $3::bigint)`, [bucket, takeId, whole(tokens)]);
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
