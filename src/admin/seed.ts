import { digestKey, keyIdFor } from '../auth/keys.js';
import type { Services } from '../services.js';
import { isStoreUnavailable } from '../stores/errors.js';
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

/** The first wait before seeding again after a store did not answer; it doubles up to the cap. */
const RETRY_FIRST_MS = 250;
const RETRY_CAP_MS = 5_000;

export interface Seeding {
  /** Resolves once seeded; rejects on a failure that is not a store outage, or when stopped. */
  ready: Promise<void>;
  /** Whether seeding is done (set before `ready` resolves). */
  seeded(): boolean;
  /** Whether the last try met an unreachable store (calls then get 503 at once, not a wait). */
  storeDown(): boolean;
  /**
   * The try under way: resolves when it ends, seeded or meeting an unreachable store (a call
   * waits for that, not for the store to come back); rejects as `ready` does.
   */
  attempt(): Promise<void>;
}

/**
 * Seeds, and while a store is unreachable tries again (from 250 ms, doubling to 5 s) until it
 * answers, so a gateway started during an outage serves 503s and then serves normally once the
 * store is back, without a restart. `stopped()` (shutdown) ends the tries.
 */
export function seedUntilStored(core: Services, admin: Admin, stopped: () => boolean): Seeding {
  let down = false;
  let seeded = false;
  let current: Promise<void> = Promise.resolve();
  const ready = (async () => {
    for (let wait = RETRY_FIRST_MS; ; wait = Math.min(RETRY_CAP_MS, wait * 2)) {
      const attempt = seed(core, admin);
      current = attempt.catch((err: unknown) => {
        if (!isStoreUnavailable(err) || stopped()) throw err;
      });
      // Its rejection is `ready`'s; a caller that waits on it handles it.
      current.catch(() => {});
      try {
        await attempt;
        seeded = true;
        if (down) core.log.info({ msg: 'the store answers again; seeding done' });
        down = false;
        return;
      } catch (err) {
        if (!isStoreUnavailable(err) || stopped()) throw err;
        if (!down) core.log.warn({ msg: 'a store is unreachable at start; calls get 503 until it answers', err: String(err) });
        down = true;
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  })();
  return { ready, seeded: () => seeded, storeDown: () => down, attempt: () => current };
}
