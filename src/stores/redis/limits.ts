import { randomBytes } from 'node:crypto';
import type { LimitStore, WindowResult } from '../types.js';
import { int, list, type RedisContext, whole } from './connection.js';

/**
 * Window members, unique per hit so that two hits in the same millisecond are two members:
 * a random prefix per store instance (72 bits, so instances never share one) and a counter.
 * Cheaper than random bytes per hit, and shorter in Redis's memory.
 */
export function hitMembers(): () => string {
  const prefix = randomBytes(9).toString('base64url');
  let n = 0;
  return () => prefix + (n++).toString(36);
}

/** A token window's two keys (takes by time, tokens by take), under the bucket's hash tag. */
function tokenKeys(ctx: RedisContext, bucket: string, accountId: string | undefined): [string, string] {
  const base = ctx.bucket(`tokens:${bucket}`, accountId);
  return [base, `${base}:n`];
}

/**
 * Rate windows, token windows and lease pools. `hit`, `acquireLease`, `renewLease` and `activeLeases` are one
 * EVALSHA each on a single key (a sorted set scored by Redis TIME in ms), so they are atomic
 * and Cluster-safe. Idle buckets and pools expire by themselves.
 */
export function createRedisLimits(ctx: RedisContext, windowsId: symbol, hitMember: () => string): LimitStore {
  const { scripts } = ctx;

  return {
    windowsId,
    async hit(bucket: string, limit: number, windowMs: number, accountId?: string): Promise<WindowResult> {
      const reply = list(
        await ctx.batched('hit', 'mgHit', [ctx.bucket(bucket, accountId)], [whole(limit), whole(windowMs), hitMember()]),
      );
      const allowed = int(reply[0]) === 1;
      return { allowed, limit, remaining: int(reply[1]), resetMs: int(reply[2]) };
    },

    async takeTokens(bucket, takeId, tokens, limit, windowMs, accountId) {
      const k = tokenKeys(ctx, bucket, accountId);
      const reply = list(
        await ctx.run('takeTokens', () => scripts.mgTokensTake(k, [takeId, whole(tokens), whole(limit), whole(windowMs)])),
      );
      return { allowed: int(reply[0]) === 1, limit, remaining: int(reply[1]), resetMs: int(reply[2]) };
    },

    async setTokens(bucket, takeId, tokens, accountId) {
      const k = tokenKeys(ctx, bucket, accountId);
      await ctx.run('setTokens', () => scripts.mgTokensSet(k, [takeId, whole(tokens)]));
    },

    async acquireLease(pool: string, cap: number, leaseId: string, ttlMs: number): Promise<boolean> {
      const r = await ctx.batched('acquireLease', 'mgLeaseAcquire', [ctx.pool(pool)], [whole(cap), leaseId, whole(ttlMs)]);
      return int(r) === 1;
    },

    async renewLease(pool: string, leaseId: string, ttlMs: number): Promise<boolean> {
      const r = await ctx.run('renewLease', () =>
        scripts.mgLeaseRenew([ctx.pool(pool)], [leaseId, whole(ttlMs)]),
      );
      return int(r) === 1;
    },

    async releaseLease(pool: string, leaseId: string): Promise<void> {
      await ctx.batched('releaseLease', 'mgLeaseRelease', [ctx.pool(pool)], [leaseId]);
    },

    async activeLeases(pool: string): Promise<number> {
      return int(await ctx.run('activeLeases', () => scripts.mgLeaseCount([ctx.pool(pool)], [])));
    },
  };
}
