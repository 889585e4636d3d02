/** The limits round-two suite on every driver: fake clocks for memory and SQLite, real ones for PostgreSQL and Redis. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, describe } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { createSqliteStores } from '../../src/stores/sqlite/entry.js';
import { type StoreHarness, uid } from './harness.js';
import { limitsRoundTwoSuite } from './limits-round2.suite.js';

const fakeClock = (open: (now: () => number) => StoreHarness['stores']) => async (): Promise<StoreHarness> => {
  let t = Date.UTC(2026, 10, 26, 12);
  const stores = open(() => t);
  return { stores, advance: (ms) => void (t += ms), cleanup: () => stores.close() };
};

const dir = mkdtempSync(join(tmpdir(), 'mg-lim2-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

limitsRoundTwoSuite('memory', fakeClock((now) => createMemoryStores({ now })));
limitsRoundTwoSuite('sqlite', fakeClock((now) => createSqliteStores({ path: join(dir, `${uid('db')}.db`), now })));

const pgProblem = await postgresProblem(POSTGRES_URL);
const redisDown = await redisProblem(REDIS_URL);
const skip = (problem: string | null) => problem !== null && process.env.CI !== 'true';

describe.skipIf(skip(pgProblem))('postgres', { retry: 2 }, () => {
  const schema = freshSchema('mglim2');
  afterAll(() => dropSchema(schema));
  const open = () => createPostgresStores({ url: POSTGRES_URL, schema, maxConnections: 8 });
  limitsRoundTwoSuite(
    'postgres',
    async () => {
      const stores = await open();
      return { stores, advance: (ms) => sleep(ms), cleanup: () => stores.close() };
    },
    async () => [await open(), await open()],
  );
});

describe.skipIf(skip(redisDown))('redis', { retry: 2 }, () => {
  const prefix = `mglim2:${uid('run')}:`;
  afterAll(async () => {
    const client = new Redis(REDIS_URL);
    await deleteKeysWithPrefix(client, prefix);
    client.disconnect();
  });
  const open = () => createRedisStores({ url: REDIS_URL, keyPrefix: prefix });
  limitsRoundTwoSuite(
    'redis',
    async () => {
      const stores = open();
      return { stores, advance: (ms) => sleep(ms), cleanup: () => stores.close() };
    },
    async () => [open(), open()],
  );
});
