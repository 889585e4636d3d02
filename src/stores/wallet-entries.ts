/**
 * The ledger entries of wallet changes that are not calls: opening balances and top-ups. Every
 * wallet change is a ledger entry, so an account's balance always equals minus the sum of its
 * entries' costs. These entries are credits (units `{kind: 'credit', reason}`, cost = minus
 * the amount, key and model ""), exactly like an operator's `credit`: every reader that leaves
 * credits out of usage and key spend (`/key`, monthly caps, usage reports) leaves them out too.
 */
import { randomUUID } from 'node:crypto';

/**
 * The credit id of an account's opening balance. One id per account, so an opening balance is
 * credited once for good: an account created again after its record was lost (its ledger
 * kept) gets no second opening balance. The upgrade of books written before wallet changes
 * were entries uses it too, for the balance those books could not explain.
 */
export const OPENING_BALANCE_ID = 'opening-balance';
export const OPENING_BALANCE_REASON = 'opening balance';
export const TOP_UP_REASON = 'top-up';

/** The units of a credit's ledger entry: an adjustment says so (every driver writes these). */
export function creditUnits(reason: string, adjustment?: boolean): { kind: 'credit'; reason: string; adjustment?: true } {
  return adjustment ? { kind: 'credit', reason, adjustment: true } : { kind: 'credit', reason };
}

/** A top-up has no id of its own (it is not idempotent): each gets a fresh one. */
export function topUpId(): string {
  return `tu_${randomUUID()}`;
}
