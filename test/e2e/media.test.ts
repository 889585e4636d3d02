/**
 * The official `openai` SDK against a real node:http gateway for media: images.generate,
 * audio.speech.create and videos.create / retrieve / downloadContent on the built-in
 * simulator, billed exactly; and the SDK's multipart videos.create relayed upstream as
 * multipart to an HTTP media upstream, with the upstream's key never leaving the gateway.
 */
import OpenAI, { BadRequestError, NotFoundError, PermissionDeniedError, RateLimitError, toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseUsd } from '../../src/billing/money.js';
import type { LedgerEntry } from '../../src/stores/types.js';
import { ACCOUNT, UPSTREAM_API_KEY, eventually, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import {
  AUDIO,
  IMAGE,
  VIDEO,
  imageCost,
  mediaModels,
  speechCost,
  speechTokens,
  videoCost,
} from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { chargesOf } from '../helpers/billing.js';

const OTHER = 'acct_other';
const otherKey = testKey();
const RELAY = '-relay';

let gw: RunningGateway;
let up: MediaUpstream;
let devKey: string;
let agentKey: string;

beforeAll(async () => {
  up = await startMediaUpstream();
  const setup = testConfig({
    walletUsd: 100,
    models: [...mediaModels('test'), ...mediaModels('relay', { suffix: RELAY, upstreamModels: true })],
    accounts: [{ id: OTHER, walletUsd: 10 }],
    keys: [{ key: otherKey, account: OTHER, kind: 'developer' }],
    limits: { jobPollIntervalMs: 50, inFlightVideoJobs: 2 },
  });
  setup.options.upstreams = {
    test: { simulate: true, imageDelayMs: 0, videoDurationMs: 200, chunkDelayMs: 0 },
    relay: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs: 10_000 },
  };
  devKey = setup.devKey;
  agentKey = setup.agentKey;
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const client = (apiKey = devKey) => new OpenAI({ apiKey, baseURL: gw.baseURL, maxRetries: 0 });

/** The ledger entry with `id`, once it is there and no hold is open. */
async function entry(account: string, id: string): Promise<LedgerEntry> {
  await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(account))).some((e) => e.id === id), `ledger entry ${id}`);
  await eventually(async () => (await gw.stores.billing.openHolds(account)) === 0, 'no open hold');
  const all = (await chargesOf(gw.gateway.admin.ledger(account))).filter((e) => e.id === id);
  expect(all).toHaveLength(1);
  return all[0]!;
}

const balance = async (account = ACCOUNT) => (await gw.stores.billing.wallet(account)).balance;

async function rejection(fn: () => Promise<unknown>): Promise<unknown> {
  try {
    await fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected the call to fail');
}

describe('images.generate', () => {
  it('returns the images inline and bills n x the tier of the size', async () => {
    const before = await balance();
    const ledgerBefore = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;
    const { data: res, response } = await client()
      .images.generate({ model: IMAGE, prompt: 'a red bicycle', n: 2, size: '1024x1024' })
      .withResponse();
    expect(response.status).toBe(200);
    expect(res.data).toHaveLength(2);
    expect(res.data![0]!.b64_json).toMatch(/^iVBORw0KGgo/); // a PNG
    expect(response.headers.get('x-request-id')).toMatch(/^req_/);

    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === ledgerBefore + 1, 'one entry');
    const e = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).at(-1)!;
    // 1024x1024: the shorter side 1024 is 1080P, 0.08 USD a picture.
    expect(e).toMatchObject({ model: IMAGE, units: { kind: 'images', images: 2, tier: '1080P' } });
    expect(e.cost).toBe(imageCost('1080P', 2));
    expect(e.cost).toBe(parseUsd('0.16'));
    expect(await balance()).toBe(before - e.cost);
  });

  it('response_format url', async () => {
    const res = await client().images.generate({ model: IMAGE, prompt: 'a blue bicycle', response_format: 'url' });
    expect(res.data![0]!.url).toMatch(/^data:image\/png;base64,/);
  });

  it('SDK error classes: 400 param n, 404 model, 403 agent key', async () => {
    const bad = await rejection(() => client().images.generate({ model: IMAGE, prompt: 'x', n: 11 }));
    expect(bad).toBeInstanceOf(BadRequestError);
    expect((bad as BadRequestError).param).toBe('n');
    const unknown = await rejection(() => client().images.generate({ model: 'test/nope', prompt: 'x' }));
    expect(unknown).toBeInstanceOf(NotFoundError);
    expect((unknown as NotFoundError).code).toBe('model_not_found');
    const agent = await rejection(() => client(agentKey).images.generate({ model: IMAGE, prompt: 'x' }));
    expect(agent).toBeInstanceOf(PermissionDeniedError);
    expect((agent as PermissionDeniedError).code).toBe('permission_denied');
  });
});

