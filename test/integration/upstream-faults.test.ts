/**
 * Upstream faults and what the gateway sends upstream, against a real test upstream over
 * HTTP: errors map to the codes of the README's error table, nothing is charged for failures,
 * holds never stay, and the relayed request carries only allowlisted headers and fields.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseUsd } from '../../src/billing/money.js';
import { chatCost, loadTokenizer, promptEstimate, chargesOf } from '../helpers/billing.js';
import {
  ACCOUNT,
  MODEL,
  UPSTREAM_API_KEY,
  UPSTREAM_MODEL,
  eventually,
  postChat,
  sseData,
  startGateway,
  testConfig,
  testKey,
  type RunningGateway,
} from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';

const WALLET = parseUsd(100);
const MESSAGES = [{ role: 'user', content: 'Say hello.' }];
const ENVELOPE_KEYS = ['code', 'message', 'param', 'type'];

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
/** Developer keys of two other accounts (upstream 5xx open the circuit only across three accounts). */
const otherKey = testKey();
const thirdKey = testKey();

async function start(timeoutMs?: number, limits: Record<string, number> = {}) {
  const setup = testConfig({
    upstreamUrl: up.url,
    walletUsd: 100,
    ...(timeoutMs ? { timeoutMs } : {}),
    limits,
    accounts: [{ id: 'acct_other', walletUsd: 1 }, { id: 'acct_third', walletUsd: 1 }],
    keys: [
      { key: otherKey, account: 'acct_other', kind: 'developer' },
      { key: thirdKey, account: 'acct_third', kind: 'developer' },
    ],
    brands: [
      { id: 'brand_acme', account: ACCOUNT, name: 'Acme', voice: 'Cheerful and brief.' },
      { id: 'brand_of_someone_else', account: 'acct_other', name: 'Other', voice: 'Grim.' },
    ],
    documents: [
      {
        id: 'doc_refunds',
        account: ACCOUNT,
        brand: 'brand_acme',
        title: 'Refunds',
        text: 'Acme gadgets can be returned for a full refund within 30 days of purchase.',
      },
      { id: 'doc_other', account: ACCOUNT, title: 'Shipping', text: 'Acme ships worldwide in five business days.' },
      { id: 'doc_of_someone_else', account: 'acct_other', title: 'Secret', text: 'Not yours.' },
    ],
  });
  devKey = setup.devKey;
  // One attempt per call: these cases are about a single upstream answer (retries: routing.test.ts).
  gw = await startGateway({ ...setup.options, routing: { retries: 0 } });
}

beforeEach(async () => {
  up = await startTestUpstream();
});

afterEach(async () => {
  await gw?.close();
  await up.close();
});

async function noHoldLeft(): Promise<boolean> {
  const [holds, wallet] = await Promise.all([gw.stores.billing.openHolds(ACCOUNT), gw.stores.billing.wallet(ACCOUNT)]);
  return holds === 0 && wallet.held === 0n;
}

/** Nothing was charged and (after the async release) no hold is left. */
async function expectNothingCharged() {
  await eventually(noHoldLeft, 'the hold to be released');
  expect(await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).toEqual([]);
  expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(WALLET);
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
  usage?: unknown;
  error?: Record<string, unknown>;
  model?: string;
}

