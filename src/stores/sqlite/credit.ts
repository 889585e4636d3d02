import type { CreditRequest, CreditResult } from '../types.js';
import { big, type SqliteContext } from './connection.js';
import { creditUnits } from '../wallet-entries.js';

/**
 * The credit step (an operator's credit, a top-up, an opening balance), to run inside the
 * caller's IMMEDIATE transaction: changes the wallet and appends the credit's ledger entry,
 * once per (account, credit id). The credit id takes the ledger's hold-id slot as
 * "credit:<id>", so the unique index on (account, hold id) keeps it once for good.
 */
export function prepareCredit(ctx: SqliteContext): (req: CreditRequest) => CreditResult {
  const q = {
    applied: ctx.prepare('SELECT 1 FROM ledger WHERE account_id = ? AND hold_id = ?'),
    balance: ctx.exact('SELECT balance FROM wallets WHERE account_id = ?'),
    credit: ctx.exact(
      'INSERT INTO wallets (account_id, balance) VALUES (?, ?) ON CONFLICT (account_id) DO UPDATE SET balance = balance + excluded.balance RETURNING balance',
    ),
    append: ctx.prepare(
      `INSERT INTO ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at, recorded_at)
       VALUES (?, ?, ?, '', '', ?, ?, 0, 0, NULL, NULL, ?, ?)`,
    ),
  };
  return (req) => {
    const slot = `credit:${req.creditId}`;
    if (q.applied.get(req.accountId, slot)) {
      return { applied: false, balance: big((q.balance.get(req.accountId) as { balance: bigint } | undefined)?.balance) };
    }
    const balance = big((q.credit.get(req.accountId, req.amount) as { balance: bigint }).balance);
    const units = JSON.stringify(creditUnits(req.reason, req.adjustment));
    q.append.run(req.accountId, slot, req.creditId, units, -req.amount, req.at, ctx.now());
    return { applied: true, balance };
  };
}
