/**
 * The Redis stores and several gateway processes on a real Redis Cluster of 3 masters and 3
 * replicas, started here on free ports (redis-server --cluster-enabled, redis-cli --cluster
 * create): every store conformance suite, the multi-instance suite, and a failover: the master
 * that serves an account is killed mid-traffic; calls answer 503 service_unavailable with
 * Retry-After until its replica took over, then succeed again, and every charge lands once.
 *
 * A Cluster refuses a script whose keys span slots (CROSSSLOT), so the suites passing here is
 * the proof that every script keeps to one hash slot.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { accountsKeysSuite } from '../conformance/accounts-keys.suite.js';
import { billingSuite } from '../conformance/billing.suite.js';
import { contentSuite } from '../conformance/content.suite.js';
import { idempotencySuite } from '../conformance/idempotency.suite.js';
import type { MakeStores } from '../conformance/harness.js';
import { uid } from '../conformance/harness.js';
import { jobsSuite } from '../conformance/jobs.suite.js';
import { limitsSuite } from '../conformance/limits.suite.js';
import { type RedisCluster, command, hasRedisCli, hasRedisServer, startRedisCluster } from '../helpers/redis-servers.js';
import { failoverScenario } from './failover.case.js';
import { multiInstanceSuite } from './multi-instance.suite.js';

const PREFIX = `mgcl:${randomBytes(4).toString('hex')}:`;
const missing = !hasRedisServer ? 'redis-server' : !hasRedisCli ? 'redis-cli' : null;

if (missing !== null) {
  if (process.env.CI === 'true') {
    describe('redis cluster', () => {
      it(`${missing} is installed (required under CI=true)`, () => {
        throw new Error(`${missing} is not installed: the Redis Cluster tests cannot run.`);
      });
    });
  } else {
    console.warn(`\n!!! SKIPPING the Redis Cluster tests: ${missing} is not installed (under CI=true this fails).\n`);
    // Skipped only outside CI, and loudly: a developer without redis-server still runs the rest.
    describe.skip(`redis cluster (skipped: ${missing} is not installed)`, () => {
      it('conformance, several instances, failover', () => {});
    });
  }
} else {
  let cluster: RedisCluster | undefined;
  const urls = () => {
    if (!cluster) throw new Error('the cluster did not start');
    return cluster.urls;
  };

  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3, nodeTimeoutMs: 1_000 });
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  const makeCluster: MakeStores = async () => {
    // Two of the six nodes as startup nodes: the client discovers the rest.
    const stores = createRedisStores({ cluster: urls().slice(0, 2), keyPrefix: PREFIX });
    return { stores, advance: (ms) => sleep(ms), cleanup: () => stores.close() };
  };

  // Expiries of 100-300 ms on Redis's real clock: a loaded machine may overshoot a timer, so a
  // failed case is retried (the memory suites run the same cases exactly on a fake clock).
  describe('conformance on a Redis Cluster', { retry: 2 }, () => {
    accountsKeysSuite('redis cluster', makeCluster);
    billingSuite('redis cluster', makeCluster);
    limitsSuite('redis cluster', makeCluster);
    jobsSuite('redis cluster', makeCluster);
    contentSuite('redis cluster', makeCluster);
    idempotencySuite('redis cluster', makeCluster);
  });

  describe('Redis Cluster: across clients, readiness, persistence', () => {
    it('200 concurrent holds from two clients against a wallet worth exactly 10 place exactly 10', async () => {
      const one = createRedisStores({ cluster: urls(), keyPrefix: PREFIX });
      const two = createRedisStores({ cluster: urls().slice(3), keyPrefix: PREFIX });
      try {
        const accountId = uid('acct');
        await one.accounts.create({ id: accountId, grants: [], createdAt: 0 }, 70_000n);
        const results = await Promise.all(
          Array.from({ length: 200 }, (_, i) =>
            (i % 2 ? one : two).billing.placeHold({
              holdId: uid('hold'),
              accountId,
              keyId: 'k',
              amount: 7_000n,
              monthlyCap: null,
              month: '2025-01',
              ttlMs: 60_000,
            }),
          ),
        );
        expect(results.filter((r) => r.ok)).toHaveLength(10);
        expect(await two.billing.wallet(accountId)).toEqual({ balance: 70_000n, held: 70_000n });
      } finally {
        await Promise.all([one.close(), two.close()]);
      }
    });

    it('ping answers, and the start-up check names every master that keeps nothing on disk', async () => {
      const stores = createRedisStores({ cluster: urls(), keyPrefix: PREFIX });
      try {
        await expect(stores.ping!()).resolves.toBeUndefined();
        const warning = await stores.durabilityWarning!();
        expect(warning).toContain('keeps nothing on disk');
        // The three masters, by address, and no replica.
        const named = [...(warning ?? '').matchAll(/127\.0\.0\.1:(\d+)/g)].map((m) => Number(m[1]));
        expect(named).toHaveLength(3);
        for (const port of named) expect(String(await command(port, 'INFO', 'replication'))).toContain('role:master');
      } finally {
        await stores.close();
      }
    });
  });

  multiInstanceSuite('a Redis Cluster', () => ({ driver: 'redis', cluster: urls(), keyPrefix: `${PREFIX}mi:` }), async () => {
    // The cluster is this file's own and dies with it.
  });

  // Last: it leaves one master without a replica.
  describe('Redis Cluster failover', () => {
    it('kill -9 of the master serving an account: 503 with Retry-After until its replica takes over, then calls succeed; no charge lost or doubled', async () => {
      await failoverScenario({
        storage: (keyPrefix) => createRedisStores({ cluster: urls(), keyPrefix }),
        prefix: `${PREFIX}fo:`,
        primaryOf: (key) => cluster!.masterOf(key),
      });
    }, 60_000);
  });
}
