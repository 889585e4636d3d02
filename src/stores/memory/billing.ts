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
import type { MemoryLimits } from './limits.js';
import { checkLatestLedger, checkLedgerQuery, matchesLedgerQuery } from '../ledger-query.js';
import { type AccountHolds, drop, heldBy, type Hold } from './holds.js';
import { createRecentIds } from './recent-ids.js';
import { settleMonth, spendPeriods } from '../spend-periods.js';
import { createSweeper } from './sweep.js';
import { creditUnits, TOP_UP_REASON, topUpId } from '../wallet-entries.js';

/** Wallet balances by account id. */
export type Balances = Map<string, bigint>;

interface KeySpend {
  total: bigint;
  byMonth: Map<string, bigint>;
}

const SWEEP_INTERVAL_MS = 60_000;
/** How long a closed (settled or released) hold id is remembered, so a replayed settle never debits twice. */
const CLOSED_TTL_MS = 24 * 60 * 60 * 1000;
/** At most this many closed hold ids are remembered; the oldest are forgotten first. */
const CLOSED_MAX = 200_000;

/**
 * Billing in one process. Every method does all its reads and writes synchronously (no await
 * in between), so each one is atomic with respect to every other call. Given the limit
 * store's `windows`, a hold can count a rate-window hit in the same synchronous step.
 */
export function createMemoryBilling(balances: Balances, now: () => number, ledgerLimit = 10_000, windows?: MemoryLimits): MemoryBilling {
  return windows ? new WindowedMemoryBilling(balances, now, ledgerLimit, windows) : new MemoryBilling(balances, now, ledgerLimit);
}

export class MemoryBilling implements BillingStore {
  /** Open holds by account, with running sums so no operation walks every hold. */
  private readonly holds = new Map<string, AccountHolds>();
  /** Settled spend: account id -> key id -> spend. */
  private readonly spend = new Map<string, Map<string, KeySpend>>();
  /** Settled spend per period: "account\0scope\0period" (scope: the key id, or "" for the account). */
  private readonly spentIn = new Map<string, bigint>();
  private readonly ledgers = new Map<string, LedgerEntry[]>();
  /** Each ledger entry's hold id ("" for a credit), beside the ledger (an entry does not show it). */
  private readonly holdIds = new Map<string, string[]>();
  /** Entries trimmed from the front of each ledger, so a page cursor (a position) stays valid. */
  private readonly trimmed = new Map<string, number>();
  /** Closed hold ids ("account\0hold"), forgotten after a day or once CLOSED_MAX newer ones closed. */
  private readonly closed = createRecentIds(CLOSED_MAX, CLOSED_TTL_MS);

  /** Applied credit ids ("account\0credit"). */
  private readonly credited = new Set<string>();

  /**
   * Drops expired holds and closed ids now and then. Accounts nobody touches again would
   * otherwise keep their expired holds forever.
   */
  private readonly sweep: () => void;

  constructor(
    private readonly balances: Balances,
    private readonly now: () => number,
    private readonly ledgerLimit: number,
  ) {
    this.sweep = createSweeper(now, SWEEP_INTERVAL_MS, (t) => {
      for (const accountId of [...this.holds.keys()]) this.liveHolds(accountId, t);
      this.closed.expire(t);
    });
  }

  private appendEntry(accountId: string, entry: LedgerEntry, holdId: string): void {
    let ledger = this.ledgers.get(accountId);
    let holds = this.holdIds.get(accountId);
    if (!ledger || !holds) {
      this.ledgers.set(accountId, (ledger = []));
      this.holdIds.set(accountId, (holds = []));
    }
    ledger.push(entry);
    holds.push(holdId);
    // Drop the oldest in batches (a tenth over the limit), so trimming is amortised O(1).
    if (ledger.length > this.ledgerLimit + Math.ceil(this.ledgerLimit / 10)) {
      const dropped = ledger.length - this.ledgerLimit;
      ledger.splice(0, dropped);
      holds.splice(0, dropped);
      this.trimmed.set(accountId, (this.trimmed.get(accountId) ?? 0) + dropped);
    }
  }

