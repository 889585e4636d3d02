import type { BrandRecord, ContentStore, DocumentRecord } from '../types.js';

/** Records of one kind, namespaced per account so one account never sees another's ids. */
class PerAccount<T extends { id: string; accountId: string; createdAt: number }> {
  private readonly byAccount = new Map<string, Map<string, T>>();

  put(record: T): void {
    let mine = this.byAccount.get(record.accountId);
    if (!mine) this.byAccount.set(record.accountId, (mine = new Map()));
    mine.set(record.id, structuredClone(record));
  }

  get(accountId: string, id: string): T | null {
    const record = this.byAccount.get(accountId)?.get(id);
    return record ? structuredClone(record) : null;
  }

  /** Oldest first (ties by id), so listings are stable. */
  list(accountId: string): T[] {
    const all = [...(this.byAccount.get(accountId)?.values() ?? [])];
    return structuredClone(all).sort(byCreation);
  }

  delete(accountId: string, id: string): boolean {
    const mine = this.byAccount.get(accountId);
    if (!mine?.delete(id)) return false;
    if (mine.size === 0) this.byAccount.delete(accountId);
    return true;
  }
}

function byCreation(a: { createdAt: number; id: string }, b: { createdAt: number; id: string }): number {
  return a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

export function createMemoryContent(): ContentStore {
  const brands = new PerAccount<BrandRecord>();
  const documents = new PerAccount<DocumentRecord>();
  /** Bumped on every change to an account's documents; cached search indexes compare it. */
  const versions = new Map<string, number>();
  const bump = (accountId: string) => versions.set(accountId, (versions.get(accountId) ?? 0) + 1);

  return {
    async putBrand(brand) {
      brands.put(brand);
    },
    async getBrand(accountId, id) {
      return brands.get(accountId, id);
    },
    async listBrands(accountId) {
      return brands.list(accountId);
    },
    async deleteBrand(accountId, id) {
      return brands.delete(accountId, id);
    },
    async putDocument(doc) {
      documents.put(doc);
      bump(doc.accountId);
    },
    async getDocument(accountId, id) {
      return documents.get(accountId, id);
    },
    async listDocuments(accountId) {
      return documents.list(accountId);
    },
    async deleteDocument(accountId, id) {
      const deleted = documents.delete(accountId, id);
      if (deleted) bump(accountId);
      return deleted;
    },
    async documentsVersion(accountId) {
      return versions.get(accountId) ?? 0;
    },
  };
}
