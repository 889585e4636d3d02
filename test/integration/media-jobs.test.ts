/**
 * Media through `gateway.fetch`: images inline (200) or as a job
 * (202, polled, billed once), the per-account in-flight image cap across keys, video jobs
 * that complete, settle and free their slot with nobody polling, refunds of failed jobs,
 * jobs visible only to their account, exact billing per tier / second / token, validation,
 * agent keys, and the media listing.
 *
 * Upstreams: "test" and "slow" are the built-in simulator (images after 0 ms and 1500 ms);
 * "up" is an HTTP media upstream the test drives by hand (images wait for a gate, videos
 * finish when told), where exact in-flight counts matter.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../../src/gateway.js';
import { parseUsd } from '../../src/billing/money.js';
import type { LedgerEntry, Stores } from '../../src/stores/types.js';
import { ACCOUNT, MODEL, UPSTREAM_API_KEY, eventually, makeGateway, testConfig, testKey } from '../helpers/gateway.js';
import {
  AUDIO,
  IMAGE,
  IMAGE_SMALL,
  IMAGE_TIERS,
  SPEECH_PRICE,
  VIDEO,
  VIDEO_TIERS,
  imageCost,
  mediaModels,
  speechCost,
  speechTokens,
  videoCost,
} from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { chargesOf } from '../helpers/billing.js';

const SLOW = '-slow';
const UP = '-up';
const OTHER = 'acct_other';
const POOR = 'acct_poor';
const k2 = testKey();
const k3 = testKey();
const otherKey = testKey();
const poorKey = testKey();
const DEADLINE_MS = 400;

let gateway: Gateway;
let stores: Stores;
let up: MediaUpstream;
let devKey: string;
let agentKey: string;

beforeAll(async () => {
  up = await startMediaUpstream();
  const setup = testConfig({
    walletUsd: 1000,
    models: [
      ...mediaModels('test'),
      ...mediaModels('slow', { suffix: SLOW }),
      ...mediaModels('up', { suffix: UP }),
    ],
    accounts: [
      { id: OTHER, walletUsd: 100 },
      { id: POOR, walletUsd: '0.03' },
    ],
    keys: [
      { key: k2, account: ACCOUNT, kind: 'developer' },
      { key: k3, account: ACCOUNT, kind: 'developer' },
      { key: otherKey, account: OTHER, kind: 'developer' },
      { key: poorKey, account: POOR, kind: 'developer' },
    ],
    limits: { inlineImageDeadlineMs: DEADLINE_MS, jobPollIntervalMs: 50 },
  });
  setup.options.upstreams = {
    test: { simulate: true, imageDelayMs: 0, videoDurationMs: 150, chunkDelayMs: 0 },
    slow: { simulate: true, imageDelayMs: 1500, videoDurationMs: 150, chunkDelayMs: 0 },
    up: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs: 20_000 },
  };
  devKey = setup.devKey;
  agentKey = setup.agentKey;
  ({ gateway, stores } = await makeGateway(setup.options));
});

afterAll(async () => {
  await gateway?.dispose();
  await up?.close();
});

function api(path: string, init: { key?: string; body?: unknown; method?: string } = {}): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${init.key ?? devKey}` };
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  return Promise.resolve(gateway.fetch(
    new Request(`http://gw.test/v1${path}`, {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers,
      body: init.body === undefined ? undefined : typeof init.body === 'string' ? init.body : JSON.stringify(init.body),
    }),
    { clientAddress: '192.0.2.1' },
  ));
}

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const body = async (res: Response): Promise<Json> => (await res.json()) as Json;

const wallet = (account = ACCOUNT) => stores.billing.wallet(account);
const ledger = (account = ACCOUNT) => chargesOf(stores.billing.ledger(account));
const leases = (kind: 'image' | 'video', account = ACCOUNT) => stores.limits.activeLeases(`${kind}:${account}`);

/** Waits until the account has no open hold and no in-flight slot. */
async function settled(account = ACCOUNT): Promise<void> {
  await eventually(async () => (await stores.billing.openHolds(account)) === 0, `${account}: no open hold`);
  await eventually(async () => (await leases('image', account)) === 0, `${account}: no image slot`);
  await eventually(async () => (await leases('video', account)) === 0, `${account}: no video slot`);
}

