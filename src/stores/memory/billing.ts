import type {
  BillingStore,
  HoldRequest,
  HoldResult,
  KeyUsage,
  LedgerEntry,
  SettleRequest,
  SettleResult,
  WalletView,
} from '../types.js';
import { createSweeper } from './sweep.js';

/** Wallet balances by account id; shared with the account store, which credits new accounts. */
export type Balances = Map<string, bigint>;

interface Hold {
  keyId: string;
  amount: bigint;
  /** The month the hold was checked against; its settlement counts towards that month. */
  month: string;
  expiresAt: number;
}

interface KeySpend {
  total: bigint;
  byMonth: Map<string, bigint>;
}

const SWEEP_INTERVAL_MS = 60_000;

/**
 * Billing in one process. Every method does all its reads and writes synchronously (no await
 * in between), so each one is atomic with respect to every other call.
 */
export function createMemoryBilling(balances: Balances, now: () => number): BillingStore {
  /** Open holds: account id -> hold id -> hold. */
  const holds = new Map<string, Map<string, Hold>>();
  /** Settled spend: account id -> key id -> spend. */
  const spend = new Map<string, Map<string, KeySpend>>();
  const ledgers = new Map<string, LedgerEntry[]>();

  /** The account's unexpired holds, dropping the expired ones (and the map once empty). */
  function liveHolds(accountId: string, t = now()): Map<string, Hold> | undefined {
    const mine = holds.get(accountId);
    if (!mine) return undefined;
    for (const [id, hold] of mine) if (hold.expiresAt <= t) mine.delete(id);
    if (mine.size === 0) {
      holds.delete(accountId);
      return undefined;
    }
    return mine;
  }

  // Accounts nobody touches again would otherwise keep their expired holds forever.
  const sweep = createSweeper(now, SWEEP_INTERVAL_MS, (t) => {
    for (const accountId of [...holds.keys()]) liveHolds(accountId, t);
  });

  function heldBy(mine: Map<string, Hold> | undefined, keyId?: string): bigint {
    let sum = 0n;
    if (mine) for (const hold of mine.values()) if (keyId === undefined || hold.keyId === keyId) sum += hold.amount;
    return sum;
  }

  function keySpend(accountId: string, keyId: string): KeySpend | undefined {
    return spend.get(accountId)?.get(keyId);
  }

  function addSpend(accountId: string, keyId: string, month: string, amount: bigint): void {
    let byKey = spend.get(accountId);
    if (!byKey) spend.set(accountId, (byKey = new Map()));
    let s = byKey.get(keyId);
    if (!s) byKey.set(keyId, (s = { total: 0n, byMonth: new Map() }));
    s.total += amount;
    s.byMonth.set(month, (s.byMonth.get(month) ?? 0n) + amount);
  }

  return {
    async placeHold(req: HoldRequest): Promise<HoldResult> {
      if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
      sweep();
      const t = now();
      const mine = liveHolds(req.accountId, t);
      // Placing an open hold again is a no-op, so a retried call cannot hold twice.
      if (mine?.has(req.holdId)) return { ok: true };

      const free = (balances.get(req.accountId) ?? 0n) - heldBy(mine);
      if (free < req.amount) return { ok: false, limitSource: 'wallet', available: free > 0n ? free : 0n };

      if (req.monthlyCap !== null) {
        const used = (keySpend(req.accountId, req.keyId)?.byMonth.get(req.month) ?? 0n) + heldBy(mine, req.keyId);
        const room = req.monthlyCap - used;
        if (room < req.amount) return { ok: false, limitSource: 'key_monthly_cap', available: room > 0n ? room : 0n };
      }

      const target = mine ?? new Map<string, Hold>();
      target.set(req.holdId, { keyId: req.keyId, amount: req.amount, month: req.month, expiresAt: t + req.ttlMs });
      holds.set(req.accountId, target);
      return { ok: true };
    },

    async settle(req: SettleRequest): Promise<SettleResult> {
      if (req.cost < 0n) throw new RangeError('settled cost must not be negative');
      const mine = liveHolds(req.accountId);
      const hold = mine?.get(req.holdId);
      if (!mine || !hold) return { settled: false, charged: 0n };

      const charged = req.cost < hold.amount ? req.cost : hold.amount;
      mine.delete(req.holdId);
      if (mine.size === 0) holds.delete(req.accountId);
      balances.set(req.accountId, (balances.get(req.accountId) ?? 0n) - charged);
      addSpend(req.accountId, hold.keyId, hold.month, charged);

      let ledger = ledgers.get(req.accountId);
      if (!ledger) ledgers.set(req.accountId, (ledger = []));
      // A field-by-field copy: every field is a primitive but `units` (structuredClone is slow here).
      ledger.push({ ...req.entry, units: { ...req.entry.units }, cost: charged, listCost: req.cost });
      return { settled: true, charged };
    },

    async release(accountId: string, holdId: string): Promise<boolean> {
      const mine = liveHolds(accountId);
      if (!mine?.delete(holdId)) return false;
      if (mine.size === 0) holds.delete(accountId);
      return true;
    },

    async topUp(accountId: string, amount: bigint): Promise<bigint> {
      if (amount < 0n) throw new RangeError('top-up amount must not be negative');
      const balance = (balances.get(accountId) ?? 0n) + amount;
      balances.set(accountId, balance);
      return balance;
    },

    async wallet(accountId: string): Promise<WalletView> {
      return { balance: balances.get(accountId) ?? 0n, held: heldBy(liveHolds(accountId)) };
    },

    async keyUsage(accountId: string, keyId: string, month: string): Promise<KeyUsage> {
      const s = keySpend(accountId, keyId);
      return {
        total: s?.total ?? 0n,
        monthly: s?.byMonth.get(month) ?? 0n,
        held: heldBy(liveHolds(accountId), keyId),
      };
    },

    async ledger(accountId: string): Promise<LedgerEntry[]> {
      return structuredClone(ledgers.get(accountId) ?? []);
    },

    async openHolds(accountId: string): Promise<number> {
      return liveHolds(accountId)?.size ?? 0;
    },
  };
}
