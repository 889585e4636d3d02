/**
 * SQLite keeps what each key's open holds hold as a running total (triggers on the holds
 * table), and a hold's check reads it less the holds expired and not yet swept. Property: after
 * any sequence of holds placed, released, renewed and left to expire (and swept), the held
 * amount the store reports, for the account and for each key, is the sum of the unexpired
 * holds, read straight from the file as the store used to read it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { afterAll, expect, it } from 'vitest';
import { createSqliteStores } from '../../src/stores/sqlite/index.js';

const dir = mkdtempSync(join(tmpdir(), 'mg-hold-totals-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const op = fc.oneof(
  fc.record({ t: fc.constant('place' as const), account: fc.constantFrom('a1', 'a2'), key: fc.constantFrom('k1', 'k2'), amount: fc.integer({ min: 0, max: 1000 }), ttl: fc.integer({ min: 1, max: 90_000 }) }),
  fc.record({ t: fc.constant('release' as const), pick: fc.nat() }),
  fc.record({ t: fc.constant('renew' as const), pick: fc.nat(), ttl: fc.integer({ min: 1, max: 90_000 }) }),
  fc.record({ t: fc.constant('wait' as const), ms: fc.integer({ min: 1, max: 30_000 }) }),
);

let run = 0;
it('the held amounts the store reports are the sums of the unexpired holds', async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 40 }), async (ops) => {
      let clock = 1_700_000_000_000;
      const path = join(dir, `h${run++}.db`);
      const stores = createSqliteStores({ path, now: () => clock });
      const file = new Database(path, { readonly: true });
      const sum = file.prepare('SELECT coalesce(sum(amount), 0) AS s FROM holds WHERE account_id = ? AND (? IS NULL OR key_id = ?) AND expires_at > ?').safeIntegers(true);
      try {
        for (const a of ['a1', 'a2']) await stores.billing.topUp(a, 10n ** 12n);
        const placed: { account: string; id: string }[] = [];
        for (const [i, o] of ops.entries()) {
          if (o.t === 'place') {
            const id = `h${i}`;
            const r = await stores.billing.placeHold({ holdId: id, accountId: o.account, keyId: o.key, amount: BigInt(o.amount), monthlyCap: null, month: '2023-11', ttlMs: o.ttl });
            if (r.ok) placed.push({ account: o.account, id });
          } else if (o.t === 'release' && placed.length) {
            const h = placed.splice(o.pick % placed.length, 1)[0]!;
            await stores.billing.release(h.account, h.id);
          } else if (o.t === 'renew' && placed.length) {
            const h = placed[o.pick % placed.length]!;
            await stores.billing.renewHold(h.account, h.id, o.ttl);
          } else if (o.t === 'wait') clock += o.ms;
          for (const a of ['a1', 'a2']) {
            expect((await stores.billing.wallet(a)).held).toBe((sum.get(a, null, null, clock) as { s: bigint }).s);
            for (const k of ['k1', 'k2']) {
              expect((await stores.billing.keyUsage(a, k, '2023-11')).held).toBe((sum.get(a, k, k, clock) as { s: bigint }).s);
            }
          }
        }
      } finally {
        file.close();
        await stores.close();
      }
    }),
    { numRuns: 40 },
  );
}, 60_000);