async function entriesFor(id: string, account = ACCOUNT): Promise<LedgerEntry[]> {
  return (await ledger(account)).filter((e) => e.id === id);
}

async function pollJob(path: string, until: (job: Json) => boolean, key = devKey): Promise<Json> {
  let job: Json = {};
  await eventually(
    async () => {
      const res = await api(path, { key });
      expect(res.status).toBe(200);
      job = await body(res);
      return until(job);
    },
    `${path}: ${until.toString()}`,
    10_000,
  );
  return job;
}

describe('images: inline or a job', () => {
  it('faster than the deadline: 200 with the images, billed, slot freed', async () => {
    const before = await wallet();
    const res = await api('/images/generations', { body: { model: IMAGE, prompt: 'a red bicycle', n: 2 } });
    expect(res.status).toBe(200);
    const out = await body(res);
    expect(out.data).toHaveLength(2);
    await settled();
    const e = (await ledger()).at(-1)!;
    expect(e).toMatchObject({ model: IMAGE, units: { kind: 'images', images: 2, tier: '480P' } });
    expect((await wallet()).balance).toBe(before.balance - imageCost('480P', 2));
  });

  it('slower than the deadline: 202 with Location and a job, polled to completed, billed exactly once', async () => {
    const before = await wallet();
    const res = await api('/images/generations', {
      body: { model: IMAGE + SLOW, prompt: 'a slow green bicycle', n: 2, size: '1280x720' },
    });
    expect(res.status).toBe(202);
    const job = await body(res);
    expect(res.headers.get('location')).toBe(`/v1/images/${job.id}`);
    expect(job).toMatchObject({
      object: 'image',
      model: IMAGE + SLOW,
      status: 'in_progress',
      progress: 0,
      completed_at: null,
      error: null,
      result: null,
    });
    expect(job.id).toMatch(/^img_[A-Za-z0-9]{32}$/);
    expect(typeof job.created_at).toBe('number');
    expect(job.expires_at).toBeGreaterThan(job.created_at);

    // While it runs: its slot is taken and its worst case is held.
    expect(await leases('image')).toBe(1);
    expect((await wallet()).held).toBe(imageCost('720P', 2));

    const done = await pollJob(`/images/${job.id}`, (j) => j.status !== 'in_progress');
    expect(done).toMatchObject({ id: job.id, status: 'completed', progress: 100, error: null });
    expect(done.result.data).toHaveLength(2);
    expect(typeof done.completed_at).toBe('number');

    await settled();
    const entries = await entriesFor(job.id);
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({ model: IMAGE + SLOW, units: { kind: 'images', images: 2, tier: '720P' } });
    expect(entries[0]!.cost).toBe(imageCost('720P', 2));
    expect(await wallet()).toEqual({ balance: before.balance - imageCost('720P', 2), held: 0n });

    // Polling a finished job again bills nothing more.
    expect((await body(await api(`/images/${job.id}`))).status).toBe('completed');
    expect(await entriesFor(job.id)).toHaveLength(1);
  });

  it('a job whose upstream fails ends failed, refunded', async () => {
    const before = await wallet();
    const res = await api('/images/generations', { body: { model: IMAGE + SLOW, prompt: 'doomed [fail]' } });
    expect(res.status).toBe(202);
    const job = await body(res);
    const done = await pollJob(`/images/${job.id}`, (j) => j.status !== 'in_progress');
    expect(done.status).toBe('failed');
    expect(done.error).toEqual({ code: 'upstream_error', message: expect.any(String) });
    expect(done.result).toBeNull();
    await settled();
    expect(await entriesFor(job.id)).toHaveLength(0);
    expect(await wallet()).toEqual(before);
  });

  it('an inline failure is 502 and charges nothing', async () => {
    const before = await wallet();
    const n = (await ledger()).length;
    const res = await api('/images/generations', { body: { model: IMAGE, prompt: 'doomed [fail]' } });
    expect(res.status).toBe(502);
    expect((await body(res)).error.code).toBe('upstream_error');
    await settled();
    expect(await ledger()).toHaveLength(n);
    expect(await wallet()).toEqual(before);
  });

  it('402 when the wallet cannot hold the price: no upstream call, no slot kept', async () => {
    const before = up.imageRequests().length;
    // 0.03 USD buys one 720P image (0.04)? No.
    const res = await api('/images/generations', { key: poorKey, body: { model: IMAGE + UP, prompt: 'x', resolution: '720P' } });
    expect(res.status).toBe(402);
    expect(res.headers.get('x-should-retry')).toBe('false');
    expect((await body(res)).error).toMatchObject({ code: 'insufficient_quota', metadata: { limit_source: 'wallet' } });
    expect(up.imageRequests()).toHaveLength(before);
    expect(await leases('image', POOR)).toBe(0);
    expect(await stores.billing.openHolds(POOR)).toBe(0);
  });
});

