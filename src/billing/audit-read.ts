/**
 * One reading of an account's books for the audit (audit.ts judges it): the wallet, the holds,
 * the ledger page by page (only sums and the charges whose cost does not re-derive are kept),
 * and the spend the store keeps per key, month and period.
 */
import type { BillingStore, BudgetPeriod, HoldView, LedgerEntry, Stores } from '../stores/types.js';
import { MAX_LEDGER_PAGE } from '../stores/ledger-query.js';
import { periodEnd, periodName, periodStart } from '../stores/spend-periods.js';
import { formatUsd } from './money.js';
import { monthOf } from './months.js';
import { costAtPrices } from './pricing.js';

/**
 * The next turn of the event loop, taken between pages: a synchronous store (SQLite) answers
 * each page at once, and an audit of a long ledger must not keep every other request waiting.
 */
export const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** One period's spend of one scope (a key, or "" for the whole account): by the ledger and by the store. */
export interface PeriodReading {
  scope: string;
  period: string;
  charged: bigint;
  spend: bigint;
}

/** A charge whose cost is not its units at its kept prices. */
export interface CostReading {
  entry: string;
  expected: string;
  actual: string;
}

/** What one reading of an account found. */
export interface Reading {
  balance: bigint;
  held: bigint;
  /** Minus the sum of the ledger's costs. */
  ledgerBalance: bigint;
  entries: number;
  /** The store's clock when the holds were read. */
  at: number;
  holds: HoldView[];
  /** Charges this month by key, and each key's month-to-date spend as the store keeps it. */
  charged: Map<string, bigint>;
  spend: Map<string, bigint>;
  /** The current day's, week's and month's spend of each key and of the account. */
  periods: PeriodReading[];
  /** Charges whose cost does not re-derive (at most the cap the reading was given). */
  costs: CostReading[];
  /** Nothing changed while it was read. */
  still: boolean;
}

const HOLD_PAGE = 1_000;
const PERIODS: readonly BudgetPeriod[] = ['day', 'week', 'month'];

/** The pause before each further reading of a busy account: a lull between its calls may come. */
const pauseBefore = (attempt: number) => new Promise<void>((r) => setTimeout(r, Math.min(400, 25 * 2 ** attempt)));

/**
 * Reads an account until a reading is still, at most `attempts` times, pausing a little
 * longer before each; the last one is returned (its `still` says whether its sums belong
 * together).
 */
export async function readStill(stores: Stores, accountId: string, attempts: number, maxCosts: number): Promise<Reading> {
  const read = async (): Promise<Reading> => {
    const b = stores.billing;
    // The account's keys first, outside the snapshot: the key store is no part of it (and on a
    // pool of one connection, the snapshot holds that one).
    const keys = (await stores.keys.listByAccount(accountId)).map((k) => k.id);
    // A store that reads in one snapshot (PostgreSQL) gives a still reading whatever lands meanwhile.
    return b.snapshot ? b.snapshot((billing) => readAccount(billing, accountId, keys, maxCosts)) : readAccount(b, accountId, keys, maxCosts);
  };

  let r = await read();
  for (let i = 1; i < attempts && !r.still; i++) {
    await pauseBefore(i);
    r = await read();
  }
  return r;
}

/**
 * One reading: the wallet, the holds, the ledger to its end, the keys' and the account's
 * spend, then the wallet again and the ledger past where it ended. Every wallet change
 * appends an entry in the same step, so an unchanged wallet and no entry past the end mean
 * the sums belong together.
 */
