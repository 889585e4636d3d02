import { describe, expect, it } from 'vitest';
import { auditBooks, DEFAULT_MAX_HOLD_TTL_MS } from '../../src/billing/audit.js';
import { formatUsd } from '../../src/billing/money.js';
import { monthOf } from '../../src/billing/months.js';
import { spendPeriods } from '../../src/stores/spend-periods.js';
import type { HoldRequest, LedgerEntry, LedgerUnits, SettleRequest, Stores, UnitPrices } from '../../src/stores/types.js';
import { type StoreHarness, uid } from './harness.js';

/**
 * Changes made behind the store's back, as a broken deploy or a hand-edited database would.
 * Each writes only what it says: the audit must find what the others left consistent.
 * `duplicateCharge` is null on a store that cannot keep two charges of one hold id at all.
 */
export interface Tamper {
  setBalance(accountId: string, balance: bigint): Promise<void>;
  /** A second charge of the hold id, a copy of its entry (nothing else moves). */
  duplicateCharge: ((accountId: string, holdId: string) => Promise<void>) | null;
  /** A copy of the charge `entry` appended under another hold id (nothing else moves). */
  appendCharge(accountId: string, entry: LedgerEntry, holdId: string): Promise<void>;
  /**
   * Moves the books as a charge of `delta` by the key at `at` would: the balance down, the
   * key's spend in monthOf(at) and all time up, and the key's and the account's spend in the
   * day, week and month of `at` up.
   */
  moveBooks(accountId: string, keyId: string, at: number, delta: bigint): Promise<void>;
  /** Rewrites the charge `entryId`'s cost and / or units in place (nothing else moves). */
  rewriteCharge(accountId: string, entryId: string, change: { cost?: bigint; units?: LedgerUnits }): Promise<void>;
  setHoldExpiry(accountId: string, holdId: string, expiresAt: number): Promise<void>;
  /** Every period spend of the account (its keys' and its own) set to zero. */
  zeroPeriodSpend(accountId: string): Promise<void>;
}

export interface AuditHarness extends StoreHarness {
  /** The stores' clock when it is a fake one; the real clock otherwise. */
  now?(): number;
  /** Null when the driver's books cannot be reached behind its back (say why in the caller). */
  tamper: Tamper | null;
}

