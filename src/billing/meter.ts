/**
 * The billed-call lifecycle, the one way any endpoint spends money:
 *
 *   open (a hold for the worst case, checked atomically against the wallet and the key's
 *   monthly cap) -> relay -> `bill` exactly once (the full list cost of what was used: the
 *   store settles the hold) or `cancel` (nothing was produced: the store releases the hold).
 *
 * Routes describe what they bill (the units and how they were measured); the cost, the ledger
 * entry and every write to the billing store are made here. Around that core:
 * - a live call renews its hold, so a call that outlives the hold's TTL is still billed;
 * - a settle the store cannot take is kept in the settle journal and retried until it lands;
 * - on shutdown, calls get a grace period to finish, then are aborted with what they produced
 *   billed (or their hold released when nothing reached the client).
 */
import type { Model } from '../catalog/catalog.js';
import { GatewayError } from '../errors.js';
import type { Logger } from '../observability/log.js';
import type {
  ApiKeyRecord,
  BillingStore,
  Budget,
  HoldRequest,
  HoldResult,
  KeyUsage,
  LedgerEntry,
  LedgerUnits,
  Measurement,
  SettleRequest,
  UnitPrices,
  WalletView,
} from '../stores/types.js';
import type { Tracked } from '../observability/record.js';
import type { SettleJournal } from './journal.js';
import { chargeOf } from './pricing.js';
import { monthOf } from './months.js';
import { budgetChecks } from './budgets.js';
import type { TokenTake } from '../limits/tokens.js';
import { OpenCalls } from './open-calls.js';
import { SettleWriter } from './settles.js';
import { type DeferredCheck, holdPlacer } from './holds-placing.js';

export type { DeferredCheck } from './holds-placing.js';

export { monthOf, nextMonthStart } from './months.js';

export type HoldRefusal = Extract<HoldResult, { ok: false }>;

export interface OpenRequest {
  /** The hold id: the request id, or the job id of a job that outlives its request. */
  id: string;
  key: Pick<ApiKeyRecord, 'id' | 'accountId' | 'monthlyCap' | 'budgets'>;
  /** The account's budgets, checked beside the key's. */
  accountBudgets?: readonly Budget[];
  /** The call's take from its key's tokens-per-minute window: corrected to the tokens used when it is billed. */
  tokens?: TokenTake | null;
  model: Model;
  /** The worst-case cost (nano-USD) to hold. */
  amount: bigint;
  /** How long the hold lives without renewal. Default: the configured hold TTL. */
  ttlMs?: number;
  /**
   * A job any instance can finish (videos): shutdown leaves it and its hold for the instance
   * that adopts it, instead of aborting it.
   */
  durable?: boolean;
  /** The request being observed: its record gets the model, units and cost, and stays open until the call ends. */
  observed?: Tracked | undefined;
  /** The request's key-rate check deferred to this hold (see `DeferredCheck`), taken by the caller. */
  keyCheck?: DeferredCheck | null;
}

export interface SettleOptions {
  /** The ledger entry's id when it is not the hold id (an image answered as a job). */
  entryId?: string;
  /** The upstream that served the call. */
  upstream?: string;
  /**
   * The per-unit price (pico-USD) the call was held at. Given, the units are billed at it
   * rather than at the catalog's current price: a job adopted by an instance whose catalog
   * has another price is still billed at the price its hold was placed at.
   */
  unitPricePico?: bigint;
  /** A response-cache hit: the fraction of the list cost billed (a decimal string, "0.5"). */
  hitPrice?: string;
}

