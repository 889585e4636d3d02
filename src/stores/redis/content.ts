import type { BrandRecord, ContentStore, DocumentRecord } from '../types.js';
import { int, list, type RedisContext, str } from './connection.js';

/** Oldest first (ties by id), as the memory store lists. */
function byCreation(a: { createdAt: number; id: string }, b: { createdAt: number; id: string }): number {
  return a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

function parseAll<T extends { createdAt: number; id: string }>(reply: unknown): T[] {
  return list(reply)
    .map((v) => JSON.parse(str(v) ?? 'null') as T | null)
    .filter((r): r is T => r !== null)
    .sort(byCreation);
}

function parseOne<T>(reply: unknown): T | null {
  const raw = str(reply);
  return raw === null ? null : (JSON.parse(raw) as T);
}

/**
 * Brands and knowledge documents: one hash per account and kind (id -> JSON), under the
 * account's hash tag. Document changes bump the version in the same script.
 */
export function createRedisContent(ctx: RedisContext): ContentStore {
  const { client, scripts } = ctx;
  const brands = (accountId: string) => ctx.account(accountId, 'brands');
  const docs = (accountId: string) => ctx.account(accountId, 'docs');
  const version = (accountId: string) => ctx.account(accountId, 'docver');

  return {
    async putBrand(brand: BrandRecord): Promise<void> {
      await ctx.run('putBrand', () => client.hset(brands(brand.accountId), brand.id, JSON.stringify(brand)));
    },
    async getBrand(accountId: string, id: string): Promise<BrandRecord | null> {
      return parseOne<BrandRecord>(await ctx.run('getBrand', () => client.hget(brands(accountId), id)));
    },
    async listBrands(accountId: string): Promise<BrandRecord[]> {
      return parseAll<BrandRecord>(await ctx.run('listBrands', () => client.hvals(brands(accountId))));
    },
    async deleteBrand(accountId: string, id: string): Promise<boolean> {
      return int(await ctx.run('deleteBrand', () => client.hdel(brands(accountId), id))) === 1;
    },
    async putDocument(doc: DocumentRecord): Promise<void> {
      await ctx.run('putDocument', () =>
        scripts.mgDocPut([docs(doc.accountId), version(doc.accountId)], [doc.id, JSON.stringify(doc)]),
      );
    },
    async getDocument(accountId: string, id: string): Promise<DocumentRecord | null> {
      return parseOne<DocumentRecord>(await ctx.run('getDocument', () => client.hget(docs(accountId), id)));
    },
    async listDocuments(accountId: string): Promise<DocumentRecord[]> {
      return parseAll<DocumentRecord>(await ctx.run('listDocuments', () => client.hvals(docs(accountId))));
    },
    async deleteDocument(accountId: string, id: string): Promise<boolean> {
      const r = await ctx.run('deleteDocument', () => scripts.mgDocDelete([docs(accountId), version(accountId)], [id]));
      return int(r) === 1;
    },
    async documentsVersion(accountId: string): Promise<number> {
      return int(await ctx.run('documentsVersion', () => client.get(version(accountId))));
    },
  };
}
