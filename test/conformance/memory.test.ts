import { describe, expect, it } from 'vitest';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { accountsKeysSuite } from './accounts-keys.suite.js';
import { billingSuite } from './billing.suite.js';
import { ledgerSuite } from './ledger.suite.js';
import { contentSuite } from './content.suite.js';
import { idempotencySuite } from './idempotency.suite.js';
import { responseCacheSuite } from './response-cache.suite.js';
import type { StoreHarness } from './harness.js';
import { jobsSuite } from './jobs.suite.js';
import { batchesSuite } from './batches.suite.js';
import { limitsSuite } from './limits.suite.js';

/** Memory stores on a fake clock: `advance` moves time instantly and exactly. */
async function makeMemory(): Promise<StoreHarness & { now(): number }> {
  let t = Date.UTC(2025, 0, 15);
  const stores = createMemoryStores({ now: () => t });
  return {
    stores,
    now: () => t,
    advance(ms) {
      t += ms;
    },
    cleanup: () => stores.close(),
  };
}

accountsKeysSuite('memory', makeMemory);
billingSuite('memory', makeMemory);
ledgerSuite('memory', makeMemory);
limitsSuite('memory', makeMemory);
jobsSuite('memory', makeMemory);
batchesSuite('memory', makeMemory);
contentSuite('memory', makeMemory);
idempotencySuite('memory', makeMemory);
responseCacheSuite('memory', makeMemory);

// Boundaries only a fake clock can pin to the millisecond.
describe('memory: exact clock boundaries', () => {
  it('a hit leaves the window exactly windowMs after it was counted', async () => {
    const h = await makeMemory();
    expect(await h.stores.limits.hit('b', 1, 1_000)).toEqual({ allowed: true, limit: 1, remaining: 0, resetMs: 1_000 });
    h.advance(999);
    expect(await h.stores.limits.hit('b', 1, 1_000)).toEqual({ allowed: false, limit: 1, remaining: 0, resetMs: 1 });
    h.advance(1);
    expect(await h.stores.limits.hit('b', 1, 1_000)).toEqual({ allowed: true, limit: 1, remaining: 0, resetMs: 1_000 });
  });

  it('holds, leases and jobs expire exactly at their TTL', async () => {
    const h = await makeMemory();
    const { billing, limits, jobs, accounts } = h.stores;
    await accounts.create({ id: 'a', grants: [], createdAt: 0 }, 10n);
    const req = { holdId: 'h', accountId: 'a', keyId: 'k', amount: 10n, monthlyCap: null, month: '2025-01', ttlMs: 500 };
    await billing.placeHold(req);
    await limits.acquireLease('p', 1, 'l', 500);
    await jobs.create({ id: 'j' } as Parameters<typeof jobs.create>[0], 500);
    h.advance(499);
    expect(await billing.openHolds('a')).toBe(1);
    expect(await limits.activeLeases('p')).toBe(1);
    expect(await jobs.get('j')).not.toBeNull();
    h.advance(1);
    expect(await billing.openHolds('a')).toBe(0);
    expect(await limits.activeLeases('p')).toBe(0);
    expect(await jobs.get('j')).toBeNull();
  });

  it('two factories share no state', async () => {
    const one = createMemoryStores();
    const two = createMemoryStores();
    await one.accounts.create({ id: 'a', grants: [], createdAt: 0 }, 5n);
    await one.limits.hit('b', 1, 60_000);
    expect(await two.accounts.get('a')).toBeNull();
    expect((await two.billing.wallet('a')).balance).toBe(0n);
    expect((await two.limits.hit('b', 1, 60_000)).allowed).toBe(true);
    await expect(one.close()).resolves.toBeUndefined();
  });

  it('the lazy sweep drops idle buckets but keeps live ones', async () => {
    const h = await makeMemory();
    expect((await h.stores.limits.hit('key', 1, 600_000)).allowed).toBe(true);
    for (let i = 0; i < 1_000; i++) await h.stores.limits.hit(`ip-${i}`, 5, 1_000);
    h.advance(120_000);
    // This call runs the sweep; the ten-minute window must survive it.
    expect(await h.stores.limits.hit('ip-0', 5, 1_000)).toMatchObject({ allowed: true, remaining: 4 });
    expect(await h.stores.limits.hit('key', 1, 600_000)).toMatchObject({ allowed: false, resetMs: 480_000 });
  });
});
