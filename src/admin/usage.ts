/**
 * Reading the ledger for operators: one account's or every account's, a page at a time or
 * entry by entry, and usage reports (sums by account, day (UTC), model or key over a time
 * range). Credits (top-ups, adjustments) are money moved by operators, not usage: they are
 * left out of reports. Sums are exact nano-USD, answered as USD decimal strings.
 *
 * Every account's ledger is read account by account (ids in ascending order), each oldest
 * first: stores keep one ledger per account, so this order needs no global index, and a
 * cursor "<position>:<account>" (the account's own cursor, then its id) stays valid for good.
 */
import type { Admin, TimeInput } from './accounts.js';
import { AdminError } from './accounts.js';
import { formatUsd } from '../billing/money.js';
import type { LedgerEntry, LedgerPage } from '../stores/types.js';

export type GroupBy = 'account' | 'day' | 'model' | 'key';

export interface UsageRow {
  /** The account id, day ("YYYY-MM-DD"), model id or key id. */
  group: string;
  calls: number;
  costUsd: string;
  promptTokens: number;
  completionTokens: number;
}

/** Entries read at most per report: a bound on one request's work. */
const MAX_SCAN = 1_000_000;

/** The ledger as operators read it: the admin, and every account's id in ascending order. */
export interface Books {
  admin: Admin;
  accountIds(): Promise<string[]>;
}

/** A ledger filter; without `account`, every account's entries. */
export interface LedgerFilter {
  account?: string;
  key?: string;
  from?: TimeInput;
  to?: TimeInput;
}

/**
 * The next turn of the event loop. A synchronous store (SQLite) answers each page at once, so
 * a report awaiting page after page would otherwise run to its end in one turn and every other
 * request (tenants' calls, `/health`) would wait behind it: between pages, they go first.
 */
export const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Entries per page a report reads: one page is a few milliseconds of work on any store. */
const REPORT_PAGE = 1_000;

/** Visits every ledger entry of the filter, page by page (account by account without one). */
export async function* ledgerEntries(books: Books, q: LedgerFilter): AsyncGenerator<LedgerEntry> {
  const accounts = q.account === undefined ? await books.accountIds() : [q.account];
  for (const account of accounts) {
    let cursor: string | undefined;
    for (;;) {
      const page = await books.admin.ledger({ ...q, account, limit: REPORT_PAGE, ...(cursor === undefined ? {} : { cursor }) });
      yield* page.entries;
      if (!page.more) break;
      cursor = page.nextCursor;
      await nextTurn();
    }
    await nextTurn();
  }
}

/** A cross-account cursor: the account's own cursor, a colon, the account id (none: the first). */
function parseCursor(cursor: string): { position: string; account: string } {
  const at = cursor.indexOf(':');
  if (at < 1) throw new AdminError('cursor: not one this ledger returned');
  return { position: cursor.slice(0, at), account: cursor.slice(at + 1) };
}

/**
 * One page of every account's ledger: accounts in ascending id order, each oldest first. A
 * page may span accounts. `more` is exact: an account is probed before a page says it holds
 * more. A cursor whose account no longer exists resumes at the next id after it.
 */
export async function ledgerPageAll(
  books: Books,
  q: Omit<LedgerFilter, 'account'> & { cursor?: string; limit: number },
): Promise<LedgerPage> {
  const ids = await books.accountIds();
  const { key, from, to } = q;
  const resume = q.cursor === undefined ? undefined : parseCursor(q.cursor);
  let i = resume ? ids.findIndex((id) => id >= resume.account) : 0;
  if (i < 0) i = ids.length;
  // The resumed account's position holds only while it is the same account.
  let position = resume && ids[i] === resume.account ? resume.position : '0';
  const entries: LedgerEntry[] = [];
  let last = resume?.account ?? '';
  let lastCursor = resume?.position ?? '0';
  for (; i < ids.length; i++, position = '0') {
    const account = ids[i]!;
    const want = q.limit - entries.length;
    const page = await books.admin.ledger({ account, key, from, to, cursor: position, limit: Math.max(want, 1) });
    if (want === 0) {
      if (page.entries.length > 0) return { entries, nextCursor: `${position}:${account}`, more: true };
      continue;
    }
    entries.push(...page.entries);
    last = account;
    lastCursor = page.nextCursor;
    if (page.more) return { entries, nextCursor: `${page.nextCursor}:${account}`, more: true };
  }
  return { entries, nextCursor: last === '' ? '0:' : `${lastCursor}:${last}`, more: false };
}

