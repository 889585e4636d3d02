/** Few round trips: a warmed-up billed chat call on Redis storage costs at most 4 commands. */
import { describe, expect, it } from 'vitest';
import { countRedisCommands } from '../../bench/redis-commands.js';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

describe('Redis round trips', () => {
  it('a billed chat call sends at most 4 Redis commands (IP window, key window, hold, settle)', async () => {
    const r = await countRedisCommands(url, 20);
    expect(r.calls).toBe(20);
    expect(r.perCall).toBeLessThanOrEqual(4);
    // Each step is one script: the counted commands are EVALSHA only.
    expect(Object.keys(r.byCommand)).toEqual(['evalsha']);
  });
});
