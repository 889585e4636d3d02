/**
 * Refusals name the route the path matched, in the access line and in the metrics: a 401, an
 * IP or key-rate 429, a 405, a 413 and a 503 while the store does not answer are logged under
 * "/v1/chat/completions" or "/v1/models", never "unmatched" (which stays for paths that match
 * no route). Every line carries the request id as `request_id`, the store warning included.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { createLogger } from '../../src/observability/logs.js';
import { createRedisStores } from '../../src/stores/redis/index.js';
import { eventually, MODEL, testConfig } from '../helpers/gateway.js';
import { freePort } from '../helpers/redis-servers.js';

const METRICS_TOKEN = 'scrape-token-refusals-0123';

/** A logger (the default one, pino) writing its lines into an array. */
function capture(): { lines: Array<Record<string, unknown>>; logger: ReturnType<typeof createLogger> } {
  const lines: Array<Record<string, unknown>> = [];
  return { lines, logger: createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) }) };
}

const open: Gateway[] = [];
afterAll(() => Promise.all(open.map((g) => g.dispose())));

async function call(gateway: Gateway, path: string, init: RequestInit = {}): Promise<{ status: number; requestId: string }> {
  const res = await gateway.fetch(new Request(`http://gw.test${path}`, init));
  await res.arrayBuffer();
  return { status: res.status, requestId: res.headers.get('x-request-id')! };
}

const chat = (key: string | null, body: unknown = { model: MODEL, messages: [{ role: 'user', content: 'hi' }] }): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
  body: typeof body === 'string' ? body : JSON.stringify(body),
});

describe('refusals carry their route', () => {
  it('401, 405, 413, the key-rate and IP 429s name the matched route; an unknown path is "unmatched"', async () => {
    const { lines, logger } = capture();
    const setup = testConfig({ limits: { ipRequestsPerMinute: 7, keyRequestsPerMinute: 1, maxBodyBytes: 2_000 } });
    const gateway = createGateway({ ...setup.options, logger, metrics: { path: '/metrics', token: METRICS_TOKEN } });
    open.push(gateway);
    await gateway.ready;
    const auth = { headers: { authorization: `Bearer ${setup.devKey}` } };
    const agent = { headers: { authorization: `Bearer ${setup.agentKey}` } };

    const refusals = [
      { ...(await call(gateway, '/v1/chat/completions', chat(null))), route: '/v1/chat/completions', expected: 401 },
      { ...(await call(gateway, '/v1/chat/completions', { method: 'GET', ...auth })), route: '/v1/chat/completions', expected: 405 },
      { ...(await call(gateway, '/v1/chat/completions', chat(setup.devKey, 'x'.repeat(5_000)))), route: '/v1/chat/completions', expected: 413 },
      { ...(await call(gateway, '/v1/models', agent)), route: '/v1/models', expected: 200 },
      { ...(await call(gateway, '/v1/models', agent)), route: '/v1/models', expected: 429 },
      { ...(await call(gateway, '/v1/no/such/thing', auth)), route: 'unmatched', expected: 404 },
      { ...(await call(gateway, '/v1/models/x', agent)), route: '/v1/models/{id...}', expected: 429 },
      // The seventh request of this address this minute: the IP throttle refuses it.
      { ...(await call(gateway, '/v1/chat/completions', chat(setup.devKey))), route: '/v1/chat/completions', expected: 429 },
    ];
    for (const r of refusals) expect(r.status, r.route).toBe(r.expected);

    const access = (id: string) => lines.find((l) => l.msg === 'access' && l.request_id === id);
    await eventually(() => refusals.every((r) => access(r.requestId)), 'an access line per request');
    for (const r of refusals) expect(access(r.requestId), `${r.expected} ${r.route}`).toMatchObject({ route: r.route, status: r.expected });
    expect(access(refusals[4]!.requestId)).toMatchObject({ limit: 'key_requests_per_minute' });
    expect(access(refusals[7]!.requestId)).toMatchObject({ limit: 'ip_requests_per_minute' });

    const res = await gateway.fetch(new Request('http://gw.test/metrics', { headers: { authorization: `Bearer ${METRICS_TOKEN}` } }));
    const text = await res.text();
    for (const status of [401, 405, 413, 429]) expect(text).toMatch(new RegExp(`model_gateway_requests_total\\{route="/v1/chat/completions",status="${status}"`));
    expect(text).not.toMatch(/route="unmatched",status="(401|405|413|429)"/);
  });

  it('a 503 while the store does not answer names the route, and the store warning says request_id', async () => {
    const { lines, logger } = capture();
    // A Redis address nobody listens on: every store call fails as in an outage.
    const stores = createRedisStores({ url: `redis://127.0.0.1:${await freePort()}`, commandTimeoutMs: 300 });
    const { options } = testConfig();
    const gateway = createGateway({ ...options, accounts: [], keys: [], stores, logger });
    open.push(gateway);
    try {
      await gateway.ready;
      const r = await call(gateway, '/v1/chat/completions', chat('sk-mg-0123456789012345678901234567890123456789'));
      expect(r.status).toBe(503);
      await eventually(() => lines.some((l) => l.msg === 'access' && l.request_id === r.requestId), 'the access line');
      expect(lines.find((l) => l.msg === 'access' && l.request_id === r.requestId)).toMatchObject({
        route: '/v1/chat/completions',
        status: 503,
        error: 'service_unavailable',
      });
      const warning = lines.find((l) => l.msg === 'store unavailable' && l.request_id === r.requestId);
      expect(warning, JSON.stringify(lines.map((l) => l.msg))).toBeDefined();
      expect(warning).not.toHaveProperty('requestId');

      const probe = await call(gateway, '/ready');
      expect(probe.status).toBe(503);
      const readiness = lines.find((l) => l.msg === 'readiness: storage does not answer');
      expect(readiness).toMatchObject({ level: 40, request_id: probe.requestId });
      expect(readiness).not.toHaveProperty('requestId');
    } finally {
      await stores.close();
    }
  }, 30_000);
});
