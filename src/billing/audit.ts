/**
 * The audit of the books: for each account, that what the store keeps adds up.
 *
 * - `balance`: the wallet's balance is minus the sum of the ledger's costs (every wallet change
 *   is a ledger entry: opening balances, top-ups, credits, charges).
 * - `held`: the wallet's held amount is the sum of its open holds (those not yet expired).
 * - `hold_expiry`: no hold is still counted past its expiry plus a grace. An expired hold a
 *   store has not swept yet counts for nothing and is not named; one the store still counts
 *   (the held amount is above the open holds), or one kept with no expiry at all, is.
 * - `key_spend`: each key's month-to-date spend is the sum of its charges this month.
 * - `duplicate_charge`: no hold id has two charges (settles are idempotent per hold id).
 *
 * It reads in pages (the ledger by its cursor, holds by theirs) and keeps only sums, so an
 * account with millions of entries is never loaded whole. It writes nothing (the Redis
 * driver's duplicate pass keeps scratch keys that it deletes). Books that change while they
 * are read (a live gateway) are read again, up to a few times, until one reading is still.
 */
import type { BillingStore, HoldView, Stores } from '../stores/types.js';
import { MAX_LEDGER_PAGE } from '../stores/ledger-query.js';
import { formatUsd } from './money.js';
import { monthOf } from './months.js';

export type AuditCheck = 'balance' | 'held' | 'hold_expiry' | 'key_spend' | 'duplicate_charge';

export interface AuditDifference {
  account: string;
  check: AuditCheck;
  /**
   * What the books say it should be, and what the store has: USD decimal strings for
   * `balance`, `held` and `key_spend`; counts of charges for `duplicate_charge`; for
   * `hold_expiry` the time (ISO 8601) the hold had to stop counting by, and the time the
   * audit found it counted (expected "an expiry", actual "none" for a hold kept without one).
   */
  expected: string;
  actual: string;
  /** `key_spend`: the key. */
  key?: string;
  /** `hold_expiry` and `duplicate_charge`: the hold id. */
  hold?: string;
}

export interface AuditReport {
  ok: boolean;
  accounts: number;
  /** Ledger entries read. */
  entries: number;
  differences: AuditDifference[];
}

export interface AuditOptions {
  /** Audit only this account. */
  account?: string;
  /** How long past its expiry a hold may still be counted (a sweep's delay). @default 600_000 */
  graceMs?: number;
  /** Readings of a changing account before its last one is judged. @default 3 */
  attempts?: number;
}

export const DEFAULT_AUDIT_GRACE_MS = 10 * 60 * 1000;
const HOLD_PAGE = 1_000;
/**
 * The next turn of the event loop, taken between pages: a synchronous store (SQLite) answers
 * each page at once, and an audit of a long ledger must not keep every other request waiting.
 */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
/** Duplicate hold ids named per account at most: one is enough to act on, a flood helps nobody. */
const MAX_DUPLICATES = 100;

/** What one reading of an account found. */
interface Reading {
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
  /** Nothing changed while it was read. */
  still: boolean;
}

/** Audits every account (or `options.account`). Throws a RangeError when that account does not exist. */
export async function auditBooks(stores: Stores, options: AuditOptions = {}): Promise<AuditReport> {
  const ids = await accountIds(stores, options.account);
  const report: AuditReport = { ok: true, accounts: 0, entries: 0, differences: [] };
  for (const id of ids) {
    await nextTurn();
    const r = await readStill(stores, id, options.attempts ?? 3);
    report.accounts++;
    report.entries += r.entries;
    report.differences.push(...judge(id, r, options.graceMs ?? DEFAULT_AUDIT_GRACE_MS));
    for (const d of await stores.billing.duplicateCharges(id, MAX_DUPLICATES)) {
      report.differences.push({ account: id, check: 'duplicate_charge', hold: d.holdId, expected: '1', actual: String(d.charges) });
    }
  }
  report.ok = report.differences.length === 0;
  return report;
}