/** The charges of `busyAccount`: units, the prices they were held at, and (for one) a cost kept without prices. */
const CHARGES: Array<{ hold: bigint; units: LedgerUnits; prices?: UnitPrices; cost: bigint }> = [
  // 3 x 1.5 + 4 x 60 = 244.5 nano-USD: rounded up, as billing rounds, to 245.
  { hold: 500n, units: { kind: 'tokens', prompt: 3, completion: 4 }, prices: { prompt: '0.0000000015', completion: '0.00000006' }, cost: 245n },
  // 6 uncached x 10 + 4 cached x 1 + 2 x 30 = 124: past its hold of 100.
  {
    hold: 100n,
    units: { kind: 'tokens', prompt: 10, completion: 2, cachedPrompt: 4 },
    prices: { prompt: '0.00000001', completion: '0.00000003', cachedPrompt: '0.000000001' },
    cost: 124n,
  },
  { hold: 1_000n, units: { kind: 'images', images: 2, tier: '1024x1024' }, prices: { images: '0.0000005' }, cost: 1_000n },
  // Written before charges kept their prices: its cost is not re-derived.
  { hold: 300n, units: { kind: 'tokens', prompt: 1, completion: 1 }, cost: 299n },
];
/** 10,000 opening + 5,000 top-up + 700 - 200 credits, less the charges. */
const BOOKS = 15_500n - CHARGES.reduce((s, c) => s + c.cost, 0n);
const iso = (ms: number) => new Date(ms).toISOString();

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
    const withTamper = (fn: (h: AuditHarness, t: Tamper) => Promise<void>) =>
      withHarness(async (h) => {
        if (h.tamper) await fn(h, h.tamper);
      });

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
      const settle = (holdId: string, c: (typeof CHARGES)[number]): SettleRequest => ({
        holdId,
        accountId,
        month,
        cost: c.cost,
        entry: { id: holdId, accountId, keyId, model: 'm', units: c.units, measured: 'usage', ...(c.prices ? { prices: c.prices } : {}), at: now },
      });
      const charged: string[] = [];
      for (const c of CHARGES) {
        const h = hold(c.hold);
        expect(await stores.billing.placeHold(h)).toEqual({ ok: true });
        expect((await stores.billing.settle(settle(h.holdId, c))).settled).toBe(true);
        charged.push(h.holdId);
      }
      // A replayed settle changes nothing; a released hold charges nothing; one stays open.
      expect((await stores.billing.settle(settle(charged[0] as string, CHARGES[0]!))).settled).toBe(false);
      const released = hold(50n);
      await stores.billing.placeHold(released);
      await stores.billing.release(accountId, released.holdId);
      const open = hold(400n);
      await stores.billing.placeHold(open);
      return { accountId, keyId, charged, open };
    }

    /** The account's charge `id` as the store keeps it. */
    async function entryOf(stores: Stores, accountId: string, id: string): Promise<LedgerEntry> {
      const e = (await stores.billing.ledger(accountId)).find((x) => x.id === id);
      if (!e) throw new Error(`no entry ${id}`);
      return e;
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

    it('keeps each charge’s prices on its entry', withHarness(async (h) => {
      const { accountId, charged } = await busyAccount(h.stores, h.now?.() ?? Date.now());
      for (const [i, c] of CHARGES.entries()) {
        expect((await entryOf(h.stores, accountId, charged[i] as string)).prices).toEqual(c.prices);
      }
    }));

    it('clean books audit ok: balance, held, spend, one charge per id, costs re-derived (rounded up; none without prices)', withHarness(async (h) => {
      const now = h.now?.() ?? Date.now();
      const { accountId } = await busyAccount(h.stores, now);
      expect(await h.stores.billing.duplicateCharges(accountId, 10)).toEqual([]);
      const report = await auditBooks(h.stores, { account: accountId });
      expect(report).toEqual({ ok: true, accounts: 1, entries: (await h.stores.billing.ledger(accountId)).length, differences: [], unsettled: [] });
      expect(report.entries).toBe(8);
    }));

    it('beside calls that keep landing, finds no difference: a snapshot (PostgreSQL) always reads it still; elsewhere it may be unsettled, its sums not judged', withHarness(async (h) => {
      const accountId = uid('acct');
      await h.stores.accounts.create({ id: accountId, grants: [], createdAt: h.now?.() ?? Date.now() }, 1_000_000_000n);
      let stop = false;
      let n = 0;
      // Four callers, one call after another each: a hold, a moment, its settle.
      const callers = Array.from({ length: 4 }, async (_, c) => {
        while (!stop) {
          const holdId = uid(`req_${c}_${n++}`);
          const at = h.now?.() ?? Date.now();
          await h.stores.billing.placeHold({ holdId, accountId, keyId: 'key_busy', amount: 100n, monthlyCap: null, month: monthOf(at), ttlMs: 60_000 });
          await new Promise((r) => setTimeout(r, 1));
          await h.stores.billing.settle({ holdId, accountId, month: monthOf(at), cost: 90n, entry: { id: holdId, accountId, keyId: 'key_busy', model: 'm', units: { kind: 'tokens', prompt: 1, completion: 1 }, measured: 'usage', at } });
        }
      });
      try {
        await new Promise((r) => setTimeout(r, 100));
        for (let i = 0; i < 3; i++) {
          const report = await auditBooks(h.stores, { account: accountId, attempts: 2 });
          expect(report.differences).toEqual([]);
          expect(report.ok).toBe(true);
          // Only a store that reads in one snapshot (PostgreSQL) always judges it; on the others a
          // reading may see calls land between its reads (its ledger pages, Redis's round trips).
          if (name === 'postgres') expect(report.unsettled).toEqual([]);
          else expect([[], [accountId]]).toContainEqual(report.unsettled);
        }
      } finally {
        stop = true;
        await Promise.all(callers);
      }
      expect(n).toBeGreaterThan(8);
      expect(await auditBooks(h.stores, { account: accountId })).toMatchObject({ ok: true, differences: [], unsettled: [] });
    }));

    it('names a wallet changed behind the store’s back, with the balance the ledger explains', withTamper(async (h, tamper) => {
      const now = h.now?.() ?? Date.now();
      const { accountId } = await busyAccount(h.stores, now);
      const other = await busyAccount(h.stores, now);
      expect((await h.stores.billing.wallet(accountId)).balance).toBe(BOOKS);
      await tamper.setBalance(accountId, BOOKS + 1_000_000_000n);
      const report = await auditBooks(h.stores, { account: accountId });
      expect(report.ok).toBe(false);
      expect(report.differences).toEqual([
        { account: accountId, check: 'balance', expected: formatUsd(BOOKS), actual: formatUsd(BOOKS + 1_000_000_000n) },
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
      // The copy names the same request too.
      expect(await h.stores.billing.duplicateCharges(accountId, 10)).toEqual([
        { of: 'hold', id: twice, charges: 2 },
        { of: 'request', id: twice, charges: 2 },
      ]);
      const report = await auditBooks(h.stores, { account: accountId });
      expect(report.ok).toBe(false);
      expect(report.differences).toContainEqual({ account: accountId, check: 'duplicate_charge', hold: twice, expected: '1', actual: '2' });
    }));

    it('names a request charged again under a new hold id, the wallet and spend moved to match', withTamper(async (h, tamper) => {
      const { accountId, keyId, charged } = await busyAccount(h.stores, h.now?.() ?? Date.now());
      const again = await entryOf(h.stores, accountId, charged[0] as string);
      await tamper.appendCharge(accountId, again, uid('hold'));
      await tamper.moveBooks(accountId, keyId, again.at, again.cost);
      expect(await h.stores.billing.duplicateCharges(accountId, 10)).toEqual([{ of: 'request', id: again.id, charges: 2 }]);
      // Balance, key spend and period spend all agree with the ledger: only the repeat is wrong.
      expect((await auditBooks(h.stores, { account: accountId })).differences).toEqual([
        { account: accountId, check: 'duplicate_request', entry: again.id, expected: '1', actual: '2' },
      ]);
    }));

    it('names an open hold that expires later than the longest TTL allows', withTamper(async (h, tamper) => {
      const now = h.now?.() ?? Date.now();
      const { accountId, open } = await busyAccount(h.stores, now);
      const century = now + 100 * 365 * 86_400_000;
      await tamper.setHoldExpiry(accountId, open.holdId, century);
      const report = await auditBooks(h.stores, { account: accountId });
      expect(report.differences).toHaveLength(1);
      expect(report.differences[0]).toMatchObject({ account: accountId, check: 'hold_expiry', hold: open.holdId, actual: iso(century) });
      // The latest expiry allowed: the store's clock (about now) plus the longest TTL.
      const allowed = Date.parse(report.differences[0]?.expected ?? '');
      expect(Math.abs(allowed - (now + DEFAULT_MAX_HOLD_TTL_MS))).toBeLessThan(60_000);
      // Within the TTL it is sound: the same hold an hour away, with an hour’s TTL allowed.
      await tamper.setHoldExpiry(accountId, open.holdId, now + 3_600_000);
      expect((await auditBooks(h.stores, { account: accountId, maxHoldTtlMs: 3_600_000 })).ok).toBe(true);
    }));

    it('names each period spend that is not the charges of its period (budgets silently reset)', withTamper(async (h, tamper) => {
      const now = h.now?.() ?? Date.now();
      const { accountId, keyId } = await busyAccount(h.stores, now);
      await tamper.zeroPeriodSpend(accountId);
      const spent = formatUsd(CHARGES.reduce((s, c) => s + c.cost, 0n));
      const report = await auditBooks(h.stores, { account: accountId });
      const expected = spendPeriods(now).flatMap((period) => [
        { account: accountId, check: 'period_spend', period, expected: spent, actual: '0' },
        { account: accountId, check: 'period_spend', key: keyId, period, expected: spent, actual: '0' },
      ]);
      expect(report.differences).toHaveLength(6);
      expect(report.differences).toEqual(expect.arrayContaining(expected));
    }));

    it('names a charge whose cost was edited, the wallet and spend moved to match', withTamper(async (h, tamper) => {
      const { accountId, keyId, charged } = await busyAccount(h.stores, h.now?.() ?? Date.now());
      const e = await entryOf(h.stores, accountId, charged[2] as string);
      await tamper.rewriteCharge(accountId, e.id, { cost: e.cost + 7_000n });
      await tamper.moveBooks(accountId, keyId, e.at, 7_000n);
      expect((await auditBooks(h.stores, { account: accountId })).differences).toEqual([
        { account: accountId, check: 'cost', entry: e.id, expected: formatUsd(e.cost), actual: formatUsd(e.cost + 7_000n) },
      ]);
    }));

    it('names a charge whose units were inflated', withTamper(async (h, tamper) => {
      const { accountId, charged } = await busyAccount(h.stores, h.now?.() ?? Date.now());
      const e = await entryOf(h.stores, accountId, charged[0] as string);
      // 3 x 1.5 + 40 x 60 = 2,404.5: 2,405 nano-USD for what was billed 245.
      await tamper.rewriteCharge(accountId, e.id, { units: { kind: 'tokens', prompt: 3, completion: 40 } });
      expect((await auditBooks(h.stores, { account: accountId })).differences).toEqual([
        { account: accountId, check: 'cost', entry: e.id, expected: formatUsd(2_405n), actual: formatUsd(e.cost) },
      ]);
      // A part the charge kept no price for is named too.
      await tamper.rewriteCharge(accountId, e.id, { units: { kind: 'tokens', prompt: 3, completion: 4, cacheWrite: 2 } });
      expect((await auditBooks(h.stores, { account: accountId })).differences).toEqual([
        { account: accountId, check: 'cost', entry: e.id, expected: 'a price for every unit', actual: 'no price kept for cacheWrite' },
      ]);
    }));

    it('an account that does not exist is refused, not audited as empty', withHarness(async (h) => {
      await expect(auditBooks(h.stores, { account: uid('nobody') })).rejects.toThrow(/no account/);
    }));
  });
}
