/**
 * The rules every driver applies to a ledger query, so bad input gets the same clear error
 * whichever store answers it.
 */
import type { LedgerEntry, LedgerQuery } from './types.js';

export const MAX_LEDGER_PAGE = 1_000;

/** A cursor is the position after the last entry a page returned: a non-negative integer. */
const CURSOR = /^(0|[1-9]\d{0,17})$/;

export interface CheckedLedgerQuery extends LedgerQuery {
  /** The cursor as a position (0 for the first page). */
  start: bigint;
}

/** Validates a query; throws a RangeError naming the bad field. */
export function checkLedgerQuery(q: LedgerQuery): CheckedLedgerQuery {
  if (typeof q.accountId !== 'string' || q.accountId === '') throw new RangeError('ledger query: accountId is required');
  if (!Number.isInteger(q.limit) || q.limit < 1 || q.limit > MAX_LEDGER_PAGE) {
    throw new RangeError(`ledger query: limit must be an integer from 1 to ${MAX_LEDGER_PAGE}, got ${String(q.limit)}`);
  }
  for (const field of ['from', 'to'] as const) {
    const v = q[field];
    if (v !== undefined && !Number.isSafeInteger(v)) {
      throw new RangeError(`ledger query: ${field} must be unix milliseconds (an integer), got ${String(v)}`);
    }
  }
  if (q.keyId !== undefined && typeof q.keyId !== 'string') throw new RangeError('ledger query: keyId must be a string');
  if (q.cursor !== undefined && !CURSOR.test(q.cursor)) {
    throw new RangeError('ledger query: cursor is not one this ledger returned');
  }
  return { ...q, start: q.cursor === undefined ? 0n : BigInt(q.cursor) };
}

/** Validates a latest-entries read (an account and a limit of 1 to MAX_LEDGER_PAGE); throws a RangeError. */
export function checkLatestLedger(accountId: string, limit: number): void {
  if (typeof accountId !== 'string' || accountId === '') throw new RangeError('latest ledger: accountId is required');
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LEDGER_PAGE) {
    throw new RangeError(`latest ledger: limit must be an integer from 1 to ${MAX_LEDGER_PAGE}, got ${String(limit)}`);
  }
}

/** Whether an entry passes the query's key and time filters. */
export function matchesLedgerQuery(e: LedgerEntry, q: LedgerQuery): boolean {
  return (
    (q.keyId === undefined || e.keyId === q.keyId) &&
    (q.from === undefined || e.at >= q.from) &&
    (q.to === undefined || e.at < q.to)
  );
}
