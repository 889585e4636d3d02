/**
 * Usage reports: an account's ledger summed by day (UTC), model or key over a time range.
 * Credits (top-ups, adjustments) are money moved by operators, not usage: they are left out.
 * Sums are exact nano-USD, answered as USD decimal strings.
 */
import type { Admin, TimeInput } from './accounts.js';
import { formatUsd } from '../billing/money.js';
import type { LedgerEntry } from '../stores/types.js';

export type GroupBy = 'day' | 'model' | 'key';

export interface UsageRow {
  /** The day ("YYYY-MM-DD"), model id or key id. */
  group: string;
  calls: number;
  costUsd: string;
  promptTokens: number;
  completionTokens: number;
}

/** Entries read at most per report: a bound on one request's work. */
const MAX_SCAN = 1_000_000;

/** Visits every ledger entry of the query, page by page. */
export async function* ledgerEntries(
  admin: Admin,
  q: { account: string; key?: string; from?: TimeInput; to?: TimeInput },
): AsyncGenerator<LedgerEntry> {
  let cursor: string | undefined;
  for (;;) {
    const page = await admin.ledger({ ...q, limit: 1000, ...(cursor === undefined ? {} : { cursor }) });
    yield* page.entries;
    if (!page.more) return;
    cursor = page.nextCursor;
  }
}

export async function usageReport(
  admin: Admin,
  q: { account: string; groupBy: GroupBy; from?: TimeInput; to?: TimeInput },
): Promise<{ rows: UsageRow[]; totalUsd: string; truncated: boolean }> {
  const sums = new Map<string, { calls: number; cost: bigint; prompt: number; completion: number }>();
  let total = 0n;
  let scanned = 0;
  let truncated = false;
  for await (const e of ledgerEntries(admin, { account: q.account, from: q.from, to: q.to })) {
    if (++scanned > MAX_SCAN) {
      truncated = true;
      break;
    }
    if (e.units.kind === 'credit') continue;
    const group = q.groupBy === 'day' ? new Date(e.at).toISOString().slice(0, 10) : q.groupBy === 'model' ? e.model : e.keyId;
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