async function readAccount(b: BillingStore, accountId: string, accountKeys: readonly string[], maxCosts: number): Promise<Reading> {
  const before = await b.wallet(accountId);
  const { holds, at } = await readHolds(b, accountId);
  const month = monthOf(at);
  const windows = PERIODS.map((p) => ({ name: periodName(p, at), from: periodStart(p, at), to: periodEnd(p, at) }));
  const ledger = await sumLedger(b, accountId, month, windows, maxCosts);
  const keys = new Set([...ledger.charged.keys(), ...accountKeys]);
  const spend = new Map<string, bigint>();
  for (const key of keys) spend.set(key, (await b.keyUsage(accountId, key, month)).monthly);
  const periods: PeriodReading[] = [];
  for (const scope of ['', ...[...keys].sort()]) {
    for (const [i, w] of windows.entries()) {
      const charged = ledger.inPeriods.get(scope)?.[i] ?? 0n;
      periods.push({ scope, period: w.name, charged, spend: await b.periodSpend(accountId, scope, w.name) });
    }
  }
  const after = await b.wallet(accountId);
  const tail = await b.queryLedger({ accountId, cursor: ledger.cursor, limit: 1 });
  return {
    balance: after.balance,
    held: after.held,
    ledgerBalance: -ledger.sum,
    entries: ledger.entries,
    at,
    holds,
    charged: ledger.charged,
    spend,
    periods,
    costs: ledger.costs,
    still: before.balance === after.balance && before.held === after.held && tail.entries.length === 0,
  };
}

/** Every hold the store keeps for the account. An account has as many as calls in flight (and batch lines held). */
export async function readHolds(b: Pick<BillingStore, 'listHolds'>, accountId: string): Promise<{ holds: HoldView[]; at: number }> {
  const holds: HoldView[] = [];
  let cursor: string | undefined;
  let at = 0;
  for (;;) {
    const page = await b.listHolds(accountId, cursor, HOLD_PAGE);
    holds.push(...page.holds);
    at = Math.max(at, page.at);
    if (page.nextCursor === null) return { holds, at };
    cursor = page.nextCursor;
    await nextTurn();
  }
}

/** The charge's cost re-derived from its units and kept prices; null when it agrees or kept none. */
function costDifference(e: LedgerEntry): CostReading | null {
  if (!e.prices) return null;
  try {
    const expected = costAtPrices(e.units, e.prices);
    return expected === e.cost ? null : { entry: e.id, expected: formatUsd(expected), actual: formatUsd(e.cost) };
  } catch (err) {
    return { entry: e.id, expected: 'a price for every unit', actual: err instanceof Error ? err.message : String(err) };
  }
}

/**
 * The ledger's sum and length; this month's charges by key; the charges in each of the
 * current periods by key and for the whole account (""); the charges whose cost does not
 * re-derive. Page by page.
 */
async function sumLedger(b: BillingStore, accountId: string, month: string, windows: { from: number; to: number }[], maxCosts: number) {
  let sum = 0n;
  let entries = 0;
  const charged = new Map<string, bigint>();
  const inPeriods = new Map<string, bigint[]>();
  const costs: CostReading[] = [];
  const addIn = (scope: string, i: number, cost: bigint) => {
    let sums = inPeriods.get(scope);
    if (!sums) inPeriods.set(scope, (sums = windows.map(() => 0n)));
    sums[i] = (sums[i] ?? 0n) + cost;
  };
  let cursor: string | undefined;
  for (;;) {
    const page = await b.queryLedger({ accountId, limit: MAX_LEDGER_PAGE, ...(cursor === undefined ? {} : { cursor }) });
    for (const e of page.entries) {
      sum += e.cost;
      entries++;
      // Credits are no key's spend, and have no units to price.
      if (e.units.kind === 'credit') continue;
      if (monthOf(e.at) === month) charged.set(e.keyId, (charged.get(e.keyId) ?? 0n) + e.cost);
      for (const [i, w] of windows.entries()) {
        if (e.at < w.from || e.at >= w.to) continue;
        if (e.keyId !== '') addIn(e.keyId, i, e.cost);
        addIn('', i, e.cost);
      }
      const wrong = costs.length < maxCosts ? costDifference(e) : null;
      if (wrong) costs.push(wrong);
    }
    cursor = page.nextCursor;
    if (!page.more) return { sum, entries, charged, inPeriods, costs, cursor };
    await nextTurn();
  }
}
