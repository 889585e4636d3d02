/**
 * Admin API handlers for what accounts did: the ledger (a page, or an export streamed as CSV
 * or JSON lines), usage reports, and image and video jobs.
 */
import { Response } from '@whatwg-node/server';
import { formatUsd } from '../../billing/money.js';
import { jobView } from '../../jobs/runner.js';
import type { LedgerEntry } from '../../stores/types.js';
import { ledgerHeader, ledgerLine } from '../ledger-export.js';
import type * as S from '../schemas.js';
import { type Books, type LedgerFilter, ledgerEntries, ledgerPageAll, usageReport } from '../usage.js';
import { whenToUnixMs } from '../accounts.js';
import { type AdminContext, type Call, notFound } from './context.js';

/** Entries an export reads and writes per chunk of its stream. */
const EXPORT_CHUNK = 500;

/** A ledger entry on the wire: exact USD strings, never bigints. */
export function entryView(e: LedgerEntry) {
  return {
    id: e.id,
    account: e.accountId,
    key: e.keyId || null,
    model: e.model || null,
    units: e.units,
    costUsd: formatUsd(e.cost),
    heldUsd: formatUsd(e.held),
    exceededHold: e.exceededHold,
    measured: e.measured,
    upstream: e.upstream ?? null,
    // USD per unit, by the part of the units each prices: what the audit re-derives the cost from.
    prices: e.prices ?? null,
    at: e.at,
  };
}

/** The ledger as the handlers read it: every account's id in ascending order. */
export function books(x: AdminContext): Books {
  return { admin: x.admin, accountIds: async () => (await x.stores.accounts.list()).map((a) => a.id).sort() };
}

/** A query's account and times: the account must exist; ages ("24h") count back from now. */
export async function filterOf(x: AdminContext, q: { account?: string | undefined; from?: string | undefined; to?: string | undefined }) {
  if (q.account !== undefined) await x.account(q.account, 'account');
  const now = x.core.now();
  return {
    ...(q.account === undefined ? {} : { account: q.account }),
    ...(q.from === undefined ? {} : { from: whenToUnixMs(q.from, 'from', now) }),
    ...(q.to === undefined ? {} : { to: whenToUnixMs(q.to, 'to', now) }),
  };
}

/** One account's ledger, or every account's without `account` (paged account by account). */
export async function ledger(x: AdminContext, c: Call<undefined, typeof S.ledgerQuery>) {
  const q = c.query;
  const filter: LedgerFilter = { ...(await filterOf(x, q)), ...(q.key === undefined ? {} : { key: q.key }) };
  const { account } = filter;
  const page = (p: { cursor?: string; limit: number }) =>
    account === undefined ? ledgerPageAll(books(x), { ...filter, ...p }) : x.admin.ledger({ ...filter, account, ...p });
  if (q.format === 'csv' || q.format === 'jsonl') {
    // Checked before the first byte: a bad filter is still a 400 envelope.
    await page({ limit: 1 });
    return exportResponse(x, q.format, filter);
  }
  const got = await page({ ...(q.cursor === undefined ? {} : { cursor: q.cursor }), limit: q.limit ?? 100 });
  return { object: 'list', data: got.entries.map(entryView), nextCursor: got.nextCursor, more: got.more };
}

function exportResponse(x: AdminContext, format: 'csv' | 'jsonl', filter: LedgerFilter): Response {
  const encoder = new TextEncoder();
  const entries = ledgerEntries(books(x), filter);
  const header = ledgerHeader(format);
  const stream = new ReadableStream<Uint8Array>({
    start(ctrl) {
      if (header) ctrl.enqueue(encoder.encode(header));
    },
    async pull(ctrl) {
      const lines: string[] = [];
      for (let i = 0; i < EXPORT_CHUNK; i++) {
        const r = await entries.next();
        if (r.done) break;
        lines.push(ledgerLine(r.value, format));
      }
      if (lines.length) ctrl.enqueue(encoder.encode(lines.join('')));
      if (lines.length < EXPORT_CHUNK) ctrl.close();
    },
  });
  return new Response(stream, {
    status: 200,
    headers: { 'content-type': format === 'csv' ? 'text/csv; charset=utf-8' : 'application/x-ndjson' },
  });
}

/** Usage of one account, or of every account without `account`; by day unless `group_by`. */
export async function usage(x: AdminContext, c: Call<undefined, typeof S.usageQuery>) {
  const q = c.query;
  const r = await usageReport(books(x), { ...(await filterOf(x, q)), groupBy: q.group_by });
  const data = q.group_by === 'key' ? await withKeyLabels(x, r.rows) : r.rows;
  return { object: 'list', groupBy: q.group_by, data, totalUsd: r.totalUsd, truncated: r.truncated };
}

/** Rows by key with each key's label and account (null for a key since deleted): ids alone say little. */
async function withKeyLabels<R extends { group: string }>(x: AdminContext, rows: R[]) {
  return Promise.all(
    rows.map(async (row) => {
      const k = row.group === '' ? null : await x.stores.keys.get(row.group);
      return { ...row, label: k?.label ?? null, account: k?.accountId ?? null };
    }),
  );
}

export async function listJobs(x: AdminContext, c: Call<undefined, typeof S.jobsQuery>) {
  const jobs = (await x.stores.jobs.listUnfinished()).filter((j) => j.accountId === c.query.account);
  return { object: 'list', data: jobs.map((j) => ({ ...jobView(j), account: j.accountId, key: j.keyId })) };
}

export async function getJob(x: AdminContext, c: Call) {
  const j = await x.stores.jobs.get(c.params.id!);
  if (!j) throw notFound('job', c.params.id!);
  return { ...jobView(j), account: j.accountId, key: j.keyId };
}

/** The audit of the books: every account's, or one (404 when it does not exist). */
export async function audit(x: AdminContext, c: Call<undefined, typeof S.auditQuery>) {
  const account = c.query.account;
  if (account !== undefined) await x.account(account, 'account');
  return x.admin.audit(account === undefined ? {} : { account });
}
