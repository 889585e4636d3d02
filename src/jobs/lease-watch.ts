/**
 * Whether another instance's claim on a job or batch lapsed, judged without comparing clocks.
 *
 * An owner renews its claim every third of the lease TTL by writing a new `ownerUntil` (its
 * own clock plus the TTL). Compared with this instance's clock, that deadline says nothing
 * when the clocks differ: one running ahead by more than two thirds of the TTL would declare a
 * live owner's job lost, one running behind would wait that much longer for a dead owner's.
 * So the deadline is read as a heartbeat: a claim whose owner and deadline this instance has
 * seen unchanged for one TTL of its own (monotonic) time is no longer renewed. Only a deadline
 * past by more than any sane skew (a minute) and a TTL is read against this instance's clock.
 * Sweeps come every third of the TTL, so a dead owner's claim lapses one to 1⅓ TTL after its
 * last renewal; a claim first seen now counts from now (an instance that just started adopts
 * the jobs of an owner that died shortly before it about 1⅓ TTL after its start, those of one
 * dead for longer than a minute and a TTL at its first sweep).
 */
interface Sighting {
  owner: string | null;
  until: number;
  at: number;
}

/**
 * How far apart two instances' clocks may be before a deployment is broken: a claim whose
 * deadline is past by more than this (and a TTL) by this instance's clock lapsed long ago by
 * any sane clock, and is taken at once, not after watching it for a TTL (a restart adopts the
 * work of an instance that died minutes before it without delay).
 */
export const MAX_CLOCK_SKEW_MS = 60_000;

export class LeaseWatch {
  private readonly seen = new Map<string, Sighting>();

  constructor(
    private readonly ttlMs: number,
    /** This instance's wall clock (unix ms), for claims long past. */
    private readonly wallNow: () => number,
    private readonly clock: () => number = () => performance.now(),
  ) {}

  /** Whether the claim (`owner`, `until`) on record `id` went unrenewed for one TTL. */
  lapsed(id: string, owner: string | null, until: number): boolean {
    if (until + MAX_CLOCK_SKEW_MS + this.ttlMs < this.wallNow()) return true;
    const now = this.clock();
    const last = this.seen.get(id);
    if (!last || last.owner !== owner || last.until !== until) {
      this.seen.set(id, { owner, until, at: now });
      return false;
    }
    return now - last.at >= this.ttlMs;
  }

  /** Forgets the records not in `ids` (they ended, or are gone). */
  keepOnly(ids: ReadonlySet<string>): void {
    for (const id of this.seen.keys()) if (!ids.has(id)) this.seen.delete(id);
  }
}

/**
 * Deadlines for this instance's claims: its clock plus the TTL, and always later than the one
 * written before, so a renewal is seen as one even when the clock stands still or steps back.
 */
export function claimDeadlines(now: () => number, ttlMs: number): () => number {
  let last = 0;
  return () => (last = Math.max(now() + ttlMs, last + 1));
}
