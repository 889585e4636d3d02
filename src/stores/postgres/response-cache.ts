import type { ResponseCacheStore } from '../types.js';
import type { PgContext } from './connection.js';

const whole = (n: number) => Math.max(0, Math.min(Number.MAX_SAFE_INTEGER, Math.floor(n)));

/**
 * The response cache in a table with each entry's expiry: an entry is stored, and its
 * account's oldest evicted to fit, in one function call (mg_cache_put) under the account's
 * cache lock, so the total never stays past the cap across instances.
 */
export function createPostgresResponseCache(ctx: PgContext): ResponseCacheStore {
  const { s } = ctx;
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
