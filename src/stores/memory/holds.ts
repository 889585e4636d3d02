/** An account's open holds in memory: each by id, and their sums (all, and per key) kept as they change. */

export interface Hold {
  keyId: string;
  amount: bigint;
  /** The month the hold was checked against (its settle counts in the month the charge is dated in). */
  month: string;
  expiresAt: number;
}

export interface AccountHolds {
  byId: Map<string, Hold>;
  /** Sum of the open holds' amounts, and per key. */
  total: bigint;
  byKey: Map<string, bigint>;
  /** The earliest expiry among the open holds (Infinity when unknown to be sooner). */
  nextExpiry: number;
}

/** Takes one hold out of the account's, its sums with it. */
export function drop(mine: AccountHolds, holdId: string, hold: Hold): void {
  mine.byId.delete(holdId);
  mine.total -= hold.amount;
  const k = (mine.byKey.get(hold.keyId) ?? 0n) - hold.amount;
  if (k === 0n) mine.byKey.delete(hold.keyId);
  else mine.byKey.set(hold.keyId, k);
}

/** What the account holds: all of it, or one key's share. */
export function heldBy(mine: AccountHolds | undefined, keyId?: string): bigint {
  if (!mine) return 0n;
  return keyId === undefined ? mine.total : (mine.byKey.get(keyId) ?? 0n);
}