  private close(accountId: string, holdId: string, t: number): boolean {
    const id = `${accountId}\u0000${holdId}`;
    if (this.closed.has(id)) return false;
    this.closed.add(id, t);
    return true;
  }

  /**
   * The account's unexpired holds. Expired ones are dropped only once the earliest expiry has
   * passed, so the usual call costs O(1) rather than a walk over every open hold.
   */
  private liveHolds(accountId: string, t = this.now()): AccountHolds | undefined {
    const mine = this.holds.get(accountId);
    if (!mine) return undefined;
    if (t >= mine.nextExpiry) {
      let next = Infinity;
      for (const [id, hold] of mine.byId) {
        if (hold.expiresAt <= t) drop(mine, id, hold);
        else if (hold.expiresAt < next) next = hold.expiresAt;
      }
      mine.nextExpiry = next;
    }
    if (mine.byId.size === 0) {
      this.holds.delete(accountId);
      return undefined;
    }
    return mine;
  }

  private keySpend(accountId: string, keyId: string): KeySpend | undefined {
    return this.spend.get(accountId)?.get(keyId);
  }

  private addSpend(accountId: string, keyId: string, month: string, amount: bigint): void {
    let byKey = this.spend.get(accountId);
    if (!byKey) this.spend.set(accountId, (byKey = new Map()));
    let s = byKey.get(keyId);
    if (!s) byKey.set(keyId, (s = { total: 0n, byMonth: new Map() }));
    s.total += amount;
    s.byMonth.set(month, (s.byMonth.get(month) ?? 0n) + amount);
  }

  protected placeNow(req: HoldRequest): HoldResult {
    if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
    this.sweep();
    const t = this.now();
    const mine = this.liveHolds(req.accountId, t);
    // Placing an open hold again is a no-op, so a retried call cannot hold twice.
    if (mine?.byId.has(req.holdId)) return { ok: true };

    const free = (this.balances.get(req.accountId) ?? 0n) - heldBy(mine);
    if (free < req.amount) return { ok: false, limitSource: 'wallet', available: free > 0n ? free : 0n };

    if (req.monthlyCap !== null) {
      const used = (this.keySpend(req.accountId, req.keyId)?.byMonth.get(req.month) ?? 0n) + heldBy(mine, req.keyId);
      const room = req.monthlyCap - used;
      if (room < req.amount) return { ok: false, limitSource: 'key_monthly_cap', available: room > 0n ? room : 0n };
    }
    for (const b of req.budgets ?? []) {
      const scope = b.scope === 'key' ? req.keyId : '';
      const spent = this.spentIn.get(`${req.accountId}\u0000${scope}\u0000${b.period}`) ?? 0n;
      const room = b.cap - spent - heldBy(mine, b.scope === 'key' ? req.keyId : undefined);
      if (room < req.amount) return { ok: false, limitSource: b.source, available: room > 0n ? room : 0n };
    }

    const target = mine ?? { byId: new Map<string, Hold>(), total: 0n, byKey: new Map<string, bigint>(), nextExpiry: Infinity };
    const expiresAt = t + req.ttlMs;
    target.byId.set(req.holdId, { keyId: req.keyId, amount: req.amount, month: req.month, expiresAt });
    target.total += req.amount;
    target.byKey.set(req.keyId, (target.byKey.get(req.keyId) ?? 0n) + req.amount);
    if (expiresAt < target.nextExpiry) target.nextExpiry = expiresAt;
    this.holds.set(req.accountId, target);
    return { ok: true };
  }

  async placeHold(req: HoldRequest): Promise<HoldResult> {
    return this.placeNow(req);
  }

  async renewHold(accountId: string, holdId: string, ttlMs: number): Promise<boolean> {
    const t = this.now();
    const mine = this.liveHolds(accountId, t);
    const hold = mine?.byId.get(holdId);
    if (!mine || !hold) return false;
    hold.expiresAt = t + ttlMs;
    // nextExpiry may now be early; the next look past it recomputes it.
    return true;
  }

