import { type IdempotencyBegin, type IdempotencyStore, type StoredResponse, storedBytes } from '../types.js';
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
 * Counts a finished record against its account's quota and picks what to evict. KEYS: the
 * account's records by expiry (zset scope -> ms), their sizes (hash scope -> bytes), their
 * total (string). ARGV: scope, its bytes, its TTL ms, the cap. Records already expired are
 * forgotten; the scope's earlier size (if stored before) is replaced; then the oldest (first
 * to expire) other records are dropped from the count until the total fits. Returns the
 * scopes dropped, for the caller to delete: they live under their own hash tags, which a
 * script on the account's slot cannot touch on a cluster. Sent with EVAL: it runs once per
 * stored answer, and Redis caches the compiled script by its hash.
 */
const QUOTA_LUA = `
local order, sizes, total = KEYS[1], KEYS[2], KEYS[3]
local scope, bytes, ttl, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
-- In ms with the microseconds kept: two records stored in one millisecond still expire, and
-- are evicted, in the order they were stored (equal scores would order by scope name).
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local sum = tonumber(redis.call('GET', total) or '0')
local function forget(s)
  local b = redis.call('HGET', sizes, s)
  if b then sum = sum - tonumber(b); redis.call('HDEL', sizes, s) end
  redis.call('ZREM', order, s)
end
for _, s in ipairs(redis.call('ZRANGEBYSCORE', order, '-inf', now)) do forget(s) end
forget(scope)
redis.call('ZADD', order, now + ttl, scope)
redis.call('HSET', sizes, scope, bytes)
sum = sum + bytes
local evicted = {}
while sum > cap do
  local victim = nil
  for _, s in ipairs(redis.call('ZRANGE', order, 0, 1)) do
    if s ~= scope then victim = s; break end
  end
  if not victim then break end
  forget(victim)
  evicted[#evicted + 1] = victim
end
redis.call('SET', total, sum)
for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ttl) end
return evicted
`;

/**
 * Idempotency-Key records: one string per scope (`P{idem:<scope>}`, JSON) that expires with
 * its TTL. `begin` is one script (get-or-create), `renew` one script (extend if still in
 * flight), `complete` one SET, `abandon` one DEL.
 *
 * A record stored with a quota is SET, then counted in its account's index (`P{a:<account>}:
 * idem-order`, `idem-sizes`, `idem-total`, by QUOTA_LUA, atomically per account, so the
 * counted total never passes the cap), then the records the count evicted are deleted. In
 * that order every counted record already exists when another store evicts it, so its DEL
 * never runs before its SET and leaves it behind uncounted. What Redis holds passes the cap
 * only by records between those steps (SET and not yet counted, or evicted and not yet
 * deleted): at most two answers (2 x maxAnswerBytes) per store of that account running at
 * that moment, for a round trip or two. A record the count includes but Redis lost (an
 * abandon, a Redis eviction) only makes eviction come early, never late; one whose instance
 * died between SET and count stays uncounted until its TTL.
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

    async complete(scope, fingerprint, response, ttlMs, quota): Promise<void> {
      const done: Stored = { fingerprint, response };
      const bytes = quota ? storedBytes(fingerprint, response) : 0;
      if (quota && bytes > quota.maxBytes) {
        await ctx.run('idempotency.complete', () => client.del(ctx.idempotency(scope)));
        return;
      }
      await ctx.run('idempotency.complete', () => client.set(ctx.idempotency(scope), JSON.stringify(done), 'PX', px(ttlMs)));
      if (!quota) return;
      const keys = ['idem-order', 'idem-sizes', 'idem-total'].map((k) => ctx.account(quota.account, k));
      const reply = await ctx.run('idempotency.quota', () =>
        client.eval(QUOTA_LUA, keys.length, ...keys, scope, bytes, px(ttlMs), whole(quota.maxBytes)),
      );
      const evicted = Array.isArray(reply) ? reply.map(String) : [];
      // One DEL per record: on a cluster each lives in its own slot.
      if (evicted.length) await ctx.run('idempotency.evict', () => Promise.all(evicted.map((e) => client.del(ctx.idempotency(e)))));
    },

    async abandon(scope: string): Promise<void> {
      await ctx.run('idempotency.abandon', () => client.del(ctx.idempotency(scope)));
    },
  };
}
