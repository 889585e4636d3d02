import { BATCH_DONE, type BatchLine, type BatchRecord, type BatchStore, type FileRecord } from '../batch-types.js';
import { pageRecords } from '../record-page.js';
import { int, type RedisContext, str } from './connection.js';

/**
 * Files and batches, every key under its account's hash tag (one slot per account, so a
 * script may touch a batch and its lines together on Redis Cluster):
 *   P{a:<account>}:file:<id>       hash: data (the record's JSON), content (its bytes, base64)
 *   P{a:<account>}:files           sorted set: id -> createdAt (the listing)
 *   P{a:<account>}:batch:<id>      hash: rev, data (the record's JSON); `swapBatch` is a script
 *   P{a:<account>}:batches         sorted set: id -> createdAt
 *   P{a:<account>}:batch-lines:<id> hash: custom id -> the finished line's JSON (HSETNX)
 * Batches not yet over are indexed in `P{idx}:batches` (members `[account, id]` as JSON),
 * written after the batch like the jobs' index: readers filter by status, and a batch found
 * over is dropped from it.
 */
export function createRedisBatches(ctx: RedisContext): BatchStore {
  const { client, scripts } = ctx;
  const index = ctx.index('batches');
  const fileKey = (a: string, id: string) => ctx.account(a, `file:${id}`);
  const batchKey = (a: string, id: string) => ctx.account(a, `batch:${id}`);
  const linesKey = (a: string, id: string) => ctx.account(a, `batch-lines:${id}`);
  const member = (b: BatchRecord) => JSON.stringify([b.accountId, b.id]);
  const reindex = async (b: BatchRecord) => {
    if (BATCH_DONE.includes(b.status)) await client.srem(index, member(b));
    else await client.sadd(index, member(b));
  };
  const parse = <T>(v: unknown): T | null => {
    const s = str(v);
    return s === null ? null : (JSON.parse(s) as T);
  };

  /** Every record listed in `listing`; ids whose record is gone are dropped from it. */
  async function listed<T>(listing: string, read: (id: string) => Promise<T | null>): Promise<T[]> {
    const ids = await client.zrange(listing, '0', '-1');
    const records = await Promise.all(ids.map(read));
    const gone = ids.filter((_, i) => records[i] === null);
    if (gone.length) await client.zrem(listing, ...gone);
    return records.filter((r): r is Awaited<T> => r !== null) as T[];
  }

  const getFile = async (a: string, id: string) => parse<FileRecord>(await client.hget(fileKey(a, id), 'data'));
  const getBatch = async (a: string, id: string) => parse<BatchRecord>(await client.hget(batchKey(a, id), 'data'));

  return {
    async putFile(file: FileRecord, content: Uint8Array) {
      await ctx.run('putFile', async () => {
        const b64 = Buffer.from(content.buffer, content.byteOffset, content.byteLength).toString('base64');
        await client.hset(fileKey(file.accountId, file.id), 'data', JSON.stringify(file), 'content', b64);
        await client.zadd(ctx.account(file.accountId, 'files'), String(file.createdAt), file.id);
      });
    },
    getFile: (a, id) => ctx.run('getFile', () => getFile(a, id)),
    async fileContent(a, id) {
      const b64 = await ctx.run('fileContent', () => client.hget(fileKey(a, id), 'content'));
      return b64 === null ? null : new Uint8Array(Buffer.from(b64, 'base64'));
    },
    async listFiles(a, page) {
      return ctx.run('listFiles', async () => pageRecords(await listed(ctx.account(a, 'files'), (id) => getFile(a, id)), page));
    },
    async deleteFile(a, id) {
      return ctx.run('deleteFile', async () => {
        const removed = await client.del(fileKey(a, id));
        await client.zrem(ctx.account(a, 'files'), id);
        return removed === 1;
      });
    },
    async createBatch(batch) {
      await ctx.run('createBatch', async () => {
        await client.hset(batchKey(batch.accountId, batch.id), 'rev', String(batch.rev), 'data', JSON.stringify(batch));
        await client.zadd(ctx.account(batch.accountId, 'batches'), String(batch.createdAt), batch.id);
        await reindex(batch);
      });
    },
    getBatch: (a, id) => ctx.run('getBatch', () => getBatch(a, id)),
    async swapBatch(next) {
      const written = { ...next, rev: next.rev + 1 };
      return ctx.run('swapBatch', async () => {
        const ok = await scripts.mgBatchSwap([batchKey(next.accountId, next.id)], [String(next.rev), String(written.rev), JSON.stringify(written)]);
        if (int(ok) !== 1) return null;
        await reindex(written);
        return written;
      });
    },
    async listBatches(a, page) {
      return ctx.run('listBatches', async () => pageRecords(await listed(ctx.account(a, 'batches'), (id) => getBatch(a, id)), { ...page, purpose: undefined }));
    },
    async unfinishedBatches() {
      return ctx.run('unfinishedBatches', async () => {
        const members = await client.smembers(index);
        const out: BatchRecord[] = [];
        for (const m of members) {
          const [a, id] = JSON.parse(m) as [string, string];
          const b = await getBatch(a, id);
          if (b && !BATCH_DONE.includes(b.status)) out.push(b);
          else await client.srem(index, m);
        }
        return out;
      });
    },
    async addLine(a, batchId, line: BatchLine) {
      const added = await ctx.run('addBatchLine', () => scripts.mgBatchLine([batchKey(a, batchId), linesKey(a, batchId)], [line.customId, JSON.stringify(line)]));
      return int(added) === 1;
    },
    async lines(a, batchId) {
      return ctx.run('batchLines', async () => {
        if ((await client.exists(batchKey(a, batchId))) === 0) return [];
        const values = await client.hvals(linesKey(a, batchId));
        return values.map((v) => JSON.parse(v) as BatchLine);
      });
    },
  };
}
