/** A ledger entry as SQLite keeps it: one row of the `ledger` table, and back. */
import type { LedgerEntry, LedgerUnits, Measurement, UnitPrices } from '../types.js';
import { big, num } from './connection.js';

export interface LedgerRow {
  seq: bigint;
  id: string;
  account_id: string;
  key_id: string;
  model: string;
  units: string;
  cost: bigint;
  held: bigint;
  exceeded_hold: bigint;
  measured: Measurement | null;
  upstream: string | null;
  prices: string | null;
  at: bigint;
}

export const LEDGER_COLUMNS = 'seq, id, account_id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, prices, at';

export function ledgerEntry(r: LedgerRow): LedgerEntry {
  const e: LedgerEntry = {
    id: r.id,
    accountId: r.account_id,
    keyId: r.key_id,
    model: r.model,
    units: JSON.parse(r.units) as LedgerUnits,
    cost: big(r.cost),
    held: big(r.held),
    exceededHold: num(r.exceeded_hold) === 1,
    measured: r.measured,
    at: num(r.at),
  };
  if (r.upstream !== null) e.upstream = r.upstream;
  if (r.prices !== null) e.prices = JSON.parse(r.prices) as UnitPrices;
  return e;
}
