/** Credits (opening balances, top-ups, operators' credits) as the Redis books keep them. */
import { esc, type RedisContext } from './connection.js';
import { creditUnits } from '../wallet-entries.js';

/** A credit's marker: it names the credit id as applied, for good (credits are rare). */
export const creditMarker = (ctx: RedisContext, accountId: string, creditId: string) => ctx.account(accountId, `credit:${esc(creditId)}`);

/** A credit's ledger entry as the ledger list keeps it (bigints as strings). */
export function creditEntry(accountId: string, creditId: string, amount: bigint, reason: string, at = 0, adjustment = false) {
  return {
    id: creditId,
    accountId,
    keyId: '',
    model: '',
    units: creditUnits(reason, adjustment),
    cost: (-amount).toString(),
    held: '0',
    exceededHold: false,
    measured: null,
    at,
  };
}
