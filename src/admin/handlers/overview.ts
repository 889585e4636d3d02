/**
 * Admin API handlers for the business at a glance: every account's spend over a date range
 * (total, top accounts and models, per day), and an account's latest ledger entries.
 */
import { overviewReport } from '../usage.js';
import type * as S from '../schemas.js';
import { books, entryView, filterOf } from './activity.js';
import type { AdminContext, Call } from './context.js';

export async function overview(x: AdminContext, c: Call<undefined, typeof S.overviewQuery>) {
  const q = c.query;
  const [report, accounts] = await Promise.all([overviewReport(books(x), { ...(await filterOf(x, q)), top: q.top }), x.stores.accounts.list()]);
  return { object: 'overview', accounts: accounts.length, ...report };
}

/** The latest entries, newest first: the store reads only those, however long the ledger is. */
export async function latestLedger(x: AdminContext, c: Call<undefined, typeof S.latestLedgerQuery>) {
  await x.account(c.query.account, 'account');
  return { object: 'list', data: (await x.stores.billing.latestLedger(c.query.account, c.query.limit)).map(entryView) };
}