describe('audio.speech.create', () => {
  it('streams the bytes with the format content type and bills tokens x price', async () => {
    const input = 'Welcome to Meridian Cycles. Your Wayfarer touring frame ships on Tuesday.';
    const before = await balance();
    const res = await client().audio.speech.create({ model: AUDIO, voice: 'alloy', input, response_format: 'wav' });
    expect(res.headers.get('content-type')).toBe('audio/wav');
    const bytes = Buffer.from(await res.arrayBuffer());
    expect(bytes.subarray(0, 4).toString('latin1')).toBe('RIFF');
    expect(bytes.subarray(8, 12).toString('latin1')).toBe('WAVE');

    const e = await entry(ACCOUNT, res.headers.get('x-request-id')!);
    expect(e).toMatchObject({ model: AUDIO, units: { kind: 'speech_tokens', tokens: speechTokens(input) } });
    expect(e.cost).toBe(speechCost(input));
    expect(await balance()).toBe(before - e.cost);
  });

  it('mp3 by default', async () => {
    const res = await client().audio.speech.create({ model: AUDIO, voice: 'alloy', input: 'Hello there.' });
    expect(res.headers.get('content-type')).toBe('audio/mpeg');
    const bytes = new Uint8Array(await res.arrayBuffer());
    expect([bytes[0], bytes[1]]).toEqual([0xff, 0xfb]); // an MPEG audio frame header
    await entry(ACCOUNT, res.headers.get('x-request-id')!);
  });
});

