import { describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { formatUsd } from '../../src/billing/money.js';
import { monthOf } from '../../src/billing/months.js';
import type { HoldRequest, SettleRequest, Stores } from '../../src/stores/types.js';
import { type StoreHarness, uid } from './harness.js';

/**
 * Changes made behind the store's back, as a broken deploy or a hand-edited database would.
 * `duplicateCharge` is null on a store that cannot keep two charges of one hold id at all.
 */
export interface Tamper {
  setBalance(accountId: string, balance: bigint): Promise<void>;
  duplicateCharge: ((accountId: string, holdId: string) => Promise<void>) | null;
}

export interface AuditHarness extends StoreHarness {
  /** The stores' clock when it is a fake one; the real clock otherwise. */
  now?(): number;
  /** Null when the driver's books cannot be reached behind its back (say why in the caller). */
  tamper: Tamper | null;
}

/**
 * Conformance for the audit reads (`listHolds`, `duplicateCharges`) and the audit run on
 * them: clean books add up, and books changed behind the store's back are named.
 */
export function auditSuite(name: string, make: () => Promise<AuditHarness>): void {
  describe(`${name}: audit`, () => {
    const withHarness = (fn: (h: AuditHarness) => Promise<void>) => async () => {
      const h = await make();
      try {
        await fn(h);
      } finally {
        await h.cleanup();
      }
    };

    /** An account with a mix of everything that moves money: opening balance, top-up, credits, charges, holds. */
    async function busyAccount(stores: Stores, now: number) {
      const accountId = uid('acct');
      const keyId = uid('key');
      const month = monthOf(now);
      await stores.accounts.create({ id: accountId, grants: [], createdAt: now }, 10_000n);
      await stores.billing.topUp(accountId, 5_000n);
      await stores.billing.credit({ accountId, creditId: uid('cr'), amount: 700n, reason: 'goodwill', at: now });
      await stores.billing.credit({ accountId, creditId: uid('adj'), amount: -200n, reason: 'correction', at: now });
      const hold = (amount: bigint): HoldRequest => ({ holdId: uid('hold'), accountId, keyId, amount, monthlyCap: null, month, ttlMs: 60_000 });
      const settle = (holdId: string, cost: bigint): SettleRequest => ({
        holdId,
        accountId,
        month,
        cost,
        entry: { id: holdId, accountId, keyId, model: 'm', units: { kind: 'tokens', prompt: 3, completion: 4 }, measured: 'usage', at: now },
      });
      const charged: string[] = [];
      for (const [amount, cost] of [[500n, 300n], [100n, 250n], [1_000n, 1_000n]] as const) {
        const h = hold(amount);
        expect(await stores.billing.placeHold(h)).toEqual({ ok: true });
        expect((await stores.billing.settle(settle(h.holdId, cost))).settled).toBe(true);
        charged.push(h.holdId);
      }
      // A replayed settle changes nothing; a released hold charges nothing; one stays open.
      expect((await stores.billing.settle(settle(charged[0] as string, 300n))).settled).toBe(false);
      const released = hold(50n);
      await stores.billing.placeHold(released);
      await stores.billing.release(accountId, released.holdId);
      const open = hold(400n);
      await stores.billing.placeHold(open);
      return { accountId, keyId, charged, open };
    }

    it('lists every hold with its key, amount and expiry, page by page', withHarness(async (h) => {
      const now = h.now?.() ?? Date.now();
      const { accountId, keyId, open } = await busyAccount(h.stores, now);
      const more = [uid('hold'), uid('hold')];
      for (const holdId of more) {
        await h.stores.billing.placeHold({ holdId, accountId, keyId, amount: 7n, monthlyCap: null, month: monthOf(now), ttlMs: 60_000 });
      }
      const seen = new Map<string, { amount: bigint; keyId: string; expiresAt: number | null }>();
      let cursor: string | undefined;
      for (let i = 0; i < 10; i++) {
        const page = await h.stores.billing.listHolds(accountId, cursor, 1);
        expect(page.at).toBeGreaterThanOrEqual(now - 5_000);
        for (const x of page.holds) seen.set(x.holdId, x);
        if (page.nextCursor === null) break;
        cursor = page.nextCursor;
      }
      expect([...seen.keys()].sort()).toEqual([open.holdId, ...more].sort());
      const first = seen.get(open.holdId);
      expect(first).toMatchObject({ amount: 400n, keyId });
      expect(first?.expiresAt).toBeGreaterThan(now);
      expect((await h.stores.billing.listHolds(uid('nobody'), undefined, 10)).holds).toEqual([]);
    }));

    it('clean books audit ok: balance, held, key spend, one charge per hold', withHarness(async (h) => {
      const now = h.now?.() ?? Date.now();
      const { accountId } = await busyAccount(h.stores, now);
      expect(await h.stores.billing.duplicateCharges(accountId, 10)).toEqual([]);
      const report = await auditBooks(h.stores, { account: accountId });
      expect(report).toEqual({ ok: true, accounts: 1, entries: (await h.stores.billing.ledger(accountId)).length, differences: [] });
      expect(report.entries).toBe(7);
    }));

    it('names a wallet changed behind the store’s back, with the balance the ledger explains', withHarness(async (h) => {
      if (!h.tamper) return;
      const now = h.now?.() ?? Date.now();
      const { accountId } = await busyAccount(h.stores, now);
      const other = await busyAccount(h.stores, now);
      // 10,000 + 5,000 + 700 - 200 - (300 + 250 + 1,000)
      const books = 13_950n;
      expect((await h.stores.billing.wallet(accountId)).balance).toBe(books);
      await h.tamper.setBalance(accountId, books + 1_000_000_000n);
      const report = await auditBooks(h.stores, { account: accountId });
      expect(report.ok).toBe(false);
      expect(report.differences).toEqual([
        { account: accountId, check: 'balance', expected: formatUsd(books), actual: formatUsd(books + 1_000_000_000n) },
      ]);
      // Another account's books are untouched.
      expect((await auditBooks(h.stores, { account: other.accountId })).ok).toBe(true);
    }));

    it('names a hold id charged twice', withHarness(async (h) => {
      if (!h.tamper?.duplicateCharge) return;
      const now = h.now?.() ?? Date.now();
      const { accountId, charged } = await busyAccount(h.stores, now);
      const twice = charged[1] as string;
      await h.tamper.duplicateCharge(accountId, twice);
      expect(await h.stores.billing.duplicateCharges(accountId, 10)).toEqual([{ holdId: twice, charges: 2 }]);
      const report = await auditBooks(h.stores, { account: accountId });
      expect(report.ok).toBe(false);
      expect(report.differences).toContainEqual({ account: accountId, check: 'duplicate_charge', hold: twice, expected: '1', actual: '2' });
    }));

    it('an account that does not exist is refused, not audited as empty', withHarness(async (h) => {
      await expect(auditBooks(h.stores, { account: uid('nobody') })).rejects.toThrow(/no account/);
    }));
  });
}
