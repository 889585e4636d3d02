/**
 * Gateways of different stores (two Redis key prefixes: two tenants, or staging and production
 * on one host) given one `settleJournalDir`. A settle one store did not take stays for a
 * gateway of that store: another store's gateway never replays it into its own books (it would
 * debit the account of the same id there).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, expect, it } from 'vitest';
import { deleteKeysWithPrefix, REDIS_URL } from '../../bench/redis-util.js';
import { fileJournal } from '../../src/billing/journal.js';
import { createGateway } from '../../src/gateway.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import type { SettleRequest } from '../../src/stores/types.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually, testConfig } from '../helpers/gateway.js';

const P1 = `mgj1:${randomUUID().slice(0, 8)}:`;
const P2 = `mgj2:${randomUUID().slice(0, 8)}:`;
const dir = mkdtempSync(join(tmpdir(), 'mg-journal-'));
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  const c = new Redis(REDIS_URL);
  await deleteKeysWithPrefix(c, P1);
  await deleteKeysWithPrefix(c, P2);
  c.disconnect();
});

const settle = (holdId: string): SettleRequest =>
  ({
    holdId,
    accountId: ACCOUNT,
    month: new Date().toISOString().slice(0, 7),
    cost: 5_000_000_000n, // 5 USD
    entry: { id: holdId, accountId: ACCOUNT, keyId: 'key_p1', model: 'test/chat', units: { kind: 'tokens', prompt: 1, completion: 1 }, measured: 'usage', at: Date.now() },
  }) as never;

async function gatewayOn(prefix: string) {
  const stores = createRedisStores({ url: REDIS_URL, keyPrefix: prefix });
  const gateway = createGateway({ ...testConfig({ walletUsd: 100 }).options, stores, settleJournalDir: dir });
  await gateway.ready;
  return {
    stores,
    async close() {
      await gateway.dispose();
      await stores.close();
    },
  };
}

it('a settle kept for one store is replayed only by a gateway of that store', async () => {
  // What a gateway of store P1 leaves behind: one settle P1 did not take, then a clean stop.
  const p1Identity = createRedisStores({ url: REDIS_URL, keyPrefix: P1 });
  const left = fileJournal(dir, { store: p1Identity.identity });
  left.add(settle('req_from_store_p1'));
  left.close();
  await p1Identity.close();

  const other = await gatewayOn(P2);
  try {
    // Three heartbeats of its journal: a file it may take is taken within one.
    await new Promise((r) => setTimeout(r, 6500));
    expect(await chargesOf(other.stores.billing.ledger(ACCOUNT))).toEqual([]);
    expect((await other.stores.billing.wallet(ACCOUNT)).balance).toBe(100_000_000_000n);
  } finally {
    await other.close();
  }

  const own = await gatewayOn(P1);
  try {
    await eventually(async () => (await chargesOf(own.stores.billing.ledger(ACCOUNT))).length === 1, 'the charge lands in its own store', 10_000);
    expect((await chargesOf(own.stores.billing.ledger(ACCOUNT))).map((c) => c.cost)).toEqual([5_000_000_000n]);
  } finally {
    await own.close();
  }
}, 30_000);