describe('upstream failures', () => {
  beforeEach(() => start());

  it('upstream 500 -> 502 upstream_error, nothing charged, hold released', async () => {
    up.setBehavior({ kind: 'error', status: 500, message: 'boom' });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(502);
    const err = await errorBody(res);
    expect(err).toMatchObject({ code: 'upstream_error', type: 'upstream_error', param: null });
    expect(up.requests).toHaveLength(1);
    await expectNothingCharged();
  });

  it('upstream 400 -> 400 relayed with the upstream message in the envelope, nothing charged', async () => {
    up.setBehavior({
      kind: 'error',
      status: 400,
      message: "Invalid 'temperature': must be at most 2.",
      type: 'invalid_request_error',
      code: 'invalid_value',
      param: 'temperature',
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, temperature: 1.5 });
    expect(res.status).toBe(400);
    const err = await errorBody(res);
    expect(err.message).toBe("Invalid 'temperature': must be at most 2.");
    expect(err.type).toBe('invalid_request_error');
    expect(err.param).toBe('temperature');
    expect(typeof err.code === 'string' || err.code === null).toBe(true);
    await expectNothingCharged();
  });

  it("upstream 429 insufficient_quota (the gateway's provider account is out of credit) -> 502 upstream_error, its words not relayed, nothing charged", async () => {
    up.setBehavior({
      kind: 'error',
      status: 429,
      message: 'You exceeded your current quota, please check your plan and billing details.',
      type: 'insufficient_quota',
      code: 'insufficient_quota',
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(502);
    const err = await errorBody(res);
    expect(err.code).toBe('upstream_error');
    expect(err.message).not.toContain('quota');
    await expectNothingCharged();
  });

  it('an upstream redirect (never followed) -> 502 upstream_error, its page not relayed, nothing charged', async () => {
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(301, { location: 'https://moved.example/v1?key=secret-query-key', 'content-type': 'text/html' }).end('<a href="https://moved.example/v1?key=secret-query-key">Moved</a>');
      },
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(502);
    expect(res.headers.get('location')).toBeNull();
    const err = await errorBody(res);
    expect(err.code).toBe('upstream_error');
    expect(JSON.stringify(err)).not.toContain('secret-query-key');
    await expectNothingCharged();
  });

  it('upstream 400 with a non-JSON body -> 400 carrying an excerpt of it', async () => {
    up.setBehavior({ kind: 'error', status: 400, body: 'bad things happened' });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(400);
    const err = await errorBody(res);
    expect(err.message).toContain('bad things happened');
    await expectNothingCharged();
  });

  it('a malformed 200 answer -> 502 upstream_error, nothing charged', async () => {
    up.setBehavior({ kind: 'json', body: { hello: 'not a completion' } });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(502);
    expect(await errorBody(res)).toMatchObject({ code: 'upstream_error' });
    await expectNothingCharged();
  });
});

describe('upstream timeout', () => {
  beforeEach(() => start(300));

  it('an upstream that never answers -> 504 upstream_timeout, connection closed, nothing charged', async () => {
    up.setBehavior({ kind: 'hang' });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(504);
    const err = await errorBody(res);
    expect(err).toMatchObject({ code: 'upstream_timeout', type: 'upstream_error' });
    await eventually(() => up.requests[0]?.isClosed === true, 'the hung upstream request to be closed');
    expect(up.requests[0]!.closedEarly).toBe(true);
    await expectNothingCharged();
  });

  it('a streamed call to an upstream that never answers -> 504 before any 200', async () => {
    up.setBehavior({ kind: 'hang' });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true });
    expect(res.status).toBe(504);
    expect(await errorBody(res)).toMatchObject({ code: 'upstream_timeout' });
    await expectNothingCharged();
  });
});

describe('upstream stalls mid-stream past its timeout', () => {
  beforeEach(() => start(300));

  it('-> error event with upstream_timeout then [DONE]; the produced part is billed; connection closed', async () => {
    const tokenizer = await loadTokenizer();
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`data: ${JSON.stringify({ model: 'x', choices: [{ index: 0, delta: { role: 'assistant', content: 'Partial answer' }, finish_reason: null }] })}\n\n`);
        // ...and never another byte.
      },
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true });
    expect(res.status).toBe(200);
    const events = sseData(await res.text());
    expect(events.at(-1)).toBe('[DONE]');
    const last = JSON.parse(events.at(-2)!) as Chunk;
    expect(last.error).toMatchObject({ code: 'upstream_timeout', type: 'upstream_error' });
    expect(last.choices).toEqual([{ index: 0, delta: { content: '' }, finish_reason: 'error' }]);
    await eventually(() => up.requests[0]?.isClosed === true, 'the stalled upstream request to be closed');
    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 1, 'the produced part to be billed');
    await eventually(noHoldLeft, 'no hold left');
    const [entry] = await chargesOf(gw.gateway.admin.ledger(ACCOUNT));
    expect((entry!.units as { completion: number }).completion).toBe(tokenizer.count('Partial answer'));
  });
});

