/**
 * A store-unavailable error is recognised whichever copy of the package made it. The built
 * CLI is one bundle that loads the Redis stores from dist/redis.js, and an app may load both
 * the ESM and the CJS build: each holds its own copy of the class. Here a second copy of the
 * module stands in for the other bundle (test/frameworks/package.test.ts runs the real one).
 */
import { describe, expect, it } from 'vitest';
import { createGateway } from '../../src/gateway.js';
import { silentLogger } from '../../src/observability/log.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { isStoreUnavailable, StoreUnavailableError } from '../../src/stores/errors.js';
import { RedisStoreError } from '../../src/stores/redis/connection.js';

// The query makes the module loader evaluate the file again: a distinct class object. (A
// variable specifier, so the type checker does not try to resolve the query.)
const secondCopy = '../../src/stores/errors.js?second-copy';
const other = (await import(secondCopy)) as typeof import('../../src/stores/errors.js');

describe('StoreUnavailableError across copies of the package', () => {
  it('the second copy is a different class, and each recognises the other', () => {
    expect(other.StoreUnavailableError).not.toBe(StoreUnavailableError);
    const foreign = new other.StoreUnavailableError('Redis is down');
    expect(foreign instanceof StoreUnavailableError).toBe(true);
    expect(isStoreUnavailable(foreign)).toBe(true);
    expect(new StoreUnavailableError('x') instanceof other.StoreUnavailableError).toBe(true);
  });

  it('ordinary errors are not, and subclasses keep their own identity', () => {
    expect(new Error('x') instanceof StoreUnavailableError).toBe(false);
    expect(isStoreUnavailable({ name: 'StoreUnavailableError' })).toBe(false);
    expect(isStoreUnavailable(null)).toBe(false);
    expect(new RedisStoreError('x') instanceof StoreUnavailableError).toBe(true);
    expect(new StoreUnavailableError('x') instanceof RedisStoreError).toBe(false);
    expect(new other.StoreUnavailableError('x') instanceof RedisStoreError).toBe(false);
  });

  it('the gateway answers 503 service_unavailable with Retry-After for the other copy\'s error', async () => {
    const stores = createMemoryStores();
    stores.limits.hit = async () => {
      throw new other.StoreUnavailableError('Redis hit failed: Redis is unreachable');
    };
    // The memory store also counts synchronously; that path must map the error the same way.
    stores.limits.hitNow = () => {
      throw new other.StoreUnavailableError('Redis hit failed: Redis is unreachable');
    };
    const gateway = createGateway({ stores, logger: silentLogger });
    try {
      const res = await gateway.fetch(new Request('http://gateway.test/v1/models'), { clientAddress: '192.0.2.1' });
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(((await res.json()) as { error: unknown }).error).toMatchObject({ code: 'service_unavailable', type: 'service_unavailable' });
    } finally {
      await gateway.dispose();
    }
  });
});
