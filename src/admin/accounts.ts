/**
 * The admin API: programmatic, on the gateway object, and behind the CLI.
 * None of it is reachable over HTTP with a developer or agent key.
 */
import { digestKey, displayPrefix, generateKey, keyIdFor, randomBase62, shownId } from '../auth/keys.js';
import { GatewayError } from '../errors.js';
import type { Services } from '../services.js';
import { formatUsd, MAX_NANO, parseUsd } from '../billing/money.js';
import { type AuditOptions, type AuditReport, auditBooks } from '../billing/audit.js';
import { BATCH_WINDOW_MS } from '../billing/batch.js';
import { MAX_LEDGER_PAGE } from '../stores/ledger-query.js';
import type { ApiKeyRecord, KeyKind, LedgerEntry, LedgerPage } from '../stores/types.js';
import { AdminError } from './admin-error.js';
import { type TimeInput, toUnixMs } from './times.js';
import { type BudgetInput, budgetsView, type KeyLimitsInput, keyLimitsPatch, parseBudgets } from './limits.js';
import { checkId, requireAccount } from './checks.js';
import { type ContentMethods, contentMethods } from './content-methods.js';

export interface CreateKeyInput {
  account: string;
  kind?: KeyKind;
  /** Agent keys: the text model they are pinned to. */
  model?: string | null;
  label?: string | null;
  monthlyCapUsd?: string | number | null;
  /** Models it may call (developer keys), tokens per minute, budgets per period. */
  models?: string[] | null;
  tokensPerMinute?: number | null;
  budgets?: BudgetInput[];
}

export interface CreatedKey {
  /** The plain key. Shown once: only its digest is stored. */
  key: string;
  id: string;
  prefix: string;
}

export type { TimeInput } from './times.js';

export interface LedgerQueryInput {
  account: string;
  /** Only this key's entries (its id, "key_..."). */
  key?: string;
  /** Entries at or after this time. */
  from?: TimeInput;
  /** Entries before this time. */
  to?: TimeInput;
  /** The `nextCursor` of the previous page. */
  cursor?: string;
  /** Entries per page, 1 to 1,000. @default 100 */
  limit?: number;
}

export type KeyView = Omit<ApiKeyRecord, 'digest' | 'monthlyCap' | 'budgets'> & {
  monthlyCapUsd: string | null;
  budgets: { usd: string; period: BudgetInput['period'] }[];
};