describe('an upstream that sends [DONE] but keeps the connection open', () => {
  beforeEach(() => start(300));

  // Event by event, or the whole answer in one write (then it arrives with the headers, and the
  // rest of the body, which never ends, is dropped in the background until the body timeout).
  it.each(['a write per event', 'one write'])('the client gets a finished answer at [DONE], billed by the usage sent before it (%s)', async (writes) => {
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const events = [
          { choices: [{ index: 0, delta: { role: 'assistant', content: 'Done' }, finish_reason: null }] },
          { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
          { choices: [], usage: { prompt_tokens: 4, completion_tokens: 1, total_tokens: 5 } },
        ].map((v) => `data: ${JSON.stringify(v)}\n\n`);
        if (writes === 'one write') res.write(`${events.join('')}data: [DONE]\n\n`);
        else {
          for (const e of events) res.write(e);
          res.write('data: [DONE]\n\n');
        }
        // ...and the response is never ended.
      },
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true });
    expect(res.status).toBe(200);
    const events = sseData(await res.text());
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.filter((e) => e === '[DONE]')).toHaveLength(1);
    expect(events.some((e) => e.includes('"error"'))).toBe(false);
    const parsed = events.slice(0, -1).map((e) => JSON.parse(e) as Chunk);
    expect(parsed.at(-1)!.choices[0]!.finish_reason).toBe('stop');
    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 1, 'a ledger entry');
    const [entry] = await chargesOf(gw.gateway.admin.ledger(ACCOUNT));
    expect(entry!.units).toEqual({ kind: 'tokens', prompt: 4, completion: 1 });
    await eventually(noHoldLeft, 'no hold left');
    // The upstream's unfinished body is given up at its timeout, and the gateway goes on serving.
    await eventually(() => up.requests[0]?.isClosed === true, 'the upstream request to be closed');
    const again = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true });
    expect(sseData(await again.text()).at(-1)).toBe('[DONE]');
  });
});

describe('the client goes away before the upstream answered', () => {
  beforeEach(() => start());

  it('the upstream request is aborted and nothing is charged', async () => {
    up.setBehavior({ kind: 'hang' });
    const abort = new AbortController();
    const pending = postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES }, { signal: abort.signal });
    await up.waitForRequests(1);
    expect(await gw.stores.billing.openHolds(ACCOUNT)).toBe(1);
    abort.abort();
    await expect(pending).rejects.toThrow();
    await eventually(() => up.requests[0]!.isClosed, 'the upstream request to be closed');
    expect(up.requests[0]!.closedEarly).toBe(true);
    await expectNothingCharged();
  });
});

describe('circuit breaker', () => {
  beforeEach(() => start());

  it('after 5 upstream failures in a row across 3 accounts: 503 model_unavailable with Retry-After, no upstream call, listed Unavailable', async () => {
    up.setBehavior({ kind: 'error', status: 503 });
    const keys = [devKey, otherKey, thirdKey];
    for (let i = 0; i < 5; i++) {
      const res = await postChat(gw.baseURL, keys[i % 3]!, { model: MODEL, messages: MESSAGES });
      expect(res.status).toBe(502);
      await res.text();
    }
    expect(up.requests).toHaveLength(5);
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES });
    expect(res.status).toBe(503);
    const err = await errorBody(res);
    expect(err).toMatchObject({ code: 'model_unavailable', type: 'upstream_error' });
    const retryAfter = Number(res.headers.get('retry-after'));
    expect(Number.isInteger(retryAfter) && retryAfter >= 1).toBe(true);
    expect(up.requests).toHaveLength(5);
    const models = (await (await fetch(`${gw.baseURL}/models`, { headers: { authorization: `Bearer ${devKey}` } })).json()) as {
      data: Array<{ id: string; status: string }>;
    };
    expect(models.data.find((m) => m.id === MODEL)?.status).toBe('Unavailable');
    await expectNothingCharged();
  });
});

