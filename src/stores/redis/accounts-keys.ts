import type { AccountRecord, AccountStore, ApiKeyRecord, KeyPatch, KeyStore } from '../types.js';
import { creditEntry, creditMarker } from './credits.js';
import { int, list, type RedisContext, str } from './connection.js';
import { budgetsField, decodeKeyLimits, encodeBudgets, encodeKeyLimits, patchedLimits, touchesLimits } from '../key-limits.js';
import { OPENING_BALANCE_ID, OPENING_BALANCE_REASON } from '../wallet-entries.js';

/**
 * Accounts. `create` writes the record and credits the opening balance, with its ledger entry,
 * in one script (all under the account's hash tag). The account index is a separate key: the id is added to it before the
 * script runs, and `list` skips ids whose record does not exist.
 */
export function createRedisAccounts(ctx: RedisContext): AccountStore {
  const { client, scripts } = ctx;

  function parse(reply: unknown): AccountRecord | null {
    const [id, grants, createdAt, budgets] = list(reply).map(str);
    if (id === null || id === undefined) return null;
    return { id, grants: JSON.parse(grants ?? '[]') as string[], createdAt: Number(createdAt ?? 0), ...budgetsField(budgets) };
  }

  const store: AccountStore = {
    async create(account: AccountRecord, initialBalance: bigint): Promise<boolean> {
      const created = await ctx.run('createAccount', async () => {
        await client.sadd(ctx.index('accounts'), account.id);
        const opening = creditEntry(account.id, OPENING_BALANCE_ID, initialBalance, OPENING_BALANCE_REASON, account.createdAt);
        return scripts.mgAccountCreate(
          [
            ctx.account(account.id, 'acct'),
            ctx.account(account.id, 'bal'),
            ctx.account(account.id, 'ledger'),
            creditMarker(ctx, account.id, OPENING_BALANCE_ID),
          ],
          [account.id, JSON.stringify(account.grants), String(account.createdAt), initialBalance.toString(), JSON.stringify(opening)],
        );
      });
      if (int(created) === 1 && account.budgets?.length) await store.setBudgets(account.id, account.budgets);
      return int(created) === 1;
    },

    async get(id: string): Promise<AccountRecord | null> {
      return parse(await ctx.run('getAccount', () => client.hmget(ctx.account(id, 'acct'), ...ACCOUNT_FIELDS)));
    },

    async setGrants(id: string, grants: string[]): Promise<boolean> {
      const r = await ctx.run('setGrants', () =>
        scripts.mgAccountSetGrants([ctx.account(id, 'acct')], [JSON.stringify(grants)]),
      );
      return int(r) === 1;
    },

    async setBudgets(id, budgets) {
      const r = await ctx.run('setBudgets', () =>
        scripts.mgAccountSetField([ctx.account(id, 'acct')], ['budgets', encodeBudgets(budgets)]),
      );
      return int(r) === 1;
    },

    async list(): Promise<AccountRecord[]> {
      return ctx.run('listAccounts', async () => {
        const ids = list(await client.smembers(ctx.index('accounts'))).map((v) => str(v) ?? '');
        const replies = await Promise.all(
          ids.map((id) => client.hmget(ctx.account(id, 'acct'), ...ACCOUNT_FIELDS)),
        );
        return replies.map(parse).filter((r): r is AccountRecord => r !== null);
      });
    },
  };
  return store;
}

const ACCOUNT_FIELDS = ['id', 'grants', 'createdAt', 'budgets'] as const;

/** A key as its record JSON keeps it: amounts as decimal strings, its limits as one JSON text (absent: none). */
type StoredKey = Omit<ApiKeyRecord, 'monthlyCap' | 'disabled' | 'models' | 'tokensPerMinute' | 'budgets'> & {
  monthlyCap: string | null;
  limits?: string | null;
};

