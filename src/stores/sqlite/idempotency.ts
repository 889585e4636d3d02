import { type IdempotencyBegin, type IdempotencyStore, type StoredResponse, storedBytes } from '../types.js';
import type { SqliteContext } from './connection.js';

interface Row {
  fingerprint: string;
  response: string | null;
}

/**
 * Idempotency-Key records; `begin` is get-or-create in one IMMEDIATE transaction. A record
 * stored with a quota names its account and size; the same transaction then drops the
 * account's expired records and evicts its oldest (first to expire; the one just stored
 * counts as newest) until the total fits. IMMEDIATE transactions run one at a time, also
 * across processes on one file, so the total is exact: never past the cap.
 */
export function createSqliteIdempotency(ctx: SqliteContext): IdempotencyStore {
  const q = {
    expire: ctx.prepare('DELETE FROM idempotency WHERE scope = ? AND expires_at <= ?'),
    get: ctx.prepare('SELECT fingerprint, response FROM idempotency WHERE scope = ?'),
    start: ctx.prepare('INSERT INTO idempotency (scope, fingerprint, response, expires_at) VALUES (?, ?, NULL, ?)'),
    renew: ctx.prepare('UPDATE idempotency SET expires_at = ? WHERE scope = ? AND fingerprint = ? AND response IS NULL AND expires_at > ?'),
    put: ctx.prepare(
      `INSERT INTO idempotency (scope, fingerprint, response, expires_at, account, bytes) VALUES (?, ?, ?, ?, ?, ?)
        ON CONFLICT DO UPDATE SET fingerprint = excluded.fingerprint, response = excluded.response, expires_at = excluded.expires_at,
          account = excluded.account, bytes = excluded.bytes`,
    ),
    expireAccount: ctx.prepare('DELETE FROM idempotency WHERE account = ? AND expires_at <= ?'),
    // Walking from the newest record (the one just stored first), every record from the one
    // that takes the running total past the cap onwards goes: that is evicting the oldest
    // until the rest fits.
    evict: ctx.prepare(
      `DELETE FROM idempotency WHERE scope IN (
        SELECT scope FROM (
          SELECT scope, sum(bytes) OVER (ORDER BY scope = ? DESC, expires_at DESC, rowid DESC ROWS UNBOUNDED PRECEDING) AS newer
            FROM idempotency WHERE account = ?
        ) WHERE newer > ?)`,
    ),
    delete: ctx.prepare('DELETE FROM idempotency WHERE scope = ?'),
  };

  return {
    async begin(scope: string, fingerprint: string, lockTtlMs: number): Promise<IdempotencyBegin> {
      return ctx.write('idempotency.begin', (): IdempotencyBegin => {
        const t = ctx.now();
        q.expire.run(scope, t);
        const row = q.get.get(scope) as Row | undefined;
        if (!row) {
          q.start.run(scope, fingerprint, t + lockTtlMs);
          return { state: 'started' };
        }
        if (row.response === null) return { state: 'in_flight', fingerprint: row.fingerprint };
        return { state: 'done', fingerprint: row.fingerprint, response: JSON.parse(row.response) as StoredResponse };
      });
    },
    async renew(scope: string, fingerprint: string, lockTtlMs: number): Promise<boolean> {
      return ctx.run('idempotency.renew', () => {
        const t = ctx.now();
        return q.renew.run(t + lockTtlMs, scope, fingerprint, t).changes > 0;
      });
    },
    async complete(scope, fingerprint, response, ttlMs, quota): Promise<void> {
      const json = JSON.stringify(response);
      if (!quota) {
        ctx.run('idempotency.complete', () => q.put.run(scope, fingerprint, json, ctx.now() + ttlMs, null, 0));
        return;
      }
      const bytes = storedBytes(fingerprint, response);
      if (bytes > quota.maxBytes) {
        ctx.run('idempotency.complete', () => q.delete.run(scope));
        return;
      }
      await ctx.write('idempotency.complete', () => {
        const t = ctx.now();
        q.put.run(scope, fingerprint, json, t + ttlMs, quota.account, bytes);
        q.expireAccount.run(quota.account, t);
        q.evict.run(scope, quota.account, quota.maxBytes);
      });
    },
    async abandon(scope: string): Promise<void> {
      ctx.run('idempotency.abandon', () => q.delete.run(scope));
    },
  };
}
