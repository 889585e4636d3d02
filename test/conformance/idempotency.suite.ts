import { describe, expect, it } from 'vitest';
import { type IdempotencyStore, type StoredResponse, storedBytes } from '../../src/stores/types.js';
import { type MakeStores, SLACK_MS, type StoreHarness, uid, useHarness } from './harness.js';

function response(overrides: Partial<StoredResponse> = {}): StoredResponse {
  return {
    status: 200,
    headers: { 'content-type': 'application/json', 'x-request-id': uid('req') },
    body: Buffer.from('{"id":"chatcmpl-1","choices":[]}').toString('base64'),
    ...overrides,
  };
}

/**
 * IdempotencyStore: `begin` is an atomic create-if-absent (exactly one caller gets "started"),
 * the in-flight lock lapses after its TTL unless `renew`ed (only while still in flight), `complete` replaces it with the finished response for
 * its own TTL, and `abandon` forgets the scope so the request may run again.
 */
export function idempotencySuite(name: string, make: MakeStores): void {
  describe(`${name}: IdempotencyStore`, () => {
    const h = useHarness(make);
    const idem = () => h().stores.idempotency;

    it('the first begin starts; later ones see the first request in flight', async () => {
      const scope = uid('scope');
      expect(await idem().begin(scope, 'fp-1', 60_000)).toEqual({ state: 'started' });
      // Same fingerprint (a retry) or another one (a different body under the same key): both
      // see the first request's record, never a second "started".
      expect(await idem().begin(scope, 'fp-1', 60_000)).toEqual({ state: 'in_flight', fingerprint: 'fp-1' });
      expect(await idem().begin(scope, 'fp-2', 60_000)).toEqual({ state: 'in_flight', fingerprint: 'fp-1' });
    });

    it('scopes are independent', async () => {
      const a = uid('scope');
      const b = uid('scope');
      expect(await idem().begin(a, 'fp-a', 60_000)).toEqual({ state: 'started' });
      expect(await idem().begin(b, 'fp-b', 60_000)).toEqual({ state: 'started' });
      await idem().complete(a, 'fp-a', response(), 60_000);
      expect(await idem().begin(b, 'fp-x', 60_000)).toEqual({ state: 'in_flight', fingerprint: 'fp-b' });
    });

    it('complete replaces the lock with the response, returned exactly and as a copy', async () => {
      const scope = uid('scope');
      const stored = response({
        status: 201,
        headers: { 'content-type': 'application/json', 'x-ratelimit-remaining': '59' },
        body: Buffer.from([0, 1, 2, 250, 255]).toString('base64'),
      });
      await idem().begin(scope, 'fp-1', 60_000);
      await idem().complete(scope, 'fp-1', stored, 60_000);
      const got = await idem().begin(scope, 'fp-1', 60_000);
      expect(got).toEqual({ state: 'done', fingerprint: 'fp-1', response: stored });
      if (got.state !== 'done') throw new Error('unreachable');
      expect(Buffer.from(got.response.body, 'base64')).toEqual(Buffer.from([0, 1, 2, 250, 255]));

      // What a caller does with a replayed response never changes the stored one.
      got.response.headers['x-mutated'] = '1';
      got.response.status = 500;
      expect(await idem().begin(scope, 'fp-2', 60_000)).toEqual({ state: 'done', fingerprint: 'fp-1', response: stored });
    });

    it('the finished record keeps the fingerprint complete was given', async () => {
      const scope = uid('scope');
      await idem().begin(scope, 'fp-begin', 60_000);
      await idem().complete(scope, 'fp-complete', response(), 60_000);
      expect(await idem().begin(scope, 'fp-other', 60_000)).toMatchObject({ state: 'done', fingerprint: 'fp-complete' });
    });

    it('abandon forgets an in-flight or finished record, so the request may run again', async () => {
      const inFlight = uid('scope');
      await idem().begin(inFlight, 'fp-1', 60_000);
      await idem().abandon(inFlight);
      expect(await idem().begin(inFlight, 'fp-2', 60_000)).toEqual({ state: 'started' });
      expect(await idem().begin(inFlight, 'fp-1', 60_000)).toEqual({ state: 'in_flight', fingerprint: 'fp-2' });

      const finished = uid('scope');
      await idem().begin(finished, 'fp-1', 60_000);
      await idem().complete(finished, 'fp-1', response(), 60_000);
      await idem().abandon(finished);
      expect(await idem().begin(finished, 'fp-1', 60_000)).toEqual({ state: 'started' });

      // Abandoning a scope that holds nothing is a no-op, not an error.
      await expect(idem().abandon(uid('scope'))).resolves.toBeUndefined();
    });

    it('an in-flight lock lapses after lockTtlMs: a crashed request does not block its key forever', async () => {
      const scope = uid('scope');
      expect(await idem().begin(scope, 'fp-1', 200)).toEqual({ state: 'started' });
      await h().advance(100); // t=100: still locked
      expect(await idem().begin(scope, 'fp-2', 200)).toEqual({ state: 'in_flight', fingerprint: 'fp-1' });
      await h().advance(100 + SLACK_MS); // past t=200: the lock is gone
      expect(await idem().begin(scope, 'fp-2', 200)).toEqual({ state: 'started' });
      expect(await idem().begin(scope, 'fp-1', 200)).toEqual({ state: 'in_flight', fingerprint: 'fp-2' });
    });

    it('renew keeps an in-flight lock alive past its first TTL, and a lock no longer renewed still lapses', async () => {
      const scope = uid('scope');
      expect(await idem().begin(scope, 'fp-1', 200)).toEqual({ state: 'started' });
      // Renewed every 100 ms (half the TTL), the lock outlives its first 200 ms several times over.
      for (let i = 0; i < 4; i++) {
        await h().advance(100);
        expect(await idem().renew(scope, 'fp-1', 200)).toBe(true);
        expect(await idem().begin(scope, 'fp-2', 200)).toEqual({ state: 'in_flight', fingerprint: 'fp-1' });
      }
      // t=400: no more renewals (the instance crashed); the lock lapses one TTL after the last one.
      await h().advance(100); // t=500: 100 ms after the last renewal
      expect(await idem().begin(scope, 'fp-2', 200)).toEqual({ state: 'in_flight', fingerprint: 'fp-1' });
      await h().advance(100 + SLACK_MS); // past t=600
      expect(await idem().renew(scope, 'fp-1', 200)).toBe(false);
      expect(await idem().begin(scope, 'fp-2', 200)).toEqual({ state: 'started' });
    });

    it('renew touches only a record in flight with its fingerprint', async () => {
      const other = uid('scope');
      await idem().begin(other, 'fp-other', 200);
      expect(await idem().renew(other, 'fp-1', 60_000)).toBe(false);
      await h().advance(200 + SLACK_MS);
      expect(await idem().begin(other, 'fp-2', 200)).toEqual({ state: 'started' }); // not extended by the refused renew

      const finished = uid('scope');
      const stored = response();
      await idem().begin(finished, 'fp-1', 60_000);
      await idem().complete(finished, 'fp-1', stored, 200);
      expect(await idem().renew(finished, 'fp-1', 60_000)).toBe(false);
      expect(await idem().begin(finished, 'fp-1', 60_000)).toEqual({ state: 'done', fingerprint: 'fp-1', response: stored });

      const abandoned = uid('scope');
      await idem().begin(abandoned, 'fp-1', 60_000);
      await idem().abandon(abandoned);
      expect(await idem().renew(abandoned, 'fp-1', 60_000)).toBe(false);
      expect(await idem().begin(abandoned, 'fp-1', 60_000)).toEqual({ state: 'started' });

      expect(await idem().renew(uid('scope'), 'fp-1', 60_000)).toBe(false);
    });

    it("a finished record lives ttlMs from complete, not the lock's TTL from begin", async () => {
      const scope = uid('scope');
      const stored = response();
      await idem().begin(scope, 'fp-1', 200);
      await h().advance(100); // t=100
      await idem().complete(scope, 'fp-1', stored, 300);
      await h().advance(150); // t=250: past the lock's TTL, within the record's
      expect(await idem().begin(scope, 'fp-1', 200)).toEqual({ state: 'done', fingerprint: 'fp-1', response: stored });
      await h().advance(150 + SLACK_MS); // past t=400: the record has expired
      expect(await idem().begin(scope, 'fp-1', 200)).toEqual({ state: 'started' });
    });

    quotaCases(h, idem);

    it('concurrent begins on one scope: exactly one starts, every other sees its fingerprint', async () => {
      const scope = uid('scope');
      const results = await Promise.all(
        Array.from({ length: 25 }, (_, i) => idem().begin(scope, `fp-${i}`, 60_000).then((r) => ({ i, r }))),
      );
      const started = results.filter(({ r }) => r.state === 'started');
      expect(started).toHaveLength(1);
      const winner = `fp-${started[0]!.i}`;
      for (const { r } of results) {
        if (r.state !== 'started') expect(r).toEqual({ state: 'in_flight', fingerprint: winner });
      }
    });
  });
}

