/** model-gateway/redis: Redis stores for several gateway instances sharing one Redis. */
import type { Stores } from './stores/types.js';

export interface RedisStoreOptions {
  url?: string;
  keyPrefix?: string;
}

export function createRedisStores(_options: RedisStoreOptions): Stores {
  throw new Error('Redis storage is not implemented yet (see the README, "Status").');
}
