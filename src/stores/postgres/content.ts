import type { BrandRecord, ContentStore, DocumentRecord } from '../types.js';
import { holdable, num, type PgContext } from './connection.js';
import { jsonText } from '../json-text.js';

/**
 * Brands and knowledge documents, keyed by (account, id) so one account never reaches
 * another's. A document change bumps the account's documents version in the same statement.
 */
export function createPostgresContent(ctx: PgContext): ContentStore {
  const { s } = ctx;
  // The version only grows: max(old + 1, now), so it never repeats, even for a new schema.
  const bump = (changed: string) =>
    `INSERT INTO ${s}.document_versions AS v (account_id, version) SELECT account_id, ${s}.mg_now() FROM ${changed}
       ON CONFLICT (account_id) DO UPDATE SET version = greatest(v.version + 1, excluded.version)`;
  const put = (table: string) =>
    `INSERT INTO ${s}.${table} (account_id, id, data, created_at) VALUES ($1, $2, $3::text::jsonb, $4::bigint)
       ON CONFLICT (account_id, id) DO UPDATE SET data = excluded.data, created_at = excluded.created_at
       RETURNING account_id`;

  return {
    async putBrand(b: BrandRecord) {
      await ctx.q('putBrand', put('brands'), [b.accountId, b.id, jsonText(b), b.createdAt]);
    },
    async getBrand(accountId, id) {
      if (!holdable(accountId, id)) return null;
      const r = await ctx.one<{ data: BrandRecord }>('getBrand', `SELECT data FROM ${s}.brands WHERE account_id = $1 AND id = $2`, [
        accountId,
        id,
      ]);
      return r ? r.data : null;
    },
    async listBrands(accountId) {
      const rows = await ctx.q<{ data: BrandRecord }>(
        'listBrands',
        `SELECT data FROM ${s}.brands WHERE account_id = $1 ORDER BY created_at, id`,
        [accountId],
      );
      return rows.map((r) => r.data);
    },
    async deleteBrand(accountId, id) {
      if (!holdable(accountId, id)) return false;
      const rows = await ctx.q('deleteBrand', `DELETE FROM ${s}.brands WHERE account_id = $1 AND id = $2 RETURNING 1 AS one`, [
        accountId,
        id,
      ]);
      return rows.length === 1;
    },
    async putDocument(d: DocumentRecord) {
      await ctx.q('putDocument', `WITH changed AS (${put('documents')}) ${bump('changed')}`, [
        d.accountId,
        d.id,
        jsonText(d),
        d.createdAt,
      ]);
    },
    async getDocument(accountId, id) {
      if (!holdable(accountId, id)) return null;
      const r = await ctx.one<{ data: DocumentRecord }>(
        'getDocument',
        `SELECT data FROM ${s}.documents WHERE account_id = $1 AND id = $2`,
        [accountId, id],
      );
      return r ? r.data : null;
    },
    async listDocuments(accountId) {
      const rows = await ctx.q<{ data: DocumentRecord }>(
        'listDocuments',
        `SELECT data FROM ${s}.documents WHERE account_id = $1 ORDER BY created_at, id`,
        [accountId],
      );
      return rows.map((r) => r.data);
    },
    async deleteDocument(accountId, id) {
      if (!holdable(accountId, id)) return false;
      const r = await ctx.one<{ n: bigint }>(
        'deleteDocument',
        `WITH changed AS (DELETE FROM ${s}.documents WHERE account_id = $1 AND id = $2 RETURNING account_id),
              bumped AS (${bump('changed')})
         SELECT count(*) AS n FROM changed`,
        [accountId, id],
      );
      return num(r?.n) === 1;
    },
    async documentsVersion(accountId) {
      const r = await ctx.one<{ version: bigint }>(
        'documentsVersion',
        `SELECT version FROM ${s}.document_versions WHERE account_id = $1`,
        [accountId],
      );
      return num(r?.version);
    },
  };
}
