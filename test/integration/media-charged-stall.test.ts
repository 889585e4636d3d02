/**
 * A job's charge lands, then its instance stalls (its store calls hang: a partition, a long
 * pause) before it marks the job completed. Another instance adopts the job once its claim
 * lapses. The job was paid for, so it must end `completed`, charged once, never `failed`
 * ("nothing was charged") with the charge kept: the adopter finds the result and its charge
 * recorded (they are written before the charge) and completes it, whatever it would otherwise
 * conclude (an image's work lost, a video the upstream no longer knows).
 * A and B share one set of memory stores; A's are frozen right after its settle.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { Stores } from '../../src/stores/types.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, eventually } from '../helpers/gateway.js';
import { IMAGE, VIDEO, freezable, imageCost, mediaSetup, videoCost } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const TTL_MS = 1000;

/** A video upstream that can forget a job (a provider purging it once it is done). */
async function forgetfulVideoUpstream() {
  const jobs = new Map<string, { status: string; gone: boolean }>();
  let next = 1;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      const path = (req.url ?? '').replace(/^\/v1/, '');
      const send = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (req.method === 'POST' && path === '/videos') {
        const id = `up_${next++}`;
        jobs.set(id, { status: 'queued', gone: false });
        return send(200, { id, object: 'video', status: 'queued', progress: 0 });
      }
      const m = /^\/videos\/([^/?]+)$/.exec(path);
      const job = m ? jobs.get(m[1]!) : undefined;
      if (!job || job.gone) return send(404, { error: { message: 'no such video', type: 'invalid_request_error' } });
      return send(200, { id: m![1], object: 'video', status: job.status, progress: job.status === 'completed' ? 100 : 10, seconds: '4', size: '1280x720' });
    });
  });
  server.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    last: () => [...jobs.keys()].at(-1)!,
    finish: (id: string) => void (jobs.get(id)!.status = 'completed'),
    forget: (id: string) => void (jobs.get(id)!.gone = true),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

let media: MediaUpstream;
let videos: Awaited<ReturnType<typeof forgetfulVideoUpstream>>;
beforeAll(async () => {
  media = await startMediaUpstream();
  videos = await forgetfulVideoUpstream();
});
afterAll(async () => {
  await media?.close();
  await videos?.close();
});

const running: Array<{ gw: Gateway; thaw?: () => void }> = [];
afterEach(async () => {
  for (const g of running.splice(0)) {
    g.thaw?.();
    await g.gw.dispose();
  }
});

/** A (whose stores freeze right after its first settle lands) and B, on one set of memory stores. */
async function pair(upstreamUrl: string, bLacksVideo = false) {
  const setup = mediaSetup(upstreamUrl, { inFlightLeaseTtlMs: TTL_MS, inlineImageDeadlineMs: 100, jobPollIntervalMs: 50 });
  const shared: Stores = createMemoryStores();
  const fz = freezable(shared);
  let settled = 0;
  const billing = new Proxy(fz.stores.billing, {
    get(t, p) {
      const v = Reflect.get(t, p, t) as unknown;
      if (p !== 'settle' || typeof v !== 'function') return typeof v === 'function' ? v.bind(t) : v;
      return async (...args: unknown[]) => {
        const r = await (v as (...a: unknown[]) => Promise<unknown>).apply(t, args);
        settled++;
        fz.freeze();
        return r;
      };
    },
  });
  const a = createGateway({ ...setup.options, stores: { ...fz.stores, billing } as Stores });
  await a.ready;
  running.push({ gw: a, thaw: () => fz.thaw() });
  const models = bLacksVideo ? setup.options.models!.filter((m) => m.id !== VIDEO) : setup.options.models!;
  const b = createGateway({ ...setup.options, models, stores: shared });
  await b.ready;
  running.push({ gw: b });
  const api = (gw: Gateway, path: string, payload?: unknown) =>
    Promise.resolve(
      gw.fetch(
        new Request(`http://gw.test/v1${path}`, {
          method: payload === undefined ? 'GET' : 'POST',
          headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' },
          body: payload === undefined ? undefined : JSON.stringify(payload),
        }),
        { clientAddress: '192.0.2.1' },
      ),
    );
  return { a, b, fz, shared, api, settledByA: () => settled };
}

