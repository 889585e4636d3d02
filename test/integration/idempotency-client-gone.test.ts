/**
 * Idempotency-Key when the client goes away before its answer is written: it left while the
 * charge was being made (a slow store), so the answer was paid for and never read. The key
 * must not stay in flight (409) for as long as the process runs: a whole answer is kept and
 * replays, charged once; a stream the client left mid-way is forgotten and its retry runs.
 * Both ways in: the gateway's own node:http lane, and the server adapter's (a plugin is set).
 */
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, MODEL, postChat, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { type Behavior, startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const body = { model: MODEL, messages: [{ role: 'user', content: 'charge me once' }] };

describe.each([
  { lane: 'node lane', plugins: [] },
  { lane: 'server adapter', plugins: [{ name: 'noop', onRequest() {} }] },
])('Idempotency-Key, client gone before its answer is written ($lane)', ({ plugins }) => {
  let up: TestUpstream;
  let gw: RunningGateway;
  let devKey: string;
  /** How long each settle waits after it landed (the store answering slowly). */
  let settleDelay = 0;

  beforeAll(async () => {
    up = await startTestUpstream();
    const stores = createMemoryStores();
    const settle = stores.billing.settle.bind(stores.billing);
    stores.billing.settle = async (req) => {
      const done = await settle(req);
      if (settleDelay) await sleep(settleDelay);
      return done;
    };
    const setup = testConfig({ upstreamUrl: up.url, limits: { idempotencyLockTtlMs: 600 } });
    devKey = setup.devKey;
    gw = await startGateway({ ...setup.options, stores, plugins });
  });

  afterAll(async () => {
    await gw?.close();
    await up?.close();
  });

  const headers = (key: string) => ({ authorization: `Bearer ${devKey}`, 'content-type': 'application/json', 'idempotency-key': key });

  /** Sends `payload` and drops the connection after `ms`, whatever came back. */
  function dropAfter(ms: number, key: string, payload: unknown): Promise<void> {
    return new Promise((resolve) => {
      const text = JSON.stringify(payload);
      const req = request(`${gw.baseURL}/chat/completions`, { method: 'POST', headers: { ...headers(key), 'content-length': Buffer.byteLength(text) } });
      req.on('error', () => undefined);
      req.end(text);
      setTimeout(() => {
        req.destroy();
        resolve();
      }, ms);
    });
  }

  const charges = async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;

  /** A retry with `key` runs (no replay, no 409): a second upstream call since `calls`. */
  async function expectRetryRuns(key: string, calls: number): Promise<void> {
    up.setBehavior({ kind: 'stream', chunks: ['again'] });
    const retry = await postChat(gw.baseURL, devKey, { ...body, stream: true }, { headers: headers(key) });
    const text = await retry.text();
    expect(retry.status, text).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(text).toContain('again');
    expect(up.requests.length - calls).toBe(2);
  }

  for (const shape of [
    { name: 'a plain answer', payload: body, behavior: { kind: 'json', content: 'the answer' } as Behavior },
    { name: 'a stream whole on arrival', payload: { ...body, stream: true }, behavior: { kind: 'stream', chunks: ['all', ' at', ' once'] } as Behavior },
  ]) {
    it(`${shape.name} paid for while its client left is kept: the retry replays it, charged once`, async () => {
      up.setBehavior(shape.behavior);
      const key = `gone-${shape.name.replaceAll(' ', '-')}-${Math.random()}`;
      const [before, calls] = [await charges(), up.requests.length];
      settleDelay = 500;
      await dropAfter(250, key, shape.payload);
      // The charge lands; then the answer finds no client to write to.
      await sleep(700);
      settleDelay = 0;
      // Well past the in-flight TTL (600 ms): a marker nobody renews or clears would still be there.
      await sleep(1_500);
      const retry = await postChat(gw.baseURL, devKey, shape.payload, { headers: headers(key) });
      const text = await retry.text();
      expect(retry.status, text).toBe(200);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(text).toContain(shape.name === 'a plain answer' ? 'the answer' : ' once');
      expect(up.requests.length - calls).toBe(1);
      expect((await charges()) - before).toBe(1);
    });
  }

  it('a stream its client left before the upstream answered is forgotten: the retry runs', async () => {
    up.setBehavior({
      kind: 'custom',
      async handle(_req, res) {
        await sleep(500);
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const chunk = (delta: unknown, finish: string | null = null) =>
          `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
        res.write(chunk({ role: 'assistant', content: 'late' }));
        await sleep(300);
        if (!res.destroyed) res.end(`${chunk({}, 'stop')}data: [DONE]\n\n`);
      },
    });
    const key = `gone-before-head-${Math.random()}`;
    const calls = up.requests.length;
    await dropAfter(200, key, { ...body, stream: true });
    // Past the upstream's head: the stream was made for a client that had gone.
    await sleep(1_200);
    await expectRetryRuns(key, calls);
  });

  it('a stream its client left mid-way is forgotten: the retry runs', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['one', ' two', ' three', ' four'], delayMs: 150 });
    const key = `gone-mid-stream-${Math.random()}`;
    const calls = up.requests.length;
    await dropAfter(200, key, { ...body, stream: true });
    await sleep(300);
    await expectRetryRuns(key, calls);
  });
});