describe('in-flight image cap (8 per account, across its keys)', () => {
  it('9 concurrent slow images over 3 keys: 8 accepted, 1 refused without Retry-After; another account is unaffected; the slot frees on completion', async () => {
    const gate = up.holdImages();
    const before = await wallet();
    const n0 = (await ledger()).length;
    const keys = [devKey, k2, k3];
    const mine = Array.from({ length: 9 }, (_, i) =>
      api('/images/generations', { key: keys[i % 3], body: { model: IMAGE + UP, prompt: `in flight ${i}` } }),
    );
    const theirs = api('/images/generations', { key: otherKey, body: { model: IMAGE + UP, prompt: 'other account' } });
    const answers = await Promise.all(mine);

    const accepted = answers.filter((r) => r.status === 202);
    const refused = answers.filter((r) => r.status === 429);
    expect(accepted).toHaveLength(8);
    expect(refused).toHaveLength(1);
    const r = refused[0]!;
    expect((await body(r)).error).toMatchObject({
      code: 'rate_limit_exceeded',
      type: 'rate_limit_exceeded',
      metadata: { limit: 'in_flight_image_jobs' },
    });
    expect(r.headers.get('retry-after')).toBeNull();
    expect(r.headers.get('retry-after-ms')).toBeNull();
    expect((await theirs).status).toBe(202);

    // All 8 (and the other account's one) are in flight at the upstream; the refused one never got there.
    await eventually(() => up.imageRequests().filter((q) => String(q.fields.prompt).startsWith('in flight')).length === 8, '8 upstream calls');
    expect(await leases('image')).toBe(8);
    expect(await leases('image', OTHER)).toBe(1);
    expect((await wallet()).held).toBe(8n * imageCost('480P'));
    // Still full: a 10th now is refused too, whatever the key.
    expect((await api('/images/generations', { key: k2, body: { model: IMAGE + UP, prompt: 'tenth, too early' } })).status).toBe(429);

    gate.open();
    await settled();
    await settled(OTHER);
    const jobs = await Promise.all(accepted.map(body));
    for (const j of jobs) expect((await entriesFor(j.id)).length).toBe(1);
    expect(await ledger()).toHaveLength(n0 + 8);
    expect((await wallet()).balance).toBe(before.balance - 8n * imageCost('480P'));
    for (const j of jobs) expect((await body(await api(`/images/${j.id}`))).status).toBe('completed');

    // The slots are free again: a 10th is accepted (and, the upstream being quick now, inline).
    const tenth = await api('/images/generations', { key: k3, body: { model: IMAGE + UP, prompt: 'tenth' } });
    expect(tenth.status).toBe(200);
    await settled();
  });

  it('validation comes before the cap, the cap before the hold', async () => {
    const gate = up.holdImages();
    const jobs = await Promise.all(
      Array.from({ length: 8 }, (_, i) => api('/images/generations', { body: { model: IMAGE + UP, prompt: `fill ${i}` } })),
    );
    expect(jobs.map((r) => r.status)).toEqual(Array(8).fill(202));
    // An invalid request is 400 even with the cap reached...
    const invalid = await api('/images/generations', { body: { model: IMAGE + UP, prompt: 'x', n: 0 } });
    expect(invalid.status).toBe(400);
    // ...and a capped one places no hold: still exactly 8 held.
    expect((await api('/images/generations', { body: { model: IMAGE + UP, prompt: 'capped' } })).status).toBe(429);
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(8);
    gate.open();
    await settled();
  });
});

