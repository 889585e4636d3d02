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
  private disposed = false;
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
    for (const req of reqs) this.retrying.set(idOf(req), req);
    return Promise.all(
      reqs.map(async (req) => {
        this.retrying.delete(idOf(req));
        // Replayed from the journal's files: when keeping it fails again, it stays in them for the next start.
        if (this.disposed || !(await this.land(req))) this.keep(req);
      }),
    );
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
    const attempt = async () => {
      if (this.disposed || !this.retrying.has(id)) return;
      if (await this.land(req)) return;
      delay = Math.min(delay * 2, MAX_RETRY_MS);
      setTimeout(() => void attempt(), delay).unref();
    };
    setTimeout(() => void attempt(), delay).unref();
    return true;
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
    try {
      this.journal.remove(req);
    } catch (err) {
      this.log.error({ msg: 'could not update the settle journal', hold_id: req.holdId, err: errMessage(err) });
    }
    this.log.info({ msg: 'kept settle landed', hold_id: req.holdId });
    return true;
  }

  /** Tries every unlanded settle once more; what still fails stays journaled for the next start. */
  async dispose(): Promise<void> {
    await this.replay;
    const left = [...this.retrying.values()];
    this.disposed = true;
    for (const req of left) {
      if (await this.land(req)) continue;
      this.log.error({
        msg: 'settle still not written at shutdown; it stays in the settle journal and lands at the next start',
        hold_id: req.holdId,
        account: req.accountId,
        cost: req.cost.toString(),
      });
    }
    // Settles still unlanded stay in the journal's file, for the next instance to take at once.
    try {
      this.journal.close();
    } catch (err) {
      this.log.error({ msg: 'could not release the settle journal', err: errMessage(err) });
    }
  }
}
