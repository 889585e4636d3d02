import type { IdempotencyBegin, IdempotencyStore, StoredResponse } from '../types.js';
import type { SqliteContext } from './connection.js';

interface Row {
  fingerprint: string;
  response: string | null;
}

/** Idempotency-Key records; `begin` is get-or-create in one IMMEDIATE transaction. */
export function createSqliteIdempotency(ctx: SqliteContext): IdempotencyStore {
  const q = {
    expire: ctx.prepare('DELETE FROM idempotency WHERE scope = ? AND expires_at <= ?'),
    get: ctx.prepare('SELECT fingerprint, response FROM idempotency WHERE scope = ?'),
    start: ctx.prepare('INSERT INTO idempotency (scope, fingerprint, response, expires_at) VALUES (?, ?, NULL, ?)'),
    renew: ctx.prepare('UPDATE idempotency SET expires_at = ? WHERE scope = ? AND fingerprint = ? AND response IS NULL AND expires_at > ?'),
    put: ctx.prepare(
      'INSERT INTO idempotency (scope, fingerprint, response, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET fingerprint = excluded.fingerprint, response = excluded.response, expires_at = excluded.expires_at',
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
    async complete(scope: string, fingerprint: string, response: StoredResponse, ttlMs: number): Promise<void> {
      ctx.run('idempotency.complete', () => q.put.run(scope, fingerprint, JSON.stringify(response), ctx.now() + ttlMs));
    },
    async abandon(scope: string): Promise<void> {
      ctx.run('idempotency.abandon', () => q.delete.run(scope));
    },
  };
}