describe('video jobs', () => {
  it('complete, settle and free their slot with nobody polling', async () => {
    const before = await wallet();
    const res = await api('/videos', { body: { model: VIDEO + UP, prompt: 'a tandem at dawn', seconds: 6, resolution: '1080P' } });
    expect(res.status).toBe(202);
    const job = await body(res);
    expect(res.headers.get('location')).toBe(`/v1/videos/${job.id}`);
    expect(job).toMatchObject({ object: 'video', status: 'queued', progress: 0, prompt: 'a tandem at dawn', seconds: '6', result: null });
    expect(await leases('video')).toBe(1);
    expect((await wallet()).held).toBe(videoCost('1080P', 6));

    const upstreamVideo = up.videos().at(-1)!;
    up.setVideoProgress(upstreamVideo.id, 55);
    await eventually(async () => (await stores.jobs.get(job.id))?.progress === 55, 'progress tracked');
    expect((await stores.jobs.get(job.id))?.status).toBe('in_progress');
    up.finishVideo(upstreamVideo.id);

    // Nobody polls the gateway: it tracks the upstream job itself.
    await eventually(async () => (await entriesFor(job.id)).length === 1, 'settled without polling');
    await settled();
    const [e] = await entriesFor(job.id);
    expect(e).toMatchObject({ model: VIDEO + UP, units: { kind: 'seconds', seconds: 6, tier: '1080P' } });
    expect(e!.cost).toBe(videoCost('1080P', 6));
    expect(await wallet()).toEqual({ balance: before.balance - videoCost('1080P', 6), held: 0n });

    const done = await body(await api(`/videos/${job.id}`));
    expect(done).toMatchObject({ status: 'completed', progress: 100, error: null });
    expect(done.result).toMatchObject({ url: `/v1/videos/${job.id}/content`, content_type: 'video/mp4', seconds: 6 });
    const content = await api(`/videos/${job.id}/content`);
    expect(content.status).toBe(200);
    expect(content.headers.get('content-type')).toBe('video/mp4');
    expect(Buffer.from(await content.arrayBuffer())).toEqual(up.clip);
  });

  it('a job the upstream cancelled on its side ends failed at once: its hold and slot freed, nothing billed', async () => {
    const before = await wallet();
    const res = await api('/videos', { body: { model: VIDEO + UP, prompt: 'a regatta [cancelled]', seconds: 4 } });
    expect(res.status).toBe(202);
    const job = await body(res);
    up.finishVideo(up.videos().at(-1)!.id);
    await eventually(async () => (await stores.jobs.get(job.id))?.status === 'failed', 'failed without polling');
    await settled();
    expect((await body(await api(`/videos/${job.id}`))).error).toMatchObject({ code: 'upstream_cancelled' });
    expect(await entriesFor(job.id)).toHaveLength(0);
    expect(await wallet()).toEqual(before);
    expect(await leases('video')).toBe(0);
  });

  it('on the simulator: completes with nobody polling; the clip matches the billed resolution', async () => {
    const res = await api('/videos', { body: { model: VIDEO, prompt: 'a fixie', seconds: '3', resolution: '1080P' } });
    expect(res.status).toBe(202);
    const job = await body(res);
    expect(job).toMatchObject({ seconds: '3', size: '1080P' });
    await eventually(async () => (await entriesFor(job.id)).length === 1, 'settled without polling');
    await settled();
    expect((await entriesFor(job.id))[0]!.cost).toBe(videoCost('1080P', 3));
    const done = await stores.jobs.get(job.id);
    expect(done?.status).toBe('completed');
    // Billed as 1080P, so the simulated clip is 1080P too (it used to claim 720x1280).
    expect(done?.result).toMatchObject({ seconds: 3, size: '1080x1920' });
  });

  it('a failed upstream job ([fail]) is refunded: no ledger entry, wallet back, error {code, message}', async () => {
    const before = await wallet();
    const res = await api('/videos', { body: { model: VIDEO, prompt: 'a crash [fail]', seconds: 8, size: '1280x720' } });
    expect(res.status).toBe(202);
    const job = await body(res);
    expect((await wallet()).held).toBe(videoCost('720P', 8));

    await eventually(async () => (await stores.jobs.get(job.id))?.status === 'failed', 'failed without polling');
    await settled();
    const failed = await body(await api(`/videos/${job.id}`));
    expect(failed).toMatchObject({ status: 'failed', result: null });
    expect(failed.error).toEqual({ code: 'generation_failed', message: expect.any(String) });
    expect(await entriesFor(job.id)).toHaveLength(0);
    expect(await wallet()).toEqual(before);

    const content = await api(`/videos/${job.id}/content`);
    expect(content.status).toBe(400);
  });

  it("another account's key gets 404 job_not_found on the job and its content", async () => {
    const res = await api('/videos', { body: { model: VIDEO, prompt: 'mine' } });
    const job = await body(res);
    await pollJob(`/videos/${job.id}`, (j) => j.status === 'completed');
    for (const path of [`/videos/${job.id}`, `/videos/${job.id}/content`]) {
      const r = await api(path, { key: otherKey });
      expect(r.status).toBe(404);
      expect((await body(r)).error).toMatchObject({ code: 'job_not_found', type: 'invalid_request_error' });
    }
    // A video id is not an image job, and unknown ids are 404 too.
    expect((await body(await api(`/images/${job.id}`))).error.code).toBe('job_not_found');
    expect((await body(await api('/videos/video_unknown'))).error.code).toBe('job_not_found');
    // An image job is not visible to another account either.
    const img = await body(await api('/images/generations', { body: { model: IMAGE + SLOW, prompt: 'hidden' } }));
    const r = await api(`/images/${img.id}`, { key: otherKey });
    expect(r.status).toBe(404);
    expect((await body(r)).error.code).toBe('job_not_found');
    await pollJob(`/images/${img.id}`, (j) => j.status === 'completed');
    await settled();
  });
});

