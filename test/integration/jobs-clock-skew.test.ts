/**
 * Two live gateway instances on one Redis whose clocks differ by more than the in-flight lease
 * TTL. A claim's deadline (`ownerUntil`) is written by its owner's clock: read against another
 * instance's clock it would say the owner is gone, and that instance would declare a live
 * owner's image job lost (failed, its hold released, the image generated for nothing).
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDIS_URL, deleteKeysWithPrefix } from '../../bench/redis-util.js';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, UPSTREAM_API_KEY, eventually, testConfig } from '../helpers/gateway.js';
import { IMAGE, imageCost, mediaModels } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { chargesOf } from '../helpers/billing.js';

const PREFIX = `mgskew:${randomUUID().slice(0, 8)}:`;
const TTL_MS = 3000;
const SKEW_MS = 4000; // B's clock runs 4 s ahead of A's
let up: MediaUpstream;
let sa: Stores, sb: Stores;
let a: Gateway, b: Gateway;
let devKey: string;

beforeAll(async () => {
  up = await startMediaUpstream();
  const setup = testConfig({ walletUsd: 100, models: mediaModels('up'), limits: { inFlightLeaseTtlMs: TTL_MS, inlineImageDeadlineMs: 100, jobPollIntervalMs: 50 } });
  setup.options.upstreams = { test: { simulate: true, imageDelayMs: 0, videoDurationMs: 0, chunkDelayMs: 0 }, up: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs: 20_000 } };
  devKey = setup.devKey;
  sa = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
  sb = createRedisStores({ url: REDIS_URL, keyPrefix: PREFIX });
  a = createGateway({ ...setup.options, stores: sa });
  await a.ready;
  b = createGateway({ ...setup.options, stores: sb, now: () => Date.now() + SKEW_MS });
  await b.ready;
});
afterAll(async () => {
  await a?.dispose();
  await b?.dispose();
  await sa?.close();
  await sb?.close();
  await up?.close();
  const c = new Redis(REDIS_URL);
  await deleteKeysWithPrefix(c, PREFIX);
  c.disconnect();
});

const api = (gw: Gateway, path: string, payload?: unknown) =>
  Promise.resolve(
    gw.fetch(
      new Request(`http://gw.test/v1${path}`, {
        method: payload === undefined ? 'GET' : 'POST',
        headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
        body: payload === undefined ? undefined : JSON.stringify(payload),
      }),
      { clientAddress: '192.0.2.1' },
    ),
  );

describe('instances with skewed clocks', () => {
  it('a live instance keeps its image job: no other instance declares it lost', async () => {
    const gate = up.holdImages();
    const res = await api(a, '/images/generations', { model: IMAGE, prompt: 'skew', resolution: '1080P' });
    expect(res.status).toBe(202);
    const job = (await res.json()) as { id: string };
    // A is alive and renewing; wait 1.5 TTL.
    await new Promise((r) => setTimeout(r, TTL_MS * 1.5));
    const seen = (await sb.jobs.get(job.id))!;
    gate.open();
    await eventually(() => up.imagesAnswered() >= 1, 'upstream answered');
    await new Promise((r) => setTimeout(r, 500));
    const final = await sa.jobs.get(job.id);
    const charges = await chargesOf(sa.billing.ledger(ACCOUNT));
    expect(seen.status).toBe('in_progress');
    expect(final?.status).toBe('completed');
    expect(charges.map((c) => c.cost)).toEqual([imageCost('1080P')]);
  }, 30_000);
});
