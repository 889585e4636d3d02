/**
 * Admin API handlers for the response cache: purging its entries (all, or one account's), and
 * this instance's hits, misses and savings per account and model (what the console shows).
 */
import { formatUsd } from '../../billing/money.js';
import type * as S from '../schemas.js';
import type { AdminContext, Call } from './context.js';

export async function purge(x: AdminContext, c: Call<undefined, typeof S.cacheQuery>) {
  const account = c.query.account;
  const purged = x.core.cache ? await x.core.cache.purge(account) : await x.core.stores.responseCache.purge(account);
  return { object: 'cache.purge', account: account ?? null, purged };
}

export function stats(x: AdminContext) {
  const tally = x.core.cache?.tally();
  const row = (t: { hits: number; misses: number; storedBytes: number; savedNano: bigint }) => ({
    hits: t.hits,
    misses: t.misses,
    hit_rate: t.hits + t.misses === 0 ? 0 : t.hits / (t.hits + t.misses),
    stored_bytes: t.storedBytes,
    saved_usd: formatUsd(t.savedNano),
  });
  return Promise.resolve({
    object: 'cache.stats',
    enabled: tally !== undefined,
    total: tally ? row(tally.total) : null,
    data: (tally?.byAccountModel ?? []).map((t) => ({ account: t.account, model: t.model, ...row(t) })),
  });
}
