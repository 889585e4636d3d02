/**
 * A circuit breaker per upstream, per instance. After `threshold` consecutive failures
 * (connection errors, timeouts, 5xx) the upstream is open: its models are listed
 * "Unavailable" and calls fail fast with 503 until `cooldownMs` has passed. Then one probe
 * call is let through (half-open): success closes the circuit, failure opens it again.
 */
export interface Breaker {
  /** Whether a call may go to `upstream` now; when not, the seconds to wait. */
  admit(upstream: string): { ok: true } | { ok: false; retryAfterS: number };
  isOpen(upstream: string): boolean;
  success(upstream: string): void;
  failure(upstream: string): void;
}

interface State {
  failures: number;
  openedAt: number | null;
  probing: boolean;
}

export function createBreaker(now: () => number, threshold = 5, cooldownMs = 10_000): Breaker {
  const states = new Map<string, State>();
  const state = (u: string) => {
    let s = states.get(u);
    if (!s) states.set(u, (s = { failures: 0, openedAt: null, probing: false }));
    return s;
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
      s.failures = 0;
      s.openedAt = null;
      s.probing = false;
    },
    failure(u) {
      const s = state(u);
      s.failures++;
      if (s.probing || s.failures >= threshold) {
        s.openedAt = now();
        s.probing = false;
      }
    },
  };
}
