/**
 * What every Redis store shares: the client, the scripts, the key layout, a readiness gate
 * and reply parsing.
 *
 * Key layout (P = keyPrefix, default "mg:"; every id is escaped with `esc`, so a name is never
 * ambiguous and a hash tag always ends where it should):
 *
 *   P{a:<account>}:acct            hash   id, grants (JSON), createdAt
 *   P{a:<account>}:bal             string wallet balance, nano-USD
 *   P{a:<account>}:holds           hash   holdId -> {"a": amount, "kf", "mf", "tf": field names}
 *   P{a:<account>}:hexp            zset   holdId -> expiry (ms, Redis TIME)
 *   P{a:<account>}:held            hash   "all" and "k:<key>" -> sum of open holds
 *   P{a:<account>}:spend           hash   "t:<key>" all-time, "m:<month>:<key>" monthly spend
 *   P{a:<account>}:ledger          list   JSON ledger entries (bigints as strings), oldest first
 *   P{a:<account>}:ledger-ids      hash   holdId -> position of its settle's entry in the ledger (kept for good)
 *   P{a:<account>}:settled:<hold>  string closed marker of a released hold, expires after a day
 *   P{a:<account>}:credit:<id>     string applied credit id (opening balance, operator credit), kept for good
 *   P{a:<account>}:ledger-v2       string the account's books were upgraded (ledger-upgrade.ts)
 *   P{a:<account>}:keys            set    key ids of the account
 *   P{a:<account>}:brands          hash   brandId -> JSON
 *   P{a:<account>}:docs            hash   documentId -> JSON
 *   P{a:<account>}:docver          string documents version
 *   P{a:<account>}:rl:<bucket>     zset   unique hit -> ms (a rate window of the account's, e.g. a key's)
 *   P{a:<account>}:rl:tokens:<b>   zset   take id -> ms (a key's tokens-per-minute window), and
 *   P{a:<account>}:rl:tokens:<b>:n hash   take id -> tokens, "#" -> their sum
 *   P{a:<account>}:idem-order      zset   Idempotency-Key scope -> expiry ms (the account's stored answers)
 *   P{a:<account>}:idem-sizes      hash   Idempotency-Key scope -> bytes it counts for
 *   P{a:<account>}:idem-total      string the sum of idem-sizes (the account's quota use)
 *   P{k:<digest>}                  hash   id, rec (JSON), disabled
 *   P{kid:<key id>}                string digest (the id -> digest index)
 *   P{rl:<bucket>}                 zset   unique hit -> ms (a rate window of no account, e.g. an IP's)
 *   P{ls:<pool>}                   zset   leaseId -> expiry ms
 *   P{j:<job id>}                  hash   top-level job field -> JSON value, with PEXPIRE
 *   P{idem:<scope>}                string Idempotency-Key record JSON, with PEXPIRE
 *   P{idx}:accounts                set    every account id
 *   P{idx}:jobs                    zset   unfinished job id -> when the job disappears (ms)
 *   P{idx}:ledger-upgraded         string every account's books were upgraded (ledger-upgrade.ts)
 *
 * The two index keys cannot share a slot with the records they list, so they are written with
 * their own commands, after (jobs) or before (accounts) the record's atomic script; readers
 * tolerate an index entry whose record is missing.
 */
import { StoreUnavailableError } from '../errors.js';
import { isCluster, type RedisClient } from './clients.js';
import { type BatchOp, Batches } from './batches.js';
import { BATCHABLE, type BatchableName, defineScripts, type Scripts } from './scripts.js';

