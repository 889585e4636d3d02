import { describe, expect, it } from 'vitest';
import type { ApiKeyRecord } from '../../src/stores/types.js';
import { type MakeStores, uid, useHarness } from './harness.js';

function key(accountId: string, overrides: Partial<ApiKeyRecord> = {}): ApiKeyRecord {
  return {
    id: uid('key'),
    digest: uid('digest'),
    prefix: 'sk-mg-Ab12',
    accountId,
    kind: 'developer',
    model: null,
    label: null,
    monthlyCap: null,
    disabled: false,
    createdAt: 1_700_000_000_000,
    ...overrides,
  };
}

/** AccountStore and KeyStore: create-if-absent accounts, unique keys. */
export function accountsKeysSuite(name: string, make: MakeStores): void {
  describe(`${name}: AccountStore`, () => {
    const h = useHarness(make);
    const accounts = () => h().stores.accounts;

    it('creates an account once, crediting its wallet only then', async () => {
      const id = uid('acct');
      const record = { id, grants: ['contact-sales-model'], createdAt: 1 };
      expect(await accounts().create(record, 1_000n)).toBe(true);
      expect(await h().stores.billing.wallet(id)).toEqual({ balance: 1_000n, held: 0n });
      await h().stores.billing.topUp(id, 5n);
      expect(await accounts().create({ id, grants: [], createdAt: 2 }, 999n)).toBe(false);
      expect(await h().stores.billing.wallet(id)).toEqual({ balance: 1_005n, held: 0n });
      expect(await accounts().get(id)).toEqual(record);
    });

    it('concurrent creates of one account credit it once', async () => {
      const id = uid('acct');
      const results = await Promise.all(
        Array.from({ length: 10 }, () => accounts().create({ id, grants: [], createdAt: 1 }, 100n)),
      );
      expect(results.filter(Boolean)).toHaveLength(1);
      expect((await h().stores.billing.wallet(id)).balance).toBe(100n);
    });

    it('gets, lists and sets grants', async () => {
      const [a, b] = [uid('acct'), uid('acct')];
      await accounts().create({ id: a, grants: [], createdAt: 1 }, 0n);
      await accounts().create({ id: b, grants: ['x'], createdAt: 2 }, 0n);
      expect(await accounts().get(uid('acct'))).toBeNull();
      expect(await accounts().setGrants(a, ['m1', 'm2'])).toBe(true);
      expect(await accounts().setGrants(uid('acct'), ['m1'])).toBe(false);
      expect((await accounts().get(a))?.grants).toEqual(['m1', 'm2']);
      const listed = (await accounts().list()).filter((r) => r.id === a || r.id === b);
      expect(listed.sort((x, y) => x.createdAt - y.createdAt)).toEqual([
        { id: a, grants: ['m1', 'm2'], createdAt: 1 },
        { id: b, grants: ['x'], createdAt: 2 },
      ]);
    });

    it('returns copies', async () => {
      const id = uid('acct');
      const grants = ['g'];
      await accounts().create({ id, grants, createdAt: 1 }, 0n);
      grants.push('after create');
      (await accounts().get(id))!.grants.push('mutated');
      expect((await accounts().get(id))?.grants).toEqual(['g']);
    });
  });

  describe(`${name}: KeyStore`, () => {
    const h = useHarness(make);
    const keys = () => h().stores.keys;

    it('inserts a key and finds it by id and by digest', async () => {
      const k = key(uid('acct'), { kind: 'agent', model: 'text-1', label: 'bot', monthlyCap: 5_000_000_000n });
      expect(await keys().insert(k)).toBe(true);
      expect(await keys().get(k.id)).toEqual(k);
      expect(await keys().findByDigest(k.digest)).toEqual(k);
      expect(await keys().get(uid('key'))).toBeNull();
      expect(await keys().findByDigest(uid('digest'))).toBeNull();
    });

    it('refuses a duplicate id or digest and changes nothing', async () => {
      const acct = uid('acct');
      const k = key(acct);
      expect(await keys().insert(k)).toBe(true);
      const sameId = key(acct, { id: k.id });
      const sameDigest = key(acct, { digest: k.digest });
      expect(await keys().insert(sameId)).toBe(false);
      expect(await keys().insert(sameDigest)).toBe(false);
      expect(await keys().findByDigest(sameId.digest)).toBeNull();
      expect(await keys().get(sameDigest.id)).toBeNull();
      expect(await keys().findByDigest(k.digest)).toEqual(k);
      expect(await keys().listByAccount(acct)).toEqual([k]);
    });

    it('concurrent inserts of one digest store one key', async () => {
      const acct = uid('acct');
      const digest = uid('digest');
      const results = await Promise.all(Array.from({ length: 10 }, () => keys().insert(key(acct, { digest }))));
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(await keys().listByAccount(acct)).toHaveLength(1);
    });

    it('disables and re-enables a key', async () => {
      const k = key(uid('acct'));
      await keys().insert(k);
      expect(await keys().setDisabled(k.id, true)).toBe(true);
      expect((await keys().findByDigest(k.digest))?.disabled).toBe(true);
      expect(await keys().setDisabled(k.id, false)).toBe(true);
      expect((await keys().get(k.id))?.disabled).toBe(false);
      expect(await keys().setDisabled(uid('key'), true)).toBe(false);
    });

    it('updates the monthly cap and the digest (rotation keeps the id) and deletes keys', async () => {
      const k = key(uid('acct'), { monthlyCap: 5n });
      await keys().insert(k);
      expect((await keys().update(k.id, { monthlyCap: 9n }))?.monthlyCap).toBe(9n);
      expect((await keys().update(k.id, { monthlyCap: null }))?.monthlyCap).toBeNull();
      const digest = uid('digest');
      const rotated = await keys().update(k.id, { digest: { digest, prefix: 'sk-mg-New' } });
      expect(rotated).toMatchObject({ id: k.id, digest, prefix: 'sk-mg-New', monthlyCap: null });
      expect(await keys().findByDigest(k.digest)).toBeNull();
      expect((await keys().findByDigest(digest))?.id).toBe(k.id);
      expect(await keys().listByAccount(k.accountId)).toHaveLength(1);
      // Another key's digest is refused and changes nothing.
      const other = key(k.accountId);
      await keys().insert(other);
      expect(await keys().update(k.id, { digest: { digest: other.digest, prefix: 'x' } })).toBeNull();
      expect((await keys().get(k.id))?.digest).toBe(digest);
      expect(await keys().update(uid('key'), { monthlyCap: 1n })).toBeNull();
      expect(await keys().delete(k.id)).toBe(true);
      expect(await keys().get(k.id)).toBeNull();
      expect(await keys().findByDigest(digest)).toBeNull();
      expect(await keys().delete(k.id)).toBe(false);
      expect((await keys().listByAccount(k.accountId)).map((x) => x.id)).toEqual([other.id]);
    });

    it('keeps limits whose model ids hold a lone surrogate (as U+FFFD or as given), never failing as if down', async () => {
      const k = key(uid('acct'));
      await keys().insert(k);
      const updated = await keys().update(k.id, { models: ['x\ud800'] });
      expect([['x\ud800'], ['x\ufffd']]).toContainEqual(updated?.models);
    });

    it('of two rotations of one key at once, one wins; the other stores nothing', async () => {
      const k = key(uid('acct'));
      await keys().insert(k);
      const [a, b] = [uid('digest'), uid('digest')];
      const results = await Promise.all([a, b].map((digest) => keys().update(k.id, { digest: { digest, prefix: 'sk-mg-Rot', replaces: k.digest } })));
      const won = results.filter((r) => r !== null);
      expect(won).toHaveLength(1);
      const winner = won[0]!.digest;
      const loser = winner === a ? b : a;
      expect((await keys().get(k.id))?.digest).toBe(winner);
      expect((await keys().findByDigest(winner))?.id).toBe(k.id);
      // The losing secret never works, and the old one is gone.
      expect(await keys().findByDigest(loser)).toBeNull();
      expect(await keys().findByDigest(k.digest)).toBeNull();
      // A rotation from a digest the key no longer has changes nothing.
      expect(await keys().update(k.id, { digest: { digest: uid('digest'), prefix: 'x', replaces: k.digest } })).toBeNull();
      expect((await keys().get(k.id))?.digest).toBe(winner);
    });

    it('a disable, a cap or limits written while the key is rotated are kept', async () => {
      for (let round = 0; round < 10; round++) {
        const k = key(uid('acct'));
        await keys().insert(k);
        const digest = uid('digest');
        const [rotated, disabledOk, capped] = await Promise.all([
          keys().update(k.id, { digest: { digest, prefix: 'sk-mg-Rot', replaces: k.digest } }),
          keys().setDisabled(k.id, true),
          keys().update(k.id, { monthlyCap: 42n }),
        ]);
        expect(rotated).not.toBeNull();
        expect(disabledOk).toBe(true);
        expect(capped).not.toBeNull();
        const now = await keys().get(k.id);
        expect(now).toMatchObject({ digest, disabled: true, monthlyCap: 42n });
        expect(await keys().findByDigest(k.digest)).toBeNull();
      }
    });

    it('lists only the account’s keys and returns copies', async () => {
      const [a, b] = [uid('acct'), uid('acct')];
      const mine = [key(a, { createdAt: 1 }), key(a, { createdAt: 2 })];
      for (const k of [...mine, key(b)]) await keys().insert(k);
      const listed = await keys().listByAccount(a);
      expect(listed.sort((x, y) => x.createdAt - y.createdAt)).toEqual(mine);
      listed[0]!.disabled = true;
      mine[1]!.label = 'changed after insert';
      expect((await keys().get(mine[0]!.id))?.disabled).toBe(false);
      expect((await keys().get(mine[1]!.id))?.label).toBeNull();
      expect(await keys().listByAccount(uid('acct'))).toEqual([]);
    });
  });
}
