/**
 * The calls open on this instance: renewed while they live (a third of the way through their
 * TTL, so a slow stream keeps its hold and a crashed instance's holds still expire within one
 * TTL), waited for on shutdown, and aborted when its grace period is over.
 */
import type { Logger } from '../observability/log.js';
import type { BillingStore } from '../stores/types.js';

/** What the registry needs of a call. */
export interface OpenCall {
  readonly id: string;
  readonly accountId: string;
  readonly durable: boolean;
  readonly closed: boolean;
  abortHandler: (() => void) | null;
  cancel(): Promise<void>;
}

interface Renewal {
  ttlMs: number;
  renewedAt: number;
}

const errMessage = (err: unknown) => (err instanceof Error ? err.message : String(err));

export class OpenCalls {
  private readonly open = new Map<OpenCall, Renewal>();
  /** Open calls that are not durable jobs: what shutdown waits for. */
  private nonDurable = 0;
  private readonly idleWaiters = new Set<() => void>();
  private readonly renewTimer: NodeJS.Timeout;

  constructor(
    private readonly billing: Pick<BillingStore, 'renewHold'>,
    holdTtlMs: number,
    private readonly now: () => number,
    private readonly log: Logger,
  ) {
    this.renewTimer = setInterval(() => this.renew(), Math.max(50, Math.floor(holdTtlMs / 3)));
    this.renewTimer.unref();
  }

  private renew(): void {
    const t = this.now();
    for (const [call, entry] of this.open) {
      if (t - entry.renewedAt < entry.ttlMs / 3) continue;
      entry.renewedAt = t;
      this.billing.renewHold(call.accountId, call.id, entry.ttlMs).catch((err: unknown) => {
        // A missed renewal is harmless while the next one lands; if the hold does expire,
        // the settle still bills the call in full.
        this.log.warn({ msg: 'hold renewal failed', hold_id: call.id, err: errMessage(err) });
      });
    }
  }

  add(call: OpenCall, ttlMs: number): void {
    this.open.set(call, { ttlMs, renewedAt: this.now() });
    if (!call.durable) this.nonDurable++;
  }

  /** The call's hold is kept for `ttlMs` from now on (renewed at that length). */
  keepFor(call: OpenCall, ttlMs: number): void {
    const entry = this.open.get(call);
    if (!entry) return;
    entry.ttlMs = ttlMs;
    entry.renewedAt = this.now();
  }

  /** The call ended (its charge landed, or its hold was released). */
  forget(call: OpenCall): void {
    if (!this.open.delete(call)) return;
    if (!call.durable && --this.nonDurable === 0) for (const wake of this.idleWaiters) wake();
  }

  count(): number {
    return this.nonDurable;
  }

  /** Aborts every open call that is not durable (their abort handlers bill what was produced). */
  abortAll(): void {
    for (const call of [...this.open.keys()]) {
      if (call.durable || call.closed) continue;
      if (call.abortHandler) {
        try {
          call.abortHandler();
        } catch (err) {
          this.log.error({ msg: 'aborting a call failed', hold_id: call.id, err: errMessage(err) });
        }
      }
      // Whatever the handler did, the call ends now: nothing more reaches the client.
      if (!call.closed) void call.cancel();
    }
  }

  /** Resolves when no non-durable call is open, or after `ms`; whether none is open. */
  idle(ms: number): Promise<boolean> {
    if (this.nonDurable === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (value: boolean) => {
        clearTimeout(timer);
        this.idleWaiters.delete(wake);
        resolve(value);
      };
      const wake = () => done(true);
      const timer = setTimeout(() => done(this.nonDurable === 0), ms);
      this.idleWaiters.add(wake);
    });
  }

  stop(): void {
    clearInterval(this.renewTimer);
  }
}
