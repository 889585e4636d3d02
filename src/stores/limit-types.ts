/**
 * The limit store's interface: rate windows and lease pools. Times are unix ms. types.ts
 * re-exports all of it.
 */

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
