/**
 * Budgets: spending limits per UTC day, week (from Monday) or month, on a key or on a whole
 * account, held like the monthly cap (the period's spend plus open holds plus the new hold
 * must fit). The monthly cap is the key's monthly budget kept under its own name.
 */
import type { ApiKeyRecord, BillingStore, Budget, BudgetCheck, BudgetPeriod, BudgetSource, KeyUsage, WalletView } from '../stores/types.js';
import { periodEnd, periodName } from '../stores/spend-periods.js';
import { nextMonthStart } from './months.js';

const ADJECTIVE: Record<BudgetPeriod, 'daily' | 'weekly' | 'monthly'> = { day: 'daily', week: 'weekly', month: 'monthly' };

const sourceOf = (scope: 'key' | 'account', period: BudgetPeriod): BudgetSource => `${scope}_${ADJECTIVE[period]}_budget`;

/** What a hold at `now` is checked against: the key's budgets, then the account's. */
export function budgetChecks(keyBudgets: readonly Budget[] | undefined, accountBudgets: readonly Budget[], now: number): BudgetCheck[] {
  const checks: BudgetCheck[] = [];
  for (const b of keyBudgets ?? []) checks.push({ scope: 'key', period: periodName(b.period, now), cap: b.amount, source: sourceOf('key', b.period) });
  for (const b of accountBudgets) checks.push({ scope: 'account', period: periodName(b.period, now), cap: b.amount, source: sourceOf('account', b.period) });
  return checks;
}

/** A limit on what the key can spend, as GET /key reports the tightest one. */
export interface Standing {
  limit: bigint;
  /** What can still be held (never negative). */
  remaining: bigint;
  reset: 'daily' | 'weekly' | 'monthly';
  resetsAt: Date;
}

/**
 * The key's tightest limit now (the one with the least left): its monthly cap, its budgets or
 * its account's budgets; null when it has none.
 */
export async function tightestLimit(
  billing: BillingStore,
  key: Pick<ApiKeyRecord, 'id' | 'accountId' | 'monthlyCap' | 'budgets'>,
  accountBudgets: readonly Budget[],
  report: { usage: KeyUsage; wallet: WalletView },
  now: number,
): Promise<Standing | null> {
  const standings: Standing[] = [];
  if (key.monthlyCap !== null) {
    const left = key.monthlyCap - report.usage.monthly - report.usage.held;
    standings.push({ limit: key.monthlyCap, remaining: left, reset: 'monthly', resetsAt: nextMonthStart(now) });
  }
  const all = [
    ...(key.budgets ?? []).map((b) => ({ b, scope: key.id, held: report.usage.held })),
    ...accountBudgets.map((b) => ({ b, scope: '', held: report.wallet.held })),
  ];
  const spent = await Promise.all(all.map(({ b, scope }) => billing.periodSpend(key.accountId, scope, periodName(b.period, now))));
  all.forEach(({ b, held }, i) => {
    const left = b.amount - (spent[i] ?? 0n) - held;
    standings.push({ limit: b.amount, remaining: left, reset: ADJECTIVE[b.period], resetsAt: new Date(periodEnd(b.period, now)) });
  });
  let tightest: Standing | null = null;
  for (const s of standings) if (tightest === null || s.remaining < tightest.remaining) tightest = s;
  return tightest && { ...tightest, remaining: tightest.remaining > 0n ? tightest.remaining : 0n };
}
