import { describe, expect, it } from 'vitest';
import { type MakeStores, uid, useHarness } from './harness.js';

/**
 * ResponseCacheStore: an entry answers until its TTL, with the time it was stored; storing
 * again replaces it; an account's entries stay within its bytes (its oldest evicted first, a
 * value over the cap alone never kept); a purge drops one account's entries, or all.
 */
export function responseCacheSuite(name: string, make: MakeStores): void {
  describe(`${name}: ResponseCacheStore`, () => {
    const h = useHarness(make);
    const cache = () => h().stores.responseCache;
    const keyOf = (account: string) => `${account}:${uid('h').replace('_', '')}`;
    const MB = 1024 * 1024;

    it('an entry answers with its value and stored time until its TTL passes', async () => {
      const account = uid('acct');
      const key = keyOf(account);
      expect(await cache().get(key)).toBeNull();
      await cache().put(account, key, '{"body":"é"}', 300, MB);
      const got = await cache().get(key);
      expect(got?.value).toBe('{"body":"é"}');
      expect(typeof got?.storedAt).toBe('number');
      expect(Math.abs((got?.storedAt ?? 0) - Date.now())).toBeLessThan(10 * 365 * 86_400_000);
      await h().advance(100);
      expect((await cache().get(key))?.value).toBe('{"body":"é"}');
      await h().advance(300);
      expect(await cache().get(key)).toBeNull();
    });

    it('storing again replaces the entry', async () => {
      const account = uid('acct');
      const key = keyOf(account);
      await cache().put(account, key, 'one', 60_000, MB);
      await cache().put(account, key, 'two', 60_000, MB);
      expect((await cache().get(key))?.value).toBe('two');
    });

    it("an account's entries stay within its bytes: the oldest go first, and one over the cap alone is never kept", async () => {
      const account = uid('acct');
      const other = uid('acct');
      const keys = [keyOf(account), keyOf(account), keyOf(account)];
      const value = 'x'.repeat(400);
      const size = keys[0]!.length + value.length;
      const cap = size * 2 + 10;
      const otherKey = keyOf(other);
      await cache().put(other, otherKey, value, 60_000, cap);
      await cache().put(account, keys[0]!, value, 60_000, cap);
      await h().advance(5);
      await cache().put(account, keys[1]!, value, 60_000, cap);
      await h().advance(5);
      await cache().put(account, keys[2]!, value, 60_000, cap);
      expect(await cache().get(keys[0]!)).toBeNull();
      expect((await cache().get(keys[1]!))?.value).toBe(value);
      expect((await cache().get(keys[2]!))?.value).toBe(value);
      // Another account's entries count for nothing here.
      expect((await cache().get(otherKey))?.value).toBe(value);
      const big = keyOf(account);
      await cache().put(account, big, 'y'.repeat(cap), 60_000, cap);
      expect(await cache().get(big)).toBeNull();
      expect((await cache().get(keys[2]!))?.value).toBe(value);
      // One over the cap stored under a kept entry's key drops that entry: it replaced it.
      await cache().put(account, keys[2]!, 'y'.repeat(cap), 60_000, cap);
      expect(await cache().get(keys[2]!)).toBeNull();
      expect((await cache().get(keys[1]!))?.value).toBe(value);
      // Its bytes went with it: a new entry fits beside the one left, evicting nothing.
      const next = keyOf(account);
      await cache().put(account, next, value, 60_000, cap);
      expect((await cache().get(keys[1]!))?.value).toBe(value);
      expect((await cache().get(next))?.value).toBe(value);
    });

    it("a purge drops one account's entries, or every entry", async () => {
      const a = uid('acct');
      const b = uid('acct');
      // The Redis driver purges everything account by account, from the accounts it knows.
      for (const id of [a, b]) await h().stores.accounts.create({ id, grants: [], createdAt: 0 }, 0n);
      const ka = [keyOf(a), keyOf(a)];
      const kb = keyOf(b);
      for (const k of ka) await cache().put(a, k, 'v', 60_000, MB);
      await cache().put(b, kb, 'v', 60_000, MB);
      expect(await cache().purge(a)).toBe(2);
      expect(await cache().get(ka[0]!)).toBeNull();
      expect((await cache().get(kb))?.value).toBe('v');
      expect(await cache().purge()).toBeGreaterThanOrEqual(1);
      expect(await cache().get(kb)).toBeNull();
    });
  });
}
