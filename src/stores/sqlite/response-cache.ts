import type { CachedAnswer, ResponseCacheStore } from '../types.js';
import type { SqliteContext } from './connection.js';

/**
 * The response cache in the file: a row per entry with its expiry. Storing one drops its
 * account's expired rows and evicts the account's oldest (first to expire; the one just
 * stored counts as newest) until the total fits, in one IMMEDIATE transaction: exact across
 * the processes sharing the file.
 */
export function createSqliteResponseCache(ctx: SqliteContext): ResponseCacheStore {
  const q = {
    get: ctx.prepare('SELECT value, stored_at AS storedAt FROM response_cache WHERE key = ? AND expires_at > ?'),
    put: ctx.prepare(
      `INSERT INTO response_cache (key, account, value, bytes, stored_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)
        ON CONFLICT DO UPDATE SET account = excluded.account, value = excluded.value, bytes = excluded.bytes,
          stored_at = excluded.stored_at, expires_at = excluded.expires_at`,
    ),
    expireAccount: ctx.prepare('DELETE FROM response_cache WHERE account = ? AND expires_at <= ?'),
    evict: ctx.prepare(
      `DELETE FROM response_cache WHERE key IN (
        SELECT key FROM (
          SELECT key, sum(bytes) OVER (ORDER BY key = ? DESC, expires_at DESC, rowid DESC ROWS UNBOUNDED PRECEDING) AS newer
            FROM response_cache WHERE account = ?
        ) WHERE newer > ?)`,
    ),
    delete: ctx.prepare('DELETE FROM response_cache WHERE key = ?'),
    purgeAccount: ctx.prepare('DELETE FROM response_cache WHERE account = ?'),
    purgeAll: ctx.prepare('DELETE FROM response_cache'),
  };
  return {
    async get(key) {
      return ctx.run('cache.get', () => (q.get.get(key, ctx.now()) as CachedAnswer | undefined) ?? null);
    },
    async put(account, key, value, ttlMs, maxBytes) {
      const bytes = Buffer.byteLength(key) + Buffer.byteLength(value);
      if (bytes > maxBytes) {
        ctx.run('cache.put', () => q.delete.run(key));
        return;
      }
      await ctx.write('cache.put', () => {
        const t = ctx.now();
        q.put.run(key, account, value, bytes, t, t + ttlMs);
        q.expireAccount.run(account, t);
        q.evict.run(key, account, maxBytes);
      });
    },
    async purge(account) {
      return ctx.write('cache.purge', () => (account === undefined ? q.purgeAll.run() : q.purgeAccount.run(account)).changes);
    },
  };
}
