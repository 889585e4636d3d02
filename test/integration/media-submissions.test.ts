/**
 * What reaches a media upstream is what the gateway read and billed, on memory and on a real
 * PostgreSQL, through `gateway.fetch` to an HTTP media upstream that records every call:
 * - a multipart part the gateway and an upstream could read differently (two
 *   Content-Disposition headers, a text field sent as a file, a part without a name) is 400
 *   naming the field, and nothing reaches the upstream;
 * - a plain multipart submission reaches the upstream re-encoded (not the client's bytes)
 *   with the same fields and files (filename and content type kept);
 * - a NUL in a video or image prompt (text PostgreSQL's jsonb cannot keep in a job record) is
 *   400 naming the field before any upstream call, on every driver;
 * - a job the upstream accepted whose record cannot be written is billed as held, not refunded.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import type { Gateway } from '../../src/gateway.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, UPSTREAM_API_KEY, eventually, makeGateway, testConfig } from '../helpers/gateway.js';
import { IMAGE, VIDEO, mediaModels, videoCost } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { chargesOf } from '../helpers/billing.js';

const pgUp = (await postgresProblem(POSTGRES_URL)) === null;
const SCHEMA = freshSchema();
const BOUNDARY = 'client-boundary-7MA4YWxkTrZu0gW';
const PNG = Buffer.from('89504e470d0a1a0a0000000d4948445200000001000000010806000000', 'hex');

const storages: Array<[string, boolean, () => Promise<Stores>]> = [
  ['memory', true, async () => createMemoryStores()],
  ['postgres', pgUp || process.env.CI === 'true', () => createPostgresStores({ url: POSTGRES_URL, schema: SCHEMA, maxConnections: 4 })],
];

afterAll(async () => {
  if (pgUp) await dropSchema(SCHEMA);
});

/** A multipart body of `parts`, each its header lines and its content, in `BOUNDARY`. */
function multipart(parts: Array<{ headers: string[]; content: string | Buffer }>): Buffer {
  const chunks: Buffer[] = [];
  for (const p of parts) {
    chunks.push(Buffer.from(`--${BOUNDARY}\r\n${p.headers.join('\r\n')}\r\n\r\n`), Buffer.from(p.content), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${BOUNDARY}--\r\n`));
  return Buffer.concat(chunks);
}
const field = (name: string, value: string) => ({ headers: [`Content-Disposition: form-data; name="${name}"`], content: value });

describe.each(storages)('%s: media submissions reach the upstream as read', (name, enabled) => {
  let up: MediaUpstream;
  let gateway: Gateway;
  let stores: Stores;
  let devKey: string;

  beforeAll(async () => {
    if (!enabled) return;
    up = await startMediaUpstream();
    // Served under their own names: the upstream gets the model id the client sent.
    const setup = testConfig({ walletUsd: 100, models: mediaModels('up'), limits: { jobPollIntervalMs: 50 } });
    setup.options.upstreams = { ...setup.options.upstreams, up: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs: 10_000 } };
    devKey = setup.devKey;
    ({ gateway, stores } = await makeGateway({ ...setup.options, stores: await storages.find(([n]) => n === name)![2]() }));
  });
  afterAll(async () => {
    if (!enabled) return;
    await gateway.dispose();
    await stores.close();
    await up.close();
  });

  const send = (path: string, body: string | Buffer, contentType: string) =>
    Promise.resolve(
      gateway.fetch(
        new Request(`http://gw.test/v1${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${devKey}`, 'content-type': contentType },
          body: new Uint8Array(body instanceof Buffer ? body : Buffer.from(body)),
        }),
        { clientAddress: '192.0.2.1' },
      ),
    );
  const sendForm = (body: Buffer) => send('/videos', body, `multipart/form-data; boundary=${BOUNDARY}`);
  const posts = (path: string) => up.requests.filter((r) => r.method === 'POST' && r.path === path).length;

  /** `res` is 400 invalid_request naming `param`, and the upstream got no submission. */
  async function refused(res: Response, param: string | null, before: number, path = '/videos') {
    expect(res.status).toBe(400);
    const err = ((await res.json()) as { error: { code: string; param: string | null } }).error;
    expect(err).toMatchObject({ code: 'invalid_request', param });
    expect(posts(path)).toBe(before);
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
  }

  it.skipIf(!enabled)('a part with two Content-Disposition headers is 400 naming the field; nothing reaches the upstream', async () => {
    const before = posts('/videos');
    const twoOnSize = multipart([
      field('model', VIDEO),
      field('prompt', 'a lighthouse at dusk'),
      { headers: ['Content-Disposition: form-data; name="size"', 'Content-Disposition: form-data; name="x"'], content: '3840x2160' },
    ]);
    await refused(await sendForm(twoOnSize), 'size', before);
    const twoOnModel = multipart([
      { headers: ['Content-Disposition: form-data; name="model"', 'Content-Disposition: form-data; name="x"'], content: 'other/model' },
      field('model', VIDEO),
      field('prompt', 'a lighthouse at dusk'),
    ]);
    await refused(await sendForm(twoOnModel), 'model', before);
  });

  it.skipIf(!enabled)('a text field sent as a file, or a part without a name, is 400; nothing reaches the upstream', async () => {
    const before = posts('/videos');
    const sizeAsFile = multipart([
      field('model', VIDEO),
      field('prompt', 'a lighthouse at dusk'),
      { headers: ['Content-Disposition: form-data; name="size"; filename="size.txt"', 'Content-Type: text/plain'], content: '3840x2160' },
    ]);
    await refused(await sendForm(sizeAsFile), 'size', before);
    // `quality` sets the tier where the model prices it: as a file it would be relayed and
    // rendered, yet billed at the default tier.
    const qualityAsFile = multipart([
      field('model', VIDEO),
      field('prompt', 'a lighthouse at dusk'),
      { headers: ['Content-Disposition: form-data; name="quality"; filename="q.txt"', 'Content-Type: text/plain'], content: 'hd' },
    ]);
    await refused(await sendForm(qualityAsFile), 'quality', before);
    const nameless = multipart([field('model', VIDEO), field('prompt', 'a lighthouse'), { headers: ['Content-Disposition: form-data'], content: '4K' }]);
    await refused(await sendForm(nameless), null, before);
  });

  it.skipIf(!enabled)('a plain multipart submission reaches the upstream re-encoded, with the same fields and files', async () => {
    const before = posts('/videos');
    const sent = multipart([
      field('model', VIDEO),
      field('prompt', 'a lighthouse at dusk, ünïcödé'),
      field('seconds', '4'),
      field('size', '1280x720'),
      { headers: ['Content-Disposition: form-data; name="input_reference"; filename="ref.png"', 'Content-Type: image/png'], content: PNG },
    ]);
    const res = await sendForm(sent);
    expect(res.status).toBe(202);
    const job = (await res.json()) as { id: string };
    expect(posts('/videos')).toBe(before + 1);
    const got = up.requests.filter((r) => r.method === 'POST' && r.path === '/videos').at(-1)!;
    // Re-encoded by the gateway: its own boundary, not the client's bytes.
    expect(got.contentType).toMatch(/^multipart\/form-data; boundary=/);
    expect(got.contentType).not.toContain(BOUNDARY);
    expect(got.raw.equals(sent)).toBe(false);
    expect(got.fields).toEqual({ model: VIDEO, prompt: 'a lighthouse at dusk, ünïcödé', seconds: '4', size: '1280x720' });
    const form = await new Response(new Uint8Array(got.raw), { headers: { 'content-type': got.contentType } }).formData();
    const file = form.get('input_reference');
    expect(file).toBeInstanceOf(Blob);
    expect((file as File).name).toBe('ref.png');
    expect((file as File).type).toBe('image/png');
    expect(Buffer.from(await (file as File).arrayBuffer()).equals(PNG)).toBe(true);
    // The job runs to its end as usual.
    up.finishVideo(up.videos().at(-1)!.id);
    await eventually(async () => (await stores.jobs.get(job.id))?.status === 'completed', 'completed', 10_000);
    await eventually(async () => (await stores.billing.openHolds(ACCOUNT)) === 0, 'settled');
  });

  it.skipIf(!enabled)('a NUL in a video prompt (JSON or multipart) or an image prompt is 400 before any upstream call', async () => {
    const wallet = await stores.billing.wallet(ACCOUNT);
    const videos = posts('/videos');
    const json = JSON.stringify({ model: VIDEO, prompt: 'free\u0000render', seconds: 4, size: '1920x1080' });
    await refused(await send('/videos', json, 'application/json'), 'prompt', videos);
    const form = multipart([field('model', VIDEO), field('prompt', 'free\u0000render'), field('size', '1920x1080')]);
    await refused(await sendForm(form), 'prompt', videos);
    const sizeNul = JSON.stringify({ model: VIDEO, prompt: 'a render', size: '1920x1080\u0000' });
    await refused(await send('/videos', sizeNul, 'application/json'), 'size', videos);
    const images = posts('/images/generations');
    const image = JSON.stringify({ model: IMAGE, prompt: 'free\u0000image' });
    await refused(await send('/images/generations', image, 'application/json'), 'prompt', images, '/images/generations');
    expect(await stores.billing.wallet(ACCOUNT)).toEqual(wallet);
  });
});

