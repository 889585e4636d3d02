/**
 * A PostgreSQL that stops answering (paused, partitioned, its disk stalled) must not hang
 * requests: the server then enforces nothing, not even its own statement_timeout, so the
 * client times every statement. Through a pausable TCP proxy in front of the real
 * PostgreSQL: while it is paused, a chat call with a known key, one with an unknown key (the
 * 401 path reads the key store) and the admin API each get 503 service_unavailable with
 * Retry-After within the store's timeout; once it answers again, calls succeed by themselves.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import type { Gateway } from '../../src/gateway.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import type { Stores } from '../../src/stores/types.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';
import { type FaultProxy, startFaultProxy } from '../helpers/fault-proxy.js';
import { MODEL, eventually, makeGateway, testConfig, testKey } from '../helpers/gateway.js';

const pgDown = await postgresProblem(POSTGRES_URL);
const SCHEMA = freshSchema('mgstall');
const TIMEOUT_MS = 1_000;
/** Slack for a loaded machine: the answer comes at TIMEOUT_MS, never near a hung call's 60 s. */
const SLACK_MS = 700;

let proxy: FaultProxy;
let stores: Stores;
let gateway: Gateway;
let devKey: string;

/** A gateway answer, or "hung" when it has none within 10 s (the test then fails, not hangs). */
async function timed(request: Request, clientAddress = '198.51.100.7'): Promise<{ status: number | 'hung'; ms: number; retryAfter: string | null; code?: string }> {
  const started = performance.now();
  const hung = new Promise<'hung'>((r) => setTimeout(() => r('hung'), 10_000).unref());
  const res = await Promise.race([gateway.fetch(request, { clientAddress }), hung]);
  const ms = performance.now() - started;
  if (res === 'hung') return { status: 'hung', ms, retryAfter: null };
  const body = (await res.json()) as { error?: { code: string } };
  return { status: res.status, ms, retryAfter: res.headers.get('retry-after'), ...(body.error ? { code: body.error.code } : {}) };
}

const chat = (key: string, clientAddress?: string) =>
  timed(
    new Request('http://gw.test/v1/chat/completions', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 }),
    }),
    clientAddress,
  );
const admin = () => timed(new Request('http://gw.test/admin/v1/accounts', { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }));

describe.runIf(pgDown === null || process.env.CI === 'true')('PostgreSQL that stops answering', () => {
  beforeAll(async () => {
    expect(pgDown, `PostgreSQL at ${POSTGRES_URL}`).toBeNull();
    const target = new URL(POSTGRES_URL);
    proxy = await startFaultProxy(`http://${target.hostname}:${target.port || 5432}`);
    target.host = `127.0.0.1:${proxy.port}`;
    stores = await createPostgresStores({ url: target.toString(), schema: SCHEMA, timeoutMs: TIMEOUT_MS, maxConnections: 4 });
    const setup = testConfig();
    devKey = setup.devKey;
    ({ gateway } = await makeGateway({ ...setup.options, stores, admin: { tokenSha256: ADMIN_SHA } }));
  }, 60_000);

  afterAll(async () => {
    proxy?.resume();
    await gateway?.dispose();
    await stores?.close();
    await proxy?.close();
    if (pgDown === null) await dropSchema(SCHEMA);
  });

  it('answers normally through the proxy', async () => {
    expect((await chat(devKey)).status).toBe(200);
    expect((await chat(testKey())).status).toBe(401);
    expect((await admin()).status).toBe(200);
  });

  it('while paused: 503 service_unavailable with Retry-After within the timeout, on every path', async () => {
    proxy.pause();
    try {
      for (const [what, call] of [
        ['chat with a known key', () => chat(devKey)],
        ['chat with an unknown key', () => chat(testKey())],
        ['admin API', admin],
      ] as const) {
        const r = await call();
        expect(r.status, what).toBe(503);
        expect(r.code, what).toBe('service_unavailable');
        expect(r.retryAfter, what).not.toBeNull();
        expect(r.ms, what).toBeLessThan(TIMEOUT_MS + SLACK_MS);
      }
      // Calls at once, more than the pool has connections: each still answers in time.
      const many = await Promise.all(Array.from({ length: 10 }, () => chat(devKey)));
      for (const r of many) {
        expect(r.status).toBe(503);
        expect(r.ms).toBeLessThan(TIMEOUT_MS + SLACK_MS);
      }
    } finally {
      proxy.resume();
    }
  }, 60_000);

  it('serves again by itself once PostgreSQL answers', async () => {
    await eventually(async () => (await chat(devKey)).status === 200, 'a chat call succeeds again', 10_000);
    expect((await chat(testKey())).status).toBe(401);
    expect((await admin()).status).toBe(200);
  }, 20_000);

  it('connections that stay silent for good are dropped: new ones serve', async () => {
    const burst = (from: number) => Promise.all(Array.from({ length: 8 }, (_, i) => chat(devKey, `198.51.100.${from + i}`)));
    // The pool opens all its connections...
    await burst(10);
    expect(proxy.connections.filter((c) => c.ended === 'open').length).toBeGreaterThanOrEqual(4);
    proxy.pause();
    // Every pooled connection gets a statement that will never be answered (from as many
    // addresses: the rate windows of one address would share one batch)...
    await burst(100);
    // ...as after a failover: new connections reach the server, the old ones stay black-holed.
    proxy.resume({ keepStalled: true });
    // The pool must not stay stuck on them: the watchdog drops a connection silent for
    // TIMEOUT_MS + 1 s and the next statement opens a fresh one.
    await eventually(async () => (await chat(devKey)).status === 200, 'a chat call succeeds after the stall', 10_000);
  }, 30_000);
});
