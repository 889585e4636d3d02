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

export interface TokenResult {
  allowed: boolean;
  limit: number;
  /** Tokens still free in the window after this take (refused: before it). */
  remaining: number;
  /**
   * Allowed: ms until the oldest take leaves the window (0 when none is held). Refused: ms
   * until enough has left for these tokens to fit; -1 when they never fit (more than the limit).
   */
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
  /**
   * Atomic take-if-it-fits over an exact sliding window of tokens: `tokens` are taken (under
   * `takeId`, at the store's time) only if the takes of the last `windowMs` plus `tokens` stay
   * within `limit`. A refused take takes nothing. Taking an id the window holds already
   * changes nothing. `accountId` as for `hit`.
   */
  takeTokens(bucket: string, takeId: string, tokens: number, limit: number, windowMs: number, accountId?: string): Promise<TokenResult>;
  /**
   * Corrects a take to `tokens` (what the call used), keeping its time: atomic with respect to
   * `takeTokens`. A take that has left the window (or was refused) changes nothing.
   */
  setTokens(bucket: string, takeId: string, tokens: number, accountId?: string): Promise<void>;
  /** Atomic: takes a slot in `pool` if fewer than `cap` unexpired leases are held. */
  acquireLease(pool: string, cap: number, leaseId: string, ttlMs: number): Promise<boolean>;
  /** Extends a live lease; false when it already expired or was released. */
  renewLease(pool: string, leaseId: string, ttlMs: number): Promise<boolean>;
  releaseLease(pool: string, leaseId: string): Promise<void>;
  /** Unexpired leases in `pool`. */
  activeLeases(pool: string): Promise<number>;
}