describe('a video job the upstream accepted whose record cannot be written', () => {
  it('is billed as held (never refunded), its slot freed, and the client gets 503', async () => {
    const up = await startMediaUpstream();
    const real = createMemoryStores();
    // The job store refuses every write (as an unreachable PostgreSQL would); all else is real.
    const jobs = Object.create(real.jobs) as Stores['jobs'];
    jobs.create = async () => {
      throw new Error('job store unreachable (injected)');
    };
    const setup = testConfig({ walletUsd: 100, models: mediaModels('up') });
    setup.options.upstreams = { ...setup.options.upstreams, up: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs: 10_000 } };
    const { gateway } = await makeGateway({ ...setup.options, stores: { ...real, jobs, close: () => real.close() } });
    try {
      const initial = await real.billing.wallet(ACCOUNT);
      const res = await gateway.fetch(
        new Request('http://gw.test/v1/videos', {
          method: 'POST',
          headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: VIDEO, prompt: 'accepted, never recorded', seconds: 4, size: '1920x1080' }),
        }),
        { clientAddress: '192.0.2.1' },
      );
      expect(res.status).toBe(503);
      expect(up.videos()).toHaveLength(1);
      const [entry] = await chargesOf(real.billing.ledger(ACCOUNT));
      expect(entry).toMatchObject({ model: VIDEO, units: { kind: 'seconds', seconds: 4, tier: '1080P' }, measured: 'estimate' });
      expect(entry!.cost).toBe(videoCost('1080P', 4));
      expect(await real.billing.wallet(ACCOUNT)).toEqual({ balance: initial.balance - videoCost('1080P', 4), held: 0n });
      expect(await real.limits.activeLeases(`video:${ACCOUNT}`)).toBe(0);
    } finally {
      await gateway.dispose();
      await up.close();
    }
  });
});

