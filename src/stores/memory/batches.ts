import { BATCH_DONE, type BatchLine, type BatchRecord, type BatchStore, type FileRecord } from '../batch-types.js';
import { pageRecords } from '../record-page.js';

/** Files and batches in one process; every method is synchronous underneath, so each is atomic. */
export function createMemoryBatches(): BatchStore {
  const files = new Map<string, { file: FileRecord; content: Uint8Array }>();
  const batches = new Map<string, BatchRecord>();
  const lines = new Map<string, Map<string, BatchLine>>();
  const mine = <T extends { accountId: string }>(r: T | undefined, accountId: string) => (r && r.accountId === accountId ? r : undefined);

  return {
    async putFile(file, content) {
      files.set(file.id, { file: { ...file }, content: content.slice() });
    },
    async getFile(accountId, id) {
      const f = files.get(id);
      return f && f.file.accountId === accountId ? { ...f.file } : null;
    },
    async fileContent(accountId, id) {
      const f = files.get(id);
      return f && f.file.accountId === accountId ? f.content.slice() : null;
    },
    async listFiles(accountId, page) {
      const own = [...files.values()].map((f) => f.file).filter((f) => f.accountId === accountId);
      return pageRecords(own, page).map((f) => ({ ...f }));
    },
    async deleteFile(accountId, id) {
      const f = files.get(id);
      if (!f || f.file.accountId !== accountId) return false;
      files.delete(id);
      return true;
    },
    async createBatch(batch) {
      batches.set(batch.id, structuredClone(batch));
    },
    async getBatch(accountId, id) {
      const b = mine(batches.get(id), accountId);
      return b ? structuredClone(b) : null;
    },
    async swapBatch(next) {
      const stored = mine(batches.get(next.id), next.accountId);
      if (!stored || stored.rev !== next.rev) return null;
      const written = { ...structuredClone(next), rev: next.rev + 1 };
      batches.set(next.id, written);
      return structuredClone(written);
    },
    async listBatches(accountId, page) {
      const own = [...batches.values()].filter((b) => b.accountId === accountId);
      return pageRecords(own, { ...page, purpose: undefined }).map((b) => structuredClone(b));
    },
    async unfinishedBatches() {
      return [...batches.values()].filter((b) => !BATCH_DONE.includes(b.status)).map((b) => structuredClone(b));
    },
    async addLine(accountId, batchId, line) {
      if (!mine(batches.get(batchId), accountId)) return false;
      let done = lines.get(batchId);
      if (!done) lines.set(batchId, (done = new Map()));
      if (done.has(line.customId)) return false;
      done.set(line.customId, { ...line });
      return true;
    },
    async lines(accountId, batchId) {
      if (!mine(batches.get(batchId), accountId)) return [];
      return [...(lines.get(batchId)?.values() ?? [])].map((l) => ({ ...l }));
    },
  };
}
