/**
 * The chat relay reads most events from their bytes (the SSE fast path, its marks, the
 * top-level scan), unparsed: it must read each event as JSON does. A key written with an
 * escape is the key (`"us\u0061ge"` is a usage, a second `"mod\u0065l"` is the model JSON keeps),
 * and JSON allows any whitespace around a colon (`"finish_reason" : "stop"` ends the content).
 * Each is checked on the reader itself and end to end, streamed and plain.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createChatEvents } from '../../src/upstream/stream/chat-events.js';
import { createStreamOutput } from '../../src/upstream/stream/chat-output.js';
import { withModel } from '../../src/upstream/stream/top-fields.js';
import { chargesOf, chatCost } from '../helpers/billing.js';
import { eventually, MODEL, postChat, type RunningGateway, sseData, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const UP = 'provider-chat-1';
const SSE_HEAD = { 'content-type': 'text/event-stream' };
const MESSAGES = [{ role: 'user', content: 'hi' }];

/** Runs upstream bytes through a fresh chat reader (alias MODEL -> UP). */
function relay(body: string, wantsUsage = false) {
  const output = createStreamOutput();
  const ev = createChatEvents({ model: { id: MODEL, upstreamModel: UP }, apiKey: 'sk-up', clientWantsUsage: wantsUsage, output });
  const sent: Buffer[] = [];
  let error: unknown = null;
  try {
    for (const p of ev.push(Buffer.from(body))) sent.push(Buffer.from(p));
    if (!ev.done) for (const p of ev.end()) sent.push(Buffer.from(p));
  } catch (e) {
    error = e;
  }
  return { text: Buffer.concat(sent).toString(), done: ev.done, answered: ev.answered, usage: output.usage, error };
}

const finishChunk = (sep: string) => `{"id":"c","model":"${UP}","choices":[{"index":0,"delta":{"content":"a"},"finish_reason"${sep}"stop"}]}`;
const USAGE_CHUNK = `{"id":"c","model":"${UP}","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}`;

describe('a second `model` key written with an escape: the client still sees only the model it called', () => {
  // JSON.parse keeps the last of two keys: a scan that renamed only the first would leave the
  // upstream's own name in what the client reads.
  const event = `{"id":"c","model":"${UP}","choices":[{"index":0,"delta":{"content":"a"}}],"mod\\u0065l":"${UP}"}`;

  it('stream (byte fast path): the client reads the model it called', () => {
    const r = relay(`data: ${event}\n\ndata: [DONE]\n\n`);
    const models = sseData(r.text).filter((d) => d !== '[DONE]').map((d) => (JSON.parse(d) as { model: string }).model);
    expect(models).toEqual([MODEL]);
  });

  it('stream (generic parser path, CRLF framing): the same', () => {
    const r = relay(`data: ${event}\r\n\r\ndata: [DONE]\r\n\r\n`);
    const models = sseData(r.text).filter((d) => d !== '[DONE]').map((d) => (JSON.parse(d) as { model: string }).model);
    expect(models).toEqual([MODEL]);
  });

  it('plain answer: withModel leaves it to the re-serialised parse', () => {
    const text = `{"id":"x","model":"${UP}","choices":[],"mod\\u0065l":"${UP}"}`;
    const out = withModel(text, MODEL);
    // Renamed right, or null: the caller then re-serialises its parse.
    expect(out === null || (JSON.parse(out) as { model: string }).model === MODEL).toBe(true);
  });
});

describe('`finish_reason` with spaces around its colon ends the content, as written tight', () => {
  // The same events through the byte fast path (LF) and the generic parser (CRLF) end alike.
  for (const sep of [' : ', ':  ', ':\t']) {
    it(`"finish_reason"${JSON.stringify(sep)}"stop", no [DONE]: LF framing must end as whole like CRLF framing`, () => {
      const events = [finishChunk(sep), USAGE_CHUNK];
      const crlf = relay(events.map((e) => `data: ${e}\r\n\r\n`).join(''));
      const lf = relay(events.map((e) => `data: ${e}\n\n`).join(''));
      expect(crlf.done).toBe(true);
      expect({ answered: lf.answered, done: lf.done }).toEqual({ answered: true, done: true });
    });
  }
});

describe('a `usage` key written with an escape is the usage', () => {
  it('the usage is recorded and the gateway-asked usage chunk is dropped', () => {
    const usage = `{"id":"c","model":"${UP}","choices":[],"us\\u0061ge":{"prompt_tokens":5,"completion_tokens":1}}`;
    const r = relay(`data: ${finishChunk(':')}\n\ndata: ${usage}\n\ndata: [DONE]\n\n`);
    // JSON reads {"usage": {...}}: recorded, and the chunk dropped (the client did not ask for it).
    expect(r.usage).toEqual({ prompt: 5, completion: 1 });
    expect(sseData(r.text).filter((d) => d !== '[DONE]')).toHaveLength(1);
  });
});

