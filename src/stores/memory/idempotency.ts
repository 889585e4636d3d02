import { type IdempotencyBegin, type IdempotencyStore, type StoredResponse, storedBytes } from '../types.js';

interface Entry {
  fingerprint: string;
  response: StoredResponse | null;
  expiresAt: number;
  /** The account whose quota the finished record counts against, and for how many bytes. */
  quota?: { account: string; bytes: number };
}

/**
 * Idempotency records in memory; expired ones are dropped when touched or swept. Each
 * account's quota'd records are listed in the order they were stored (with one TTL for all,
 * the order they expire in), with their total: storing one evicts from the front until the
 * total fits. One process, one thread: the total is exact, never past the cap.
 */
export function createMemoryIdempotency(now: () => number): IdempotencyStore {
  const entries = new Map<string, Entry>();
  const usage = new Map<string, { bytes: number; scopes: Set<string> }>();
  /** Forgets a record and what it counted for. */
  const drop = (scope: string) => {
    const q = entries.get(scope)?.quota;
    entries.delete(scope);
    if (!q) return;
    const u = usage.get(q.account);
    if (!u) return;
    u.bytes -= q.bytes;
    u.scopes.delete(scope);
    if (u.scopes.size === 0) usage.delete(q.account);
  };
  const live = (scope: string): Entry | undefined => {
    const e = entries.get(scope);
    if (e && e.expiresAt <= now()) {
      drop(scope);
      return undefined;
    }
    return e;
  };
  let lastSweep = now();
  const sweep = () => {
    const t = now();
    if (t - lastSweep < 60_000) return;
    lastSweep = t;
    for (const [k, e] of entries) if (e.expiresAt <= t) drop(k);
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
    async complete(scope, fingerprint, response, ttlMs, quota) {
      drop(scope);
      if (!quota) {
        entries.set(scope, { fingerprint, response: structuredClone(response), expiresAt: now() + ttlMs });
        return;
      }
      const bytes = storedBytes(fingerprint, response);
      if (bytes > quota.maxBytes) return;
      let u = usage.get(quota.account);
      if (!u) usage.set(quota.account, (u = { bytes: 0, scopes: new Set() }));
      // A Set iterates in insertion order: the first scope is the oldest stored.
      for (const oldest of u.scopes) {
        if (u.bytes + bytes <= quota.maxBytes) break;
        drop(oldest);
      }
      entries.set(scope, { fingerprint, response: structuredClone(response), expiresAt: now() + ttlMs, quota: { account: quota.account, bytes } });
      u.bytes += bytes;
      u.scopes.add(scope);
      if (!usage.has(quota.account)) usage.set(quota.account, u);
    },
    async abandon(scope) {
      drop(scope);
    },
  };
}
