import type { AccountRecord, AccountStore, ApiKeyRecord, KeyKind, KeyPatch, KeyStore } from '../types.js';
import { big, num, type PgContext } from './connection.js';
import { budgetsField, decodeKeyLimits, encodeBudgets, encodeKeyLimits, encodeLimitsPatch, touchesLimits } from '../key-limits.js';
import { jsonText } from '../json-text.js';

interface AccountRow {
  id: string;
  grants: string[];
  created_at: bigint;
  budgets: unknown;
}

const account = (r: AccountRow): AccountRecord => ({
  id: r.id,
  grants: r.grants,
  createdAt: num(r.created_at),
  ...budgetsField(r.budgets ? jsonText(r.budgets) : null),
});
const ACCOUNT_COLUMNS = 'id, grants, created_at, budgets';

/** Accounts; `create` inserts the record and credits the wallet in one function call. */
export function createPostgresAccounts(ctx: PgContext): AccountStore {
  const { s } = ctx;
  const store: AccountStore = {
    async create(record: AccountRecord, initialBalance: bigint): Promise<boolean> {
      const r = await ctx.one<{ created: boolean }>(
        'createAccount',
        `SELECT ${s}.mg_create_account($1, $2::text::jsonb, $3::bigint, $4::bigint) AS created`,
        [record.id, jsonText(record.grants), record.createdAt, initialBalance.toString()],
      );
      if (r?.created === true && record.budgets?.length) await store.setBudgets(record.id, record.budgets);
      return r?.created === true;
    },
    async get(id: string): Promise<AccountRecord | null> {
      const r = await ctx.one<AccountRow>('getAccount', `SELECT ${ACCOUNT_COLUMNS} FROM ${s}.accounts WHERE id = $1`, [id]);
      return r ? account(r) : null;
    },
    async setGrants(id: string, grants: string[]): Promise<boolean> {
      const rows = await ctx.q('setGrants', `UPDATE ${s}.accounts SET grants = $2::text::jsonb WHERE id = $1 RETURNING 1 AS one`, [
        id,
        jsonText(grants),
      ]);
      return rows.length === 1;
    },
    async setBudgets(id, budgets) {
      const rows = await ctx.q('setBudgets', `UPDATE ${s}.accounts SET budgets = $2::text::jsonb WHERE id = $1 RETURNING 1 AS one`, [
        id,
        encodeBudgets(budgets),
      ]);
      return rows.length === 1;
    },
    async list(): Promise<AccountRecord[]> {
      const rows = await ctx.q<AccountRow>('listAccounts', `SELECT ${ACCOUNT_COLUMNS} FROM ${s}.accounts ORDER BY created_at, id`);
      return rows.map(account);
    },
  };
  return store;
}

interface KeyRow {
  id: string;
  digest: string;
  prefix: string;
  account_id: string;
  kind: KeyKind;
  model: string | null;
  label: string | null;
  monthly_cap: bigint | null;
  disabled: boolean;
  created_at: bigint;
  limits: unknown;
}

const KEY_COLUMNS = 'id, digest, prefix, account_id, kind, model, label, monthly_cap, disabled, created_at, limits';

function key(r: KeyRow): ApiKeyRecord {
  return {
    id: r.id,
    digest: r.digest,
    prefix: r.prefix,
    accountId: r.account_id,
    kind: r.kind,
    model: r.model,
    label: r.label,
    monthlyCap: r.monthly_cap === null ? null : big(r.monthly_cap),
    disabled: r.disabled,
    createdAt: num(r.created_at),
    ...decodeKeyLimits(r.limits ? jsonText(r.limits) : null),
  };
}

/** API keys; id and digest are both unique, so a duplicate of either inserts nothing. */
export function createPostgresKeys(ctx: PgContext): KeyStore {
  const { s } = ctx;
  return {
    async insert(k: ApiKeyRecord): Promise<boolean> {
      const rows = await ctx.q(
        'insertKey',
        `INSERT INTO ${s}.api_keys (${KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::bigint, $9, $10::bigint, $11::text::jsonb)
          ON CONFLICT DO NOTHING RETURNING 1 AS one`,
        [
          k.id,
          k.digest,
          k.prefix,
          k.accountId,
          k.kind,
          k.model,
          k.label,
          k.monthlyCap === null ? null : k.monthlyCap.toString(),
          k.disabled,
          k.createdAt,
          encodeKeyLimits(k),
        ],
      );
      return rows.length === 1;
    },
    async findByDigest(digest: string): Promise<ApiKeyRecord | null> {
      const r = await ctx.one<KeyRow>('findKey', `SELECT ${KEY_COLUMNS} FROM ${s}.api_keys WHERE digest = $1`, [digest]);
      return r ? key(r) : null;
    },
    async get(id: string): Promise<ApiKeyRecord | null> {
      const r = await ctx.one<KeyRow>('getKey', `SELECT ${KEY_COLUMNS} FROM ${s}.api_keys WHERE id = $1`, [id]);
      return r ? key(r) : null;
    },
    async setDisabled(id: string, disabled: boolean): Promise<boolean> {
      const rows = await ctx.q('setKeyDisabled', `UPDATE ${s}.api_keys SET disabled = $2 WHERE id = $1 RETURNING 1 AS one`, [
        id,
        disabled,
      ]);
      return rows.length === 1;
    },
    async update(id: string, patch: KeyPatch): Promise<ApiKeyRecord | null> {
      const sets: string[] = [];
      const params: (string | null)[] = [id];
      let replaces = '';
      if (patch.digest) {
        params.push(patch.digest.digest, patch.digest.prefix);
        sets.push(`digest = $${params.length - 1}`, `prefix = $${params.length}`);
        if (patch.digest.replaces !== undefined) {
          params.push(patch.digest.replaces);
          replaces = ` AND digest = $${params.length}`;
        }
      }
      if (patch.monthlyCap !== undefined) {
        params.push(patch.monthlyCap === null ? null : patch.monthlyCap.toString());
        sets.push(`monthly_cap = $${params.length}::bigint`);
      }
      if (touchesLimits(patch)) {
        // Merged into the stored limits in the same statement: fields the patch leaves out stay.
        params.push(encodeLimitsPatch(patch));
        sets.push(`limits = coalesce(limits, '{}'::jsonb) || $${params.length}::text::jsonb`);
      }
      if (sets.length === 0) return this.get(id);
      // A digest that belongs to another key conflicts with the unique index: nothing changes.
      const rows = await ctx.q<KeyRow>(
        'updateKey',
        `UPDATE ${s}.api_keys SET ${sets.join(', ')} WHERE id = $1${replaces}
           AND NOT EXISTS (SELECT 1 FROM ${s}.api_keys o WHERE o.id <> $1 AND o.digest = ${patch.digest ? '$2' : 'NULL'})
         RETURNING ${KEY_COLUMNS}`,
        params,
      );
      return rows[0] ? key(rows[0]) : null;
    },
    async delete(id: string): Promise<boolean> {
      const rows = await ctx.q('deleteKey', `DELETE FROM ${s}.api_keys WHERE id = $1 RETURNING 1 AS one`, [id]);
      return rows.length === 1;
    },
    async listByAccount(accountId: string): Promise<ApiKeyRecord[]> {
      const rows = await ctx.q<KeyRow>(
        'listKeys',
        `SELECT ${KEY_COLUMNS} FROM ${s}.api_keys WHERE account_id = $1 ORDER BY created_at, id`,
        [accountId],
      );
      return rows.map(key);
    },
  };
}
