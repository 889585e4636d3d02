/** The admin's methods for an account's brands and documents. */
import { shownId } from '../auth/keys.js';
import { GatewayError } from '../errors.js';
import type { Services } from '../services.js';
import { AdminError } from './admin-error.js';
import { checkId, requireAccount } from './checks.js';

/** The admin's brand and document methods (a part of `Admin`). */
export interface ContentMethods {
  /** Creates or replaces a brand profile of an account. */
  putBrand(input: { id: string; account: string; name?: string; description?: string; voice: string }): Promise<void>;
  /** Deletes a brand (409 while documents name it). */
  deleteBrand(accountId: string, id: string): Promise<boolean>;
  /** Adds (or replaces) a knowledge document: plain text or markdown. */
  addDocument(input: { id: string; account: string; brand?: string | null; title?: string; text: string }): Promise<void>;
  deleteDocument(accountId: string, id: string): Promise<boolean>;
}

export function contentMethods(core: Services): ContentMethods {
  const { stores } = core;
  return {
    async putBrand({ id, account, name = '', description = '', voice }) {
      await requireAccount(core, account);
      checkId('id', id);
      if (!voice) throw new AdminError('A brand needs an id and a voice.', 'voice');
      const existing = await stores.content.getBrand(account, id);
      await stores.content.putBrand({ id, accountId: account, name, description, voice, createdAt: existing?.createdAt ?? core.now() });
    },
    async deleteBrand(accountId, id) {
      // A document names its brand, and retrieval answers with it: a brand its documents still
      // name is not deleted from under them (they would name a brand that is not there).
      const naming = (await stores.content.listDocuments(accountId)).filter((d) => d.brand === id).map((d) => d.id);
      if (naming.length > 0) {
        const shown = naming.slice(0, 5).map((d) => `"${shownId(d)}"`).join(', ') + (naming.length > 5 ? `, and ${naming.length - 5} more` : '');
        throw new GatewayError('conflict', `Brand "${shownId(id)}" is named by ${naming.length === 1 ? 'document' : 'documents'} ${shown}: delete them, or put them without the brand, first.`, {
          status: 409,
          type: 'invalid_request_error',
          param: 'brand',
        });
      }
      return stores.content.deleteBrand(accountId, id);
    },
    async addDocument({ id, account, brand = null, title = '', text }) {
      await requireAccount(core, account);
      checkId('id', id);
      if (!text.trim()) throw new AdminError('A document needs an id and some text.', 'text');
      if (brand !== null && !(await stores.content.getBrand(account, brand))) {
        throw new AdminError(`No brand "${shownId(brand)}" in account "${shownId(account)}".`, 'brand');
      }
      const existing = await stores.content.getDocument(account, id);
      await stores.content.putDocument({ id, accountId: account, brand, title, text, createdAt: existing?.createdAt ?? core.now() });
    },
    deleteDocument: (accountId, id) => stores.content.deleteDocument(accountId, id),
  };
}