describe('billing exactness', () => {
  it('images: n x the tier price; the tier is the highest any of resolution, size (shorter side) and quality imply, else the default', async () => {
    const cases: Array<[Json, keyof typeof IMAGE_TIERS, number]> = [
      [{}, '480P', 1],
      [{ size: 'auto' }, '480P', 1],
      [{ n: 3, size: '1792x1024' }, '1080P', 3],
      [{ size: '1280x720' }, '720P', 1],
      [{ size: '720x721' }, '720P', 1],
      [{ size: '481x2000' }, '720P', 1],
      [{ size: '480x640' }, '480P', 1],
      [{ size: '1080x1920' }, '1080P', 1],
      [{ size: '1081x1081' }, '4K', 1],
      [{ size: '2048x2048', n: 2 }, '4K', 2],
      [{ resolution: '720P', size: '2048x2048' }, '4K', 1],
      [{ resolution: '1080P', size: '640x480' }, '1080P', 1],
      [{ resolution: '480P', size: '1920x1080' }, '1080P', 1],
      [{ quality: '720P', size: '640x480' }, '720P', 1],
      [{ quality: 'hd', size: '640x480' }, '480P', 1],
      [{ resolution: '4K', n: 10 }, '4K', 10],
    ];
    for (const [fields, tier, n] of cases) {
      const before = await wallet();
      const count = (await ledger()).length;
      const res = await api('/images/generations', { body: { model: IMAGE, prompt: 'priced', ...fields } });
      expect(res.status, JSON.stringify(fields)).toBe(200);
      expect((await body(res)).data).toHaveLength(n);
      await settled();
      const all = await ledger();
      expect(all, JSON.stringify(fields)).toHaveLength(count + 1);
      expect(all.at(-1)!.units, JSON.stringify(fields)).toEqual({ kind: 'images', images: n, tier });
      expect(all.at(-1)!.cost, JSON.stringify(fields)).toBe(imageCost(tier, n));
      expect((await wallet()).balance).toBe(before.balance - imageCost(tier, n));
    }
    // The numbers themselves: 10 x 0.16 = 1.6 USD; 3 x 0.08 = 0.24 USD.
    expect(imageCost('4K', 10)).toBe(parseUsd('1.6'));
    expect(imageCost('1080P', 3)).toBe(parseUsd('0.24'));
  });

  it('videos: seconds x the tier price; the highest tier mode, resolution and size imply, else the default', async () => {
    const cases: Array<[Json, keyof typeof VIDEO_TIERS, number]> = [
      [{}, '480P', 4],
      [{ seconds: 8, size: '1280x720' }, '720P', 8],
      [{ seconds: '5', resolution: '1080P' }, '1080P', 5],
      [{ mode: 'fast', resolution: '1080P' }, '1080P', 4],
      [{ mode: 'fast', seconds: 12, size: '1920x1080' }, '1080P', 12],
      [{ mode: 'fast', seconds: 6 }, 'fast', 6],
      [{ seconds: 3, size: '1920x1080' }, '1080P', 3],
      [{ seconds: 2, size: '640x480' }, '480P', 2],
    ];
    const before = await wallet();
    const jobs = await Promise.all(
      cases.map(async ([fields]) => {
        const res = await api('/videos', { body: { model: VIDEO, prompt: 'priced video', ...fields } });
        expect(res.status, JSON.stringify(fields)).toBe(202);
        return body(res);
      }),
    );
    let total = 0n;
    for (const [i, [fields, tier, seconds]] of cases.entries()) {
      const id = jobs[i]!.id as string;
      await eventually(async () => (await entriesFor(id)).length === 1, `video ${JSON.stringify(fields)} settled`);
      const [e] = await entriesFor(id);
      expect(e!.units, JSON.stringify(fields)).toEqual({ kind: 'seconds', seconds, tier });
      expect(e!.cost, JSON.stringify(fields)).toBe(videoCost(tier, seconds));
      total += videoCost(tier, seconds);
    }
    await settled();
    expect(await wallet()).toEqual({ balance: before.balance - total, held: 0n });
    expect(videoCost('fast', 6)).toBe(parseUsd('0.18'));
  });

  it('speech: tokens of the input (gpt-tokenizer) x the token price', async () => {
    const inputs = [
      'Hello.',
      'The Porter cargo e-bike carries 80 kg up front — and a child seat behind.',
      'Zürich → København: 12 Räder, 3 Rahmen, 🚲🚲🚲.',
      'x'.repeat(4096),
      // 4096 characters, 8192 UTF-16 code units: the limit counts characters, as OpenAI's does.
      '🚲'.repeat(4096),
    ];
    for (const input of inputs) {
      const before = await wallet();
      const res = await api('/audio/speech', { body: { model: AUDIO, input, voice: 'alloy', response_format: 'pcm' } });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('audio/pcm');
      expect((await res.arrayBuffer()).byteLength).toBeGreaterThan(0);
      const id = res.headers.get('x-request-id')!;
      await eventually(async () => (await entriesFor(id)).length === 1, 'speech settled');
      await settled();
      const [e] = await entriesFor(id);
      expect(e!.units).toEqual({ kind: 'speech_tokens', tokens: speechTokens(input) });
      expect(e!.cost).toBe(speechCost(input));
      expect((await wallet()).balance).toBe(before.balance - speechCost(input));
    }
    // e.g. 4096 x "x" at 0.000015 USD a token:
    expect(speechCost('x'.repeat(4096))).toBe(BigInt(speechTokens('x'.repeat(4096))) * parseUsd(SPEECH_PRICE));
  });
});

