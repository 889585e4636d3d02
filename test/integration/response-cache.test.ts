/**
 * The response cache's cases (response-cache.case.ts) on every storage driver: memory, a real
 * SQLite file, a real PostgreSQL schema (dropped after) and a real Redis (its keys deleted
 * after).
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { createSqliteStores } from '../../src/stores/sqlite/entry.js';
import { responseCacheCases } from './response-cache.case.js';

responseCacheCases('memory', async () => createMemoryStores());

const dir = mkdtempSync(join(tmpdir(), 'mg-cache-'));
responseCacheCases(
  'sqlite',
  async () => createSqliteStores({ path: join(dir, 'gateway.db') }),
  async () => rmSync(dir, { recursive: true, force: true }),
);

if ((await postgresProblem(POSTGRES_URL)) === null) {
  const schema = freshSchema('mgcache');
  responseCacheCases(
    'postgres',
    () => createPostgresStores({ url: POSTGRES_URL, schema, maxConnections: 4 }),
    () => dropSchema(schema),
  );
} else if (process.env.CI === 'true') throw new Error(`PostgreSQL at ${POSTGRES_URL} is unreachable`);

if ((await redisProblem(REDIS_URL)) === null) {
  const prefix = `mgcache:${randomUUID().slice(0, 8)}:`;
  responseCacheCases(
    'redis',
    async () => createRedisStores({ url: REDIS_URL, keyPrefix: prefix }),
    async () => {
      const client = new Redis(REDIS_URL);
      await deleteKeysWithPrefix(client, prefix);
      client.disconnect();
    },
  );
} else if (process.env.CI === 'true') throw new Error(`Redis at ${REDIS_URL} is unreachable`);