describe('videos.create / retrieve / downloadContent', () => {
  it('on the simulator: a queued job that completes, billed seconds x tier once, content streamed', async () => {
    const before = await balance();
    const video = await client().videos.create({ model: VIDEO, prompt: 'a bicycle crossing a bridge', seconds: '8', size: '1280x720' });
    expect(video).toMatchObject({ object: 'video', model: VIDEO, status: 'queued', progress: 0, error: null });
    expect(video.id).toMatch(/^video_/);

    let done = video;
    await eventually(async () => {
      done = await client().videos.retrieve(video.id);
      return done.status === 'completed';
    }, 'video completed');
    expect(done).toMatchObject({
      id: video.id,
      status: 'completed',
      progress: 100,
      prompt: 'a bicycle crossing a bridge',
      error: null,
    });
    expect((done as unknown as { result: unknown }).result).toEqual({
      url: `/v1/videos/${video.id}/content`,
      content_type: 'video/mp4',
      seconds: 8,
      size: '1280x720',
    });

    // 1280x720: the shorter side 720 is 720P, 0.1 USD a second.
    const e = await entry(ACCOUNT, video.id);
    expect(e).toMatchObject({ model: VIDEO, units: { kind: 'seconds', seconds: 8, tier: '720P' } });
    expect(e.cost).toBe(videoCost('720P', 8));
    expect(await balance()).toBe(before - e.cost);

    const content = await client().videos.downloadContent(video.id);
    expect(content.headers.get('content-type')).toBe('video/mp4');
    const bytes = Buffer.from(await content.arrayBuffer());
    expect(bytes.subarray(4, 8).toString('latin1')).toBe('ftyp');

    // Polling again never bills again.
    await client().videos.retrieve(video.id);
    expect((await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).filter((x) => x.id === video.id)).toHaveLength(1);

    // Another account cannot see the job or its content.
    const notMine = await rejection(() => client(otherKey).videos.retrieve(video.id));
    expect(notMine).toBeInstanceOf(NotFoundError);
    expect((notMine as NotFoundError).code).toBe('job_not_found');
    const notMyContent = await rejection(() => client(otherKey).videos.downloadContent(video.id));
    expect(notMyContent).toBeInstanceOf(NotFoundError);
  });

  it('the SDK sends multipart; the gateway relays it upstream as multipart with the upstream model and key', async () => {
    const before = up.requests.length;
    const reference = await toFile(Buffer.from('REFERENCE-IMAGE-BYTES'), 'reference.png', { type: 'image/png' });
    const video = await client().videos.create({
      model: VIDEO + RELAY,
      prompt: 'a cargo bike in the rain',
      seconds: '4',
      size: '720x1280',
      input_reference: reference,
    });
    expect(video.status).toBe('queued');

    const sent = up.requests.slice(before).find((r) => r.method === 'POST' && r.path === '/videos')!;
    expect(sent.contentType).toMatch(/^multipart\/form-data; boundary=/);
    expect(sent.fields).toMatchObject({ model: 'provider-video-1', prompt: 'a cargo bike in the rain', seconds: '4', size: '720x1280' });
    // The file part is relayed too (the body was re-encoded only to swap in the upstream model).
    const form = await new Response(new Uint8Array(sent.raw), { headers: { 'content-type': sent.contentType } }).formData();
    const file = form.get('input_reference') as File;
    expect(file.name).toBe('reference.png');
    expect(file.type).toBe('image/png');
    expect(Buffer.from(await file.arrayBuffer()).toString()).toBe('REFERENCE-IMAGE-BYTES');
    expect(sent.headers.authorization).toBe(`Bearer ${UPSTREAM_API_KEY}`);

    const upstreamVideo = up.videos().at(-1)!;
    up.setVideoProgress(upstreamVideo.id, 40);
    await eventually(async () => (await client().videos.retrieve(video.id)).progress === 40, 'progress relayed');
    up.finishVideo(upstreamVideo.id);
    await eventually(async () => (await client().videos.retrieve(video.id)).status === 'completed', 'completed');

    const e = await entry(ACCOUNT, video.id);
    expect(e.cost).toBe(videoCost('720P', 4));

    const content = await client().videos.downloadContent(video.id);
    expect(Buffer.from(await content.arrayBuffer())).toEqual(up.clip);
    const fetched = up.requests.at(-1)!;
    expect(fetched.path).toBe(`/videos/${upstreamVideo.id}/content`);
    expect(fetched.headers.authorization).toBe(`Bearer ${UPSTREAM_API_KEY}`);
    for (const r of up.requests) expect(JSON.stringify(r.headers)).not.toContain(devKey);
  });

  it('the in-flight video cap is a RateLimitError without retry headers', async () => {
    const before = up.videos().length;
    const a = await client(otherKey).videos.create({ model: VIDEO + RELAY, prompt: 'one' });
    const b = await client(otherKey).videos.create({ model: VIDEO + RELAY, prompt: 'two' });
    const third = await rejection(() => client(otherKey).videos.create({ model: VIDEO + RELAY, prompt: 'three' }));
    expect(third).toBeInstanceOf(RateLimitError);
    const rl = third as RateLimitError;
    expect((rl.error as { metadata?: unknown }).metadata).toEqual({ limit: 'in_flight_video_jobs' });
    expect(rl.headers.get('retry-after')).toBeNull();
    expect(rl.headers.get('retry-after-ms')).toBeNull();
    // Nothing reached the upstream for the refused one.
    expect(up.videos()).toHaveLength(before + 2);

    for (const v of up.videos().slice(before)) up.finishVideo(v.id);
    await eventually(async () => (await gw.stores.limits.activeLeases(`video:${OTHER}`)) === 0, 'slots freed');
    await entry(OTHER, a.id);
    await entry(OTHER, b.id);
  });
});
