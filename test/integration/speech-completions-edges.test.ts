/**
 * Speech and legacy completions at their edges, against a loopback upstream:
 * - several prompts in one completions call are each completed in their own context window:
 *   the cap sent when the client named none is the one the longest prompt leaves room for;
 * - `echo` returns the prompt at the front of each choice's text: when the upstream reports no
 *   usage and the output is counted, the echo is not billed again as completion tokens;
 * - speech: an upstream that answers 200 and fails before any audio is a 502 the client can
 *   read (not a dropped connection), and nothing is billed; a client that leaves after the
 *   upstream's 200, before the first audio, pays for the speech (its input is its prompt); a
 *   model with another target is served by it instead.
 */
import { request } from 'node:http';
import { countTokens } from 'gpt-tokenizer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargesOf, loadTokenizer } from '../helpers/billing.js';
import type { GatewayPlugin } from '../../src/index.js';
import { ACCOUNT, MODEL, eventually, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { AUDIO, mediaModels, speechCost } from '../helpers/media.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  await loadTokenizer();
  up = await startTestUpstream();
  // MODEL: context 32,000, at most 4,096 output tokens.
  const setup = testConfig({ upstreamUrl: up.url, models: mediaModels('test') });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});
afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const post = (path: string, body: unknown) =>
  fetch(`${gw.baseURL}${path}`, { method: 'POST', headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });

async function chargeOf(res: Response) {
  const id = res.headers.get('x-request-id');
  await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).some((e) => e.id === id), `charge ${id}`);
  return (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).find((e) => e.id === id)!;
}

describe('legacy completions', () => {
  it('two prompts that each fit are each asked for the model cap, not what their sum leaves', async () => {
    up.setBehavior({ kind: 'completion' });
    const res = await post('/completions', { model: MODEL, prompt: [Array(17_000).fill(100), Array(17_000).fill(100)] });
    expect(res.status).toBe(200);
    expect(up.requests.at(-1)!.body!.max_tokens).toBe(4096);
    // One prompt that leaves less than the model cap still gets what it leaves.
    await post('/completions', { model: MODEL, prompt: [Array(30_000).fill(100), Array(10).fill(100)] });
    expect(up.requests.at(-1)!.body!.max_tokens).toBe(2000);
  });

  it('an echoed prompt is not billed again as completion tokens, plain or streamed', async () => {
    const prompt = 'The quick brown fox jumps over the lazy dog. '.repeat(20);
    const produced = ' all done';
    for (const stream of [false, true]) {
      // The echo arrives in pieces on a stream: the first piece ends inside the prompt.
      up.setBehavior({ kind: 'completion', chunks: [prompt.slice(0, 100), prompt.slice(100), produced], usage: null });
      const res = await post('/completions', { model: MODEL, prompt, echo: true, max_tokens: 5, stream });
      await res.text();
      expect(res.status).toBe(200);
      const units = (await chargeOf(res)).units as { completion: number };
      expect(units.completion, stream ? 'streamed' : 'plain').toBe(countTokens(produced));
    }
  });
});