export interface Admin extends ContentMethods {
  createAccount(input: { id: string; walletUsd?: string | number; grants?: string[]; budgets?: BudgetInput[] }): Promise<{ created: boolean }>;
  /** Replaces an account's budgets (across all its keys); [] clears them. */
  setAccountBudgets(accountId: string, budgets: BudgetInput[]): Promise<void>;
  /** Every account, with its budgets and its wallet (USD decimal strings). */
  listAccounts(): Promise<
    Array<{ id: string; grants: string[]; budgets: ReturnType<typeof budgetsView>; createdAt: number; balanceUsd: string; heldUsd: string }>
  >;
  /** Adds to an account's wallet; returns the new balance as a USD decimal string. */
  topUp(accountId: string, usd: string | number): Promise<{ balanceUsd: string }>;
  wallet(accountId: string): Promise<{ balanceUsd: string; heldUsd: string }>;
  setGrants(accountId: string, modelIds: string[]): Promise<void>;
  createKey(input: CreateKeyInput): Promise<CreatedKey>;
  disableKey(id: string): Promise<void>;
  /** Lets a disabled key authenticate again (within the key cache's 5 s everywhere). */
  enableKey(id: string): Promise<void>;
  listKeys(accountId: string): Promise<KeyView[]>;
  getKey(id: string): Promise<KeyView | null>;
  /** Sets (a USD amount) or clears (null) a key's monthly cap. */
  setMonthlyCap(id: string, usd: string | number | null): Promise<KeyView>;
  /** Sets a key's model allow-list, tokens per minute and/or budgets (fields left out stay). */
  setKeyLimits(id: string, limits: KeyLimitsInput): Promise<KeyView>;
  /** Replaces a key's secret, keeping its id, spend and settings; the old secret stops working. */
  rotateKey(id: string): Promise<CreatedKey>;
  /** Deletes a key; its ledger entries stay. */
  deleteKey(id: string): Promise<void>;
  /**
   * Changes an account's wallet by a signed USD amount with a reason, as one ledger entry
   * (units `{kind: 'credit', reason}`, plus `adjustment: true` when `adjustment` says it is an
   * operator's correction rather than a top-up). `id` makes it idempotent: a credit id already
   * applied changes nothing. A negative amount may leave the wallet below zero.
   */
  credit(
    accountId: string,
    input: { amountUsd: string | number; reason: string; id?: string; adjustment?: boolean },
  ): Promise<{ id: string; applied: boolean; balanceUsd: string }>;
  /** Every ledger entry of an account, oldest first. */
  ledger(accountId: string): Promise<LedgerEntry[]>;
  /**
   * One page of an account's ledger, oldest first, filtered by key and time.
   * @example
   * let page = await gateway.admin.ledger({ account: 'acme', from: '2026-11-01', limit: 500 });
   * while (page.more) page = await gateway.admin.ledger({ account: 'acme', from: '2026-11-01', cursor: page.nextCursor });
   */
  ledger(query: LedgerQueryInput): Promise<LedgerPage>;
  /**
   * Checks the books of every account (or `options.account`): balances against the ledger,
   * held against the open holds, keys' month-to-date spend against their charges, no hold id
   * charged twice. `ok` is false when any difference was found.
   */
  audit(options?: AuditOptions): Promise<AuditReport>;
}

export { AdminError };
export { toUnixMs, whenToUnixMs } from './times.js';

function keyView(k: ApiKeyRecord): KeyView {
  const { digest: _digest, monthlyCap, budgets, ...rest } = k;
  return { models: null, tokensPerMinute: null, ...rest, monthlyCapUsd: monthlyCap === null ? null : formatUsd(monthlyCap), budgets: budgetsView(budgets) };
}

export async function insertKey(core: Services, plain: string, input: CreateKeyInput, id: string): Promise<boolean> {
  if (!(await core.stores.accounts.get(input.account))) throw new AdminError(`No account "${shownId(input.account)}".`, 'account');
  const kind = input.kind ?? 'developer';
  const model = input.model ?? null;
  if (kind === 'agent') {
    const m = model ? core.catalog.get(model) : undefined;
    if (m?.type !== 'text') throw new AdminError('An agent key must be pinned to a configured text model.', 'model');
  } else if (model !== null) {
    throw new AdminError('Only agent keys are pinned to a model.', 'model');
  }
  // An agent key keeps its one model: an allow-list is for developer keys.
  if (kind === 'agent' && input.models) throw new AdminError('models: an agent key is pinned to its one model.');
  const limits = keyLimitsPatch(input);
  const digest = digestKey(plain);
  return core.stores.keys.insert({
    id,
    digest,
    prefix: displayPrefix(plain),
    accountId: input.account,
    kind,
    model,
    label: input.label ?? null,
    monthlyCap: input.monthlyCapUsd === null || input.monthlyCapUsd === undefined ? null : usdOf('monthlyCapUsd', input.monthlyCapUsd),
    disabled: false,
    createdAt: core.now(),
    models: limits.models ?? null,
    tokensPerMinute: limits.tokensPerMinute ?? null,
    budgets: limits.budgets ?? [],
  });
}

/** A USD amount of the call's field `field`: its refusal names the field. */
function usdOf(field: string, value: string | number): bigint {
  try {
    return parseUsd(value);
  } catch (err) {
    if (err instanceof RangeError) throw new AdminError(`${field}: ${err.message}`, field);
    throw err;
  }
}

