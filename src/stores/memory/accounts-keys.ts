import type { AccountRecord, AccountStore, ApiKeyRecord, CreditRequest, KeyPatch, KeyStore } from '../types.js';
import { patchedLimits, touchesLimits } from '../key-limits.js';
import { OPENING_BALANCE_ID, OPENING_BALANCE_REASON } from '../wallet-entries.js';

/**
 * Accounts; `create` credits the opening balance through billing's synchronous credit step,
 * in the same synchronous step, so the wallet change is a ledger entry like every other.
 */
export function createMemoryAccounts(credit: (req: CreditRequest) => unknown): AccountStore {
  const accounts = new Map<string, AccountRecord>();

  return {
    async create(account: AccountRecord, initialBalance: bigint): Promise<boolean> {
      if (accounts.has(account.id)) return false;
      accounts.set(account.id, structuredClone(account));
      if (initialBalance !== 0n) {
        credit({
          accountId: account.id,
          creditId: OPENING_BALANCE_ID,
          amount: initialBalance,
          reason: OPENING_BALANCE_REASON,
          at: account.createdAt,
        });
      }
      return true;
    },

    async get(id: string): Promise<AccountRecord | null> {
      const account = accounts.get(id);
      return account ? structuredClone(account) : null;
    },

    async setGrants(id: string, grants: string[]): Promise<boolean> {
      const account = accounts.get(id);
      if (!account) return false;
      account.grants = [...grants];
      return true;
    },

    async setBudgets(id, budgets) {
      const account = accounts.get(id);
      if (!account) return false;
      account.budgets = budgets.map((b) => ({ ...b }));
      return true;
    },

    async list(): Promise<AccountRecord[]> {
      return structuredClone([...accounts.values()]);
    },
  };
}

/** API keys, indexed by id and by digest (the lookup on every request). */
export function createMemoryKeys(): KeyStore {
  const byId = new Map<string, ApiKeyRecord>();
  const idByDigest = new Map<string, string>();

  function find(id: string | undefined): ApiKeyRecord | null {
    const key = id === undefined ? undefined : byId.get(id);
    return key ? structuredClone(key) : null;
  }

  return {
    async insert(key: ApiKeyRecord): Promise<boolean> {
      if (byId.has(key.id) || idByDigest.has(key.digest)) return false;
      byId.set(key.id, structuredClone(key));
      idByDigest.set(key.digest, key.id);
      return true;
    },

    async findByDigest(digest: string): Promise<ApiKeyRecord | null> {
      return find(idByDigest.get(digest));
    },

    async get(id: string): Promise<ApiKeyRecord | null> {
      return find(id);
    },

    async setDisabled(id: string, disabled: boolean): Promise<boolean> {
      const key = byId.get(id);
      if (!key) return false;
      key.disabled = disabled;
      return true;
    },

    async listByAccount(accountId: string): Promise<ApiKeyRecord[]> {
      return structuredClone([...byId.values()].filter((k) => k.accountId === accountId));
    },

    async update(id: string, patch: KeyPatch): Promise<ApiKeyRecord | null> {
      const key = byId.get(id);
      if (!key) return null;
      if (patch.digest) {
        if (patch.digest.replaces !== undefined && patch.digest.replaces !== key.digest) return null;
        const owner = idByDigest.get(patch.digest.digest);
        if (owner !== undefined && owner !== id) return null;
        idByDigest.delete(key.digest);
        idByDigest.set(patch.digest.digest, id);
        key.digest = patch.digest.digest;
        key.prefix = patch.digest.prefix;
      }
      if (patch.monthlyCap !== undefined) key.monthlyCap = patch.monthlyCap;
      if (touchesLimits(patch)) Object.assign(key, patchedLimits(key, patch));
      return structuredClone(key);
    },

    async delete(id: string): Promise<boolean> {
      const key = byId.get(id);
      if (!key) return false;
      byId.delete(id);
      idByDigest.delete(key.digest);
      return true;
    },
  };
}