describe('legacy completions, echo of a prompt a guardrail redacted', () => {
  it('the echo is the prompt the upstream was sent: matched against it, not billed as completion tokens', async () => {
    const setup = testConfig({ upstreamUrl: up.url });
    setup.options.guardrails = [{ id: 'pii', kind: 'pii', action: 'redact' }];
    const guarded = await startGateway(setup.options);
    try {
      const produced = ' noted';
      // The upstream echoes what it received (the redacted prompt), then its own words.
      up.setBehavior({
        kind: 'custom',
        handle(_req, res, rec) {
          const prompt = String(rec.body?.prompt);
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ id: 'cmpl-1', object: 'text_completion', created: 1, model: MODEL, choices: [{ index: 0, text: prompt + produced, finish_reason: 'length', logprobs: null }] }));
        },
      });
      const prompt = 'Please write to jane.doe@example.com about the order. '.repeat(10);
      const res = await fetch(`${guarded.baseURL}/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt, echo: true, max_tokens: 5 }),
      });
      const answer = (await res.json()) as { choices: Array<{ text: string }> };
      expect(res.status).toBe(200);
      expect(answer.choices[0]!.text).not.toContain('jane.doe@example.com');
      const id = res.headers.get('x-request-id');
      await eventually(async () => (await chargesOf(guarded.gateway.admin.ledger(ACCOUNT))).some((e) => e.id === id), 'the charge');
      const charge = (await chargesOf(guarded.gateway.admin.ledger(ACCOUNT))).find((e) => e.id === id)!;
      expect((charge.units as { completion: number }).completion).toBe(countTokens(produced));
    } finally {
      await guarded.close();
    }
  });
});

describe('legacy completions, echo that is no echo', () => {
  it('a text that is only the start of the prompt (the choice ends there) is output, counted whole', async () => {
    const text = 'Repeat after me: Repeat after me';
    for (const stream of [false, true]) {
      up.setBehavior({ kind: 'completion', chunks: [text], usage: null });
      const res = await post('/completions', { model: MODEL, prompt: `${text}: Repeat after me:`, echo: true, max_tokens: 20, stream });
      await res.text();
      expect(((await chargeOf(res)).units as { completion: number }).completion, stream ? 'streamed' : 'plain').toBe(countTokens(text));
    }
  });
});

describe('speech before its first audio', () => {
  function speech(input: string) {
    const body = JSON.stringify({ model: AUDIO, input, voice: 'alloy' });
    const req = request(`${gw.baseURL}/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
    req.end(body);
    return req;
  }

  it('an upstream that answers 200 and fails before any audio: 502 upstream_error, nothing billed', async () => {
    up.setBehavior({
      kind: 'custom',
      async handle(req, res) {
        res.writeHead(200, { 'content-type': 'audio/mpeg' });
        res.flushHeaders();
        await sleep(50);
        req.socket.resetAndDestroy();
      },
    });
    const before = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;
    const req = speech('reset before the first byte');
    const answer = await new Promise<{ status?: number; body: string; id?: string }>((resolve) => {
      req.on('response', (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode, body, id: res.headers['x-request-id'] as string | undefined }));
      });
      req.on('error', (err) => resolve({ body: `error ${err.message}` }));
    });
    expect(answer.status).toBe(502);
    expect((JSON.parse(answer.body) as { error: { code: string } }).error.code).toBe('upstream_error');
    expect(answer.id).toBeTruthy();
    await eventually(async () => (await gw.stores.billing.openHolds(ACCOUNT)) === 0, 'hold released');
    expect(await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).toHaveLength(before);
  });

  it('a client gone after the upstream answered 200, before the first audio: the speech is billed', async () => {
    up.setBehavior({
      kind: 'custom',
      async handle(_req, res) {
        res.writeHead(200, { 'content-type': 'audio/mpeg' });
        res.flushHeaders();
        await sleep(600);
        if (!res.destroyed) res.end(Buffer.alloc(1000, 1));
      },
    });
    const input = 'Hello there, a few words to speak.';
    const n = up.requests.length;
    const before = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).filter((e) => e.model === AUDIO).length;
    const req = speech(input);
    req.on('error', () => undefined);
    await up.waitForRequests(n + 1);
    await sleep(200); // the upstream's 200 is in; its audio is not
    req.destroy();
    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).filter((e) => e.model === AUDIO).length === before + 1, 'the charge');
    const charge = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).filter((e) => e.model === AUDIO).at(-1)!;
    expect(charge.cost).toBe(speechCost(input));
    expect(await gw.stores.billing.openHolds(ACCOUNT)).toBe(0);
  });
});

describe('speech before its first audio, at the edges', () => {
  const speechModel = { id: 'own/speech', type: 'audio' as const, upstream: 'own', pricing: { unit: 'token' as const, from: '0.000015', tiers: {} } };

  it('a client gone while a transport that reads on past the abort fetched the first audio: billed once, no hold left', async () => {
    const client = {
      async call() {
        return {
          status: 200,
          header: (h: string) => (h === 'content-type' ? 'audio/mpeg' : undefined),
          body: (async function* () {
            await sleep(300);
            yield new Uint8Array(10);
            await sleep(300);
            yield new Uint8Array(10);
          })(),
          text: async () => '',
          discard() {},
        };
      },
    };
    const setup = testConfig({ models: [speechModel] });
    const own = await startGateway({ ...setup.options, upstreams: { ...setup.options.upstreams, own: client } });
    try {
      const body = JSON.stringify({ model: 'own/speech', input: 'hello there', voice: 'alloy' });
      const req = request(`${own.baseURL}/audio/speech`, { method: 'POST', headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } });
      req.on('error', () => undefined);
      req.end(body);
      await sleep(100);
      req.destroy();
      await eventually(async () => (await chargesOf(own.stores.billing.ledger(ACCOUNT))).length === 1, 'the charge');
      expect((await own.stores.billing.wallet(ACCOUNT)).held).toBe(0n);
    } finally {
      await own.close();
    }
  });

  it('an upstream that stalls after its 200 past its timeout: 504 upstream_timeout; shutdown during that wait: 503', async () => {
    up.setBehavior({
      kind: 'custom',
      async handle(_req, res) {
        res.writeHead(200, { 'content-type': 'audio/mpeg' });
        res.flushHeaders();
        await sleep(1_500);
        if (!res.destroyed) res.end(Buffer.alloc(10, 1));
      },
    });
    const short = testConfig({ upstreamUrl: up.url, models: mediaModels('test'), timeoutMs: 300 });
    const timing = await startGateway(short.options);
    try {
      const res = await fetch(`${timing.baseURL}/audio/speech`, { method: 'POST', headers: { authorization: `Bearer ${short.devKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: AUDIO, input: 'stall', voice: 'alloy' }) });
      expect([res.status, ((await res.json()) as { error: { code: string } }).error.code]).toEqual([504, 'upstream_timeout']);
    } finally {
      await timing.close();
    }
    const graced = testConfig({ upstreamUrl: up.url, models: mediaModels('test') });
    const stopping = await startGateway({ ...graced.options, shutdownGraceMs: 200 });
    const n = up.requests.length;
    const answer = fetch(`${stopping.baseURL}/audio/speech`, { method: 'POST', headers: { authorization: `Bearer ${graced.devKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: AUDIO, input: 'stall', voice: 'alloy' }) });
    await up.waitForRequests(n + 1);
    await sleep(100);
    const disposed = stopping.gateway.dispose();
    const res = await answer;
    const code = ((await res.json()) as { error: { code: string } }).error.code;
    await disposed;
    expect([res.status, code]).toEqual([503, 'service_unavailable']);
    expect(await stopping.stores.billing.wallet(ACCOUNT)).toMatchObject({ held: 0n });
    expect(await chargesOf(stopping.stores.billing.ledger(ACCOUNT))).toHaveLength(0);
    await stopping.close().catch(() => undefined);
  });
});

