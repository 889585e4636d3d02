import { digestKey, keyIdFor } from '../auth/keys.js';
import type { Services } from '../services.js';
import { type Admin, insertKey } from './accounts.js';

/**
 * Seeds accounts, keys, brands and documents from the options. Idempotent: a record that
 * exists is left as it is, so a restart with the same config credits no wallet twice.
 */
export async function seed(core: Services, admin: Admin): Promise<void> {
  const cfg = core.cfg;
  for (const a of cfg.accounts) {
    // A seeded wallet is credited only when the account is created, and never for an account
    // that already has ledger history (its record lost, its money spent): durable books never
    // hand out the seed twice.
    const history = (await core.stores.billing.queryLedger({ accountId: a.id, limit: 1 })).entries.length > 0;
    await admin.createAccount({ id: a.id, walletUsd: history ? 0 : a.walletUsd, grants: a.grants, budgets: a.budgets });
  }
  for (const k of cfg.keys) {
    await insertKey(
      core,
      k.key,
      {
        account: k.account,
        kind: k.kind,
        model: k.model,
        label: k.label,
        monthlyCapUsd: k.monthlyCapUsd,
        models: k.models,
        tokensPerMinute: k.tokensPerMinute,
        budgets: k.budgets,
      },
      keyIdFor(digestKey(k.key)),
    );
  }
  // Brands and documents are created only when absent, so a restart never rewrites them.
  for (const b of cfg.brands) {
    if (!(await core.stores.content.getBrand(b.account, b.id))) {
      await admin.putBrand({ id: b.id, account: b.account, name: b.name, description: b.description, voice: b.voice });
    }
  }
  for (const d of cfg.documents) {
    if (!(await core.stores.content.getDocument(d.account, d.id))) {
      await admin.addDocument({ id: d.id, account: d.account, brand: d.brand, title: d.title, text: d.text });
    }
  }
}
