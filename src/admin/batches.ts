/** An account's batches for operators (the admin API, the console and the CLI): newest first, with the key that created each. */
import { batchView } from '../operations/batches/views.js';
import type { Stores } from '../stores/types.js';

export async function accountBatches(stores: Pick<Stores, 'batches'>, accountId: string, limit = 100): Promise<{ object: 'list'; data: Record<string, unknown>[] }> {
  const batches = await stores.batches.listBatches(accountId, { order: 'desc', limit });
  return { object: 'list', data: batches.map((b) => ({ ...batchView(b), account: b.accountId, key: b.keyId })) };
}