const ended = (status: unknown) => status === 'completed' || status === 'failed';

describe('a charged job whose instance stalls before completing it', () => {
  it('image job: B completes it with its images, charged once (not job_lost)', async () => {
    const { a, b, shared, api, settledByA } = await pair(media.url);
    const initial = await shared.billing.wallet(ACCOUNT);
    const gate = media.holdImages();
    const res = await api(a, '/images/generations', { model: IMAGE, prompt: 'charged, then a stall', resolution: '1080P' });
    expect(res.status).toBe(202);
    const job = (await res.json()) as Json;
    // Until it completes, the job shows no images, though they are recorded.
    gate.open();
    await eventually(() => settledByA() === 1, 'A charged the job');
    expect((await shared.jobs.get(job.id))?.status).toBe('in_progress');
    expect(((await (await api(b, `/images/${job.id}`)).json()) as Json).result).toBeNull();
    let seen: Json = {};
    await eventually(async () => ended((seen = (await (await api(b, `/images/${job.id}`)).json()) as Json).status), 'B ends the job', 10_000);
    expect(seen).toMatchObject({ status: 'completed', error: null });
    expect(seen.result.data).toHaveLength(1);
    const charges = await chargesOf(shared.billing.ledger(ACCOUNT));
    expect(charges.map((c) => [c.id, c.cost])).toEqual([[job.id, imageCost('1080P', 1)]]);
    expect(await shared.billing.wallet(ACCOUNT)).toEqual({ balance: initial.balance - imageCost('1080P', 1), held: 0n });
    void a;
  });

  it('video job: B completes it although the upstream no longer knows it, charged once', async () => {
    const { shared, api, a, b, settledByA } = await pair(videos.url);
    const initial = await shared.billing.wallet(ACCOUNT);
    const res = await api(a, '/videos', { model: VIDEO, prompt: 'charged, then a stall', seconds: 4, size: '1280x720' });
    expect(res.status).toBe(202);
    const job = (await res.json()) as Json;
    const upstreamId = videos.last();
    videos.finish(upstreamId);
    await eventually(() => settledByA() === 1, 'A charged the job');
    videos.forget(upstreamId);
    let seen: Json = {};
    await eventually(async () => ended((seen = (await (await api(b, `/videos/${job.id}`)).json()) as Json).status), 'B ends the job', 10_000);
    expect(seen).toMatchObject({ status: 'completed', error: null, result: { seconds: 4 } });
    expect((await chargesOf(shared.billing.ledger(ACCOUNT))).map((c) => c.cost)).toEqual([videoCost('720P', 4)]);
    expect(await shared.billing.wallet(ACCOUNT)).toEqual({ balance: initial.balance - videoCost('720P', 4), held: 0n });
  });

  it('video job: B, without the model, leaves it; A, back, completes it; charged once', async () => {
    const { shared, api, a, fz, settledByA } = await pair(media.url, true);
    const initial = await shared.billing.wallet(ACCOUNT);
    const res = await api(a, '/videos', { model: VIDEO, prompt: 'charged, then a stall', seconds: 4, size: '1280x720' });
    const job = (await res.json()) as Json;
    media.finishVideo(media.videos().at(-1)!.id);
    await eventually(() => settledByA() === 1, 'A charged the job');
    // Three claim lifetimes: B sees it lapse, and neither fails it nor releases its charge.
    await new Promise((r) => setTimeout(r, 3 * TTL_MS));
    expect(ended((await shared.jobs.get(job.id))?.status)).toBe(false);
    fz.thaw();
    await eventually(async () => (await shared.jobs.get(job.id))?.status === 'completed', 'A completes it', 10_000);
    expect((await chargesOf(shared.billing.ledger(ACCOUNT))).map((c) => c.cost)).toEqual([videoCost('720P', 4)]);
    expect(await shared.billing.wallet(ACCOUNT)).toEqual({ balance: initial.balance - videoCost('720P', 4), held: 0n });
  });
});
