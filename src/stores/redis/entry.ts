/** model-gateway/redis: Redis stores for several gateway instances sharing one Redis. */
export {
  createRedisStores,
  RedisStoreError,
  CLOSED_MARKER_TTL_MS,
  type RedisStoreOptions,
} from './index.js';
