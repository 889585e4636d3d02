import { describe, expect, it } from 'vitest';
import type { BrandRecord, DocumentRecord } from '../../src/stores/types.js';
import { type MakeStores, uid, useHarness } from './harness.js';

function brand(accountId: string, overrides: Partial<BrandRecord> = {}): BrandRecord {
  return { id: uid('brand'), accountId, name: 'Acme', description: 'Rockets', voice: 'cheerful', createdAt: 1, ...overrides };
}

function doc(accountId: string, overrides: Partial<DocumentRecord> = {}): DocumentRecord {
  return { id: uid('doc'), accountId, brand: null, title: 'Manual', text: 'Press the red button.', createdAt: 1, ...overrides };
}

const ids = (records: { id: string }[]) => records.map((r) => r.id).sort();

/** ContentStore: brands and knowledge documents, each account seeing only its own. */
export function contentSuite(name: string, make: MakeStores): void {
  describe(`${name}: ContentStore`, () => {
    const h = useHarness(make);
    const content = () => h().stores.content;

    it('puts, gets, lists, replaces and deletes brands', async () => {
      const acct = uid('acct');
      const a = brand(acct);
      const b = brand(acct, { createdAt: 2 });
      await content().putBrand(a);
      await content().putBrand(b);
      expect(await content().getBrand(acct, a.id)).toEqual(a);
      expect(ids(await content().listBrands(acct))).toEqual(ids([a, b]));

      const renamed = { ...a, name: 'Acme 2' };
      await content().putBrand(renamed);
      expect(await content().getBrand(acct, a.id)).toEqual(renamed);
      expect(await content().listBrands(acct)).toHaveLength(2);

      expect(await content().deleteBrand(acct, a.id)).toBe(true);
      expect(await content().deleteBrand(acct, a.id)).toBe(false);
      expect(await content().getBrand(acct, a.id)).toBeNull();
      expect(ids(await content().listBrands(acct))).toEqual([b.id]);
    });

    it('never shows or deletes another account’s brand', async () => {
      const [mine, theirs] = [uid('acct'), uid('acct')];
      const b = brand(mine);
      await content().putBrand(b);
      expect(await content().getBrand(theirs, b.id)).toBeNull();
      expect(await content().listBrands(theirs)).toEqual([]);
      expect(await content().deleteBrand(theirs, b.id)).toBe(false);
      expect(await content().getBrand(mine, b.id)).toEqual(b);
    });

    it('puts, gets, lists and deletes documents, bumping the version each time', async () => {
      const acct = uid('acct');
      const v0 = await content().documentsVersion(acct);
      const d = doc(acct, { brand: uid('brand') });
      await content().putDocument(d);
      const v1 = await content().documentsVersion(acct);
      expect(v1).not.toBe(v0);
      expect(await content().getDocument(acct, d.id)).toEqual(d);
      expect(ids(await content().listDocuments(acct))).toEqual([d.id]);

      await content().putDocument({ ...d, text: 'Press the blue button.' });
      const v2 = await content().documentsVersion(acct);
      expect(v2).not.toBe(v1);
      expect((await content().getDocument(acct, d.id))?.text).toBe('Press the blue button.');

      await content().putBrand(brand(acct));
      expect(await content().documentsVersion(acct)).toBe(v2);

      expect(await content().deleteDocument(acct, d.id)).toBe(true);
      const v3 = await content().documentsVersion(acct);
      expect(v3).not.toBe(v2);
      expect(await content().deleteDocument(acct, d.id)).toBe(false);
      expect(await content().getDocument(acct, d.id)).toBeNull();
      expect(await content().listDocuments(acct)).toEqual([]);
    });

    it('never shows or deletes another account’s document, nor bumps its version', async () => {
      const [mine, theirs] = [uid('acct'), uid('acct')];
      const theirVersion = await content().documentsVersion(theirs);
      const d = doc(mine);
      await content().putDocument(d);
      expect(await content().getDocument(theirs, d.id)).toBeNull();
      expect(await content().listDocuments(theirs)).toEqual([]);
      expect(await content().deleteDocument(theirs, d.id)).toBe(false);
      expect(await content().documentsVersion(theirs)).toBe(theirVersion);
      expect(await content().getDocument(mine, d.id)).toEqual(d);
    });

    it('returns copies', async () => {
      const acct = uid('acct');
      const b = brand(acct);
      const d = doc(acct);
      await content().putBrand(b);
      await content().putDocument(d);
      const gotBrand = await content().getBrand(acct, b.id);
      gotBrand!.name = 'changed';
      const [listed] = await content().listDocuments(acct);
      listed!.text = 'changed';
      b.voice = 'changed after put';
      expect(await content().getBrand(acct, b.id)).toEqual({ ...b, voice: 'cheerful' });
      expect(await content().getDocument(acct, d.id)).toEqual(d);
    });
  });
}
