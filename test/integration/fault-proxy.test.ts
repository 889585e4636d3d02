/**
 * Upstream transport faults through a TCP proxy (test/helpers/fault-proxy.ts) between the
 * gateway and a deterministic test upstream, over real HTTP on both sides:
 *
 *   slice     every upstream->gateway write in 1-byte pieces: the client output is
 *             byte-identical to the unsliced run (the upstream is deterministic) but for
 *             the one `: keep-alive` comment a stream opens with when its first event is not
 *             whole yet (so its 200 goes out at once), and billed the same;
 *   latency   per chunk: the answer arrives whole and identical;
 *   hang      504 upstream_timeout, nothing charged;
 *   reset     before the head: 502; mid-stream: one in-stream error event then [DONE];
 *   truncate  a clean FIN mid-body: 502 for plain answers, an error event for streams (a
 *             close-delimited SSE body without [DONE] is never a finished answer);
 *   trickle   a slow body arrives whole; one slower than the timeout is 504 / an error event.
 *
 * After every failure without output: ledger and wallet unchanged, no hold left, and for
 * images no in-flight slot left. Produced output is billed by the tokenizer.
 */
import { createHash } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseUsd } from '../../src/billing/money.js';
import { chatCost, loadTokenizer, promptEstimate, chargesOf } from '../helpers/billing.js';
import { startFaultProxy, type FaultMode, type FaultProxy } from '../helpers/fault-proxy.js';
import { ACCOUNT, MODEL, eventually, postChat, sseData, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { IMAGE, imageCost, mediaModels } from '../helpers/media.js';
import { startTestUpstream, type Behavior, type TestUpstream } from '../helpers/upstream.js';

const WALLET = parseUsd(100);
const MESSAGES = [{ role: 'user', content: 'Say hello.' }];
/** Multi-byte UTF-8 (2, 3 and 4 bytes per character): 1-byte slices split every character. */
const CHUNKS = ['Grüße', ' aus', ' 東京', ' 🙂🙃', ' — the', ' end.'];
const ENVELOPE_KEYS = ['code', 'message', 'param', 'type'];
const IMAGE_POOL = `image:${ACCOUNT}`;
const PNG_B64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

let up: TestUpstream;
let proxy: FaultProxy;
let gw: RunningGateway | undefined;
let devKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  proxy = await startFaultProxy(up.origin);
});

afterAll(async () => {
  await proxy?.close();
  await up?.close();
});

afterEach(async () => {
  await gw?.close();
  gw = undefined;
  await proxy.setMode({ kind: 'pass' });
});

/** A fresh gateway (fresh breaker, fresh pool) whose upstream "test" is the proxy. */
async function start(timeoutMs = 10_000, limits: Record<string, number> = {}): Promise<RunningGateway> {
  await proxy.setMode({ kind: 'pass' });
  const setup = testConfig({ upstreamUrl: `${proxy.origin}/v1`, timeoutMs, walletUsd: 100, models: mediaModels('test'), limits });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
  return gw;
}

const g = () => gw!;
const ledger = () => chargesOf(g().gateway.admin.ledger(ACCOUNT));

async function noHoldLeft(): Promise<boolean> {
  const [holds, wallet] = await Promise.all([g().stores.billing.openHolds(ACCOUNT), g().stores.billing.wallet(ACCOUNT)]);
  return holds === 0 && wallet.held === 0n;
}

/** Nothing charged: ledger empty, wallet untouched, no hold, no in-flight image slot. */
async function expectNothingCharged() {
  await eventually(noHoldLeft, 'the hold to be released');
  await eventually(async () => (await g().stores.limits.activeLeases(IMAGE_POOL)) === 0, 'the in-flight slot to be freed');
  expect(await ledger()).toEqual([]);
  expect((await g().stores.billing.wallet(ACCOUNT)).balance).toBe(WALLET);
}