export interface BilledCall {
  readonly id: string;
  readonly accountId: string;
  /** What the hold reserved (nano-USD). */
  readonly held: bigint;
  /** True once settled or released. */
  readonly closed: boolean;
  /**
   * Bills `units` at the model's list price (or at `options.unitPricePico`, the price it was
   * held at), in full even past the hold, once: every later
   * bill or cancel of this call is ignored. Resolves when the charge is in the store or,
   * if the store is failing, in the settle journal (it lands later).
   */
  bill(units: LedgerUnits, measured: Measurement, options?: SettleOptions): Promise<void>;
  /** Drops the hold without charging: nothing was produced. Ignored once closed. */
  cancel(): Promise<void>;
  /**
   * Lets the call go here without charging or releasing it: another instance took its job over
   * and ends its hold. It is no longer renewed here, and every later bill or cancel is ignored.
   */
  leave?(): void;
  /**
   * How to stop this call when the shutdown grace period is over: end it and settle what was
   * produced. Without one, an aborted call is released (nothing reached the client yet).
   */
  onAbort(stop: () => void): void;
  /**
   * Keeps the hold for `ttlMs` from now on (renewed at that length while this instance holds the
   * call): a job, once its record says who finishes it, holds for the job's life. Absent on a
   * call that cannot say.
   */
  keepFor?(ttlMs: number): Promise<void>;
}



export interface MeterDeps {
  billing: BillingStore;
  /** The windows deferred key checks count in; a hold folds the hit in when `billing` shares them. */
  windowsId?: symbol | undefined;
  journal: SettleJournal;
  now: () => number;
  log: Logger;
  /** Hold TTL of calls that name none. */
  holdTtlMs: number;
  /** Called after every settle that landed, with its ledger entry. */
  onBilled?: ((entry: LedgerEntry) => void) | undefined;
  /**
   * Called when a call no request observes is billed (a job that outlived its request, or one
   * adopted from another instance), so its spend still reaches the metrics and the log.
   */
  onUnobservedCharge?: ((charge: UnobservedCharge) => void) | undefined;
}

/** A charge made outside any request's record: a video job finished by the job runner. */
export interface UnobservedCharge {
  entryId: string;
  accountId: string;
  model: string;
  units: LedgerUnits;
  cost: bigint;
}

export interface Meter {
  /**
   * Opens a call; a refused hold is a returned value (nothing was held). A key-rate check
   * deferred to this hold (see `DeferredCheck`) that refuses throws its 429 instead.
   */
  tryOpen(req: OpenRequest): Promise<{ ok: true; call: BilledCall } | HoldRefusal>;
  /**
   * Places a hold that no call of this instance settles (a batch line's: whoever runs the line
   * settles it through `resume`). Checked like `tryOpen`'s; nothing renews it.
   */
  place(req: OpenRequest): Promise<HoldResult>;
  /**
   * A handle on a hold placed earlier, possibly by another instance (a job adopted after a
   * crash): it settles or releases that hold through the same lifecycle.
   */
  resume(req: { id: string; accountId: string; keyId: string; model: Model | undefined; durable?: boolean }): BilledCall;
  /** What `key` has spent (all time, this month, held now) and its account's wallet, for /key. */
  report(key: Pick<ApiKeyRecord, 'id' | 'accountId'>): Promise<{ usage: KeyUsage; wallet: WalletView }>;
  /** Calls open on this instance (held, not yet settled or released); `durable` jobs excluded. */
  openCalls(): number;
  /** Settles not yet in the store (kept in the journal, being retried). */
  pendingSettles(): number;
  /** Aborts every open call that is not durable (their abort handlers bill what was produced). */
  abortAll(): void;
  /** Resolves when no non-durable call is open, or after `ms`. Returns whether none is open. */
  idle(ms: number): Promise<boolean>;
  /** Stops renewing; tries every unlanded settle once more (what still fails stays journaled). */
  dispose(): Promise<void>;
}

class CallImpl implements BilledCall {
  closed = false;
  abortHandler: (() => void) | null = null;
  constructor(
    private readonly meter: MeterInternals,
    readonly id: string,
    readonly accountId: string,
    readonly keyId: string,
    /** Undefined only on a resumed call whose model is no longer configured: it can only release. */
    readonly model: Model | undefined,
    readonly held: bigint,
    readonly durable: boolean,
    private readonly observed?: Tracked | undefined,
    private readonly tokens?: TokenTake | null,
  ) {
    if (observed && model) {
      observed.record.model = model.id;
      observed.record.upstream = model.upstream;
      // A job that outlives its request (videos) is not part of the request's access line.
      if (!durable) observed.hold();
    }
  }