describe('validation', () => {
  const cases: Array<[string, string, Json, string | null]> = [
    ['images: prompt required', '/images/generations', { model: IMAGE }, 'prompt'],
    ['images: n 0', '/images/generations', { model: IMAGE, prompt: 'x', n: 0 }, 'n'],
    ['images: n 11', '/images/generations', { model: IMAGE, prompt: 'x', n: 11 }, 'n'],
    ['images: n 1.5', '/images/generations', { model: IMAGE, prompt: 'x', n: 1.5 }, 'n'],
    ['images: n "2"', '/images/generations', { model: IMAGE, prompt: 'x', n: '2' }, 'n'],
    ['images: size not WxH', '/images/generations', { model: IMAGE, prompt: 'x', size: 'large' }, 'size'],
    ['images: unpriced size tier', '/images/generations', { model: IMAGE_SMALL, prompt: 'x', size: '1024x1024' }, 'size'],
    ['images: unpriced resolution', '/images/generations', { model: IMAGE_SMALL, prompt: 'x', resolution: '4K' }, 'resolution'],
    ['images: unknown resolution', '/images/generations', { model: IMAGE, prompt: 'x', resolution: '8K' }, 'resolution'],
    ['images: response_format', '/images/generations', { model: IMAGE, prompt: 'x', response_format: 'png' }, 'response_format'],
    ['images: model required', '/images/generations', { prompt: 'x' }, 'model'],
    ['speech: input over 4096 chars', '/audio/speech', { model: AUDIO, input: 'x'.repeat(4097), voice: 'alloy' }, 'input'],
    ['speech: input over 4096 characters (code points)', '/audio/speech', { model: AUDIO, input: '🚲'.repeat(4097), voice: 'alloy' }, 'input'],
    ['speech: input required', '/audio/speech', { model: AUDIO, voice: 'alloy' }, 'input'],
    ['speech: voice required', '/audio/speech', { model: AUDIO, input: 'hi' }, 'voice'],
    ['speech: response_format', '/audio/speech', { model: AUDIO, input: 'hi', voice: 'alloy', response_format: 'ogg' }, 'response_format'],
    ['speech: speed', '/audio/speech', { model: AUDIO, input: 'hi', voice: 'alloy', speed: 9 }, 'speed'],
    ['videos: prompt required', '/videos', { model: VIDEO }, 'prompt'],
    ['videos: unknown mode', '/videos', { model: VIDEO, prompt: 'x', mode: 'turbo' }, 'mode'],
    ['videos: unpriced resolution', '/videos', { model: VIDEO, prompt: 'x', resolution: '4K' }, 'resolution'],
    ['videos: unpriced size tier', '/videos', { model: VIDEO, prompt: 'x', size: '3840x2160' }, 'size'],
    ['videos: seconds 0', '/videos', { model: VIDEO, prompt: 'x', seconds: 0 }, 'seconds'],
    ['videos: seconds "0"', '/videos', { model: VIDEO, prompt: 'x', seconds: '0' }, 'seconds'],
    ['videos: seconds 2.5', '/videos', { model: VIDEO, prompt: 'x', seconds: 2.5 }, 'seconds'],
  ];
  it.each(cases)('%s -> 400 param', async (_what, path, payload, param) => {
    const res = await api(path, { body: payload });
    expect(res.status).toBe(400);
    const err = (await body(res)).error;
    expect(err).toMatchObject({ code: 'invalid_request', type: 'invalid_request_error', param });
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
    expect(await leases('image')).toBe(0);
    expect(await leases('video')).toBe(0);
  });

  it('bodies that are not JSON: 400 invalid_json', async () => {
    for (const path of ['/images/generations', '/audio/speech', '/videos']) {
      const res = await api(path, { body: '{not json' });
      expect(res.status, path).toBe(400);
      expect((await body(res)).error.code, path).toBe('invalid_json');
    }
  });

  it('unknown model, or a model of another type: 404 model_not_found', async () => {
    for (const [path, payload] of [
      ['/images/generations', { model: 'test/nope', prompt: 'x' }],
      ['/images/generations', { model: MODEL, prompt: 'x' }],
      ['/images/generations', { model: VIDEO, prompt: 'x' }],
      ['/audio/speech', { model: IMAGE, input: 'x', voice: 'alloy' }],
      ['/videos', { model: AUDIO, prompt: 'x' }],
    ] as const) {
      const res = await api(path, { body: payload });
      expect(res.status, `${path} ${payload.model}`).toBe(404);
      expect((await body(res)).error).toMatchObject({ code: 'model_not_found', param: 'model' });
    }
  });

  it('an agent key gets 403 permission_denied on every media endpoint', async () => {
    const video = await body(await api('/videos', { body: { model: VIDEO, prompt: 'for the agent test' } }));
    const image = await body(await api('/images/generations', { body: { model: IMAGE + SLOW, prompt: 'for the agent test' } }));
    const calls: Array<[string, unknown]> = [
      ['/images/generations', { model: IMAGE, prompt: 'x' }],
      ['/audio/speech', { model: AUDIO, input: 'x', voice: 'alloy' }],
      ['/videos', { model: VIDEO, prompt: 'x' }],
      [`/images/${image.id}`, undefined],
      [`/videos/${video.id}`, undefined],
      [`/videos/${video.id}/content`, undefined],
    ];
    for (const [path, payload] of calls) {
      const res = await api(path, { key: agentKey, body: payload });
      expect(res.status, path).toBe(403);
      expect((await body(res)).error, path).toMatchObject({ code: 'permission_denied', type: 'permission_error' });
    }
    await pollJob(`/images/${image.id}`, (j) => j.status === 'completed');
    await pollJob(`/videos/${video.id}`, (j) => j.status === 'completed');
    await settled();
  });
});

