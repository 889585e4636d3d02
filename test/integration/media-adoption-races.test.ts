/**
 * Jobs at the edges of adoption and shutdown, two instances (A and B) on one set of memory
 * stores unless said otherwise:
 * - B's sweep read a job just before A recorded its charge, and B's catalog lacks the model:
 *   B must leave the paid job alone (decided on the job as B claimed it, not as it read it);
 * - shutdown releases an image call while its images and charge are being recorded: the job
 *   is then failed and nothing charged, never completed unpaid;
 * - A, back after B adopted its video job, lets its billed call go: it stops renewing a hold
 *   that B ends.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type Gateway, type GatewayOptions } from '../../src/gateway.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { JobRecord, Stores } from '../../src/stores/types.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually } from '../helpers/gateway.js';
import { IMAGE, VIDEO, freezable, mediaSetup, videoCost } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';

let media: MediaUpstream;
beforeAll(async () => {
  media = await startMediaUpstream();
});
afterAll(async () => {
  await media?.close();
});

const running: Array<{ gw: Gateway; thaw?: () => void }> = [];
afterEach(async () => {
  for (const g of running.splice(0)) {
    g.thaw?.();
    await g.gw.dispose();
  }
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const setupWith = (limits: Record<string, number>) => mediaSetup(media.url, limits);

/** `stores` with one method of one store wrapped. */
function wrapped<K extends keyof Stores>(stores: Stores, store: K, method: string, wrap: (original: (...a: unknown[]) => Promise<unknown>, target: Stores[K]) => (...a: unknown[]) => unknown): Stores {
  const target = stores[store] as object;
  const proxy = new Proxy(target, {
    get(t, p) {
      const v = Reflect.get(t, p, t) as unknown;
      if (typeof v !== 'function') return v;
      return p === method ? wrap((...a) => (v as (...x: unknown[]) => Promise<unknown>).apply(t, a), t as Stores[K]) : v.bind(t);
    },
  });
  return { ...stores, [store]: proxy } as Stores;
}

async function start(options: GatewayOptions, stores: Stores, thaw?: () => void): Promise<Gateway> {
  const gw = createGateway({ ...options, stores });
  await gw.ready;
  running.push({ gw, ...(thaw ? { thaw } : {}) });
  return gw;
}

function post(gw: Gateway, key: string, path: string, body: unknown): Promise<Response> {
  return Promise.resolve(
    gw.fetch(
      new Request(`http://gw.test/v1${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }),
      { clientAddress: '192.0.2.1' },
    ),
  );
}

describe('jobs at the edges of adoption and shutdown', () => {
  it('an adopter without the model that read the job before its charge was recorded leaves the paid job alone', async () => {
    const TTL_MS = 1000;
    const setup = setupWith({ inFlightLeaseTtlMs: TTL_MS, inlineImageDeadlineMs: 100, jobPollIntervalMs: 50 });
    const shared: Stores = createMemoryStores();
    const fz = freezable(shared);
    let settled = 0;
    // A freezes right after its charge lands.
    const aStores = wrapped(fz.stores, 'billing', 'settle', (settle) => async (...args) => {
      const r = await settle(...args);
      settled++;
      fz.freeze();
      return r;
    });
    const a = await start(setup.options, aStores, () => fz.thaw());
    // B's sweep reads are a moment old: from before A's charge was recorded.
    const bStores = wrapped(shared, 'jobs', 'listUnfinished', (list) => async () => ((await list()) as JobRecord[]).map(({ charging: _c, ...j }) => j as JobRecord));
    await start({ ...setup.options, models: setup.options.models!.filter((m) => m.id !== VIDEO) }, bStores);

    const initial = await shared.billing.wallet(ACCOUNT);
    const job = (await (await post(a, setup.devKey, '/videos', { model: VIDEO, prompt: 'charged, then a stall', seconds: 4, size: '1280x720' })).json()) as { id: string };
    media.finishVideo(media.videos().at(-1)!.id);
    await eventually(() => settled === 1, 'A charged the job');
    await sleep(3 * TTL_MS); // B sees the claim lapse, more than once
    expect((await shared.jobs.get(job.id))?.status).not.toBe('failed');
    expect(await shared.billing.wallet(ACCOUNT)).toEqual({ balance: initial.balance - videoCost('720P', 4), held: 0n });
  });

  it('shutdown releasing an image call while its images are recorded fails the job; nothing is shown or charged', async () => {
    const setup = setupWith({ inlineImageDeadlineMs: 100 });
    setup.options.shutdownGraceMs = 200;
    const shared: Stores = createMemoryStores();
    // The store takes 600 ms to record the images and their charge: the grace period ends meanwhile.
    const stores = wrapped(shared, 'jobs', 'update', (update) => async (...args) => {
      if ((args[1] as Partial<JobRecord>).charging) await sleep(600);
      return update(...args);
    });
    const gw = await start(setup.options, stores);
    running.pop(); // disposed below
    const gate = media.holdImages();
    const res = await post(gw, setup.devKey, '/images/generations', { model: IMAGE, prompt: 'a cat', resolution: '1080P' });
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    const stopping = gw.dispose();
    gate.open();
    await stopping;
    await eventually(async () => ['completed', 'failed'].includes((await shared.jobs.get(id))?.status ?? ''), 'the job ended', 5_000);
    const job = (await shared.jobs.get(id))!;
    expect({ status: job.status, result: job.result, charges: (await chargesOf(shared.billing.ledger(ACCOUNT))).length }).toEqual({ status: 'failed', result: null, charges: 0 });
    expect((await shared.billing.wallet(ACCOUNT)).held).toBe(0n);
  });

  it('an instance whose video job was adopted lets its call go: it stops renewing the hold', async () => {
    const TTL_MS = 500;
    const setup = setupWith({ inFlightLeaseTtlMs: TTL_MS, jobPollIntervalMs: 50, jobTtlMs: 4_500, holdTtlMs: 600 });
    const shared: Stores = createMemoryStores();
    const fz = freezable(shared);
    const renewedByA: string[] = [];
    const aStores = wrapped(fz.stores, 'billing', 'renewHold', (renew) => (...args) => {
      renewedByA.push(args[1] as string);
      return renew(...args);
    });
    const a = await start(setup.options, aStores, () => fz.thaw());
    await start(setup.options, shared);
    const job = (await (await post(a, setup.devKey, '/videos', { model: VIDEO, prompt: 'adopted', seconds: 4, size: '1280x720' })).json()) as { id: string };
    fz.freeze();
    const ownerA = (await shared.jobs.get(job.id))!.owner;
    await eventually(async () => (await shared.jobs.get(job.id))?.owner !== ownerA, 'B adopts', 10_000);
    media.finishVideo(media.videos().at(-1)!.id);
    await eventually(async () => (await shared.jobs.get(job.id))?.status === 'completed', 'B completes it', 10_000);
    expect(await chargesOf(shared.billing.ledger(ACCOUNT))).toHaveLength(1);
    fz.thaw(); // A's renewal finds the job adopted
    await sleep(200);
    const before = renewedByA.filter((h) => h === job.id).length;
    await sleep(4_000);
    expect(renewedByA.filter((h) => h === job.id).length - before).toBe(0);
  }, 30_000);
});
