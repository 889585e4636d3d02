/**
 * `createStores(storage)`, the public builder an embedder uses with the same `storage` section
 * the CLI reads (the CLI builds its stores with it too): every driver, on real SQLite,
 * PostgreSQL and Redis. A charge made through a gateway on the built stores is found by stores
 * built again from the same section (durable drivers), Redis-backed parts write under their
 * prefix, and readiness covers both halves of SQL books with limits on Redis.
 */
import { once } from 'node:events';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';
import { ConfigError, createGateway, createStores, type StorageOptions, type Stores } from '../../src/index.js';
import { ACCOUNT, MODEL, testConfig } from '../helpers/gateway.js';
import { freePort } from '../helpers/redis-servers.js';

const hasPostgres = (await postgresProblem(POSTGRES_URL)) === null;
const hasRedis = (await redisProblem(REDIS_URL)) === null;
for (const [has, what] of [
  [hasPostgres, `PostgreSQL at ${POSTGRES_URL}`],
  [hasRedis, `Redis at ${REDIS_URL}`],
] as const) {
  if (!has && process.env.CI !== 'true') console.warn(`\n!!! SKIPPING the createStores tests that need ${what}: it is unreachable (under CI=true this fails).\n`);
}
const needs = (postgres: boolean, redis: boolean) => (process.env.CI === 'true' || ((!postgres || hasPostgres) && (!redis || hasRedis)));

const WALLET_NANO = 100n * 1_000_000_000n;
const SCHEMA = freshSchema('mgcs');
const PREFIX = `mgcs${Math.random().toString(36).slice(2, 8)}:`;
let dir: string;
let redis: Redis | undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mg-create-stores-'));
  if (hasRedis) redis = new Redis(REDIS_URL);
});

afterAll(async () => {
  if (redis) {
    await deleteKeysWithPrefix(redis, PREFIX);
    redis.disconnect();
  }
  if (hasPostgres) await dropSchema(SCHEMA);
  await rm(dir, { recursive: true, force: true });
});

/** One billed chat through a gateway on `stores`; returns what the account's wallet holds after it. */
async function chatOn(storage: StorageOptions, stores: Stores): Promise<bigint> {
  const { options, devKey } = testConfig();
  const gateway = createGateway({ ...options, storage, stores } as Parameters<typeof createGateway>[0]);
  try {
    await gateway.ready;
    const res = await gateway.fetch(
      new Request('http://localhost/v1/chat/completions', {
        method: 'POST',
        headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hello!' }] }),
      }),
    );
    expect(res.status).toBe(200);
    await res.json();
    return (await stores.billing.wallet(ACCOUNT)).balance;
  } finally {
    await gateway.dispose();
  }
}

/** Builds, charges once, closes; builds again from the same section and reads the wallet. */
async function durable(storage: StorageOptions): Promise<void> {
  const first = await createStores(storage);
  let after: bigint;
  try {
    after = await chatOn(storage, first);
    expect(after).toBeLessThan(WALLET_NANO);
  } finally {
    await first.close();
  }
  const again = await createStores(storage);
  try {
    expect((await again.billing.wallet(ACCOUNT)).balance).toBe(after);
  } finally {
    await again.close();
  }
}

describe('createStores', () => {
  it('memory: a gateway on them bills', async () => {
    const stores = await createStores({ driver: 'memory' });
    try {
      expect(await chatOn({ driver: 'memory' }, stores)).toBeLessThan(WALLET_NANO);
    } finally {
      await stores.close();
    }
  });

  it('sqlite: the file is created, and the charge is there when built again', async () => {
    const path = join(dir, 'books', 'gateway.db');
    await durable({ driver: 'sqlite', path });
    expect((await stat(path)).isFile()).toBe(true);
  });

  it.runIf(needs(true, false))('postgres: migrated at build, and the charge is there when built again', async () => {
    await durable({ driver: 'postgres', url: POSTGRES_URL, schema: SCHEMA });
  });

  it.runIf(needs(false, true))('redis: the books live under the key prefix, and the charge is there when built again', async () => {
    const keyPrefix = `${PREFIX}books:`;
    await durable({ driver: 'redis', url: REDIS_URL, keyPrefix });
    expect((await redis!.keys(`${keyPrefix}*`)).length).toBeGreaterThan(0);
  });

  it.runIf(needs(true, true))('postgres books with limits on Redis: the windows go to Redis; ready needs both', async () => {
    const keyPrefix = `${PREFIX}limits:`;
    const storage: StorageOptions = { driver: 'postgres', url: POSTGRES_URL, schema: SCHEMA, limits: { driver: 'redis', url: REDIS_URL, keyPrefix } };
    const stores = await createStores(storage);
    try {
      expect(await chatOn(storage, stores)).toBeLessThan(WALLET_NANO);
      expect((await redis!.keys(`${keyPrefix}*`)).length).toBeGreaterThan(0);
      await expect(stores.ping!()).resolves.toBeUndefined();
    } finally {
      await stores.close();
    }
    // The same books with the limits' Redis gone: not ready, though PostgreSQL answers.
    const down = await createStores({ ...storage, limits: { driver: 'redis', url: `redis://127.0.0.1:${await freePort()}`, keyPrefix } });
    try {
      await expect(down.ping!()).rejects.toThrow();
    } finally {
      await down.close();
    }
  });

  it('redis: a command the server never answers fails within storage.timeoutMs', async () => {
    // A server that takes the connection and says nothing: a Redis stopped (SIGSTOP) or cut off.
    const silent = createServer(() => undefined);
    silent.listen(0, '127.0.0.1');
    await once(silent, 'listening');
    const url = `redis://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    const stores = await createStores({ driver: 'redis', url, keyPrefix: PREFIX, timeoutMs: 250 });
    try {
      const started = performance.now();
      await expect(stores.billing.wallet(ACCOUNT)).rejects.toThrow();
      const took = performance.now() - started;
      // Not before the timeout (a timer never fires early), and well before the default (1 s).
      expect(took).toBeGreaterThanOrEqual(240);
      expect(took).toBeLessThan(900);
    } finally {
      await stores.close();
      silent.close();
    }
  });

  it('a bad section is a ConfigError naming the field', async () => {
    // @ts-expect-error: PostgreSQL needs its url
    await expect(createStores({ driver: 'postgres' })).rejects.toThrow(ConfigError);
    // @ts-expect-error: as above
    await expect(createStores({ driver: 'postgres' })).rejects.toThrow(/storage\.url/);
    // @ts-expect-error: an unknown driver
    await expect(createStores({ driver: 'mysql' })).rejects.toThrow(/storage\.driver/);
  });
});
