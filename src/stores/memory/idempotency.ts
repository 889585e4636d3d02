import type { IdempotencyBegin, IdempotencyStore, StoredResponse } from '../types.js';

interface Entry {
  fingerprint: string;
  response: StoredResponse | null;
  expiresAt: number;
}

/** Idempotency records in memory; expired ones are dropped when touched or swept. */
export function createMemoryIdempotency(now: () => number): IdempotencyStore {
  const entries = new Map<string, Entry>();
  const live = (scope: string): Entry | undefined => {
    const e = entries.get(scope);
    if (e && e.expiresAt <= now()) {
      entries.delete(scope);
      return undefined;
    }
    return e;
  };
  let lastSweep = now();
  const sweep = () => {
    const t = now();
    if (t - lastSweep < 60_000) return;
    lastSweep = t;
    for (const [k, e] of entries) if (e.expiresAt <= t) entries.delete(k);
  };
  return {
    async begin(scope, fingerprint, lockTtlMs): Promise<IdempotencyBegin> {
      sweep();
      const e = live(scope);
      if (!e) {
        entries.set(scope, { fingerprint, response: null, expiresAt: now() + lockTtlMs });
        return { state: 'started' };
      }
      if (!e.response) return { state: 'in_flight', fingerprint: e.fingerprint };
      return { state: 'done', fingerprint: e.fingerprint, response: structuredClone(e.response) };
    },
    async renew(scope, fingerprint, lockTtlMs) {
      const e = live(scope);
      if (!e || e.response || e.fingerprint !== fingerprint) return false;
      e.expiresAt = now() + lockTtlMs;
      return true;
    },
    async complete(scope, fingerprint, response, ttlMs) {
      entries.set(scope, { fingerprint, response: structuredClone(response), expiresAt: now() + ttlMs });
    },
    async abandon(scope) {
      entries.delete(scope);
    },
  };
}