/**
 * A gateway in this process on the memory stores, its media models on a fresh media upstream
 * (`timeoutMs` for it, and any other options), and a JSON video submission to it.
 */
async function videoGateway(timeoutMs: number, options: { limits?: { holdTtlMs?: number; jobTtlMs?: number }; routing?: { retries: number; backoffMs: number; maxRetryAfterMs: number } } = {}) {
  const up = await startMediaUpstream();
  const setup = testConfig({ walletUsd: 100, models: mediaModels('up') });
  setup.options.upstreams = { ...setup.options.upstreams, up: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs } };
  const stores = createMemoryStores();
  const { gateway } = await makeGateway({ ...setup.options, limits: { ...setup.options.limits, ...options.limits }, ...(options.routing ? { routing: options.routing } : {}), stores });
  const post = (body: BodyInit, headers: Record<string, string> = { 'content-type': 'application/json' }) =>
    gateway.fetch(new Request('http://gw.test/v1/videos', { method: 'POST', headers: { authorization: `Bearer ${setup.devKey}`, ...headers }, body }), { clientAddress: '192.0.2.1' });
  const submit = (prompt: string) => post(JSON.stringify({ model: VIDEO, prompt, seconds: 4, size: '1920x1080' }));
  const close = async () => {
    await gateway.dispose();
    await up.close();
  };
  return { up, stores, post, submit, close };
}

describe('a video job’s hold', () => {
  it('lasts the hold TTL until the job is recorded (an instance that dies first leaves it to lapse), then the job’s life', async () => {
    const HOLD_TTL = 60_000;
    const JOB_TTL = 24 * 60 * 60 * 1000;
    const g = await videoGateway(10_000, { limits: { holdTtlMs: HOLD_TTL, jobTtlMs: JOB_TTL } });
    const holdLeft = async () => {
      const { holds, at } = await g.stores.billing.listHolds(ACCOUNT, undefined, 10);
      expect(holds).toHaveLength(1);
      const expiresAt = holds[0]!.expiresAt;
      expect(expiresAt).not.toBeNull();
      return (expiresAt as number) - at;
    };
    try {
      const answered = g.submit('a render [slow-submit]');
      // The upstream has the submission (its answer comes a second later); no record yet.
      await eventually(() => g.up.videos().length === 1, 'the submission upstream');
      const before = await holdLeft();
      expect(before).toBeGreaterThan(0);
      expect(before).toBeLessThanOrEqual(HOLD_TTL);
      expect((await answered).status).toBe(202);
      // Recorded: the hold lasts the job's life.
      expect(await holdLeft()).toBeGreaterThan(JOB_TTL - 60_000);
    } finally {
      await g.close();
    }
  });
});

