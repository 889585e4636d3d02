/**
 * Placing a hold in the store, and what follows a placement or release the store failed.
 *
 * A request's deferred key-rate check rides on its hold: counted in the same atomic step when
 * the billing store keeps the windows too (one round trip fewer per billed call), else on its own
 * just before the hold.
 *
 * A placement the store failed to answer (a timeout) may still land after the caller has
 * answered 503 (Redis runs a script it was sent; PostgreSQL a statement): its hold would keep the
 * wallet's money for the hold TTL with no call to release it. So would a release that failed. The
 * hold id is released again a few times over the next minutes (a release that runs first only
 * closes an id nothing uses).
 */
import { isStoreUnavailable } from '../stores/errors.js';
import type { BillingStore, HoldRequest, HoldResult, WindowHit, WindowResult } from '../stores/types.js';

/**
 * A request's key-rate check, deferred to its hold (the hold's id is the request id): the
 * hold counts the hit in the same atomic store step when the stores can (one step fewer per
 * billed call), else the check runs on its own just before the hold. A window that refuses
 * means no hold and the 429 the check throws.
 */
export interface DeferredCheck {
  readonly hit: WindowHit;
  /** Takes the window's answer: keeps the rate headers for the answer, or throws the 429. */
  settle(r: WindowResult): void;
  /** Counts the hit on its own now and settles it. */
  run(): Promise<void>;
}

/** When a hold whose placement or release the store failed is released again (ms after the failure, then after each try). */
const RELEASE_AFTER_FAILED_HOLD_MS = [250, 2_000, 15_000, 60_000, 240_000];

export interface HoldPlacer {
  /** Places the hold, counting `check` (the request's deferred key check) first. */
  place(hold: HoldRequest, check: DeferredCheck | null | undefined): Promise<HoldResult>;
  /** Releases a hold a few times over the next minutes. */
  releaseLater(accountId: string, holdId: string): void;
}

export function holdPlacer(billing: BillingStore, windowsId: symbol | undefined): HoldPlacer {
  // The key's window hit rides on the hold only when both live in one place (one driver).
  const folds = billing.hitAndPlaceHold !== undefined && billing.windowsId !== undefined && billing.windowsId === windowsId;

  function releaseLater(accountId: string, holdId: string): void {
    let n = 0;
    const next = () => {
      const wait = RELEASE_AFTER_FAILED_HOLD_MS[n++];
      if (wait === undefined) return;
      setTimeout(() => {
        billing.release(accountId, holdId).then(next, next);
      }, wait).unref();
    };
    next();
  }

  async function placeOnce(hold: HoldRequest, check: DeferredCheck | null | undefined): Promise<HoldResult> {
    if (!check) return billing.placeHold(hold);
    // A hold with budgets is not folded: not every driver's combined step checks budgets.
    if (!folds || hold.budgets) {
      await check.run();
      return billing.placeHold(hold);
    }
    const r = await billing.hitAndPlaceHold!(check.hit, hold);
    check.settle(r.window);
    // A window that allowed the hit went on to the hold, so it has a result.
    return r.hold!;
  }

  return {
    async place(hold, check) {
      try {
        return await placeOnce(hold, check);
      } catch (err) {
        if (isStoreUnavailable(err)) releaseLater(hold.accountId, hold.holdId);
        throw err;
      }
    },
    releaseLater,
  };
}
