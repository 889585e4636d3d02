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
  SettleRequest,
  SettleResult,
  WalletView,
  WindowHit,
} from '../types.js';
import { big, num, type SqliteContext } from './connection.js';
import { LEDGER_COLUMNS, ledgerEntry, type LedgerRow } from './ledger-rows.js';
import type { SqliteLimits } from './limits.js';
import { prepareCredit } from './credit.js';
import { settleMonth, spendPeriods } from '../spend-periods.js';
import { TOP_UP_REASON, topUpId } from '../wallet-entries.js';

/** The first two facts a hold decides on: the hold id's own row's expiry, and the balance. */
const OWN_HOLD_AND_BALANCE = `(SELECT expires_at FROM holds WHERE account_id = @account AND hold_id = @hold),
                (SELECT balance FROM wallets WHERE account_id = @account)`;

/**
 * What an account's open holds hold: the total its holds' triggers keep, less the holds that
 * expired and were not swept yet (few: the sweep and every write of the account delete them),
 * found by the (account, expiry) index. Reading a sum of every open hold instead cost a pass
 * over all of them for each hold placed.
 */
const ACCOUNT_HELD = `((SELECT coalesce(sum(amount), 0) FROM hold_totals WHERE account_id = @account)
  - (SELECT coalesce(sum(amount), 0) FROM holds WHERE account_id = @account AND expires_at <= @now))`;
/** The same for one key of the account. */
const KEY_HELD = `((SELECT coalesce(sum(amount), 0) FROM hold_totals WHERE account_id = @account AND key_id = @key)
  - (SELECT coalesce(sum(amount), 0) FROM holds WHERE account_id = @account AND key_id = @key AND expires_at <= @now))`;

