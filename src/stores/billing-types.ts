/**
 * The billing store's interface and the records it reads and writes: holds, settles, credits
 * and the ledger. Money is always a bigint count of nano-USD (1 unit = 0.000000001 USD); times
 * are unix ms. types.ts re-exports all of it.
 */
import type { WindowResult } from './limit-types.js';

export type LedgerUnits =
  /**
   * `prompt` is every input token; `cachedPrompt` and `cacheWrite` (present when above zero)
   * are the parts of it read from and written to the provider's cache, billed at their own
   * prices. `reasoning` is the part of `completion` spent reasoning: shown, billed as completion.
   * `tools`: calls of priced hosted tools (`{web_search: 3}`), billed per call beside the tokens.
   */
  | {
      kind: 'tokens';
      prompt: number;
      completion: number;
      cachedPrompt?: number;
      cacheWrite?: number;
      /** Of `cacheWrite`, the tokens written to live an hour, at their own price. */
      cacheWrite1h?: number;
      reasoning?: number;
      tools?: Record<string, number>;
    }
  | { kind: 'images'; images: number; tier: string }
  | { kind: 'seconds'; seconds: number; tier: string }
  | { kind: 'speech_tokens'; tokens: number }
  /** Checks a guardrail (`id`) made of a call's text, each at the guardrail's price (a moderation). */
  | { kind: 'guardrail'; id: string; checks: number }
  /**
   * Money put into (an opening balance, a top-up) or taken out of (a negative adjustment) a
   * wallet, not by a call: its entry's `cost` is minus the amount credited, its key and model
   * are "". The reason says which ("opening balance", "top-up", or the operator's own words).
   * Credits are no key's spend and no usage. `adjustment` marks an operator's signed
   * correction (the admin API's adjustments, the CLI's `wallet adjust`) apart from a top-up.
   */
  | { kind: 'credit'; reason: string; adjustment?: true };

/**
 * How a ledger entry's units were measured: the upstream's own `usage` report, a count of the
 * produced output with the tokenizer (a stream that ended without usage, or a client that went
 * away), the gateway's estimate (units known before the call, e.g. images or seconds asked for),
 * or a response-cache hit (the stored answer's usage, billed at the cache's hit price).
 */
export type Measurement = 'usage' | 'tokenizer' | 'estimate' | 'cache';

/**
 * The unit prices a charge was computed at, USD per unit as exact decimal strings (the
 * catalog's form), named by the part of the units each multiplies: `prompt` (the prompt less
 * its cache reads and writes), `completion`, `cachedPrompt`, `cacheWrite`, `tool:<name>` per
 * hosted tool call; `images`, `seconds` or `tokens` (speech) for media. They are the prices
 * the call was held at, so the audit re-derives the cost: the sum of count x price over the
 * parts, rounded up to the nano-USD once, as billing rounds it.
 */
export type UnitPrices = Record<string, string>;

export interface LedgerEntry {
  /** The request id or job id the charge belongs to. */
  id: string;
  accountId: string;
  keyId: string;
  model: string;
  units: LedgerUnits;
  /** What was debited, in nano-USD: always the full list cost of the units. */
  cost: bigint;
  /** What the hold for the call was (0 when it had expired before the settle). */
  held: bigint;
  /** The cost was above the hold: the estimate was low, and the excess was debited anyway. */
  exceededHold: boolean;
  /** Null on credit entries (nothing was measured). */
  measured: Measurement | null;
  /** The upstream that served the call, when one did. */
  upstream?: string;
  /** Charges: the unit prices the cost was computed at. Absent on credits and on charges written before prices were kept. */
  prices?: UnitPrices;
  at: number;
}

export interface HoldRequest {
  holdId: string;
  accountId: string;
  keyId: string;
  amount: bigint;
  /** The key's monthly cap (nano-USD) or null for none. */
  monthlyCap: bigint | null;
  /** "YYYY-MM" in UTC: the month whose spend the cap is checked against. */
  month: string;
  /** A hold that is neither settled nor released stops counting after this long (unless renewed). */
  ttlMs: number;
  /** The key's and the account's budgets, each checked like the monthly cap; absent: none. */
  budgets?: BudgetCheck[];
}

/** What refused a hold: the wallet, the key's monthly cap, or one of the budgets. */
export type LimitSource = 'wallet' | 'key_monthly_cap' | BudgetSource;

/** Names a budget in a 402: whose it is and its period. */
export type BudgetSource = `${'key' | 'account'}_${'daily' | 'weekly' | 'monthly'}_budget`;

/**
 * One budget a hold is checked against: the spend settled in `period` by the key (or by the
 * whole account), plus what the key's (or the account's) open holds hold, plus the new
 * amount, must stay within `cap`. Spend is counted per period by every settle, at the time of
 * its ledger entry (see `spendPeriods`), whether or not any budget is set.
 */
