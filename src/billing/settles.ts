/**
 * Writing settles: into the billing store, and when the store refuses, into the settle journal
 * (durable), retried with backoff until it lands. Settles an earlier process journaled are
 * replayed at start (idempotent per hold id). `write` resolves once the charge is in the store
 * or in the journal: either way it is not lost.
 */
import type { Logger } from '../observability/log.js';
import { StoreUnavailableError } from '../stores/errors.js';
import type { BillingStore, LedgerEntry, SettleRequest, SettleResult } from '../stores/types.js';
import type { SettleJournal } from './journal.js';

/** Retry delays of a settle the store refused: doubling from 100 ms up to 30 s, forever. */
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 30_000;

const idOf = (req: SettleRequest) => `${req.accountId}\u0000${req.holdId}`;

/** How often a settle the store takes may set the kept ones trying again before their backoff. */
const WAKE_EVERY_MS = 1_000;
/** Kept settles tried at once (after an outage, or at shutdown): a store's pool is not swamped. */
const AT_ONCE = 8;
/** The longest a spend report waits for its account's kept settles to land. */
const LAND_FOR_WAIT_MS = 1_000;

/** `fn` over `items`, at most AT_ONCE running at a time; resolves when all are done. */
async function inTurns<T>(items: readonly T[], fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(AT_ONCE, items.length) }, worker));
}
const errMessage = (err: unknown) => (err instanceof Error ? err.message : String(err));

/**
 * Neither the store nor the settle journal took a settle (the store is unreachable and the
 * journal's disk is full or failing): the charge would live only in this process's memory, so
 * it is given up and the call fails instead (503, or a stream's error event): an answer
 * delivered whole must be billed, and one that cannot be billed is not delivered. Its hold
 * expires on its own.
 */
export class SettleLostError extends StoreUnavailableError {
  override name = 'SettleLostError';
}

export class SettleWriter {
  /** Settles being retried, by journal identity. */
  private readonly retrying = new Map<string, SettleRequest>();
  /** Per kept settle: tries it now instead of at its next backoff tick (the running try, if one is). */
  private readonly tryNow = new Map<string, () => Promise<void>>();
  private disposed = false;
  private wokeAt = 0;
  private readonly replay: Promise<unknown>;

  constructor(
    private readonly billing: BillingStore,
    private readonly journal: SettleJournal,
    private readonly log: Logger,
    private readonly onBilled: ((entry: LedgerEntry) => void) | undefined,
  ) {
    this.replay = this.replayAll(journal.entries());
    // Settles of an instance found gone later (its lock went stale after this one started).
    journal.onTakeOver((taken) => void this.replayAll(taken.filter((req) => !this.retrying.has(idOf(req)))));
  }

  /** Replays journaled settles (idempotent per hold id); those that fail are retried as kept ones. */
  private replayAll(reqs: SettleRequest[]): Promise<unknown> {
    // Kept (a release of their holds leaves them be) from now until they land.
    for (const req of reqs) this.retrying.set(idOf(req), req);
    return Promise.all(
      reqs.map(async (req) => {
        if (!this.disposed && (await this.land(req))) return;
        // Replayed from the journal's files: when keeping it fails again, it stays in them for the next start.
        this.retrying.delete(idOf(req));
        this.keep(req);
      }),
    );
  }

  /** Whether a settle of this hold is kept (waiting for the store): it closes the hold when it lands. */
  keeps(accountId: string, holdId: string): boolean {
    return this.retrying.has(`${accountId}\u0000${holdId}`);
  }

  /** Settles not yet in the store. */
  pending(): number {
    return this.retrying.size;
  }

  /** Resolves once the charge is in the store or the journal; rejects with SettleLostError when in neither. */
  async write(req: SettleRequest): Promise<void> {
    let failure: unknown;
    try {
      const r = await this.billing.settle(req);
      if (r.settled) this.billed(req, r);
      // The store answers again: settles kept during its outage land now, not at their next
      // backoff tick (up to 30 s away), so the books and /key have them as soon as they can.
      // At most once a second: a part of the store still down (one shard) is not asked again
      // for every settle another part takes.
      if (this.retrying.size && Date.now() - this.wokeAt >= WAKE_EVERY_MS) this.wake();
      return;
    } catch (err) {
      failure = err;
    }
    if (this.keep(req)) {
      this.log.error({ msg: 'settle failed; kept in the settle journal and retried', hold_id: req.holdId, err: errMessage(failure) });
      return;
    }
    this.log.error({
      msg: 'settle lost: the store and the settle journal both failed; the call fails and its hold expires',
      hold_id: req.holdId,
      account: req.accountId,
      cost: req.cost.toString(),
      err: errMessage(failure),
    });
    throw new SettleLostError(`the charge could be written neither to the store (${errMessage(failure)}) nor to the settle journal`);
  }