/**
 * A wallet holds at most MAX_NANO (about 9 million USD), and an adjustment takes it at most as
 * far below zero, so every sum the books make stays exact in every store (Redis's scripts
 * compare in doubles, exact to 2^53) and far from the stores' 64-bit limit, which credit after
 * credit (or adjustment after adjustment) would otherwise reach, and fail as a store fault (a
 * 503). Checked before the change, not with it: changes made at the same moment may pass it
 * together (an operator's rare, deliberate act; each is itself at most MAX_NANO).
 */
async function refuseOutOfRange(core: Services, accountId: string, signed: bigint, field: string): Promise<void> {
  const { balance } = await core.stores.billing.wallet(accountId);
  if (balance + signed > MAX_NANO) {
    throw new AdminError(`${field}: a wallet holds at most ${formatUsd(MAX_NANO)} USD; this one holds ${formatUsd(balance)} USD`);
  }
  if (signed < 0n && balance + signed < -MAX_NANO) {
    throw new AdminError(`${field}: an adjustment takes a wallet at most ${formatUsd(MAX_NANO)} USD below zero; this one holds ${formatUsd(balance)} USD`);
  }
}

/**
 * The forms of the ids the gateway gives its charges' ledger entries: request ids, batch line
 * ids (`<batch id>:<custom id>`), image and video job ids. A credit never takes one, so an id names one ledger entry (an
 * operator refunding `req_…` would otherwise give the refund the charge's own id).
 */
const CHARGE_ID = /^(?:(?:req|batch_req|img|video)_|batch_[^:]*:)/;

type AccountMethods = Pick<Admin, 'createAccount' | 'listAccounts' | 'topUp' | 'wallet' | 'setGrants' | 'setAccountBudgets' | 'credit'>;

function accountMethods(core: Services, hooks: { forgetGrants(accountId: string): void }): AccountMethods {
  const { stores } = core;
  return {
    async createAccount({ id, walletUsd = 0, grants = [], budgets }) {
      checkId('id', id);
      const record = { id, grants, createdAt: core.now(), budgets: parseBudgets(budgets) };
      const created = await stores.accounts.create(record, usdOf('walletUsd', walletUsd));
      return { created };
    },
    async listAccounts() {
      const accounts = (await stores.accounts.list()).sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
      return Promise.all(
        accounts.map(async (acct) => {
          const w = await stores.billing.wallet(acct.id);
          const { id, grants, createdAt } = acct;
          return { id, grants, budgets: budgetsView(acct.budgets), createdAt, balanceUsd: formatUsd(w.balance), heldUsd: formatUsd(w.held) };
        }),
      );
    },
    async topUp(accountId, usd) {
      await requireAccount(core, accountId);
      const amount = parseUsd(usd);
      await refuseOutOfRange(core, accountId, amount, 'usd');
      const balance = await stores.billing.topUp(accountId, amount);
      return { balanceUsd: formatUsd(balance) };
    },
    async wallet(accountId) {
      await requireAccount(core, accountId);
      const w = await stores.billing.wallet(accountId);
      return { balanceUsd: formatUsd(w.balance), heldUsd: formatUsd(w.held) };
    },
    async setGrants(accountId, modelIds) {
      if (!(await stores.accounts.setGrants(accountId, modelIds))) throw new AdminError(`No account "${shownId(accountId)}".`);
      hooks.forgetGrants(accountId);
    },
    async setAccountBudgets(accountId, budgets) {
      if (!(await stores.accounts.setBudgets(accountId, parseBudgets(budgets)))) throw new AdminError(`No account "${shownId(accountId)}".`);
      hooks.forgetGrants(accountId);
    },
    async credit(accountId, { amountUsd, reason, id, adjustment = false }) {
      await requireAccount(core, accountId);
      // A number is read as a number (1e-7 is a tenth of a micro-USD), not as its exponent text.
      const negative = typeof amountUsd === 'number' ? amountUsd < 0 || Object.is(amountUsd, -0) : amountUsd.trim().startsWith('-');
      const amount = usdOf('amountUsd', typeof amountUsd === 'number' ? Math.abs(amountUsd) : amountUsd.trim().slice(negative ? 1 : 0));
      if (amount === 0n) throw new AdminError('amountUsd: must not be zero');
      if (id !== undefined && CHARGE_ID.test(id)) {
        throw new AdminError(`id: ${JSON.stringify(id.slice(0, 80))} has the form of the gateway's charge ids (a request, batch line or job): a ledger entry's id names one entry; give the credit its own (e.g. "refund-${id.slice(0, 40)}")`, 'id');
      }
      try {
        await refuseOutOfRange(core, accountId, negative ? -amount : amount, 'amountUsd');
      } catch (err) {
        // A retry of a credit that was applied is told so, as every retry is: the bounds
        // refuse only a change that would be new.
        if (id !== undefined && (await stores.billing.creditApplied?.(accountId, id))) {
          const w = await stores.billing.wallet(accountId);
          return { id, applied: false, balanceUsd: formatUsd(w.balance) };
        }
        throw err;
      }
      const creditId = id ?? `cr_${randomBase62(20)}`;
      const r = await stores.billing.credit({ accountId, creditId, amount: negative ? -amount : amount, reason, adjustment, at: core.now() });
      return { id: creditId, applied: r.applied, balanceUsd: formatUsd(r.balance) };
    },
  };
}

