import type { ResponseCacheStore } from '../types.js';
import { type RedisContext, list, str, whole } from './connection.js';

/** Redis refuses PX 0. */
const px = (ms: number) => Math.max(1, whole(ms));

/**
 * Stores an entry and keeps its account within its bytes. KEYS: the entry, the account's
 * entries by expiry (zset member -> ms), their sizes (hash member -> bytes), their total
 * (string). ARGV: the value, its bytes, its TTL ms, the cap, its member name, the prefix of
 * the account's entry keys. Expired members are forgotten; the member's earlier size is
 * replaced; the entry is SET with its TTL (its stored time ahead of a `|`); the oldest other
 * entries are deleted until the total fits. Everything is under the account's hash tag, so
 * this is one atomic step on a cluster too.
 */
const PUT_LUA = `
local entry, order, sizes, total = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local value, bytes, ttl, cap, member, prefix = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sum = tonumber(redis.call('GET', total) or '0')
local function forget(s)
  local b = redis.call('HGET', sizes, s)
  if b then sum = sum - tonumber(b); redis.call('HDEL', sizes, s) end
  redis.call('ZREM', order, s)
end
for _, s in ipairs(redis.call('ZRANGEBYSCORE', order, '-inf', now)) do forget(s); redis.call('DEL', prefix .. s) end
forget(member)
redis.call('ZADD', order, now + ttl, member)
redis.call('HSET', sizes, member, bytes)
sum = sum + bytes
redis.call('SET', entry, string.format('%.0f', now) .. '|' .. value, 'PX', ttl)
while sum > cap do
  local victim = nil
  for _, s in ipairs(redis.call('ZRANGE', order, 0, 1)) do
    if s ~= member then victim = s; break end
  end
  if not victim then break end
  forget(victim)
  redis.call('DEL', prefix .. victim)
end
-- KEEPTTL: the total lives as long as the longest-lived of the index's keys (entries of
-- models with longer TTLs), not this entry's TTL.
redis.call('SET', total, math.max(0, sum), 'KEEPTTL')
for i = 2, 4 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 1
`;

/**
 * Drops one entry and its count in the account's index. KEYS: the entry, order, sizes, total.
 * ARGV: its member name. (Only the entry deleted, its bytes would stay in the total until its
 * TTL, and evict the account's other entries early.)
 */
const DROP_LUA = `
local b = redis.call('HGET', KEYS[3], ARGV[1])
if b then
  redis.call('HDEL', KEYS[3], ARGV[1])
  local sum = redis.call('GET', KEYS[4])
  if sum then redis.call('SET', KEYS[4], math.max(0, tonumber(sum) - tonumber(b)), 'KEEPTTL') end
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[1])
return 1
`;

/** Deletes every entry of an account and its index. KEYS: order, sizes, total. ARGV: the entry key prefix. */
const PURGE_LUA = `
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, s in ipairs(members) do redis.call('DEL', ARGV[1] .. s) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return #members
`;

/**
 * The response cache in Redis: an entry is a string with a TTL under its account's hash tag
 * (`P{a:<account>}:cache:<hash>`), counted in the account's index (`cache-order`,
 * `cache-sizes`, `cache-total`) by one script, which also evicts the account's oldest until
 * its total fits. A purge of all entries goes account by account (the accounts index).
 */
export function createRedisResponseCache(ctx: RedisContext): ResponseCacheStore {
  const { client } = ctx;
  /** The cache's key is `<account>:<hash>` (an account id has no colon at its end; a hash has none). */
  const split = (key: string) => {
    const at = key.lastIndexOf(':');
    return { account: key.slice(0, at), member: key.slice(at + 1) };
  };
  const index = (account: string) => ['cache-order', 'cache-sizes', 'cache-total'].map((k) => ctx.account(account, k));
  const purgeAccount = async (account: string): Promise<number> => {
    const keys = index(account);
    const reply = await ctx.run('cache.purge', () => client.eval(PURGE_LUA, keys.length, ...keys, ctx.account(account, 'cache:')));
    return Number(reply);
  };
  return {
    async get(key) {
      const { account, member } = split(key);
      const raw = str(await ctx.run('cache.get', () => client.get(ctx.account(account, `cache:${member}`))));
      if (raw === null) return null;
      const bar = raw.indexOf('|');
      return { storedAt: Number(raw.slice(0, bar)), value: raw.slice(bar + 1) };
    },
    async put(account, key, value, ttlMs, maxBytes) {
      const { member } = split(key);
      const bytes = Buffer.byteLength(key) + Buffer.byteLength(value);
      const entry = ctx.account(account, `cache:${member}`);
      const keys = [entry, ...index(account)];
      if (bytes > maxBytes) {
        await ctx.run('cache.put', () => client.eval(DROP_LUA, keys.length, ...keys, member));
        return;
      }
      await ctx.run('cache.put', () => client.eval(PUT_LUA, keys.length, ...keys, value, bytes, px(ttlMs), whole(maxBytes), member, ctx.account(account, 'cache:')));
    },
    async purge(account) {
      if (account !== undefined) return purgeAccount(account);
      const ids = list(await ctx.run('cache.purge', () => client.smembers(ctx.index('accounts')))).map((v) => str(v) ?? '');
      let n = 0;
      for (const id of ids) n += await purgeAccount(id);
      return n;
    },
  };
}