/** Waits for `n` ledger entries and no open hold; checks wallet delta == ledger sum. */
async function expectBilled(n: number) {
  await eventually(async () => (await ledger()).length === n, `${n} ledger entries`);
  await eventually(noHoldLeft, 'no hold left');
  const entries = await ledger();
  const sum = entries.reduce((s, e) => s + e.cost, 0n);
  expect((await g().stores.billing.wallet(ACCOUNT)).balance).toBe(WALLET - sum);
  return entries;
}

async function errorBody(res: Response) {
  const body = (await res.json()) as { error: Record<string, unknown> };
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).filter((k) => k !== 'metadata').sort()).toEqual(ENVELOPE_KEYS);
  expect(res.headers.get('x-request-id')).toMatch(/^req_/);
  return body.error;
}

interface Chunk {
  choices: Array<{ index: number; delta: { content?: string }; finish_reason: string | null }>;
  error?: Record<string, unknown>;
  usage?: unknown;
}

async function streamText(extra: Record<string, unknown> = {}): Promise<string> {
  const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true, ...extra });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toContain('text/event-stream');
  return res.text();
}

/**
 * A stream's text without the comment it may open with: sent when the first event is not whole
 * as the stream opens (sliced or trickled, it seldom is), so the client has the 200 at once.
 * Only that one comment, first, is taken out: everything else must match byte for byte.
 */
const OPENING = ': keep-alive\n\n';
const withoutOpening = (text: string) => (text.startsWith(OPENING) ? text.slice(OPENING.length) : text);

function contentOf(events: string[]): string {
  return chunksContent(events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e) as Chunk));
}

const chunksContent = (chunks: Chunk[]) => chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');

/** The tail of a failed stream: exactly one error event, then [DONE], no "stop". */
function expectErrorTail(text: string, code = 'upstream_error'): Chunk[] {
  const events = sseData(text);
  expect(events.at(-1)).toBe('[DONE]');
  expect(events.filter((e) => e === '[DONE]')).toHaveLength(1);
  const parsed = events.slice(0, -1).map((e) => JSON.parse(e) as Chunk);
  const last = parsed.at(-1)!;
  expect(Object.keys(last).sort()).toEqual(['choices', 'error']);
  expect(last.choices).toEqual([{ index: 0, delta: { content: '' }, finish_reason: 'error' }]);
  expect(Object.keys(last.error!).sort()).toEqual(ENVELOPE_KEYS);
  expect(last.error).toMatchObject({ code, type: 'upstream_error' });
  expect(parsed.filter((c) => c.error)).toHaveLength(1);
  expect(parsed.flatMap((c) => c.choices).filter((c) => c.finish_reason === 'stop')).toEqual([]);
  return parsed;
}

/** Bills exactly the produced text: prompt estimate + tokenizer count of `produced`. */
async function expectProducedBilled(produced: string) {
  const tokenizer = await loadTokenizer();
  const [entry] = await expectBilled(1);
  const prompt = await promptEstimate(MESSAGES);
  const completion = tokenizer.count(produced);
  expect(completion).toBeGreaterThan(0);
  expect(entry!.units).toEqual({ kind: 'tokens', prompt, completion });
  expect(entry!.cost).toBe(chatCost(prompt, completion));
}

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

/** Writes a raw HTTP/1.1 response delimited by connection close (no length, no chunking). */
function closeDelimited(contentType: string, body: string): Behavior {
  return {
    kind: 'custom',
    handle(req) {
      const sock = req.socket;
      sock.write(`HTTP/1.1 200 OK\r\ncontent-type: ${contentType}\r\nconnection: close\r\n\r\n`);
      sock.end(body);
    },
  };
}

const sseEvent = (v: unknown) => `data: ${JSON.stringify(v)}\n\n`;
const contentEvent = (content: string) => sseEvent({ choices: [{ index: 0, delta: { content }, finish_reason: null }] });

