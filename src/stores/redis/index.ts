import type { Stores } from '../types.js';
import { createRedisAccounts, createRedisKeys } from './accounts-keys.js';
import { createRedisBilling } from './billing.js';
import { clusterClient, isCluster, type RedisClient, sentinelClient, singleClient } from './clients.js';
import { RedisContext } from './connection.js';
import { createRedisContent } from './content.js';
import { durabilityWarning, pingRedis } from './health.js';
import { createRedisIdempotency } from './idempotency.js';
import { createRedisResponseCache } from './response-cache.js';
import { createRedisBatches } from './batches-store.js';
import { createRedisJobs } from './jobs.js';
import { nodeWhere, redisIdentity } from '../identity.js';
import { RedisLedgerUpgrade } from './ledger-upgrade.js';
import { createRedisLimits, hitMembers } from './limits.js';

export { RedisStoreError } from './connection.js';
export { CLOSED_MARKER_TTL_MS } from './billing.js';
export { reconnectDelay } from './clients.js';

export interface RedisStoreOptions {
  /**
   * An ioredis client (a `Redis` or a `Cluster`) to use. The stores register their scripts on
   * it (`defineCommand`, names starting with "mg") and never close it: `close()` leaves it to
   * you. For the failure behaviour described under `url`, give it the same settings.
   */
  client?: RedisClient;
  /**
   * Redis URL (default redis://127.0.0.1:6379) for a client the stores create and own:
   * commands time out after `commandTimeoutMs`, nothing is queued while disconnected (calls
   * fail at once, so money and limit paths answer 503 quickly), an unfulfilled command is
   * never resent behind the caller's back after a reconnect, and it keeps reconnecting with a
   * short capped backoff, so the stores recover without a restart. `close()` quits it.
   * @example "redis://:secret@10.0.0.7:6379"
   */
  url?: string;
  /**
   * Redis Cluster: URLs of some of its nodes (the rest are discovered). Every script keeps to
   * one hash slot, so all of them run on a cluster. Same failure behaviour as `url`; after a
   * failover the client reads the new slot table and resumes.
   * @example ["redis://10.0.0.7:7000", "redis://10.0.0.8:7000"]
   */
  cluster?: readonly string[];
  /**
   * Sentinel: URLs of the sentinels that watch the primary called `name`. The client asks
   * them for the primary, and again after a failover.
   * @example { sentinels: ["redis://10.0.0.7:26379", "redis://10.0.0.8:26379"], name: "mymaster" }
   */
  sentinels?: readonly string[];
  /** With `sentinels`: the name the sentinels monitor the primary by. */
  name?: string;
  /** With `sentinels`: credentials of the primary (those in the sentinel URLs are the sentinels' own). */
  username?: string;
  password?: string;
  /** Prefix of every key (default "mg:"). Must not contain "{" or "}". */
  keyPrefix?: string;
  /** Command timeout of the owned client, and how long a call waits for a reconnect (default 1000). */
  commandTimeoutMs?: number;
  /** Errors the owned client reports while (re)connecting. Default: ignored (calls fail anyway). */
  onError?: (err: Error) => void;
}

const DEFAULT_URL = 'redis://127.0.0.1:6379';
const DEFAULT_TIMEOUT_MS = 1_000;

function ownClient(options: RedisStoreOptions, timeoutMs: number): RedisClient {
  const given = [options.url, options.cluster, options.sentinels].filter((x) => x !== undefined).length;
  if (given > 1) throw new TypeError('createRedisStores: pass one of `url`, `cluster` or `sentinels`');
  if (options.cluster) return clusterClient(options.cluster, timeoutMs);
  if (options.sentinels) {
    return sentinelClient(options.sentinels, options.name ?? '', timeoutMs, { username: options.username, password: options.password });
  }
  return singleClient(options.url ?? DEFAULT_URL, timeoutMs);
}

/**
 * Every store on one Redis, for several gateway instances sharing it. Needs Redis 7 (scripts
 * read TIME and replicate their effects). All scripts are Cluster-safe: each touches keys of
 * one hash tag (see connection.ts for the key layout).
 */
