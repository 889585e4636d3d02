import { checkLedgerQuery } from '../ledger-query.js';
import type {
  BillingStore,
  CountedHold,
  CreditRequest,
  CreditResult,
  HoldRequest,
  HoldResult,
  KeyUsage,
  LedgerEntry,
  LedgerPage,
  LedgerQuery,
  LedgerUnits,
  Measurement,
  SettleRequest,
  SettleResult,
  WalletView,
  WindowHit,
} from '../types.js';
import { big, int32, num, type PgContext, whole } from './connection.js';

interface LedgerRow {
  seq: bigint;
  id: string;
  account_id: string;
  key_id: string;
  model: string;
  units: LedgerUnits;
  cost: bigint;
  held: bigint;
  exceeded_hold: boolean;
  measured: Measurement | null;
  upstream: string | null;
  at: bigint;
}

interface HoldRow {
  o_ok: boolean;
  o_source: string | null;
  o_available: bigint | null;
}

function holdResult(r: HoldRow | undefined): HoldResult {
  if (r?.o_ok) return { ok: true };
  const limitSource = r?.o_source === 'key_monthly_cap' ? 'key_monthly_cap' : 'wallet';
  return { ok: false, limitSource, available: big(r?.o_available) };
}

const LEDGER_COLUMNS = 'seq, id, account_id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, at';

function ledgerEntry(r: LedgerRow): LedgerEntry {
  const e: LedgerEntry = {
    id: r.id,
    accountId: r.account_id,
    keyId: r.key_id,
    model: r.model,
    units: r.units,
    cost: big(r.cost),
    held: big(r.held),
    exceededHold: r.exceeded_hold,
    measured: r.measured,
    at: num(r.at),
  };
  if (r.upstream !== null) e.upstream = r.upstream;
  return e;
}

/**
 * Billing on PostgreSQL: placeHold, settle and release are one function call each (see
 * migrations.ts), atomic under the account's wallet row lock; hitAndPlaceHold is the limit
 * store's window hit and placeHold in one call. Money travels as decimal strings cast to
 * bigint, so no amount ever passes through a float.
 */
