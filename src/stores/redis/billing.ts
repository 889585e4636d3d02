import { randomUUID } from 'node:crypto';
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
import { checkLatestLedger, checkLedgerQuery, matchesLedgerQuery } from '../ledger-query.js';
import { big, esc, hashEntries, int, list, type RedisContext, str, whole } from './connection.js';
import { TOP_UP_REASON, topUpId } from '../wallet-entries.js';
import { limitSourceOf } from '../limit-sources.js';
import { settleMonth, spendPeriods } from '../spend-periods.js';
import { creditEntry, creditMarker } from './credits.js';
import type { RedisLedgerUpgrade } from './ledger-upgrade.js';

/**
 * How long a released hold id is remembered, so a settle after its release changes nothing.
 * A settled hold id is remembered for good, by its ledger entry (the ledger index).
 */
export const CLOSED_MARKER_TTL_MS = 24 * 60 * 60 * 1000;

/** Entries read per LRANGE when paging the ledger, and at most per page (filters may skip many). */
const LEDGER_CHUNK = 1_000;
const LEDGER_SCAN_PER_PAGE = 20_000;
/** The audit's scratch keys vanish this long after its last chunk, should it stop half-way. */
const AUDIT_SCRATCH_TTL_MS = 10 * 60 * 1000;

/** A ledger line as kept: an entry whose hold id is not its own id keeps it, for the audit. */
type StoredEntry = Omit<LedgerEntry, 'cost' | 'held'> & { cost: string; held: string; holdId?: string };

function parseEntry(line: unknown): LedgerEntry {
  const { holdId: _holdId, ...e } = JSON.parse(str(line) ?? '{}') as StoredEntry;
  return { ...e, cost: BigInt(e.cost), held: BigInt(e.held) };
}

/** A hold script's answer from `at` on: {1} or {0, limitSource, available}. */
function holdResult(reply: unknown[], at: number): HoldResult {
  if (int(reply[at]) === 1) return { ok: true };
  return { ok: false, limitSource: limitSourceOf(str(reply[at + 1])), available: big(reply[at + 2]) };
}

/**
 * The spend hash's field of a key's (or, with no key, the account's) spend in a period (a
 * name from spendPeriods: "d2026-11-26", "w2026-11-23", "m2026-11").
 */
const periodField = (period: string, keyId = '') => `p:${esc(period)}:${keyId}`;

/** Field names inside the account's `held` and `spend` hashes for one key (and month). */
function fields(keyId: string, month: string) {
  return { held: `k:${keyId}`, monthly: `m:${esc(month)}:${keyId}`, total: `t:${keyId}` };
}

const closedMarker = (ctx: RedisContext, accountId: string, holdId: string) => ctx.account(accountId, `settled:${esc(holdId)}`);

/** The account's billing keys (all under its hash tag). */
const accountKeys = (ctx: RedisContext, accountId: string) => ({
  bal: ctx.account(accountId, 'bal'),
  holds: ctx.account(accountId, 'holds'),
  hexp: ctx.account(accountId, 'hexp'),
  held: ctx.account(accountId, 'held'),
  spend: ctx.account(accountId, 'spend'),
  ledger: ctx.account(accountId, 'ledger'),
  ledgerIndex: ctx.account(accountId, 'ledger-ids'),
});

/** The hold's arguments, shared by the hold script and the hit-and-hold script. */
const holdArgv = (req: HoldRequest, f: ReturnType<typeof fields>): Array<string | number> => [
  req.holdId,
  req.amount.toString(),
  req.monthlyCap === null ? '' : req.monthlyCap.toString(),
  whole(req.ttlMs),
  f.held,
  f.monthly,
  f.total,
  // Then each budget: its cap, its spend field, its held field, and its name for the 402.
  ...(req.budgets ?? []).flatMap((b) =>
    b.scope === 'key'
      ? [b.cap.toString(), periodField(b.period, req.keyId), f.held, b.source]
      : [b.cap.toString(), periodField(b.period), 'all', b.source],
  ),
];