/** A key from its HMGET reply (`rec`, `disabled`), or null when there is no record. */
function parseKey(reply: unknown): ApiKeyRecord | null {
  const [rec, disabled] = list(reply).map(str);
  if (rec === null || rec === undefined) return null;
  const { limits, ...stored } = JSON.parse(rec) as StoredKey;
  return {
    ...stored,
    monthlyCap: stored.monthlyCap === null ? null : BigInt(stored.monthlyCap),
    disabled: disabled === '1',
    ...decodeKeyLimits(limits),
  };
}

const byDigest = (ctx: RedisContext, digest: string) => ctx.client.hmget(ctx.keyByDigest(digest), 'rec', 'disabled');

async function digestOf(ctx: RedisContext, id: string): Promise<string | null> {
  return str(await ctx.client.get(ctx.keyIdIndex(id)));
}

/** The key with this id: the id index names its digest, and the record there must name the id back. */
async function byId(ctx: RedisContext, id: string): Promise<ApiKeyRecord | null> {
  const digest = await digestOf(ctx, id);
  if (digest === null) return null;
  const key = parseKey(await byDigest(ctx, digest));
  return key && key.id === id ? key : null;
}

/**
 * API keys: the record lives under the digest's hash tag (the lookup on every request is one
 * HMGET); `P{kid:<id>}` maps id -> digest, and the account's key set lists its ids.
 *
 * `insert` spans two slots, so it is two atomic steps: claim the id (SET NX), then create the
 * record if the digest is new (script); when the digest exists the id claim is taken back.
 * A crash between the steps leaves only an id claim without a record, which `get` ignores.
 */
/** How often a key write starts over when the record changed under it (then it gives up: null). */
const MOVES = 5;
/** What one try of an update answers when the record changed under it: try again. */
const AGAIN = Symbol('again');

