/**
 * The soak (bench/soak.ts) in short, for CI: 2,000 mixed calls (plain, streamed, client
 * disconnects mid-stream, upstream 500s, images, speech, video jobs) against a real node:http
 * gateway, on memory storage and on Redis storage, and the invariants: the wallet moved by
 * exactly the ledger sum, no hold open, nothing held, no in-flight lease, every job finished,
 * every answer one the kind allows, no error logged. `npm run soak` runs the long version.
 *
 * Redis unreachable: the Redis run is skipped with a warning, unless CI=true (then it fails).
 */
import { describe, expect, it } from 'vitest';
import { KINDS, formatReport, redisProblem, runSoak, type SoakReport } from '../../bench/soak.js';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const CALLS = 2_000;
const redisDown = await redisProblem(REDIS_URL);
if (redisDown && process.env.CI !== 'true') {
  // eslint-disable-next-line no-console
  console.warn(
    `\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n!! soak.test.ts: Redis at ${REDIS_URL} is unreachable (${redisDown}):\n` +
      `!! the Redis soak is SKIPPED. Under CI=true it fails.\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n`,
  );
}

function expectInvariants(r: SoakReport) {
  // eslint-disable-next-line no-console
  console.log(formatReport(r));
  expect(r.problems).toEqual([]);
  expect(r.stoppedByTimeLimit).toBe(false);
  expect(r.calls).toBe(CALLS);
  for (const k of KINDS) expect(r.byKind[k].calls, k).toBeGreaterThan(0);
  // Every kind that should bill did: the ledger has the answered calls (disconnects may bill 0).
  expect(r.ledgerEntries).toBeGreaterThan(CALLS / 2);
  expect(r.walletDelta).toBe(r.ledgerSum);
  expect(r.initialBalance - r.finalBalance).toBe(r.ledgerSum);
  expect(r.openHolds).toBe(0);
  expect(r.held).toBe(0n);
  expect(r.activeLeases).toEqual({ image: 0, video: 0 });
  expect(r.unfinishedJobs).toBe(0);
  expect(r.logLines.error).toBe(0);
  // The flaky upstream failed some calls, and those were not billed as successes.
  expect(r.byKind.upstream_err.byStatus['502'] ?? 0).toBeGreaterThan(0);
}

describe('soak (short)', () => {
  it(`${CALLS} mixed calls on memory storage: the wallet equals the ledger, nothing held, no lease left`, async () => {
    expectInvariants(await runSoak({ calls: CALLS, storage: 'memory', concurrency: 32, maxMs: 240_000 }));
  }, 300_000);

  it.skipIf(redisDown !== null && process.env.CI !== 'true')(
    `${CALLS} mixed calls on Redis storage: the same invariants`,
    async () => {
      expect(redisDown, `Redis at ${REDIS_URL}`).toBeNull();
      expectInvariants(await runSoak({ calls: CALLS, storage: 'redis', redisUrl: REDIS_URL, concurrency: 32, maxMs: 240_000 }));
    },
    300_000,
  );
});