/**
 * Billing on Redis. placeHold, hitAndPlaceHold (a key's window hit and the hold), settle and
 * release are one script each, sent in batches (connection.ts); every key they touch is under
 * the account's hash tag. See scripts.ts for the atomic steps.
 */
export function createRedisBilling(ctx: RedisContext, windowsId: symbol, hitMember: () => string, upgrade: RedisLedgerUpgrade): BillingStore {
  return new RedisBilling(ctx, windowsId, hitMember, upgrade);
}

class RedisBilling implements BillingStore {
  constructor(
    private readonly ctx: RedisContext,
    readonly windowsId: symbol,
    private readonly hitMember: () => string,
    /** Books from before every wallet change was an entry: upgraded before the first read (ledger-upgrade.ts). */
    private readonly upgrade: RedisLedgerUpgrade,
  ) {}

  async placeHold(req: HoldRequest): Promise<HoldResult> {
    if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
    const k = accountKeys(this.ctx, req.accountId);
    const f = fields(req.keyId, req.month);
    const reply = list(
      await this.ctx.batched('placeHold', 'mgPlaceHold', [k.bal, k.holds, k.hexp, k.held, k.spend], holdArgv(req, f)),
    );
    return holdResult(reply, 0);
  }

  async hitAndPlaceHold(hit: WindowHit, req: HoldRequest): Promise<CountedHold> {
    if (req.amount < 0n) throw new RangeError('hold amount must not be negative');
    const k = accountKeys(this.ctx, req.accountId);
    const f = fields(req.keyId, req.month);
    const reply = list(
      await this.ctx.batched(
        'hitAndPlaceHold',
        'mgHitPlaceHold',
        [this.ctx.bucket(hit.bucket, hit.accountId), k.bal, k.holds, k.hexp, k.held, k.spend],
        [whole(hit.limit), whole(hit.windowMs), this.hitMember(), ...holdArgv(req, f)],
      ),
    );
    const allowed = int(reply[0]) === 1;
    return {
      window: { allowed, limit: hit.limit, remaining: int(reply[1]), resetMs: int(reply[2]) },
      hold: allowed ? holdResult(reply, 3) : null,
    };
  }

  async periodSpend(accountId: string, scope: string, period: string): Promise<bigint> {
    const k = accountKeys(this.ctx, accountId);
    return big(await this.ctx.run('periodSpend', () => this.ctx.client.hget(k.spend, periodField(period, scope))));
  }

  async renewHold(accountId: string, holdId: string, ttlMs: number): Promise<boolean> {
    const k = accountKeys(this.ctx, accountId);
    const renewed = await this.ctx.run('renewHold', () => this.ctx.scripts.mgRenewHold([k.holds, k.hexp, k.held], [holdId, whole(ttlMs)]));
    return int(renewed) === 1;
  }

  async settle(req: SettleRequest): Promise<SettleResult> {
    if (req.cost < 0n) throw new RangeError('settled cost must not be negative');
    const k = accountKeys(this.ctx, req.accountId);
    const f = fields(req.entry.keyId, settleMonth(req));
    // The script appends "cost", "held" and "exceededHold" to this object. The hold id is
    // kept only when it is not the entry's own (an image answered as a job), for the audit.
    const entry = JSON.stringify(req.holdId === req.entry.id ? req.entry : { ...req.entry, holdId: req.holdId });
    const reply = list(
      await this.ctx.batched(
        'settle',
        'mgSettle',
        [k.bal, k.holds, k.hexp, k.held, k.spend, k.ledger, k.ledgerIndex, closedMarker(this.ctx, req.accountId, req.holdId)],
        [req.holdId, req.cost.toString(), entry, f.monthly, f.total, ...spendPeriods(req.entry.at).flatMap((p) => [periodField(p, req.entry.keyId), periodField(p)])],
      ),
    );
    return int(reply[0]) === 1 ? { settled: true, charged: big(reply[1]), held: big(reply[2]) } : { settled: false, charged: 0n };
  }