type KeyMethods = Pick<
  Admin,
  'createKey' | 'disableKey' | 'enableKey' | 'listKeys' | 'getKey' | 'setMonthlyCap' | 'setKeyLimits' | 'rotateKey' | 'deleteKey'
>;

function keyMethods(core: Services): KeyMethods {
  const { stores } = core;
  return {
    async createKey(input) {
      const plain = generateKey();
      const id = `key_${randomBase62(20)}`;
      if (!(await insertKey(core, plain, input, id))) throw new AdminError('Key id collision; try again.');
      return { key: plain, id, prefix: displayPrefix(plain) };
    },
    async disableKey(id) {
      const key = await stores.keys.get(id);
      if (!key || !(await stores.keys.setDisabled(id, true))) throw new AdminError(`No key "${shownId(id)}".`);
      core.auth.forget(key.digest);
    },
    async enableKey(id) {
      const key = await stores.keys.get(id);
      if (!key || !(await stores.keys.setDisabled(id, false))) throw new AdminError(`No key "${shownId(id)}".`);
      core.auth.forget(key.digest);
    },
    async listKeys(accountId) {
      await requireAccount(core, accountId, 'account');
      return (await stores.keys.listByAccount(accountId)).map(keyView);
    },
    async getKey(id) {
      const key = await stores.keys.get(id);
      return key ? keyView(key) : null;
    },
    async setMonthlyCap(id, usd) {
      const key = await stores.keys.update(id, { monthlyCap: usd === null ? null : usdOf('monthlyCapUsd', usd) });
      if (!key) throw new AdminError(`No key "${shownId(id)}".`);
      core.auth.forget(key.digest);
      return keyView(key);
    },
    async setKeyLimits(id, input) {
      const current = await stores.keys.get(id);
      if (!current) throw new AdminError(`No key "${shownId(id)}".`);
      if (current.kind === 'agent' && input.models) throw new AdminError('models: an agent key is pinned to its one model.');
      const key = await stores.keys.update(id, keyLimitsPatch(input));
      if (!key) throw new AdminError(`No key "${shownId(id)}".`);
      core.auth.forget(key.digest);
      return keyView(key);
    },
    async rotateKey(id) {
      const old = await stores.keys.get(id);
      if (!old) throw new AdminError(`No key "${shownId(id)}".`);
      const plain = generateKey();
      const key = await stores.keys.update(id, { digest: { digest: digestKey(plain), prefix: displayPrefix(plain), replaces: old.digest } });
      if (!key) {
        if (!(await stores.keys.get(id))) throw new AdminError(`No key "${shownId(id)}".`);
        // Another rotation (or a second instance's) replaced the secret first: this one's new
        // secret was never stored, so it is not shown.
        throw new GatewayError('conflict', `Key "${id}" was rotated by another call at the same time; its secret is that call's. Rotate again for a new one.`, {
          status: 409,
          type: 'invalid_request_error',
          param: 'id',
        });
      }
      core.auth.forget(old.digest);
      return { key: plain, id, prefix: key.prefix };
    },
    async deleteKey(id) {
      const key = await stores.keys.get(id);
      if (!key) throw new AdminError(`No key "${shownId(id)}".`);
      // A key the configuration file lists is seeded again at every start: deleted here, it
      // would come back. It is disabled here (that stays), or removed from the file.
      if (core.cfg.keys.some((k) => keyIdFor(digestKey(k.key)) === id)) {
        throw new GatewayError('conflict', `Key "${id}" is listed in the configuration file, which seeds it again at every start: disable it here (that lasts), and remove it from the file's keys to delete it.`, {
          status: 409,
          type: 'invalid_request_error',
          param: 'id',
        });
      }
      if (!(await stores.keys.delete(id))) throw new AdminError(`No key "${shownId(id)}".`);
      core.auth.forget(key.digest);
    },
  };
}

