import { checkLatestLedger, checkLedgerQuery } from '../ledger-query.js';
import type {
  BillingStore,
  CountedHold,
  CreditRequest,
  CreditResult,
  DuplicateCharge,
  HoldPage,
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
  UnitPrices,
  WalletView,
  WindowHit,
} from '../types.js';
import { big, int32, num, PgContext, type Sql, whole } from './connection.js';
import { functionLanes, type Lanes } from './lanes.js';
import { creditUnits, TOP_UP_REASON, topUpId } from '../wallet-entries.js';
import { limitSourceOf } from '../limit-sources.js';
import { jsonText } from '../json-text.js';
import { settleMonth } from '../spend-periods.js';

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
  prices: UnitPrices | null;
  at: bigint;
}

/** An operation in an account's batch, as mg_account_batch reads it. */
type AccountOp = { op: 'hold' | 'hit_hold' | 'settle' | 'release' } & Record<string, unknown>;
/** Its answer: the fields of the operation's own function, bigints as decimal strings. */
type AccountResult = Record<string, unknown>;

interface HoldOut {
  ok?: boolean | null;
  source?: string | null;
  available?: string | null;
}
interface HitHoldOut extends HoldOut {
  allowed?: boolean | null;
  remaining?: number | null;
  reset?: string | null;
}
interface SettleOut {
  settled?: boolean;
  charged?: string;
  held?: string;
}

function holdResult(r: HoldOut): HoldResult {
  if (r.ok === true) return { ok: true };
  return { ok: false, limitSource: limitSourceOf(r.source), available: big(r.available) };
}

const LEDGER_COLUMNS = 'seq, id, account_id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, prices, at';

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
  if (r.prices !== null) e.prices = r.prices;
  return e;
}

/** What one hold asks of the account's batch (money as decimal strings). */
function holdOp(req: HoldRequest) {
  return {
    hold: req.holdId,
    key: req.keyId,
    amount: req.amount.toString(),
    cap: req.monthlyCap === null ? null : req.monthlyCap.toString(),
    month: req.month,
    ttl: whole(req.ttlMs),
  };
}

/**
 * Billing on PostgreSQL: placeHold, settle, release and hitAndPlaceHold (the limit store's
 * window hit and a hold in one step) go through the account's lane (see lanes.ts): one call
 * to mg_account_batch (migrations.ts) carries every such operation of the account that
 * arrived while its previous call ran, atomic under the account's wallet row lock. Money
 * travels as decimal strings cast to bigint, so no amount ever passes through a float.
 */
export function createPostgresBilling(ctx: PgContext, sweep: () => void, windowsId: symbol): BillingStore {
  return new PostgresBilling(ctx, sweep, windowsId);
}

class PostgresBilling implements BillingStore {
  private readonly accounts: Lanes<AccountOp, AccountResult>;
  /** The schema every statement names. */
  private readonly s: string;

  constructor(
    private readonly ctx: PgContext,
    private readonly sweep: () => void,
    readonly windowsId: symbol,
  ) {
    this.s = ctx.s;
    this.accounts = functionLanes<AccountOp, AccountResult>(ctx, 'billing batch', 'mg_account_batch');
  }

  /**
   * Every read of `read` in one REPEATABLE READ transaction: one snapshot of the books, so an
   * audit's sums belong together while calls keep landing (nothing it reads writes).
   */
  snapshot<T>(read: (billing: BillingStore) => Promise<T>): Promise<T> {
    const ctx = this.ctx;
    return ctx.sql.begin('isolation level repeatable read read only', (tx) =>
      read(new PostgresBilling(new PgContext(tx as unknown as Sql, ctx.schema, ctx.timeoutMs), () => {}, this.windowsId)),
    ) as Promise<T>;
  }

  async placeHold(req: HoldRequest): Promise<HoldResult> {
    if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
    this.sweep();
    if (req.budgets?.length) return this.placeBudgeted(req);
    return holdResult((await this.accounts.submit(req.accountId, { op: 'hold', ...holdOp(req) })) as HoldOut);
  }

  /**
   * A hold with budgets is one call of its own (not in the account's batch): it runs under the
   * same wallet row lock as the batch, so the two still take turns.
   */
  private async placeBudgeted(req: HoldRequest): Promise<HoldResult> {
    const budgets = (req.budgets ?? []).map((b) => ({ scope: b.scope, period: b.period, cap: b.cap.toString(), source: b.source }));
    const r = await this.ctx.one<{ o_ok: boolean; o_source: string | null; o_available: bigint | null }>(
      'placeHold',
      `SELECT * FROM ${this.s}.mg_place_hold_budgeted($1, $2, $3, $4::bigint, $5::bigint, $6, $7::bigint, $8::text::jsonb)`,
      [
        req.accountId,
        req.holdId,
        req.keyId,
        req.amount.toString(),
        req.monthlyCap === null ? null : req.monthlyCap.toString(),
        req.month,
        whole(req.ttlMs),
        jsonText(budgets),
      ],
    );
    return holdResult({ ok: r?.o_ok ?? null, source: r?.o_source ?? null, available: r?.o_available?.toString() ?? null });
  }

