/**
 * Jobs and crashes, in process: gateway instances A and B share one set of
 * memory stores and one HTTP media upstream. A "crashes" by having its store access frozen
 * (test/helpers/media.ts `freezable`): from then on A cannot renew a lease, update a job,
 * settle or release, exactly as if its process were gone; B's sweep sees A's jobs stop being
 * renewed and adopts them once their ownership lapses (one lease TTL):
 * - an image job is lost: `failed` with `job_lost`, its hold released, nothing charged;
 * - a video job is tracked by B to completion and settled exactly once.
 * Afterwards A is thawed (a long pause rather than a death): its late results change nothing.
 *
 * Note: `dispose()` is not a crash. It waits for pending work, so an image in flight on a
 * disposed instance still completes and is billed there; hence the frozen stores.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, UPSTREAM_API_KEY, eventually, testConfig } from '../helpers/gateway.js';
import { IMAGE, VIDEO, freezable, imageCost, mediaModels, videoCost, type FreezableStores } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { chargesOf } from '../helpers/billing.js';

const TTL_MS = 1000;

let up: MediaUpstream;
let shared: Stores;
let fz: FreezableStores;
let a: Gateway;
let b: Gateway;
let devKey: string;
let aDisposed: boolean;

beforeAll(async () => {
  up = await startMediaUpstream();
});
afterAll(async () => {
  await up?.close();
});

beforeEach(async () => {
  const setup = testConfig({
    walletUsd: 100,
    models: mediaModels('up'),
    limits: { inFlightLeaseTtlMs: TTL_MS, inlineImageDeadlineMs: 100, jobPollIntervalMs: 50 },
  });
  setup.options.upstreams = {
    test: { simulate: true, imageDelayMs: 0, videoDurationMs: 0, chunkDelayMs: 0 },
    up: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs: 20_000 },
  };
  devKey = setup.devKey;
  shared = createMemoryStores();
  fz = freezable(shared);
  a = createGateway({ ...setup.options, stores: fz.stores });
  await a.ready;
  aDisposed = false;
  // B seeds the same config against the same stores: nothing is created twice.
  b = createGateway({ ...setup.options, stores: shared });
  await b.ready;
});

afterEach(async () => {
  fz.thaw();
  if (!aDisposed) await a.dispose();
  await b.dispose();
});

function api(gw: Gateway, path: string, payload?: unknown): Promise<Response> {
  return Promise.resolve(gw.fetch(
    new Request(`http://gw.test/v1${path}`, {
      method: payload === undefined ? 'GET' : 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: payload === undefined ? undefined : JSON.stringify(payload),
    }),
    { clientAddress: '192.0.2.1' },
  ));
}

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const leases = (kind: 'image' | 'video') => shared.limits.activeLeases(`${kind}:${ACCOUNT}`);

describe('an instance dies with jobs in flight', () => {
  it('image job: B marks it failed (job_lost) once its lease lapses, releases the hold, charges nothing', async () => {
    const initial = await shared.billing.wallet(ACCOUNT);
    const gate = up.holdImages();
    const res = await api(a, '/images/generations', { model: IMAGE, prompt: 'lost in a crash', resolution: '1080P' });
    expect(res.status).toBe(202);
    const job = (await res.json()) as Json;
    const ownerA = (await shared.jobs.get(job.id))!.owner;
    expect(ownerA).toMatch(/^gw_/);
    expect(await leases('image')).toBe(1);
    expect((await shared.billing.wallet(ACCOUNT)).held).toBe(imageCost('1080P'));

    // While A lives it keeps renewing: B leaves the job alone well past one TTL.
    await sleep(TTL_MS + 500);
    expect(await shared.jobs.get(job.id)).toMatchObject({ status: 'in_progress', owner: ownerA });
    expect(await leases('image')).toBe(1);

    fz.freeze(); // A is gone

    // B answers the poll, and its sweep declares the job lost.
    let seen: Json = {};
    await eventually(
      async () => {
        seen = (await (await api(b, `/images/${job.id}`)).json()) as Json;
        return seen.status !== 'in_progress';
      },
      'B marks the image job lost',
      10_000,
    );
    expect(seen).toMatchObject({ id: job.id, status: 'failed', result: null });
    expect(seen.error).toEqual({ code: 'job_lost', message: expect.any(String) });
    expect(typeof seen.completed_at).toBe('number');
    expect(await shared.billing.wallet(ACCOUNT)).toEqual(initial);
    expect(await shared.billing.openHolds(ACCOUNT)).toBe(0);
    expect(await chargesOf(shared.billing.ledger(ACCOUNT))).toEqual([]);
    expect(await leases('image')).toBe(0);

    // The upstream finishes after all, and A comes back: its late result changes nothing.
    gate.open();
    await eventually(() => up.imagesAnswered() >= 1, 'the upstream answered A');
    fz.thaw();
    await a.dispose(); // waits for A's pending work, i.e. its handling of the late result
    aDisposed = true;
    expect(await shared.jobs.get(job.id)).toMatchObject({ status: 'failed', error: { code: 'job_lost' } });
    expect(await chargesOf(shared.billing.ledger(ACCOUNT))).toEqual([]);
    expect(await shared.billing.wallet(ACCOUNT)).toEqual(initial);
    expect(await leases('image')).toBe(0);
  });

  it('video job: B adopts it, tracks it to completion and settles it once', async () => {
    const initial = await shared.billing.wallet(ACCOUNT);
    const res = await api(a, '/videos', { model: VIDEO, prompt: 'survives a crash', seconds: 8, size: '1920x1080' });
    expect(res.status).toBe(202);
    const job = (await res.json()) as Json;
    const upstreamId = up.videos().at(-1)!.id;
    const ownerA = (await shared.jobs.get(job.id))!.owner;
    expect(await leases('video')).toBe(1);
    expect((await shared.billing.wallet(ACCOUNT)).held).toBe(videoCost('1080P', 8));

    // A tracks it while alive.
    up.setVideoProgress(upstreamId, 30);
    await eventually(async () => (await shared.jobs.get(job.id))?.progress === 30, 'A tracks progress');
    expect((await shared.jobs.get(job.id))?.owner).toBe(ownerA);

    fz.freeze(); // A is gone

    await eventually(async () => {
      const owner = (await shared.jobs.get(job.id))?.owner;
      return typeof owner === 'string' && owner !== ownerA;
    }, 'B adopts the video job', 10_000);
    up.setVideoProgress(upstreamId, 70);
    await eventually(async () => (await shared.jobs.get(job.id))?.progress === 70, 'B tracks progress');
    // B holds the slot while it tracks.
    expect(await leases('video')).toBe(1);
    expect((await shared.billing.wallet(ACCOUNT)).held).toBe(videoCost('1080P', 8));

    up.finishVideo(upstreamId);
    // Nobody polls: B notices completion, settles, frees the slot.
    await eventually(async () => (await chargesOf(shared.billing.ledger(ACCOUNT))).length === 1, 'settled by B', 10_000);
    await eventually(async () => (await leases('video')) === 0, 'slot freed');
    const [entry] = await chargesOf(shared.billing.ledger(ACCOUNT));
    expect(entry).toMatchObject({ id: job.id, units: { kind: 'seconds', seconds: 8, tier: '1080P' } });
    expect(entry!.cost).toBe(videoCost('1080P', 8));
    expect(await shared.billing.wallet(ACCOUNT)).toEqual({ balance: initial.balance - videoCost('1080P', 8), held: 0n });
    const done = (await (await api(b, `/videos/${job.id}`)).json()) as Json;
    expect(done).toMatchObject({ status: 'completed', progress: 100, result: { seconds: 8, content_type: 'video/mp4' } });

    // A comes back (its tracker may poll once more before its renewal finds the job is not its
    // own and stops it): still settled exactly once.
    fz.thaw();
    await sleep(TTL_MS);
    await a.dispose();
    aDisposed = true;
    expect(await chargesOf(shared.billing.ledger(ACCOUNT))).toHaveLength(1);
    expect(await shared.billing.wallet(ACCOUNT)).toEqual({ balance: initial.balance - videoCost('1080P', 8), held: 0n });
    expect(await leases('video')).toBe(0);
    expect((await shared.jobs.get(job.id))?.status).toBe('completed');
  });

  it('video job: A, only paused, comes back and leaves the job B adopted to B (no two trackers)', async () => {
    const initial = await shared.billing.wallet(ACCOUNT);
    const res = await api(a, '/videos', { model: VIDEO, prompt: 'a long pause', seconds: 4, size: '1280x720' });
    const job = (await res.json()) as Json;
    const upstreamId = up.videos().at(-1)!.id;
    const ownerA = (await shared.jobs.get(job.id))!.owner;
    fz.freeze();
    let ownerB: string | null | undefined;
    await eventually(async () => {
      ownerB = (await shared.jobs.get(job.id))?.owner;
      return typeof ownerB === 'string' && ownerB !== ownerA;
    }, 'B adopts the video job', 10_000);
    fz.thaw(); // A was only paused: its renewals start again
    // Over three of A's renewal rounds the job stays B's: A's renewal finds it adopted and stops.
    const owners = new Set<string | null | undefined>();
    for (const end = Date.now() + TTL_MS; Date.now() < end; await sleep(20)) owners.add((await shared.jobs.get(job.id))?.owner);
    expect([...owners]).toEqual([ownerB]);
    up.finishVideo(upstreamId);
    await eventually(async () => (await shared.jobs.get(job.id))?.status === 'completed', 'B completes it', 10_000);
    await eventually(async () => (await leases('video')) === 0, 'slot freed');
    expect((await chargesOf(shared.billing.ledger(ACCOUNT))).map((e) => e.cost)).toEqual([videoCost('720P', 4)]);
    expect(await shared.billing.wallet(ACCOUNT)).toEqual({ balance: initial.balance - videoCost('720P', 4), held: 0n });
  });

  it('a failed video job adopted by B is refunded', async () => {
    const initial = await shared.billing.wallet(ACCOUNT);
    const res = await api(a, '/videos', { model: VIDEO, prompt: 'doomed [fail]', seconds: 4 });
    const job = (await res.json()) as Json;
    const upstreamId = up.videos().at(-1)!.id;
    const ownerA = (await shared.jobs.get(job.id))!.owner;
    fz.freeze();
    await eventually(async () => (await shared.jobs.get(job.id))?.owner !== ownerA, 'B adopts', 10_000);
    up.finishVideo(upstreamId);
    await eventually(async () => (await shared.jobs.get(job.id))?.status === 'failed', 'failed', 10_000);
    await eventually(async () => (await leases('video')) === 0, 'slot freed');
    expect((await shared.jobs.get(job.id))?.error).toEqual({ code: 'upstream_generation_failed', message: expect.any(String) });
    expect(await chargesOf(shared.billing.ledger(ACCOUNT))).toEqual([]);
    expect(await shared.billing.wallet(ACCOUNT)).toEqual(initial);
  });
});