/** Thrown when Redis cannot be reached or answered with an error (the gateway answers 503). */
export class RedisStoreError extends StoreUnavailableError {
  override readonly name = 'RedisStoreError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** Escapes the characters that structure key names, so any id is safe inside one. */
export function esc(id: string): string {
  // Most ids have none of them: testing first skips building a new string.
  return STRUCTURAL.test(id) ? id.replace(STRUCTURAL_ALL, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`) : id;
}
const STRUCTURAL = /[%{}:]/;
const STRUCTURAL_ALL = /[%{}:]/g;

export class RedisContext {
  readonly scripts: Scripts;
  private closed = false;
  private waiting: Promise<void> | undefined;

  constructor(
    readonly client: RedisClient,
    readonly prefix: string,
    /** How long an operation waits for a (re)connecting client before failing. */
    private readonly readyTimeoutMs: number,
  ) {
    if (/[{}]/.test(prefix)) throw new RangeError('keyPrefix must not contain "{" or "}" (they form hash tags)');
    this.scripts = defineScripts(client);
    // A Cluster's nodes answer independently: one batch for all of them would make every shard
    // wait out a failing one. ioredis already keeps one pipeline in flight per node there.
    this.batches = isCluster(client) ? null : new Batches(this.sendGroup);
    // A command on a connection that closed may never be answered (a client passed in without
    // a command timeout): its batch is given up, so the operations waiting behind it go on.
    if (this.batches) client.on('close', this.giveUpBatch);
  }

  // ---- key layout -------------------------------------------------------------------------

  /** A key of one account; all of them share the account's hash tag. */
  account(accountId: string, suffix: string): string {
    return `${this.prefix}{a:${esc(accountId)}}:${suffix}`;
  }
  keyByDigest(digest: string): string {
    return `${this.prefix}{k:${esc(digest)}}`;
  }
  keyIdIndex(keyId: string): string {
    return `${this.prefix}{kid:${esc(keyId)}}`;
  }
  /**
   * A rate window. One that belongs to an account (a key's) lives under the account's hash
   * tag, so a hold's script can count a hit in it in the same step. Key windows were once
   * `P{rl:key:<id>}`: after an upgrade they start empty under their new name, and since a
   * window spans 60 s, a key may get at most one extra window's worth of requests during
   * that minute (or while old and new instances run side by side); the old key expires.
   */
  bucket(name: string, accountId?: string): string {
    return accountId === undefined ? `${this.prefix}{rl:${esc(name)}}` : this.account(accountId, `rl:${esc(name)}`);
  }
  pool(name: string): string {
    return `${this.prefix}{ls:${esc(name)}}`;
  }
  job(id: string): string {
    return `${this.prefix}{j:${esc(id)}}`;
  }
  idempotency(scope: string): string {
    return `${this.prefix}{idem:${esc(scope)}}`;
  }
  index(name: 'accounts' | 'jobs' | 'ledger-upgraded' | 'batches'): string {
    return `${this.prefix}{idx}:${name}`;
  }

  // ---- running commands -------------------------------------------------------------------

  /**
   * Runs `op` once the client is ready. A client that is (re)connecting gets `readyTimeoutMs`
   * to become ready; after that, or on any Redis error, the call rejects with a
   * RedisStoreError. Nothing is queued for later: a caller never waits longer than about
   * readyTimeoutMs + commandTimeout.
   */
  async run<T>(what: string, op: () => Promise<T>): Promise<T> {
    this.batches?.flushNow();
    if (this.client.status !== 'ready') await this.ready(what);
    try {
      return await op();
    } catch (err) {
      if (err instanceof RedisStoreError) throw err;
      throw new RedisStoreError(`Redis ${what} failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
    }
  }

  /**
   * Runs a per-call script (a window hit, a hold, a settle, a release, a lease) like `run`,
   * but in batches (see batches.ts): at most one batch in flight, each hash tag's operations
   * of a batch in one script. Operations issued while the client is not ready go at once
   * through `run`, which bounds their wait for the connection. An operation outside the
   * batches (`run`) first sends what waits for an idle connection, so it never overtakes
   * those; it may overtake operations queued behind a batch in flight, and no caller depends
   * on the order of operations it has not yet been answered for. A Redis Cluster client
   * sends every operation at once, as its own script.
   */
  batched(what: string, script: BatchableName, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    if (!this.batches || this.client.status !== 'ready') return this.run(what, () => this.scripts[script](keys, args));
    return this.batches.submit({ what, script, keys, args });
  }

  /** Null for a Cluster client (see the constructor). */
  private readonly batches: Batches<BatchableName> | null;
  private readonly giveUpBatch = () => this.batches?.giveUp();

