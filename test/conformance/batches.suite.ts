import { describe, expect, it } from 'vitest';
import type { BatchRecord, FileRecord } from '../../src/stores/types.js';
import { batchRecord } from '../helpers/batches.js';
import { type MakeStores, uid, useHarness } from './harness.js';

function file(accountId: string, overrides: Partial<FileRecord> = {}): FileRecord {
  return { id: uid('file'), accountId, purpose: 'batch', filename: 'in.jsonl', bytes: 3, createdAt: 1_700_000_000, ...overrides };
}

function batch(accountId: string, overrides: Partial<BatchRecord> = {}): BatchRecord {
  return batchRecord(accountId, {
    id: uid('batch'),
    keyId: uid('key'),
    inputFileId: uid('file'),
    metadata: { team: 'evals' },
    held: '123456789012345678901',
    ...overrides,
  });
}

/** The batch store's semantics, the same on every driver. */
export function batchesSuite(name: string, make: MakeStores): void {
  describe(`${name}: batches store`, () => {
    const h = useHarness(make);

    it('keeps a file and its exact bytes, for its account only, until deleted', async () => {
      const { batches } = h().stores;
      const a = uid('acct');
      const bytes = new Uint8Array([0, 255, 10, 123, 34, 0xe2, 0x82, 0xac]);
      const f = file(a, { bytes: bytes.length });
      await batches.putFile(f, bytes);
      expect(await batches.getFile(a, f.id)).toEqual(f);
      expect(await batches.fileContent(a, f.id)).toEqual(bytes);
      expect(await batches.getFile(uid('other'), f.id)).toBeNull();
      expect(await batches.fileContent(uid('other'), f.id)).toBeNull();
      expect(await batches.deleteFile(uid('other'), f.id)).toBe(false);
      expect(await batches.deleteFile(a, f.id)).toBe(true);
      expect(await batches.deleteFile(a, f.id)).toBe(false);
      expect(await batches.getFile(a, f.id)).toBeNull();
      expect(await batches.fileContent(a, f.id)).toBeNull();
    });

    it('lists an account’s files in (createdAt, id) order, paged, by purpose', async () => {
      const { batches } = h().stores;
      const a = uid('acct');
      const files = [
        file(a, { id: 'file_b', createdAt: 10 }),
        file(a, { id: 'file_a', createdAt: 10 }),
        file(a, { id: 'file_c', createdAt: 5, purpose: 'batch_output' }),
        file(a, { id: 'file_d', createdAt: 20 }),
      ];
      for (const f of files) await batches.putFile(f, new Uint8Array([1]));
      await batches.putFile(file(uid('other'), { id: 'file_x', createdAt: 15 }), new Uint8Array([1]));
      const ids = (fs: FileRecord[]) => fs.map((f) => f.id);
      expect(ids(await batches.listFiles(a, { order: 'desc', limit: 10 }))).toEqual(['file_d', 'file_b', 'file_a', 'file_c']);
      expect(ids(await batches.listFiles(a, { order: 'asc', limit: 2 }))).toEqual(['file_c', 'file_a']);
      expect(ids(await batches.listFiles(a, { order: 'desc', limit: 2, after: { createdAt: 10, id: 'file_b' } }))).toEqual(['file_a', 'file_c']);
      expect(ids(await batches.listFiles(a, { order: 'desc', limit: 10, purpose: 'batch' }))).toEqual(['file_d', 'file_b', 'file_a']);
    });

    it('swapBatch is a compare-and-set on the revision: of two writers of one revision, one wins', async () => {
      const { batches } = h().stores;
      const a = uid('acct');
      const b = batch(a);
      await batches.createBatch(b);
      expect(await batches.getBatch(a, b.id)).toEqual(b);
      expect(await batches.getBatch(uid('other'), b.id)).toBeNull();
      const results = await Promise.all([
        batches.swapBatch({ ...b, status: 'cancelling', cancellingAt: 1 }),
        batches.swapBatch({ ...b, status: 'completed', completedAt: 2 }),
      ]);
      const won = results.filter((r) => r !== null);
      expect(won).toHaveLength(1);
      expect(won[0]!.rev).toBe(1);
      expect(await batches.getBatch(a, b.id)).toEqual(won[0]);
      // A stale revision changes nothing; another account's id names no batch.
      expect(await batches.swapBatch({ ...b, status: 'failed' })).toBeNull();
      expect(await batches.swapBatch({ ...won[0]!, accountId: uid('other') })).toBeNull();
      expect(await batches.swapBatch({ ...b, id: uid('missing') })).toBeNull();
    });

    it('lists the batches not yet over, and each account’s batches newest first', async () => {
      const { batches } = h().stores;
      const a = uid('acct');
      const running = batch(a, { id: 'batch_2', createdAt: 2 });
      const over = batch(a, { id: 'batch_1', createdAt: 1 });
      await batches.createBatch(running);
      await batches.createBatch(over);
      const done = await batches.swapBatch({ ...over, status: 'completed' });
      expect(done?.status).toBe('completed');
      const unfinished = (await batches.unfinishedBatches()).filter((b) => b.accountId === a);
      expect(unfinished.map((b) => b.id)).toEqual(['batch_2']);
      expect((await batches.listBatches(a, { order: 'desc', limit: 10 })).map((b) => b.id)).toEqual(['batch_2', 'batch_1']);
      expect((await batches.listBatches(a, { order: 'desc', limit: 10, after: { createdAt: 2, id: 'batch_2' } })).map((b) => b.id)).toEqual(['batch_1']);
      expect(await batches.listBatches(uid('other'), { order: 'desc', limit: 10 })).toEqual([]);
    });

    it('records each line of a batch once per custom id: the first write stays', async () => {
      const { batches } = h().stores;
      const a = uid('acct');
      const b = batch(a);
      await batches.createBatch(b);
      const first = { customId: 'req-1', line: 1, ok: true, text: '{"custom_id":"req-1"}' };
      const results = await Promise.all([batches.addLine(a, b.id, first), batches.addLine(a, b.id, { ...first, ok: false, text: 'second' })]);
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(await batches.addLine(a, b.id, { customId: 'req-2', line: 2, ok: false, text: '{}' })).toBe(true);
      const lines = (await batches.lines(a, b.id)).sort((x, y) => x.line - y.line);
      expect(lines.map((l) => l.customId)).toEqual(['req-1', 'req-2']);
      expect(lines[0]!.text === first.text || lines[0]!.text === 'second').toBe(true);
      // Another account, or a batch that does not exist, has no lines and takes none.
      expect(await batches.lines(uid('other'), b.id)).toEqual([]);
      expect(await batches.addLine(uid('other'), b.id, { ...first, customId: 'req-3' })).toBe(false);
      expect(await batches.addLine(a, uid('missing'), first)).toBe(false);
    });
  });
}