/**
 * The byte quota per account: a finished record stored with one counts its stored size against
 * its account; past the cap the account's oldest records go (never another account's); a record
 * over the cap on its own is not kept; concurrent stores end within the cap.
 */
function quotaCases(h: () => StoreHarness, idem: () => IdempotencyStore): void {
  describe('the byte quota per account', () => {
    /** A finished response whose record counts for exactly `bytes` (storedBytes of it with fingerprint 'fp'). */
    const sized = (bytes: number): StoredResponse => {
      const base = storedBytes('fp', { status: 200, headers: {}, body: '' });
      return { status: 200, headers: {}, body: 'A'.repeat(bytes - base) };
    };
    const store = async (scope: string, bytes: number, account: string, maxBytes: number) => {
      expect(await idem().begin(scope, 'fp', 60_000)).toEqual({ state: 'started' });
      await idem().complete(scope, 'fp', sized(bytes), 60_000, { account, maxBytes });
    };
    /** The scopes still holding their finished record (looking leaves the others as they were). */
    const kept = async (scopes: string[]) => {
      const out: string[] = [];
      for (const s of scopes) {
        const r = await idem().begin(s, 'look', 60_000);
        if (r.state === 'done') out.push(s);
        if (r.state === 'started') await idem().abandon(s);
      }
      return out;
    };

    it("storing past the cap evicts the account's oldest records until the rest fits; other accounts keep theirs", async () => {
      const [acct, other] = [uid('acct'), uid('acct')];
      const scopes = Array.from({ length: 4 }, () => uid('scope'));
      const theirs = uid('scope');
      await store(theirs, 1_000, other, 2_500);
      for (const s of scopes.slice(0, 2)) await store(s, 1_000, acct, 2_500);
      await h().advance(5);
      // 3,000 > 2,500: the oldest goes. Then 2,000 + 1,500: the oldest left goes, 2,500 fits.
      await store(scopes[2]!, 1_000, acct, 2_500);
      expect(await kept(scopes.slice(0, 3))).toEqual(scopes.slice(1, 3));
      await h().advance(5);
      await store(scopes[3]!, 1_500, acct, 2_500);
      expect(await kept(scopes)).toEqual(scopes.slice(2));
      await h().advance(5);
      // 2,500 + 2,000: both go.
      const large = uid('scope');
      await store(large, 2_000, acct, 2_500);
      expect(await kept([...scopes, large])).toEqual([large]);
      // An evicted key is free again: the request may run once more.
      expect(await idem().begin(scopes[0]!, 'fp-2', 60_000)).toEqual({ state: 'started' });
      expect(await kept([theirs])).toEqual([theirs]);
    });

    it('a record larger than the cap on its own is not kept, and takes nothing from the others', async () => {
      const acct = uid('acct');
      const small = uid('scope');
      const big = uid('scope');
      await store(small, 1_000, acct, 2_000);
      await store(big, 2_001, acct, 2_000);
      expect(await idem().begin(big, 'fp-2', 60_000)).toEqual({ state: 'started' });
      expect(await kept([small])).toEqual([small]);
    });

    it('expired records and a record stored again count once: only the live bytes count', async () => {
      const acct = uid('acct');
      const old = uid('scope');
      await idem().begin(old, 'fp', 60_000);
      await idem().complete(old, 'fp', sized(1_500), 100, { account: acct, maxBytes: 2_000 });
      await h().advance(100 + SLACK_MS);
      const [a, b] = [uid('scope'), uid('scope')];
      await store(a, 1_000, acct, 2_000);
      // Stored twice (a retried save), it still counts for its size once.
      await idem().complete(a, 'fp', sized(1_000), 60_000, { account: acct, maxBytes: 2_000 });
      await store(b, 1_000, acct, 2_000);
      expect(await kept([a, b])).toEqual([a, b]);
    });

    it('concurrent stores of one account end within the cap: exactly the records that fit are kept', async () => {
      const acct = uid('acct');
      const scopes = Array.from({ length: 20 }, () => uid('scope'));
      for (const s of scopes) await idem().begin(s, 'fp', 60_000);
      await Promise.all(scopes.map((s) => idem().complete(s, 'fp', sized(1_000), 60_000, { account: acct, maxBytes: 5_500 })));
      expect(await kept(scopes)).toHaveLength(5);
    });
  });
}
