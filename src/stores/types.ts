/**
 * The storage interfaces. Each one is small and says which operations are atomic.
 * Money is always a bigint count of nano-USD (1 unit = 0.000000001 USD); times are unix ms.
 *
 * Four implementations fit these interfaces: `memory/` (one process, nothing kept), `sqlite/`
 * (one process, durable), `postgres/` (several processes, durable) and `redis/` (several
 * processes sharing one Redis). Expected outcomes (unaffordable, limited) are returned values;
 * a store throws only when its infrastructure is broken (the gateway answers 503 then).
 */

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
}

export interface AccountRecord {
  id: string;
  /** Ids of "Contact sales" models this account was granted. */
  grants: string[];
  createdAt: number;
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
   * Atomic per key: sets the monthly cap and/or replaces the digest and display prefix (a
   * rotated key keeps its id, so its spend and ledger stay its own). Returns the updated key,
   * or null when no such key exists or the new digest belongs to another key.
   */
  update(id: string, patch: KeyPatch): Promise<ApiKeyRecord | null>;
  /** Deletes the key (its ledger entries stay). Returns false when no such key exists. */
  delete(id: string): Promise<boolean>;
}

export interface KeyPatch {
  monthlyCap?: bigint | null;
  /** A new digest, with its display prefix. */
  digest?: { digest: string; prefix: string };
}

export interface AccountStore {
  /**
   * Atomic create-if-absent: creates the account and credits its wallet with
   * `initialBalance` in one step. When the account exists nothing changes (its balance is
   * kept) and false is returned, so seeding from a config is idempotent.
   */
  create(account: AccountRecord, initialBalance: bigint): Promise<boolean>;
  get(id: string): Promise<AccountRecord | null>;
  /** Replaces the account's grants. Returns false when no such account exists. */
  setGrants(id: string, grants: string[]): Promise<boolean>;
  list(): Promise<AccountRecord[]>;
}

export type LedgerUnits =
  | { kind: 'tokens'; prompt: number; completion: number }
  | { kind: 'images'; images: number; tier: string }
  | { kind: 'seconds'; seconds: number; tier: string }
  | { kind: 'speech_tokens'; tokens: number }
  /**
   * Money put into (a top-up) or taken out of (a negative adjustment) a wallet by an operator,
   * not a call: its entry's `cost` is minus the amount credited, its key and model are "".
   */
  | { kind: 'credit'; reason: string };

/**
 * How a ledger entry's units were measured: the upstream's own `usage` report, a count of the
 * produced output with the tokenizer (a stream that ended without usage, or a client that went
 * away), or the gateway's estimate (units known before the call, e.g. images or seconds asked for).
 */
export type Measurement = 'usage' | 'tokenizer' | 'estimate';

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
}

export type HoldResult =
  | { ok: true }
  | {
      ok: false;
      limitSource: 'wallet' | 'key_monthly_cap';
      /** What could still be held against the limit that refused (never negative). */
      available: bigint;
    };

export interface SettleRequest {
  holdId: string;
  accountId: string;
  /** The month the spend counts towards when the hold is gone (else the hold's own month). */
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
  /** Adds to the wallet; returns the new balance. Writes no ledger entry (seeding uses it). */
  topUp(accountId: string, amount: bigint): Promise<bigint>;
  /**
   * Atomic, idempotent per (account, creditId): changes the balance by `amount` and appends
   * one ledger entry (units `{kind: 'credit', reason}`, cost = -amount, held 0, keyId and
   * model ""). It touches no key's spend. Operators' top-ups and adjustments go through it.
   */
  credit(req: CreditRequest): Promise<CreditResult>;
  wallet(accountId: string): Promise<WalletView>;
  keyUsage(accountId: string, keyId: string, month: string): Promise<KeyUsage>;
  /** Ledger entries of an account, oldest first. */
  ledger(accountId: string): Promise<LedgerEntry[]>;
  /**
   * One page of an account's ledger, oldest first, filtered by key and time. Paging with the
   * returned cursor visits every matching entry once, also while settles append new ones.
   */
  queryLedger(query: LedgerQuery): Promise<LedgerPage>;
  /** Number of open (unexpired) holds of an account. */
  openHolds(accountId: string): Promise<number>;
}

export interface WindowResult {
  allowed: boolean;
  limit: number;
  /** Requests still allowed in the current window after this one. */
  remaining: number;
  /** Ms until the oldest counted request leaves the window (0 when none is counted). */
  resetMs: number;
}

export interface LimitStore {
  /**
   * Atomic count-if-under-limit over an exact sliding window: the request is counted (and
   * allowed) only if fewer than `limit` requests were counted in the last `windowMs`.
   * Refused requests are not counted. `accountId` names the account a bucket belongs to (a
   * key's window): a driver may keep that window beside the account's books, so a hold can
   * count it in the same step. Every hit of one bucket must pass the same `accountId`.
   */
  hit(bucket: string, limit: number, windowMs: number, accountId?: string): Promise<WindowResult>;
  /**
   * The same hit, answered synchronously. Only a store whose windows live in this process's
   * memory has it; the gateway then counts a request without a promise.
   */
  hitNow?(bucket: string, limit: number, windowMs: number): WindowResult;
  /**
   * Names where this store keeps its windows, one symbol per store instance: a BillingStore
   * with the same `windowsId` can count a hit in them inside a hold (`hitAndPlaceHold`).
   * Absent (or another symbol) when limits and books live apart, e.g. limits on Redis and
   * books on PostgreSQL: then a hit and a hold are two operations.
   */
  readonly windowsId?: symbol;
  /** Atomic: takes a slot in `pool` if fewer than `cap` unexpired leases are held. */
  acquireLease(pool: string, cap: number, leaseId: string, ttlMs: number): Promise<boolean>;
  /** Extends a live lease; false when it already expired or was released. */
  renewLease(pool: string, leaseId: string, ttlMs: number): Promise<boolean>;
  releaseLease(pool: string, leaseId: string): Promise<void>;
  /** Unexpired leases in `pool`. */
  activeLeases(pool: string): Promise<number>;
}

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
  upstreamJobId?: string | null;
  /** The upstream that accepted the job: polls and content go to it (absent: the model's first target). */
  upstream?: string | null;
  /** Instance currently responsible for the job, and until when (unix ms). */
  owner?: string | null;
  ownerUntil?: number;
}

export interface JobStore {
  create(job: JobRecord, ttlMs: number): Promise<void>;
  get(id: string): Promise<JobRecord | null>;
  /**
   * Atomic compare-and-set: applies `patch` only if the job's status is one of
   * `whenStatus` (any status when omitted). Returns the updated job, or null.
   */
  update(id: string, patch: Partial<JobRecord>, whenStatus?: JobStatus[]): Promise<JobRecord | null>;
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
  /** Replaces the in-flight record with the finished response, kept for `ttlMs`. */
  complete(scope: string, fingerprint: string, response: StoredResponse, ttlMs: number): Promise<void>;
  /** Forgets the record, so the request may run again. */
  abandon(scope: string): Promise<void>;
}

export interface Stores {
  accounts: AccountStore;
  keys: KeyStore;
  billing: BillingStore;
  limits: LimitStore;
  jobs: JobStore;
  content: ContentStore;
  idempotency: IdempotencyStore;
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
  /** Releases connections the stores opened themselves. */
  close(): Promise<void>;
}
