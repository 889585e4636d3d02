import type { BrandRecord, ContentStore, DocumentRecord } from '../types.js';
import { num, type SqliteContext } from './connection.js';

/**
 * Brands and knowledge documents, keyed by (account, id) so one account never reaches
 * another's. A document change bumps the account's documents version in the same transaction.
 */
export function createSqliteContent(ctx: SqliteContext): ContentStore {
  const table = (name: 'brands' | 'documents') => ({
    put: ctx.prepare(
      `INSERT INTO ${name} (account_id, id, data, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET data = excluded.data, created_at = excluded.created_at`,
    ),
    get: ctx.prepare(`SELECT data FROM ${name} WHERE account_id = ? AND id = ?`),
    list: ctx.prepare(`SELECT data FROM ${name} WHERE account_id = ? ORDER BY created_at, id`),
    delete: ctx.prepare(`DELETE FROM ${name} WHERE account_id = ? AND id = ?`),
  });
  const brands = table('brands');
  const docs = table('documents');
  const q = {
    // The version only grows: max(old + 1, now), so it never repeats, even for a new file.
    bump: ctx.prepare(
      'INSERT INTO document_versions (account_id, version) VALUES (?, ?) ON CONFLICT DO UPDATE SET version = max(version + 1, excluded.version)',
    ),
    version: ctx.prepare('SELECT version FROM document_versions WHERE account_id = ?'),
  };
  const one = <T>(row: unknown): T | null => (row ? (JSON.parse((row as { data: string }).data) as T) : null);
  const all = <T>(rows: unknown[]): T[] => rows.map((r) => JSON.parse((r as { data: string }).data) as T);

  return {
    async putBrand(b: BrandRecord) {
      ctx.run('putBrand', () => brands.put.run(b.accountId, b.id, JSON.stringify(b), b.createdAt));
    },
    async getBrand(accountId, id) {
      return one<BrandRecord>(ctx.run('getBrand', () => brands.get.get(accountId, id)));
    },
    async listBrands(accountId) {
      return all<BrandRecord>(ctx.run('listBrands', () => brands.list.all(accountId)));
    },
    async deleteBrand(accountId, id) {
      return ctx.run('deleteBrand', () => brands.delete.run(accountId, id).changes === 1);
    },
    async putDocument(d: DocumentRecord) {
      await ctx.write('putDocument', () => {
        docs.put.run(d.accountId, d.id, JSON.stringify(d), d.createdAt);
        q.bump.run(d.accountId, ctx.now());
      });
    },
    async getDocument(accountId, id) {
      return one<DocumentRecord>(ctx.run('getDocument', () => docs.get.get(accountId, id)));
    },
    async listDocuments(accountId) {
      return all<DocumentRecord>(ctx.run('listDocuments', () => docs.list.all(accountId)));
    },
    async deleteDocument(accountId, id) {
      return ctx.write('deleteDocument', () => {
        if (docs.delete.run(accountId, id).changes === 0) return false;
        q.bump.run(accountId, ctx.now());
        return true;
      });
    },
    async documentsVersion(accountId) {
      return num((ctx.run('documentsVersion', () => q.version.get(accountId)) as { version: number } | undefined)?.version);
    },
  };
}