export function createPostgresBilling(ctx: PgContext, sweep: () => void, windowsId: symbol): BillingStore {
  const { s } = ctx;

  return {
    async placeHold(req: HoldRequest): Promise<HoldResult> {
      if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
      sweep();
      const r = await ctx.one<HoldRow>(
        'placeHold',
        `SELECT * FROM ${s}.mg_place_hold($1, $2, $3, $4::bigint, $5::bigint, $6, $7::bigint)`,
        [
          req.accountId,
          req.holdId,
          req.keyId,
          req.amount.toString(),
          req.monthlyCap === null ? null : req.monthlyCap.toString(),
          req.month,
          Math.max(0, Math.floor(req.ttlMs)),
        ],
      );
      return holdResult(r);
    },

    windowsId,
    async hitAndPlaceHold(hit: WindowHit, req: HoldRequest): Promise<CountedHold> {
      if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
      sweep();
      const r = await ctx.one<HoldRow & { o_allowed: boolean; o_remaining: number; o_reset: bigint }>(
        'hitAndPlaceHold',
        `SELECT * FROM ${s}.mg_hit_place_hold($1, $2::integer, $3::bigint, $4, $5, $6, $7::bigint, $8::bigint, $9, $10::bigint)`,
        [
          hit.bucket,
          int32(hit.limit),
          whole(hit.windowMs),
          req.accountId,
          req.holdId,
          req.keyId,
          req.amount.toString(),
          req.monthlyCap === null ? null : req.monthlyCap.toString(),
          req.month,
          whole(req.ttlMs),
        ],
      );
      const allowed = r?.o_allowed === true;
      return {
        window: { allowed, limit: hit.limit, remaining: num(r?.o_remaining), resetMs: num(r?.o_reset) },
        hold: allowed ? holdResult(r) : null,
      };
    },

    async renewHold(accountId: string, holdId: string, ttlMs: number): Promise<boolean> {
      const rows = await ctx.q(
        'renewHold',
        `UPDATE ${s}.holds SET expires_at = ${s}.mg_now() + $3::bigint
          WHERE account_id = $1 AND hold_id = $2 AND expires_at > ${s}.mg_now() RETURNING 1 AS one`,
        [accountId, holdId, Math.max(0, Math.floor(ttlMs))],
      );
      return rows.length === 1;
    },

    async settle(req: SettleRequest): Promise<SettleResult> {
      if (req.cost < 0n) throw new RangeError('settled cost must not be negative');
      const e = req.entry;
      const r = await ctx.one<{ o_settled: boolean; o_charged: bigint; o_held: bigint }>(
        'settle',
        `SELECT * FROM ${s}.mg_settle($1, $2, $3, $4::bigint, $5, $6, $7, $8::text::jsonb, $9, $10, $11::bigint)`,
        [
          req.accountId,
          req.holdId,
          // A caller that predates SettleRequest.month: the month the settle lands in.
          req.month ?? new Date().toISOString().slice(0, 7),
          req.cost.toString(),
          e.id,
          e.keyId,
          e.model,
          JSON.stringify(e.units),
          e.measured ?? null,
          e.upstream ?? null,
          e.at,
        ],
      );
      return r?.o_settled ? { settled: true, charged: big(r.o_charged), held: big(r.o_held) } : { settled: false, charged: 0n };
    },

    async release(accountId: string, holdId: string): Promise<boolean> {
      const r = await ctx.one<{ released: boolean }>('release', `SELECT ${s}.mg_release($1, $2) AS released`, [accountId, holdId]);
      return r?.released === true;
    },

    async topUp(accountId: string, amount: bigint): Promise<bigint> {
      if (amount < 0n) throw new RangeError('top-up amount must not be negative');
      const r = await ctx.one<{ balance: bigint }>(
        'topUp',
        `INSERT INTO ${s}.wallets AS w (account_id, balance) VALUES ($1, $2::bigint)
          ON CONFLICT (account_id) DO UPDATE SET balance = w.balance + excluded.balance RETURNING balance`,
        [accountId, amount.toString()],
      );
      return big(r?.balance);
    },

    async credit(req: CreditRequest): Promise<CreditResult> {
      const r = await ctx.one<{ o_applied: boolean; o_balance: bigint }>(
        'credit',
        `SELECT * FROM ${s}.mg_credit($1, $2, $3::bigint, $4::text::jsonb, $5::bigint)`,
        [req.accountId, req.creditId, req.amount.toString(), JSON.stringify({ kind: 'credit', reason: req.reason }), req.at],
      );
      return { applied: r?.o_applied === true, balance: big(r?.o_balance) };
    },

    async wallet(accountId: string): Promise<WalletView> {
      const r = await ctx.one<{ balance: bigint; held: bigint }>(
        'wallet',
        `SELECT coalesce((SELECT balance FROM ${s}.wallets WHERE account_id = $1), 0)::bigint AS balance,
                (SELECT coalesce(sum(amount), 0) FROM ${s}.holds WHERE account_id = $1 AND expires_at > ${s}.mg_now())::bigint AS held`,
        [accountId],
      );
      return { balance: big(r?.balance), held: big(r?.held) };
    },

    async keyUsage(accountId: string, keyId: string, month: string): Promise<KeyUsage> {
      const r = await ctx.one<{ total: bigint; monthly: bigint; held: bigint }>(
        'keyUsage',
        `SELECT (SELECT coalesce(sum(amount), 0) FROM ${s}.key_spend WHERE account_id = $1 AND key_id = $2)::bigint AS total,
                coalesce((SELECT amount FROM ${s}.key_spend WHERE account_id = $1 AND key_id = $2 AND month = $3), 0)::bigint AS monthly,
                (SELECT coalesce(sum(amount), 0) FROM ${s}.holds
                  WHERE account_id = $1 AND key_id = $2 AND expires_at > ${s}.mg_now())::bigint AS held`,
        [accountId, keyId, month],
      );
      return { total: big(r?.total), monthly: big(r?.monthly), held: big(r?.held) };
    },

    async ledger(accountId: string): Promise<LedgerEntry[]> {
      const rows = await ctx.q<LedgerRow>(
        'ledger',
        `SELECT ${LEDGER_COLUMNS} FROM ${s}.ledger WHERE account_id = $1 ORDER BY seq`,
        [accountId],
      );
      return rows.map(ledgerEntry);
    },

    async queryLedger(query: LedgerQuery): Promise<LedgerPage> {
      const c = checkLedgerQuery(query);
      // The cursor is the seq of the last entry a page returned (see migrations.ts for why
      // paging by seq per account never skips an entry).
      const rows = await ctx.q<LedgerRow>(
        'queryLedger',
        `SELECT ${LEDGER_COLUMNS} FROM ${s}.ledger
          WHERE account_id = $1 AND seq > $2::bigint
            AND ($3::text IS NULL OR key_id = $3)
            AND ($4::bigint IS NULL OR at >= $4::bigint)
            AND ($5::bigint IS NULL OR at < $5::bigint)
          ORDER BY seq LIMIT $6::integer`,
        [c.accountId, c.start.toString(), c.keyId ?? null, c.from ?? null, c.to ?? null, c.limit + 1],
      );
      const page = rows.slice(0, c.limit);
      const last = page[page.length - 1];
      return {
        entries: page.map(ledgerEntry),
        nextCursor: last ? String(last.seq) : c.start.toString(),
        more: rows.length > c.limit,
      };
    },

    async openHolds(accountId: string): Promise<number> {
      const r = await ctx.one<{ n: bigint }>(
        'openHolds',
        `SELECT count(*) AS n FROM ${s}.holds WHERE account_id = $1 AND expires_at > ${s}.mg_now()`,
        [accountId],
      );
      return num(r?.n);
    },
  };
}