describe('1-byte slicing: the client output is byte-identical to the unsliced run (but for an opening comment)', () => {
  it('streams (multi-byte UTF-8 split across pieces, with and without the usage chunk) and their billing', async () => {
    await start();
    up.setBehavior({ kind: 'stream', chunks: CHUNKS });
    const cases: Array<Record<string, unknown>> = [{}, { stream_options: { include_usage: true } }, { max_tokens: 64, temperature: 0 }];
    let expectedEntries = 0;
    for (const extra of cases) {
      await proxy.setMode({ kind: 'pass' });
      const whole = await streamText(extra);
      await proxy.setMode({ kind: 'slice' });
      const sliced = await streamText(extra);
      const conn = proxy.connections.at(-1)!;
      expect(conn.mode).toBe('slice');
      expect(conn.maxWrite).toBe(1);
      expect(conn.writes).toBe(conn.forwardedBytes);
      expect(conn.writes).toBeGreaterThan(1_000);

      expect(sha(withoutOpening(sliced))).toBe(sha(withoutOpening(whole)));
      expect(withoutOpening(sliced)).toBe(withoutOpening(whole));
      expect(contentOf(sseData(sliced))).toBe(CHUNKS.join(''));
      expect(sseData(sliced).at(-1)).toBe('[DONE]');

      expectedEntries += 2;
      const entries = await expectBilled(expectedEntries);
      const [a, b] = entries.slice(-2);
      expect(b!.units).toEqual(a!.units);
      expect(b!.cost).toBe(a!.cost);
    }
  });

  it('CR / CRLF line endings, comments, "data:" without a space and multi-line data: identical, every event whole', async () => {
    await start();
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(': upstream comment\r\n\r\n');
        res.write('data: {"choices":[{"index":0,\r\ndata: "delta":{"role":"assistant","content":"Hé"},"finish_reason":null}]}\r\n\r\n');
        res.write('data:{"choices":[{"index":0,"delta":{"content":" 東京"},"finish_reason":null}]}\r\r');
        res.write('event: ignored\ndata: {"choices":[{"index":0,"delta":{"content":" 🙂"},"finish_reason":"stop"}]}\n\n');
        res.write('data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}\r\n\r\n');
        res.end('data: [DONE]\r\n\r\n');
      },
    });
    await proxy.setMode({ kind: 'pass' });
    const whole = await streamText();
    await proxy.setMode({ kind: 'slice' });
    const sliced = await streamText();
    expect(proxy.connections.at(-1)!.maxWrite).toBe(1);
    expect(withoutOpening(sliced)).toBe(withoutOpening(whole));
    // Whatever the framing upstream, every event the client gets is one whole JSON value.
    const events = sseData(sliced);
    expect(events.at(-1)).toBe('[DONE]');
    for (const e of events.slice(0, -1)) expect(() => JSON.parse(e)).not.toThrow();
    expect(contentOf(events)).toBe('Hé 東京 🙂');
    const entries = await expectBilled(2);
    for (const e of entries) expect(e.units).toEqual({ kind: 'tokens', prompt: 3, completion: 4 });
  });

  it('a plain answer is byte-identical and billed the same', async () => {
    await start();
    up.setBehavior({ kind: 'json', content: 'Grüße aus 東京 🙂', usage: { prompt_tokens: 9, completion_tokens: 5 } });
    const run = async () => {
      const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES });
      expect(res.status).toBe(200);
      return res.text();
    };
    const whole = await run();
    await proxy.setMode({ kind: 'slice' });
    const sliced = await run();
    expect(proxy.connections.at(-1)!.maxWrite).toBe(1);
    expect(sliced).toBe(whole);
    const entries = await expectBilled(2);
    expect(entries.map((e) => e.cost)).toEqual([chatCost(9, 5), chatCost(9, 5)]);
  });

  it('an image answer sliced: 200, billed once, in-flight slot freed', async () => {
    await start();
    await proxy.setMode({ kind: 'slice' });
    up.setBehavior({ kind: 'json', body: { created: 1_700_000_000, data: [{ b64_json: PNG_B64 }] } });
    const res = await fetch(`${g().baseURL}/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: IMAGE, prompt: 'a red dot', size: '512x512' }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: unknown[] }).data).toHaveLength(1);
    const [entry] = await expectBilled(1);
    expect(entry!.cost).toBe(imageCost('720P'));
    await eventually(async () => (await g().stores.limits.activeLeases(IMAGE_POOL)) === 0, 'the slot to be freed');
  });

  it('faults arrive sliced too: 5xx -> 502, malformed JSON -> 502, a truncated SSE body -> error event', async () => {
    await start();
    await proxy.setMode({ kind: 'slice' });
    up.setBehavior({ kind: 'error', status: 500, message: 'boom' });
    let res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(502);
    expect(await errorBody(res)).toMatchObject({ code: 'upstream_error', type: 'upstream_error', param: null });

    up.setBehavior({
      kind: 'custom',
      handle(_req, r) {
        r.writeHead(200, { 'content-type': 'application/json' });
        r.end('{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"cut');
      },
    });
    res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(502);
    expect(await errorBody(res)).toMatchObject({ code: 'upstream_error' });
    await expectNothingCharged();

    up.setBehavior(closeDelimited('text/event-stream', contentEvent('Half') + contentEvent(' an answer')));
    expect(chunksContent(expectErrorTail(await streamText()))).toBe('Half an answer');
    await expectProducedBilled('Half an answer');
  });
});

describe('latency per chunk', () => {
  it('a stream with 25 ms added per upstream chunk arrives whole, identical to the direct run', async () => {
    await start();
    up.setBehavior({ kind: 'stream', chunks: CHUNKS, delayMs: 5 });
    const whole = await streamText();
    await proxy.setMode({ kind: 'latency', ms: 25 });
    const slow = await streamText();
    expect(proxy.connections.at(-1)!.mode).toBe('latency');
    expect(withoutOpening(slow)).toBe(withoutOpening(whole));
    await expectBilled(2);
  });
});

describe('hang: the connection is accepted, nothing ever comes back', () => {
  it('plain and streamed chats -> 504 upstream_timeout before any 200; nothing charged', async () => {
    await start(300);
    await proxy.setMode({ kind: 'hang' });
    for (const stream of [false, true]) {
      const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES, stream });
      expect(res.status).toBe(504);
      expect(await errorBody(res)).toMatchObject({ code: 'upstream_timeout', type: 'upstream_error' });
    }
    await expectNothingCharged();
  });

  it('an image -> 504; its hold and in-flight slot are released, nothing charged', async () => {
    await start(300);
    await proxy.setMode({ kind: 'hang' });
    const res = await fetch(`${g().baseURL}/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: IMAGE, prompt: 'a red dot' }),
    });
    expect(res.status).toBe(504);
    expect(await errorBody(res)).toMatchObject({ code: 'upstream_timeout' });
    await expectNothingCharged();
  });
});

