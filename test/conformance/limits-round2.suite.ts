import { describe, expect, it } from 'vitest';
import { spendPeriods } from '../../src/stores/spend-periods.js';
import type { BudgetCheck, HoldRequest, SettleRequest, Stores } from '../../src/stores/types.js';
import { expectAbout, type MakeStores, uid, useHarness } from './harness.js';

const MONTH = '2026-11';
const DAY1 = Date.UTC(2026, 10, 26, 12);
const DAY2 = Date.UTC(2026, 10, 27, 0);

function hold(accountId: string, keyId: string, amount: bigint, budgets: BudgetCheck[]): HoldRequest {
  return { holdId: uid('hold'), accountId, keyId, amount, monthlyCap: null, month: MONTH, ttlMs: 60_000, budgets };
}

function settle(h: HoldRequest, cost: bigint, at: number): SettleRequest {
  return {
    holdId: h.holdId,
    accountId: h.accountId,
    month: MONTH,
    cost,
    entry: { id: h.holdId, accountId: h.accountId, keyId: h.keyId, model: 'm', units: { kind: 'tokens', prompt: 1, completion: 1 }, measured: 'usage', at },
  };
}

const daily = (scope: 'key' | 'account', cap: bigint, at = DAY1): BudgetCheck => ({
  scope,
  period: spendPeriods(at)[0],
  cap,
  source: scope === 'key' ? 'key_daily_budget' : 'account_daily_budget',
});

/**
 * Token windows (tokens per minute), budgets held with a hold and counted per period by
 * settles, and the limits a key and an account record carry. `pair`, for drivers several
 * instances share, opens two stores on one backend.
 */