  /**
   * Closed: never aborted from now on, so its abort handler is let go. The handler is a stream
   * relay's, which holds the whole answer (its reads, the client's response). This call went
   * through the open calls' map, and an object that passed through a long-lived Map is still
   * kept by V8's young-generation collections after it was deleted (measured: bench/gc.ts, and
   * a heap snapshot cannot show it, it collects in full first): it is copied into the old
   * generation with everything it reaches, freed only by a full collection. Let go, the relay
   * dies young.
   */
  private close(): void {
    this.closed = true;
    this.abortHandler = null;
  }

  /** The call ended: the request it belongs to may be reported. */
  private ended(): void {
    if (this.observed && !this.durable) this.observed.release();
  }

  bill(units: LedgerUnits, measured: Measurement, options: SettleOptions = {}): Promise<void> {
    if (this.closed) return Promise.resolve();
    const model = this.model;
    if (!model) return this.cancel();
    let cost: bigint;
    // The prices the cost is computed at go on the ledger entry: the audit re-derives the cost.
    let prices: UnitPrices | undefined;
    try {
      ({ cost, prices } = chargeOf(model, units, options.unitPricePico, options.hitPrice));
    } catch (err) {
      // The units name a price the model no longer has (a configuration changed under a live
      // call): the work was done, so it is charged what was held for it rather than nothing.
      this.meter.priceMissing(this, err);
      cost = this.held;
    }
    this.close();
    const at = this.meter.now();
    // A durable job's request was answered (and reported) long before its bill.
    if (this.observed && !this.durable) {
      const r = this.observed.record;
      if (units.kind === 'tokens') {
        r.promptTokens = units.prompt;
        r.completionTokens = units.completion;
      } else if (units.kind === 'speech_tokens') {
        r.promptTokens = units.tokens;
      }
      r.costNano = cost;
    } else {
      this.meter.unobserved({ entryId: options.entryId ?? this.id, accountId: this.accountId, model: model.id, units, cost });
    }
    this.ended();
    const req: SettleRequest = {
      holdId: this.id,
      accountId: this.accountId,
      month: monthOf(at),
      cost,
      entry: {
        id: options.entryId ?? this.id,
        accountId: this.accountId,
        keyId: this.keyId,
        model: model.id,
        units,
        measured,
        ...(options.upstream ? { upstream: options.upstream } : {}),
        ...(prices ? { prices } : {}),
        at,
      },
    };
    // The call stays open (shutdown waits for it) until its charge is in the store or the
    // journal: the answer's last bytes go out after that, and the stores must outlive it.
    const written = this.meter.write(req).finally(() => this.meter.forget(this));
    if (!this.tokens) return written;
    const used = units.kind === 'tokens' ? units.prompt + units.completion : units.kind === 'speech_tokens' ? units.tokens : 0;
    return Promise.all([written, this.tokens.correct(used)]).then(() => undefined);
  }

  cancel(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.close();
    this.meter.forget(this);
    this.ended();
    if (!this.tokens) return this.meter.release(this);
    return Promise.all([this.meter.release(this), this.tokens.correct(0)]).then(() => undefined);
  }

  leave(): void {
    if (this.closed) return;
    this.close();
    this.meter.forget(this);
    this.ended();
  }

  onAbort(stop: () => void): void {
    this.abortHandler = stop;
  }

  keepFor(ttlMs: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return this.meter.keepFor(this, ttlMs);
  }
}

interface MeterInternals {
  now(): number;
  priceMissing(call: CallImpl, err: unknown): void;
  unobserved(charge: UnobservedCharge): void;
  forget(call: CallImpl): void;
  write(req: SettleRequest): Promise<void>;
  release(call: CallImpl): Promise<void>;
  keepFor(call: CallImpl, ttlMs: number): Promise<void>;
}

