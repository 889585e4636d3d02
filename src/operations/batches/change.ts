/** Writing a batch record against concurrent writers (other instances, a cancel). */
import type { BatchRecord, BatchStore } from '../../stores/types.js';

/**
 * Applies `edit` to the stored batch until a compare-and-set lands: `edit` sees the latest
 * record each time and returns the next one, or null for no change. Returns the record as
 * stored after, or null when the batch is gone.
 */
export async function changeBatch(store: BatchStore, batch: Pick<BatchRecord, 'accountId' | 'id'>, edit: (b: BatchRecord) => BatchRecord | null): Promise<BatchRecord | null> {
  let current = await store.getBatch(batch.accountId, batch.id);
  for (let attempt = 0; current && attempt < 100; attempt++) {
    const next = edit(current);
    if (!next) return current;
    const written = await store.swapBatch(next);
    if (written) return written;
    current = await store.getBatch(batch.accountId, batch.id);
  }
  if (current) throw new Error(`batch ${batch.id}: too many concurrent writes`);
  return null;
}