  /** One group of a batch: alone as its own script, several as one mgBatch. */
  private readonly sendGroup = async (ops: BatchOp<BatchableName>[]): Promise<unknown[]> => {
    if (ops.length === 1) {
      const op = ops[0] as BatchOp<BatchableName>;
      try {
        return [await this.run(op.what, () => this.scripts[op.script](op.keys, op.args))];
      } catch (err) {
        return [err];
      }
    }
    const keys: string[] = [];
    const args: (string | number)[] = [];
    for (const op of ops) {
      for (const k of op.keys) keys.push(k);
      args.push(BATCHABLE.indexOf(op.script) + 1, op.args.length);
      for (const a of op.args) args.push(a);
    }
    let replies: unknown[];
    try {
      replies = list(await this.run('batch', () => this.scripts.mgBatch(keys, args)));
    } catch (err) {
      const message = (err as Error)?.message ?? String(err);
      return ops.map((op) => new RedisStoreError(message.replace(/^Redis batch failed/, `Redis ${op.what} failed`), { cause: err }));
    }
    return ops.map((op, i) => {
      const r = replies[i];
      return r instanceof Error ? new RedisStoreError(`Redis ${op.what} failed: ${r.message}`, { cause: r }) : r;
    });
  };

  markClosed(): void {
    this.closed = true;
    this.client.off('close', this.giveUpBatch);
  }

  private ready(what: string): Promise<void> {
    const c = this.client;
    if (this.closed || c.status === 'end') {
      return Promise.reject(new RedisStoreError(`Redis ${what} failed: the connection is closed`));
    }
    // A lazyConnect client that never connected.
    if (c.status === 'wait') c.connect().catch(() => {});
    this.waiting ??= new Promise<void>((resolve, reject) => {
      const done = (err?: Error) => {
        clearTimeout(timer);
        c.off('ready', onReady);
        c.off('end', onEnd);
        this.waiting = undefined;
        if (err) reject(err);
        else resolve();
      };
      const onReady = () => done();
      const onEnd = () => done(new RedisStoreError('Redis connection was closed'));
      const timer = setTimeout(
        () => done(new RedisStoreError(`Redis is unreachable (connection ${c.status})`)),
        this.readyTimeoutMs,
      );
      // Registered in the same tick as the status check above, so no 'ready' is missed.
      c.on('ready', onReady);
      c.on('end', onEnd);
    });
    return this.waiting.catch((err: Error) => {
      throw new RedisStoreError(`Redis ${what} failed: ${err.message}`, { cause: err });
    });
  }
}

/** A count or duration as a non-negative integer Lua reads exactly (Infinity -> 2^53 - 1). */
export function whole(n: number): number {
  return Number.isNaN(n) ? 0 : Math.max(0, Math.min(Number.MAX_SAFE_INTEGER, Math.floor(n)));
}

// ---- reply parsing ----------------------------------------------------------------------------

/** An integer reply or decimal string (or nil) as a bigint. */
export function big(v: unknown): bigint {
  if (v === null || v === undefined || v === false) return 0n;
  if (typeof v === 'bigint') return v;
  if (typeof v === 'number') return BigInt(v);
  return BigInt(String(v));
}

/** An integer reply (a number, or a string with `stringNumbers`) as a number. */
export function int(v: unknown): number {
  if (v === null || v === undefined || v === false) return 0;
  return typeof v === 'number' ? v : Number(String(v));
}

export function list(v: unknown): unknown[] {
  return Array.isArray(v) ? v : [];
}

export function str(v: unknown): string | null {
  if (v === null || v === undefined) return null;
  return typeof v === 'string' ? v : Buffer.isBuffer(v) ? v.toString('utf8') : String(v);
}

/**
 * A hash reply as entries, whatever the client's reply mapping: a flat [field, value, ...]
 * array (RESP2 and the default "legacy" mapping), a plain object or a Map ("resp3").
 */
export function hashEntries(v: unknown): [string, string][] {
  const out: [string, string][] = [];
  if (Array.isArray(v)) {
    for (let i = 0; i + 1 < v.length; i += 2) out.push([str(v[i]) ?? '', str(v[i + 1]) ?? '']);
  } else if (v instanceof Map) {
    for (const [k, val] of v) out.push([str(k) ?? '', str(val) ?? '']);
  } else if (v && typeof v === 'object') {
    for (const [k, val] of Object.entries(v)) out.push([k, str(val) ?? '']);
  }
  return out;
}