describe('circuit breaker: cooldown and the half-open probe (clock injected)', () => {
  let clock: number;
  let proxy: FaultProxy | undefined;

  afterEach(async () => {
    await proxy?.close();
    proxy = undefined;
  });

  async function startAt(upstreamUrl: string) {
    clock = Date.UTC(2026, 0, 15, 12, 0, 0);
    const setup = testConfig({
      upstreamUrl,
      walletUsd: 100,
      timeoutMs: 2_000,
      now: () => clock,
      accounts: [{ id: 'acct_b', walletUsd: 100 }, { id: 'acct_c', walletUsd: 100 }],
      keys: otherKeys.map((key, i) => ({ key, account: i === 0 ? 'acct_b' : 'acct_c', kind: 'developer' as const })),
    });
    devKey = setup.devKey;
    gw = await startGateway({ ...setup.options, routing: { retries: 0 } });
  }

  /** Keys of two more accounts: upstream 5xx open the circuit only when seen across three accounts. */
  const otherKeys = [testKey(), testKey()];
  let turn = 0;
  const call = async (extra: Record<string, unknown> = {}) => {
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, ...extra });
    return { res, text: await res.text() };
  };
  /** A call from each of the three accounts in turn. */
  const callAny = async () => {
    const key = [devKey, ...otherKeys][turn++ % 3]!;
    const res = await postChat(gw.baseURL, key, { model: MODEL, messages: MESSAGES });
    return { res, text: await res.text() };
  };

  async function listedStatus(): Promise<string | undefined> {
    const res = await fetch(`${gw.baseURL}/models`, { headers: { authorization: `Bearer ${devKey}` } });
    const list = (await res.json()) as { data: Array<{ id: string; status: string }> };
    return list.data.find((m) => m.id === MODEL)?.status;
  }

  function expectFastFail(r: { res: Response; text: string }, retryAfter: string) {
    expect(r.res.status).toBe(503);
    const body = JSON.parse(r.text) as { error: Record<string, unknown> };
    expect(Object.keys(body.error).sort()).toEqual(ENVELOPE_KEYS);
    expect(body.error).toMatchObject({ code: 'model_unavailable', type: 'upstream_error', param: null });
    expect(r.res.headers.get('retry-after')).toBe(retryAfter);
    expect(r.res.headers.get('x-request-id')).toMatch(/^req_/);
  }

  it('connection failures (a closed port) open it; 503 + Retry-After counts down on the clock; a failed probe reopens it; a good probe restores the model', async () => {
    proxy = await startFaultProxy(up.origin);
    await proxy.stopListening(); // the port is closed: every connection is refused
    await startAt(`${proxy.origin}/v1`);
    up.setBehavior({ kind: 'json' });

    for (let i = 1; i <= 5; i++) {
      const r = await call();
      expect(r.res.status).toBe(502);
      expect((JSON.parse(r.text) as { error: { code: string } }).error.code).toBe('upstream_error');
      expect(await listedStatus()).toBe(i < 5 ? 'Active' : 'Unavailable');
    }
    expectFastFail(await call(), '10');
    expectFastFail(await call({ stream: true }), '10');
    clock += 4_000;
    expectFastFail(await call(), '6');
    clock += 5_999;
    expectFastFail(await call(), '1');

    // Cooldown over: one probe goes out. The port is still closed: it fails and reopens the circuit.
    clock += 1;
    expect(await listedStatus()).toBe('Unavailable');
    const probe = await call();
    expect(probe.res.status).toBe(502);
    expectFastFail(await call(), '10');
    expect(await listedStatus()).toBe('Unavailable');

    // The upstream is back; after the next cooldown the probe succeeds and closes the circuit.
    await proxy.listen();
    clock += 10_000;
    const good = await call();
    expect(good.res.status).toBe(200);
    expect(await listedStatus()).toBe('Active');
    for (let i = 0; i < 3; i++) expect((await call()).res.status).toBe(200);
    expect(up.requests).toHaveLength(4);
    // Only the answered calls were charged; no hold is left from the refused ones.
    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 4, 'four ledger entries');
    await eventually(noHoldLeft, 'no hold left');
  });

  it('5xx: half-open lets exactly one probe through at a time; its success closes the circuit', async () => {
    await startAt(up.url);
    up.setBehavior({ kind: 'error', status: 500 });
    for (let i = 0; i < 5; i++) expect((await callAny()).res.status).toBe(502);
    expectFastFail(await call(), '10');
    expect(up.requests).toHaveLength(5);

    clock += 10_000;
    let open!: () => void;
    up.setBehavior({ kind: 'json', gate: new Promise<void>((r) => (open = r)) });
    const probe = call();
    await up.waitForRequests(6);
    // While the probe is out, everything else still fails fast.
    expectFastFail(await call(), '1');
    expect(await listedStatus()).toBe('Unavailable');
    expect(up.requests).toHaveLength(6);
    open();
    expect((await probe).res.status).toBe(200);
    expect(await listedStatus()).toBe('Active');
    expect((await call()).res.status).toBe(200);
    expect(up.requests).toHaveLength(7);
    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 2, 'two ledger entries');
    await eventually(noHoldLeft, 'no hold left');
  });

  it('only consecutive failures (from three accounts) count: a success or an upstream 4xx (it answered) resets them; 4xx never opens it', async () => {
    await startAt(up.url);
    const run = async (status: number, n: number) => {
      up.setBehavior(status === 200 ? { kind: 'json' } : { kind: 'error', status });
      for (let i = 0; i < n; i++) expect((await callAny()).res.status).toBe(status === 200 ? 200 : status >= 500 ? 502 : status);
    };
    await run(500, 4);
    await run(200, 1);
    await run(502, 4);
    expect(await listedStatus()).toBe('Active');
    await run(400, 6);
    await run(429, 6);
    expect(await listedStatus()).toBe('Active');
    await run(503, 4);
    expect(await listedStatus()).toBe('Active');
    await run(503, 1); // the fifth in a row
    expect(await listedStatus()).toBe('Unavailable');
    expectFastFail(await call(), '10');
    expect(up.requests).toHaveLength(4 + 1 + 4 + 12 + 5);
  });
});