  async settle(req: SettleRequest): Promise<SettleResult> {
    if (req.cost < 0n) throw new RangeError('settled cost must not be negative');
    const t = this.now();
    if (!this.close(req.accountId, req.holdId, t)) return { settled: false, charged: 0n };
    const mine = this.liveHolds(req.accountId, t);
    const hold = mine?.byId.get(req.holdId);
    let held = 0n;
    if (mine && hold) {
      held = hold.amount;
      drop(mine, req.holdId, hold);
      if (mine.byId.size === 0) this.holds.delete(req.accountId);
    }
    // The full list cost, even past the hold: delivered output is never given away.
    const charged = req.cost;
    this.balances.set(req.accountId, (this.balances.get(req.accountId) ?? 0n) - charged);
    this.addSpend(req.accountId, req.entry.keyId, settleMonth(req), charged);
    for (const period of spendPeriods(req.entry.at)) {
      for (const scope of [req.entry.keyId, '']) {
        const k = `${req.accountId}\u0000${scope}\u0000${period}`;
        this.spentIn.set(k, (this.spentIn.get(k) ?? 0n) + charged);
      }
    }

    const e = req.entry;
    // A field-by-field copy: every field is a primitive but `units` (structuredClone is slow here).
    // One object shape for every entry (a spread gives each its own hidden class).
    this.appendEntry(req.accountId, {
      id: e.id,
      accountId: e.accountId,
      keyId: e.keyId,
      model: e.model,
      units: { ...e.units },
      cost: charged,
      held,
      exceededHold: charged > held,
      measured: e.measured,
      upstream: e.upstream,
      prices: e.prices,
      at: e.at,
    }, req.holdId);
    return { settled: true, charged, held };
  }

  async release(accountId: string, holdId: string): Promise<boolean> {
    const t = this.now();
    this.close(accountId, holdId, t);
    const mine = this.liveHolds(accountId, t);
    const hold = mine?.byId.get(holdId);
    if (!mine || !hold) return false;
    drop(mine, holdId, hold);
    if (mine.byId.size === 0) this.holds.delete(accountId);
    return true;
  }

  async topUp(accountId: string, amount: bigint): Promise<bigint> {
    if (amount < 0n) throw new RangeError('top-up amount must not be negative');
    // A wallet change is a ledger entry; a top-up of nothing changes nothing.
    if (amount === 0n) return this.balances.get(accountId) ?? 0n;
    return this.creditNow({ accountId, creditId: topUpId(), amount, reason: TOP_UP_REASON, at: this.now() }).balance;
  }

  async credit(req: CreditRequest): Promise<CreditResult> {
    return this.creditNow(req);
  }

  async creditApplied(accountId: string, creditId: string): Promise<boolean> {
    return this.credited.has(`${accountId}\u0000${creditId}`);
  }

  /**
   * The credit step, synchronous, so the account store can credit an opening balance in the
   * same step as it creates the account.
   */
  creditNow(req: CreditRequest): CreditResult {
    // Credit ids are remembered for good (credits are rare), so a replay never pays twice.
    const id = `${req.accountId}\u0000${req.creditId}`;
    if (this.credited.has(id)) return { applied: false, balance: this.balances.get(req.accountId) ?? 0n };
    this.credited.add(id);
    const balance = (this.balances.get(req.accountId) ?? 0n) + req.amount;
    this.balances.set(req.accountId, balance);
    this.appendEntry(req.accountId, {
      id: req.creditId,
      accountId: req.accountId,
      keyId: '',
      model: '',
      units: creditUnits(req.reason, req.adjustment),
      cost: -req.amount,
      held: 0n,
      exceededHold: false,
      measured: null,
      upstream: undefined,
      prices: undefined,
      at: req.at,
    }, '');
    return { applied: true, balance };
  }

  async wallet(accountId: string): Promise<WalletView> {
    return { balance: this.balances.get(accountId) ?? 0n, held: heldBy(this.liveHolds(accountId)) };
  }

  async keyUsage(accountId: string, keyId: string, month: string): Promise<KeyUsage> {
    const s = this.keySpend(accountId, keyId);
    return {
      total: s?.total ?? 0n,
      monthly: s?.byMonth.get(month) ?? 0n,
      held: heldBy(this.liveHolds(accountId), keyId),
    };
  }

