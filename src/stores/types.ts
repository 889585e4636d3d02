/**
 * The storage interfaces. Each one is small and says which operations are atomic.
 * Money is always a bigint count of nano-USD (1 unit = 0.000000001 USD); times are unix ms.
 *
 * Four implementations fit these interfaces: `memory/` (one process, nothing kept), `sqlite/`
 * (one process, durable), `postgres/` (several processes, durable) and `redis/` (several
 * processes sharing one Redis). Expected outcomes (unaffordable, limited) are returned values;
 * a store throws only when its infrastructure is broken (the gateway answers 503 then).
 */

import type { BillingStore } from './billing-types.js';
import type { LimitStore } from './limit-types.js';
import type { BatchStore } from './batch-types.js';

export type KeyKind = 'developer' | 'agent';

export interface ApiKeyRecord {
  /** Public, non-secret id ("key_..."), used by the admin API and in the ledger. */
  id: string;
  /** Hex SHA-256 of the plain key. The plain key itself is never stored. */
  digest: string;
  /** Short non-secret display prefix, e.g. "sk-mg-Ab12". */
  prefix: string;
  accountId: string;
  kind: KeyKind;
  /** Agent keys: the one text model they may call. Developer keys: null. */
  model: string | null;
  label: string | null;
  /** Optional monthly spend cap in nano-USD. */
  monthlyCap: bigint | null;
  disabled: boolean;
  createdAt: number;
  /**
   * The models the key may call: exact ids, or a prefix ending in `*` ("acme/*"). Absent or
   * null: every model its kind may call.
   */
  models?: string[] | null;
  /** Tokens per minute for this key, over the configured default; absent or null: the default. */
  tokensPerMinute?: number | null;
  /** Spending budgets per period, beside the monthly cap; absent: none. */
  budgets?: Budget[];
}

/** The calendar periods a budget counts in: each starts at 00:00 UTC (a week on Monday). */
export type BudgetPeriod = 'day' | 'week' | 'month';

/** A spending budget: at most `amount` (nano-USD) of spend plus open holds per period. */
export interface Budget {
  amount: bigint;
  period: BudgetPeriod;
}

export interface AccountRecord {
  id: string;
  /** Ids of "Contact sales" models this account was granted. */
  grants: string[];
  createdAt: number;
  /** Spending budgets across all the account's keys; absent: none. */
  budgets?: Budget[];
}

export interface KeyStore {
  /** Atomic insert. Returns false (and changes nothing) if the id or digest already exists. */
  insert(key: ApiKeyRecord): Promise<boolean>;
  findByDigest(digest: string): Promise<ApiKeyRecord | null>;
  get(id: string): Promise<ApiKeyRecord | null>;
  /** Returns false when no such key exists. */
  setDisabled(id: string, disabled: boolean): Promise<boolean>;
  listByAccount(accountId: string): Promise<ApiKeyRecord[]>;
  /**
   * Atomic per key: sets the monthly cap, the limits (models, tokens per minute, budgets) and/or replaces the digest and display prefix (a
   * rotated key keeps its id, so its spend and ledger stay its own). Returns the updated key,
   * or null when no such key exists or the new digest belongs to another key.
   */
  update(id: string, patch: KeyPatch): Promise<ApiKeyRecord | null>;
  /** Deletes the key (its ledger entries stay). Returns false when no such key exists. */
  delete(id: string): Promise<boolean>;
}

export interface KeyPatch {
  monthlyCap?: bigint | null;
  models?: string[] | null;
  tokensPerMinute?: number | null;
  budgets?: Budget[];
  /**
   * A new digest, with its display prefix. With `replaces`, only if the key's digest is still
   * that one (a rotation: of two at once, one wins and the other gets null, so no secret is
   * shown that does not work).
   */
  digest?: { digest: string; prefix: string; replaces?: string };
}

export interface AccountStore {
  /**
   * Atomic create-if-absent: creates the account and credits its wallet with
   * `initialBalance` in one step, as a ledger entry (a credit with id "opening-balance" and
   * reason "opening balance"; none for a zero balance). When the account exists nothing
   * changes (its balance is kept) and false is returned, so seeding from a config is
   * idempotent. An account whose ledger already has its opening balance (its record was lost,
   * its books kept) is created without a second one.
   */
  create(account: AccountRecord, initialBalance: bigint): Promise<boolean>;
  get(id: string): Promise<AccountRecord | null>;
  /** Replaces the account's grants. Returns false when no such account exists. */
  setGrants(id: string, grants: string[]): Promise<boolean>;
  /** Replaces the account's budgets. Returns false when no such account exists. */
  setBudgets(id: string, budgets: Budget[]): Promise<boolean>;
  list(): Promise<AccountRecord[]>;
}