  async release(accountId: string, holdId: string): Promise<boolean> {
    const k = accountKeys(this.ctx, accountId);
    return (
      int(
        await this.ctx.batched('release', 'mgRelease', [k.holds, k.hexp, k.held, closedMarker(this.ctx, accountId, holdId)], [
          holdId,
          CLOSED_MARKER_TTL_MS,
        ]),
      ) === 1
    );
  }

  async topUp(accountId: string, amount: bigint): Promise<bigint> {
    if (amount < 0n) throw new RangeError('top-up amount must not be negative');
    const k = accountKeys(this.ctx, accountId);
    if (amount === 0n) return big(await this.ctx.run('topUp', () => this.ctx.client.get(k.bal)));
    // The script adds "at" (the Redis clock) to this entry: a top-up is a credit with a fresh id.
    const entry = creditEntry(accountId, topUpId(), amount, TOP_UP_REASON);
    const { at: _at, ...undated } = entry;
    return big(await this.ctx.run('topUp', () => this.ctx.scripts.mgTopUp([k.bal, k.ledger], [amount.toString(), JSON.stringify(undated)])));
  }

  async credit(req: CreditRequest): Promise<CreditResult> {
    const k = accountKeys(this.ctx, req.accountId);
    const entry = creditEntry(req.accountId, req.creditId, req.amount, req.reason, req.at, req.adjustment);
    const reply = list(
      await this.ctx.run('credit', () =>
        this.ctx.scripts.mgCredit(
          [k.bal, k.ledger, creditMarker(this.ctx, req.accountId, req.creditId)],
          [req.amount.toString(), JSON.stringify(entry)],
        ),
      ),
    );
    return { applied: int(reply[0]) === 1, balance: big(reply[1]) };
  }

  async creditApplied(accountId: string, creditId: string): Promise<boolean> {
    return (await this.ctx.run('creditApplied', () => this.ctx.client.exists(creditMarker(this.ctx, accountId, creditId)))) === 1;
  }

  async wallet(accountId: string): Promise<WalletView> {
    await this.upgrade.ensure();
    const k = accountKeys(this.ctx, accountId);
    const reply = list(await this.ctx.run('wallet', () => this.ctx.scripts.mgWallet([k.bal, k.holds, k.hexp, k.held], [])));
    return { balance: big(reply[0]), held: big(reply[1]) };
  }

  async keyUsage(accountId: string, keyId: string, month: string): Promise<KeyUsage> {
    const k = accountKeys(this.ctx, accountId);
    const f = fields(keyId, month);
    const reply = list(
      await this.ctx.run('keyUsage', () =>
        this.ctx.scripts.mgKeyUsage([k.holds, k.hexp, k.held, k.spend], [f.held, f.monthly, f.total]),
      ),
    );
    return { total: big(reply[0]), monthly: big(reply[1]), held: big(reply[2]) };
  }

  async ledger(accountId: string): Promise<LedgerEntry[]> {
    await this.upgrade.ensure();
    const raw = list(await this.ctx.run('ledger', () => this.ctx.client.lrange(accountKeys(this.ctx, accountId).ledger, 0, -1)));
    return raw.map(parseEntry);
  }

  async queryLedger(query: LedgerQuery): Promise<LedgerPage> {
    const q = checkLedgerQuery(query);
    await this.upgrade.ensure();
    const key = accountKeys(this.ctx, q.accountId).ledger;
    // The list is append-only, so a position (the cursor) always names the same entry.
    let pos = Number(q.start);
    const entries: LedgerEntry[] = [];
    return this.ctx.run('queryLedger', async () => {
      let scanned = 0;
      while (entries.length < q.limit && scanned < LEDGER_SCAN_PER_PAGE) {
        const raw = list(await this.ctx.client.lrange(key, pos, pos + LEDGER_CHUNK - 1));
        if (raw.length === 0) break;
        for (const line of raw) {
          pos++;
          scanned++;
          const e = parseEntry(line);
          if (matchesLedgerQuery(e, q)) entries.push(e);
          if (entries.length === q.limit) break;
        }
      }
      return { entries, nextCursor: String(pos), more: pos < int(await this.ctx.client.llen(key)) };
    });
  }

