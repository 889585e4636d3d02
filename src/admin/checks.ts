/** Checks the admin's methods share: an id as it may be created, and an account that exists. */
import { shownId } from '../auth/keys.js';
import { ENTITY_ID } from '../options/values.js';
import type { Services } from '../services.js';
import { AdminError } from './admin-error.js';

/** An account, brand or document id as it may be created (`.` and `..` never: they are path segments). */
export function checkId(field: string, id: string): void {
  if (!ENTITY_ID.test(id)) throw new AdminError(`${field}: must be 1-64 letters, digits, "_", "-" or ".", and not "." or ".."; got ${JSON.stringify(id.slice(0, 80))}`);
}

/** The account `id`, or a 404 naming `param` (the field that named it). */
export async function requireAccount(core: Services, id: string, param?: string) {
  const account = await core.stores.accounts.get(id);
  if (!account) throw new AdminError(`No account "${shownId(id)}".`, param);
  return account;
}