export interface BudgetCheck {
  scope: 'key' | 'account';
  /** The period's name, as `spendPeriods` names it ("d2026-11-26", "w2026-11-23", "m2026-11"). */
  period: string;
  cap: bigint;
  source: BudgetSource;
}

export type HoldResult =
  | { ok: true }
  | {
      ok: false;
      limitSource: LimitSource;
      /** What could still be held against the limit that refused (never negative). */
      available: bigint;
    };

export interface SettleRequest {
  holdId: string;
  accountId: string;
  /**
   * "YYYY-MM" in UTC of the entry's time: the month the spend counts towards, whenever the
   * hold was placed (a call held on the 31st and answered on the 1st is the new month's).
   */
  month: string;
  /** The list-price cost of what was used: debited in full, even past the hold. */
  cost: bigint;
  entry: Omit<LedgerEntry, 'cost' | 'held' | 'exceededHold'>;
}

/** A page of one account's ledger: filters, and where the previous page ended. */
export interface LedgerQuery {
  accountId: string;
  /** Only the entries of this key. */
  keyId?: string;
  /** Only entries with `at` >= from (unix ms). */
  from?: number;
  /** Only entries with `at` < to (unix ms). */
  to?: number;
  /** The `nextCursor` of the previous page; omitted for the first page. Opaque. */
  cursor?: string;
  /** At most this many entries (1 to 1,000). */
  limit: number;
}

export interface LedgerPage {
  /** In the order they were appended (oldest first). */
  entries: LedgerEntry[];
  /**
   * Where this page ended: pass it as `cursor` for the next page, or later to read only the
   * entries appended since (a cursor stays valid for good).
   */
  nextCursor: string;
  /**
   * Whether entries past this page existed when it was read. A page may hold fewer than
   * `limit` entries while more follow (a driver may bound how far one page scans).
   */
  more: boolean;
}

export interface SettleResult {
  /** False when this hold id was already settled or released: nothing changed. */
  settled: boolean;
  charged: bigint;
  /** What the hold was when it was settled (0 when it had expired); absent when not settled. */
  held?: bigint;
}

/** A top-up or adjustment, recorded in the ledger. */
export interface CreditRequest {
  accountId: string;
  /** Names the credit for good: a credit with an id already in the account's ledger changes nothing. */
  creditId: string;
  /** Nano-USD added to the wallet; negative takes money out (it may leave the wallet below zero). */
  amount: bigint;
  reason: string;
  /** An operator's correction rather than a top-up: the entry's units say `adjustment: true`. */
  adjustment?: boolean;
  /** Unix ms of the entry. */
  at: number;
}

export interface CreditResult {
  /** False when this credit id was already applied: nothing changed. */
  applied: boolean;
  /** The wallet balance after the credit (or now, when not applied). */
  balance: bigint;
}

export interface WalletView {
  balance: bigint;
  held: bigint;
}

export interface KeyUsage {
  total: bigint;
  monthly: bigint;
  held: bigint;
}

/** A hold as the store keeps it, for the audit: open, or expired and not yet swept. */
export interface HoldView {
  holdId: string;
  keyId: string;
  amount: bigint;
  /** Unix ms, by the store's clock; null when the store keeps no expiry for it (it never lapses). */
  expiresAt: number | null;
}

/** A page of an account's holds, in no particular order. */
export interface HoldPage {
  holds: HoldView[];
  /** Pass as `cursor` for the next page; null when this was the last. */
  nextCursor: string | null;
  /**
   * The store's clock when the page was read (unix ms): a hold is open while its expiry is
   * after it. The audit judges expiries by it, not by its own clock.
   */
  at: number;
}

/**
 * An id with more than one charge in an account's ledger: a hold id (settles are idempotent
 * per hold id), or an entry's own id, the request or job id (each request or job is billed
 * once, whatever hold it went through).
 */
export interface DuplicateCharge {
  of: 'hold' | 'request';
  id: string;
  /** How many charges name it (2 or more). */
  charges: number;
}

/** One hit on a rate window (see `LimitStore.hit`), for a hold to count in the same step. */
export interface WindowHit {
  bucket: string;
  limit: number;
  windowMs: number;
  /** The account the window belongs to (see `LimitStore.hit`). */
  accountId: string;
}

export interface CountedHold {
  window: WindowResult;
  /** Null when the window refused the hit: then nothing was held. */
  hold: HoldResult | null;
}

