/**
 * The audit of the books: for each account, that what the store keeps adds up.
 *
 * - `balance`: the wallet's balance is minus the sum of the ledger's costs (every wallet change
 *   is a ledger entry: opening balances, top-ups, credits, charges).
 * - `held`: the wallet's held amount is the sum of its open holds (those not yet expired).
 * - `hold_expiry`: no hold is still counted past its expiry plus a grace (an expired hold a
 *   store has not swept yet counts for nothing and is not named; one the store still counts,
 *   the held amount being above the open holds, or one kept with no expiry at all, is), and
 *   no hold expires later than the longest hold TTL allows from now (plus the grace): a hold
 *   that never lapses holds the wallet for good.
 * - `key_spend`: each key's month-to-date spend is the sum of its charges this month.
 * - `period_spend`: each key's, and the whole account's, spend in the current day, week and
 *   month (what budgets are checked against) is the sum of its charges in that period.
 * - `duplicate_charge`, `duplicate_request`: no hold id, and no request (or job) id, has two
 *   charges (settles are idempotent per hold id; a request is billed once).
 * - `cost`: each charge's cost is its units times the unit prices kept on it, rounded up to
 *   the nano-USD once, as billing computes it (pricing.ts). Charges written before prices
 *   were kept have none and are not checked.
 *
 * It reads in pages (the ledger by its cursor, holds by theirs) and keeps only sums, so an
 * account with millions of entries is never loaded whole. It writes nothing (the Redis
 * driver's duplicate pass keeps scratch keys that it deletes). Books that change while they
 * are read (a live gateway) are read again, up to a few times, until one reading is still.
 */
import type { Stores } from '../stores/types.js';
import { formatUsd } from './money.js';
import { nextTurn, type Reading, readStill } from './audit-read.js';

export type AuditCheck =
  | 'balance'
  | 'held'
  | 'hold_expiry'
  | 'key_spend'
  | 'period_spend'
  | 'duplicate_charge'
  | 'duplicate_request'
  | 'cost';

export interface AuditDifference {
  account: string;
  check: AuditCheck;
  /**
   * What the books say it should be, and what the store has: USD decimal strings for
   * `balance`, `held`, `key_spend`, `period_spend` and `cost`; counts of charges for the
   * duplicates; for `hold_expiry` the time (ISO 8601) the hold had to stop counting by, and
   * the time the audit found it counted, or the latest expiry the TTL allows and the hold's
   * (expected "an expiry", actual "none" for a hold kept without one). A `cost` whose units
   * name a part no price was kept for expects "a price for every unit" and names the part.
   */
  expected: string;
  actual: string;
  /** `key_spend` and a key's `period_spend`: the key. */
  key?: string;
  /** `period_spend`: the period ("d2026-11-26", "w2026-11-23", "m2026-11"). */
  period?: string;
  /** `hold_expiry` and `duplicate_charge`: the hold id. */
  hold?: string;
  /** `cost` and `duplicate_request`: the entry's id (the request or job id). */
  entry?: string;
}

export interface AuditReport {
  ok: boolean;
  accounts: number;
  /** Ledger entries read. */
  entries: number;
  differences: AuditDifference[];
  /**
   * Accounts whose books changed during every reading (calls kept landing, on a store that
   * reads in no snapshot: all but PostgreSQL): a reading's sums
   * do not then belong together, so their balance, held and spend were not judged, nor
   * whether an expired hold is still counted (holds kept without an expiry or past the TTL,
   * charges' costs and duplicates were). Not a difference: run the audit again when they are
   * quieter.
   */
  unsettled: string[];
}

export interface AuditOptions {
  /** Audit only this account. */
  account?: string;
  /** How long past its expiry a hold may still be counted (a sweep's delay), and clocks may disagree. @default 600_000 */
  graceMs?: number;
  /** The longest TTL a hold is placed or renewed with (calls' and jobs'). @default 86_400_000 */
  maxHoldTtlMs?: number;
  /** Readings of a changing account before its sums go unjudged (`unsettled`). @default 5 */
  attempts?: number;
}

