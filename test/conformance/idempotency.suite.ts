import { describe, expect, it } from 'vitest';
import { type MakeStores, uid, useHarness } from './harness.js';

const response = { status: 200, headers: { 'content-type': 'application/json' }, body: 'e30=' };

/** IdempotencyStore: create-if-absent records, in flight until completed or abandoned, with TTLs. */
export function idempotencySuite(name: string, make: MakeStores): void {
  describe(`${name}: IdempotencyStore`, () => {
    const h = useHarness(make);
    const idem = () => h().stores.idempotency;

    it('begins once, reports in-flight and done records, and forgets abandoned ones', async () => {
      const scope = uid('scope');
      expect(await idem().begin(scope, 'fp-1', 60_000)).toEqual({ state: 'started' });
      expect(await idem().begin(scope, 'fp-2', 60_000)).toEqual({ state: 'in_flight', fingerprint: 'fp-1' });
      await idem().complete(scope, 'fp-1', response, 60_000);
      expect(await idem().begin(scope, 'fp-1', 60_000)).toEqual({ state: 'done', fingerprint: 'fp-1', response });
      await idem().abandon(scope);
      expect(await idem().begin(scope, 'fp-3', 60_000)).toEqual({ state: 'started' });
      await idem().abandon(uid('never-begun'));
    });

    it('an in-flight lock and a finished record expire with their TTLs', async () => {
      const [locked, done] = [uid('scope'), uid('scope')];
      expect(await idem().begin(locked, 'fp', 150)).toEqual({ state: 'started' });
      await idem().complete(done, 'fp', response, 150);
      await h().advance(250);
      expect(await idem().begin(locked, 'fp', 60_000)).toEqual({ state: 'started' });
      expect(await idem().begin(done, 'fp', 60_000)).toEqual({ state: 'started' });
    });

    it('concurrent begins start exactly one', async () => {
      const scope = uid('scope');
      const results = await Promise.all(Array.from({ length: 30 }, (_, i) => idem().begin(scope, `fp-${i}`, 60_000)));
      expect(results.filter((r) => r.state === 'started')).toHaveLength(1);
    });
  });
}
