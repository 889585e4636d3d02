import type { IdempotencyBegin, IdempotencyStore, StoredResponse } from '../types.js';
import { type RedisContext, str, whole } from './connection.js';

interface Stored {
  fingerprint: string;
  response: StoredResponse | null;
}

/** Redis refuses PX 0; a TTL of zero means "already expired", which 1 ms approximates. */
const px = (ms: number) => Math.max(1, whole(ms));

/**
 * Renews an in-flight record. KEYS: record. ARGV: the in-flight record JSON, lock TTL ms. The
 * record is renewed only while it is byte for byte the in-flight JSON `begin` wrote for this
 * fingerprint: a finished, abandoned or lapsed record (or another request's) is left alone.
 * Sent with EVAL: it runs once per call every third of the lock's TTL, too rarely to register.
 */
const RENEW_LUA = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`;

/**
 * Idempotency-Key records: one string per scope (`P{idem:<scope>}`, JSON) that expires with
 * its TTL. `begin` is one script (get-or-create), `renew` one script (extend if still in
 * flight), `complete` one SET, `abandon` one DEL.
 */
export function createRedisIdempotency(ctx: RedisContext): IdempotencyStore {
  const { client, scripts } = ctx;

  return {
    async begin(scope: string, fingerprint: string, lockTtlMs: number): Promise<IdempotencyBegin> {
      const inFlight: Stored = { fingerprint, response: null };
      const reply = await ctx.run('idempotency.begin', () =>
        scripts.mgIdemBegin([ctx.idempotency(scope)], [JSON.stringify(inFlight), px(lockTtlMs)]),
      );
      const raw = str(reply);
      if (raw === null) return { state: 'started' };
      const e = JSON.parse(raw) as Stored;
      if (!e.response) return { state: 'in_flight', fingerprint: e.fingerprint };
      return { state: 'done', fingerprint: e.fingerprint, response: e.response };
    },

    async renew(scope: string, fingerprint: string, lockTtlMs: number): Promise<boolean> {
      const inFlight: Stored = { fingerprint, response: null };
      const reply = await ctx.run('idempotency.renew', () =>
        client.eval(RENEW_LUA, 1, ctx.idempotency(scope), JSON.stringify(inFlight), px(lockTtlMs)),
      );
      return Number(reply) === 1;
    },

    async complete(scope: string, fingerprint: string, response: StoredResponse, ttlMs: number): Promise<void> {
      const done: Stored = { fingerprint, response };
      await ctx.run('idempotency.complete', () =>
        client.set(ctx.idempotency(scope), JSON.stringify(done), 'PX', px(ttlMs)),
      );
    },

    async abandon(scope: string): Promise<void> {
      await ctx.run('idempotency.abandon', () => client.del(ctx.idempotency(scope)));
    },
  };
}
