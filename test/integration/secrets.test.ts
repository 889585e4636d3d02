/**
 * Secrets: no credential of a client reaches an upstream, and no key material reaches a client:
 *
 * (a) Upstream requests are built from an allowlist. A client sends credentials (Authorization,
 *     Cookie, Proxy-Authorization, X-Api-Key), hop-by-hop headers (Connection naming a custom
 *     header, Keep-Alive, TE, Upgrade, Transfer-Encoding: chunked, Trailer, Proxy-Connection)
 *     and custom ones over a raw socket; every upstream request (chat, stream, image, speech,
 *     video create / poll / content) carries only content-type, accept, the gateway's request
 *     id and the upstream's own key (plus what HTTP itself adds: host, connection,
 *     content-length).
 *
 * (b) Key material appears nowhere it should not: a scenario (401s with wrong keys, 402s, both
 *     429s, plain and streamed chats, a failed stream, relayed upstream errors, media inline
 *     and as jobs, video content, idempotent replays, admin.createKey / disableKey) runs on
 *     Redis stores with a capturing logger while process.stdout / stderr are captured too; then
 *     every log line, every console write, every Redis key and value under the run's prefix
 *     (GET / HGETALL / LRANGE / ZRANGE / SMEMBERS / DUMP, base64 payloads decoded) and every
 *     response (status, headers, body) is searched for the plain keys (seeded and created)
 *     and the upstream keys. Only the 10-character display prefix "sk-mg-XXXX" may appear.
 *
 * (c) Job ids are unguessable (>= 128 bits of base62) and scoped to their account: another
 *     account gets 404 job_not_found on every job route.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { inspect } from 'node:util';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../../src/gateway.js';
import type { Logger } from '../../src/observability/log.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { ACCOUNT, MODEL, eventually, makeGateway, startGateway, testConfig, testKey } from '../helpers/gateway.js';
import { AUDIO, IMAGE, VIDEO, mediaModels } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';
import { REDIS_URL, deleteKeysWithPrefix, redisProblem } from '../../bench/redis-util.js';

const CHAT_UPSTREAM_KEY = `ups-chat-${randomBytes(24).toString('hex')}`;
const MEDIA_UPSTREAM_KEY = `ups-media-${randomBytes(24).toString('hex')}`;
const OTHER = 'acct_other';
const POOR = 'acct_poor';
const BURST = 'acct_burst';
/** Headers the upstream may receive: the allowlist and what HTTP itself adds. */
const UPSTREAM_HEADERS = ['accept', 'authorization', 'connection', 'content-length', 'content-type', 'host', 'x-request-id'];

const redisDown = await redisProblem(REDIS_URL);
if (redisDown && process.env.CI !== 'true') {
  // eslint-disable-next-line no-console
  console.warn(
    `\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n` +
      `!! secrets.test.ts: Redis at ${REDIS_URL} is unreachable (${redisDown}).\n` +
      `!! The key-material scan over Redis stores is SKIPPED. Under CI=true it fails.\n` +
      `!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n`,
  );
}

// ---- raw HTTP/1.1 over a socket (fetch refuses hop-by-hop headers) ----------------------------

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

function rawRequest(port: number, head: string, body: string): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    const guard = setTimeout(() => {
      sock.destroy();
      reject(new Error('no complete answer within 15 s'));
    }, 15_000);
    const finish = (answer: RawAnswer) => {
      clearTimeout(guard);
      sock.destroy();
      resolve(answer);
    };
    const tryParse = (closed: boolean) => {
      const end = buf.indexOf('\r\n\r\n');
      if (end === -1) return closed ? reject(new Error('closed before a head')) : undefined;
      const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
      const status = Number(lines[0]!.split(' ')[1]);
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const c = l.indexOf(':');
        headers[l.slice(0, c).trim().toLowerCase()] = l.slice(c + 1).trim();
      }
      let rest = buf.subarray(end + 4);
      if (headers['content-length'] !== undefined) {
        const n = Number(headers['content-length']);
        if (rest.length >= n) finish({ status, headers, body: rest.subarray(0, n).toString('utf8') });
        return;
      }
      if (headers['transfer-encoding']?.includes('chunked')) {
        const parts: Buffer[] = [];
        for (;;) {
          const nl = rest.indexOf('\r\n');
          if (nl === -1) return;
          const size = parseInt(rest.subarray(0, nl).toString('latin1'), 16);
          if (size === 0) return finish({ status, headers, body: Buffer.concat(parts).toString('utf8') });
          if (rest.length < nl + 2 + size + 2) return;
          parts.push(rest.subarray(nl + 2, nl + 2 + size));
          rest = rest.subarray(nl + 2 + size + 2);
        }
      }
      if (closed) finish({ status, headers, body: rest.toString('utf8') });
    };
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      tryParse(false);
    });
    sock.on('close', () => tryParse(true));
    sock.on('error', () => undefined);
    sock.write(head);
    sock.write(body);
  });
}