describe('failures after the stream started', () => {
  beforeEach(() => start());

  async function streamEvents(body: Record<string, unknown>) {
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true, ...body });
    expect(res.status).toBe(200);
    const events = sseData(await res.text());
    return events;
  }

  function expectErrorTail(events: string[]) {
    expect(events.at(-1)).toBe('[DONE]');
    const last = JSON.parse(events.at(-2)!) as Chunk;
    expect(Object.keys(last).sort()).toEqual(['choices', 'error']);
    expect(last.choices).toEqual([{ index: 0, delta: { content: '' }, finish_reason: 'error' }]);
    expect(Object.keys(last.error!).sort()).toEqual(ENVELOPE_KEYS);
    expect(last.error).toMatchObject({ code: 'upstream_error', type: 'upstream_error' });
    // Exactly one error event, and no event claims a normal finish.
    const parsed = events.slice(0, -1).map((e) => JSON.parse(e) as Chunk);
    expect(parsed.filter((c) => c.error)).toHaveLength(1);
    expect(parsed.flatMap((c) => c.choices).filter((c) => c.finish_reason === 'stop')).toEqual([]);
    return parsed;
  }

  it('reset mid-stream -> one SSE error event then [DONE]; the produced part is billed; no hold left', async () => {
    const tokenizer = await loadTokenizer();
    const chunks = ['One', ' two', ' three', ' four', ' five', ' six'];
    up.setBehavior({ kind: 'stream', chunks, resetAfter: 3 });
    const events = await streamEvents({ max_tokens: 100 });
    const parsed = expectErrorTail(events);
    const content = parsed.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(content).toBe('One two three');

    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 1, 'the produced part to be billed');
    await eventually(noHoldLeft, 'no hold left');
    const [entry] = await chargesOf(gw.gateway.admin.ledger(ACCOUNT));
    expect(entry!.units).toEqual({
      kind: 'tokens',
      prompt: await promptEstimate(MESSAGES),
      completion: tokenizer.count('One two three'),
    });
    expect(entry!.cost).toBe(chatCost(await promptEstimate(MESSAGES), tokenizer.count('One two three')));
    expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(WALLET - entry!.cost);
  });

  it('reset before any content -> error event then [DONE], nothing charged', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['never', ' sent'], resetAfter: 0 });
    const events = await streamEvents({});
    const parsed = expectErrorTail(events);
    expect(parsed.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('');
    await expectNothingCharged();
  });

  it('an error event from the upstream mid-stream -> one error event with its message, then [DONE]', async () => {
    const tokenizer = await loadTokenizer();
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'Begun' }, finish_reason: null }] })}\n\n`);
        res.write(`data: ${JSON.stringify({ error: { message: 'The model is overloaded.', type: 'server_error' } })}\n\n`);
        res.end('data: [DONE]\n\n');
      },
    });
    const events = await streamEvents({});
    const parsed = expectErrorTail(events);
    expect(parsed.at(-1)!.error!.message).toBe('The model is overloaded.');
    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 1, 'the produced part to be billed');
    await eventually(noHoldLeft, 'no hold left');
    const [entry] = await chargesOf(gw.gateway.admin.ledger(ACCOUNT));
    expect((entry!.units as { completion: number }).completion).toBe(tokenizer.count('Begun'));
  });

  it('a stream that ends without [DONE] is an error, not a finished answer', async () => {
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'Half' }, finish_reason: null }] })}\n\n`);
      },
    });
    const events = await streamEvents({});
    expectErrorTail(events);
    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 1, 'the produced part to be billed');
    await eventually(noHoldLeft, 'no hold left');
  });
});

