/**
 * Operating the gateway: liveness and readiness (GET and HEAD, outside /v1, no key, not
 * limited; readiness 503 naming the part while a store does not answer), the start-up warning
 * for a Redis that keeps nothing on disk, routing by the request path only (a crafted Host
 * header changes nothing), and CORS (off by default; allowed origins get preflights answered
 * and their answers readable).
 */
import { createHash } from 'node:crypto';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type GatewayOptions } from '../../src/gateway.js';
import type { Logger } from '../../src/observability/log.js';
import { ConfigError } from '../../src/options.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { StoreUnavailableError } from '../../src/stores/errors.js';
import { ACCOUNT, MODEL, eventually, makeGateway, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { hasRedisServer, startRedisServer } from '../helpers/redis-servers.js';
import { chargesOf } from '../helpers/billing.js';

const CLIENT = { clientAddress: '192.0.2.10' };
const get = (gateway: ReturnType<typeof createGateway>, path: string, init: RequestInit = {}) =>
  gateway.fetch(new Request(`http://gateway.test${path}`, init), CLIENT);

function capturingLogger(): Logger & { lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const push = (level: string) => (e: Record<string, unknown>) => lines.push({ level, ...e });
  return { lines, info: push('info'), warn: push('warn'), error: push('error') };
}

type Envelope = { error: { message: string; type: string; code: string; metadata?: { checks?: Record<string, string> } } };

describe('GET and HEAD /health and /ready', () => {
  it('/health and /ready answer 200 with memory stores, without a key and outside every limit', async () => {
    const { gateway } = await makeGateway({ ...testConfig().options, limits: { ipRequestsPerMinute: 1 } });
    try {
      for (let i = 0; i < 5; i++) {
        const health = await get(gateway, '/health');
        expect(health.status).toBe(200);
        expect(await health.json()).toEqual({ status: 'ok' });
        const ready = await get(gateway, '/ready');
        expect(ready.status).toBe(200);
        expect(await ready.json()).toEqual({ status: 'ready', checks: { startup: 'ok', storage: 'ok' } });
        expect(ready.headers.get('x-request-id')).toMatch(/^req_/);
      }
    } finally {
      await gateway.dispose();
    }
  });

  it('HEAD gets the GET status and headers without a body; other methods get 405 with Allow', async () => {
    const stores = createMemoryStores();
    let down = false;
    stores.ping = async () => {
      if (down) throw new StoreUnavailableError('Redis ping failed: connect ECONNREFUSED 10.0.0.7:6379');
    };
    const gw = await startGateway({ ...testConfig().options, stores });
    const origin = gw.origin;
    try {
      for (const path of ['/health', '/ready']) {
        const head = await fetch(`${origin}${path}`, { method: 'HEAD' });
        expect(head.status).toBe(200);
        expect(head.headers.get('content-type')).toContain('application/json');
        expect(await head.text()).toBe('');
        const post = await fetch(`${origin}${path}`, { method: 'POST' });
        expect(post.status).toBe(405);
        expect(post.headers.get('allow')).toBe('GET, HEAD');
        expect(((await post.json()) as Envelope).error.code).toBe('method_not_allowed');
      }
      down = true;
      const head = await fetch(`${origin}/ready`, { method: 'HEAD' });
      expect(head.status).toBe(503);
      expect(head.headers.get('retry-after')).toBe('1');
      expect(await head.text()).toBe('');
    } finally {
      await gw.close();
    }
  });

  it('/ready is 503 in the error envelope naming the storage while it does not answer, without leaking its error', async () => {
    const stores = createMemoryStores();
    stores.ping = async () => {
      throw new StoreUnavailableError('Redis ping failed: connect ECONNREFUSED 10.0.0.7:6379');
    };
    const log = capturingLogger();
    const { gateway } = await makeGateway({ ...testConfig().options, stores, logger: log });
    try {
      const res = await get(gateway, '/ready');
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      const body = (await res.json()) as Envelope;
      expect(body.error).toMatchObject({ type: 'service_unavailable', code: 'service_unavailable', metadata: { checks: { startup: 'ok', storage: 'unavailable' } } });
      expect(body.error.message).toMatch(/storage is unavailable/);
      expect(JSON.stringify(body)).not.toContain('10.0.0.7');
      // The cause goes to the log, for the operator.
      expect(log.lines.some((l) => l.level === 'warn' && String(l.err).includes('ECONNREFUSED'))).toBe(true);
      // Liveness is not readiness.
      expect((await get(gateway, '/health')).status).toBe(200);
    } finally {
      await gateway.dispose();
    }
  });

  it('/ready is 503 "startup is pending" until seeding finished, while /health already answers', async () => {
    const stores = createMemoryStores();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const create = stores.accounts.create.bind(stores.accounts);
    stores.accounts.create = async (...args) => {
      await gate;
      return create(...args);
    };
    const gateway = createGateway({ ...testConfig().options, stores, basePath: '/api' });
    try {
      expect((await get(gateway, '/api/health')).status).toBe(200);
      const pending = await get(gateway, '/api/ready');
      expect(pending.status).toBe(503);
      const body = (await pending.json()) as Envelope;
      expect(body.error.metadata?.checks).toEqual({ startup: 'pending', storage: 'ok' });
      expect(body.error.message).toMatch(/startup is pending/);
      release();
      await gateway.ready;
      expect((await get(gateway, '/api/ready')).status).toBe(200);
      // Without the base path these are unknown routes.
      expect((await get(gateway, '/ready')).status).toBe(404);
    } finally {
      release();
      await gateway.dispose();
    }
  });

  describe.runIf(hasRedisServer || process.env.CI === 'true')('on a real Redis that goes away and comes back', () => {
    it('/ready follows the Redis: 200, 503 while it is down, 200 once it is back', async () => {
      expect(hasRedisServer, 'redis-server must be installed under CI=true').toBe(true);
      let redis = await startRedisServer();
      const stores = createRedisStores({ url: redis.url, keyPrefix: 'mgready:' });
      const { gateway } = await makeGateway({ ...testConfig().options, stores });
      try {
        expect((await get(gateway, '/ready')).status).toBe(200);
        await redis.kill();
        const t0 = Date.now();
        const down = await get(gateway, '/ready');
        expect(down.status).toBe(503);
        expect(((await down.json()) as Envelope).error.metadata?.checks?.storage).toBe('unavailable');
        expect(Date.now() - t0).toBeLessThan(5_000);
        redis = await startRedisServer([], redis.port);
        await eventually(async () => (await get(gateway, '/ready')).status === 200, 'ready again', 10_000);
      } finally {
        await gateway.dispose();
        await stores.close();
        await redis.kill();
      }
    });
  });
});

describe('start-up warning for a Redis that keeps nothing on disk', () => {
  it.runIf(hasRedisServer || process.env.CI === 'true')('is logged for a Redis with neither AOF nor RDB, and not for one with AOF', async () => {
    expect(hasRedisServer, 'redis-server must be installed under CI=true').toBe(true);
    const ephemeral = await startRedisServer();
    const durable = await startRedisServer(['--appendonly', 'yes']);
    const log = capturingLogger();
    const stores = createRedisStores({ url: ephemeral.url, keyPrefix: 'mgwarn:' });
    const gateway = createGateway({ stores, logger: log });
    const durableStores = createRedisStores({ url: durable.url, keyPrefix: 'mgwarn:' });
    try {
      await gateway.ready;
      await eventually(() => log.lines.length > 0, 'the start-up warning', 3_000);
      expect(log.lines).toHaveLength(1);
      expect(log.lines[0]).toMatchObject({ level: 'warn' });
      expect(String(log.lines[0]!.msg)).toMatch(/keeps nothing on disk.*would not survive a Redis restart/);
      expect(await durableStores.durabilityWarning!()).toBeNull();
    } finally {
      await gateway.dispose();
      await Promise.all([stores.close(), durableStores.close()]);
      await Promise.all([ephemeral.kill(), durable.kill()]);
    }
  });

  it('an unreachable Redis at start-up logs no warning (readiness reports it)', async () => {
    const log = capturingLogger();
    const stores = createRedisStores({ url: 'redis://127.0.0.1:1', keyPrefix: 'mgwarn:' });
    const gateway = createGateway({ stores, logger: log });
    try {
      await expect(stores.durabilityWarning!()).rejects.toBeInstanceOf(StoreUnavailableError);
      await gateway.ready;
      expect(log.lines).toEqual([]);
    } finally {
      await gateway.dispose();
      await stores.close();
    }
  });
});

/** One raw HTTP/1.1 request (fetch will not send a Host header it did not build). */
function rawRequest(port: number, head: string, body = ''): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let data = '';
    socket.on('data', (d) => (data += d.toString('utf8')));
    socket.on('error', reject);
    socket.on('end', () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(data)?.[1] ?? 0);
      resolve({ status, body: data.slice(data.indexOf('\r\n\r\n') + 4) });
    });
    socket.write(`${head}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  });
}

describe('routing reads the request path only', () => {
  let gw: RunningGateway;
  let devKey: string;
  let port: number;
  const IMAGE = 'sim/image';

  beforeAll(async () => {
    const setup = testConfig({ models: [{ id: IMAGE, type: 'image', upstream: 'test', pricing: { unit: 'image', from: '0.02', tiers: {} } }] });
    devKey = setup.devKey;
    gw = await startGateway(setup.options);
    port = Number(new URL(gw.origin).port);
  });
  afterAll(async () => {
    await gw?.close();
  });

  it('a Host header holding a path and "?" does not turn a chat call into an image generation', async () => {
    const { balance: before } = await gw.stores.billing.wallet(ACCOUNT);
    const imageBody = JSON.stringify({ model: IMAGE, prompt: 'a lighthouse', messages: [{ role: 'user', content: 'hi' }] });
    const crafted = await rawRequest(
      port,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x/v1/images/generations?\r\nAuthorization: Bearer ${devKey}\r\nContent-Type: application/json`,
      imageBody,
    );
    // The chat route ran: an image model is not a chat model.
    expect(crafted.status).toBe(404);
    expect(JSON.parse(crafted.body)).toMatchObject({ error: { code: 'model_not_found' } });
    expect(await chargesOf(gw.stores.billing.ledger(ACCOUNT))).toEqual([]);
    expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(before);

    const chatBody = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    const chat = await rawRequest(
      port,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x/v1/images/generations?\r\nAuthorization: Bearer ${devKey}\r\nContent-Type: application/json`,
      chatBody,
    );
    expect(chat.status).toBe(200);
    expect(JSON.parse(chat.body)).toMatchObject({ object: 'chat.completion' });
  });

  it('nor does it reach /health, /ready or another /v1 route', async () => {
    const models = await rawRequest(port, `GET /v1/models HTTP/1.1\r\nHost: x/health?\r\nAuthorization: Bearer ${devKey}`);
    expect(models.status).toBe(200);
    expect(JSON.parse(models.body)).toMatchObject({ object: 'list' });
    const health = await rawRequest(port, `GET /health HTTP/1.1\r\nHost: x/v1/key?`);
    expect(JSON.parse(health.body)).toEqual({ status: 'ok' });
    const unknown = await rawRequest(port, `GET /nothing HTTP/1.1\r\nHost: x/ready?`);
    expect(unknown.status).toBe(404);
    // The query is the target's own, not one a Host header opened.
    const listed = await rawRequest(port, `GET /v1/models?type=image HTTP/1.1\r\nHost: x/?type=video&\r\nAuthorization: Bearer ${devKey}`);
    expect((JSON.parse(listed.body) as { data: { id: string }[] }).data.map((m) => m.id)).toEqual([IMAGE]);
  });
});

describe('CORS', () => {
  const APP = 'https://app.example.com';
  const preflight = (origin: string, headers = 'authorization, content-type, x-stainless-os') =>
    new Request('http://gateway.test/v1/chat/completions', {
      method: 'OPTIONS',
      headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': headers },
    });
  const chat = (key: string, origin: string, extra: Record<string, unknown> = {}) =>
    new Request('http://gateway.test/v1/chat/completions', {
      method: 'POST',
      headers: { origin, authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], ...extra }),
    });
  async function withGateway(options: Omit<GatewayOptions, 'storage' | 'stores'>, fn: (g: ReturnType<typeof createGateway>, key: string) => Promise<void>) {
    const setup = testConfig();
    const { gateway } = await makeGateway({ ...setup.options, ...options });
    try {
      await fn(gateway, setup.devKey);
    } finally {
      await gateway.dispose();
    }
  }

  it('is off by default: no preflight answer, no CORS headers', async () => {
    await withGateway({}, async (gateway, key) => {
      const pre = await gateway.fetch(preflight(APP), CLIENT);
      expect(pre.status).toBe(405);
      expect(pre.headers.get('access-control-allow-origin')).toBeNull();
      const res = await gateway.fetch(chat(key, APP), CLIENT);
      expect(res.status).toBe(200);
      expect(res.headers.get('access-control-allow-origin')).toBeNull();
    });
  });

  it('answers a preflight from an allowed origin, before the IP throttle, echoing the asked headers', async () => {
    await withGateway({ cors: { origins: [APP] }, limits: { ipRequestsPerMinute: 1 } }, async (gateway) => {
      for (let i = 0; i < 3; i++) {
        const res = await gateway.fetch(preflight(APP), CLIENT);
        expect(res.status).toBe(204);
        expect(res.headers.get('access-control-allow-origin')).toBe(APP);
        // The API's every method: DELETE too (a file, a video).
        expect(res.headers.get('access-control-allow-methods')?.split(', ').sort()).toEqual(['DELETE', 'GET', 'HEAD', 'OPTIONS', 'POST']);
        expect(res.headers.get('access-control-allow-headers')).toBe('authorization, content-type, x-stainless-os');
        expect(res.headers.get('access-control-max-age')).toBe('600');
        expect(res.headers.get('vary')).toContain('Origin');
        expect(res.headers.get('access-control-allow-credentials')).toBeNull();
      }
      // A value that is not a list of header names gets the default list instead of an echo.
      const odd = await gateway.fetch(preflight(APP, 'x-a, <script>'), CLIENT);
      expect(odd.headers.get('access-control-allow-headers')).toBe('authorization, content-type, idempotency-key, x-request-id');
    });
  });

  it('gives another origin no CORS headers, on the preflight or the call', async () => {
    await withGateway({ cors: { origins: [APP] } }, async (gateway, key) => {
      const pre = await gateway.fetch(preflight('https://evil.example'), CLIENT);
      expect(pre.status).toBe(204);
      expect(pre.headers.get('access-control-allow-origin')).toBeNull();
      const res = await gateway.fetch(chat(key, 'https://evil.example'), CLIENT);
      expect(res.headers.get('access-control-allow-origin')).toBeNull();
    });
  });

  it('makes answers to an allowed origin readable: success, stream and error, with the headers clients read exposed', async () => {
    await withGateway({ cors: { origins: [APP, 'http://localhost:5173'] } }, async (gateway, key) => {
      const ok = await gateway.fetch(chat(key, APP), CLIENT);
      expect(ok.status).toBe(200);
      expect(ok.headers.get('access-control-allow-origin')).toBe(APP);
      const exposed = ok.headers.get('access-control-expose-headers') ?? '';
      for (const h of ['x-request-id', 'retry-after', 'x-ratelimit-remaining-requests']) expect(exposed).toContain(h);
      expect(ok.headers.get('vary')).toContain('Origin');

      const stream = await gateway.fetch(chat(key, 'http://localhost:5173', { stream: true }), CLIENT);
      expect(stream.headers.get('content-type')).toContain('text/event-stream');
      expect(stream.headers.get('access-control-allow-origin')).toBe('http://localhost:5173');
      expect(await stream.text()).toContain('data: [DONE]');

      const denied = await gateway.fetch(chat('sk-mg-wrong', APP), CLIENT);
      expect(denied.status).toBe(401);
      expect(denied.headers.get('access-control-allow-origin')).toBe(APP);
    });
  });

  it('"*" allows any origin', async () => {
    await withGateway({ cors: { origins: ['*'] } }, async (gateway, key) => {
      expect((await gateway.fetch(preflight('https://any.example'), CLIENT)).headers.get('access-control-allow-origin')).toBe('*');
      expect((await gateway.fetch(chat(key, 'https://any.example'), CLIENT)).headers.get('access-control-allow-origin')).toBe('*');
    });
  });

  it('covers /v1 only: the console, the admin API, /metrics and the probes get no CORS headers, even for "*"', async () => {
    const admin = { tokenSha256: createHash('sha256').update('admin-token').digest('hex') };
    await withGateway({ cors: { origins: ['*'] }, metrics: { path: '/metrics' }, admin }, async (gateway) => {
      const evil = 'https://evil.example';
      const asks = [
        new Request('http://gateway.test/admin/v1/accounts', { method: 'OPTIONS', headers: { origin: evil, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' } }),
        new Request('http://gateway.test/admin/v1/accounts', { headers: { origin: evil, authorization: 'Bearer admin-token' } }),
        new Request('http://gateway.test/admin', { headers: { origin: evil } }),
        new Request('http://gateway.test/metrics', { headers: { origin: evil } }),
        new Request('http://gateway.test/ready', { headers: { origin: evil } }),
        new Request('http://gateway.test/health', { headers: { origin: evil } }),
      ];
      for (const req of asks) {
        const res = await gateway.fetch(req, CLIENT);
        expect(res.headers.get('access-control-allow-origin'), `${req.method} ${req.url}`).toBeNull();
        await res.arrayBuffer();
      }
      // /v1 still answers any origin.
      expect((await gateway.fetch(preflight(evil), CLIENT)).headers.get('access-control-allow-origin')).toBe('*');
    });
  });

  it('refuses an origin with a path, naming the field', () => {
    expect(() => createGateway({ cors: { origins: ['https://app.example.com/app'] } })).toThrow(ConfigError);
    expect(() => createGateway({ cors: { origins: ['https://app.example.com/app'] } })).toThrow(/cors\.origins\[0\]/);
  });
});
