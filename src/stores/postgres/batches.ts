import { BATCH_DONE, type BatchLine, type BatchRecord, type BatchStore, type FileRecord, type RecordPage } from '../batch-types.js';
import { holdable, type PgContext } from './connection.js';
import { jsonText } from '../json-text.js';

/**
 * Files and batches: one row per record, the record as jsonb beside what lists and finds it
 * (account, creation, whether a batch is over, its revision); a file's bytes in a row of their
 * own, written before the file's row (a listed file always has its bytes) and read only when
 * asked for. `swapBatch` is one UPDATE conditioned on the revision.
 */
function pageArgs(page: RecordPage): [number, string, number] {
  const asc = page.order === 'asc';
  return [page.after?.createdAt ?? (asc ? -1 : Number.MAX_SAFE_INTEGER), page.after?.id ?? (asc ? '' : '\u007f'), Math.max(0, page.limit)];
}

const position = 'created_at, id COLLATE "C"';
const order = (asc: boolean) => (asc ? 'created_at ASC, id COLLATE "C" ASC' : 'created_at DESC, id COLLATE "C" DESC');

export function createPostgresBatches(ctx: PgContext): BatchStore {
  const { s } = ctx;
  const done = (b: BatchRecord) => BATCH_DONE.includes(b.status);
  return {
    async putFile(file: FileRecord, content: Uint8Array) {
      await ctx.q('putFileContent', `INSERT INTO ${s}.file_contents (id, content) VALUES ($1, decode($2, 'base64'))`, [
        file.id,
        Buffer.from(content.buffer, content.byteOffset, content.byteLength).toString('base64'),
      ]);
      await ctx.q('putFile', `INSERT INTO ${s}.files (id, account_id, created_at, data) VALUES ($1, $2, $3, $4::text::jsonb)`, [file.id, file.accountId, file.createdAt, jsonText(file)]);
    },
    async getFile(accountId, id) {
      if (!holdable(accountId, id)) return null;
      const r = await ctx.one<{ data: FileRecord }>('getFile', `SELECT data FROM ${s}.files WHERE id = $1 AND account_id = $2`, [id, accountId]);
      return r ? r.data : null;
    },
    async fileContent(accountId, id) {
      if (!holdable(accountId, id)) return null;
      const r = await ctx.one<{ content: Buffer }>(
        'fileContent',
        `SELECT c.content FROM ${s}.files f JOIN ${s}.file_contents c ON c.id = f.id WHERE f.id = $1 AND f.account_id = $2`,
        [id, accountId],
      );
      return r ? new Uint8Array(r.content) : null;
    },
    async listFiles(accountId, page) {
      if (!holdable(accountId)) return [];
      const [created, id, limit] = pageArgs(page);
      const asc = page.order === 'asc';
      const rows = await ctx.q<{ data: FileRecord }>(
        'listFiles',
        `SELECT data FROM ${s}.files WHERE account_id = $1 AND (${position}) ${asc ? '>' : '<'} ($2::bigint, $3::text COLLATE "C")
           AND ($4::text IS NULL OR data ->> 'purpose' = $4::text) ORDER BY ${order(asc)} LIMIT $5`,
        [accountId, created, id, page.purpose ?? null, limit],
      );
      return rows.map((r) => r.data);
    },
    async deleteFile(accountId, id) {
      if (!holdable(accountId, id)) return false;
      const r = await ctx.one('deleteFile', `DELETE FROM ${s}.files WHERE id = $1 AND account_id = $2 RETURNING id`, [id, accountId]);
      if (!r) return false;
      await ctx.q('deleteFileContent', `DELETE FROM ${s}.file_contents WHERE id = $1`, [id]);
      return true;
    },
    async createBatch(batch) {
      await ctx.q('createBatch', `INSERT INTO ${s}.batches (id, account_id, created_at, done, rev, data) VALUES ($1, $2, $3, $4, $5, $6::text::jsonb)`, [
        batch.id,
        batch.accountId,
        batch.createdAt,
        done(batch),
        batch.rev,
        jsonText(batch),
      ]);
    },
    async getBatch(accountId, id) {
      if (!holdable(accountId, id)) return null;
      const r = await ctx.one<{ data: BatchRecord }>('getBatch', `SELECT data FROM ${s}.batches WHERE id = $1 AND account_id = $2`, [id, accountId]);
      return r ? r.data : null;
    },
    async swapBatch(next) {
      const written = { ...next, rev: next.rev + 1 };
      const r = await ctx.one(
        'swapBatch',
        `UPDATE ${s}.batches SET done = $1, rev = $2, data = $3::text::jsonb WHERE id = $4 AND account_id = $5 AND rev = $6 RETURNING id`,
        [done(written), written.rev, jsonText(written), next.id, next.accountId, next.rev],
      );
      return r ? written : null;
    },
    async listBatches(accountId, page) {
      if (!holdable(accountId)) return [];
      const [created, id, limit] = pageArgs(page);
      const asc = page.order === 'asc';
      const rows = await ctx.q<{ data: BatchRecord }>(
        'listBatches',
        `SELECT data FROM ${s}.batches WHERE account_id = $1 AND (${position}) ${asc ? '>' : '<'} ($2::bigint, $3::text COLLATE "C") ORDER BY ${order(asc)} LIMIT $4`,
        [accountId, created, id, limit],
      );
      return rows.map((r) => r.data);
    },
    async unfinishedBatches() {
      const rows = await ctx.q<{ data: BatchRecord }>('unfinishedBatches', `SELECT data FROM ${s}.batches WHERE NOT done`);
      return rows.map((r) => r.data);
    },
    async addLine(accountId, batchId, line: BatchLine) {
      if (!holdable(accountId, batchId, line.customId)) return false;
      const r = await ctx.one(
        'addBatchLine',
        `INSERT INTO ${s}.batch_lines (batch_id, custom_id, data) SELECT $1, $2, $3::text::jsonb
          WHERE EXISTS (SELECT 1 FROM ${s}.batches WHERE id = $1 AND account_id = $4) ON CONFLICT DO NOTHING RETURNING 1 AS one`,
        [batchId, line.customId, jsonText(line), accountId],
      );
      return r !== undefined;
    },
    async lines(accountId, batchId) {
      if (!holdable(accountId, batchId)) return [];
      const rows = await ctx.q<{ data: BatchLine }>(
        'batchLines',
        `SELECT l.data FROM ${s}.batch_lines l JOIN ${s}.batches b ON b.id = l.batch_id WHERE l.batch_id = $1 AND b.account_id = $2`,
        [batchId, accountId],
      );
      return rows.map((r) => r.data);
    },
  };
}