/** Admin['ledger']: every entry of an account (its id), or one page of a query. */
function ledger(core: Services): Admin['ledger'] {
  const { stores } = core;
  return (async (arg: string | LedgerQueryInput) => {
    if (typeof arg === 'string') return stores.billing.ledger(arg);
    if (!arg || typeof arg.account !== 'string' || arg.account === '') throw new AdminError('A ledger query needs an account.');
    const limit = arg.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LEDGER_PAGE) {
      throw new AdminError(`limit: must be an integer from 1 to ${MAX_LEDGER_PAGE}, got ${String(arg.limit)}`);
    }
    await requireAccount(core, arg.account);
    try {
      return await stores.billing.queryLedger({
        accountId: arg.account,
        limit,
        ...(arg.key === undefined ? {} : { keyId: arg.key }),
        ...(arg.from === undefined ? {} : { from: toUnixMs(arg.from, 'from') }),
        ...(arg.to === undefined ? {} : { to: toUnixMs(arg.to, 'to') }),
        ...(arg.cursor === undefined ? {} : { cursor: arg.cursor }),
      });
    } catch (err) {
      // The store's rules for a query (a cursor it never returned, ...) are the caller's mistake,
      // named by the field the store's message begins with, as the caller called it.
      if (err instanceof RangeError) {
        const field = /^ledger query: (\w+)/.exec(err.message)?.[1];
        const param = field === 'accountId' ? 'account' : field === 'keyId' ? 'key' : (field ?? null);
        throw new AdminError(err.message.replace(/^ledger query: /, ''), param);
      }
      throw err;
    }
  }) as Admin['ledger'];
}

/**
 * The programmatic admin. Its methods are closures, not class methods: they keep working when
 * taken off the object (`const { createKey } = gateway.admin`).
 */
export function createAdmin(core: Services, hooks: { forgetGrants(accountId: string): void }): Admin {
  return { ...accountMethods(core, hooks), ...keyMethods(core), ledger: ledger(core), ...contentMethods(core), audit: audit(core) };
}

function audit(core: Services): Admin['audit'] {
  return async (options) => {
    try {
      // A hold lives at most the longest of the calls' and the jobs' TTL past its last renewal,
      // and a batch's completion window (its lines' holds last that long).
      const maxHoldTtlMs = Math.max(core.cfg.limits.holdTtlMs, core.cfg.limits.jobTtlMs, BATCH_WINDOW_MS);
      return await auditBooks(core.stores, { maxHoldTtlMs, ...options });
    } catch (err) {
      // An account that does not exist is the caller's mistake.
      if (err instanceof RangeError) throw new AdminError(err.message.replace(/^no account/, 'No account'));
      throw err;
    }
  };
}