describe('reset (RST) from the upstream side', () => {
  it('mid-stream after the 3rd content chunk -> 200, one error event, [DONE]; the produced part is billed', async () => {
    await start();
    up.setBehavior({ kind: 'stream', chunks: CHUNKS });
    // Cut right after the event carrying the 3rd chunk (its "\n\n" and the chunk framing).
    await proxy.setMode({ kind: 'reset', after: { marker: `"content":"${CHUNKS[2]}"},"finish_reason":null}]}\n\n` } });
    const parsed = expectErrorTail(await streamText());
    expect(proxy.connections.at(-1)!.ended).toBe('reset');
    const produced = CHUNKS.slice(0, 3).join('');
    expect(chunksContent(parsed)).toBe(produced);
    await expectProducedBilled(produced);
  });

  it('before the response head is complete -> 502 for plain and streamed chats; nothing charged', async () => {
    await start();
    up.setBehavior((rec) => (rec.body?.stream ? { kind: 'stream', chunks: CHUNKS } : { kind: 'json' }));
    await proxy.setMode({ kind: 'reset', after: 20 });
    for (const stream of [false, true]) {
      const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES, stream });
      expect(res.status).toBe(502);
      expect(await errorBody(res)).toMatchObject({ code: 'upstream_error', type: 'upstream_error' });
    }
    await expectNothingCharged();
  });

  it('in the middle of a plain JSON body -> 502; nothing charged', async () => {
    await start();
    up.setBehavior({ kind: 'json', content: 'An answer that never arrives whole.' });
    await proxy.setMode({ kind: 'reset', after: { marker: '"content":"An answer' } });
    const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(502);
    expect(await errorBody(res)).toMatchObject({ code: 'upstream_error' });
    await expectNothingCharged();
  });

  it('an image answer reset mid-body -> 502; hold and in-flight slot released', async () => {
    await start();
    up.setBehavior({ kind: 'json', body: { created: 1_700_000_000, data: [{ b64_json: PNG_B64 }] } });
    await proxy.setMode({ kind: 'reset', after: { marker: '"b64_json":"iVBOR' } });
    const res = await fetch(`${g().baseURL}/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: IMAGE, prompt: 'a red dot' }),
    });
    expect(res.status).toBe(502);
    expect(await errorBody(res)).toMatchObject({ code: 'upstream_error' });
    await expectNothingCharged();
  });
});

describe('an image job (202) whose upstream answer is reset mid-body', () => {
  it('ends failed with upstream_error; its hold is released and its in-flight slot freed; nothing charged', async () => {
    await start(10_000, { inlineImageDeadlineMs: 100, jobPollIntervalMs: 50 });
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    up.setBehavior({ kind: 'json', gate, body: { created: 1_700_000_000, data: [{ b64_json: PNG_B64 }] } });
    await proxy.setMode({ kind: 'reset', after: { marker: '"b64_json":"iVBOR' } });
    const res = await fetch(`${g().baseURL}/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: IMAGE, prompt: 'a slow red dot' }),
    });
    expect(res.status).toBe(202);
    const job = (await res.json()) as { id: string; status: string };
    expect(job.status).toBe('in_progress');
    // While it runs: one slot taken, one hold open.
    expect(await g().stores.limits.activeLeases(IMAGE_POOL)).toBe(1);
    expect(await g().stores.billing.openHolds(ACCOUNT)).toBe(1);
    open();
    const poll = async () =>
      (await (
        await fetch(`${g().baseURL}/images/${job.id}`, { headers: { authorization: `Bearer ${devKey}` } })
      ).json()) as { status: string; error: { code: string } | null; result: unknown };
    await eventually(async () => (await poll()).status === 'failed', 'the job to fail');
    const failed = await poll();
    expect(failed.error?.code).toBe('upstream_error');
    expect(failed.result).toBeNull();
    await expectNothingCharged();
  });
});

