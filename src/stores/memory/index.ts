import type { Stores } from '../types.js';
import { createMemoryBatches } from './batches.js';
import { createMemoryAccounts, createMemoryKeys } from './accounts-keys.js';
import { type Balances, createMemoryBilling } from './billing.js';
import { createMemoryContent } from './content.js';
import { createMemoryIdempotency } from './idempotency.js';
import { createMemoryJobs } from './jobs.js';
import { createMemoryLimits } from './limits.js';
import { createMemoryResponseCache } from './response-cache.js';
import { memoryIdentity } from '../identity.js';

export interface MemoryStoresOptions {
  /** The only clock the stores read (unix ms). Tests pass a fake one. Default: Date.now. */
  now?: () => number;
  /**
   * Ledger entries kept per account (the newest). Memory storage is for one process; its
   * ledger must not grow without bound in a long-running one (a large one also slows every
   * garbage collection). Redis storage keeps every entry. Default 10,000.
   */
  ledgerLimit?: number;
}

/**
 * All stores in this process's memory: for one instance, development and tests. Every piece
 * of state lives in the returned object; records go in and come out as copies.
 */
export function createMemoryStores(options: MemoryStoresOptions = {}): Stores {
  const now = options.now ?? Date.now;
  // Billing owns the wallets; creating an account credits its opening balance through billing.
  const balances: Balances = new Map();
  const limits = createMemoryLimits(now);
  const billing = createMemoryBilling(balances, now, options.ledgerLimit ?? 10_000, limits);
  return {
    identity: memoryIdentity(),
    accounts: createMemoryAccounts((req) => billing.creditNow(req)),
    keys: createMemoryKeys(),
    billing,
    limits,
    jobs: createMemoryJobs(now),
    content: createMemoryContent(),
    idempotency: createMemoryIdempotency(now),
    responseCache: createMemoryResponseCache(now),
    batches: createMemoryBatches(),
    // Memory always answers, and never pretends to be durable: it is for one process and tests.
    async ping() {},
    async close() {},
  };
}
