import type { AccountRecord, AccountStore, ApiKeyRecord, KeyKind, KeyPatch, KeyStore } from '../types.js';
import { big, num, type SqliteContext } from './connection.js';
import { prepareCredit } from './credit.js';
import { budgetsField, decodeKeyLimits, encodeBudgets, encodeKeyLimits, patchedLimits, touchesLimits } from '../key-limits.js';
import { OPENING_BALANCE_ID, OPENING_BALANCE_REASON } from '../wallet-entries.js';

interface AccountRow {
  id: string;
  grants: string;
  created_at: number;
  budgets: string | null;
}

const account = (r: AccountRow): AccountRecord => ({
  id: r.id,
  grants: JSON.parse(r.grants) as string[],
  createdAt: num(r.created_at),
  ...budgetsField(r.budgets),
});

/**
 * Accounts; `create` inserts the record and credits the opening balance (a ledger entry, as
 * every wallet change) in one transaction.
 */
export function createSqliteAccounts(ctx: SqliteContext): AccountStore {
  const credit = prepareCredit(ctx);
  const q = {
    insert: ctx.prepare('INSERT INTO accounts (id, grants, created_at, budgets) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING'),
    get: ctx.prepare('SELECT id, grants, created_at, budgets FROM accounts WHERE id = ?'),
    setGrants: ctx.prepare('UPDATE accounts SET grants = ? WHERE id = ?'),
    setBudgets: ctx.prepare('UPDATE accounts SET budgets = ? WHERE id = ?'),
    list: ctx.prepare('SELECT id, grants, created_at, budgets FROM accounts ORDER BY created_at, id'),
  };

  return {
    async create(record: AccountRecord, initialBalance: bigint): Promise<boolean> {
      return ctx.write('createAccount', () => {
        if (q.insert.run(record.id, JSON.stringify(record.grants), record.createdAt, encodeBudgets(record.budgets)).changes === 0) return false;
        if (initialBalance !== 0n) {
          credit({ accountId: record.id, creditId: OPENING_BALANCE_ID, amount: initialBalance, reason: OPENING_BALANCE_REASON, at: record.createdAt });
        }
        return true;
      });
    },
    async get(id: string): Promise<AccountRecord | null> {
      const row = ctx.run('getAccount', () => q.get.get(id) as AccountRow | undefined);
      return row ? account(row) : null;
    },
    async setGrants(id: string, grants: string[]): Promise<boolean> {
      return ctx.run('setGrants', () => q.setGrants.run(JSON.stringify(grants), id).changes === 1);
    },
    async setBudgets(id, budgets) {
      return ctx.run('setBudgets', () => q.setBudgets.run(encodeBudgets(budgets), id).changes === 1);
    },
    async list(): Promise<AccountRecord[]> {
      return ctx.run('listAccounts', () => (q.list.all() as AccountRow[]).map(account));
    },
  };
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
  disabled: bigint;
  created_at: bigint;
  limits: string | null;
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
    disabled: num(r.disabled) === 1,
    createdAt: num(r.created_at),
    ...decodeKeyLimits(r.limits),
  };
}

/** API keys; id and digest are both unique, so a duplicate of either inserts nothing. */
export function createSqliteKeys(ctx: SqliteContext): KeyStore {
  const q = {
    insert: ctx.prepare(
      `INSERT INTO api_keys (${KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
    ),
    byDigest: ctx.exact(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE digest = ?`),
    byId: ctx.exact(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = ?`),
    setDisabled: ctx.prepare('UPDATE api_keys SET disabled = ? WHERE id = ?'),
    byAccount: ctx.exact(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = ? ORDER BY created_at, id`),
    setCap: ctx.prepare('UPDATE api_keys SET monthly_cap = ? WHERE id = ?'),
    setLimits: ctx.prepare('UPDATE api_keys SET limits = ? WHERE id = ?'),
    setDigest: ctx.prepare('UPDATE OR IGNORE api_keys SET digest = @digest, prefix = @prefix WHERE id = @id AND (@replaces IS NULL OR digest = @replaces)'),
    delete: ctx.prepare('DELETE FROM api_keys WHERE id = ?'),
  };

  return {
    async insert(k: ApiKeyRecord): Promise<boolean> {
      return ctx.run(
        'insertKey',
        () =>
          q.insert.run(k.id, k.digest, k.prefix, k.accountId, k.kind, k.model, k.label, k.monthlyCap, k.disabled ? 1 : 0, k.createdAt, encodeKeyLimits(k))
            .changes === 1,
      );
    },
    async findByDigest(digest: string): Promise<ApiKeyRecord | null> {
      const row = ctx.run('findKey', () => q.byDigest.get(digest) as KeyRow | undefined);
      return row ? key(row) : null;
    },
    async get(id: string): Promise<ApiKeyRecord | null> {
      const row = ctx.run('getKey', () => q.byId.get(id) as KeyRow | undefined);
      return row ? key(row) : null;
    },
    async setDisabled(id: string, disabled: boolean): Promise<boolean> {
      return ctx.run('setKeyDisabled', () => q.setDisabled.run(disabled ? 1 : 0, id).changes === 1);
    },
    async listByAccount(accountId: string): Promise<ApiKeyRecord[]> {
      return ctx.run('listKeys', () => (q.byAccount.all(accountId) as KeyRow[]).map(key));
    },
    async update(id: string, patch: KeyPatch): Promise<ApiKeyRecord | null> {
      return ctx.write('updateKey', () => {
        if (!q.byId.get(id)) return null;
        // A digest that belongs to another key is refused (the unique index ignores the update).
        // A digest that is no longer the one a rotation replaces is refused too (of two rotations
        // at once, one wins).
        if (patch.digest && q.setDigest.run({ digest: patch.digest.digest, prefix: patch.digest.prefix, id, replaces: patch.digest.replaces ?? null }).changes === 0) {
          return null;
        }
        if (patch.monthlyCap !== undefined) q.setCap.run(patch.monthlyCap, id);
        if (touchesLimits(patch)) {
          const current = key(q.byId.get(id) as KeyRow);
          q.setLimits.run(encodeKeyLimits(patchedLimits(current, patch)), id);
        }
        const row = q.byId.get(id) as KeyRow | undefined;
        return row ? key(row) : null;
      });
    },
    async delete(id: string): Promise<boolean> {
      return ctx.run('deleteKey', () => q.delete.run(id).changes === 1);
    },
  };
}