export function createMeter(deps: MeterDeps): Meter {
  const { billing, log } = deps;
  const settles = new SettleWriter(billing, deps.journal, log, deps.onBilled);
  const open = new OpenCalls(billing, deps.holdTtlMs, deps.now, log);
  const internals: MeterInternals = {
    now: deps.now,
    priceMissing: (call, err) => log.error({ msg: 'no price for the units billed; charged the hold', hold_id: call.id, err: errMessage(err) }),
    unobserved(charge) {
      try {
        deps.onUnobservedCharge?.(charge);
      } catch (err) {
        log.error({ msg: 'reporting a charge failed', entry_id: charge.entryId, err: errMessage(err) });
      }
    },
    forget: (call) => open.forget(call),
    write: (req) => settles.write(req),
    async keepFor(call, ttlMs) {
      open.keepFor(call, ttlMs);
      await billing.renewHold(call.accountId, call.id, ttlMs);
    },
    async release(call) {
      // A settle of this hold kept through a store outage closes it when it lands: released
      // first, the hold id would be closed and the kept charge taken as a late one (nothing).
      // A batch's end releases every line it ran, and a line's settle may still be kept then.
      if (settles.keeps(call.accountId, call.id)) return;
      try {
        await billing.release(call.accountId, call.id);
      } catch (err) {
        // Nothing was charged either way; the release is tried again a few times (the store is
        // back, most often), and the hold expires on its own within its TTL if it never lands.
        log.warn({ msg: 'release failed; tried again, else the hold expires on its own', hold_id: call.id, err: errMessage(err) });
        releaseLater(call.accountId, call.id);
      }
    },
  };

  const { place, releaseLater } = holdPlacer(billing, deps.windowsId);

  function holdOf(req: OpenRequest): HoldRequest {
    const { id, key, amount } = req;
    const t = deps.now();
    const hold: HoldRequest = { holdId: id, accountId: key.accountId, keyId: key.id, amount, monthlyCap: key.monthlyCap, month: monthOf(t), ttlMs: req.ttlMs ?? deps.holdTtlMs };
    if (key.budgets?.length || req.accountBudgets?.length) hold.budgets = budgetChecks(key.budgets, req.accountBudgets ?? [], t);
    return hold;
  }

  const meter: Meter = {
    place: (req) => place(holdOf(req), req.keyCheck),
    async tryOpen(req) {
      const ttlMs = req.ttlMs ?? deps.holdTtlMs;
      const { id, key, amount } = req;
      const result = await place(holdOf(req), req.keyCheck);
      if (!result.ok) return result;
      const call = new CallImpl(internals, id, key.accountId, key.id, req.model, amount, req.durable === true, req.observed, req.tokens);
      open.add(call, ttlMs);
      return { ok: true, call };
    },
    resume: ({ id, accountId, keyId, model, durable }) => new CallImpl(internals, id, accountId, keyId, model, 0n, durable === true),
    async report(key) {
      // A charge kept through a store outage is in the report as soon as the store takes it.
      await settles.landFor(key.accountId);
      const month = monthOf(deps.now());
      const [usage, wallet] = await Promise.all([billing.keyUsage(key.accountId, key.id, month), billing.wallet(key.accountId)]);
      return { usage, wallet };
    },
    openCalls: () => open.count(),
    pendingSettles: () => settles.pending(),
    abortAll: () => open.abortAll(),
    idle: (ms) => open.idle(ms),
    async dispose() {
      open.stop();
      await settles.dispose();
    },
  };
  return meter;
}

export function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The 402 for a refused hold. */
export function insufficientQuota(r: HoldRefusal, message: string, metadata: Record<string, unknown> = {}): GatewayError {
  return new GatewayError('insufficient_quota', message, {
    metadata: { limit_source: r.limitSource, ...metadata },
  });
}
