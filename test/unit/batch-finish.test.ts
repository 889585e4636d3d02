/**
 * A batch's end as written: a cancel that came while its last lines ran (the batch was
 * `cancelling` when they all finished) ends it `cancelled`, stamped as cancelled only, with its
 * files and counts; a batch already over is left as it is, and no file of this end is left
 * behind. On the memory stores.
 */
import { describe, expect, it } from 'vitest';
import { finishBatch } from '../../src/operations/batches/finish.js';
import type { Services } from '../../src/services.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { BatchRecord } from '../../src/stores/types.js';
import { batchRecord } from '../helpers/batches.js';

const NOW_S = 1_700_000_500;

const record = (overrides: Partial<BatchRecord>) =>
  batchRecord('acct_finish', { id: 'batch_finish', keyId: 'key_finish', inputFileId: 'file_in', model: 'test/chat', ownerUntil: NOW_S * 1000 + 60_000, ...overrides });

async function setUp(overrides: Partial<BatchRecord>) {
  const stores = createMemoryStores();
  const batch = record(overrides);
  await stores.batches.createBatch(batch);
  const line = (customId: string, n: number) => ({ customId, line: n, ok: true, text: JSON.stringify({ id: `l${n}`, custom_id: customId, response: { status_code: 200 }, error: null }) });
  await stores.batches.addLine(batch.accountId, batch.id, line('a', 1));
  await stores.batches.addLine(batch.accountId, batch.id, line('b', 2));
  const core = { stores, now: () => NOW_S * 1000 } as unknown as Services;
  return { core, batch, stores };
}

describe('finishBatch', () => {
  it('a batch cancelled while its last lines ran ends cancelled, not completed too', async () => {
    const { core, batch } = await setUp({ status: 'cancelling', cancellingAt: 1_700_000_400 });
    const done = await finishBatch(core, batch, 'completed');
    expect(done).toMatchObject({ status: 'cancelled', cancelledAt: NOW_S, completedAt: null, requestCounts: { total: 2, completed: 2, failed: 0 }, owner: null });
    expect(done!.outputFileId).toMatch(/^file-/);
  });

  it('a batch that ran to its end is completed, stamped as such', async () => {
    const { core, batch } = await setUp({});
    const done = await finishBatch(core, batch, 'completed');
    expect(done).toMatchObject({ status: 'completed', completedAt: NOW_S, cancelledAt: null, finalizingAt: NOW_S });
  });

  it('a batch already over is left as it is', async () => {
    const { core, batch, stores } = await setUp({ status: 'failed', failedAt: 1_700_000_100 });
    expect(await finishBatch(core, batch, 'completed')).toMatchObject({ status: 'failed', failedAt: 1_700_000_100, completedAt: null, outputFileId: null });
    expect(await stores.batches.getBatch(batch.accountId, batch.id)).toMatchObject({ status: 'failed', rev: 0 });
    // The files this end wrote name nobody's lines: not left in the account's list.
    expect(await stores.batches.listFiles(batch.accountId, { order: 'desc', limit: 10 })).toEqual([]);
  });
});