export function createRedisKeys(ctx: RedisContext): KeyStore {
  const { client, scripts } = ctx;

  /** One try of `update`: null when the key is gone or the patch is refused; AGAIN when the record changed under it. */
  async function updateOnce(id: string, patch: KeyPatch): Promise<ApiKeyRecord | null | typeof AGAIN> {
    const digest = await digestOf(ctx, id);
    if (digest === null) return null;
    const [oldRec, read] = list(await byDigest(ctx, digest)).map(str);
    if (oldRec === null || oldRec === undefined) return (await digestOf(ctx, id)) === digest ? null : AGAIN;
    const stored = JSON.parse(oldRec) as StoredKey;
    if (stored.id !== id) return null;
    if (patch.digest?.replaces !== undefined && patch.digest.replaces !== digest) return null;
    if (patch.monthlyCap !== undefined) stored.monthlyCap = patch.monthlyCap === null ? null : patch.monthlyCap.toString();
    if (touchesLimits(patch)) stored.limits = encodeKeyLimits(patchedLimits(decodeKeyLimits(stored.limits), patch));
    if (!patch.digest || patch.digest.digest === digest) {
      if (int(await scripts.mgKeyReplace([ctx.keyByDigest(digest)], [id, oldRec, JSON.stringify(stored)])) !== 1) return AGAIN;
      return byId(ctx, id);
    }
    // A new digest lives under another hash tag: write the record there first, then point the
    // id at it, then drop the old record as it was read (the old key stops working at that step).
    const disabled = read === '1' ? '1' : '0';
    stored.digest = patch.digest.digest;
    stored.prefix = patch.digest.prefix;
    if (int(await scripts.mgKeyInsert([ctx.keyByDigest(stored.digest)], [id, JSON.stringify(stored), disabled])) !== 1) return null;
    const takeBack = () => scripts.mgKeyDelete([ctx.keyByDigest(stored.digest)], [id]);
    // The id moves to the new digest only from the one read above: of two rotations at once, the
    // one that finds the id moved already takes its new record back (and, with `replaces`, the
    // next try answers null).
    if (int(await scripts.mgSetIfEquals([ctx.keyIdIndex(id)], [digest, stored.digest])) !== 1) {
      await takeBack();
      return AGAIN;
    }
    // A disable, a cap or limits written to the old record since it was read would be lost with
    // it: then the id goes back to the old record, the new one is taken back, and it starts over.
    if (int(await scripts.mgKeyDeleteIfSame([ctx.keyByDigest(digest)], [id, oldRec, disabled])) !== 1) {
      await scripts.mgSetIfEquals([ctx.keyIdIndex(id)], [stored.digest, digest]);
      await takeBack();
      return AGAIN;
    }
    return byId(ctx, id);
  }

  return {
    async insert(key: ApiKeyRecord): Promise<boolean> {
      const { monthlyCap, disabled, models: _m, tokensPerMinute: _t, budgets: _b, ...rest } = key;
      const stored: StoredKey = { ...rest, monthlyCap: monthlyCap === null ? null : monthlyCap.toString(), limits: encodeKeyLimits(key) };
      return ctx.run('insertKey', async () => {
        const claimed = await client.set(ctx.keyIdIndex(key.id), key.digest, 'NX');
        if (claimed === null) return false;
        const inserted = await scripts.mgKeyInsert(
          [ctx.keyByDigest(key.digest)],
          [key.id, JSON.stringify(stored), disabled ? '1' : '0'],
        );
        if (int(inserted) !== 1) {
          await scripts.mgDelIfEquals([ctx.keyIdIndex(key.id)], [key.digest]);
          return false;
        }
        await client.sadd(ctx.account(key.accountId, 'keys'), key.id);
        return true;
      });
    },

    async findByDigest(digest: string): Promise<ApiKeyRecord | null> {
      return parseKey(await ctx.run('findKey', () => byDigest(ctx, digest)));
    },

    async get(id: string): Promise<ApiKeyRecord | null> {
      return ctx.run('getKey', () => byId(ctx, id));
    },

    async setDisabled(id: string, disabled: boolean): Promise<boolean> {
      return ctx.run('setKeyDisabled', async () => {
        // A rotation may move the record under another digest meanwhile: then try it there.
        for (let attempt = 0; attempt < MOVES; attempt++) {
          const digest = await digestOf(ctx, id);
          if (digest === null) return false;
          if (int(await scripts.mgKeySetDisabled([ctx.keyByDigest(digest)], [id, disabled ? '1' : '0'])) === 1) return true;
          if ((await digestOf(ctx, id)) === digest) return false;
        }
        return false;
      });
    },

    async update(id: string, patch: KeyPatch): Promise<ApiKeyRecord | null> {
      return ctx.run('updateKey', async () => {
        // Each step is a compare-and-set on what was read; one that finds the record changed
        // (another update, a disable, a rotation) reads it again and starts over.
        for (let attempt = 0; attempt < MOVES; attempt++) {
          const r = await updateOnce(id, patch);
          if (r !== AGAIN) return r;
        }
        return null;
      });
    },
    async delete(id: string): Promise<boolean> {
      return ctx.run('deleteKey', async () => {
        const key = await byId(ctx, id);
        if (!key) return false;
        await scripts.mgKeyDelete([ctx.keyByDigest(key.digest)], [id]);
        await scripts.mgDelIfEquals([ctx.keyIdIndex(id)], [key.digest]);
        await client.srem(ctx.account(key.accountId, 'keys'), id);
        return true;
      });
    },

    async listByAccount(accountId: string): Promise<ApiKeyRecord[]> {
      return ctx.run('listKeys', async () => {
        const ids = list(await client.smembers(ctx.account(accountId, 'keys'))).map((v) => str(v) ?? '');
        const keys = await Promise.all(ids.map((id) => byId(ctx, id)));
        return keys.filter((k): k is ApiKeyRecord => k !== null && k.accountId === accountId);
      });
    },
  };
}
