/**
 * The CLI's settle journal folder is named after where the store is, not after how it is
 * reached: a changed password or timeout must not move a store's unlanded charges into a
 * folder nobody reads (they would be lost when their holds lapse).
 */
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { storeIdentity } from '../../src/cli/open.js';
import { parseOptions } from '../../src/options.js';

const identity = (storage: object) => JSON.stringify(storeIdentity(parseOptions({ storage }).storage));

describe('the store a settle journal folder is named after', () => {
  it('ignores credentials, timeouts and options; names the place, the schema, the prefix', () => {
    const pg = { driver: 'postgres', url: 'postgres://app:old-password@db.internal:5432/books' };
    expect(identity({ ...pg, url: 'postgres://app:new-password@db.internal:5432/books', timeoutMs: 3000 })).toBe(identity(pg));
    expect(identity({ ...pg, schema: 'other' })).not.toBe(identity(pg));
    expect(identity({ ...pg, url: 'postgres://app:x@db.internal:5432/other' })).not.toBe(identity(pg));

    const redis = { driver: 'redis', url: 'redis://:secret@10.0.0.7:6379/0' };
    expect(identity({ ...redis, url: 'redis://:rotated@10.0.0.7:6379/0', timeoutMs: 3000 })).toBe(identity(redis));
    expect(identity({ ...redis, keyPrefix: 'other:' })).not.toBe(identity(redis));
    // A database named in the parameters is another store; a password there is not part of it.
    const param = (query: string) => identity({ driver: 'redis', url: `redis://10.0.0.7:6379${query}` });
    expect(param('?db=3')).not.toBe(param('?db=4'));
    expect(param('?password=a&db=3')).toBe(param('?db=3&password=b'));
    const cluster = (nodes: string[]) => identity({ driver: 'redis', cluster: nodes });
    expect(cluster(['redis://:a@10.0.0.8:7000', 'redis://:a@10.0.0.7:7000'])).toBe(cluster(['redis://10.0.0.7:7000', 'redis://10.0.0.8:7000']));

    const sqlite = { driver: 'sqlite', path: './data/gateway.db' };
    expect(identity({ ...sqlite, timeoutMs: 9000, synchronous: 'full' })).toBe(identity(sqlite));
    expect(identity({ driver: 'sqlite', path: resolve('data/gateway.db') })).toBe(identity(sqlite));
    expect(identity({ driver: 'sqlite', path: './data/other.db' })).not.toBe(identity(sqlite));
    // A separate Redis for the limits holds no settles: adding or moving it moves nothing.
    expect(identity({ ...sqlite, limits: { driver: 'redis', url: 'redis://:p@10.0.0.9:6379' } })).toBe(identity(sqlite));
  });
});