export type {
  BillingStore,
  BudgetCheck,
  BudgetSource,
  LimitSource,
  CountedHold,
  CreditRequest,
  CreditResult,
  DuplicateCharge,
  HoldPage,
  HoldRequest,
  HoldView,
  HoldResult,
  KeyUsage,
  LedgerEntry,
  LedgerPage,
  LedgerQuery,
  LedgerUnits,
  Measurement,
  SettleRequest,
  SettleResult,
  UnitPrices,
  WalletView,
  WindowHit,
} from './billing-types.js';
export type { LimitStore, TokenResult, WindowResult } from './limit-types.js';
export type { BatchLine, BatchRecord, BatchStatus, BatchStore, FileRecord, HeldTextPrices, RecordPage } from './batch-types.js';
export { BATCH_DONE } from './batch-types.js';

export type JobStatus = 'queued' | 'in_progress' | 'completed' | 'failed';

export interface JobRecord {
  id: string;
  object: 'image' | 'video';
  accountId: string;
  keyId: string;
  model: string;
  status: JobStatus;
  progress: number;
  /** Unix seconds. */
  createdAt: number;
  completedAt: number | null;
  expiresAt: number | null;
  error: { code: string; message: string } | null;
  result: unknown;
  /** Video jobs. */
  prompt?: string;
  seconds?: number;
  size?: string;
  /** Billing and tracking. */
  holdId: string;
  leaseId: string;
  tier: string;
  /**
   * The per-unit price of `tier` the job was held at (pico-USD per second or image, as an
   * exact integer string: JSON has no bigint). The job is billed at it, whichever instance
   * finishes it and whatever that instance's catalog says now. Absent on records written
   * before it existed: those are billed at the catalog's price.
   */
  heldUnitPrice?: string;
  upstreamJobId?: string | null;
  /** The upstream that accepted the job: polls and content go to it (absent: the model's first target). */
  upstream?: string | null;
  /** Instance currently responsible for the job, and until when (unix ms). */
  owner?: string | null;
  ownerUntil?: number;
  /**
   * The charge of a finished job, written with its `result` before the charge is made (the job
   * still unfinished, its result not shown): whichever instance ends the job makes this charge
   * (once: settles are idempotent per hold id) and completes it, so a job that was paid for is
   * never ended as failed or lost.
   */
  charging?: JobCharge | null;
}

/** What a finished media job is charged: the images or seconds, at the job's tier. */
export interface JobCharge {
  /** What the upstream reported it produced (images, seconds); null when it did not say. */
  returned: number | null;
  /** What was asked for (and held). */
  asked: number;
  /** The unit price it is billed at (pico-USD, integer text); null: the model's list price. */
  unitPrice: string | null;
  /** The upstream that produced it. */
  upstream: string | null;
  /** The ledger entry's id when it is not the hold id. */
  entryId?: string;
}

/**
 * A job's claim as an update expects it: its `owner`, and its `ownerUntil` when given (an
 * owner's deadlines only ever grow, so the pair names one renewal of the claim).
 */
export interface JobClaim {
  owner: string;
  ownerUntil?: number;
}

/** Whether `job` is claimed as `claim` says (always, without one). */
export const claimedAs = (job: Pick<JobRecord, 'owner' | 'ownerUntil'>, claim: JobClaim | undefined): boolean =>
  !claim || (job.owner === claim.owner && (claim.ownerUntil === undefined || job.ownerUntil === claim.ownerUntil));

export interface JobStore {
  create(job: JobRecord, ttlMs: number): Promise<void>;
  get(id: string): Promise<JobRecord | null>;
  /**
   * Atomic compare-and-set: applies `patch` only if the job's status is one of `whenStatus`
   * (any status when omitted) and, with `whenClaim`, only if the job is claimed as it says.
   * Returns the updated job, or null.
   */
  update(id: string, patch: Partial<JobRecord>, whenStatus?: JobStatus[], whenClaim?: JobClaim): Promise<JobRecord | null>;
  /** Jobs not yet completed or failed. */
  listUnfinished(): Promise<JobRecord[]>;
  /**
   * One page of an account's unexpired jobs of one kind, in (createdAt, id) order (`asc` or
   * `desc`), strictly after the `after` position when given, at most `limit` of them.
   */
  listByAccount(accountId: string, object: JobRecord['object'], page: JobPage): Promise<JobRecord[]>;
  /**
   * Atomic compare-and-delete: removes the job only if its status is one of `whenStatus`
   * (any status when omitted). True when it was removed.
   */
  delete(id: string, whenStatus?: JobStatus[]): Promise<boolean>;
}

export interface JobPage {
  order: 'asc' | 'desc';
  /** The position of the last job of the previous page. */
  after?: { createdAt: number; id: string };
  limit: number;
}

export interface BrandRecord {
  id: string;
  accountId: string;
  name: string;
  description: string;
  voice: string;
  createdAt: number;
}

export interface DocumentRecord {
  id: string;
  accountId: string;
  brand: string | null;
  title: string;
  text: string;
  createdAt: number;
}

