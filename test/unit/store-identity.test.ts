import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { REDIS_URL } from '../../bench/redis-util.js';
import { nodeWhere, postgresIdentity, redisIdentity, sqliteIdentity } from '../../src/stores/identity.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';

describe('a store identity names where the books are, however that is spelled', () => {
  it('Redis: the same server, port and database are one store; another database, host or prefix another', () => {
    const id = (url: string, keyPrefix = 'mg:') => redisIdentity({ url, keyPrefix });
    const one = id('redis://127.0.0.1:6379');
    for (const same of ['redis://127.0.0.1:6379/0', 'redis://127.0.0.1', 'redis://:secret@127.0.0.1:6379?db=0', 'redis://user:pw@127.0.0.1:6379/0?connectTimeout=10']) {
      expect(id(same), same).toBe(one);
    }
    for (const other of ['redis://127.0.0.1:6379/1', 'redis://127.0.0.1:6380', 'redis://10.0.0.1:6379']) expect(id(other), other).not.toBe(one);
    expect(id('redis://127.0.0.1:6379', 'tenant-b:')).not.toBe(one);
  });

  it('Redis Cluster and Sentinel: by their nodes (in any order) and master name', () => {
    const node = (n: string | { host: string; port: number }) => nodeWhere(n);
    const a = redisIdentity({ nodes: ['10.0.0.1:7000', '10.0.0.2:7000'].map(node), keyPrefix: 'mg:' });
    expect(redisIdentity({ nodes: ['redis://10.0.0.2:7000', { host: '10.0.0.1', port: 7000 }].map(node), keyPrefix: 'mg:' })).toBe(a);
    expect(redisIdentity({ nodes: ['10.9.9.9:7000'].map(node), keyPrefix: 'mg:' })).not.toBe(a);
    const sentinel = (n: string) => nodeWhere(n, 26379);
    const alpha = redisIdentity({ sentinels: ['s1:26379'].map(sentinel), name: 'alpha', keyPrefix: 'mg:' });
    expect(redisIdentity({ sentinels: ['s1:26379'].map(sentinel), name: 'beta', keyPrefix: 'mg:' })).not.toBe(alpha);
    // A Sentinel's default port is 26379.
    expect(redisIdentity({ sentinels: ['s1'].map(sentinel), name: 'alpha', keyPrefix: 'mg:' })).toBe(alpha);
  });

  it('PostgreSQL: host, port (5432 by default), database and schema; not the scheme, credentials or options', () => {
    const one = postgresIdentity('postgres://db.internal/gw', 'model_gateway');
    for (const same of ['postgresql://db.internal:5432/gw', 'postgres://u:p@DB.internal/gw?connect_timeout=10', 'postgres://db.internal:5432/gw?sslmode=require']) {
      expect(postgresIdentity(same, 'model_gateway'), same).toBe(one);
    }
    expect(postgresIdentity('postgres://db.internal/gw2', 'model_gateway')).not.toBe(one);
    expect(postgresIdentity('postgres://db.internal/gw', 'tenant_b')).not.toBe(one);
    // No database named: PostgreSQL's default, the user's own.
    expect(postgresIdentity('postgres://gw@db.internal', 'model_gateway')).toBe(one);
  });

  it('SQLite: the file, by its absolute path', () => {
    expect(sqliteIdentity('./data/gw.db')).toBe(sqliteIdentity(`${process.cwd()}/data/gw.db`));
    expect(sqliteIdentity('./data/other.db')).not.toBe(sqliteIdentity('./data/gw.db'));
  });

  it('a Redis store made from a URL and one given a client of the same server are one store', async () => {
    const client = new Redis(REDIS_URL);
    const given = createRedisStores({ client, keyPrefix: 'mgid:' });
    const own = createRedisStores({ url: REDIS_URL, keyPrefix: 'mgid:' });
    try {
      expect(given.identity).toBe(own.identity);
      expect(given.identity).toMatch(/^redis:/);
    } finally {
      await own.close();
      await given.close();
      client.disconnect();
    }
  });
});