describe('GET /models?type=', () => {
  it('image, audio and video rows with parameters, pricing {unit, from, tiers} and owned_by = serviceName', async () => {
    const image = await body(await api('/models?type=image'));
    expect(image.object).toBe('list');
    expect(image.data.map((m: Json) => m.id)).toEqual([IMAGE, IMAGE_SMALL, IMAGE + SLOW, IMAGE_SMALL + SLOW, IMAGE + UP, IMAGE_SMALL + UP]);
    expect(image.data[0]).toEqual({
      id: IMAGE,
      object: 'model',
      type: 'image',
      name: 'Test Image',
      owned_by: 'test-gateway',
      created: 0,
      pricing: { unit: 'image', from: '0.02', tiers: { ...IMAGE_TIERS } },
      posture: 'GA',
      retires_at: null,
      status: 'Active',
      parameters: expect.objectContaining({ type: 'object', properties: expect.objectContaining({ prompt: { type: 'string' } }) }),
    });
    const audio = await body(await api('/models?type=audio'));
    expect(audio.data[0]).toMatchObject({
      id: AUDIO,
      type: 'audio',
      owned_by: 'test-gateway',
      pricing: { unit: 'token', from: SPEECH_PRICE, tiers: {} },
      parameters: expect.objectContaining({ type: 'object' }),
    });
    const video = await body(await api('/models?type=video'));
    expect(video.data[0]).toMatchObject({
      id: VIDEO,
      type: 'video',
      owned_by: 'test-gateway',
      pricing: { unit: 'second', from: '0.05', tiers: { ...VIDEO_TIERS } },
      parameters: expect.objectContaining({ type: 'object' }),
    });
    for (const list of [image, audio, video]) for (const row of list.data) expect(row.context_length).toBeUndefined();
    // Without ?type the listing is text only.
    const text = await body(await api('/models'));
    expect(text.data.map((m: Json) => m.type)).toEqual(['text']);
  });

  it('an agent key sees an empty list with ?type=; ?type=bogus is 400', async () => {
    for (const t of ['image', 'audio', 'video']) {
      const res = await api(`/models?type=${t}`, { key: agentKey });
      expect(res.status).toBe(200);
      expect(await body(res)).toEqual({ object: 'list', data: [] });
    }
    expect((await body(await api('/models', { key: agentKey }))).data.map((m: Json) => m.id)).toEqual([MODEL]);
    for (const key of [devKey, agentKey]) {
      const res = await api('/models?type=bogus', { key });
      expect(res.status).toBe(400);
      expect((await body(res)).error).toMatchObject({ code: 'invalid_request', param: 'type' });
    }
  });
});
