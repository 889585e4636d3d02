/**
 * How the CLI opens a config's gateway: the stores it builds itself (the drivers that connect
 * asynchronously, loaded on demand so their packages are needed only when configured), the
 * settle journal's folder, and the default storage.
 */
import { createHash } from 'node:crypto';
import { resolve } from 'node:path';
import { createGateway, type Gateway, type GatewayOptions } from '../gateway.js';
import { silentLogger } from '../observability/log.js';
import { parseOptions } from '../options.js';
import type { Stores } from '../stores/types.js';
import { loadConfigFile } from './config-file.js';

/** Where the CLI keeps its books when a config names no storage. */
const DEFAULT_STORAGE = { driver: 'sqlite', path: './data/gateway.db' } as const;

/**
 * Stores the CLI builds itself: the drivers that connect asynchronously (Redis, PostgreSQL)
 * and any limits taken from Redis. Memory and plain SQLite are left to createGateway. The
 * driver modules are loaded on demand, so their packages are needed only when configured.
 */
async function storesFor(config: GatewayOptions): Promise<Stores | undefined> {
  const { storage } = parseOptions(config);
  if (storage.driver === 'memory') return undefined;
  if (storage.driver === 'redis') {
    const { createRedisStores } = await import('../stores/redis/entry.js');
    const { driver: _driver, ...connection } = storage;
    return createRedisStores(connection);
  }
  if (storage.driver === 'sqlite' && !storage.limits) return undefined;
  let books: Stores;
  if (storage.driver === 'postgres') {
    const { createPostgresStores } = await import('../stores/postgres/entry.js');
    books = await createPostgresStores({ url: storage.url, schema: storage.schema });
  } else {
    const { createSqliteStores } = await import('../stores/sqlite/entry.js');
    books = createSqliteStores({ path: storage.path, synchronous: storage.synchronous });
  }
  if (!storage.limits) return books;
  const { createRedisStores } = await import('../stores/redis/entry.js');
  const redis = createRedisStores({ url: storage.limits.url, keyPrefix: storage.limits.keyPrefix });
  return {
    ...books,
    limits: redis.limits,
    async close() {
      await Promise.allSettled([books.close(), redis.close()]);
    },
  };
}

/**
 * Where the settle journal lives when the config names none: `./data/settle-journal/<store>`
 * for every storage that outlives the process (a charge the store could not take then
 * survives this process too), none for memory storage (whose books die with it anyway). The
 * folder is per store (a digest of the storage config), so a gateway never replays another
 * store's charges into its own.
 */
function journalDir(config: GatewayOptions): string | null | undefined {
  if (config.settleJournalDir !== undefined) return config.settleJournalDir;
  const { storage } = parseOptions(config);
  if (storage.driver === 'memory') return null;
  const store = createHash('sha256').update(JSON.stringify(storage)).digest('hex').slice(0, 12);
  return resolve('data', 'settle-journal', store);
}

export async function open(configFile: string, quiet: boolean): Promise<{ gateway: Gateway; stores?: Stores }> {
  const loaded = (await loadConfigFile(configFile)) as GatewayOptions;
  const config: GatewayOptions = loaded.storage === undefined ? { ...loaded, storage: DEFAULT_STORAGE } : loaded;
  const stores = await storesFor(config);
  try {
    const gateway = createGateway({
      ...config,
      settleJournalDir: journalDir(config),
      stores,
      ...(quiet ? { logger: silentLogger } : {}),
    });
    await gateway.ready;
    return { gateway, stores };
  } catch (err) {
    await stores?.close();
    throw err;
  }
}

/** Where the books are, for the start-up line. */
export function describeStorage(storage: Gateway['config']['storage']): string {
  if (storage.driver === 'sqlite') return `sqlite at ${storage.path}${storage.limits ? ', limits on redis' : ''}`;
  if (storage.driver === 'postgres') return `postgres schema ${storage.schema}${storage.limits ? ', limits on redis' : ''}`;
  return storage.driver;
}
