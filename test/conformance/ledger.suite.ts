import { describe, expect, it } from 'vitest';
import type { Stores } from '../../src/stores/types.js';
import { type MakeStores, uid, useHarness } from './harness.js';

const MONTH = '2025-01';
const USD = 1_000_000_000n;

/** Minus the sum of the account's ledger costs: what its balance must be. */
async function ledgerBalance(stores: Stores, accountId: string): Promise<bigint> {
  return -(await stores.billing.ledger(accountId)).reduce((sum, e) => sum + e.cost, 0n);
}

/**
 * The ledger proves the wallet: every wallet change (opening balance, top-up, credit,
 * adjustment, charge) is an entry, so the balance is always minus the sum of the entries'
 * costs. Credits are no key's spend.
 */
export function ledgerSuite(name: string, make: MakeStores): void {
  describe(`${name}: the ledger proves the wallet`, () => {
    const h = useHarness(make);

    it('opening balance, top-up, credit, adjustment and charge are each an entry; balance = -sum(costs)', async () => {
      const { stores } = h();
      const accountId = uid('acct');
      const keyId = uid('key');
      expect(await stores.accounts.create({ id: accountId, grants: [], createdAt: 1_000 }, 2n * USD)).toBe(true);
      expect((await stores.billing.wallet(accountId)).balance).toBe(await ledgerBalance(stores, accountId));
      expect(await stores.billing.topUp(accountId, USD)).toBe(3n * USD);
      expect(await stores.billing.credit({ accountId, creditId: uid('cr'), amount: 3_250_000_000n, reason: 'goodwill', at: 2_000 })).toEqual({
        applied: true,
        balance: 6_250_000_000n,
      });
      await stores.billing.credit({ accountId, creditId: uid('cr'), amount: -250_000_000n, reason: 'correction', at: 3_000 });
      const holdId = uid('hold');
      expect(await stores.billing.placeHold({ holdId, accountId, keyId, amount: USD, monthlyCap: 5n * USD, month: MONTH, ttlMs: 60_000 })).toEqual({
        ok: true,
      });
      const entry = { id: holdId, accountId, keyId, model: 'm', units: { kind: 'tokens' as const, prompt: 1, completion: 2 }, measured: 'usage' as const, at: 4_000 };
      expect((await stores.billing.settle({ holdId, accountId, month: MONTH, cost: 123_456_789n, entry })).settled).toBe(true);
      // Neither a second account creation nor a top-up of nothing writes anything.
      expect(await stores.accounts.create({ id: accountId, grants: [], createdAt: 5_000 }, 7n * USD)).toBe(false);
      expect(await stores.billing.topUp(accountId, 0n)).toBe(6n * USD - 123_456_789n);

      const balance = (await stores.billing.wallet(accountId)).balance;
      expect(balance).toBe(6n * USD - 123_456_789n);
      expect(await ledgerBalance(stores, accountId)).toBe(balance);

      const ledger = await stores.billing.ledger(accountId);
      expect(ledger.map((e) => [e.units.kind === 'credit' ? e.units.reason : e.units.kind, e.cost])).toEqual([
        ['opening balance', -2n * USD],
        ['top-up', -USD],
        ['goodwill', -3_250_000_000n],
        ['correction', 250_000_000n],
        ['tokens', 123_456_789n],
      ]);
      expect(ledger[0]).toMatchObject({ id: 'opening-balance', keyId: '', model: '', held: 0n, exceededHold: false, measured: null, at: 1_000 });
      expect(ledger[1]).toMatchObject({ keyId: '', model: '', held: 0n, measured: null });
      expect(ledger[1]?.id).toMatch(/^tu_/);
      // Only the charge is the key's spend: credits count toward no key's month or total.
      expect(await stores.billing.keyUsage(accountId, keyId, MONTH)).toEqual({ total: 123_456_789n, monthly: 123_456_789n, held: 0n });
      expect((await stores.billing.queryLedger({ accountId, keyId, limit: 10 })).entries.map((e) => e.id)).toEqual([holdId]);
    });

    it('latestLedger reads the last entries newest first, bounded by its limit', async () => {
      const { stores } = h();
      const accountId = uid('acct');
      expect(await stores.accounts.create({ id: accountId, grants: [], createdAt: 0 }, 0n)).toBe(true);
      expect(await stores.billing.latestLedger(accountId, 5)).toEqual([]);
      const reasons = Array.from({ length: 12 }, (_, i) => `r${i}`);
      for (const [i, reason] of reasons.entries()) {
        await stores.billing.credit({ accountId, creditId: uid('cr'), amount: BigInt(i + 1), reason, at: 1_000 + i });
      }
      const latest = await stores.billing.latestLedger(accountId, 5);
      expect(latest.map((e) => (e.units.kind === 'credit' ? e.units.reason : ''))).toEqual(['r11', 'r10', 'r9', 'r8', 'r7']);
      expect(latest[0]).toMatchObject({ accountId, cost: -12n, at: 1_011 });
      // Fewer entries than the limit: all of them; another account's entries never.
      expect((await stores.billing.latestLedger(accountId, 1_000)).map((e) => e.cost)).toEqual(reasons.map((_, i) => -BigInt(i + 1)).reverse());
      expect(await stores.billing.latestLedger(uid('acct'), 3)).toEqual([]);
      await expect(stores.billing.latestLedger(accountId, 0)).rejects.toThrow(RangeError);
      await expect(stores.billing.latestLedger(accountId, 1_001)).rejects.toThrow(RangeError);
    });

    it('a zero opening balance writes no entry; every top-up is an entry of its own', async () => {
      const { stores } = h();
      const accountId = uid('acct');
      expect(await stores.accounts.create({ id: accountId, grants: [], createdAt: 0 }, 0n)).toBe(true);
      expect(await stores.billing.ledger(accountId)).toEqual([]);
      await Promise.all([stores.billing.topUp(accountId, 5n), stores.billing.topUp(accountId, 5n)]);
      const ledger = await stores.billing.ledger(accountId);
      expect(ledger.map((e) => e.cost)).toEqual([-5n, -5n]);
      expect(new Set(ledger.map((e) => e.id)).size).toBe(2);
      expect((await stores.billing.wallet(accountId)).balance).toBe(10n);
    });
  });
}
