/** Redis helpers shared by the benchmarks and the tests that need a real Redis. */
import { Redis } from 'ioredis';

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/** Why Redis at `url` cannot be used, or null when it answers PING. Never waits long. */
export async function redisProblem(url = REDIS_URL): Promise<string | null> {
  const c = new Redis(url, {
    lazyConnect: true,
    connectTimeout: 1_500,
    commandTimeout: 1_500,
    retryStrategy: () => null,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
  });
  c.on('error', () => {});
  try {
    await c.connect();
    await c.ping();
    return null;
  } catch (err) {
    return (err as Error).message || String(err);
  } finally {
    c.disconnect();
  }
}

/** Deletes every key starting with `prefix` (SCAN + UNLINK, so Redis never blocks). */
export async function deleteKeysWithPrefix(client: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, found] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    if (found.length) await client.unlink(...found);
  } while (cursor !== '0');
}