describe('truncate: a clean FIN mid-body', () => {
  it('a chunked SSE body cut after the 3rd chunk -> error event then [DONE]; the produced part is billed', async () => {
    await start();
    up.setBehavior({ kind: 'stream', chunks: CHUNKS });
    await proxy.setMode({ kind: 'truncate', after: { marker: `"content":"${CHUNKS[2]}"},"finish_reason":null}]}\n\n` } });
    const parsed = expectErrorTail(await streamText());
    expect(proxy.connections.at(-1)!.ended).toBe('truncated');
    const produced = CHUNKS.slice(0, 3).join('');
    expect(chunksContent(parsed)).toBe(produced);
    await expectProducedBilled(produced);
  });

  it('a close-delimited SSE body (a clean end for HTTP) cut mid-event -> error event, the partial event dropped', async () => {
    await start();
    const body = contentEvent('First') + contentEvent(' second') + contentEvent(' third') + 'data: [DONE]\n\n';
    up.setBehavior(closeDelimited('text/event-stream', body));
    await proxy.setMode({ kind: 'truncate', after: { marker: '"content":" sec' } });
    const parsed = expectErrorTail(await streamText());
    expect(chunksContent(parsed)).toBe('First');
    await expectProducedBilled('First');
  });

  it('a close-delimited SSE body cut after its finish, right before [DONE] -> whole (every choice finished), its text billed', async () => {
    // Nothing of the answer is missing: it ends as one from a server that sends no [DONE]
    // does, and as the Messages and Gemini paths end it. The usage never came: counted.
    await start();
    const body =
      contentEvent('All') +
      contentEvent(' there') +
      sseEvent({ choices: [{ index: 0, delta: {}, finish_reason: 'length' }] }) +
      'data: [DONE]\n\n';
    up.setBehavior(closeDelimited('text/event-stream', body));
    await proxy.setMode({ kind: 'truncate', after: { marker: '"finish_reason":"length"}]}\n\n' } });
    const events = sseData(await streamText());
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.some((e) => e.includes('"error"'))).toBe(false);
    expect((JSON.parse(events.at(-2)!) as Chunk).choices).toEqual([{ index: 0, delta: {}, finish_reason: 'length' }]);
    await expectProducedBilled('All there');
  });

  it('a close-delimited SSE body cut before its finish -> an error event, never a finished answer', async () => {
    await start();
    const body = contentEvent('All') + contentEvent(' there') + sseEvent({ choices: [{ index: 0, delta: {}, finish_reason: 'length' }] }) + 'data: [DONE]\n\n';
    up.setBehavior(closeDelimited('text/event-stream', body));
    await proxy.setMode({ kind: 'truncate', after: { marker: '"content":" there"' } });
    const parsed = expectErrorTail(await streamText());
    expect(chunksContent(parsed)).toBe('All');
    await expectProducedBilled('All');
  });

  it('the same body not cut -> a finished answer (control)', async () => {
    await start();
    const body = contentEvent('All') + contentEvent(' there') + 'data: [DONE]\n\n';
    up.setBehavior(closeDelimited('text/event-stream', body));
    const events = sseData(await streamText());
    expect(events).toHaveLength(3);
    expect(events.some((e) => e.includes('"error"'))).toBe(false);
    await expectProducedBilled('All there');
  });

  it('a plain JSON body cut short of its Content-Length -> 502; nothing charged', async () => {
    await start();
    up.setBehavior({ kind: 'json', content: 'An answer that never arrives whole.' });
    await proxy.setMode({ kind: 'truncate', after: { marker: '"content":"An answer' } });
    const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(502);
    expect(await errorBody(res)).toMatchObject({ code: 'upstream_error' });
    await expectNothingCharged();
  });

  it('a close-delimited plain body cut mid-JSON -> 502 malformed; nothing charged', async () => {
    await start();
    const answer = {
      id: 'chatcmpl-x',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [{ index: 0, message: { role: 'assistant', content: 'Whole?' }, finish_reason: 'stop' }],
    };
    up.setBehavior(closeDelimited('application/json', JSON.stringify(answer)));
    await proxy.setMode({ kind: 'truncate', after: { marker: '"content":"Who' } });
    const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(502);
    expect(await errorBody(res)).toMatchObject({ code: 'upstream_error' });
    await expectNothingCharged();
  });

  it('cut before the response head is complete -> 502; nothing charged', async () => {
    await start();
    await proxy.setMode({ kind: 'truncate', after: 12 });
    const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true });
    expect(res.status).toBe(502);
    await errorBody(res);
    await expectNothingCharged();
  });
});