describe('streams and usage', () => {
  beforeEach(() => start());

  it('a stream without usage is billed by the tokenizer', async () => {
    const tokenizer = await loadTokenizer();
    const chunks = ['The', ' quick', ' brown', ' fox', ' jumps.'];
    up.setBehavior({ kind: 'stream', chunks, usage: false });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true, max_tokens: 64 });
    expect(res.status).toBe(200);
    const events = sseData(await res.text());
    expect(events.at(-1)).toBe('[DONE]');
    const parsed = events.slice(0, -1).map((e) => JSON.parse(e) as Chunk);
    expect(parsed.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('The quick brown fox jumps.');
    expect(parsed.some((c) => c.error)).toBe(false);

    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 1, 'a ledger entry');
    await eventually(noHoldLeft, 'no hold left');
    const [entry] = await chargesOf(gw.gateway.admin.ledger(ACCOUNT));
    const completion = tokenizer.count('The quick brown fox jumps.');
    expect(completion).toBeGreaterThan(0);
    expect(entry!.units).toEqual({ kind: 'tokens', prompt: await promptEstimate(MESSAGES), completion });
    expect(entry!.cost).toBe(chatCost(await promptEstimate(MESSAGES), completion));
  });

  it('asks the upstream for usage, bills it, and keeps the usage chunk from a client that did not ask', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['a', 'b'], usageCounts: { prompt_tokens: 21, completion_tokens: 13 } });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true });
    const events = sseData(await res.text());
    expect(up.requests[0]!.body!.stream_options).toEqual({ include_usage: true });
    expect(up.requests[0]!.body!.stream).toBe(true);
    const parsed = events.slice(0, -1).map((e) => JSON.parse(e) as Chunk);
    expect(parsed.some((c) => c.usage !== undefined)).toBe(false);
    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 1, 'a ledger entry');
    const [entry] = await chargesOf(gw.gateway.admin.ledger(ACCOUNT));
    expect(entry!.units).toEqual({ kind: 'tokens', prompt: 21, completion: 13 });
    expect(entry!.cost).toBe(chatCost(21, 13));
    await eventually(noHoldLeft, 'no hold left');
  });

  it('relays the usage chunk to a client that asked for it, keeping its other stream_options', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['a', 'b'], usageCounts: { prompt_tokens: 5, completion_tokens: 2 } });
    const res = await postChat(gw.baseURL, devKey, {
      model: MODEL,
      messages: MESSAGES,
      stream: true,
      stream_options: { include_usage: true, include_obfuscation: false },
    });
    const events = sseData(await res.text());
    expect(up.requests[0]!.body!.stream_options).toEqual({ include_usage: true, include_obfuscation: false });
    const usageChunks = events
      .slice(0, -1)
      .map((e) => JSON.parse(e) as Chunk)
      .filter((c) => c.usage !== undefined);
    expect(usageChunks).toHaveLength(1);
    expect(usageChunks[0]!.usage).toEqual({ prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 });
    expect(usageChunks[0]!.choices).toEqual([]);
  });

  it('stream chunks name the public model, as plain answers do', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['a', 'b'] });
    const res = await postChat(gw.baseURL, devKey, {
      model: MODEL,
      messages: MESSAGES,
      stream: true,
      stream_options: { include_usage: true },
    });
    const events = sseData(await res.text());
    expect(up.requests[0]!.body!.model).toBe(UPSTREAM_MODEL);
    const parsed = events.slice(0, -1).map((e) => JSON.parse(e) as Chunk);
    expect(parsed.length).toBeGreaterThanOrEqual(4);
    for (const c of parsed) expect(c.model).toBe(MODEL);
    expect(parsed.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('ab');
  });

  it('include_usage: false from the client is overridden upstream', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['x'] });
    const res = await postChat(gw.baseURL, devKey, {
      model: MODEL,
      messages: MESSAGES,
      stream: true,
      stream_options: { include_usage: false },
    });
    await res.text();
    expect(up.requests[0]!.body!.stream_options).toEqual({ include_usage: true });
  });
});