  async hitAndPlaceHold(hit: WindowHit, req: HoldRequest): Promise<CountedHold> {
    if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
    this.sweep();
    const r = (await this.accounts.submit(req.accountId, {
      op: 'hit_hold',
      bucket: hit.bucket,
      limit: int32(hit.limit),
      window: whole(hit.windowMs),
      ...holdOp(req),
    })) as HitHoldOut;
    const allowed = r.allowed === true;
    return {
      window: { allowed, limit: hit.limit, remaining: num(r.remaining), resetMs: num(r.reset) },
      hold: allowed ? holdResult(r) : null,
    };
  }

  async periodSpend(accountId: string, scope: string, period: string): Promise<bigint> {
    const r = await this.ctx.one<{ amount: bigint }>(
      'periodSpend',
      `SELECT amount FROM ${this.s}.period_spend WHERE account_id = $1 AND scope = $2 AND period = $3`,
      [accountId, scope, period],
    );
    return big(r?.amount);
  }

  async renewHold(accountId: string, holdId: string, ttlMs: number): Promise<boolean> {
    const rows = await this.ctx.q(
      'renewHold',
      `UPDATE ${this.s}.holds SET expires_at = ${this.s}.mg_now() + $3::bigint
        WHERE account_id = $1 AND hold_id = $2 AND expires_at > ${this.s}.mg_now() RETURNING 1 AS one`,
      [accountId, holdId, Math.max(0, Math.floor(ttlMs))],
    );
    return rows.length === 1;
  }

  async settle(req: SettleRequest): Promise<SettleResult> {
    if (req.cost < 0n) throw new RangeError('settled cost must not be negative');
    const e = req.entry;
    const r = (await this.accounts.submit(req.accountId, {
      op: 'settle',
      hold: req.holdId,
      month: settleMonth(req),
      cost: req.cost.toString(),
      id: e.id,
      key: e.keyId,
      model: e.model,
      units: e.units,
      measured: e.measured ?? null,
      upstream: e.upstream ?? null,
      prices: e.prices ?? null,
      at: e.at,
    })) as SettleOut;
    return r.settled === true ? { settled: true, charged: big(r.charged), held: big(r.held) } : { settled: false, charged: 0n };
  }

  async release(accountId: string, holdId: string): Promise<boolean> {
    const r = (await this.accounts.submit(accountId, { op: 'release', hold: holdId })) as { released?: boolean };
    return r.released === true;
  }

  async topUp(accountId: string, amount: bigint): Promise<bigint> {
    if (amount < 0n) throw new RangeError('top-up amount must not be negative');
    if (amount === 0n) return (await this.wallet(accountId)).balance;
    // A wallet change is a ledger entry: a top-up is a credit with a fresh id, dated by the
    // database clock as every write is.
    const r = await this.ctx.one<{ o_balance: bigint }>(
      'topUp',
      `SELECT o_balance FROM ${this.s}.mg_credit($1, $2, $3::bigint, $4::text::jsonb, ${this.s}.mg_now())`,
      [accountId, topUpId(), amount.toString(), jsonText({ kind: 'credit', reason: TOP_UP_REASON })],
    );
    return big(r?.o_balance);
  }

  async credit(req: CreditRequest): Promise<CreditResult> {
    const r = await this.ctx.one<{ o_applied: boolean; o_balance: bigint }>(
      'credit',
      `SELECT * FROM ${this.s}.mg_credit($1, $2, $3::bigint, $4::text::jsonb, $5::bigint)`,
      [req.accountId, req.creditId, req.amount.toString(), jsonText(creditUnits(req.reason, req.adjustment)), req.at],
    );
    return { applied: r?.o_applied === true, balance: big(r?.o_balance) };
  }

  async creditApplied(accountId: string, creditId: string): Promise<boolean> {
    const r = await this.ctx.one<{ applied: boolean }>(
      'creditApplied',
      `SELECT EXISTS (SELECT 1 FROM ${this.s}.ledger WHERE account_id = $1 AND hold_id = 'credit:' || $2) AS applied`,
      [accountId, creditId],
    );
    return r?.applied === true;
  }

  async wallet(accountId: string): Promise<WalletView> {
    const r = await this.ctx.one<{ balance: bigint; held: bigint }>(
      'wallet',
      `SELECT coalesce((SELECT balance FROM ${this.s}.wallets WHERE account_id = $1), 0)::bigint AS balance,
              (SELECT coalesce(sum(amount), 0) FROM ${this.s}.holds WHERE account_id = $1 AND expires_at > ${this.s}.mg_now())::bigint AS held`,
      [accountId],
    );
    return { balance: big(r?.balance), held: big(r?.held) };
  }

