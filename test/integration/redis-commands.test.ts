/**
 * Few round trips: a warmed-up billed chat call on one Redis server costs 2 commands (the IP's
 * window, the key's window and the hold in one script; the settle with its ledger entry in
 * another). On a Cluster the IP's window is a third.
 */
import { describe, expect, it } from 'vitest';
import { countRedisCommands } from '../../bench/redis-commands.js';
import { REDIS_URL, redisProblem } from '../../bench/redis-util.js';

const url = REDIS_URL;

const up = (await redisProblem(url)) === null;
if (!up && process.env.CI !== 'true') console.warn(`\n!!! SKIPPING the Redis round-trip test: Redis at ${url} is unreachable (under CI=true this fails).\n`);

describe.runIf(up || process.env.CI === 'true')('Redis round trips', () => {
  it('a billed chat call sends 2 Redis commands (IP window, key window and hold; settle with its ledger entry)', async () => {
    const r = await countRedisCommands(url, 20);
    expect(r.calls).toBe(20);
    expect(r.perCall).toBe(2);
    // Each step is one script: the counted commands are EVALSHA only.
    expect(Object.keys(r.byCommand)).toEqual(['evalsha']);
  });
});