describe('Idempotency-Key on a multipart video submission', () => {
  it('the same parts under another boundary replay the first answer: one job, one upstream render; other parts are 422', async () => {
    const g = await videoGateway(10_000);
    // fetch draws a new multipart boundary for every FormData it sends, as the SDKs do.
    const send = (prompt: string) => {
      const form = new FormData();
      form.append('model', VIDEO);
      form.append('prompt', prompt);
      form.append('seconds', '4');
      form.append('input_reference', new Blob([new Uint8Array([137, 80, 78, 71, 1, 2, 3])], { type: 'image/png' }), 'ref.png');
      return g.post(form, { 'idempotency-key': 'vid-mp-1' });
    };
    try {
      const first = await send('a lighthouse at dusk');
      expect(first.status).toBe(202);
      const job = (await first.json()) as { id: string };
      const again = await send('a lighthouse at dusk');
      expect(again.status).toBe(202);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(((await again.json()) as { id: string }).id).toBe(job.id);
      expect(g.up.videos()).toHaveLength(1);
      const other = await send('a lighthouse at dawn');
      expect(other.status).toBe(422);
      expect(((await other.json()) as { error: { code: string } }).error.code).toBe('idempotency_mismatch');
      expect(g.up.videos()).toHaveLength(1);
    } finally {
      await g.close();
    }
  });
});

describe('Idempotency-Key on multipart bodies that quote their own boundary', () => {
  it('two prompts that each quote their own boundary are two bodies: the second is 422, not a replay', async () => {
    const g = await videoGateway(10_000);
    const form = (boundary: string, prompt: string) =>
      Buffer.from(
        [['model', VIDEO], ['prompt', prompt], ['seconds', '4']]
          .map(([name, value]) => `--${boundary}\r\ncontent-disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`)
          .join('') + `--${boundary}--\r\n`,
      );
    const send = (boundary: string, prompt: string) =>
      g.post(form(boundary, prompt), { 'content-type': `multipart/form-data; boundary=${boundary}`, 'idempotency-key': 'vid-mp-quoted' });
    try {
      const first = await send('AAAAAAAA', 'a red car --AAAAAAAA driving');
      expect(first.status).toBe(202);
      const job = (await first.json()) as { id: string };
      const other = await send('BBBBBBBB', 'a red car --BBBBBBBB driving');
      expect(other.status).toBe(422);
      expect(((await other.json()) as { error: { code: string } }).error.code).toBe('idempotency_mismatch');
      // A third prompt quoting its own boundary is a third body; the first's parts under another boundary are the first request.
      const same = await send('CCCCCCCC', 'a red car --CCCCCCCC driving');
      expect(same.status).toBe(422);
      const again = await send('DDDDDDDD', 'a red car --AAAAAAAA driving');
      expect(again.status).toBe(202);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(((await again.json()) as { id: string }).id).toBe(job.id);
      expect(g.up.videos()).toHaveLength(1);
    } finally {
      await g.close();
    }
  });
});

describe('a video submission the upstream may have taken', () => {
  it('is not sent again after a timeout: one upstream job, nothing billed, the hold released', async () => {
    // An answer later than the upstream timeout, on a gateway that retries twice.
    const g = await videoGateway(300, { routing: { retries: 2, backoffMs: 1, maxRetryAfterMs: 10 } });
    try {
      const initial = await g.stores.billing.wallet(ACCOUNT);
      expect((await g.submit('a render [slow-submit]')).status).toBe(504);
      // The upstream made one job of it (the one it answered late), not one per attempt.
      expect(g.up.videos()).toHaveLength(1);
      expect(await chargesOf(g.stores.billing.ledger(ACCOUNT))).toEqual([]);
      expect(await g.stores.billing.wallet(ACCOUNT)).toEqual(initial);
    } finally {
      await g.close();
    }
  });
});
