/** Few round trips: a warmed-up billed chat call on Redis storage costs at most 3 commands. */
import { describe, expect, it } from 'vitest';
import { countRedisCommands } from '../../bench/redis-commands.js';
import { REDIS_URL, redisProblem } from '../../bench/redis-util.js';

const url = REDIS_URL;

const up = (await redisProblem(url)) === null;
if (!up && process.env.CI !== 'true') console.warn(`\n!!! SKIPPING the Redis round-trip test: Redis at ${url} is unreachable (under CI=true this fails).\n`);

describe.runIf(up || process.env.CI === 'true')('Redis round trips', () => {
  it('a billed chat call sends at most 3 Redis commands (IP window, key window with the hold, settle with its ledger entry)', async () => {
    const r = await countRedisCommands(url, 20);
    expect(r.calls).toBe(20);
    expect(r.perCall).toBeLessThanOrEqual(3);
    // Each step is one script: the counted commands are EVALSHA only.
    expect(Object.keys(r.byCommand)).toEqual(['evalsha']);
  });
});