/** A request carrying every kind of header that must not travel upstream. */
function hostileHead(method: string, path: string, devKey: string, contentType: string, chunked: boolean, length: number): string {
  const lines = [
    `${method} ${path} HTTP/1.1`,
    'Host: gateway.test',
    `Authorization: Bearer ${devKey}`,
    `Cookie: session=${devKey}; theme=dark`,
    `Proxy-Authorization: Basic ${Buffer.from(`user:${devKey}`).toString('base64')}`,
    `X-Api-Key: ${devKey}`,
    `Api-Key: ${devKey}`,
    'Connection: keep-alive, X-Secret-Hop',
    'X-Secret-Hop: must-not-pass',
    'Keep-Alive: timeout=5, max=1000',
    'Proxy-Connection: keep-alive',
    'TE: trailers',
    'Trailer: X-Trailer',
    'Upgrade: websocket',
    'Forwarded: for=198.51.100.1;proto=https',
    'X-Forwarded-For: 198.51.100.1',
    'X-Forwarded-Host: evil.example',
    'X-Real-IP: 198.51.100.1',
    'X-Request-Id: client-chosen-request-id',
    'OpenAI-Organization: org-client',
    'OpenAI-Project: proj-client',
    'OpenAI-Beta: assistants=v2',
    'User-Agent: hostile-client/1.0',
    'Accept-Encoding: gzip, br',
    'Accept: text/event-stream, application/json',
    'Idempotency-Key-Not: x',
    'X-Custom-Header: client-value',
    `Content-Type: ${contentType}`,
    chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${length}`,
  ];
  return `${lines.join('\r\n')}\r\n\r\n`;
}

const chunkedBody = (body: string) => {
  const b = Buffer.from(body);
  const half = b.length >> 1;
  const chunk = (x: Buffer) => `${x.length.toString(16)}\r\n${x.toString('latin1')}\r\n`;
  return `${chunk(b.subarray(0, half))}${chunk(b.subarray(half))}0\r\nX-Trailer: ${'t'}\r\n\r\n`;
};

// ---- (a) ------------------------------------------------------------------------------------

describe('(a) upstream requests are built from an allowlist', () => {
  let up: TestUpstream;
  let media: MediaUpstream;

  beforeAll(async () => {
    up = await startTestUpstream();
    media = await startMediaUpstream();
  });
  afterAll(async () => {
    await up?.close();
    await media?.close();
  });

  it('chat (plain, streamed, chunked) and media (image, speech, video create / poll / content): only allowlisted headers and the upstream key', async () => {
    const setup = testConfig({
      upstreamUrl: up.url,
      models: mediaModels('media'),
      limits: { jobPollIntervalMs: 50 },
    });
    setup.options.upstreams = {
      test: { baseUrl: up.url, apiKey: CHAT_UPSTREAM_KEY, timeoutMs: 10_000 },
      media: { baseUrl: media.url, apiKey: MEDIA_UPSTREAM_KEY, timeoutMs: 10_000 },
    };
    const gw = await startGateway(setup.options);
    try {
      const port = Number(new URL(gw.origin).port);
      up.setBehavior((rec) => (rec.body?.stream === true ? { kind: 'stream', chunks: ['a', 'b'] } : { kind: 'json' }));
      const send = async (path: string, body: string, chunked: boolean, contentType = 'application/json') => {
        const head = hostileHead('POST', path, setup.devKey, contentType, chunked, Buffer.byteLength(body));
        return rawRequest(port, head, chunked ? chunkedBody(body) : body);
      };
      const chat = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
      const stream = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true });
      const answers: RawAnswer[] = [];
      for (const chunked of [false, true]) {
        answers.push(await send('/v1/chat/completions', chat, chunked));
        answers.push(await send('/v1/chat/completions', stream, chunked));
      }
      answers.push(await send('/v1/images/generations', JSON.stringify({ model: IMAGE, prompt: 'a dot' }), true));
      answers.push(await send('/v1/audio/speech', JSON.stringify({ model: AUDIO, input: 'Hello there.', voice: 'alloy' }), false));
      const boundary = 'xBoUnDaRy';
      const multipart =
        [`model\r\n\r\n${VIDEO}`, 'prompt\r\n\r\na slow pan', 'seconds\r\n\r\n4', 'size\r\n\r\n720x1280']
          .map((f) => `--${boundary}\r\nContent-Disposition: form-data; name="${f.slice(0, f.indexOf('\r'))}"${f.slice(f.indexOf('\r'))}\r\n`)
          .join('') + `--${boundary}--\r\n`;
      const video = await send('/v1/videos', multipart, false, `multipart/form-data; boundary=${boundary}`);
      answers.push(video);
      for (const a of answers) expect([200, 202], a.body.slice(0, 200)).toContain(a.status);
      const jobId = (JSON.parse(video.body) as { id: string }).id;
      media.finishVideo(media.videos().at(-1)!.id);
      await eventually(async () => (await gw.stores.jobs.get(jobId))?.status === 'completed', 'the video job to complete', 10_000);
      const content = await rawRequest(
        port,
        hostileHead('GET', `/v1/videos/${jobId}/content`, setup.devKey, 'application/json', false, 0),
        '',
      );
      expect(content.status).toBe(200);

      const chatRequests = up.requests;
      const mediaRequests = media.requests;
      expect(chatRequests).toHaveLength(4);
      expect(mediaRequests.length).toBeGreaterThanOrEqual(5); // image, speech, video create, >= 1 poll, content
      expect(mediaRequests.some((r) => r.method === 'GET' && r.path.endsWith('/content'))).toBe(true);
      const all = [
        ...chatRequests.map((r) => ({ headers: r.headers, key: CHAT_UPSTREAM_KEY, method: r.method, raw: r.raw })),
        ...mediaRequests.map((r) => ({ headers: r.headers, key: MEDIA_UPSTREAM_KEY, method: r.method, raw: r.raw.toString('latin1') })),
      ];
      const requestIds = new Set(answers.map((a) => a.headers['x-request-id']));
      for (const r of all) {
        const names = Object.keys(r.headers).sort();
        for (const n of names) expect(UPSTREAM_HEADERS, `header "${n}" reached the upstream`).toContain(n);
        expect(r.headers.authorization).toBe(`Bearer ${r.key}`);
        expect(r.headers.accept).toBe('*/*');
        // The gateway's own ids: a request id, or (polls of a video job) the job id.
        expect(r.headers['x-request-id']).toMatch(/^(req_[0-9a-f]{24,}|video_[A-Za-z0-9]{32})$/);
        expect(r.headers['x-request-id']).not.toBe('client-chosen-request-id');
        expect(r.headers.connection ?? 'keep-alive').toMatch(/^(keep-alive|close)$/i);
        // A multipart body is re-encoded by the gateway from what it read: its own boundary.
        if (r.method === 'POST') expect(r.headers['content-type']).toMatch(/^(application\/json|multipart\/form-data; boundary=[-\w]{1,70})$/);
        const everything = JSON.stringify(r.headers) + r.raw;
        expect(everything).not.toContain(setup.devKey);
        expect(everything).not.toContain('must-not-pass');
        expect(everything).not.toContain('org-client');
        expect(everything).not.toContain('198.51.100.1');
      }
      // The client-facing requests' ids are the ones the upstream saw for the calls the client made.
      for (const r of chatRequests) expect(requestIds.has(String(r.headers['x-request-id']))).toBe(true);
    } finally {
      await gw.close();
    }
  });
});

// ---- (b) ------------------------------------------------------------------------------------

/** Renders a log entry completely: JSON (errors with their causes) and util.inspect. */
function render(level: string, entry: Record<string, unknown>): string {
  const seen = new WeakSet<object>();
  const json = JSON.stringify(entry, function replacer(_k, v: unknown) {
    if (typeof v === 'bigint') return v.toString();
    if (v instanceof Error) return { ...v, name: v.name, message: v.message, stack: v.stack, cause: v.cause };
    if (v && typeof v === 'object') {
      if (seen.has(v)) return '[circular]';
      seen.add(v);
    }
    return v;
  });
  return `${level} ${json}\n${inspect(entry, { depth: 12, showHidden: true, breakLength: Infinity })}`;
}

/** `text` and every long base64 run in it, decoded (stored response bodies are base64). */
function expand(text: string): string[] {
  const out = [text];
  for (const m of text.matchAll(/[A-Za-z0-9+/]{24,}={0,2}/g)) out.push(Buffer.from(m[0], 'base64').toString('latin1'));
  return out;
}

interface Secret {
  name: string;
  value: string;
}

/** Where `text` contains a secret, or any 8 characters of it past its display prefix. */
function leaks(secrets: Secret[], text: string): string[] {
  const found: string[] = [];
  for (const s of secrets) {
    if (text.includes(s.value)) {
      found.push(`${s.name} (whole)`);
      continue;
    }
    // The display prefix ("sk-mg-" and 4 characters) is allowed; nothing after it is.
    const start = s.value.startsWith('sk-mg-') ? 10 : 0;
    for (let i = start; i + 8 <= s.value.length; i++) {
      if (text.includes(s.value.slice(i, i + 8))) {
        found.push(`${s.name} (characters ${i}..${i + 8})`);
        break;
      }
    }
  }
  return found;
}

describe.skipIf(redisDown !== null && process.env.CI !== 'true')('(b) key material never lands in logs, consoles, stores or answers', () => {
  it('Redis is reachable', () => {
    // Under CI=true a missing Redis is a failure, not a skip.
    expect(redisDown, `Redis at ${REDIS_URL}`).toBeNull();
  });

  it('a scenario of 401s, 402s, 429s, streams, failures, media, replays and admin keys leaves no key anywhere', async () => {
    const prefix = `mgsecrets:${randomUUID().slice(0, 8)}:`;
    const logLines: string[] = [];
    const logger: Logger = {
      info: (e) => logLines.push(render('info', e)),
      warn: (e) => logLines.push(render('warn', e)),
      error: (e) => logLines.push(render('error', e)),
    };
    const consoleWrites: string[] = [];
    const realOut = process.stdout.write.bind(process.stdout);
    const realErr = process.stderr.write.bind(process.stderr);
    const capture =
      (real: typeof realOut) =>
      (chunk: unknown, ...rest: unknown[]): boolean => {
        consoleWrites.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk as Uint8Array).toString('latin1'));
        return (real as (c: unknown, ...r: unknown[]) => boolean)(chunk, ...rest);
      };

    const up = await startTestUpstream();
    const media = await startMediaUpstream();
    const proxy = await startFaultProxy(up.origin);
    const poorKey = testKey();
    const otherKey = testKey();
    const burstKey = testKey();
    const setup = testConfig({
      upstreamUrl: `${proxy.origin}/v1`,
      walletUsd: 1_000,
      models: mediaModels('media'),
      accounts: [
        { id: POOR, walletUsd: 0 },
        { id: OTHER, walletUsd: 10 },
        { id: BURST, walletUsd: 10 },
      ],
      keys: [
        { key: poorKey, account: POOR, kind: 'developer' },
        { key: otherKey, account: OTHER, kind: 'developer' },
        { key: burstKey, account: BURST, kind: 'developer' },
      ],
      brands: [{ id: 'brand_acme', account: ACCOUNT, name: 'Acme', voice: 'Cheerful.' }],
      documents: [{ id: 'doc_refunds', account: ACCOUNT, brand: 'brand_acme', title: 'Refunds', text: 'Refunds within 30 days.' }],
      limits: { keyRequestsPerMinute: 40, ipRequestsPerMinute: 30, inlineImageDeadlineMs: 200, jobPollIntervalMs: 50 },
    });
    setup.options.upstreams = {
      test: { baseUrl: `${proxy.origin}/v1`, apiKey: CHAT_UPSTREAM_KEY, timeoutMs: 10_000 },
      media: { baseUrl: media.url, apiKey: MEDIA_UPSTREAM_KEY, timeoutMs: 10_000 },
    };
    setup.options.logger = logger;
    const stores: Stores = createRedisStores({ url: REDIS_URL, keyPrefix: prefix });
    const redis = new Redis(REDIS_URL);
    let gateway: Gateway | undefined;
    const answers: string[] = [];
    const secrets: Secret[] = [
      { name: 'developer key', value: setup.devKey },
      { name: 'agent key', value: setup.agentKey },
      { name: 'poor key', value: poorKey },
      { name: 'other key', value: otherKey },
      { name: 'burst key', value: burstKey },
      { name: 'chat upstream key', value: CHAT_UPSTREAM_KEY },
      { name: 'media upstream key', value: MEDIA_UPSTREAM_KEY },
    ];

    process.stdout.write = capture(realOut) as typeof process.stdout.write;
    process.stderr.write = capture(realErr) as typeof process.stderr.write;
    try {
      ({ gateway } = await makeGateway({ ...setup.options, stores }));
      const gw = gateway;
      let ipCounter = 0;
      const call = async (
        path: string,
        opts: { key?: string | null; authorization?: string; body?: unknown; method?: string; ip?: string; headers?: Record<string, string> } = {},
      ): Promise<{ status: number; text: string; headers: Headers }> => {
        const headers: Record<string, string> = { ...(opts.headers ?? {}) };
        const key = opts.key === undefined ? setup.devKey : opts.key;
        if (opts.authorization !== undefined) headers.authorization = opts.authorization;
        else if (key !== null) headers.authorization = `Bearer ${key}`;
        if (opts.body !== undefined) headers['content-type'] = 'application/json';
        const res = await gw.fetch(
          new Request(`http://gateway.test/v1${path}`, {
            method: opts.method ?? (opts.body === undefined ? 'GET' : 'POST'),
            headers,
            ...(opts.body === undefined ? {} : { body: typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body) }),
          }),
          { clientAddress: opts.ip ?? `198.18.${(ipCounter >> 8) & 255}.${ipCounter++ & 255}` },
        );
        const bytes = Buffer.from(await res.arrayBuffer());
        const text = bytes.toString('utf8');
        answers.push(`${res.status}\n${[...res.headers].map(([k, v]) => `${k}: ${v}`).join('\n')}\n\n${bytes.toString('latin1')}`);
        return { status: res.status, text, headers: res.headers };
      };
      const chatBody = (extra: Record<string, unknown> = {}) => ({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], ...extra });

      // Discovery.
      for (const p of ['/models', '/models?type=image', '/key', '/brands', '/knowledge']) expect((await call(p)).status).toBe(200);
      expect((await call('/key', { key: setup.agentKey })).status).toBe(200);

      // Chats: plain, streamed (with usage), agent, brand + knowledge, idempotent replay.
      up.setBehavior((rec) => (rec.body?.stream === true ? { kind: 'stream', chunks: ['Hel', 'lo'] } : { kind: 'json' }));
      expect((await call('/chat/completions', { body: chatBody() })).status).toBe(200);
      expect((await call('/chat/completions', { body: chatBody({ stream: true, stream_options: { include_usage: true } }) })).status).toBe(200);
      expect((await call('/chat/completions', { key: setup.agentKey, body: chatBody() })).status).toBe(200);
      expect((await call('/chat/completions', { body: chatBody({ brand: 'brand_acme', knowledge: 'doc_refunds' }) })).status).toBe(200);
      for (let i = 0; i < 2; i++) {
        const r = await call('/chat/completions', { body: chatBody(), headers: { 'idempotency-key': 'secret-scan-1' } });
        expect(r.status).toBe(200);
      }

      // 401s: wrong, near-miss, malformed, other schemes, an upstream key, a disabled key.
      const created = await gw.admin.createKey({ account: ACCOUNT, label: 'created for the scan' });
      secrets.push({ name: 'created key', value: created.key });
      expect(created.prefix).toBe(created.key.slice(0, 10));
      expect((await call('/chat/completions', { key: created.key, body: chatBody() })).status).toBe(200);
      const toDisable = await gw.admin.createKey({ account: ACCOUNT, label: 'to be disabled' });
      secrets.push({ name: 'disabled key', value: toDisable.key });
      await gw.admin.disableKey(toDisable.id);
      const flip = (k: string) => k.slice(0, -1) + (k.endsWith('A') ? 'B' : 'A');
      const wrongAuth = [
        `Bearer ${flip(setup.devKey)}`,
        `Bearer ${setup.devKey}x`,
        `Bearer ${setup.devKey.replace('sk-mg-', 'sk-')}`,
        `Bearer ${setup.devKey.slice(0, 30)}`,
        `Basic ${Buffer.from(`:${setup.devKey}`).toString('base64')}`,
        `Token ${setup.devKey}`,
        `Bearer ${CHAT_UPSTREAM_KEY}`,
        `Bearer ${toDisable.key}`,
        `Bearer ${setup.devKey} ${setup.agentKey}`,
        '',
      ];
      for (const a of wrongAuth) {
        const r = await call('/chat/completions', { authorization: a, body: chatBody() });
        expect(r.status, a.slice(0, 20)).toBe(401);
      }
      expect((await call('/models', { key: null })).status).toBe(401);

      // 402s: chat and image from an empty wallet.
      expect((await call('/chat/completions', { key: poorKey, body: chatBody() })).status).toBe(402);
      expect((await call('/images/generations', { key: poorKey, body: { model: IMAGE, prompt: 'x' } })).status).toBe(402);

      // 429: the key rate (40 a minute) and the IP throttle (30 a minute).
      let keyLimited = 0;
      for (let i = 0; i < 45; i++) if ((await call('/models', { key: burstKey })).status === 429) keyLimited++;
      expect(keyLimited).toBeGreaterThan(0);
      let ipLimited = 0;
      for (let i = 0; i < 35; i++) if ((await call('/models', { key: otherKey, ip: '203.0.113.250' })).status === 429) ipLimited++;
      expect(ipLimited).toBeGreaterThan(0);

      // Upstream failures: an error that echoes the upstream key, a 401 naming it, a reset mid-stream.
      for (const status of [400, 404, 422, 429, 401, 403, 500]) {
        up.setBehavior({ kind: 'error', status, message: `Incorrect API key provided: ${CHAT_UPSTREAM_KEY}. Header was "Bearer ${CHAT_UPSTREAM_KEY}".` });
        const r = await call('/chat/completions', { body: chatBody() });
        expect(r.status).toBeGreaterThanOrEqual(400);
      }
      up.setBehavior({
        kind: 'custom',
        handle(_req, res) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'Begun' }, finish_reason: null }] })}\n\n`);
          res.end(`data: ${JSON.stringify({ error: { message: `upstream auth failed for ${CHAT_UPSTREAM_KEY}` } })}\n\n`);
        },
      });
      const echoed = await call('/chat/completions', { body: chatBody({ stream: true }) });
      expect(echoed.text).toContain('"finish_reason":"error"');
      up.setBehavior({ kind: 'stream', chunks: ['one', ' two', ' three', ' four'] });
      await proxy.setMode({ kind: 'reset', after: { marker: '"content":" two"' } });
      const cut = await call('/chat/completions', { body: chatBody({ stream: true }) });
      expect(cut.text).toContain('"finish_reason":"error"');
      await proxy.setMode({ kind: 'pass' });
      up.setBehavior({ kind: 'json' });

      // Media: an inline image, an image job, speech, a video job and its content.
      expect((await call('/images/generations', { body: { model: IMAGE, prompt: 'a dot', n: 1 } })).status).toBe(200);
      const gate = media.holdImages();
      const imageJob = await call('/images/generations', { body: { model: IMAGE, prompt: 'a slow dot' } });
      expect(imageJob.status).toBe(202);
      const imageId = (JSON.parse(imageJob.text) as { id: string }).id;
      expect((await call(`/images/${imageId}`)).status).toBe(200);
      gate.open();
      await eventually(async () => JSON.parse((await call(`/images/${imageId}`)).text).status === 'completed', 'the image job', 10_000);
      expect((await call('/audio/speech', { body: { model: AUDIO, input: 'Say nothing secret.', voice: 'alloy' } })).status).toBe(200);
      const videoJob = await call('/videos', { body: { model: VIDEO, prompt: 'a pan', seconds: 4, size: '720x1280' } });
      expect(videoJob.status).toBe(202);
      const videoId = (JSON.parse(videoJob.text) as { id: string }).id;
      media.finishVideo(media.videos().at(-1)!.id);
      await eventually(async () => JSON.parse((await call(`/videos/${videoId}`)).text).status === 'completed', 'the video job', 10_000);
      const clip = await call(`/videos/${videoId}/content`);
      expect(clip.status).toBe(200);
      expect((await call(`/videos/${videoId}`, { key: otherKey })).status).toBe(404);

      // Everything settles before the stores are read.
      await eventually(async () => (await stores.billing.openHolds(ACCOUNT)) === 0, 'no open hold');
    } finally {
      process.stdout.write = realOut;
      process.stderr.write = realErr;
      await gateway?.dispose();
    }

    try {
      // Every key under the prefix, every value, in every type; DUMP as well.
      const stored: string[] = [];
      let cursor = '0';
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', '500');
        cursor = next;
        for (const k of keys) {
          stored.push(k);
          const type = await redis.type(k);
          if (type === 'string') stored.push((await redis.get(k)) ?? '');
          else if (type === 'hash') stored.push(JSON.stringify(await redis.hgetall(k)));
          else if (type === 'list') stored.push(...(await redis.lrange(k, 0, -1)));
          else if (type === 'zset') stored.push(...(await redis.zrange(k, '0', '-1', 'WITHSCORES')));
          else if (type === 'set') stored.push(...(await redis.smembers(k)));
          const dump = await redis.dumpBuffer(k);
          if (dump) stored.push(dump.toString('latin1'));
        }
      } while (cursor !== '0');
      expect(stored.length).toBeGreaterThan(20);
      // The stores keep what they should: key digests and display prefixes, not keys.
      expect(stored.some((s) => s.includes(setup.devKey.slice(0, 10)))).toBe(true);

      const problems: string[] = [];
      const scan = (where: string, texts: string[]) => {
        for (const t of texts) for (const e of expand(t)) for (const l of leaks(secrets, e)) problems.push(`${where}: ${l}: ${e.slice(0, 160)}`);
      };
      scan('log', logLines);
      scan('console', consoleWrites);
      scan('redis', stored);
      scan('answer', answers);
      expect(logLines.length).toBeGreaterThan(0); // the failed stream at least was logged
      expect(answers.length).toBeGreaterThan(100);
      expect(problems).toEqual([]);
    } finally {
      await deleteKeysWithPrefix(redis, prefix);
      redis.disconnect();
      await stores.close();
      await proxy.close();
      await up.close();
      await media.close();
    }
  });
});

// ---- (c) ------------------------------------------------------------------------------------

describe('(c) job ids are unguessable and scoped to their account', () => {
  let media: MediaUpstream;
  beforeAll(async () => {
    media = await startMediaUpstream();
  });
  afterAll(async () => {
    await media?.close();
  });

  it('>= 128 bits of base62, all distinct; another account (or the wrong kind, a prefix, another case) gets 404 job_not_found', async () => {
    const otherKey = testKey();
    const setup = testConfig({
      models: mediaModels('media'),
      accounts: [{ id: OTHER, walletUsd: 100 }],
      keys: [{ key: otherKey, account: OTHER, kind: 'developer' }],
      limits: { inlineImageDeadlineMs: 50, inFlightImageJobs: 64, inFlightVideoJobs: 64, jobPollIntervalMs: 50 },
    });
    setup.options.upstreams = { ...setup.options.upstreams, media: { baseUrl: media.url, apiKey: MEDIA_UPSTREAM_KEY, timeoutMs: 10_000 } };
    const { gateway, stores } = await makeGateway(setup.options);
    const call = async (path: string, key: string, body?: unknown) => {
      const res = await gateway.fetch(
        new Request(`http://gateway.test/v1${path}`, {
          method: body === undefined ? 'GET' : 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        }),
        { clientAddress: '198.51.100.20' },
      );
      return { status: res.status, headers: res.headers, json: (await res.json()) as Record<string, unknown> };
    };
    try {
      const gate = media.holdImages();
      const ids: Array<{ id: string; kind: 'images' | 'videos' }> = [];
      for (let i = 0; i < 20; i++) {
        const r = await call('/images/generations', setup.devKey, { model: IMAGE, prompt: `job ${i}` });
        expect(r.status).toBe(202);
        expect(r.headers.get('location')).toBe(`/v1/images/${String(r.json.id)}`);
        ids.push({ id: String(r.json.id), kind: 'images' });
      }
      for (let i = 0; i < 5; i++) {
        const r = await call('/videos', setup.devKey, { model: VIDEO, prompt: `clip ${i}`, seconds: 4 });
        expect(r.status).toBe(202);
        ids.push({ id: String(r.json.id), kind: 'videos' });
      }

      const BITS_PER_BASE62 = Math.log2(62);
      for (const { id, kind } of ids) {
        const m = (kind === 'images' ? /^img_([A-Za-z0-9]+)$/ : /^video_([A-Za-z0-9]+)$/).exec(id);
        expect(m, id).not.toBeNull();
        expect(m![1]!.length).toBeGreaterThanOrEqual(32);
        expect(m![1]!.length * BITS_PER_BASE62).toBeGreaterThanOrEqual(128);
      }
      expect(new Set(ids.map((x) => x.id)).size).toBe(ids.length);
      // Not sequential, not time-ordered: the random parts share no long common prefix.
      const randomParts = ids.map(({ id }) => id.slice(id.indexOf('_') + 1));
      for (let i = 0; i < randomParts.length; i++) {
        for (let j = i + 1; j < randomParts.length; j++) {
          let k = 0;
          while (randomParts[i]![k] === randomParts[j]![k]) k++;
          expect(k).toBeLessThan(6);
        }
      }
      expect(new Set(randomParts.join('')).size).toBeGreaterThan(50);

      for (const { id, kind } of ids) {
        // The owner sees it; the other account does not, on any route, nor any near miss of it.
        expect((await call(`/${kind}/${id}`, setup.devKey)).status).toBe(200);
        const swapped = id.replace(/[a-z]/, (c) => c.toUpperCase());
        const probes = [
          [`/${kind}/${id}`, otherKey],
          [`/${kind === 'images' ? 'videos' : 'images'}/${id}`, setup.devKey],
          [`/${kind}/${id.slice(0, -1)}`, setup.devKey],
          [`/${kind}/${swapped}`, setup.devKey],
          [`/${kind}/${encodeURIComponent(id)}%00`, setup.devKey],
        ];
        if (kind === 'videos') probes.push([`/videos/${id}/content`, otherKey]);
        for (const [path, key] of probes) {
          const r = await call(path!, key!);
          expect(r.status, path).toBe(404);
          expect((r.json.error as { code: string }).code).toBe('job_not_found');
        }
      }
      gate.open();
      for (const v of media.videos()) media.finishVideo(v.id);
      await eventually(async () => (await stores.billing.openHolds(ACCOUNT)) === 0, 'every job to finish', 10_000);
    } finally {
      await gateway.dispose();
      await stores.close();
    }
  });
});