  async keyUsage(accountId: string, keyId: string, month: string): Promise<KeyUsage> {
    const r = await this.ctx.one<{ total: bigint; monthly: bigint; held: bigint }>(
      'keyUsage',
      `SELECT (SELECT coalesce(sum(amount), 0) FROM ${this.s}.key_spend WHERE account_id = $1 AND key_id = $2)::bigint AS total,
              coalesce((SELECT amount FROM ${this.s}.key_spend WHERE account_id = $1 AND key_id = $2 AND month = $3), 0)::bigint AS monthly,
              (SELECT coalesce(sum(amount), 0) FROM ${this.s}.holds
                WHERE account_id = $1 AND key_id = $2 AND expires_at > ${this.s}.mg_now())::bigint AS held`,
      [accountId, keyId, month],
    );
    return { total: big(r?.total), monthly: big(r?.monthly), held: big(r?.held) };
  }

  async ledger(accountId: string): Promise<LedgerEntry[]> {
    const rows = await this.ctx.q<LedgerRow>(
      'ledger',
      `SELECT ${LEDGER_COLUMNS} FROM ${this.s}.ledger WHERE account_id = $1 ORDER BY seq`,
      [accountId],
    );
    return rows.map(ledgerEntry);
  }

  async queryLedger(query: LedgerQuery): Promise<LedgerPage> {
    const c = checkLedgerQuery(query);
    // The cursor is the seq of the last entry a page returned (see migrations.ts for why
    // paging by seq per account never skips an entry).
    const rows = await this.ctx.q<LedgerRow>(
      'queryLedger',
      `SELECT ${LEDGER_COLUMNS} FROM ${this.s}.ledger
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
  }

  // The (account_id, seq) index read backwards: only the rows returned are touched.
  async latestLedger(accountId: string, limit: number): Promise<LedgerEntry[]> {
    checkLatestLedger(accountId, limit);
    const rows = await this.ctx.q<LedgerRow>(
      'latestLedger',
      `SELECT ${LEDGER_COLUMNS} FROM ${this.s}.ledger WHERE account_id = $1 ORDER BY seq DESC LIMIT $2::integer`,
      [accountId, limit],
    );
    return rows.map(ledgerEntry);
  }

  async openHolds(accountId: string): Promise<number> {
    const r = await this.ctx.one<{ n: bigint }>(
      'openHolds',
      `SELECT count(*) AS n FROM ${this.s}.holds WHERE account_id = $1 AND expires_at > ${this.s}.mg_now()`,
      [accountId],
    );
    return num(r?.n);
  }

  // Every row, expired ones the sweep has not deleted yet included, in hold id order, with
  // the database clock the expiries are judged by.
  async listHolds(accountId: string, cursor: string | undefined, limit: number): Promise<HoldPage> {
    const n = Math.min(Math.max(1, Math.floor(limit)), 1_000);
    const rows = await this.ctx.q<{ hold_id: string | null; key_id: string; amount: bigint; expires_at: bigint; now: bigint }>(
      'listHolds',
      `SELECT h.hold_id, h.key_id, h.amount, h.expires_at, c.now
         FROM (SELECT ${this.s}.mg_now() AS now) AS c
         LEFT JOIN LATERAL (SELECT hold_id, key_id, amount, expires_at FROM ${this.s}.holds
                             WHERE account_id = $1 AND hold_id > $2 ORDER BY hold_id LIMIT $3::integer) AS h ON true`,
      [accountId, cursor ?? '', n + 1],
    );
    const at = num(rows[0]?.now);
    const kept = rows.filter((r) => r.hold_id !== null);
    const page = kept.slice(0, n);
    return {
      holds: page.map((r) => ({ holdId: r.hold_id as string, keyId: r.key_id, amount: big(r.amount), expiresAt: num(r.expires_at) })),
      nextCursor: kept.length > n ? (page.at(-1)?.hold_id ?? null) : null,
      at,
    };
  }

  // The unique index on (account_id, hold_id) keeps hold ids single unless the books were
  // changed behind the store's back; nothing keeps entry ids single but the billed call.
  async duplicateCharges(accountId: string, limit: number): Promise<DuplicateCharge[]> {
    const rows = await this.ctx.q<{ of: DuplicateCharge['of']; id: string; n: bigint }>(
      'duplicateCharges',
      `(SELECT 'hold' AS of, hold_id AS id, count(*) AS n FROM ${this.s}.ledger WHERE account_id = $1 AND units->>'kind' <> 'credit'
         GROUP BY hold_id HAVING count(*) > 1 ORDER BY hold_id LIMIT $2::integer)
       UNION ALL
       (SELECT 'request', id, count(*) FROM ${this.s}.ledger WHERE account_id = $1 AND units->>'kind' <> 'credit'
         GROUP BY id HAVING count(*) > 1 ORDER BY id LIMIT $2::integer)`,
      [accountId, Math.max(1, Math.floor(limit))],
    );
    return rows.map((r) => ({ of: r.of, id: r.id, charges: num(r.n) }));
  }
}