export function limitsRoundTwoSuite(name: string, make: MakeStores, pair?: () => Promise<[Stores, Stores]>): void {
  describe(`${name}: token windows`, () => {
    const h = useHarness(make);
    const limits = () => h().stores.limits;

    it('takes while the tokens fit, refuses without taking, and frees by correction and by time', async () => {
      const b = uid('tpm');
      let r = await limits().takeTokens(b, 'a', 60, 100, 300);
      expect(r).toMatchObject({ allowed: true, limit: 100, remaining: 40 });
      expectAbout(r.resetMs, 300);
      // A take id already in the window is not taken twice.
      expect(await limits().takeTokens(b, 'a', 60, 100, 300)).toMatchObject({ allowed: true, remaining: 40 });
      await h().advance(100);
      r = await limits().takeTokens(b, 'b', 50, 100, 300);
      expect(r).toMatchObject({ allowed: false, remaining: 40 });
      expectAbout(r.resetMs, 200);
      // Never fits: more than the whole limit.
      expect(await limits().takeTokens(b, 'c', 101, 100, 300)).toMatchObject({ allowed: false, resetMs: -1 });
      // Corrected to what the call used, the take frees the rest at once.
      await limits().setTokens(b, 'a', 10);
      expect(await limits().takeTokens(b, 'b', 50, 100, 300)).toMatchObject({ allowed: true, remaining: 40 });
      await limits().setTokens(b, 'missing', 1);
      await h().advance(250); // 'a' (t=0) has left; 'b' (t=100) still counts
      expect(await limits().takeTokens(b, 'd', 50, 100, 300)).toMatchObject({ allowed: true, remaining: 0 });
    });

    if (pair) {
      it('130 concurrent takes from two instances take exactly what fits, and corrections free exactly what they give back', async () => {
        const [one, two] = await pair();
        try {
          const b = uid('tpm');
          const accountId = uid('acct');
          const results = await Promise.all(
            Array.from({ length: 130 }, (_, i) => (i % 2 ? one : two).limits.takeTokens(b, `t${i}`, 7, 700, 60_000, accountId)),
          );
          const taken = results.flatMap((r, i) => (r.allowed ? [i] : []));
          expect(taken).toHaveLength(100);
          await Promise.all(taken.map((i) => (i % 2 ? two : one).limits.setTokens(b, `t${i}`, 3, accountId)));
          expect(await one.limits.takeTokens(b, 'big', 400, 700, 60_000, accountId)).toMatchObject({ allowed: true, remaining: 0 });
          expect(await two.limits.takeTokens(b, 'one-more', 1, 700, 60_000, accountId)).toMatchObject({ allowed: false });
        } finally {
          await Promise.all([one.close(), two.close()]);
        }
      });
    }
  });

  describe(`${name}: budgets`, () => {
    const h = useHarness(make);

    async function account(stores: Stores, balance: bigint) {
      const accountId = uid('acct');
      await stores.accounts.create({ id: accountId, grants: [], createdAt: 0 }, balance);
      return accountId;
    }

    it("holds within a key's daily budget, counts settles per day, week and month, and a new day starts empty", async () => {
      const { billing } = h().stores;
      const a = await account(h().stores, 1_000_000n);
      const k = uid('key');
      const h1 = hold(a, k, 600n, [daily('key', 1_000n)]);
      expect(await billing.placeHold(h1)).toEqual({ ok: true });
      // 600 held + 500 > 1000.
      expect(await billing.placeHold(hold(a, k, 500n, [daily('key', 1_000n)]))).toEqual({ ok: false, limitSource: 'key_daily_budget', available: 400n });
      // Another key of the account is not bound by this key's budget.
      expect(await billing.placeHold(hold(a, uid('key'), 500n, [daily('key', 1_000n)]))).toEqual({ ok: true });
      await billing.settle(settle(h1, 700n, DAY1));
      const [day, week, month] = spendPeriods(DAY1);
      for (const p of [day, week, month]) expect(await billing.periodSpend(a, k, p)).toBe(700n);
      expect(await billing.periodSpend(a, '', day)).toBe(700n);
      expect(await billing.placeHold(hold(a, k, 301n, [daily('key', 1_000n)]))).toEqual({ ok: false, limitSource: 'key_daily_budget', available: 300n });
      // The next day's period has no spend yet.
      expect(await billing.placeHold(hold(a, k, 1_000n, [daily('key', 1_000n, DAY2)]))).toEqual({ ok: true });
      expect(await billing.periodSpend(a, k, spendPeriods(DAY2)[0])).toBe(0n);
    });

    it("an account's budget counts every key's spend and holds; the wallet is checked first", async () => {
      const { billing } = h().stores;
      const a = await account(h().stores, 2_000n);
      const [k1, k2] = [uid('key'), uid('key')];
      const first = hold(a, k1, 400n, [daily('account', 1_000n)]);
      expect(await billing.placeHold(first)).toEqual({ ok: true });
      await billing.settle(settle(first, 400n, DAY1));
      expect(await billing.placeHold(hold(a, k2, 500n, [daily('account', 1_000n)]))).toEqual({ ok: true });
      expect(await billing.placeHold(hold(a, k1, 200n, [daily('account', 1_000n)]))).toEqual({ ok: false, limitSource: 'account_daily_budget', available: 100n });
      expect(await billing.placeHold(hold(a, k1, 5_000n, [daily('account', 100_000n)]))).toMatchObject({ ok: false, limitSource: 'wallet' });
    });

    if (pair) {
      it('50 concurrent holds from two instances against a daily budget hold exactly what fits', async () => {
        const [one, two] = await pair();
        try {
          const a = await account(one, 1_000_000n);
          const k = uid('key');
          const results = await Promise.all(
            Array.from({ length: 50 }, (_, i) => (i % 2 ? one : two).billing.placeHold(hold(a, k, 30n, [daily('key', 1_000n)]))),
          );
          expect(results.filter((r) => r.ok)).toHaveLength(33);
          for (const r of results) if (!r.ok) expect(r).toEqual({ ok: false, limitSource: 'key_daily_budget', available: 10n });
        } finally {
          await Promise.all([one.close(), two.close()]);
        }
      });
    }
  });

  describe(`${name}: limits on records`, () => {
    const h = useHarness(make);

    it('keeps a key’s allow-list, tokens per minute and budgets, and patches them field by field', async () => {
      const { keys, accounts } = h().stores;
      const id = uid('key');
      const base = { id, digest: uid('digest'), prefix: 'sk-mg-Ab12', accountId: uid('acct'), kind: 'developer' as const, model: null, label: null, monthlyCap: null, disabled: false, createdAt: 1 };
      await keys.insert({ ...base, models: ['acme/*'], tokensPerMinute: 5_000, budgets: [{ amount: 7n, period: 'day' }] });
      expect(await keys.get(id)).toEqual({ ...base, models: ['acme/*'], tokensPerMinute: 5_000, budgets: [{ amount: 7n, period: 'day' }] });
      const updated = await keys.update(id, { tokensPerMinute: null, budgets: [{ amount: 9n, period: 'week' }, { amount: 30n, period: 'month' }] });
      expect(updated).toMatchObject({ models: ['acme/*'], budgets: [{ amount: 9n, period: 'week' }, { amount: 30n, period: 'month' }] });
      expect(updated?.tokensPerMinute ?? null).toBeNull();
      expect((await keys.findByDigest(base.digest))?.budgets).toEqual(updated?.budgets);

      const acct = uid('acct');
      await accounts.create({ id: acct, grants: [], createdAt: 0 }, 0n);
      expect(await accounts.setBudgets(acct, [{ amount: 50n, period: 'month' }])).toBe(true);
      expect((await accounts.get(acct))?.budgets).toEqual([{ amount: 50n, period: 'month' }]);
      expect(await accounts.setBudgets(uid('nobody'), [])).toBe(false);
    });
  });
}