export function createRedisStores(options: RedisStoreOptions = {}): Stores {
  if (options.client && (options.url || options.cluster || options.sentinels)) {
    throw new TypeError('createRedisStores: pass either `client` or a connection (`url`, `cluster`, `sentinels`), not both');
  }
  const keyPrefix = options.keyPrefix ?? 'mg:';
  if (/[{}]/.test(keyPrefix)) throw new RangeError('keyPrefix must not contain "{" or "}" (they form hash tags)');
  const timeoutMs = options.commandTimeoutMs ?? DEFAULT_TIMEOUT_MS;
  const owned = !options.client;
  let client: RedisClient;
  if (options.client) client = options.client;
  else {
    client = ownClient(options, timeoutMs);
    client.on('error', options.onError ?? (() => {}));
  }
  const waitMs = owned ? timeoutMs : (givenTimeout(client) ?? DEFAULT_TIMEOUT_MS);
  const ctx = new RedisContext(client, keyPrefix, waitMs);
  // The windows live in this Redis beside the books: a hold may count a window hit in its script.
  const windowsId = Symbol('redis windows');
  const hitMember = hitMembers();
  // Books written before every wallet change was a ledger entry get their opening-balance
  // entries on first touch: started now, awaited by every wallet and ledger read until done. A
  // start that fails (Redis not up yet) is tried again by the next read.
  const upgrade = new RedisLedgerUpgrade(ctx);
  upgrade.ensure()?.catch(() => {});

  return {
    identity: redisIdentity({ ...(options.client ? clientPlace(client) : ownPlace(options)), keyPrefix }),
    accounts: createRedisAccounts(ctx),
    keys: createRedisKeys(ctx),
    billing: createRedisBilling(ctx, windowsId, hitMember, upgrade),
    limits: createRedisLimits(ctx, windowsId, hitMember),
    jobs: createRedisJobs(ctx),
    batches: createRedisBatches(ctx),
    content: createRedisContent(ctx),
    idempotency: createRedisIdempotency(ctx),
    responseCache: createRedisResponseCache(ctx),
    ping: () => pingRedis(ctx),
    durabilityWarning: () => durabilityWarning(ctx),
    async close() {
      if (!owned) return;
      ctx.markClosed();
      if (client.status === 'end') return;
      if (client.status === 'ready') {
        try {
          await client.quit();
        } catch {
          // Not answering: dropped below.
        }
      }
      // Also after a quit: a Sentinel client's subscriptions to the sentinels (its failover
      // detector) are closed only by a disconnect, and would keep the process alive.
      client.disconnect();
    },
  };
}

/** Where an owned client connects, for the store's identity. */
function ownPlace(options: RedisStoreOptions): { url?: string; nodes?: string[]; sentinels?: string[]; name?: string } {
  if (options.cluster) return { nodes: options.cluster.map((n) => nodeWhere(n)) };
  if (options.sentinels) return { sentinels: options.sentinels.map((n) => nodeWhere(n, 26379)), name: options.name ?? '' };
  return { url: options.url ?? DEFAULT_URL };
}

/** Where a given client connects (a Cluster: the nodes it was given; Sentinels: theirs and the master's name), for the store's identity. */
function clientPlace(client: RedisClient): { url?: string; nodes?: string[]; sentinels?: string[]; name?: string } {
  if (isCluster(client)) {
    // The nodes it was made with, known before it connects (`nodes()` lists none until then).
    const given = (client as unknown as { startupNodes?: Array<string | number | { host?: string; port?: number }> }).startupNodes ?? [];
    return { nodes: given.map((n) => nodeWhere(typeof n === 'number' ? { port: n } : n)) };
  }
  const o = client.options;
  if (o.sentinels?.length) return { sentinels: o.sentinels.map((n) => nodeWhere({ host: n.host, port: n.port }, 26379)), name: o.name ?? '' };
  return { url: `redis://${o.host ?? '127.0.0.1'}:${o.port ?? 6379}/${o.db ?? 0}` };
}

/** The command timeout a given client was configured with (a Cluster's is its nodes'). */
function givenTimeout(client: RedisClient): number | undefined {
  return isCluster(client) ? client.options.redisOptions?.commandTimeout : client.options.commandTimeout;
}
