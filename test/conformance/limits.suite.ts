import { describe, expect, it } from 'vitest';
import { expectAbout, type MakeStores, uid, useHarness } from './harness.js';

/** LimitStore: exact sliding windows and TTL leases. */
export function limitsSuite(name: string, make: MakeStores): void {
  describe(`${name}: LimitStore windows`, () => {
    const h = useHarness(make);
    const limits = () => h().stores.limits;

    it('counts up to the limit in a sliding window, never counting refusals', async () => {
      const b = uid('bucket');
      const W = 300;
      // t=0
      let r = await limits().hit(b, 3, W);
      expect(r).toMatchObject({ allowed: true, limit: 3, remaining: 2 });
      expectAbout(r.resetMs, 300);
      await h().advance(100); // t=100
      r = await limits().hit(b, 3, W);
      expect(r).toMatchObject({ allowed: true, remaining: 1 });
      expectAbout(r.resetMs, 200);
      r = await limits().hit(b, 3, W);
      expect(r).toMatchObject({ allowed: true, remaining: 0 });
      r = await limits().hit(b, 3, W);
      expect(r).toMatchObject({ allowed: false, limit: 3, remaining: 0 });
      expectAbout(r.resetMs, 200);

      await h().advance(150); // t=250: all three still count
      r = await limits().hit(b, 3, W);
      expect(r).toMatchObject({ allowed: false, remaining: 0 });
      expectAbout(r.resetMs, 50);

      await h().advance(100); // t=350: the t=0 hit has left
      r = await limits().hit(b, 3, W);
      expect(r).toMatchObject({ allowed: true, remaining: 0 });
      expectAbout(r.resetMs, 50);

      // t=450: the t=100 hits have left. Had the refusals at t=100 and t=250 counted, the
      // window would still be full.
      await h().advance(100);
      r = await limits().hit(b, 3, W);
      expect(r).toMatchObject({ allowed: true, remaining: 1 });
      expectAbout(r.resetMs, 200);
    });

    it('rolls continuously rather than resetting at fixed boundaries', async () => {
      const b = uid('bucket');
      expect((await limits().hit(b, 2, 200)).allowed).toBe(true); // t=0
      await h().advance(150);
      expect((await limits().hit(b, 2, 200)).allowed).toBe(true); // t=150
      await h().advance(100); // t=250: only the t=150 hit counts
      expect(await limits().hit(b, 2, 200)).toMatchObject({ allowed: true, remaining: 0 });
      expect(await limits().hit(b, 2, 200)).toMatchObject({ allowed: false, remaining: 0 });
    });

    it('keeps buckets apart', async () => {
      const a = uid('bucket');
      const b = uid('bucket');
      expect((await limits().hit(a, 1, 60_000)).allowed).toBe(true);
      expect((await limits().hit(a, 1, 60_000)).allowed).toBe(false);
      expect(await limits().hit(b, 1, 60_000)).toMatchObject({ allowed: true, remaining: 0 });
    });

    it('a zero limit refuses everything and reports no reset', async () => {
      expect(await limits().hit(uid('bucket'), 0, 60_000)).toEqual({ allowed: false, limit: 0, remaining: 0, resetMs: 0 });
    });

    it('concurrent hits allow exactly the limit', async () => {
      const b = uid('bucket');
      const results = await Promise.all(Array.from({ length: 60 }, () => limits().hit(b, 25, 60_000)));
      expect(results.filter((r) => r.allowed)).toHaveLength(25);
      expect(results.map((r) => r.remaining).sort((x, y) => x - y)).toEqual([
        ...Array.from<number>({ length: 36 }).fill(0),
        ...Array.from({ length: 24 }, (_, i) => i + 1),
      ]);
    });
  });

  describe(`${name}: LimitStore leases`, () => {
    const h = useHarness(make);
    const limits = () => h().stores.limits;

    it('acquires up to the cap, refuses one more, and frees a slot on release', async () => {
      const pool = uid('pool');
      const [a, b, c] = [uid('lease'), uid('lease'), uid('lease')];
      expect(await limits().acquireLease(pool, 2, a, 60_000)).toBe(true);
      expect(await limits().acquireLease(pool, 2, b, 60_000)).toBe(true);
      expect(await limits().acquireLease(pool, 2, c, 60_000)).toBe(false);
      expect(await limits().activeLeases(pool)).toBe(2);
      await limits().releaseLease(pool, a);
      await limits().releaseLease(pool, a);
      expect(await limits().activeLeases(pool)).toBe(1);
      expect(await limits().acquireLease(pool, 2, c, 60_000)).toBe(true);
      expect(await limits().renewLease(pool, a, 60_000)).toBe(false);
      expect(await limits().activeLeases(uid('pool'))).toBe(0);
    });

    it('acquiring a lease it already holds takes no second slot', async () => {
      const pool = uid('pool');
      const a = uid('lease');
      expect(await limits().acquireLease(pool, 1, a, 60_000)).toBe(true);
      expect(await limits().acquireLease(pool, 1, a, 60_000)).toBe(true);
      expect(await limits().activeLeases(pool)).toBe(1);
      expect(await limits().acquireLease(pool, 1, uid('lease'), 60_000)).toBe(false);
    });

    it('frees a slot when a lease expires without renewal', async () => {
      const pool = uid('pool');
      const a = uid('lease');
      expect(await limits().acquireLease(pool, 1, a, 200)).toBe(true);
      await h().advance(100);
      expect(await limits().activeLeases(pool)).toBe(1);
      expect(await limits().acquireLease(pool, 1, uid('lease'), 200)).toBe(false);
      await h().advance(200);
      expect(await limits().activeLeases(pool)).toBe(0);
      expect(await limits().renewLease(pool, a, 200)).toBe(false);
      expect(await limits().acquireLease(pool, 1, uid('lease'), 200)).toBe(true);
    });

    it('renewal keeps a lease alive past its first TTL', async () => {
      const pool = uid('pool');
      const a = uid('lease');
      expect(await limits().acquireLease(pool, 1, a, 250)).toBe(true);
      await h().advance(150);
      expect(await limits().renewLease(pool, a, 250)).toBe(true);
      await h().advance(150); // 300 ms after acquiring, 150 after renewing
      expect(await limits().activeLeases(pool)).toBe(1);
      expect(await limits().acquireLease(pool, 1, uid('lease'), 250)).toBe(false);
      await h().advance(200); // the renewed TTL has run out
      expect(await limits().activeLeases(pool)).toBe(0);
    });

    it('keeps pools apart', async () => {
      const [p, q] = [uid('pool'), uid('pool')];
      expect(await limits().acquireLease(p, 1, uid('lease'), 60_000)).toBe(true);
      expect(await limits().acquireLease(q, 1, uid('lease'), 60_000)).toBe(true);
      expect(await limits().activeLeases(p)).toBe(1);
    });

    it('concurrent acquires take exactly the cap', async () => {
      const pool = uid('pool');
      const results = await Promise.all(
        Array.from({ length: 30 }, () => limits().acquireLease(pool, 5, uid('lease'), 60_000)),
      );
      expect(results.filter(Boolean)).toHaveLength(5);
      expect(await limits().activeLeases(pool)).toBe(5);
    });
  });
}
