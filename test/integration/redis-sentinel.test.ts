/**
 * The Redis stores on a Sentinel-watched primary (a primary, one replica and three sentinels,
 * started here on free ports): every store conformance suite through the sentinels, readiness
 * and the persistence check, and a failover: the primary is killed mid-traffic; calls answer
 * 503 service_unavailable with Retry-After until the sentinels promoted the replica, then
 * succeed again, and every charge lands once.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { accountsKeysSuite } from '../conformance/accounts-keys.suite.js';
import { billingSuite } from '../conformance/billing.suite.js';
import { contentSuite } from '../conformance/content.suite.js';
import { idempotencySuite } from '../conformance/idempotency.suite.js';
import type { MakeStores } from '../conformance/harness.js';
import { jobsSuite } from '../conformance/jobs.suite.js';
import { limitsSuite } from '../conformance/limits.suite.js';
import { eventually } from '../helpers/gateway.js';
import { command, hasRedisServer, startRedisSentinels, type RedisSentinels } from '../helpers/redis-servers.js';
import { failoverScenario } from './failover.case.js';

const PREFIX = `mgsn:${randomBytes(4).toString('hex')}:`;

if (!hasRedisServer) {
  if (process.env.CI === 'true') {
    describe('redis sentinel', () => {
      it('redis-server is installed (required under CI=true)', () => {
        throw new Error('redis-server is not installed: the Redis Sentinel tests cannot run.');
      });
    });
  } else {
    console.warn('\n!!! SKIPPING the Redis Sentinel tests: redis-server is not installed (under CI=true this fails).\n');
    // Skipped only outside CI, and loudly: a developer without redis-server still runs the rest.
    describe.skip('redis sentinel (skipped: redis-server is not installed)', () => {
      it('conformance, failover', () => {});
    });
  }
} else {
  let set: RedisSentinels | undefined;
  const sentinels = () => {
    if (!set) throw new Error('the sentinels did not start');
    return set;
  };

  beforeAll(async () => {
    set = await startRedisSentinels({ count: 3 });
  }, 60_000);
  afterAll(async () => {
    await set?.stop();
  });

  const makeSentinel: MakeStores = async () => {
    const stores = createRedisStores({ sentinels: sentinels().urls, name: sentinels().name, keyPrefix: PREFIX });
    return { stores, advance: (ms) => sleep(ms), cleanup: () => stores.close() };
  };

  describe('conformance through Redis Sentinel', { retry: 2 }, () => {
    accountsKeysSuite('redis sentinel', makeSentinel);
    billingSuite('redis sentinel', makeSentinel);
    limitsSuite('redis sentinel', makeSentinel);
    jobsSuite('redis sentinel', makeSentinel);
    contentSuite('redis sentinel', makeSentinel);
    idempotencySuite('redis sentinel', makeSentinel);
  });

  describe('Redis Sentinel: readiness and persistence', () => {
    it('ping answers, and the start-up check names the primary that keeps nothing on disk', async () => {
      const stores = createRedisStores({ sentinels: sentinels().urls, name: sentinels().name, keyPrefix: PREFIX });
      try {
        await expect(stores.ping!()).resolves.toBeUndefined();
        expect(await stores.durabilityWarning!()).toContain(`primary "${sentinels().name}" keeps nothing on disk`);
      } finally {
        await stores.close();
      }
    });

    it('closed stores let the process exit (the failover detector\'s connections to the sentinels are closed too)', async () => {
      // A CLI command (an audit from cron) or an embedder's dispose must not leave the process running.
      const script = [
        `import { createRedisStores } from ${JSON.stringify(new URL('../../src/stores/redis/entry.ts', import.meta.url).pathname)};`,
        `const stores = createRedisStores({ sentinels: ${JSON.stringify(sentinels().urls)}, name: ${JSON.stringify(sentinels().name)}, keyPrefix: ${JSON.stringify(PREFIX)} });`,
        'await stores.ping();',
        'await stores.billing.wallet("nobody");',
        'await stores.close();',
        'console.log("closed");',
      ].join('\n');
      const t0 = Date.now();
      const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
      expect(run.stdout).toContain('closed');
      expect(run.signal, 'the process was still running after 20 s').toBeNull();
      expect(run.status, run.stderr).toBe(0);
      expect(Date.now() - t0).toBeLessThan(15_000);
    }, 30_000);

    it('a name the sentinels do not monitor fails as unavailable, promptly', async () => {
      const stores = createRedisStores({ sentinels: sentinels().urls, name: 'nobody', keyPrefix: PREFIX });
      try {
        const t0 = Date.now();
        await expect(stores.ping!()).rejects.toMatchObject({ name: 'RedisStoreError' });
        expect(Date.now() - t0).toBeLessThan(5_000);
      } finally {
        await stores.close();
      }
    });
  });

  describe('Redis Sentinel failover', () => {
    // Before the kill below, which leaves no replica to fail over to.
    it('a paused primary (SIGSTOP): 503 until the replica is promoted, then calls succeed during the pause; the settles kept meanwhile land on the new primary, not on the old one when it wakes', async () => {
      const set = sentinels();
      await failoverScenario({
        storage: (keyPrefix) => createRedisStores({ sentinels: set.urls, name: set.name, keyPrefix }),
        prefix: `${PREFIX}pause:`,
        primaryOf: async () => (set.primary.port === (await set.primaryPort()) ? set.primary : set.replica),
        fault: async (primary) => {
          primary.child.kill('SIGSTOP');
          return {
            after: async () => {
              primary.child.kill('SIGCONT');
              // The woken primary is told it is a replica now (and drops what it held alone).
              // (The sentinels close its clients as they turn it: a probe may find its connection closed.)
              await eventually(async () => String(await command(primary.port, 'INFO', 'replication').catch(() => '')).includes('role:slave'), 'the old primary rejoins as a replica', 20_000);
            },
          };
        },
      });
    }, 90_000);

    it('kill -9 of the primary: 503 with Retry-After until the replica is promoted, then calls succeed; no charge lost or doubled', async () => {
      const set = sentinels();
      await failoverScenario({
        storage: (keyPrefix) => createRedisStores({ sentinels: set.urls, name: set.name, keyPrefix }),
        prefix: `${PREFIX}fo:`,
        primaryOf: async () => (set.primary.port === (await set.primaryPort()) ? set.primary : set.replica),
      });
    }, 60_000);
  });
}
