/**
 * A job is billed at the price it was held at, whichever instance finishes it. Two gateway
 * instances share one set of stores (memory, and a real Redis) and one HTTP media upstream,
 * with different prices for the same video model, as during a rolling restart that changed
 * the price: A (0.05 USD/s at 480P) accepts a video job, then "crashes" (its store access
 * frozen, see test/helpers/media.ts `freezable`); B (0.5 USD/s) adopts the job, tracks it to
 * completion and bills it: at A's 0.05, the price its hold was placed at.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteKeysWithPrefix, REDIS_URL, redisProblem } from '../../bench/redis-util.js';
import { cost, parsePrice } from '../../src/billing/money.js';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, UPSTREAM_API_KEY, eventually, testConfig } from '../helpers/gateway.js';
import { VIDEO, freezable, mediaModels } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';

const redisUp = (await redisProblem(REDIS_URL)) === null;
const PREFIX = `mghp:${randomBytes(4).toString('hex')}:`;
const TTL_MS = 1000;
const A_PRICE = '0.05';
const B_PRICE = '0.5';

const storages: Array<[string, boolean, () => Stores]> = [
  ['memory', true, () => createMemoryStores()],
  ['redis', redisUp || process.env.CI === 'true', () => createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX })],
];

/** The media models with the video model's 480P tier at `price` USD a second. */
function priced(price: string) {
  return mediaModels('up').map((m) => {
    if (m.id !== VIDEO || !('unit' in m.pricing)) return m;
    return { ...m, pricing: { ...m.pricing, tiers: { ...m.pricing.tiers, '480P': price } } };
  });
}

describe.each(storages)('%s: an adopted job is billed at the price it was held at', (name, enabled) => {
  let up: MediaUpstream;

  beforeAll(async () => {
    if (enabled) up = await startMediaUpstream();
  });
  afterAll(async () => {
    if (!enabled) return;
    await up.close();
    if (name === 'redis') {
      const c = new Redis(REDIS_URL);
      await deleteKeysWithPrefix(c, PREFIX);
      c.disconnect();
    }
  });

  it.skipIf(!enabled)('A holds at 0.05 USD/s, B (0.5 USD/s) adopts and finishes it: billed 0.05 USD/s', async () => {
    const shared = storages.find(([n]) => n === name)![2]();
    const base = testConfig({
      walletUsd: 100,
      limits: { inFlightLeaseTtlMs: TTL_MS, jobPollIntervalMs: 50 },
    });
    const upstreams = { ...base.options.upstreams, up: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs: 20_000 } };
    const fz = freezable(shared);
    const a: Gateway = createGateway({ ...base.options, upstreams, models: [...base.options.models!, ...priced(A_PRICE)], stores: fz.stores });
    await a.ready;
    const b: Gateway = createGateway({ ...base.options, upstreams, models: [...base.options.models!, ...priced(B_PRICE)], stores: shared });
    await b.ready;
    try {
      const initial = await shared.billing.wallet(ACCOUNT);
      const res = await a.fetch(
        new Request('http://gw.test/v1/videos', {
          method: 'POST',
          headers: { authorization: `Bearer ${base.devKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: VIDEO, prompt: 'priced before the restart', seconds: 8, size: '480x854' }),
        }),
        { clientAddress: '192.0.2.1' },
      );
      expect(res.status).toBe(202);
      const job = (await res.json()) as { id: string };
      const held = cost(parsePrice(A_PRICE), 8);
      expect((await shared.billing.wallet(ACCOUNT)).held).toBe(held);
      // The record keeps the held unit price (pico-USD, exact), whatever the driver.
      expect((await shared.jobs.get(job.id))?.heldUnitPrice).toBe(String(parsePrice(A_PRICE)));
      const ownerA = (await shared.jobs.get(job.id))!.owner;

      fz.freeze(); // A is gone
      await eventually(async () => {
        const owner = (await shared.jobs.get(job.id))?.owner;
        return typeof owner === 'string' && owner !== ownerA;
      }, 'B adopts the video job', 10_000);
      up.finishVideo(up.videos().at(-1)!.id);
      await eventually(async () => (await shared.billing.ledger(ACCOUNT)).some((e) => e.id === job.id), 'B bills it', 10_000);

      const entries = (await shared.billing.ledger(ACCOUNT)).filter((e) => e.id === job.id);
      expect(entries).toHaveLength(1);
      expect(entries[0]).toMatchObject({ model: VIDEO, units: { kind: 'seconds', seconds: 8, tier: '480P' } });
      expect(entries[0]!.cost).toBe(held);
      expect(entries[0]!.cost).not.toBe(cost(parsePrice(B_PRICE), 8));
      expect(await shared.billing.wallet(ACCOUNT)).toEqual({ balance: initial.balance - held, held: 0n });
    } finally {
      fz.thaw();
      await a.dispose();
      await b.dispose();
      await shared.close();
    }
  });
});
