/**
 * The stores a `storage` config describes, for every driver: what the CLI builds from a config
 * file, for an embedder who keeps the same `storage` section. The driver modules are loaded on
 * demand, so each optional peer (better-sqlite3, postgres, ioredis) is needed only when its
 * driver is configured.
 */
import { parseOptions, type GatewayConfig, type GatewayConfigInput } from '../options.js';
import { createMemoryStores } from './memory/index.js';
import type { Stores } from './types.js';

/** The `storage` section of the options (or of a config file), as written. */
export type StorageOptions = NonNullable<GatewayConfigInput['storage']>;

/**
 * How one connecting store (Redis, PostgreSQL) is opened: `place` says what it is and where,
 * never with a password (e.g. "PostgreSQL at postgres://db:5432/gw"). The CLI pings it and
 * reports a store that does not answer; `createStores` only builds it.
 */
export type OpenStore = (place: string, make: () => Stores | Promise<Stores>) => Promise<Stores>;

/**
 * Builds the stores `storage` describes: `{driver: "memory"}`, `"sqlite"`, `"postgres"`
 * (its migrations run first, so the server must answer) or `"redis"`, and SQLite or PostgreSQL
 * with `limits` (rate windows and in-flight leases) on Redis. Pass the result as `stores` to
 * `createGateway`, and `close()` it yourself after the gateway's `dispose()`: stores you pass
 * are yours. A bad section throws `ConfigError` naming the field.
 *
 * @example
 * const storage = { driver: 'postgres', url: process.env.DATABASE_URL!, limits: { driver: 'redis' } } as const;
 * const stores = await createStores(storage);
 * const gateway = createGateway({ ...options, storage, stores });
 * // on shutdown: await gateway.dispose(); await stores.close();
 */
export async function createStores(storage: StorageOptions): Promise<Stores> {
  return buildStores(parseOptions({ storage }).storage, (_place, make) => Promise.resolve().then(make));
}

/** `createStores` over a parsed section, each connecting store opened by `open`. */
export async function buildStores(storage: GatewayConfig['storage'], open: OpenStore): Promise<Stores> {
  if (storage.driver === 'memory') return createMemoryStores();
  if (storage.driver === 'redis') {
    const { createRedisStores } = await import('./redis/entry.js');
    const { driver: _driver, timeoutMs, ...connection } = storage;
    return open(redisPlace(storage), () => createRedisStores({ ...connection, ...(timeoutMs === undefined ? {} : { commandTimeoutMs: timeoutMs }) }));
  }
  let books: Stores;
  if (storage.driver === 'postgres') {
    const { createPostgresStores } = await import('./postgres/entry.js');
    books = await open(`PostgreSQL at ${shownUrl(storage.url)}`, () =>
      createPostgresStores({ url: storage.url, schema: storage.schema, ...(storage.timeoutMs === undefined ? {} : { timeoutMs: storage.timeoutMs }) }),
    );
  } else {
    const { createSqliteStores } = await import('./sqlite/entry.js');
    books = createSqliteStores({ path: storage.path, synchronous: storage.synchronous, ...(storage.timeoutMs === undefined ? {} : { timeoutMs: storage.timeoutMs }) });
  }
  if (!storage.limits) return books;
  const { createRedisStores } = await import('./redis/entry.js');
  const { url, keyPrefix } = storage.limits;
  const redis = await open(`${redisPlace({ url })} (storage.limits)`, () => createRedisStores({ url, keyPrefix })).catch(async (err: unknown) => {
    await books.close();
    throw err;
  });
  return {
    ...books,
    limits: redis.limits,
    // Ready only when both answer: every request's limits live in the Redis.
    async ping() {
      await Promise.all([books.ping?.(), redis.ping?.()]);
    },
    async close() {
      await Promise.allSettled([books.close(), redis.close()]);
    },
  };
}

/** A URL as it may be shown: without its password (in the userinfo or a `password` parameter). */
function shownUrl(url: string): string {
  try {
    const u = new URL(url);
    u.password = '';
    u.searchParams.delete('password');
    return u.toString().replace(/\/$/, '');
  } catch {
    return '(the configured url, which is not a valid URL)';
  }
}

/** What a Redis config names and where, e.g. "Redis at redis://10.0.0.7:6379". */
function redisPlace(r: { url?: string | undefined; cluster?: readonly string[] | undefined; sentinels?: readonly string[] | undefined; name?: string | undefined }): string {
  if (r.cluster) return `the Redis Cluster at ${r.cluster.map(shownUrl).join(', ')}`;
  if (r.sentinels) return `the Redis primary "${r.name}" through the sentinels at ${r.sentinels.map(shownUrl).join(', ')}`;
  return `Redis at ${shownUrl(r.url ?? 'redis://127.0.0.1:6379')}`;
}