  private billed(req: SettleRequest, r: SettleResult): void {
    if (!this.onBilled) return;
    const held = r.held ?? 0n;
    this.onBilled({ ...req.entry, cost: r.charged, held, exceededHold: r.charged > held });
  }

  /**
   * Journals a settle and retries it with backoff until it lands; false (nothing kept) when the
   * journal cannot take it: a charge kept only in memory would be lost with the process, and
   * would be reported as journaled when it is not.
   */
  private keep(req: SettleRequest): boolean {
    const id = idOf(req);
    if (this.retrying.has(id)) return true;
    try {
      this.journal.add(req);
    } catch (err) {
      this.log.error({ msg: 'could not write the settle journal', hold_id: req.holdId, err: errMessage(err) });
      return false;
    }
    this.retrying.set(id, req);
    let delay = FIRST_RETRY_MS;
    let timer: NodeJS.Timeout | undefined;
    let trying: Promise<void> | null = null;
    const attempt = async () => {
      clearTimeout(timer);
      if (this.disposed || !this.retrying.has(id)) return;
      if (await this.land(req)) return;
      if (this.disposed) return;
      delay = Math.min(delay * 2, MAX_RETRY_MS);
      timer = setTimeout(now, delay).unref();
    };
    const now = (): Promise<void> => (trying ??= attempt().finally(() => (trying = null)));
    timer = setTimeout(now, delay).unref();
    this.tryNow.set(id, now);
    return true;
  }

  /** Tries the kept settles now, a few at a time. */
  private wake(): void {
    this.wokeAt = Date.now();
    void inTurns([...this.tryNow.values()], (now) => now());
  }

  /**
   * Tries once more, now, the kept settles of `accountId`, so a report of its spend read next
   * includes every charge the store can take; resolves when those tries are over, or after
   * `LAND_FOR_WAIT_MS` (a store still down does not hold the report up for its timeouts; the
   * tries go on).
   */
  async landFor(accountId: string): Promise<void> {
    const mine: Array<() => Promise<void>> = [];
    for (const [id, req] of this.retrying) {
      const now = req.accountId === accountId ? this.tryNow.get(id) : undefined;
      if (now) mine.push(now);
    }
    if (mine.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([inTurns(mine, (now) => now()), new Promise<void>((r) => (timer = setTimeout(r, LAND_FOR_WAIT_MS)))]);
    clearTimeout(timer);
  }

  /** One try of a kept settle; true once it is in the store (or was already). */
  private async land(req: SettleRequest): Promise<boolean> {
    try {
      const r = await this.billing.settle(req);
      if (r.settled) this.billed(req, r);
    } catch {
      return false;
    }
    this.retrying.delete(idOf(req));
    this.tryNow.delete(idOf(req));
    try {
      this.journal.remove(req);
    } catch (err) {
      this.log.error({ msg: 'could not update the settle journal', hold_id: req.holdId, err: errMessage(err) });
    }
    this.log.info({ msg: 'kept settle landed', hold_id: req.holdId });
    return true;
  }

  /**
   * Tries the unlanded settles once more; what still fails stays journaled for the next start.
   * One is tried first: when the store refuses it, the others are not tried one store timeout
   * after another (a long stop a supervisor would end with SIGKILL); when it lands, the rest
   * are tried together.
   */
  async dispose(): Promise<void> {
    await this.replay;
    const [first, ...rest] = this.retrying.values();
    this.disposed = true;
    const stillKept = (req: SettleRequest) =>
      this.log.error({
        msg: 'settle still not written at shutdown; it stays in the settle journal and lands at the next start',
        hold_id: req.holdId,
        account: req.accountId,
        cost: req.cost.toString(),
      });
    if (first && !(await this.land(first))) for (const req of [first, ...rest]) stillKept(req);
    else await inTurns(rest, async (req) => void ((await this.land(req)) || stillKept(req)));
    // Settles still unlanded stay in the journal's file, for the next instance to take at once.
    try {
      this.journal.close();
    } catch (err) {
      this.log.error({ msg: 'could not release the settle journal', err: errMessage(err) });
    }
  }
}