describe('slow body (trickle)', () => {
  it('a stream trickled 7 bytes per write, head included, arrives whole and byte-identical', async () => {
    await start();
    up.setBehavior({ kind: 'stream', chunks: CHUNKS });
    const whole = await streamText();
    await proxy.setMode({ kind: 'trickle', bytes: 7, everyMs: 1 });
    const trickled = await streamText();
    expect(proxy.connections.at(-1)!.maxWrite).toBe(7);
    expect(withoutOpening(trickled)).toBe(withoutOpening(whole));
    await expectBilled(2);
  });

  it('a body that stalls past the upstream timeout mid-stream -> error event upstream_timeout; produced part billed', async () => {
    // The gap (2.5 s) is far beyond the 200 ms timeout and undici's coarse body timer.
    await start(200);
    up.setBehavior({ kind: 'stream', chunks: CHUNKS });
    await proxy.setMode({
      kind: 'trickle',
      bytes: 1,
      everyMs: 2_500,
      from: { marker: `"content":"${CHUNKS[1]}"},"finish_reason":null}]}\n\n` },
    });
    const parsed = expectErrorTail(await streamText(), 'upstream_timeout');
    const produced = CHUNKS.slice(0, 2).join('');
    expect(chunksContent(parsed)).toBe(produced);
    await expectProducedBilled(produced);
    await eventually(() => up.requests.at(-1)!.isClosed, 'the upstream exchange to be closed');
  });

  it('a response head slower than the timeout -> 504; nothing charged', async () => {
    await start(200);
    up.setBehavior({ kind: 'json' });
    await proxy.setMode({ kind: 'trickle', bytes: 1, everyMs: 2_500 });
    const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(504);
    expect(await errorBody(res)).toMatchObject({ code: 'upstream_timeout' });
    await expectNothingCharged();
  });
});

