import { type IdempotencyBegin, type IdempotencyStore, type StoredResponse, storedBytes } from '../types.js';
import type { PgContext } from './connection.js';
import { jsonText } from '../json-text.js';

const whole = (n: number) => Math.max(0, Math.min(Number.MAX_SAFE_INTEGER, Math.floor(n)));

/**
 * Idempotency-Key records; `begin` is get-or-create in one function call, and a record stored
 * with a quota is stored, and its account's oldest evicted to fit, in one (mg_idem_complete).
 */
export function createPostgresIdempotency(ctx: PgContext): IdempotencyStore {
  const { s } = ctx;
  return {
    async begin(scope: string, fingerprint: string, lockTtlMs: number): Promise<IdempotencyBegin> {
      const r = await ctx.one<{ o_state: string; o_fingerprint: string; o_response: StoredResponse | null }>(
        'idempotency.begin',
        `SELECT * FROM ${s}.mg_idem_begin($1, $2, $3::bigint)`,
        [scope, fingerprint, whole(lockTtlMs)],
      );
      if (!r || r.o_state === 'started') return { state: 'started' };
      if (r.o_state === 'in_flight' || r.o_response === null) return { state: 'in_flight', fingerprint: r.o_fingerprint };
      return { state: 'done', fingerprint: r.o_fingerprint, response: r.o_response };
    },
    async renew(scope: string, fingerprint: string, lockTtlMs: number): Promise<boolean> {
      const rows = await ctx.q<{ scope: string }>(
        'idempotency.renew',
        `UPDATE ${s}.idempotency SET expires_at = ${s}.mg_now() + $3::bigint
          WHERE scope = $1 AND fingerprint = $2 AND response IS NULL AND expires_at > ${s}.mg_now() RETURNING scope`,
        [scope, fingerprint, whole(lockTtlMs)],
      );
      return rows.length > 0;
    },
    async complete(scope, fingerprint, response, ttlMs, quota): Promise<void> {
      const bytes = quota ? storedBytes(fingerprint, response) : 0;
      if (quota && bytes > quota.maxBytes) {
        // Too large to keep at all: forgotten, as by abandon.
        await ctx.q('idempotency.abandon', `DELETE FROM ${s}.idempotency WHERE scope = $1`, [scope]);
        return;
      }
      if (quota) {
        await ctx.q(
          'idempotency.complete',
          `SELECT ${s}.mg_idem_complete($1, $2, $3::text::jsonb, $4::bigint, $5, $6::bigint, $7::bigint)`,
          [scope, fingerprint, jsonText(response), whole(ttlMs), quota.account, bytes, whole(quota.maxBytes)],
        );
        return;
      }
      await ctx.q(
        'idempotency.complete',
        `INSERT INTO ${s}.idempotency (scope, fingerprint, response, expires_at) VALUES ($1, $2, $3::text::jsonb, ${s}.mg_now() + $4::bigint)
          ON CONFLICT (scope) DO UPDATE SET fingerprint = excluded.fingerprint, response = excluded.response, expires_at = excluded.expires_at`,
        [scope, fingerprint, jsonText(response), whole(ttlMs)],
      );
    },
    async abandon(scope: string): Promise<void> {
      await ctx.q('idempotency.abandon', `DELETE FROM ${s}.idempotency WHERE scope = $1`, [scope]);
    },
  };
}
