import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { HoldRequest, SettleRequest, Stores, WindowHit } from '../../src/stores/types.js';
import { type MakeStores, uid, useHarness } from './harness.js';

const MONTH = '2025-01';
const LONG_TTL = 60_000;

/** BillingStore: hold-if-affordable, idempotent settle and release, expiry, the ledger. */
export function billingSuite(name: string, make: MakeStores): void {
  describe(`${name}: BillingStore`, () => {
    const h = useHarness(make);
    const billing = () => h().stores.billing;
    /** The account's ledger without its credits (opening balance, top-ups): its charges. */
    const charges = async (accountId: string) => (await billing().ledger(accountId)).filter((e) => e.units.kind !== 'credit');

    /** A fresh account whose wallet holds `balance`, and a fresh key id. */
    async function account(stores: Stores, balance: bigint) {
      const accountId = uid('acct');
      expect(await stores.accounts.create({ id: accountId, grants: [], createdAt: 0 }, balance)).toBe(true);
      return { accountId, keyId: uid('key') };
    }

    function hold(
      a: { accountId: string; keyId: string },
      amount: bigint,
      extra: Partial<HoldRequest> = {},
    ): HoldRequest {
      return { holdId: uid('hold'), ...a, amount, monthlyCap: null, month: MONTH, ttlMs: LONG_TTL, ...extra };
    }

    function settleReq(a: { accountId: string; keyId: string }, holdId: string, cost: bigint): SettleRequest {
      return {
        holdId,
        accountId: a.accountId,
        month: MONTH,
        cost,
        entry: {
          id: holdId,
          accountId: a.accountId,
          keyId: a.keyId,
          model: 'm-1',
          units: { kind: 'tokens', prompt: 10, completion: 20 },
          measured: 'usage',
          at: 1_700_000_000_000,
        },
      };
    }

    it('holds exactly what the wallet can afford and refuses one nano more', async () => {
      const a = await account(h().stores, 1_000n);
      expect(await billing().placeHold(hold(a, 400n))).toEqual({ ok: true });
      expect(await billing().placeHold(hold(a, 601n))).toEqual({ ok: false, limitSource: 'wallet', available: 600n });
      expect(await billing().placeHold(hold(a, 600n))).toEqual({ ok: true });
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 1_000n, held: 1_000n });
      expect(await billing().placeHold(hold(a, 1n))).toEqual({ ok: false, limitSource: 'wallet', available: 0n });
      expect(await billing().openHolds(a.accountId)).toBe(2);
    });

    it('a zero hold fits an empty wallet; an unknown wallet is empty', async () => {
      const a = await account(h().stores, 0n);
      expect(await billing().placeHold(hold(a, 0n))).toEqual({ ok: true });
      expect(await billing().placeHold(hold(a, 1n))).toEqual({ ok: false, limitSource: 'wallet', available: 0n });
      expect(await billing().wallet(uid('nobody'))).toEqual({ balance: 0n, held: 0n });
    });

    it('checks the monthly cap against spend plus the key’s open holds', async () => {
      const a = await account(h().stores, 1_000_000n);
      const cap = { monthlyCap: 500n };
      const spent = hold(a, 300n, cap);
      expect(await billing().placeHold(spent)).toEqual({ ok: true });
      expect((await billing().settle(settleReq(a, spent.holdId, 300n))).charged).toBe(300n);

      expect(await billing().placeHold(hold(a, 201n, cap))).toEqual({
        ok: false,
        limitSource: 'key_monthly_cap',
        available: 200n,
      });
      const open = hold(a, 150n, cap);
      expect(await billing().placeHold(open)).toEqual({ ok: true });
      expect(await billing().placeHold(hold(a, 51n, cap))).toEqual({
        ok: false,
        limitSource: 'key_monthly_cap',
        available: 50n,
      });
      expect(await billing().placeHold(hold(a, 50n, cap))).toEqual({ ok: true });
      expect(await billing().placeHold(hold(a, 1n, cap))).toEqual({
        ok: false,
        limitSource: 'key_monthly_cap',
        available: 0n,
      });
      expect(await billing().keyUsage(a.accountId, a.keyId, MONTH)).toEqual({ total: 300n, monthly: 300n, held: 200n });
    });

    it('a lowered cap below what is used reports zero available, never negative', async () => {
      const a = await account(h().stores, 1_000n);
      expect(await billing().placeHold(hold(a, 300n, { monthlyCap: 500n }))).toEqual({ ok: true });
      expect(await billing().placeHold(hold(a, 1n, { monthlyCap: 100n }))).toEqual({
        ok: false,
        limitSource: 'key_monthly_cap',
        available: 0n,
      });
    });

    it('the cap counts only the key’s own holds; other keys share just the wallet', async () => {
      const a = await account(h().stores, 1_000n);
      const b = { accountId: a.accountId, keyId: uid('key') };
      expect(await billing().placeHold(hold(a, 400n, { monthlyCap: 500n }))).toEqual({ ok: true });
      expect(await billing().placeHold(hold(b, 500n, { monthlyCap: 500n }))).toEqual({ ok: true });
      expect(await billing().placeHold(hold(b, 101n))).toEqual({ ok: false, limitSource: 'wallet', available: 100n });
    });

    it('reports the wallet first when both limits refuse, else the cap', async () => {
      const a = await account(h().stores, 100n);
      const cap = { monthlyCap: 50n };
      expect(await billing().placeHold(hold(a, 120n, cap))).toEqual({ ok: false, limitSource: 'wallet', available: 100n });
      expect(await billing().placeHold(hold(a, 80n, cap))).toEqual({
        ok: false,
        limitSource: 'key_monthly_cap',
        available: 50n,
      });
      expect(await billing().openHolds(a.accountId)).toBe(0);
    });

    it('a new month starts with no cap usage', async () => {
      const a = await account(h().stores, 10_000n);
      const cap = { monthlyCap: 500n };
      const jan = hold(a, 500n, cap);
      expect(await billing().placeHold(jan)).toEqual({ ok: true });
      await billing().settle(settleReq(a, jan.holdId, 500n));
      expect(await billing().placeHold(hold(a, 1n, cap))).toMatchObject({ ok: false, limitSource: 'key_monthly_cap' });
      const feb = hold(a, 500n, { ...cap, month: '2025-02' });
      expect(await billing().placeHold(feb)).toEqual({ ok: true });
      await billing().settle({ ...settleReq(a, feb.holdId, 200n), month: '2025-02' });
      expect(await billing().keyUsage(a.accountId, a.keyId, MONTH)).toEqual({ total: 700n, monthly: 500n, held: 0n });
      expect(await billing().keyUsage(a.accountId, a.keyId, '2025-02')).toEqual({ total: 700n, monthly: 200n, held: 0n });
      expect(await billing().keyUsage(a.accountId, a.keyId, '2025-03')).toEqual({ total: 700n, monthly: 0n, held: 0n });
    });

    it('a charge counts in the month it is settled in, not the month its hold was placed in', async () => {
      // A call held at 23:59 on the 31st and answered after midnight is February's spend: the
      // ledger entry is dated then, and February's cap and budgets must see it.
      const a = await account(h().stores, 10_000n);
      const cap = { monthlyCap: 1_000n };
      const jan = hold(a, 400n, cap);
      expect(await billing().placeHold(jan)).toEqual({ ok: true });
      await billing().settle({ ...settleReq(a, jan.holdId, 400n), month: '2025-02' });
      expect(await billing().keyUsage(a.accountId, a.keyId, MONTH)).toEqual({ total: 400n, monthly: 0n, held: 0n });
      expect(await billing().keyUsage(a.accountId, a.keyId, '2025-02')).toEqual({ total: 400n, monthly: 400n, held: 0n });
      // February's cap has 600 left, not 1,000.
      expect(await billing().placeHold(hold(a, 601n, { ...cap, month: '2025-02' }))).toMatchObject({ ok: false, limitSource: 'key_monthly_cap' });
      expect(await billing().placeHold(hold(a, 600n, { ...cap, month: '2025-02' }))).toEqual({ ok: true });
    });

    it('a settle journaled without a month (an earlier version) counts in its entry\'s month', async () => {
      const a = await account(h().stores, 10_000n);
      const held = hold(a, 300n);
      expect(await billing().placeHold(held)).toEqual({ ok: true });
      const { month: _month, ...old } = settleReq(a, held.holdId, 300n);
      await billing().settle({ ...old, entry: { ...old.entry, at: Date.UTC(2025, 2, 15) } } as SettleRequest);
      expect((await billing().keyUsage(a.accountId, a.keyId, '2025-03')).monthly).toBe(300n);
    });

    it('settle charges the cost, frees the hold, and is idempotent', async () => {
      const a = await account(h().stores, 1_000n);
      const req = hold(a, 800n);
      await billing().placeHold(req);
      expect(await billing().settle(settleReq(a, req.holdId, 600n))).toEqual({ settled: true, charged: 600n, held: 800n });
      const after = {
        wallet: await billing().wallet(a.accountId),
        usage: await billing().keyUsage(a.accountId, a.keyId, MONTH),
        ledger: await charges(a.accountId),
      };
      expect(after.wallet).toEqual({ balance: 400n, held: 0n });
      expect(after.usage).toEqual({ total: 600n, monthly: 600n, held: 0n });
      expect(await billing().openHolds(a.accountId)).toBe(0);

      expect(await billing().settle(settleReq(a, req.holdId, 600n))).toEqual({ settled: false, charged: 0n });
      expect(await billing().release(a.accountId, req.holdId)).toBe(false);
      expect(await billing().wallet(a.accountId)).toEqual(after.wallet);
      expect(await billing().keyUsage(a.accountId, a.keyId, MONTH)).toEqual(after.usage);
      expect(await charges(a.accountId)).toEqual(after.ledger);
    });

    it('settle after release changes nothing; release is idempotent', async () => {
      const a = await account(h().stores, 1_000n);
      const req = hold(a, 500n);
      await billing().placeHold(req);
      expect(await billing().release(a.accountId, req.holdId)).toBe(true);
      expect(await billing().release(a.accountId, req.holdId)).toBe(false);
      expect(await billing().settle(settleReq(a, req.holdId, 100n))).toEqual({ settled: false, charged: 0n });
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 1_000n, held: 0n });
      expect(await charges(a.accountId)).toEqual([]);
      expect(await billing().release(a.accountId, uid('never-held'))).toBe(false);
    });

    it('a hold belongs to its account: another account cannot release it or settle it', async () => {
      const a = await account(h().stores, 1_000n);
      const other = await account(h().stores, 1_000n);
      const req = hold(a, 500n);
      await billing().placeHold(req);
      expect(await billing().release(other.accountId, req.holdId)).toBe(false);
      // A settle under the other account charges that account (its own call), never A's hold.
      await billing().settle(settleReq(other, req.holdId, 100n));
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 1_000n, held: 500n });
      expect(await billing().openHolds(a.accountId)).toBe(1);
      expect(await charges(a.accountId)).toEqual([]);
    });

    it('settle debits the full cost past the hold, marks the entry, and the wallet may go below zero', async () => {
      const a = await account(h().stores, 1_000n);
      const req = hold(a, 500n, { monthlyCap: 600n });
      await billing().placeHold(req);
      expect(await billing().settle(settleReq(a, req.holdId, 1_300n))).toEqual({ settled: true, charged: 1_300n, held: 500n });
      expect(await billing().wallet(a.accountId)).toEqual({ balance: -300n, held: 0n });
      expect(await billing().keyUsage(a.accountId, a.keyId, MONTH)).toEqual({ total: 1_300n, monthly: 1_300n, held: 0n });
      const [entry] = await charges(a.accountId);
      expect(entry).toMatchObject({ cost: 1_300n, held: 500n, exceededHold: true, measured: 'usage' });
      // Below zero, every hold is refused (even one of zero) until a top-up covers the debt.
      expect(await billing().placeHold(hold(a, 0n))).toEqual({ ok: false, limitSource: 'wallet', available: 0n });
      expect(await billing().placeHold(hold(a, 1n, { keyId: uid('key') }))).toMatchObject({ ok: false, limitSource: 'wallet' });
      await billing().topUp(a.accountId, 301n);
      expect(await billing().placeHold(hold(a, 1n, { keyId: uid('key') }))).toEqual({ ok: true });
      // The capped key's month is past its cap: refused by the cap now that the wallet has room.
      await billing().topUp(a.accountId, 10_000n);
      expect(await billing().placeHold(hold(a, 1n, { monthlyCap: 600n }))).toEqual({
        ok: false,
        limitSource: 'key_monthly_cap',
        available: 0n,
      });
    });

    it('a settle within the hold is not marked exceeded', async () => {
      const a = await account(h().stores, 1_000n);
      const req = hold(a, 500n);
      await billing().placeHold(req);
      await billing().settle(settleReq(a, req.holdId, 500n));
      expect((await charges(a.accountId))[0]).toMatchObject({ cost: 500n, held: 500n, exceededHold: false });
    });

    it('placing an open hold id again holds once', async () => {
      const a = await account(h().stores, 1_000n);
      const req = hold(a, 600n);
      expect(await billing().placeHold(req)).toEqual({ ok: true });
      expect(await billing().placeHold(req)).toEqual({ ok: true });
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 1_000n, held: 600n });
      expect(await billing().openHolds(a.accountId)).toBe(1);
    });

    it('an expired hold stops counting, and a late settle still bills the delivered output once', async () => {
      const a = await account(h().stores, 1_000n);
      const req = hold(a, 1_000n, { ttlMs: 300, monthlyCap: 1_000n });
      expect(await billing().placeHold(req)).toEqual({ ok: true });
      await h().advance(100);
      expect(await billing().openHolds(a.accountId)).toBe(1);
      expect(await billing().placeHold(hold(a, 1n))).toMatchObject({ ok: false, limitSource: 'wallet' });

      await h().advance(300);
      expect(await billing().openHolds(a.accountId)).toBe(0);
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 1_000n, held: 0n });
      expect((await billing().keyUsage(a.accountId, a.keyId, MONTH)).held).toBe(0n);
      expect(await billing().settle(settleReq(a, req.holdId, 10n))).toEqual({ settled: true, charged: 10n, held: 0n });
      expect(await billing().settle(settleReq(a, req.holdId, 10n))).toEqual({ settled: false, charged: 0n });
      expect(await billing().release(a.accountId, req.holdId)).toBe(false);
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 990n, held: 0n });
      expect(await billing().keyUsage(a.accountId, a.keyId, MONTH)).toEqual({ total: 10n, monthly: 10n, held: 0n });
      expect((await charges(a.accountId))[0]).toMatchObject({ cost: 10n, held: 0n, exceededHold: true });
      expect(await billing().placeHold(hold(a, 990n, { monthlyCap: 1_000n }))).toEqual({ ok: true });
    });

    it('renewing keeps a hold past its first TTL; a gone hold cannot be renewed', async () => {
      const a = await account(h().stores, 1_000n);
      const req = hold(a, 700n, { ttlMs: 300 });
      await billing().placeHold(req);
      await h().advance(200);
      expect(await billing().renewHold(a.accountId, req.holdId, 300)).toBe(true);
      await h().advance(200);
      expect(await billing().openHolds(a.accountId)).toBe(1);
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 1_000n, held: 700n });
      await h().advance(200);
      expect(await billing().openHolds(a.accountId)).toBe(0);
      expect(await billing().renewHold(a.accountId, req.holdId, 300)).toBe(false);
      expect(await billing().renewHold(a.accountId, uid('never'), 300)).toBe(false);
    });

    it('keeps a ledger per account, oldest first, with every field', async () => {
      const a = await account(h().stores, 10_000n);
      const first = hold(a, 1_000n);
      const second = hold(a, 1_000n);
      await billing().placeHold(first);
      await billing().placeHold(second);
      const s1 = settleReq(a, first.holdId, 250n);
      const s2: SettleRequest = {
        ...settleReq(a, second.holdId, 125n),
        entry: { ...settleReq(a, second.holdId, 0n).entry, units: { kind: 'images', images: 2, tier: '1080P' }, at: 5 },
      };
      await billing().settle(s1);
      await billing().settle(s2);
      const ledger = await charges(a.accountId);
      expect(ledger).toEqual([
        { ...s1.entry, cost: 250n, held: 1_000n, exceededHold: false },
        { ...s2.entry, cost: 125n, held: 1_000n, exceededHold: false },
      ]);
      expect(await billing().ledger(uid('acct'))).toEqual([]);

      // Returned entries are copies.
      (ledger[0] as { cost: bigint }).cost = 0n;
      expect((await charges(a.accountId))[0]?.cost).toBe(250n);
    });

    it('keeps the parts of token units (cache reads and writes, reasoning, tool calls) as settled', async () => {
      const a = await account(h().stores, 10_000n);
      const held = hold(a, 1_000n);
      await billing().placeHold(held);
      const units = { kind: 'tokens' as const, prompt: 2001, completion: 777, cachedPrompt: 1501, cacheWrite: 300, reasoning: 500, tools: { web_search: 2 } };
      const s = { ...settleReq(a, held.holdId, 400n), entry: { ...settleReq(a, held.holdId, 0n).entry, units } };
      await billing().settle(s);
      expect((await charges(a.accountId))[0]?.units).toEqual(units);
    });

    it('pages the ledger by cursor, filtered by key and time, visiting every entry once', async () => {
      const a = await account(h().stores, 1_000_000n);
      const other = { accountId: a.accountId, keyId: uid('key') };
      const settled: { keyId: string; at: number; cost: bigint }[] = [];
      for (let i = 0; i < 7; i++) {
        const who = i % 3 === 2 ? other : a;
        const req = hold(who, 100n);
        await billing().placeHold(req);
        const s = settleReq(who, req.holdId, BigInt(i + 1));
        await billing().settle({ ...s, entry: { ...s.entry, at: 1_000 * (i + 1) } });
        settled.push({ keyId: who.keyId, at: 1_000 * (i + 1), cost: BigInt(i + 1) });
      }
      // Another account's entries never show.
      const b = await account(h().stores, 1_000n);
      const bHold = hold(b, 10n);
      await billing().placeHold(bHold);
      await billing().settle(settleReq(b, bHold.holdId, 10n));

      async function all(q: Omit<Parameters<ReturnType<typeof billing>['queryLedger']>[0], 'cursor'>) {
        const pages: bigint[][] = [];
        let cursor: string | undefined;
        for (let n = 0; n < 20; n++) {
          const page = await billing().queryLedger({ ...q, ...(cursor === undefined ? {} : { cursor }) });
          expect(page.entries.length).toBeLessThanOrEqual(q.limit);
          pages.push(page.entries.map((e) => e.cost));
          if (!page.more) return pages;
          cursor = page.nextCursor;
        }
        throw new Error('the ledger never ended');
      }

      // The opening balance is the account's first entry (a credit, key "", at its creation).
      const every = (await all({ accountId: a.accountId, limit: 3 })).flat();
      expect(every).toEqual([-1_000_000n, 1n, 2n, 3n, 4n, 5n, 6n, 7n]);
      expect(await all({ accountId: a.accountId, limit: 1_000 })).toEqual([[-1_000_000n, 1n, 2n, 3n, 4n, 5n, 6n, 7n]]);
      expect((await all({ accountId: a.accountId, keyId: other.keyId, limit: 1 })).flat()).toEqual([3n, 6n]);
      expect((await all({ accountId: a.accountId, from: 2_000, to: 5_000, limit: 2 })).flat()).toEqual([2n, 3n, 4n]);
      expect((await all({ accountId: a.accountId, keyId: a.keyId, from: 4_500, limit: 10 })).flat()).toEqual([5n, 7n]);
      expect(await all({ accountId: uid('acct'), limit: 10 })).toEqual([[]]);

      // Entries appended after a page was read are on the next page.
      const first = await billing().queryLedger({ accountId: a.accountId, limit: 8 });
      const late = hold(a, 100n);
      await billing().placeHold(late);
      await billing().settle(settleReq(a, late.holdId, 8n));
      expect(first.more).toBe(false);
      const rest = await billing().queryLedger({ accountId: a.accountId, limit: 7, cursor: first.nextCursor });
      expect(rest.entries.map((e) => e.cost)).toEqual([8n]);
      expect(rest.more).toBe(false);
      expect(await billing().queryLedger({ accountId: a.accountId, limit: 7, cursor: rest.nextCursor })).toEqual({
        entries: [],
        nextCursor: rest.nextCursor,
        more: false,
      });
      expect(rest.entries[0]).toMatchObject({ id: late.holdId, keyId: a.keyId, held: 100n, exceededHold: false });

      for (const bad of [
        { accountId: a.accountId, limit: 0 },
        { accountId: a.accountId, limit: 1_001 },
        { accountId: a.accountId, limit: 1.5 },
        { accountId: a.accountId, limit: 10, cursor: 'abc' },
        { accountId: a.accountId, limit: 10, cursor: '-1' },
        { accountId: a.accountId, limit: 10, from: Number.NaN },
      ]) {
        await expect(billing().queryLedger(bad), JSON.stringify(bad)).rejects.toBeInstanceOf(RangeError);
      }
    });

    it('topUp adds to the balance and returns it', async () => {
      const a = await account(h().stores, 100n);
      expect(await billing().topUp(a.accountId, 50n)).toBe(150n);
      expect(await billing().placeHold(hold(a, 150n))).toEqual({ ok: true });
      expect(await billing().topUp(a.accountId, 1n)).toBe(151n);
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 151n, held: 150n });
    });

    it('credits and adjustments change the balance once per credit id, as ledger entries', async () => {
      const stores = h().stores;
      const a = await account(stores, 100n);
      const up = await billing().credit({ accountId: a.accountId, creditId: 'c1', amount: 50n, reason: 'invoice 7', at: 1_000 });
      expect(up).toEqual({ applied: true, balance: 150n });
      // Whether a credit id was applied reads per account: the same id elsewhere is not it.
      const other = await account(stores, 0n);
      expect(await billing().creditApplied!(a.accountId, 'c1')).toBe(true);
      expect(await billing().creditApplied!(a.accountId, 'c9')).toBe(false);
      expect(await billing().creditApplied!(other.accountId, 'c1')).toBe(false);
      expect(await billing().credit({ accountId: a.accountId, creditId: 'c1', amount: 50n, reason: 'again', at: 1_001 })).toEqual({
        applied: false,
        balance: 150n,
      });
      const down = await billing().credit({ accountId: a.accountId, creditId: 'c2', amount: -200n, reason: 'refund "x", y', adjustment: true, at: 2_000 });
      expect(down).toEqual({ applied: true, balance: -50n });
      const [opening, ...ledger] = await billing().ledger(a.accountId);
      expect(opening).toMatchObject({ id: 'opening-balance', cost: -100n, units: { kind: 'credit', reason: 'opening balance' } });
      expect(ledger).toHaveLength(2);
      expect(ledger[0]).toMatchObject({
        id: 'c1',
        accountId: a.accountId,
        keyId: '',
        model: '',
        cost: -50n,
        held: 0n,
        exceededHold: false,
        measured: null,
        at: 1_000,
      });
      // A credit's units are its reason; an adjustment's say so too (and only then).
      expect(ledger[0]!.units).toEqual({ kind: 'credit', reason: 'invoice 7' });
      expect(ledger[1]).toMatchObject({ id: 'c2', cost: 200n });
      expect(ledger[1]!.units).toEqual({ kind: 'credit', reason: 'refund "x", y', adjustment: true });
      // No key's spend moved; the wallet below zero refuses holds.
      expect((await billing().keyUsage(a.accountId, a.keyId, MONTH)).total).toBe(0n);
      expect((await billing().placeHold(hold(a, 1n))).ok).toBe(false);
      const page = await billing().queryLedger({ accountId: a.accountId, limit: 2 });
      expect(page.entries.map((e) => e.id)).toEqual(['opening-balance', 'c1']);
      expect(page.more).toBe(true);
    });

    it('keeps a reason with a lone surrogate (valid JSON, not Unicode) as U+FFFD or as given', async () => {
      // PostgreSQL's jsonb refuses "\ud800": the credit failed as if the store were down.
      const a = await account(h().stores, 0n);
      const reason = 'lone \ud800 surrogate';
      expect(await billing().credit({ accountId: a.accountId, creditId: 'c1', amount: 5n, reason, at: 1_000 })).toEqual({ applied: true, balance: 5n });
      const [entry] = await billing().ledger(a.accountId);
      expect([reason, 'lone \ufffd surrogate']).toContain((entry!.units as { reason: string }).reason);
    });

    it('200 concurrent holds against a wallet worth exactly 10 place exactly 10', async () => {
      const a = await account(h().stores, 10n * 7_000n);
      const results = await Promise.all(Array.from({ length: 200 }, () => billing().placeHold(hold(a, 7_000n))));
      expect(results.filter((r) => r.ok)).toHaveLength(10);
      for (const r of results) if (!r.ok) expect(r).toEqual({ ok: false, limitSource: 'wallet', available: 0n });
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 70_000n, held: 70_000n });
      expect(await billing().openHolds(a.accountId)).toBe(10);
    });

    it('concurrent settles of one hold charge once', async () => {
      const a = await account(h().stores, 1_000n);
      const req = hold(a, 500n);
      await billing().placeHold(req);
      const results = await Promise.all(Array.from({ length: 20 }, () => billing().settle(settleReq(a, req.holdId, 300n))));
      expect(results.filter((r) => r.settled)).toEqual([{ settled: true, charged: 300n, held: 500n }]);
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 700n, held: 0n });
      expect(await charges(a.accountId)).toHaveLength(1);
    });

    it('random hold/settle/release/topUp sequences balance exactly and overdraw only by settled excess', async () => {
      const CAP = 400n;
      const op = fc.oneof(
        fc.record({ t: fc.constant('hold' as const), key: fc.nat(1), amount: fc.bigInt(0n, 300n) }),
        fc.record({ t: fc.constant('settle' as const), pick: fc.nat(), cost: fc.bigInt(0n, 400n) }),
        fc.record({ t: fc.constant('release' as const), pick: fc.nat() }),
        fc.record({ t: fc.constant('topUp' as const), amount: fc.bigInt(0n, 200n) }),
      );
      await fc.assert(
        fc.asyncProperty(fc.bigInt(0n, 500n), fc.array(op, { maxLength: 30 }), async (initial, ops) => {
          const stores = h().stores;
          const a = await account(stores, initial);
          const keys = [a.keyId, uid('key')] as const;
          const placed: { holdId: string; amount: bigint; keyId: string }[] = [];
          let toppedUp = 0n;
          /** What settles debited beyond their holds: the only way below zero or past the cap. */
          let excess = 0n;

          for (const o of ops) {
            if (o.t === 'hold') {
              const keyId = keys[o.key] ?? a.keyId;
              // Key 0 has a monthly cap; key 1 has none.
              const req = hold({ accountId: a.accountId, keyId }, o.amount, { monthlyCap: o.key === 0 ? CAP : null });
              if ((await stores.billing.placeHold(req)).ok) placed.push({ holdId: req.holdId, amount: o.amount, keyId });
            } else if (o.t === 'settle' && placed.length > 0) {
              const p = placed[o.pick % placed.length]!;
              // The settle is the holding key's (as the lifecycle always sends it).
              const r = await stores.billing.settle(settleReq({ accountId: a.accountId, keyId: p.keyId }, p.holdId, o.cost));
              expect(r.charged === (r.settled ? o.cost : 0n)).toBe(true);
              if (r.settled) excess += o.cost > p.amount ? o.cost - p.amount : 0n;
            } else if (o.t === 'release' && placed.length > 0) {
              await stores.billing.release(a.accountId, placed[o.pick % placed.length]!.holdId);
            } else if (o.t === 'topUp') {
              await stores.billing.topUp(a.accountId, o.amount);
              toppedUp += o.amount;
            }
            const w = await stores.billing.wallet(a.accountId);
            expect(w.balance - w.held >= -excess).toBe(true);
            const capped = await stores.billing.keyUsage(a.accountId, a.keyId, MONTH);
            expect(capped.monthly + capped.held <= CAP + excess).toBe(true);
          }

          // Every wallet change is an entry: the balance is minus the ledger's sum, and the
          // charges alone are what the calls took from the opening balance and top-ups.
          const ledger = await stores.billing.ledger(a.accountId);
          const sum = ledger.reduce((total, e) => total + e.cost, 0n);
          const charged = ledger.filter((e) => e.units.kind !== 'credit').reduce((total, e) => total + e.cost, 0n);
          const balance = (await stores.billing.wallet(a.accountId)).balance;
          expect(balance).toBe(-sum);
          expect(balance).toBe(initial + toppedUp - charged);
          for (const e of ledger) expect(e.exceededHold).toBe(e.cost > e.held);
        }),
        { numRuns: 60 },
      );
    });
  });

  describe(`${name}: BillingStore.hitAndPlaceHold (a key's window hit and its hold in one step)`, () => {
    const h = useHarness(make);
    const stores = () => h().stores;
    const billing = () => stores().billing;
    /** Every driver keeps its windows beside its books, so every one folds. */
    const fold = () => {
      const f = stores().billing.hitAndPlaceHold;
      if (!f) throw new Error(`${name} has no hitAndPlaceHold`);
      return f.bind(stores().billing);
    };

    async function account(balance: bigint) {
      const accountId = uid('acct');
      expect(await stores().accounts.create({ id: accountId, grants: [], createdAt: 0 }, balance)).toBe(true);
      return { accountId, keyId: uid('key') };
    }
    const hold = (a: { accountId: string; keyId: string }, amount: bigint): HoldRequest => ({
      holdId: uid('hold'),
      ...a,
      amount,
      monthlyCap: null,
      month: MONTH,
      ttlMs: LONG_TTL,
    });
    const settleOf = (a: { accountId: string; keyId: string }, holdId: string, cost: bigint): SettleRequest => ({
      holdId,
      accountId: a.accountId,
      month: MONTH,
      cost,
      entry: { id: holdId, accountId: a.accountId, keyId: a.keyId, model: 'm-1', units: { kind: 'tokens', prompt: 1, completion: 1 }, measured: 'usage', at: 1 },
    });
    const hitOf = (a: { accountId: string; keyId: string }, limit: number): WindowHit => ({
      bucket: `key:${a.keyId}`,
      limit,
      windowMs: LONG_TTL,
      accountId: a.accountId,
    });

    it('counts in the limit store’s own windows, and holds only what the window let through', async () => {
      expect(stores().billing.windowsId).toBeTypeOf('symbol');
      expect(stores().billing.windowsId).toBe(stores().limits.windowsId);
      const a = await account(1_000n);
      const hit = hitOf(a, 3);
      expect(await stores().limits.hit(hit.bucket, 3, hit.windowMs, a.accountId)).toMatchObject({ allowed: true, remaining: 2 });
      const first = hold(a, 100n);
      expect(await fold()(hit, first)).toMatchObject({ window: { allowed: true, limit: 3, remaining: 1 }, hold: { ok: true } });
      expect(await fold()(hit, hold(a, 100n))).toMatchObject({ window: { allowed: true, remaining: 0 }, hold: { ok: true } });
      // The window is full: refused, not counted, and nothing held.
      const refused = await fold()(hit, hold(a, 100n));
      expect(refused).toMatchObject({ window: { allowed: false, limit: 3, remaining: 0 }, hold: null });
      expect(refused.window.resetMs).toBeGreaterThan(LONG_TTL - 5_000);
      expect(await billing().openHolds(a.accountId)).toBe(2);
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 1_000n, held: 200n });
      expect(await stores().limits.hit(hit.bucket, 3, hit.windowMs, a.accountId)).toMatchObject({ allowed: false });
      // The hold it placed is an ordinary hold: it settles once.
      expect(await billing().settle(settleOf(a, first.holdId, 80n))).toEqual({ settled: true, charged: 80n, held: 100n });
    });

    it('a hold the wallet refuses still counts the hit: the request passed its rate check', async () => {
      const a = await account(50n);
      const hit = hitOf(a, 2);
      expect(await fold()(hit, hold(a, 51n))).toEqual({
        window: expect.objectContaining({ allowed: true, remaining: 1 }),
        hold: { ok: false, limitSource: 'wallet', available: 50n },
      });
      expect(await fold()(hit, { ...hold(a, 10n), monthlyCap: 5n })).toMatchObject({
        window: { allowed: true, remaining: 0 },
        hold: { ok: false, limitSource: 'key_monthly_cap', available: 5n },
      });
      expect(await fold()(hit, hold(a, 1n))).toMatchObject({ window: { allowed: false }, hold: null });
      expect(await billing().openHolds(a.accountId)).toBe(0);
    });

    it('an open hold id placed again holds once but counts its hit', async () => {
      const a = await account(1_000n);
      const req = hold(a, 400n);
      expect((await fold()(hitOf(a, 5), req)).hold).toEqual({ ok: true });
      expect(await fold()(hitOf(a, 5), req)).toMatchObject({ window: { remaining: 3 }, hold: { ok: true } });
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 1_000n, held: 400n });
    });

    it('concurrent calls against a window of 25 and a wallet worth 10 holds count exactly 25 and hold exactly 10', async () => {
      const a = await account(10n * 7_000n);
      const hit = hitOf(a, 25);
      const results = await Promise.all(Array.from({ length: 60 }, () => fold()(hit, hold(a, 7_000n))));
      const counted = results.filter((r) => r.window.allowed);
      expect(counted).toHaveLength(25);
      expect(counted.map((r) => r.window.remaining).sort((x, y) => x - y)).toEqual(Array.from({ length: 25 }, (_, i) => i));
      expect(results.filter((r) => r.hold?.ok)).toHaveLength(10);
      for (const r of results) if (!r.window.allowed) expect(r.hold).toBeNull();
      expect(await billing().wallet(a.accountId)).toEqual({ balance: 70_000n, held: 70_000n });
      expect(await billing().openHolds(a.accountId)).toBe(10);
      expect(await stores().limits.hit(hit.bucket, 25, hit.windowMs, a.accountId)).toMatchObject({ allowed: false });
    });
  });
}