describe('malformed and failing answers (through the proxy)', () => {
  const cases: Array<[string, Behavior]> = [
    [
      'truncated JSON text',
      {
        kind: 'custom',
        handle(_req, res) {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end('{"choices":[{"index":0,"message":');
        },
      },
    ],
    ['an HTML 503 page', { kind: 'error', status: 503, body: '<html><body>Service Unavailable</body></html>' }],
    ['an upstream 401 (the gateway\'s own upstream key)', { kind: 'error', status: 401, message: 'bad upstream key' }],
  ];

  it('JSON nested too deep to re-serialise goes out as it came (its model renamed in its bytes), billed once from its usage', async () => {
    await start();
    const deep = `${'['.repeat(20_000)}${']'.repeat(20_000)}`;
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(`{"model":"x","usage":{"prompt_tokens":1,"completion_tokens":1},"choices":[{"index":0,"message":{"role":"assistant","content":"x","tool_calls":${deep}}}]}`);
      },
    });
    const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain(`"model":"${MODEL}"`);
    expect(text).toContain(deep);
    const [entry] = await expectBilled(1);
    expect(entry!.units).toMatchObject({ kind: 'tokens', prompt: 1, completion: 1 });
  });

  it.each(cases)('%s -> 502 upstream_error; nothing charged', async (_name, behavior) => {
    await start();
    up.setBehavior(behavior);
    const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(502);
    const err = await errorBody(res);
    expect(err).toMatchObject({ code: 'upstream_error', type: 'upstream_error' });
    expect(String(err.message)).not.toContain('bad upstream key');
    await expectNothingCharged();
  });
});

describe('the proxy itself', () => {
  it('passes requests through unchanged (control for every mode above)', async () => {
    await start();
    const modes: FaultMode[] = [{ kind: 'pass' }, { kind: 'slice' }, { kind: 'latency', ms: 1 }];
    up.setBehavior({ kind: 'json' });
    for (const mode of modes) {
      await proxy.setMode(mode);
      const before = up.requests.length;
      const res = await postChat(g().baseURL, devKey, { model: MODEL, messages: MESSAGES, temperature: 0.5 });
      expect(res.status).toBe(200);
      await res.text();
      expect(up.requests.length).toBe(before + 1);
      expect(up.requests.at(-1)!.body).toMatchObject({ temperature: 0.5 });
    }
  });
});