export const DEFAULT_AUDIT_GRACE_MS = 10 * 60 * 1000;
/** The default job TTL: the longest hold a gateway on default options places. */
export const DEFAULT_MAX_HOLD_TTL_MS = 24 * 60 * 60 * 1000;
/** Ids named per account and check at most: one is enough to act on, a flood helps nobody. */
export const MAX_NAMED = 100;
/** Readings of an account whose books keep changing before its sums go unjudged. */
export const DEFAULT_ATTEMPTS = 5;

/** Audits every account (or `options.account`). Throws a RangeError when that account does not exist. */
export async function auditBooks(stores: Stores, options: AuditOptions = {}): Promise<AuditReport> {
  const ids = await accountIds(stores, options.account);
  const report: AuditReport = { ok: true, accounts: 0, entries: 0, differences: [], unsettled: [] };
  for (const id of ids) {
    await nextTurn();
    const r = await readStill(stores, id, options.attempts ?? DEFAULT_ATTEMPTS, MAX_NAMED);
    report.accounts++;
    if (!r.still) report.unsettled.push(id);
    report.entries += r.entries;
    report.differences.push(...judge(id, r, options.graceMs ?? DEFAULT_AUDIT_GRACE_MS, options.maxHoldTtlMs ?? DEFAULT_MAX_HOLD_TTL_MS));
    for (const d of await stores.billing.duplicateCharges(id, MAX_NAMED)) {
      const named = d.of === 'hold' ? { check: 'duplicate_charge' as const, hold: d.id } : { check: 'duplicate_request' as const, entry: d.id };
      report.differences.push({ account: id, ...named, expected: '1', actual: String(d.charges) });
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

function judge(account: string, r: Reading, graceMs: number, maxTtlMs: number): AuditDifference[] {
  const out: AuditDifference[] = [];
  const usd = (check: AuditCheck, expected: bigint, actual: bigint, named: Partial<AuditDifference> = {}) => {
    if (expected !== actual) out.push({ account, check, expected: formatUsd(expected), actual: formatUsd(actual), ...named });
  };
  // The sums are judged only from a reading nothing changed during (the wallet, the holds and
  // the ledger were read one after another): a call landing between them is no difference.
  const sums = r.still;
  if (sums) usd('balance', r.ledgerBalance, r.balance);
  const open = r.holds.filter((h) => h.expiresAt === null || h.expiresAt > r.at);
  const openSum = open.reduce((s, h) => s + h.amount, 0n);
  if (sums) usd('held', openSum, r.held);
  // Expired holds still counted: more held than the open holds explain (or kept with no expiry).
  const countsExpired = sums && r.held > openSum;
  const iso = (ms: number) => new Date(ms).toISOString();
  for (const h of r.holds) {
    if (h.expiresAt === null) {
      out.push({ account, check: 'hold_expiry', hold: h.holdId, expected: 'an expiry', actual: 'none' });
    } else if (countsExpired && h.expiresAt + graceMs < r.at) {
      out.push({ account, check: 'hold_expiry', hold: h.holdId, expected: iso(h.expiresAt + graceMs), actual: iso(r.at) });
    } else if (h.expiresAt > r.at + maxTtlMs + graceMs) {
      out.push({ account, check: 'hold_expiry', hold: h.holdId, expected: iso(r.at + maxTtlMs), actual: iso(h.expiresAt) });
    }
  }
  if (sums) {
    for (const key of [...r.spend.keys()].sort()) usd('key_spend', r.charged.get(key) ?? 0n, r.spend.get(key) ?? 0n, { key });
    for (const p of r.periods) {
      usd('period_spend', p.charged, p.spend, { ...(p.scope === '' ? {} : { key: p.scope }), period: p.period });
    }
  }
  for (const c of r.costs) out.push({ account, check: 'cost', entry: c.entry, expected: c.expected, actual: c.actual });
  return out;
}