/** Every statement billing runs, prepared once per store. */
function prepareStatements(ctx: SqliteContext) {
  return {
    // A credit id takes the ledger's hold-id slot as "credit:<id>" (credit.ts).
    creditApplied: ctx.prepare('SELECT 1 FROM ledger WHERE account_id = ? AND hold_id = ?'),
    // What a hold decides on, in one statement (each statement is a round through the
    // driver): the hold id's own open row, the balance and what the account's open holds
    // hold; with a monthly cap also the key's month spend and what its open holds hold.
    // Raw rows: [existing expiry, balance, held(, spent, held by key)].
    holdFacts: ctx
      .exact(`SELECT ${OWN_HOLD_AND_BALANCE}, ${ACCOUNT_HELD}`)
      .raw(),
    holdFactsCapped: ctx
      .exact(
        `SELECT ${OWN_HOLD_AND_BALANCE},
                ${ACCOUNT_HELD}, (SELECT amount FROM key_spend WHERE account_id = @account AND key_id = @key AND month = @month), ${KEY_HELD}`,
      )
      .raw(),
    dropHold: ctx.prepare('DELETE FROM holds WHERE account_id = ? AND hold_id = ?'),
    balance: ctx.exact('SELECT balance FROM wallets WHERE account_id = ?'),
    held: ctx.exact(`SELECT ${ACCOUNT_HELD} AS held`),
    heldByKey: ctx.exact(`SELECT ${KEY_HELD} AS held`),
    monthSpend: ctx.exact('SELECT amount FROM key_spend WHERE account_id = ? AND key_id = ? AND month = ?'),
    totalSpend: ctx.exact('SELECT coalesce(sum(amount), 0) AS total FROM key_spend WHERE account_id = ? AND key_id = ?'),
    insertHold: ctx.prepare(
      'INSERT INTO holds (account_id, hold_id, key_id, amount, month, expires_at) VALUES (?, ?, ?, ?, ?, ?)',
    ),
    renew: ctx.prepare('UPDATE holds SET expires_at = ? WHERE account_id = ? AND hold_id = ? AND expires_at > ?'),
    close: ctx.prepare('INSERT INTO closed_holds (account_id, hold_id, closed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING'),
    // A settle after release finds the hold id closed; a replayed settle finds its ledger entry.
    closedOrSettled: ctx
      .prepare(
        `SELECT EXISTS (SELECT 1 FROM closed_holds WHERE account_id = @account AND hold_id = @hold)
             OR EXISTS (SELECT 1 FROM ledger WHERE account_id = @account AND hold_id = @hold)`,
      )
      .pluck(),
    takeHold: ctx.exact('DELETE FROM holds WHERE account_id = ? AND hold_id = ? RETURNING amount, month, expires_at'),
    debit: ctx.prepare(
      'INSERT INTO wallets (account_id, balance) VALUES (?, ?) ON CONFLICT (account_id) DO UPDATE SET balance = balance + excluded.balance',
    ),
    spend: ctx.prepare(
      'INSERT INTO key_spend (account_id, key_id, month, amount) VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET amount = amount + excluded.amount',
    ),
    append: ctx.prepare(
      `INSERT INTO ledger (account_id, hold_id, id, key_id, model, units, cost, held, exceeded_hold, measured, upstream, prices, at, recorded_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    ledger: ctx.exact(`SELECT ${LEDGER_COLUMNS} FROM ledger WHERE account_id = ? ORDER BY seq`),
    openHolds: ctx.prepare('SELECT count(*) AS n FROM holds WHERE account_id = ? AND expires_at > ?'),
    periodSpend: ctx.exact('SELECT amount FROM period_spend WHERE account_id = ? AND scope = ? AND period = ?'),
    // A settle's cost goes to the key's and the account's ('') day, week and month at once.
    addPeriodSpend: ctx.prepare(`INSERT INTO period_spend (account_id, scope, period, amount)
      VALUES ${Array(6).fill('(?, ?, ?, ?)').join(', ')} ON CONFLICT DO UPDATE SET amount = amount + excluded.amount`),
  };
}

type Statements = ReturnType<typeof prepareStatements>;

/**
 * Billing on SQLite. Each of placeHold, settle, release and renewHold is one atomic step of a
 * group commit (`SqliteContext.batch`): inside an IMMEDIATE transaction, whose write lock is
 * taken before the balance and holds are read, so the check and the write are one step, also
 * against another process on the same file. Held amounts are summed from the open hold rows
 * (an account has a handful), so no running total can drift. Given the limit store's
 * `windows`, a hold counts the key's rate-window hit first (hitAndPlaceHold).
 */
export function createSqliteBilling(ctx: SqliteContext, windows?: SqliteLimits): BillingStore {
  return windows ? new WindowedSqliteBilling(ctx, windows) : new SqliteBilling(ctx);
}

class SqliteBilling implements BillingStore {
  protected readonly q: Statements;

  constructor(protected readonly ctx: SqliteContext) {
    this.q = prepareStatements(ctx);
    this.creditStep = prepareCredit(ctx);
  }

  /** The credit step, inside a write transaction (credit.ts). */
  private readonly creditStep: (req: CreditRequest) => CreditResult;

  private balanceOf(accountId: string): bigint {
    return big((this.q.balance.get(accountId) as { balance: bigint } | undefined)?.balance);
  }

  /**
   * The hold-if-affordable step, inside the caller's IMMEDIATE transaction. Expired holds
   * count for nothing (every sum reads only unexpired ones); the sweep deletes them, so no
   * call pays for scanning and deleting its account's expired holds.
   */
  protected placeInTransaction(req: HoldRequest, t: number): HoldResult {
    const q = this.q;
    const capped = req.monthlyCap !== null;
    const args = capped
      ? { account: req.accountId, hold: req.holdId, now: t, key: req.keyId, month: req.month }
      : { account: req.accountId, hold: req.holdId, now: t };
    const facts = (capped ? q.holdFactsCapped : q.holdFacts).get(args) as (bigint | null)[];
    const expiresAt = facts[0];
    if (expiresAt !== null && expiresAt !== undefined) {
      // Placing an open hold again is a no-op, so a retried call cannot hold twice.
      if (num(expiresAt) > t) return { ok: true };
      // An expired row of this id held nothing in the sums above; it makes way for the new one.
      q.dropHold.run(req.accountId, req.holdId);
    }
    const free = big(facts[1]) - big(facts[2]);
    if (free < req.amount) return { ok: false, limitSource: 'wallet', available: free > 0n ? free : 0n };
    if (capped) {
      const room = (req.monthlyCap as bigint) - big(facts[3]) - big(facts[4]);
      if (room < req.amount) return { ok: false, limitSource: 'key_monthly_cap', available: room > 0n ? room : 0n };
    }
    const refused = req.budgets?.length && this.budgetRefusal(req, big(facts[2]), t);
    if (refused) return refused;
    q.insertHold.run(req.accountId, req.holdId, req.keyId, req.amount, req.month, t + req.ttlMs);
    return { ok: true };
  }

  /** The first budget the hold would pass, as its refusal; undefined when it fits them all. */
  private budgetRefusal(req: HoldRequest, heldByAccount: bigint, t: number): HoldResult | undefined {
    const heldByKey = big((this.q.heldByKey.get({ account: req.accountId, key: req.keyId, now: t }) as { held: bigint }).held);
    for (const b of req.budgets ?? []) {
      const spent = this.spentIn(req.accountId, b.scope === 'key' ? req.keyId : '', b.period);
      const room = b.cap - spent - (b.scope === 'key' ? heldByKey : heldByAccount);
      if (room < req.amount) return { ok: false, limitSource: b.source, available: room > 0n ? room : 0n };
    }
    return undefined;
  }

  async placeHold(req: HoldRequest): Promise<HoldResult> {
    if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
    this.ctx.sweep();
    return this.ctx.batch('placeHold', () => this.placeInTransaction(req, this.ctx.now()));
  }

  async renewHold(accountId: string, holdId: string, ttlMs: number): Promise<boolean> {
    return this.ctx.batch('renewHold', () => {
      const t = this.ctx.now();
      return this.q.renew.run(t + ttlMs, accountId, holdId, t).changes === 1;
    });
  }

  async settle(req: SettleRequest): Promise<SettleResult> {
    if (req.cost < 0n) throw new RangeError('settled cost must not be negative');
    return this.ctx.batch('settle', () => this.settleInTransaction(req));
  }

  private settleInTransaction(req: SettleRequest): SettleResult {
    const q = this.q;
    const t = this.ctx.now();
    // A settle after release finds the hold id closed; a replayed settle finds its ledger
    // entry (unique per account and hold id, for good), so settling writes no marker.
    if (q.closedOrSettled.get({ account: req.accountId, hold: req.holdId })) return { settled: false, charged: 0n };
    const taken = q.takeHold.get(req.accountId, req.holdId) as { amount: bigint; month: string; expires_at: bigint } | undefined;
    // A hold that expired before its settle counts as gone: nothing was held.
    const hold = taken && num(taken.expires_at) > t ? taken : undefined;
    const held = hold ? hold.amount : 0n;
    // The spend counts in the month the charge is dated in, as its ledger entry and the
    // period budgets do, not in the month its hold was placed.
    const month = settleMonth(req);
    // The full list cost, even past the hold: delivered output is never given away.
    const cost = req.cost;
    q.debit.run(req.accountId, -cost);
    q.spend.run(req.accountId, req.entry.keyId, month, cost);
    const periods = spendPeriods(req.entry.at);
    q.addPeriodSpend.run(...[req.entry.keyId, ''].flatMap((scope) => periods.flatMap((p) => [req.accountId, scope, p, cost])));
    const e = req.entry;
    q.append.run(
      req.accountId,
      req.holdId,
      e.id,
      e.keyId,
      e.model,
      JSON.stringify(e.units),
      cost,
      held,
      cost > held ? 1 : 0,
      e.measured ?? null,
      e.upstream ?? null,
      e.prices ? JSON.stringify(e.prices) : null,
      e.at,
      t,
    );
    return { settled: true, charged: cost, held };
  }

  async release(accountId: string, holdId: string): Promise<boolean> {
    return this.ctx.batch('release', () => {
      const t = this.ctx.now();
      this.q.close.run(accountId, holdId, t);
      const hold = this.q.takeHold.get(accountId, holdId) as { expires_at: bigint } | undefined;
      return hold !== undefined && num(hold.expires_at) > t;
    });
  }

  async topUp(accountId: string, amount: bigint): Promise<bigint> {
    if (amount < 0n) throw new RangeError('top-up amount must not be negative');
    // A wallet change is a ledger entry; a top-up of nothing changes nothing.
    if (amount === 0n) return this.ctx.run('topUp', () => this.balanceOf(accountId));
    const req = { accountId, creditId: topUpId(), amount, reason: TOP_UP_REASON, at: this.ctx.now() };
    return this.ctx.write('topUp', () => this.creditStep(req).balance);
  }

  async credit(req: CreditRequest): Promise<CreditResult> {
    return this.ctx.write('credit', () => this.creditStep(req));
  }

  async creditApplied(accountId: string, creditId: string): Promise<boolean> {
    return this.ctx.read('creditApplied', () => this.q.creditApplied.get(accountId, `credit:${creditId}`) !== undefined);
  }

  async wallet(accountId: string): Promise<WalletView> {
    const t = this.ctx.now();
    return this.ctx.read('wallet', () => ({
      balance: this.balanceOf(accountId),
      held: big((this.q.held.get({ account: accountId, now: t }) as { held: bigint }).held),
    }));
  }

  async keyUsage(accountId: string, keyId: string, month: string): Promise<KeyUsage> {
    const t = this.ctx.now();
    const q = this.q;
    return this.ctx.read('keyUsage', () => ({
      total: big((q.totalSpend.get(accountId, keyId) as { total: bigint }).total),
      monthly: big((q.monthSpend.get(accountId, keyId, month) as { amount: bigint } | undefined)?.amount),
      held: big((q.heldByKey.get({ account: accountId, key: keyId, now: t }) as { held: bigint }).held),
    }));
  }

  private spentIn(accountId: string, scope: string, period: string): bigint {
    return big((this.q.periodSpend.get(accountId, scope, period) as { amount: bigint } | undefined)?.amount);
  }

  async periodSpend(accountId: string, scope: string, period: string): Promise<bigint> {
    return this.ctx.read('periodSpend', () => this.spentIn(accountId, scope, period));
  }

  async ledger(accountId: string): Promise<LedgerEntry[]> {
    return this.ctx.run('ledger', () => (this.q.ledger.all(accountId) as LedgerRow[]).map(ledgerEntry));
  }

  async queryLedger(query: LedgerQuery): Promise<LedgerPage> {
    const c = checkLedgerQuery(query);
    // The cursor is the seq of the last entry a page returned. Seqs only grow, and one
    // account's settles are serialised by the write lock, so a page never skips an entry
    // that commits later with a smaller seq.
    const where = ['account_id = ?', 'seq > ?'];
    const args: (string | number | bigint)[] = [c.accountId, c.start];
    if (c.keyId !== undefined) {
      where.push('key_id = ?');
      args.push(c.keyId);
    }
    if (c.from !== undefined) {
      where.push('at >= ?');
      args.push(c.from);
    }
    if (c.to !== undefined) {
      where.push('at < ?');
      args.push(c.to);
    }
    const sql = `SELECT ${LEDGER_COLUMNS} FROM ledger WHERE ${where.join(' AND ')} ORDER BY seq LIMIT ?`;
    return this.ctx.run('queryLedger', () => {
      const rows = this.ctx.exact(sql).all(...args, c.limit + 1) as LedgerRow[];
      const page = rows.slice(0, c.limit);
      const last = page[page.length - 1];
      return {
        entries: page.map(ledgerEntry),
        nextCursor: last ? String(last.seq) : String(c.start),
        more: rows.length > c.limit,
      };
    });
  }

  // The (account_id, seq) index read backwards: only the rows returned are touched.
  async latestLedger(accountId: string, limit: number): Promise<LedgerEntry[]> {
    checkLatestLedger(accountId, limit);
    const sql = `SELECT ${LEDGER_COLUMNS} FROM ledger WHERE account_id = ? ORDER BY seq DESC LIMIT ?`;
    return this.ctx.run('latestLedger', () => (this.ctx.exact(sql).all(accountId, limit) as LedgerRow[]).map(ledgerEntry));
  }

  async openHolds(accountId: string): Promise<number> {
    const t = this.ctx.now();
    return this.ctx.run('openHolds', () => num((this.q.openHolds.get(accountId, t) as { n: number }).n));
  }

  // Every row, expired ones the sweep has not deleted yet included, in hold id order.
  async listHolds(accountId: string, cursor: string | undefined, limit: number): Promise<HoldPage> {
    const t = this.ctx.now();
    const n = Math.min(Math.max(1, Math.floor(limit)), 1_000);
    return this.ctx.run('listHolds', () => {
      const rows = this.ctx
        .exact('SELECT hold_id, key_id, amount, expires_at FROM holds WHERE account_id = ? AND hold_id > ? ORDER BY hold_id LIMIT ?')
        .all(accountId, cursor ?? '', n + 1) as { hold_id: string; key_id: string; amount: bigint; expires_at: bigint }[];
      const page = rows.slice(0, n);
      return {
        holds: page.map((r) => ({ holdId: r.hold_id, keyId: r.key_id, amount: big(r.amount), expiresAt: num(r.expires_at) })),
        nextCursor: rows.length > n ? (page.at(-1)?.hold_id ?? null) : null,
        at: t,
      };
    });
  }

  // The unique index on (account_id, hold_id) keeps hold ids single unless the books were
  // changed behind the store's back; nothing keeps entry ids single but the billed call.
  async duplicateCharges(accountId: string, limit: number): Promise<DuplicateCharge[]> {
    const n = Math.max(1, Math.floor(limit));
    const repeated = (column: 'hold_id' | 'id', of: DuplicateCharge['of']) =>
      (
        this.ctx
          .exact(
            `SELECT ${column} AS id, count(*) AS n FROM ledger WHERE account_id = ? AND json_extract(units, '$.kind') <> 'credit'
              GROUP BY ${column} HAVING count(*) > 1 ORDER BY ${column} LIMIT ?`,
          )
          .all(accountId, n) as { id: string; n: bigint }[]
      ).map((r) => ({ of, id: r.id, charges: num(r.n) }));
    return this.ctx.run('duplicateCharges', () => [...repeated('hold_id', 'hold'), ...repeated('id', 'request')]);
  }
}

/**
 * Billing beside the limit store's windows (in the same file): a hold counts the key's window
 * hit first, in the same atomic step, and is placed only when the hit was allowed. A refused
 * hit writes nothing.
 */
class WindowedSqliteBilling extends SqliteBilling {
  readonly windowsId: symbol;

  constructor(
    ctx: SqliteContext,
    private readonly windows: SqliteLimits,
  ) {
    super(ctx);
    this.windowsId = windows.windowsId;
  }

  async hitAndPlaceHold(hit: WindowHit, req: HoldRequest): Promise<CountedHold> {
    if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
    this.ctx.sweep();
    return this.ctx.batch('hitAndPlaceHold', () => {
      const t = this.ctx.now();
      const window = this.windows.windows.hitIn(hit.bucket, hit.limit, hit.windowMs, t);
      return { window, hold: window.allowed ? this.placeInTransaction(req, t) : null };
    });
  }
}
