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
import { ledgerEntries, usageReport } from '../usage.js';
import { type AdminContext, type Call, notFound, timeParam } from './context.js';

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
    at: e.at,
  };
}

export async function ledger(x: AdminContext, c: Call<undefined, typeof S.ledgerQuery>) {
  const q = c.query;
  await x.account(q.account);
  const filter = { account: q.account, key: q.key, from: timeParam(q.from), to: timeParam(q.to) };
  if (q.format === 'csv' || q.format === 'jsonl') {
    // Checked before the first byte: a bad filter is still a 400 envelope.
    await x.admin.ledger({ ...filter, limit: 1 });
    return exportResponse(x, q.format, filter);
  }
  const page = await x.admin.ledger({ ...filter, cursor: q.cursor, limit: q.limit ?? 100 });
  return { object: 'list', data: page.entries.map(entryView), nextCursor: page.nextCursor, more: page.more };
}

function exportResponse(x: AdminContext, format: 'csv' | 'jsonl', filter: Parameters<typeof ledgerEntries>[1]): Response {
  const encoder = new TextEncoder();
  const entries = ledgerEntries(x.admin, filter);
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

export async function usage(x: AdminContext, c: Call<undefined, typeof S.usageQuery>) {
  const q = c.query;
  await x.account(q.account);
  const r = await usageReport(x.admin, { account: q.account, groupBy: q.group_by, from: timeParam(q.from), to: timeParam(q.to) });
  return { object: 'list', groupBy: q.group_by, data: r.rows, totalUsd: r.totalUsd, truncated: r.truncated };
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
  if (account !== undefined) await x.account(account);
  return x.admin.audit(account === undefined ? {} : { account });
}
