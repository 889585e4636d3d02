/**
 * A stream can run for minutes: once its upstream request is out, the gateway keeps no copy of
 * the client's request body. A client that does not ask for usage gets its body rewritten for
 * the upstream (the gateway asks for usage itself), so its own bytes are then the gateway's
 * alone to keep or drop: with a weak reference to them and forced collections, this checks
 * they are gone while the stream is still held open, and that the call still ends and bills.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Context } from '../../src/pipeline/context.js';
import { chatCost } from '../helpers/billing.js';
import { collected } from '../helpers/gc.js';
import { ACCOUNT, MODEL, postChatRaw, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const LONG_MODEL = 'test/long-context';

const originalBody = Context.prototype.body;

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let releaseUpstream: () => void;
/** Weak references to the body bytes each request context read. */
let read: Array<{ view: WeakRef<Uint8Array>; memory: WeakRef<ArrayBufferLike> }>;

beforeEach(async () => {
  read = [];
  // Patched by hand, not with a spy: a spy keeps every value it returned (here the body).
  Context.prototype.body = function (this: Context) {
    const bytes = originalBody.call(this);
    void bytes.then(
      (b) => read.push({ view: new WeakRef(b), memory: new WeakRef(b.buffer) }),
      () => undefined,
    );
    return bytes;
  };
  const gate = new Promise<void>((resolve) => {
    releaseUpstream = resolve;
  });
  up = await startTestUpstream();
  up.setBehavior({
    kind: 'custom',
    async handle(_req, res) {
      const chunk = (delta: Record<string, unknown>, finish: string | null) =>
        `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(chunk({ role: 'assistant', content: 'Hold on' }, null));
      await gate;
      res.write(chunk({}, 'stop'));
      res.write(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: { prompt_tokens: 250_000, completion_tokens: 2 } })}\n\n`);
      res.end('data: [DONE]\n\n');
    },
  });
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 1000 });
  // A model whose context takes the 1 MB prompt (the test model's is 32,000 tokens).
  const base = setup.options.models![0]!;
  setup.options.models!.push({ ...base, id: LONG_MODEL, contextLength: 2_000_000 });
  devKey = setup.devKey;
  gw = await startGateway({ ...setup.options, limits: { ...setup.options.limits, maxBodyBytes: 4 << 20 } });
});

afterEach(async () => {
  Context.prototype.body = originalBody;
  releaseUpstream();
  await gw.close();
  await up.close();
});

describe('a held stream', () => {
  it('keeps no copy of a 1 MB request body once its upstream has it, and still ends billed by usage', async () => {
    const prompt = 'y'.repeat(1 << 20);
    const body = { model: LONG_MODEL, messages: [{ role: 'user', content: prompt }], stream: true };
    const res = await postChatRaw(gw.baseURL, devKey, body);
    expect(res.statusCode).toBe(200);
    let text = '';
    res.setEncoding('utf8');
    const firstChunk = new Promise<void>((resolve) => res.once('data', () => resolve()));
    res.on('data', (s: string) => {
      text += s;
    });
    const ended = new Promise<void>((resolve) => res.once('end', () => resolve()));
    await firstChunk;

    // The upstream got the rewritten body (the gateway asked for usage), so the client's bytes
    // are nobody's but the gateway's: while the stream is held open, they must be collectable.
    expect(up.requests[0]?.body?.stream_options).toEqual({ include_usage: true });
    expect(read).toHaveLength(1);
    expect(read[0]!.view.deref()?.byteLength).toBe(Buffer.byteLength(JSON.stringify(body)));
    expect(await collected(read[0]!.view)).toBe(true);
    expect(await collected(read[0]!.memory)).toBe(true);

    releaseUpstream();
    await ended;
    expect(text).toContain('Hold on');
    expect(text).toContain('data: [DONE]');
    const charges = (await gw.gateway.admin.ledger(ACCOUNT)).filter((e) => e.units.kind !== 'credit');
    expect(charges).toHaveLength(1);
    expect(charges[0]?.cost).toBe(chatCost(250_000, 2));
  });
});
