/** Admin API handlers for API keys: list, create, read, delete, disable, enable, rotate, cap, limits. */
import type * as S from '../schemas.js';
import type { AdminContext, Call } from './context.js';

export async function list(x: AdminContext, c: Call<undefined, typeof S.keysQuery>) {
  await x.account(c.query.account, 'account');
  return { object: 'list', data: await x.admin.listKeys(c.query.account) };
}

/** The answer holds the plain key: it is shown this once, only its digest is stored. */
export async function create(x: AdminContext, c: Call<typeof S.createKeyBody>) {
  await x.account(c.body.account, 'account');
  const created = await x.admin.createKey(c.body);
  return { ...(await x.key(created.id)), key: created.key };
}

export function get(x: AdminContext, c: Call) {
  return x.key(c.params.id!);
}

export async function remove(x: AdminContext, c: Call) {
  await x.key(c.params.id!);
  await x.admin.deleteKey(c.params.id!);
  return { id: c.params.id, deleted: true };
}

export async function disable(x: AdminContext, c: Call) {
  await x.key(c.params.id!);
  await x.admin.disableKey(c.params.id!);
  return x.key(c.params.id!);
}

export async function enable(x: AdminContext, c: Call) {
  await x.key(c.params.id!);
  await x.admin.enableKey(c.params.id!);
  return x.key(c.params.id!);
}

export async function rotate(x: AdminContext, c: Call) {
  await x.key(c.params.id!);
  const r = await x.admin.rotateKey(c.params.id!);
  return { ...(await x.key(r.id)), key: r.key };
}

export async function setLimits(x: AdminContext, c: Call<typeof S.keyLimitsBody>) {
  await x.key(c.params.id!);
  return x.admin.setKeyLimits(c.params.id!, c.body);
}

export async function setMonthlyCap(x: AdminContext, c: Call<typeof S.monthlyCapBody>) {
  await x.key(c.params.id!);
  return x.admin.setMonthlyCap(c.params.id!, c.body.monthlyCapUsd);
}
