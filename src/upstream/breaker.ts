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
 */
export interface Breaker {
  /** Whether a call may go to `upstream` now; when not, the seconds to wait. */
  admit(upstream: string): { ok: true } | { ok: false; retryAfterS: number };
  isOpen(upstream: string): boolean;
  success(upstream: string): void;
  /**
   * A failure of `upstream`: `account` is the account whose request it was, null for a
   * connection failure that no request can have caused.
   */
  failure(upstream: string, account: string | null): void;
}

interface State {
  /** Failures in the window, oldest first: when, and whose request (null: connection). */
  failures: { at: number; account: string | null }[];
  openedAt: number | null;
  probing: boolean;
}

export interface BreakerOptions {
  threshold?: number;
  cooldownMs?: number;
  windowMs?: number;
  minAccounts?: number;
}

export function createBreaker(now: () => number, opts: BreakerOptions = {}): Breaker {
  const { threshold = 5, cooldownMs = 10_000, windowMs = 60_000, minAccounts = 3 } = opts;
  const states = new Map<string, State>();
  const state = (u: string) => {
    let s = states.get(u);
    if (!s) states.set(u, (s = { failures: [], openedAt: null, probing: false }));
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
      if (!s || s.openedAt === null) return { ok: true };
      const waited = now() - s.openedAt;
      if (waited >= cooldownMs && !s.probing) {
        s.probing = true;
        return { ok: true };
      }
      return { ok: false, retryAfterS: Math.max(1, Math.ceil((cooldownMs - waited) / 1000)) };
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
      s.probing = false;
    },
    failure(u, account) {
      const s = state(u);
      const t = now();
      s.failures.push({ at: t, account });
      while (s.failures.length && (s.failures[0]!.at <= t - windowMs || s.failures.length > 100)) s.failures.shift();
      // The probe of a circuit that was opened fairly failed: it opens again.
      if (s.probing || (s.openedAt === null && shouldOpen(s))) {
        s.openedAt = t;
        s.probing = false;
      }
    },
  };
}
