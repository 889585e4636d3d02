import type { CachedAnswer, ResponseCacheStore } from '../types.js';

interface Entry extends CachedAnswer {
  account: string;
  bytes: number;
  expiresAt: number;
}

/** What an entry counts for: its key and value in UTF-8 bytes (as every driver counts them). */
const sizeOf = (key: string, value: string) => Buffer.byteLength(key) + Buffer.byteLength(value);

/**
 * The response cache in memory: a least-recently-used list per account, bounded by its bytes
 * (a hit moves an entry to the back; storing one evicts from the front until the account's
 * total fits). Expired entries are dropped when touched or swept. One process, one thread:
 * the totals are exact.
 */
export function createMemoryResponseCache(now: () => number): ResponseCacheStore {
  const entries = new Map<string, Entry>();
  /** Per account: its keys in least-recently-used order (a Map iterates in insertion order), and their bytes. */
  const accounts = new Map<string, { bytes: number; keys: Set<string> }>();
  const drop = (key: string) => {
    const e = entries.get(key);
    if (!e) return;
    entries.delete(key);
    const a = accounts.get(e.account);
    if (!a) return;
    a.bytes -= e.bytes;
    a.keys.delete(key);
    if (a.keys.size === 0) accounts.delete(e.account);
  };
  let lastSweep = now();
  const sweep = () => {
    const t = now();
    if (t - lastSweep < 60_000) return;
    lastSweep = t;
    for (const [k, e] of entries) if (e.expiresAt <= t) drop(k);
  };
  return {
    async get(key) {
      sweep();
      const e = entries.get(key);
      if (!e) return null;
      if (e.expiresAt <= now()) {
        drop(key);
        return null;
      }
      // Used now: to the back of its account's list.
      const a = accounts.get(e.account);
      a?.keys.delete(key);
      a?.keys.add(key);
      return { value: e.value, storedAt: e.storedAt };
    },
    async put(account, key, value, ttlMs, maxBytes) {
      drop(key);
      const bytes = sizeOf(key, value);
      if (bytes > maxBytes) return;
      let a = accounts.get(account);
      if (!a) accounts.set(account, (a = { bytes: 0, keys: new Set() }));
      for (const oldest of a.keys) {
        if (a.bytes + bytes <= maxBytes) break;
        drop(oldest);
      }
      if (!accounts.has(account)) accounts.set(account, a);
      const t = now();
      entries.set(key, { value, storedAt: t, account, bytes, expiresAt: t + ttlMs });
      a.bytes += bytes;
      a.keys.add(key);
    },
    async purge(account) {
      let n = 0;
      for (const [k, e] of entries) {
        if (account !== undefined && e.account !== account) continue;
        drop(k);
        n++;
      }
      return n;
    },
  };
}