  // The list's tail only (LRANGE with negative indexes): one round trip, whatever its length.
  async latestLedger(accountId: string, limit: number): Promise<LedgerEntry[]> {
    checkLatestLedger(accountId, limit);
    await this.upgrade.ensure();
    const key = accountKeys(this.ctx, accountId).ledger;
    const raw = list(await this.ctx.run('latestLedger', () => this.ctx.client.lrange(key, -limit, -1)));
    return raw.map(parseEntry).reverse();
  }

  async openHolds(accountId: string): Promise<number> {
    const k = accountKeys(this.ctx, accountId);
    return int(await this.ctx.run('openHolds', () => this.ctx.scripts.mgOpenHolds([k.holds, k.hexp, k.held], [])));
  }

  // One HSCAN page: Redis decides its size (about `limit`; a small hash comes whole). The
  // cursor is HSCAN's; "0" from Redis means the scan is complete.
  async listHolds(accountId: string, cursor: string | undefined, limit: number): Promise<HoldPage> {
    const k = accountKeys(this.ctx, accountId);
    const size = Math.min(Math.max(1, Math.floor(limit)), 1_000);
    const reply = list(await this.ctx.run('listHolds', () => this.ctx.scripts.mgListHolds([k.holds, k.hexp], [cursor ?? '0', size])));
    const holds: HoldPage['holds'] = [];
    for (let i = 2; i + 2 < reply.length; i += 3) {
      const h = JSON.parse(str(reply[i + 1]) ?? '{}') as { a?: string; kf?: string };
      const expiry = str(reply[i + 2]);
      holds.push({
        holdId: str(reply[i]) ?? '',
        // The held-sums field of the key is "k:<key id>".
        keyId: (h.kf ?? '').replace(/^k:/, ''),
        amount: big(h.a),
        expiresAt: expiry === null ? null : Number(expiry),
      });
    }
    const next = str(reply[1]) ?? '0';
    return { holds, nextCursor: next === '0' ? null : next, at: int(reply[0]) };
  }

  async duplicateCharges(accountId: string, limit: number): Promise<DuplicateCharge[]> {
    await this.upgrade.ensure();
    const ledger = accountKeys(this.ctx, accountId).ledger;
    const scratch = `audit:${randomUUID()}`;
    const [holdsSeen, holdsRepeated, idsSeen, idsRepeated] = ['hs', 'hd', 'is', 'id'].map((k) => this.ctx.account(accountId, `${scratch}:${k}`)) as [
      string,
      string,
      string,
      string,
    ];
    return this.ctx.run('duplicateCharges', async () => {
      try {
        for (let pos = 0; ; pos += LEDGER_CHUNK) {
          const keys = [ledger, holdsSeen, holdsRepeated, idsSeen, idsRepeated];
          const n = int(await this.ctx.scripts.mgAuditCharges(keys, [pos, LEDGER_CHUNK, AUDIT_SCRATCH_TTL_MS]));
          if (n < LEDGER_CHUNK) break;
        }
        // Each hash counts the repeats: the charges are one more.
        const repeated = async (hash: string, of: DuplicateCharge['of']) =>
          hashEntries(await this.ctx.client.hgetall(hash))
            .slice(0, limit)
            .map(([id, repeats]) => ({ of, id, charges: int(repeats) + 1 }));
        return [...(await repeated(holdsRepeated, 'hold')), ...(await repeated(idsRepeated, 'request'))];
      } finally {
        await this.ctx.client.del(holdsSeen, holdsRepeated, idsSeen, idsRepeated);
      }
    });
  }
}