export interface BillingStore {
  /**
   * Optional: only a driver that keeps rate windows beside its books has it, and it counts in
   * the windows of the LimitStore whose `windowsId` equals this store's. Atomic: counts `hit`
   * exactly as that store's `hit` would and, only when the window allowed it, places the hold
   * exactly as `placeHold` would, in one step (one transaction, one script, one round trip).
   * A refused hold leaves the hit counted: the request passed its rate check, as it would
   * with the two operations one after the other.
   */
  hitAndPlaceHold?(hit: WindowHit, req: HoldRequest): Promise<CountedHold>;
  /** Names the rate windows `hitAndPlaceHold` counts in (see `LimitStore.windowsId`). */
  readonly windowsId?: symbol;
  /**
   * Atomic hold-if-affordable. Places the hold only if
   *   balance - held(account) >= amount            (else limitSource 'wallet'), and
   *   spend(key, month) + held(key) + amount <= cap (else limitSource 'key_monthly_cap').
   * Expired holds are dropped before the check. A wallet below zero (a settle that exceeded
   * its hold) therefore refuses every hold until it is topped up.
   */
  placeHold(req: HoldRequest): Promise<HoldResult>;
  /**
   * Extends an open hold's expiry to `ttlMs` from now, so a live call that outlives the TTL
   * keeps its hold. False when the hold is gone (expired, settled or released).
   */
  renewHold(accountId: string, holdId: string, ttlMs: number): Promise<boolean>;
  /**
   * Atomic and idempotent per holdId. Debits the full `cost` (even past the hold: the wallet
   * and the key's month may go past their limits by the excess), adds it to the key's
   * monthly and all-time spend, appends one ledger entry and removes the hold. A hold that
   * already expired is still settled (the output was delivered; it must be billed). Each
   * hold id is closed once: a second settle, or a settle after release, changes nothing.
   */
  settle(req: SettleRequest): Promise<SettleResult>;
  /**
   * Atomic, idempotent: drops the hold without charging and closes the hold id, so a late
   * settle of it changes nothing. Returns whether an open hold was dropped.
   */
  release(accountId: string, holdId: string): Promise<boolean>;
  /**
   * Atomic: adds to the wallet and appends one ledger entry for it, in one step (every wallet
   * change is an entry, so the balance stays minus the sum of the ledger's costs): a credit
   * (units `{kind: 'credit', reason: 'top-up'}`, cost = -amount) with a fresh id. A top-up of
   * zero changes nothing and writes nothing. Returns the new balance. Not idempotent: an
   * operator's top-up that may be replayed goes through `credit` with an id of its own.
   */
  topUp(accountId: string, amount: bigint): Promise<bigint>;
  /**
   * Atomic, idempotent per (account, creditId): changes the balance by `amount` and appends
   * one ledger entry (units `{kind: 'credit', reason}`, cost = -amount, held 0, keyId and
   * model ""). It touches no key's spend. Operators' top-ups and adjustments go through it.
   */
  credit(req: CreditRequest): Promise<CreditResult>;
  /**
   * Optional (every built-in driver has it): whether the credit id was applied to the account
   * already. A retried credit the wallet's ceiling would refuse as new is told `applied: false`
   * with it, as any retry is; without it, such a retry is refused.
   */
  creditApplied?(accountId: string, creditId: string): Promise<boolean>;
  wallet(accountId: string): Promise<WalletView>;
  keyUsage(accountId: string, keyId: string, month: string): Promise<KeyUsage>;
  /**
   * What was settled in `period` (a name from spendPeriods) by the key `scope`, or by the
   * whole account when `scope` is "": the figure budgets are checked against.
   */
  periodSpend(accountId: string, scope: string, period: string): Promise<bigint>;
  /** Ledger entries of an account, oldest first. */
  ledger(accountId: string): Promise<LedgerEntry[]>;
  /**
   * One page of an account's ledger, oldest first, filtered by key and time. Paging with the
   * returned cursor visits every matching entry once, also while settles append new ones.
   */
  queryLedger(query: LedgerQuery): Promise<LedgerPage>;
  /**
   * The account's last `limit` entries (1 to 1,000), newest first: the store reads only those,
   * never the whole ledger, however long it is.
   */
  latestLedger(accountId: string, limit: number): Promise<LedgerEntry[]>;
  /** Number of open (unexpired) holds of an account. */
  openHolds(accountId: string): Promise<number>;
  /**
   * For the audit: one page (about `limit`, 1 to 1,000: Redis's HSCAN may give a small hash
   * whole) of every hold the store keeps for
   * the account, expired ones not yet dropped included, read without changing anything.
   * Paging visits each hold present throughout once.
   */
  listHolds(accountId: string, cursor: string | undefined, limit: number): Promise<HoldPage>;
  /**
   * For the audit: hold ids, and entry ids (request or job ids), with more than one charge (a
   * ledger entry that is not a credit) in the account's ledger, at most `limit` of each. On
   * sound books this is empty. The store finds them itself (an index, or a pass in the
   * database), so the caller never holds a whole ledger's ids.
   */
  duplicateCharges(accountId: string, limit: number): Promise<DuplicateCharge[]>;
  /**
   * For the audit: runs `read` with a billing store whose reads all see the books as of one
   * moment (a database snapshot), however many calls land meanwhile. Without it the audit
   * reads an account again until nothing changed during a reading.
   */
  snapshot?<T>(read: (billing: BillingStore) => Promise<T>): Promise<T>;
}
