/**
 * A circuit breaker per upstream, per instance, fair between accounts. Failures are kept for
 * `windowMs`; the circuit opens when `threshold` failures with no success between them are
 * in the window and either
 *   - they came from requests of at least `minAccounts` distinct accounts (an upstream 5xx,
 *     a timeout or a reset while a request was in flight may be caused by the request
 *     itself, so one account's requests alone never open it), or
 *   - `threshold` of them are connection failures (refused, DNS, TLS, connect timeout): those
 *     happen before any request was sent, so no account can cause them.
 * While open, its models are listed "Unavailable" (when every target is open) and calls fail
 * fast with 503 until `cooldownMs` has passed. Then one probe call is let through
 * (half-open): success closes the circuit, failure opens it again.
 *
 * A probe must always end, or the circuit would stay open for every tenant for good: a probe
 * whose client leaves counts as failed (its caller reports it so), and one with no outcome
 * `probeDeadlineMs` after it was let through counts as failed at that deadline (checked in
 * `admit`, so no timer is needed). Each probe carries a ticket: only the current probe's own
 * outcome decides it, so a late answer of an expired probe cannot end its successor's probe.
 * A success from any call still closes the circuit: the upstream did answer.
 */
export interface Breaker {
  /**
   * Whether a call may go to `upstream` now; when not, the seconds to wait. `probe` is the
   * ticket of a half-open probe (null for an ordinary call): pass it to `success` / `failure`.
   */
  admit(upstream: string): { ok: true; probe: number | null } | { ok: false; retryAfterS: number };
  isOpen(upstream: string): boolean;
  /** What operators see of `upstream`'s circuit now (changes nothing). */
  status(upstream: string): CircuitStatus;
  success(upstream: string, probe?: number | null): void;
  /**
   * A failure of `upstream`: `account` is the account whose request it was, null for a
   * connection failure that no request can have caused; `probe` the call's probe ticket.
   */
  failure(upstream: string, account: string | null, probe?: number | null): void;
}

export interface CircuitStatus {
  /** closed: calls go through; open: they fail fast; half-open: one probe call is in flight. */
  state: 'closed' | 'open' | 'half-open';
  /** Failures in the window with no success since. */
  recentFailures: number;
  /** When the circuit opened (unix ms), null while closed. */
  openedAt: number | null;
}

interface State {
  /** Failures in the window, oldest first: when, and whose request (null: connection). */
  failures: { at: number; account: string | null }[];
  openedAt: number | null;
  /** The probe in flight: its ticket, and when it counts as failed if it has not ended. */
  probe: { ticket: number; deadline: number } | null;
}

export interface BreakerOptions {
  threshold?: number;
  cooldownMs?: number;
  windowMs?: number;
  minAccounts?: number;
  /** A probe with no outcome this long after it was let through counts as failed. */
  probeDeadlineMs?: number;
}

export function createBreaker(now: () => number, opts: BreakerOptions = {}): Breaker {
  const { threshold = 5, cooldownMs = 10_000, windowMs = 60_000, minAccounts = 3, probeDeadlineMs = 60_000 } = opts;
  const states = new Map<string, State>();
  let tickets = 0;
  const state = (u: string) => {
    let s = states.get(u);
    if (!s) states.set(u, (s = { failures: [], openedAt: null, probe: null }));
    return s;
  };
  const shouldOpen = (s: State): boolean => {
    if (s.failures.length < threshold) return false;
    const accounts = new Set<string>();
    let connection = 0;
    for (const f of s.failures) {
      if (f.account === null) connection++;
      else accounts.add(f.account);
    }
    return connection >= threshold || accounts.size >= minAccounts;
  };
  return {
    admit(u) {
      const s = states.get(u);
      if (!s || s.openedAt === null) return { ok: true, probe: null };
      const t = now();
      // A probe past its deadline failed then: the circuit opened again at that moment.
      if (s.probe && t >= s.probe.deadline) {
        s.openedAt = s.probe.deadline;
        s.probe = null;
      }
      const waited = t - s.openedAt;
      if (waited >= cooldownMs && !s.probe) {
        s.probe = { ticket: ++tickets, deadline: t + probeDeadlineMs };
        return { ok: true, probe: s.probe.ticket };
      }
      // While a probe runs this is 1 s: its answer may close the circuit at any moment.
      return { ok: false, retryAfterS: Math.max(1, Math.ceil((cooldownMs - waited) / 1000)) };
    },
    status(u) {
      const s = states.get(u);
      const t = now();
      const failures = s ? s.failures.filter((f) => f.at > t - windowMs).length : 0;
      if (!s || s.openedAt === null) return { state: 'closed', recentFailures: failures, openedAt: null };
      const probing = s.probe !== null && t < s.probe.deadline;
      return { state: probing ? 'half-open' : 'open', recentFailures: failures, openedAt: s.openedAt };
    },
    isOpen(u) {
      const s = states.get(u);
      return !!s && s.openedAt !== null;
    },
    success(u) {
      const s = states.get(u);
      if (!s) return;
      s.failures = [];
      s.openedAt = null;
      s.probe = null;
    },
    failure(u, account, probe = null) {
      const s = state(u);
      const t = now();
      s.failures.push({ at: t, account });
      while (s.failures.length && (s.failures[0]!.at <= t - windowMs || s.failures.length > 100)) s.failures.shift();
      // The probe of a circuit that was opened fairly failed: it opens again.
      const probeFailed = probe !== null && s.probe?.ticket === probe;
      if (probeFailed || (s.openedAt === null && shouldOpen(s))) {
        s.openedAt = t;
        s.probe = null;
      }
    },
  };
}
