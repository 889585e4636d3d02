/**
 * Hold, then settle (SPEC section 2). The routes call `hold` before any billable upstream
 * call and exactly one of `settle` / `release` after it.
 */
import { GatewayError } from '../errors.js';
import type { Logger } from '../log.js';
import type { ApiKeyRecord, BillingStore, HoldResult, SettleRequest } from '../stores/types.js';

/** "YYYY-MM" of a unix-ms time, in UTC: the month a monthly cap counts. */
export function monthOf(ms: number): string {
  const d = new Date(ms);
  return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, '0')}`;
}

/** 00:00 UTC on the first day of the next month: when monthly caps reset. */
export function nextMonthStart(ms: number): Date {
  const d = new Date(ms);
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1));
}

export interface MeterDeps {
  billing: BillingStore;
  now: () => number;
  log: Logger;
  /** Background work (settle retries) that dispose() waits for. */
  track: (p: Promise<unknown>) => void;
}

export interface Meter {
  /** Places a hold for `amount` nano-USD; a refusal is a returned value. */
  tryHold(holdId: string, key: ApiKeyRecord, amount: bigint, ttlMs: number): Promise<HoldResult>;
  /**
   * Places a hold for `amount` nano-USD. On refusal calls `refuse` to build the 402 (the
   * caller words it), so nothing reaches an upstream. An unreachable store throws (503).
   */
  hold(
    holdId: string,
    key: ApiKeyRecord,
    amount: bigint,
    ttlMs: number,
    refuse: (r: Extract<HoldResult, { ok: false }>) => GatewayError,
  ): Promise<void>;
  /** Settles (idempotently); retried in the background if the store hiccups. */
  settle(req: SettleRequest): Promise<void>;
  release(accountId: string, holdId: string): Promise<void>;
}

/**
 * Holds of calls bounded by one upstream exchange (chat, speech, images) live this long; one
 * that a crashed instance left behind stops counting then. Video holds live as long as a job.
 */
export const CALL_HOLD_TTL_MS = 60 * 60 * 1000;

const RETRY_DELAYS_MS = [100, 500, 2_000, 5_000];

export function createMeter(deps: MeterDeps): Meter {
  const withRetries = (what: string, id: string, op: () => Promise<unknown>): Promise<void> => {
    const run = async () => {
      for (let attempt = 0; ; attempt++) {
        try {
          await op();
          return;
        } catch (err) {
          const delay = RETRY_DELAYS_MS[attempt];
          if (delay === undefined) {
            deps.log.error({ msg: `${what} failed; the hold will expire on its own`, holdId: id, err });
            return;
          }
          await new Promise((r) => setTimeout(r, delay));
        }
      }
    };
    const p = run();
    deps.track(p);
    return p;
  };

  return {
    tryHold(holdId, key, amount, ttlMs) {
      return deps.billing.placeHold({
        holdId,
        accountId: key.accountId,
        keyId: key.id,
        amount,
        monthlyCap: key.monthlyCap,
        month: monthOf(deps.now()),
        ttlMs,
      });
    },
    async hold(holdId, key, amount, ttlMs, refuse) {
      const result = await this.tryHold(holdId, key, amount, ttlMs);
      if (!result.ok) throw refuse(result);
    },
    settle(req) {
      return withRetries('settle', req.holdId, () => deps.billing.settle(req));
    },
    release(accountId, holdId) {
      return withRetries('release', holdId, () => deps.billing.release(accountId, holdId));
    },
  };
}

/** The 402 for a refused hold: OpenRouter's wording for token-billed calls. */
export function insufficientQuota(
  r: Extract<HoldResult, { ok: false }>,
  message: string,
  metadata: Record<string, unknown> = {},
): GatewayError {
  return new GatewayError('insufficient_quota', message, {
    metadata: { limit_source: r.limitSource, ...metadata },
  });
}
