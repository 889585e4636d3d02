/**
 * How the CLI opens a config's gateway: its stores (built by `createStores`' builder, each
 * connecting one pinged and reported by place), the settle journal's folder, and the default
 * storage.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { createGateway, type Gateway, type GatewayOptions } from '../gateway.js';
import { silentLogger } from '../observability/log.js';
import { parseOptions } from '../options.js';
import { buildStores } from '../stores/from-storage.js';
import { place } from '../stores/identity.js';
import type { Stores } from '../stores/types.js';
import { loadConfigFile } from './config-file.js';

/**
 * A store the config names did not answer at start: the message names what and where (the
 * address without its password), so the operator knows what to start or correct.
 */
export class StoreUnreachableError extends Error {
  override name = 'StoreUnreachableError';
}

/** How long a store may take to answer its first ping at start. */
const REACH_TIMEOUT_MS = 15_000;

/**
 * What to do when a store does not answer its first ping: `serve` reports it and serves
 * anyway (calls get 503 until the store answers, and the stores reconnect by themselves);
 * without it, opening fails (an admin command cannot do its work).
 */
export type StoreDown = ((message: string) => void) | undefined;

/**
 * Builds a store (`make` may connect) and pings it; a failure names the place, with the
 * driver's own words as the reason and every password of the config taken out. A store that
 * cannot even be built (PostgreSQL's migrations need the server) always fails.
 */
