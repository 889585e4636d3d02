/**
 * The response cache's cases (response-cache.case.ts, response-cache-apis.case.ts) on every
 * storage driver: memory, a real SQLite file, a real PostgreSQL schema (dropped after) and a
 * real Redis (its keys deleted after). Each suite gets stores of its own.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { createSqliteStores } from '../../src/stores/sqlite/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { responseCacheApiCases } from './response-cache-apis.case.js';
import { responseCacheCases } from './response-cache.case.js';

const suites = [responseCacheCases, responseCacheApiCases];
const postgresUp = (await postgresProblem(POSTGRES_URL)) === null;
const redisUp = (await redisProblem(REDIS_URL)) === null;
if (process.env.CI === 'true' && !(postgresUp && redisUp)) throw new Error('PostgreSQL and Redis must be reachable under CI');

for (const suite of suites) {
  suite('memory', async () => createMemoryStores());

  const dir = mkdtempSync(join(tmpdir(), 'mg-cache-'));
  suite(
    'sqlite',
    async (): Promise<Stores> => createSqliteStores({ path: join(dir, 'gateway.db') }),
    async () => rmSync(dir, { recursive: true, force: true }),
  );

  if (postgresUp) {
    const schema = freshSchema('mgcache');
    suite(
      'postgres',
      () => createPostgresStores({ url: POSTGRES_URL, schema, maxConnections: 4 }),
      () => dropSchema(schema),
    );
  }

  if (redisUp) {
    const prefix = `mgcache:${randomUUID().slice(0, 8)}:`;
    suite(
      'redis',
      async () => createRedisStores({ url: REDIS_URL, keyPrefix: prefix }),
      async () => {
        const client = new Redis(REDIS_URL);
        await deleteKeysWithPrefix(client, prefix);
        client.disconnect();
      },
    );
  }
}