/**
 * A gateway serving `test/routed-speech` from upstream "a" (the shared `up`) then "b" (a second
 * upstream made here), each try of the call going to the next target.
 */
async function routedSpeech(options: { retries: number; plugins?: GatewayPlugin[] }) {
  const b = await startTestUpstream();
  const setup = testConfig({
    upstreamUrl: up.url,
    models: [{ id: 'test/routed-speech', type: 'audio', pricing: { unit: 'token', from: '0.000015', tiers: {} }, targets: [{ upstream: 'a', priority: 0 }, { upstream: 'b', priority: 1 }] }],
  });
  const routed = await startGateway({
    ...setup.options,
    upstreams: { ...setup.options.upstreams, a: { baseUrl: up.url, timeoutMs: 2_000 }, b: { baseUrl: b.url, timeoutMs: 2_000 } },
    routing: { retries: options.retries, backoffMs: 5 },
    ...(options.plugins ? { plugins: options.plugins } : {}),
  });
  const speak = (input: string) =>
    fetch(`${routed.baseURL}/audio/speech`, { method: 'POST', headers: { authorization: `Bearer ${setup.devKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'test/routed-speech', input, voice: 'alloy' }) });
  return { b, routed, speak, close: async () => { await routed.close(); await b.close(); } };
}

describe('speech whose first target fails before its first audio', () => {
  it("is served by the model's next target: the audio of the one that answered, billed once", async () => {
    const { b, routed, speak, close } = await routedSpeech({ retries: 1 });
    try {
      up.setBehavior({
        kind: 'custom',
        async handle(req, res) {
          res.writeHead(200, { 'content-type': 'audio/mpeg' });
          res.flushHeaders();
          await sleep(30);
          req.socket.resetAndDestroy();
        },
      });
      b.setBehavior({ kind: 'custom', handle: (_req, res) => void res.writeHead(200, { 'content-type': 'audio/mpeg' }).end(Buffer.alloc(64, 7)) });
      const input = 'Hi there.';
      const res = await speak(input);
      const audio = Buffer.from(await res.arrayBuffer());
      expect(res.status).toBe(200);
      expect(audio).toEqual(Buffer.alloc(64, 7));
      expect(b.requests).toHaveLength(1);
      await eventually(async () => (await routed.stores.billing.openHolds(ACCOUNT)) === 0, 'hold settled');
      const charges = await chargesOf(routed.stores.billing.ledger(ACCOUNT));
      expect(charges).toHaveLength(1);
      expect(charges[0]!.cost).toBe(speechCost(input));
    } finally {
      await close();
    }
  });
});

describe("a plugin's body for a media call's fallback target", () => {
  it('may not change what was priced on the own target (a longer speech input): the fallback is skipped, nothing rendered or billed', async () => {
    const long = 'A much longer text that the plugin wants spoken instead, with many more tokens in it. '.repeat(20);
    const { b, routed, speak, close } = await routedSpeech({
      retries: 2,
      plugins: [{ name: 'rewrite-on-b', onUpstreamRequest: ({ model, body, setBody }) => void (model.upstream === 'b' && setBody({ ...body, input: long })) }],
    });
    try {
      up.setBehavior({ kind: 'error', status: 500 });
      b.setBehavior({ kind: 'custom', handle: (_req, res) => void res.writeHead(200, { 'content-type': 'audio/mpeg' }).end(Buffer.alloc(64, 1)) });
      const res = await speak('Hi.');
      await res.arrayBuffer();
      expect(res.status).toBe(502);
      expect(b.requests).toHaveLength(0);
      await eventually(async () => (await routed.stores.billing.openHolds(ACCOUNT)) === 0, 'hold released');
      expect(await chargesOf(routed.stores.billing.ledger(ACCOUNT))).toHaveLength(0);
    } finally {
      await close();
    }
  });
});
