import type { ResponseCacheStore } from '../types.js';
import type { PgContext } from './connection.js';

const whole = (n: number) => Math.max(0, Math.min(Number.MAX_SAFE_INTEGER, Math.floor(n)));

/** How often an instance deletes expired entries of every account (a put drops its own account's). */
const SWEEP_MS = 60_000;

/**
 * The response cache in a table with each entry's expiry: an entry is stored, and its
 * account's oldest evicted to fit, in one function call (mg_cache_put) under the account's
 * cache lock, so the total never stays past the cap across instances. Expired rows count for
 * nothing; a put drops its account's, and once a minute a put also deletes a batch of every
 * account's (idle accounts' entries would otherwise stay until purged).
 */
export function createPostgresResponseCache(ctx: PgContext): ResponseCacheStore {
  const { s } = ctx;
  let lastSweep = 0;
  const sweep = () => {
    const t = Date.now();
    if (t - lastSweep < SWEEP_MS) return;
    lastSweep = t;
    void ctx
      .q(
        'cache.sweep',
        `DELETE FROM ${s}.response_cache WHERE key = ANY (ARRAY(SELECT key FROM ${s}.response_cache WHERE expires_at <= ${s}.mg_now() LIMIT 10000))`,
        [],
      )
      // Housekeeping only: the next minute tries again.
      .catch(() => {});
  };
  return {
    async get(key) {
      const r = await ctx.one<{ value: string; stored_at: bigint | number | string }>(
        'cache.get',
        `SELECT value, stored_at FROM ${s}.response_cache WHERE key = $1 AND expires_at > ${s}.mg_now()`,
        [key],
      );
      return r ? { value: r.value, storedAt: Number(r.stored_at) } : null;
    },
    async put(account, key, value, ttlMs, maxBytes) {
      const bytes = Buffer.byteLength(key) + Buffer.byteLength(value);
      if (bytes > maxBytes) {
        await ctx.q('cache.put', `DELETE FROM ${s}.response_cache WHERE key = $1`, [key]);
        return;
      }
      sweep();
      await ctx.q('cache.put', `SELECT ${s}.mg_cache_put($1, $2, $3, $4::bigint, $5::bigint, $6::bigint)`, [key, account, value, bytes, whole(ttlMs), whole(maxBytes)]);
    },
    async purge(account) {
      const rows =
        account === undefined
          ? await ctx.q<{ key: string }>('cache.purge', `DELETE FROM ${s}.response_cache RETURNING key`, [])
          : await ctx.q<{ key: string }>('cache.purge', `DELETE FROM ${s}.response_cache WHERE account = $1 RETURNING key`, [account]);
      return rows.length;
    },
  };
}