describe('end to end through the gateway (alias test/chat -> provider-chat-1)', () => {
  let up: TestUpstream;
  let gw: RunningGateway;
  let devKey: string;
  let account: string;
  beforeAll(async () => {
    up = await startTestUpstream();
    const setup = testConfig({ upstreamUrl: up.url, walletUsd: 1 });
    devKey = setup.devKey;
    account = setup.account;
    gw = await startGateway(setup.options);
  });
  afterAll(async () => {
    await gw.close();
    await up.close();
  });
  const custom = (handle: (res: ServerResponse) => void) => up.setBehavior({ kind: 'custom', handle: (_req, res) => handle(res) });
  const charges = () => chargesOf(gw.stores.billing.ledger(account));

  it('plain: the answer names the model called', async () => {
    custom((res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"id":"x","object":"chat.completion","created":1,"model":"${UP}","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1},"mod\\u0065l":"${UP}"}`);
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { model: string };
    expect(body.model).toBe(MODEL);
  });

  it('stream: every event names the model called', async () => {
    custom((res) => {
      res.writeHead(200, SSE_HEAD);
      res.end(`data: {"id":"c","model":"${UP}","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}],"mod\\u0065l":"${UP}"}\n\ndata: ${USAGE_CHUNK}\n\ndata: [DONE]\n\n`);
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true });
    const models = sseData(await res.text()).filter((d) => d !== '[DONE]').map((d) => (JSON.parse(d) as { model: string }).model);
    expect(models).toEqual([MODEL]);
  });

  it('an upstream that ends after `"finish_reason" : "stop"` and its usage, without [DONE], gave a whole answer, billed from its usage', async () => {
    const before = (await charges()).length;
    custom((res) => {
      res.writeHead(200, SSE_HEAD);
      // The stream ends cleanly after every choice finished (no [DONE], which the reader supports).
      res.end(`data: ${finishChunk(' : ')}\n\ndata: {"id":"c","model":"${UP}","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\n`);
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true });
    const data = sseData(await res.text());
    await eventually(async () => (await charges()).length > before, 'the charge');
    const charge = (await charges()).at(-1)!;
    // A whole answer, billed from the usage report, as with CRLF framing.
    expect(data.some((d) => d.includes('"error"'))).toBe(false);
    expect(data.at(-1)).toBe('[DONE]');
    expect(BigInt(charge.cost)).toBe(chatCost(7, 3));
  });

  /** A client that leaves as soon as it has the finish chunk; the upstream's usage follows 300 ms later. */
  async function leaveAfterFinish(sep: string) {
    const before = (await charges()).length;
    custom((res) => {
      res.writeHead(200, SSE_HEAD);
      res.write(`data: ${finishChunk(sep)}\n\n`);
      setTimeout(() => res.end(`data: {"id":"c","model":"${UP}","choices":[],"usage":{"prompt_tokens":700,"completion_tokens":300}}\n\ndata: [DONE]\n\n`), 300);
    });
    const abort = new AbortController();
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true }, { signal: abort.signal });
    const reader = res.body!.getReader();
    let seen = '';
    while (!seen.includes('finish_reason')) {
      const { value, done } = await reader.read();
      if (done) break;
      seen += new TextDecoder().decode(value);
    }
    abort.abort();
    await eventually(async () => (await charges()).length > before, 'the charge', 8_000);
    return BigInt((await charges()).at(-1)!.cost);
  }

  it('a client leaving after the finish pays the usage that follows (written tight)', async () => {
    expect(await leaveAfterFinish(':')).toBe(chatCost(700, 300));
  });

  it('the same with `"finish_reason" : "stop"`: the usage that follows is read and billed', async () => {
    expect(await leaveAfterFinish(' : ')).toBe(chatCost(700, 300));
  });

  it('an escaped usage key: billed from it, and its chunk kept from a client that did not ask for it', async () => {
    const before = (await charges()).length;
    custom((res) => {
      res.writeHead(200, SSE_HEAD);
      res.end(`data: ${finishChunk(':')}\n\ndata: {"id":"c","model":"${UP}","choices":[],"us\\u0061ge":{"prompt_tokens":7,"completion_tokens":3}}\n\ndata: [DONE]\n\n`);
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true });
    const data = sseData(await res.text()).filter((d) => d !== '[DONE]');
    await eventually(async () => (await charges()).length > before, 'the charge');
    const charge = (await charges()).at(-1)!;
    expect(data.map((d) => JSON.parse(d) as { choices: unknown[] }).filter((c) => c.choices.length === 0)).toEqual([]);
    expect(BigInt(charge.cost)).toBe(chatCost(7, 3));
  });
});