export interface ContentStore {
  putBrand(brand: BrandRecord): Promise<void>;
  getBrand(accountId: string, id: string): Promise<BrandRecord | null>;
  listBrands(accountId: string): Promise<BrandRecord[]>;
  deleteBrand(accountId: string, id: string): Promise<boolean>;
  putDocument(doc: DocumentRecord): Promise<void>;
  getDocument(accountId: string, id: string): Promise<DocumentRecord | null>;
  listDocuments(accountId: string): Promise<DocumentRecord[]>;
  deleteDocument(accountId: string, id: string): Promise<boolean>;
  /** Changes whenever the account's documents change, so cached indexes can be rebuilt. */
  documentsVersion(accountId: string): Promise<number>;
}

/** A response kept for Idempotency-Key replays. */
export interface StoredResponse {
  status: number;
  headers: Record<string, string>;
  /** Base64 of the body bytes. */
  body: string;
  /**
   * Set on the record of an answer too large to keep (its body then empty): the key stays
   * used, but a replay is refused instead of served.
   */
  unreplayable?: true;
  /** The model and upstream that answered: a replay's access line and metrics name them too. */
  model?: string;
  upstream?: string;
}

/**
 * The byte quota of the finished records of one account: their stored sizes (the record's
 * JSON, in UTF-8 bytes: `storedBytes`) count against `maxBytes`, and storing one that takes
 * the total past it evicts that account's oldest records (oldest: the first to expire) until
 * it fits. A record larger than `maxBytes` on its own is not kept at all (the scope is then
 * forgotten, as by `abandon`).
 */
export interface IdempotencyQuota {
  account: string;
  maxBytes: number;
}

/** The size a finished record counts for against its account's quota. */
export function storedBytes(fingerprint: string, response: StoredResponse): number {
  return Buffer.byteLength(JSON.stringify({ fingerprint, response }));
}

export type IdempotencyBegin =
  | { state: 'started' }
  | { state: 'in_flight'; fingerprint: string }
  | { state: 'done'; fingerprint: string; response: StoredResponse };

export interface IdempotencyStore {
  /**
   * Atomic create-if-absent: when `scope` has no record, records it as in flight with
   * `fingerprint` (for at most `lockTtlMs`) and returns "started"; otherwise returns the record.
   */
  begin(scope: string, fingerprint: string, lockTtlMs: number): Promise<IdempotencyBegin>;
  /**
   * Extends a record still in flight with `fingerprint` to `lockTtlMs` from now, and returns
   * true; returns false (changing nothing) when the scope holds no such record: finished,
   * abandoned, lapsed, or another request's. A running call renews its record, so the
   * marker lives as long as the call, while a crashed instance's lapses within one TTL.
   */
  renew(scope: string, fingerprint: string, lockTtlMs: number): Promise<boolean>;
  /**
   * Replaces the in-flight record with the finished response, kept for `ttlMs`. With a
   * `quota`, the record counts against its account's bytes (see IdempotencyQuota); without
   * one (the gateway's own small records) it counts against nothing.
   */
  complete(scope: string, fingerprint: string, response: StoredResponse, ttlMs: number, quota?: IdempotencyQuota): Promise<void>;
  /** Forgets the record, so the request may run again. */
  abandon(scope: string): Promise<void>;
}

/** A stored answer of the response cache: its bytes as stored, and when they were stored (unix ms). */
export interface CachedAnswer {
  value: string;
  storedAt: number;
}

/**
 * The response cache's entries, each under a key that starts with its account's id and `:`
 * (so an account's entries are found, and purged, by their prefix).
 */
export interface ResponseCacheStore {
  /** The entry under `key` while it lives (its TTL not passed), else null. */
  get(key: string): Promise<CachedAnswer | null>;
  /**
   * Stores `value` under `key` (replacing any entry there) for `ttlMs`, counted against
   * `account`'s bytes: the account's oldest entries are evicted until its total fits
   * `maxBytes`; a value larger than `maxBytes` alone is not stored (and the entry it replaces
   * is dropped all the same). Atomic per account: the total never stays past the cap.
   */
  put(account: string, key: string, value: string, ttlMs: number, maxBytes: number): Promise<void>;
  /** Drops every entry (only `account`'s when given); resolves with how many were dropped. */
  purge(account?: string): Promise<number>;
}

export interface Stores {
  accounts: AccountStore;
  keys: KeyStore;
  billing: BillingStore;
  limits: LimitStore;
  jobs: JobStore;
  content: ContentStore;
  idempotency: IdempotencyStore;
  responseCache: ResponseCacheStore;
  /** Files and batches (OpenAI's Files and Batch APIs). */
  batches: BatchStore;
  /**
   * Resolves when every backend the stores need answers; rejects (StoreUnavailableError)
   * naming what does not. Readiness (`GET /ready`) calls it. Without it the stores count as
   * always answering.
   */
  ping?(): Promise<void>;
  /**
   * A warning to log at start-up when the stores keep nothing durable (e.g. a Redis with
   * neither AOF nor RDB snapshots), else null. Without it nothing is checked.
   */
  durabilityWarning?(): Promise<string | null>;
  /**
   * Where the books are, as a digest (src/stores/identity.ts): settle journal files carry it,
   * and a journal takes over only files of its own store (or files that name none).
   */
  identity?: string;
  /** Releases connections the stores opened themselves. */
  close(): Promise<void>;
}