/** The group of an entry in a report. */
function groupOf(e: LedgerEntry, by: GroupBy): string {
  if (by === 'day') return new Date(e.at).toISOString().slice(0, 10);
  return by === 'account' ? e.accountId : by === 'model' ? e.model : e.keyId;
}

/** A usage report of one account, or of every account without `account`. */
export async function usageReport(
  books: Books,
  q: { account?: string; groupBy: GroupBy; from?: TimeInput; to?: TimeInput },
): Promise<{ rows: UsageRow[]; totalUsd: string; truncated: boolean }> {
  const sums = new Map<string, { calls: number; cost: bigint; prompt: number; completion: number }>();
  let total = 0n;
  let scanned = 0;
  let truncated = false;
  for await (const e of ledgerEntries(books, { account: q.account, from: q.from, to: q.to })) {
    if (++scanned > MAX_SCAN) {
      truncated = true;
      break;
    }
    if (e.units.kind === 'credit') continue;
    const group = groupOf(e, q.groupBy);
    let s = sums.get(group);
    if (!s) sums.set(group, (s = { calls: 0, cost: 0n, prompt: 0, completion: 0 }));
    s.calls++;
    s.cost += e.cost;
    total += e.cost;
    if (e.units.kind === 'tokens') {
      s.prompt += e.units.prompt;
      s.completion += e.units.completion;
    }
  }
  const rows = [...sums]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([group, s]) => ({ group, calls: s.calls, costUsd: formatUsd(s.cost), promptTokens: s.prompt, completionTokens: s.completion }));
  return { rows, totalUsd: formatUsd(total), truncated };
}

/** Spend of one group in an overview. */
export interface SpendRow {
  group: string;
  calls: number;
  costUsd: string;
}

export interface Overview {
  totalUsd: string;
  calls: number;
  /** The accounts and models that spent most, most first (ties by id). */
  topAccounts: SpendRow[];
  topModels: SpendRow[];
  /** Spend per UTC day with any, oldest first. */
  days: SpendRow[];
  truncated: boolean;
}

type Sums = Map<string, { calls: number; cost: bigint }>;

function add(sums: Sums, group: string, cost: bigint): void {
  const s = sums.get(group);
  if (s) {
    s.calls++;
    s.cost += cost;
  } else sums.set(group, { calls: 1, cost });
}

const rows = (sums: Sums): SpendRow[] => [...sums].map(([group, s]) => ({ group, calls: s.calls, costUsd: formatUsd(s.cost) }));

/** The `top` groups by spend, most first. */
function topOf(sums: Sums, top: number): SpendRow[] {
  const sorted = [...sums].sort(([a, x], [b, y]) => (x.cost > y.cost ? -1 : x.cost < y.cost ? 1 : a < b ? -1 : a > b ? 1 : 0));
  return rows(new Map(sorted.slice(0, top)));
}

/** Every account's spend over [from, to) in one pass: the total, the top accounts and models, and spend per day. */
export async function overviewReport(books: Books, q: { from?: TimeInput; to?: TimeInput; top: number }): Promise<Overview> {
  const accounts: Sums = new Map();
  const models: Sums = new Map();
  const days: Sums = new Map();
  let total = 0n;
  let calls = 0;
  let scanned = 0;
  let truncated = false;
  for await (const e of ledgerEntries(books, { from: q.from, to: q.to })) {
    if (++scanned > MAX_SCAN) {
      truncated = true;
      break;
    }
    if (e.units.kind === 'credit') continue;
    calls++;
    total += e.cost;
    add(accounts, e.accountId, e.cost);
    add(models, e.model, e.cost);
    add(days, groupOf(e, 'day'), e.cost);
  }
  const byDay = rows(days).sort((a, b) => (a.group < b.group ? -1 : 1));
  return { totalUsd: formatUsd(total), calls, topAccounts: topOf(accounts, q.top), topModels: topOf(models, q.top), days: byDay, truncated };
}
