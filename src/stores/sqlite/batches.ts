import { BATCH_DONE, type BatchLine, type BatchRecord, type BatchStore, type FileRecord, type RecordPage } from '../batch-types.js';
import type { SqliteContext } from './connection.js';

/**
 * Files and batches: one row per record, the record as JSON beside what lists and finds it
 * (account, creation, whether a batch is over, its revision); a file's bytes in a row of their
 * own, read only when asked for. `swapBatch` is one UPDATE conditioned on the revision.
 */
const POSITION = 'created_at, id';

function pageArgs(page: RecordPage): [number, string, number] {
  const asc = page.order === 'asc';
  return [page.after?.createdAt ?? (asc ? -1 : Number.MAX_SAFE_INTEGER), page.after?.id ?? (asc ? '' : '\uffff'), Math.max(0, page.limit)];
}

export function createSqliteBatches(ctx: SqliteContext): BatchStore {
  const q = {
    putFile: ctx.prepare('INSERT INTO files (id, account_id, created_at, data) VALUES (?, ?, ?, ?)'),
    putContent: ctx.prepare('INSERT INTO file_contents (id, content) VALUES (?, ?)'),
    getFile: ctx.prepare('SELECT data FROM files WHERE id = ? AND account_id = ?'),
    content: ctx.prepare('SELECT c.content FROM files f JOIN file_contents c ON c.id = f.id WHERE f.id = ? AND f.account_id = ?'),
    filesAsc: ctx.prepare(`SELECT data FROM files WHERE account_id = ? AND (${POSITION}) > (?, ?) AND (? IS NULL OR json_extract(data, '$.purpose') = ?) ORDER BY ${POSITION} LIMIT ?`),
    filesDesc: ctx.prepare(
      `SELECT data FROM files WHERE account_id = ? AND (${POSITION}) < (?, ?) AND (? IS NULL OR json_extract(data, '$.purpose') = ?) ORDER BY created_at DESC, id DESC LIMIT ?`,
    ),
    deleteFile: ctx.prepare('DELETE FROM files WHERE id = ? AND account_id = ?'),
    deleteContent: ctx.prepare('DELETE FROM file_contents WHERE id = ?'),
    putBatch: ctx.prepare('INSERT INTO batches (id, account_id, created_at, done, rev, data) VALUES (?, ?, ?, ?, ?, ?)'),
    getBatch: ctx.prepare('SELECT data FROM batches WHERE id = ? AND account_id = ?'),
    swap: ctx.prepare('UPDATE batches SET done = ?, rev = ?, data = ? WHERE id = ? AND account_id = ? AND rev = ?'),
    batchesAsc: ctx.prepare(`SELECT data FROM batches WHERE account_id = ? AND (${POSITION}) > (?, ?) ORDER BY ${POSITION} LIMIT ?`),
    batchesDesc: ctx.prepare(`SELECT data FROM batches WHERE account_id = ? AND (${POSITION}) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT ?`),
    running: ctx.prepare('SELECT data FROM batches WHERE done = 0'),
    addLine: ctx.prepare('INSERT INTO batch_lines (batch_id, custom_id, data) SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM batches WHERE id = ? AND account_id = ?) ON CONFLICT DO NOTHING'),
    lines: ctx.prepare('SELECT l.data FROM batch_lines l JOIN batches b ON b.id = l.batch_id WHERE l.batch_id = ? AND b.account_id = ?'),
  };
  const parse = <T>(row: unknown) => JSON.parse((row as { data: string }).data) as T;
  const done = (b: BatchRecord) => (BATCH_DONE.includes(b.status) ? 1 : 0);

  return {
    async putFile(file: FileRecord, content: Uint8Array) {
      await ctx.write('putFile', () => {
        q.putFile.run(file.id, file.accountId, file.createdAt, JSON.stringify(file));
        q.putContent.run(file.id, Buffer.from(content.buffer, content.byteOffset, content.byteLength));
      });
    },
    async getFile(accountId, id) {
      const row = ctx.run('getFile', () => q.getFile.get(id, accountId));
      return row ? parse<FileRecord>(row) : null;
    },
    async fileContent(accountId, id) {
      const row = ctx.run('fileContent', () => q.content.get(id, accountId)) as { content: Buffer } | undefined;
      return row ? new Uint8Array(row.content) : null;
    },
    async listFiles(accountId, page) {
      const [created, id, limit] = pageArgs(page);
      const purpose = page.purpose ?? null;
      return ctx.run('listFiles', () => (page.order === 'asc' ? q.filesAsc : q.filesDesc).all(accountId, created, id, purpose, purpose, limit).map((r) => parse<FileRecord>(r)));
    },
    async deleteFile(accountId, id) {
      return ctx.write('deleteFile', () => {
        if (q.deleteFile.run(id, accountId).changes === 0) return false;
        q.deleteContent.run(id);
        return true;
      });
    },
    async createBatch(batch) {
      await ctx.write('createBatch', () => q.putBatch.run(batch.id, batch.accountId, batch.createdAt, done(batch), batch.rev, JSON.stringify(batch)));
    },
    async getBatch(accountId, id) {
      const row = ctx.run('getBatch', () => q.getBatch.get(id, accountId));
      return row ? parse<BatchRecord>(row) : null;
    },
    async swapBatch(next) {
      const written = { ...next, rev: next.rev + 1 };
      const changed = await ctx.write('swapBatch', () => q.swap.run(done(written), written.rev, JSON.stringify(written), next.id, next.accountId, next.rev).changes);
      return changed === 1 ? written : null;
    },
    async listBatches(accountId, page) {
      const [created, id, limit] = pageArgs(page);
      return ctx.run('listBatches', () => (page.order === 'asc' ? q.batchesAsc : q.batchesDesc).all(accountId, created, id, limit).map((r) => parse<BatchRecord>(r)));
    },
    async unfinishedBatches() {
      return ctx.run('unfinishedBatches', () => q.running.all().map((r) => parse<BatchRecord>(r)));
    },
    async addLine(accountId, batchId, line: BatchLine) {
      return ctx.write('addBatchLine', () => q.addLine.run(batchId, line.customId, JSON.stringify(line), batchId, accountId).changes === 1);
    },
    async lines(accountId, batchId) {
      return ctx.run('batchLines', () => q.lines.all(batchId, accountId).map((r) => parse<BatchLine>(r)));
    },
  };
}
