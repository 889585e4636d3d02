import { Redis, type RedisOptions } from 'ioredis';
import type { Stores } from '../types.js';
import { createRedisAccounts, createRedisKeys } from './accounts-keys.js';
import { createRedisBilling } from './billing.js';
import { RedisContext } from './connection.js';
import { createRedisContent } from './content.js';
import { createRedisIdempotency } from './idempotency.js';
import { createRedisJobs } from './jobs.js';
import { createRedisLimits } from './limits.js';

export { RedisStoreError } from './connection.js';
export { CLOSED_MARKER_TTL_MS } from './billing.js';

export interface RedisStoreOptions {
  /**
   * An ioredis client to use. The stores register their scripts on it (`defineCommand`, names
   * starting with "mg") and never close it: `close()` leaves it to you. For the failure
   * behaviour described under `url`, give it the same settings.
   */
  client?: Redis;
  /**
   * Redis URL (default redis://127.0.0.1:6379) for a client the stores create and own:
   * commands time out after `commandTimeoutMs`, nothing is queued while disconnected (calls
   * fail at once, so money and limit paths answer 503 quickly), an unfulfilled command is
   * never resent behind the caller's back after a reconnect, and it keeps reconnecting with a
   * short capped backoff, so the stores recover without a restart. `close()` quits it.
   */
  url?: string;
  /** Prefix of every key (default "mg:"). Must not contain "{" or "}". */
  keyPrefix?: string;
  /** Command timeout of the owned client, and how long a call waits for a reconnect (default 1000). */
  commandTimeoutMs?: number;
  /** Errors the owned client reports while (re)connecting. Default: ignored (calls fail anyway). */
  onError?: (err: Error) => void;
}

const DEFAULT_URL = 'redis://127.0.0.1:6379';
const DEFAULT_TIMEOUT_MS = 1_000;

/** Reconnect delays: 50, 100, 200, 400 ms, then every 500 ms, forever. */
export function reconnectDelay(attempt: number): number {
  return Math.min(50 * 2 ** Math.max(0, attempt - 1), 500);
}

function ownClient(url: string, timeoutMs: number, onError: (err: Error) => void): Redis {
  const options: RedisOptions = {
    commandTimeout: timeoutMs,
    connectTimeout: Math.max(timeoutMs, 1_000),
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: false,
    retryStrategy: reconnectDelay,
  };
  const client = new Redis(url, options);
  client.on('error', onError);
  return client;
}

/**
 * Every store on one Redis, for several gateway instances sharing it. Needs Redis 7 (scripts
 * read TIME and replicate their effects). All scripts are Cluster-safe: each touches keys of
 * one hash tag (see connection.ts for the key layout).
 */
export function createRedisStores(options: RedisStoreOptions = {}): Stores {
  if (options.client && options.url) throw new TypeError('createRedisStores: pass either `client` or `url`, not both');
  const keyPrefix = options.keyPrefix ?? 'mg:';
  if (/[{}]/.test(keyPrefix)) throw new RangeError('keyPrefix must not contain "{" or "}" (they form hash tags)');
  const timeoutMs = options.commandTimeoutMs ?? DEFAULT_TIMEOUT_MS;
  const owned = !options.client;
  const client = options.client ?? ownClient(options.url ?? DEFAULT_URL, timeoutMs, options.onError ?? (() => {}));
  const waitMs = owned ? timeoutMs : (client.options.commandTimeout ?? DEFAULT_TIMEOUT_MS);
  const ctx = new RedisContext(client, keyPrefix, waitMs);

  return {
    accounts: createRedisAccounts(ctx),
    keys: createRedisKeys(ctx),
    billing: createRedisBilling(ctx),
    limits: createRedisLimits(ctx),
    jobs: createRedisJobs(ctx),
    content: createRedisContent(ctx),
    idempotency: createRedisIdempotency(ctx),
    async close() {
      if (!owned) return;
      ctx.markClosed();
      if (client.status === 'end') return;
      if (client.status === 'ready') {
        try {
          await client.quit();
          return;
        } catch {
          // Not answering: drop the connection below.
        }
      }
      client.disconnect();
    },
  };
}