async function reach(place: string, secrets: string[], make: () => Stores | Promise<Stores>, storeDown: StoreDown): Promise<Stores> {
  const message = (err: unknown): string => {
    let reason = err instanceof Error ? err.message : String(err);
    for (const s of secrets) if (s) reason = reason.split(s).join('***');
    return `could not reach ${place}: ${reason}. Is it running there, and is that the address the config means?`;
  };
  const stores = await Promise.resolve()
    .then(make)
    .catch((err: unknown) => {
      throw new StoreUnreachableError(message(err));
    });
  if (!stores.ping) return stores;
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      stores.ping(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${REACH_TIMEOUT_MS / 1000} s`)), REACH_TIMEOUT_MS);
      }),
    ]);
  } catch (err) {
    if (storeDown) {
      storeDown(`${message(err)} Serving anyway: calls get 503 until it answers.`);
      return stores;
    }
    await stores.close().catch(() => {});
    throw new StoreUnreachableError(message(err));
  } finally {
    clearTimeout(timer);
  }
  return stores;
}

/** The passwords a storage config holds (in URLs or fields), to keep out of messages. */
function passwordsOf(storage: unknown): string[] {
  const out: string[] = [];
  const visit = (v: unknown, key: string) => {
    if (typeof v === 'string') {
      if (key === 'password') out.push(v);
      try {
        const u = new URL(v);
        if (u.password) out.push(u.password, decodeURIComponent(u.password));
        const q = u.searchParams.get('password');
        if (q) out.push(q);
      } catch {
        // Not a URL.
      }
    } else if (v && typeof v === 'object') {
      for (const [k, inner] of Object.entries(v)) visit(inner, k);
    }
  };
  visit(storage, '');
  return out;
}

/** Where the CLI keeps its books when a config names no storage. */
const DEFAULT_STORAGE = { driver: 'sqlite', path: './data/gateway.db' } as const;

/**
 * The config's stores, built by the one builder embedders use too (`createStores`), each
 * connecting store pinged as it opens (`reach`), with the config's passwords kept out of
 * what is reported.
 */
function storesFor(storage: Storage, storeDown: StoreDown): Promise<Stores> {
  const secrets = passwordsOf(storage);
  return buildStores(storage, (place, make) => reach(place, secrets, make, storeDown));
}

/**
 * What names one store of settles: where its books are (a SQLite file, a PostgreSQL database
 * and schema, a Redis deployment and key prefix), never a password or a timeout, which change
 * without the books moving, nor a separate limits Redis (settles never go there).
 */
/** The storage section as parsed (defaults filled in). */
type Storage = ReturnType<typeof parseOptions>['storage'];

export function storeIdentity(storage: Storage): unknown {
  const redis = (r: { url?: string; cluster?: string[]; sentinels?: string[]; name?: string; keyPrefix: string }) => ({
    url: r.url === undefined ? null : place(r.url),
    cluster: r.cluster?.map(place).sort() ?? null,
    sentinels: r.sentinels?.map(place).sort() ?? null,
    name: r.name ?? null,
    keyPrefix: r.keyPrefix,
  });
  if (storage.driver === 'sqlite') return { driver: 'sqlite', path: resolve(storage.path) };
  if (storage.driver === 'postgres') return { driver: 'postgres', url: place(storage.url), schema: storage.schema };
  if (storage.driver === 'redis') return { driver: 'redis', ...redis(storage as Parameters<typeof redis>[0]) };
  return { driver: storage.driver };
}

const digest = (value: unknown) => createHash('sha256').update(JSON.stringify(value)).digest('hex').slice(0, 12);

/**
 * Where the settle journal lives when the config names none: `./data/settle-journal/<store>`
 * for every storage that outlives the process (a charge the store could not take then
 * survives this process too), none for memory storage (whose books die with it anyway). The
 * folder is per store (a digest of where the store is), so a gateway never replays another
 * store's charges into its own, and a changed password or timeout leaves its charges in
 * place. `adopt`: the folder an earlier version named after the whole storage section.
 */
function journalDirs(config: GatewayOptions, storage: Storage): { dir: string | null | undefined; adopt: string[] } {
  if (config.settleJournalDir !== undefined) return { dir: config.settleJournalDir, adopt: [] };
  if (storage.driver === 'memory') return { dir: null, adopt: [] };
  return {
    dir: resolve('data', 'settle-journal', digest(storeIdentity(storage))),
    adopt: [resolve('data', 'settle-journal', digest(storage))],
  };
}

/**
 * `newDatabase`: called with the absolute path when the config's SQLite database does not
 * exist yet (opening creates it), before anything is opened. A relative path is taken from the
 * folder the command runs in, so a command run elsewhere than the server would write a new,
 * empty database of its own: the caller says so, or refuses.
 */
export async function open(
  configFile: string,
  quiet: boolean,
  storeDown?: StoreDown,
  newDatabase?: (path: string) => void,
): Promise<{ gateway: Gateway; stores: Stores }> {
  const loaded = (await loadConfigFile(configFile)) as GatewayOptions;
  const config: GatewayOptions = loaded.storage === undefined ? { ...loaded, storage: DEFAULT_STORAGE } : loaded;
  const { storage } = parseOptions(config);
  if (newDatabase && storage.driver === 'sqlite' && storage.path !== ':memory:' && !existsSync(resolve(storage.path))) newDatabase(resolve(storage.path));
  // A store down at start (serve only): the gateway seeds once it answers, and serves 503s
  // until then, so opening does not wait for that.
  let down = false;
  const stores = await storesFor(
    storage,
    storeDown &&
      ((message) => {
        down = true;
        storeDown(message);
      }),
  );
  try {
    const journal = journalDirs(config, storage);
    // The storage is checked against the stores at run time: a config file is JSON.
    const gateway = createGateway({
      ...config,
      settleJournalDir: journal.dir,
      settleJournalAdopt: [...(config.settleJournalAdopt ?? []), ...journal.adopt],
      stores,
      ...(quiet ? { logger: silentLogger } : {}),
    } as GatewayOptions);
    if (!down) await gateway.ready;
    return { gateway, stores };
  } catch (err) {
    await stores.close();
    throw err;
  }
}

/** Where the books are, for the start-up line. */
export function describeStorage(storage: Gateway['config']['storage']): string {
  // The absolute path: a relative one is taken from the folder the server runs in.
  if (storage.driver === 'sqlite') return `sqlite at ${storage.path === ':memory:' ? storage.path : resolve(storage.path)}${storage.limits ? ', limits on redis' : ''}`;
  if (storage.driver === 'postgres') return `postgres schema ${storage.schema}${storage.limits ? ', limits on redis' : ''}`;
  return storage.driver;
}