describe('what reaches the upstream', () => {
  beforeEach(() => start());

  it('the client Authorization never reaches the upstream; the configured upstream key does', async () => {
    up.setBehavior({ kind: 'json' });
    const res = await fetch(`${gw.baseURL}/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${devKey}`,
        'content-type': 'application/json',
        cookie: 'session=secret',
        'x-api-key': devKey,
        'openai-organization': 'org-client',
        'x-custom-header': 'client-value',
      },
      body: JSON.stringify({ model: MODEL, messages: MESSAGES }),
    });
    expect(res.status).toBe(200);
    const h = up.requests[0]!.headers;
    expect(h.authorization).toBe(`Bearer ${UPSTREAM_API_KEY}`);
    expect(JSON.stringify(h)).not.toContain(devKey);
    expect(h.cookie).toBeUndefined();
    expect(h['x-api-key']).toBeUndefined();
    expect(h['openai-organization']).toBeUndefined();
    expect(h['x-custom-header']).toBeUndefined();
    expect(h['content-type']).toBe('application/json');
    // The gateway's request id goes upstream, and it is the one the client got.
    expect(h['x-request-id']).toBe(res.headers.get('x-request-id'));
  });

  it('model is rewritten to upstreamModel; the answer names the public model; other fields pass', async () => {
    up.setBehavior({ kind: 'json', content: 'Hi!', usage: { prompt_tokens: 9, completion_tokens: 3 } });
    const body = {
      model: MODEL,
      messages: MESSAGES,
      temperature: 0.25,
      top_p: 0.5,
      seed: 42,
      stop: ['\n\n'],
      max_tokens: 50,
      response_format: { type: 'json_object' },
      tool_choice: 'none',
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
      reasoning_effort: 'low',
      user: 'end-user-7',
    };
    const res = await postChat(gw.baseURL, devKey, body);
    expect(res.status).toBe(200);
    const answer = (await res.json()) as { model: string; choices: Array<{ message: { content: string } }> };
    expect(answer.model).toBe(MODEL);
    expect(answer.choices[0]!.message.content).toBe('Hi!');
    const sent = up.requests[0]!;
    expect(sent.method).toBe('POST');
    expect(sent.path).toBe('/v1/chat/completions');
    expect(sent.body).toEqual({ ...body, model: UPSTREAM_MODEL });
    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === 1, 'a ledger entry');
    const [entry] = await chargesOf(gw.gateway.admin.ledger(ACCOUNT));
    expect(entry!.cost).toBe(chatCost(9, 3));
  });

  it('streams: model rewritten upstream, stream_options and the held output cap added, nothing else changed', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['ok'] });
    const body = { model: MODEL, messages: MESSAGES, stream: true, temperature: 0, n: 1 };
    const res = await postChat(gw.baseURL, devKey, body);
    await res.text();
    // No cap from the client: the upstream is asked for the model's, which is what was held.
    expect(up.requests[0]!.body).toEqual({ ...body, model: UPSTREAM_MODEL, stream_options: { include_usage: true }, max_completion_tokens: 4096 });
  });

  it('brand and knowledge are consumed: never relayed, the brand voice goes first as a system message', async () => {
    up.setBehavior({ kind: 'json' });
    const userMessages = [{ role: 'user', content: 'What is the refund window for Acme gadgets?' }];
    const cases: Array<Record<string, unknown>> = [
      { brand: 'brand_acme' },
      { knowledge: 'brand_acme' },
      { knowledge: ['doc_refunds', 'doc_other'] },
      { brand: 'brand_acme', knowledge: ['doc_refunds'] },
    ];
    for (const extra of cases) {
      const before = up.requests.length;
      const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: userMessages, ...extra });
      expect(res.status, JSON.stringify(extra)).toBe(200);
      await res.json();
      expect(up.requests.length).toBe(before + 1);
      const sent = up.requests.at(-1)!;
      expect(sent.body).not.toHaveProperty('brand');
      expect(sent.body).not.toHaveProperty('knowledge');
      expect(sent.raw).not.toContain('"brand"');
      expect(sent.raw).not.toContain('"knowledge"');
      const messages = sent.body!.messages as Array<{ role: string; content: string }>;
      // The client's messages come last, untouched.
      expect(messages.slice(-1)).toEqual(userMessages);
      const system = messages.slice(0, -1);
      expect(system.every((m) => m.role === 'system')).toBe(true);
      if ('brand' in extra) expect(system[0]!.content).toContain('Cheerful and brief.');
      if ('knowledge' in extra) expect(system.map((m) => m.content).join('\n')).toContain('30 days');
    }
  });

  it('an unknown brand or knowledge id is 404 before any upstream call, nothing charged', async () => {
    up.setBehavior({ kind: 'json' });
    const cases: Array<[Record<string, unknown>, string, string]> = [
      [{ brand: 'brand_nope' }, 'brand_not_found', 'brand'],
      [{ knowledge: 'brand_nope' }, 'knowledge_not_found', 'knowledge'],
      [{ knowledge: ['doc_refunds', 'doc_nope'] }, 'knowledge_not_found', 'knowledge'],
      [{ brand: 'brand_of_someone_else' }, 'brand_not_found', 'brand'],
      [{ knowledge: ['doc_of_someone_else'] }, 'knowledge_not_found', 'knowledge'],
    ];
    for (const [extra, code, param] of cases) {
      const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, ...extra });
      expect(res.status).toBe(404);
      const err = await errorBody(res);
      expect(err).toMatchObject({ code, param, type: 'invalid_request_error' });
    }
    expect(up.requests).toHaveLength(0);
    await expectNothingCharged();
  });

  it('fields the gateway does not know are relayed as they came', async () => {
    up.setBehavior({ kind: 'json' });
    // Unusual spacing and key order; the upstream must get the same meaning.
    const raw = `{"messages":[{"role":"user","content":"Hi"}],  "model":"${MODEL}","logit_bias":{"50256":-100},"metadata":{"a":"b"}}`;
    const res = await fetch(`${gw.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: raw,
    });
    expect(res.status).toBe(200);
    expect(up.requests[0]!.body).toEqual({ ...(JSON.parse(raw) as object), model: UPSTREAM_MODEL, max_completion_tokens: 4096 });
  });
});

describe('keep-alive', () => {
  beforeEach(() => start(undefined, { streamKeepAliveMs: 50 }));

  it('sends ": keep-alive" comments while the upstream is silent, and the answer still completes', async () => {
    up.setBehavior({
      kind: 'custom',
      async handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] })}\n\n`);
        // Silent for 20 keep-alive intervals.
        await new Promise((r) => setTimeout(r, 1_000));
        res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'late' }, finish_reason: 'stop' }] })}\n\n`);
        res.end('data: [DONE]\n\n');
      },
    });
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages: MESSAGES, stream: true });
    const text = await res.text();
    expect(text).toContain(': keep-alive\n\n');
    const events = sseData(text);
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.some((e) => e.includes('"late"'))).toBe(true);
    expect(events.some((e) => e.includes('"error"'))).toBe(false);
  });
});
