/** Admin API handlers for accounts and their wallets: create, read, credit, adjust, grants, budgets. */
import { GatewayError } from '../../errors.js';
import type * as S from '../schemas.js';
import type { AdminContext, Call } from './context.js';

/**
 * A page of accounts in id order, those whose id contains `search` (any case) when given.
 * Only the page's wallets are read, so thousands of accounts cost one list of ids per page.
 */
export async function list(x: AdminContext, c: Call<undefined, typeof S.accountsQuery>) {
  const { search, cursor, limit } = c.query;
  const needle = search?.trim().toLowerCase() ?? '';
  const ids = (await x.stores.accounts.list())
    .map((a) => a.id)
    .filter((id) => needle === '' || id.toLowerCase().includes(needle))
    .sort();
  const from = cursor === undefined ? 0 : ids.findIndex((id) => id > cursor);
  const page = from < 0 ? [] : ids.slice(from, from + limit);
  const more = from >= 0 && from + limit < ids.length;
  const data = await Promise.all(page.map(async (id) => {
    const { openHolds: _holds, ...a } = await x.account(id);
    return a;
  }));
  return { object: 'list', data, total: ids.length, nextCursor: page.at(-1) ?? cursor ?? null, more };
}

export async function create(x: AdminContext, c: Call<typeof S.createAccountBody>) {
  const b = c.body;
  const { created } = await x.admin.createAccount({ id: b.id, walletUsd: b.walletUsd ?? 0, grants: b.grants ?? [], budgets: b.budgets ?? [] });
  if (!created) throw new GatewayError('conflict', `Account "${b.id}" already exists.`, { status: 409, type: 'invalid_request_error', param: 'id' });
  return x.account(b.id);
}

export function get(x: AdminContext, c: Call) {
  return x.account(c.params.id!);
}

/** A top-up (credits): one ledger entry with its reason. */
export async function credit(x: AdminContext, c: Call<typeof S.creditBody>) {
  await x.account(c.params.id!);
  return x.admin.credit(c.params.id!, c.body);
}

/** A signed adjustment: one ledger entry with its reason, marked as an adjustment. */
export async function adjust(x: AdminContext, c: Call<typeof S.adjustmentBody>) {
  await x.account(c.params.id!);
  return x.admin.credit(c.params.id!, { ...c.body, adjustment: true });
}

export async function setBudgets(x: AdminContext, c: Call<typeof S.accountBudgetsBody>) {
  await x.account(c.params.id!);
  await x.admin.setAccountBudgets(c.params.id!, c.body.budgets);
  return x.account(c.params.id!);
}

export async function setGrants(x: AdminContext, c: Call<typeof S.grantsBody>) {
  await x.account(c.params.id!);
  await x.admin.setGrants(c.params.id!, c.body.models);
  return x.account(c.params.id!);
}