async function accountIds(stores: Stores, only: string | undefined): Promise<string[]> {
  if (only !== undefined) {
    if (!(await stores.accounts.get(only))) throw new RangeError(`no account "${only}"`);
    return [only];
  }
  // The account store lists its records whole (they are small); each account's books are
  // then read in pages, one account at a time.
  return (await stores.accounts.list()).map((a) => a.id).sort();
}

async function readStill(stores: Stores, accountId: string, attempts: number): Promise<Reading> {
  let r = await readAccount(stores, accountId);
  for (let i = 1; i < attempts && !r.still; i++) r = await readAccount(stores, accountId);
  return r;
}

/**
 * One reading: the wallet, the holds, the ledger to its end, the keys' spend, then the wallet
 * again and the ledger past where it ended. Every wallet change appends an entry in the same
 * step, so an unchanged wallet and no entry past the end mean the sums belong together.
 */
async function readAccount(stores: Stores, accountId: string): Promise<Reading> {
  const b = stores.billing;
  const before = await b.wallet(accountId);
  const { holds, at } = await readHolds(b, accountId);
  const month = monthOf(at);
  const ledger = await sumLedger(b, accountId, month);
  const keys = new Set([...ledger.charged.keys(), ...(await stores.keys.listByAccount(accountId)).map((k) => k.id)]);
  const spend = new Map<string, bigint>();
  for (const key of keys) spend.set(key, (await b.keyUsage(accountId, key, month)).monthly);
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
    still: before.balance === after.balance && before.held === after.held && tail.entries.length === 0,
  };
}

/** Every hold the store keeps for the account. An account has as many as calls in flight. */
async function readHolds(b: BillingStore, accountId: string): Promise<{ holds: HoldView[]; at: number }> {
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

/** The ledger's sum, its length, and this month's charges by key, page by page. */
async function sumLedger(b: BillingStore, accountId: string, month: string) {
  let sum = 0n;
  let entries = 0;
  const charged = new Map<string, bigint>();
  let cursor: string | undefined;
  for (;;) {
    const page = await b.queryLedger({ accountId, limit: MAX_LEDGER_PAGE, ...(cursor === undefined ? {} : { cursor }) });
    for (const e of page.entries) {
      sum += e.cost;
      entries++;
      // Credits are no key's spend.
      if (e.units.kind !== 'credit' && monthOf(e.at) === month) charged.set(e.keyId, (charged.get(e.keyId) ?? 0n) + e.cost);
    }
    cursor = page.nextCursor;
    if (!page.more) return { sum, entries, charged, cursor };
    await nextTurn();
  }
}

function judge(account: string, r: Reading, graceMs: number): AuditDifference[] {
  const out: AuditDifference[] = [];
  const usd = (check: AuditCheck, expected: bigint, actual: bigint, key?: string) => {
    if (expected !== actual) out.push({ account, check, expected: formatUsd(expected), actual: formatUsd(actual), ...(key === undefined ? {} : { key }) });
  };
  usd('balance', r.ledgerBalance, r.balance);
  const open = r.holds.filter((h) => h.expiresAt === null || h.expiresAt > r.at);
  const openSum = open.reduce((s, h) => s + h.amount, 0n);
  usd('held', openSum, r.held);
  // Expired holds still counted: more held than the open holds explain (or kept with no expiry).
  const countsExpired = r.held > openSum;
  for (const h of r.holds) {
    if (h.expiresAt === null) {
      out.push({ account, check: 'hold_expiry', hold: h.holdId, expected: 'an expiry', actual: 'none' });
    } else if (countsExpired && h.expiresAt + graceMs < r.at) {
      out.push({ account, check: 'hold_expiry', hold: h.holdId, expected: new Date(h.expiresAt + graceMs).toISOString(), actual: new Date(r.at).toISOString() });
    }
  }
  for (const key of [...r.spend.keys()].sort()) usd('key_spend', r.charged.get(key) ?? 0n, r.spend.get(key) ?? 0n, key);
  return out;
}