  async periodSpend(accountId: string, scope: string, period: string): Promise<bigint> {
    return this.spentIn.get(`${accountId}\u0000${scope}\u0000${period}`) ?? 0n;
  }

  async ledger(accountId: string): Promise<LedgerEntry[]> {
    return structuredClone(this.ledgers.get(accountId) ?? []);
  }

  async queryLedger(query: LedgerQuery): Promise<LedgerPage> {
    const q = checkLedgerQuery(query);
    const ledger = this.ledgers.get(q.accountId) ?? [];
    // The cursor is an absolute position: entries trimmed since are skipped.
    const base = this.trimmed.get(q.accountId) ?? 0;
    let i = Math.max(0, Number(q.start) - base);
    const entries: LedgerEntry[] = [];
    for (; i < ledger.length && entries.length < q.limit; i++) {
      const e = ledger[i] as LedgerEntry;
      if (matchesLedgerQuery(e, q)) entries.push(structuredClone(e));
    }
    return { entries, nextCursor: String(base + i), more: i < ledger.length };
  }

  async latestLedger(accountId: string, limit: number): Promise<LedgerEntry[]> {
    checkLatestLedger(accountId, limit);
    return structuredClone((this.ledgers.get(accountId) ?? []).slice(-limit).reverse());
  }

  async openHolds(accountId: string): Promise<number> {
    return this.liveHolds(accountId)?.byId.size ?? 0;
  }

  // Read as kept, without dropping expired holds: the audit looks for holds kept past expiry.
  // Pages in hold id order; the cursor is the last id returned.
  async listHolds(accountId: string, cursor: string | undefined, limit: number): Promise<HoldPage> {
    const at = this.now();
    const mine = this.holds.get(accountId);
    const ids = [...(mine?.byId.keys() ?? [])].filter((id) => cursor === undefined || id > cursor).sort();
    const page = ids.slice(0, Math.max(1, limit));
    const holds = page.map((holdId) => {
      const h = mine?.byId.get(holdId) as Hold;
      return { holdId, keyId: h.keyId, amount: h.amount, expiresAt: h.expiresAt };
    });
    return { holds, nextCursor: ids.length > page.length ? (page.at(-1) ?? null) : null, at };
  }

  // The ledger is in memory already, and so are its ids.
  async duplicateCharges(accountId: string, limit: number): Promise<DuplicateCharge[]> {
    const ledger = this.ledgers.get(accountId) ?? [];
    const holds = this.holdIds.get(accountId) ?? [];
    const charges = ledger.flatMap((e, i) => (e.units.kind === 'credit' ? [] : [{ id: e.id, holdId: holds[i] ?? '' }]));
    return [...repeated(charges.map((c) => c.holdId), 'hold', limit), ...repeated(charges.map((c) => c.id), 'request', limit)];
  }
}

/** The ids seen more than once, at most `limit` of them. */
function repeated(ids: string[], of: DuplicateCharge['of'], limit: number): DuplicateCharge[] {
  const counts = new Map<string, number>();
  for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
  const out: DuplicateCharge[] = [];
  for (const [id, charges] of counts) if (charges > 1 && out.length < limit) out.push({ of, id, charges });
  return out;
}

/** Billing beside the limit store's windows, so a hold can count a key's window hit. */
class WindowedMemoryBilling extends MemoryBilling {
  readonly windowsId: symbol;

  constructor(
    balances: Balances,
    now: () => number,
    ledgerLimit: number,
    private readonly windows: MemoryLimits,
  ) {
    super(balances, now, ledgerLimit);
    this.windowsId = windows.windowsId;
  }

  // Both steps run synchronously, one after the other: nothing can come in between.
  async hitAndPlaceHold(hit: WindowHit, req: HoldRequest): Promise<CountedHold> {
    if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
    const window = this.windows.hitNow(hit.bucket, hit.limit, hit.windowMs);
    return { window, hold: window.allowed ? this.placeNow(req) : null };
  }
}
