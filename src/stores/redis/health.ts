/**
 * Whether the Redis behind the stores answers (readiness) and whether it keeps anything on
 * disk (a start-up warning: wallets, holds and the ledger live only in Redis).
 */
import type { Redis } from 'ioredis';
import { isCluster } from './clients.js';
import type { RedisContext } from './connection.js';

const SLOTS = 16_384;

/**
 * Resolves when every part of the Redis answers: the one server, the Sentinel primary, or
 * every master of a Cluster with all slots served. A Cluster master that died is not ready
 * until its replica took over, because every key of its slots is unreachable until then.
 */
export function pingRedis(ctx: RedisContext): Promise<void> {
  return ctx.run('ping', async () => {
    const c = ctx.client;
    if (!isCluster(c)) {
      await c.ping();
      return;
    }
    const masters = c.nodes('master');
    if (masters.length === 0) throw new Error('no Cluster master is known');
    await Promise.all(masters.map((m) => m.ping()));
    const info = String(await masters[0]!.call('CLUSTER', 'INFO'));
    const state = /cluster_state:(\w+)/.exec(info)?.[1];
    const slotsOk = Number(/cluster_slots_ok:(\d+)/.exec(info)?.[1] ?? 0);
    if (state !== 'ok' || slotsOk < SLOTS) throw new Error(`the Cluster is not whole (state ${state ?? '?'}, ${slotsOk} of ${SLOTS} slots ok)`);
  });
}

type Persistence = { aof: boolean; rdb: boolean | null };

async function persistenceOf(node: Redis): Promise<Persistence> {
  try {
    const [, appendonly] = (await node.call('CONFIG', 'GET', 'appendonly')) as [string, string];
    const [, save] = (await node.call('CONFIG', 'GET', 'save')) as [string, string];
    return { aof: appendonly === 'yes', rdb: (save ?? '').trim() !== '' };
  } catch {
    // Managed Redis often refuses CONFIG; INFO still says whether AOF is on, not the RDB policy.
    const info = String(await node.call('INFO', 'persistence'));
    return { aof: /aof_enabled:1/.test(info), rdb: null };
  }
}

function where(node: Redis): string {
  const { host, port } = node.options;
  return `${host ?? '127.0.0.1'}:${port ?? 6379}`;
}

/**
 * A warning when the Redis keeps nothing on disk (no AOF and no RDB snapshots), or when that
 * cannot be told; null when it persists. Every Cluster master is asked.
 */
export function durabilityWarning(ctx: RedisContext): Promise<string | null> {
  return ctx.run('persistence check', async () => {
    const c = ctx.client;
    const sentinelName = !isCluster(c) && c.options.sentinels ? c.options.name : undefined;
    const nodes = isCluster(c) ? c.nodes('master') : [c];
    const found = await Promise.all(nodes.map(async (n) => ({ name: sentinelName ? `primary "${sentinelName}"` : where(n), ...(await persistenceOf(n)) })));
    const none = found.filter((n) => !n.aof && n.rdb === false).map((n) => n.name);
    const unknown = found.filter((n) => !n.aof && n.rdb === null).map((n) => n.name);
    const consequence = 'wallets, holds and the ledger would not survive a Redis restart';
    if (none.length) {
      return `Redis ${none.join(', ')} keeps nothing on disk (appendonly no, save ""): ${consequence}. Turn on AOF (appendonly yes) or RDB snapshots (save).`;
    }
    if (unknown.length) {
      return `Redis ${unknown.join(', ')} has AOF off and refuses CONFIG GET, so whether RDB snapshots are on is unknown; without them ${consequence}.`;
    }
    return null;
  });
}
