/**
 * The gateway's answers through `gateway.fetch(new Request(...))`, no server: the error
 * envelope and codes, body limits, routing, the models listing, postures on an injected clock,
 * grants, monthly caps and GET /key. The model runs on the built-in simulator.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { nextMonthStart } from '../../src/billing/meter.js';
import type { Gateway } from '../../src/gateway.js';
import { affordableUnits, parseUsd, usdNumber } from '../../src/billing/money.js';
import type { Stores } from '../../src/stores/types.js';
import { COMPLETION_PICO, PROMPT_PICO, promptEstimate, chargesOf } from '../helpers/billing.js';
import { ACCOUNT, MODEL, makeGateway, testConfig, testKey } from '../helpers/gateway.js';

const LEGACY = 'test/legacy';
const ENTERPRISE = 'test/enterprise';
const CAPPED = 'acct_capped';
const CAP_USD = '0.001';
const cappedKey = testKey();
const MAX_BODY = 2048;
const START = Date.UTC(2030, 0, 15, 12); // 2030-01-15 12:00 UTC

let clock: number;
let gateway: Gateway;
let stores: Stores;
let devKey: string;
let agentKey: string;
/** Every response this file got, to check x-request-id on all of them. */
let seen: Response[];

beforeEach(async () => {
  clock = START;
  seen = [];
  const setup = testConfig({
    now: () => clock,
    limits: { maxBodyBytes: MAX_BODY },
    models: [
      {
        id: LEGACY,
        type: 'text',
        name: 'Legacy Chat',
        ownedBy: 'Test Labs',
        upstream: 'test',
        pricing: { prompt: '0.0000005', completion: '0.0000015' },
        posture: 'Deprecated',
        retiresAt: '2030-06-30',
      },
      {
        id: ENTERPRISE,
        type: 'text',
        upstream: 'test',
        pricing: { prompt: '0.00001', completion: '0.00003' },
        posture: 'Contact sales',
      },
    ],
    accounts: [{ id: CAPPED, walletUsd: 100 }],
    keys: [{ key: cappedKey, account: CAPPED, kind: 'developer', label: 'capped', monthlyCapUsd: CAP_USD }],
  });
  devKey = setup.devKey;
  agentKey = setup.agentKey;
  ({ gateway, stores } = await makeGateway(setup.options));
});

afterEach(async () => {
  for (const res of seen) expect(res.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
  await gateway.dispose();
});

async function call(path: string, init: RequestInit & { key?: string | null } = {}): Promise<Response> {
  const { key = devKey, ...rest } = init;
  const headers = new Headers(rest.headers);
  if (key !== null && !headers.has('authorization')) headers.set('authorization', `Bearer ${key}`);
  if (rest.body !== undefined && !headers.has('content-type')) headers.set('content-type', 'application/json');
  const res = await gateway.fetch(new Request(`http://gateway.test${path}`, { ...rest, headers }));
  seen.push(res);
  return res;
}

/** POST /v1/chat/completions; a string, bytes or stream body is sent as is, anything else as JSON. */
const chat = (body: unknown, init: RequestInit & { key?: string | null } = {}) =>
  call('/v1/chat/completions', {
    method: 'POST',
    body:
      typeof body === 'string' || body instanceof Uint8Array || body instanceof ReadableStream
        ? (body as BodyInit)
        : JSON.stringify(body),
    ...init,
  });

const hi = [{ role: 'user', content: 'hi' }];

interface Envelope {
  message: string;
  type: string;
  code: string | null;
  param: string | null;
  metadata?: Record<string, unknown>;
}

/** Checks the error envelope exactly and returns the inner error. */
async function envelope(res: Response, status: number, code: string): Promise<Envelope> {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  const body = (await res.json()) as { error: Envelope };
  expect(Object.keys(body)).toEqual(['error']);
  const keys = Object.keys(body.error).sort();
  expect(keys).toEqual(body.error.metadata ? ['code', 'message', 'metadata', 'param', 'type'] : ['code', 'message', 'param', 'type']);
  expect(typeof body.error.message).toBe('string');
  expect(body.error.message.length).toBeGreaterThan(0);
  expect(typeof body.error.type).toBe('string');
  expect(body.error.param === null || typeof body.error.param === 'string').toBe(true);
  expect(body.error.code).toBe(code);
  return body.error;
}

describe('request validation', () => {
  it('400 invalid_json for a body that is not JSON', async () => {
    const err = await envelope(await chat('{"model": "x", '), 400, 'invalid_json');
    expect(err.type).toBe('invalid_request_error');
    expect(err.param).toBeNull();
    // Not UTF-8.
    await envelope(await chat(new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])), 400, 'invalid_json');
    await envelope(await chat(''), 400, 'invalid_json');
  });

  it('400 invalid_request for a JSON body that is not an object', async () => {
    await envelope(await chat('[1,2]'), 400, 'invalid_request');
    await envelope(await chat('null'), 400, 'invalid_request');
  });

  it.each([
    ['messages missing', { model: MODEL }, 'messages'],
    ['messages empty', { model: MODEL, messages: [] }, 'messages'],
    ['bad role', { model: MODEL, messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role'],
    ['bad role in a later message', { model: MODEL, messages: [...hi, { role: 'robot', content: 'y' }] }, 'messages[1].role'],
    ['content of a wrong type', { model: MODEL, messages: [{ role: 'user', content: 42 }] }, 'messages[0].content'],
    ['stop of a wrong type', { model: MODEL, messages: hi, stop: 5 }, 'stop'],
    ['stop array of numbers', { model: MODEL, messages: hi, stop: [1, 2] }, 'stop'],
    ['model missing', { messages: hi }, 'model'],
    ['max_tokens not an integer', { model: MODEL, messages: hi, max_tokens: 1.5 }, 'max_tokens'],
    ['max_tokens zero', { model: MODEL, messages: hi, max_tokens: 0 }, 'max_tokens'],
    ['n out of range', { model: MODEL, messages: hi, n: 0 }, 'n'],
    ['stream not a boolean', { model: MODEL, messages: hi, stream: 'yes' }, 'stream'],
    ['reasoning_effort unknown', { model: MODEL, messages: hi, reasoning_effort: 'max' }, 'reasoning_effort'],
    ['knowledge over 10 ids', { model: MODEL, messages: hi, knowledge: Array.from({ length: 11 }, (_, i) => `d${i}`) }, 'knowledge'],
    ['brand empty', { model: MODEL, messages: hi, brand: '' }, 'brand'],
  ])('400 invalid_request with param: %s', async (_name, body, param) => {
    const err = await envelope(await chat(body), 400, 'invalid_request');
    expect(err.type).toBe('invalid_request_error');
    expect(err.param).toBe(param);
    expect(err.message).toContain(param);
  });

  it('nothing is held or charged for an invalid request', async () => {
    await chat({ model: MODEL, messages: [{ role: 'wizard' }] });
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
    expect(await chargesOf(stores.billing.ledger(ACCOUNT))).toEqual([]);
  });
});

describe('routing', () => {
  it('404 not_found for an unknown route, with or without a key', async () => {
    const a = await envelope(await call('/v1/nope'), 404, 'not_found');
    expect(a.type).toBe('invalid_request_error');
    await envelope(await call('/v1/nope', { key: null }), 404, 'not_found');
    await envelope(await call('/elsewhere'), 404, 'not_found');
    await envelope(await call('/v1/chat/completions/extra', { method: 'POST', body: '{}' }), 404, 'not_found');
  });

  it('405 method_not_allowed with Allow on a known path', async () => {
    const res = await call('/v1/chat/completions', { method: 'GET' });
    await envelope(res, 405, 'method_not_allowed');
    expect(res.headers.get('allow')).toBe('POST');
    const res2 = await call('/v1/models', { method: 'DELETE' });
    await envelope(res2, 405, 'method_not_allowed');
    expect(res2.headers.get('allow')).toBe('GET');
  });

  it('401 invalid_api_key: missing, malformed, unknown', async () => {
    for (const authorization of [null, 'Bearer', 'Bearer sk-mg-short', `Basic ${devKey}`, `Bearer ${testKey()}`]) {
      const res = await call('/v1/models', authorization === null ? { key: null } : { headers: { authorization } });
      const err = await envelope(res, 401, 'invalid_api_key');
      expect(err.type).toBe('authentication_error');
      expect(err.message).not.toContain(devKey);
    }
  });

  it('GET /health answers with a request id', async () => {
    const res = await call('/health', { key: null });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok' });
  });
});

describe('413 request_too_large', () => {
  const big = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x'.repeat(MAX_BODY) }] });

  it('a body over maxBodyBytes with Content-Length', async () => {
    const res = await chat(big, { headers: { 'content-length': String(Buffer.byteLength(big)) } });
    const err = await envelope(res, 413, 'request_too_large');
    expect(err.type).toBe('invalid_request_error');
  });

  it('a declared Content-Length over the limit is refused without reading the body', async () => {
    // The body never ends: only refusing on the header can answer.
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode('{"model":'));
      },
    });
    const res = await chat(body, {
      headers: { 'content-length': String(MAX_BODY + 1) },
      duplex: 'half',
    } as RequestInit);
    await envelope(res, 413, 'request_too_large');
  });

  it('a chunked body (no Content-Length) that grows over maxBodyBytes', async () => {
    const enc = new TextEncoder();
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        // Valid JSON so far, 512 bytes a chunk, never closed by itself.
        c.enqueue(enc.encode(sent === 0 ? `{"model":"${MODEL}","pad":"` : 'y'.repeat(512)));
        sent++;
      },
    });
    const req = new Request('http://gateway.test/v1/chat/completions', {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body,
      duplex: 'half',
    } as RequestInit);
    expect(req.headers.get('content-length')).toBeNull();
    const res = await gateway.fetch(req);
    seen.push(res);
    await envelope(res, 413, 'request_too_large');
    expect(sent).toBeGreaterThan(MAX_BODY / 512);
  });

  it('a body of exactly maxBodyBytes is accepted', async () => {
    const base = JSON.stringify({ model: MODEL, messages: hi, max_tokens: 5, pad: '' });
    const exact = base.replace('"pad":""', `"pad":"${'p'.repeat(MAX_BODY - Buffer.byteLength(base))}"`);
    expect(Buffer.byteLength(exact)).toBe(MAX_BODY);
    const res = await chat(exact);
    expect(res.status).toBe(200);
    await res.text();
  });
});

describe('GET /models', () => {
  const ROW_KEYS = ['context_length', 'created', 'id', 'name', 'object', 'owned_by', 'posture', 'pricing', 'retires_at', 'status', 'type'];

  it('text rows carry exactly the documented fields', async () => {
    const res = await call('/v1/models');
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; data: Array<Record<string, unknown>> };
    expect(Object.keys(body).sort()).toEqual(['data', 'object']);
    expect(body.object).toBe('list');
    expect(body.data.map((r) => r.id)).toEqual([MODEL, LEGACY, ENTERPRISE]);
    for (const row of body.data) {
      expect(Object.keys(row).sort()).toEqual(ROW_KEYS);
      expect(row.object).toBe('model');
      expect(row.type).toBe('text');
      expect(row.status).toBe('Active');
      expect(Number.isInteger(row.created)).toBe(true);
      expect(Number.isInteger(row.context_length)).toBe(true);
      const pricing = row.pricing as Record<string, unknown>;
      expect(Object.keys(pricing).sort()).toEqual(['completion', 'prompt']);
      expect(pricing.prompt).toMatch(/^\d+(\.\d+)?$/);
      expect(pricing.completion).toMatch(/^\d+(\.\d+)?$/);
    }
    expect(body.data[0]).toEqual({
      id: MODEL,
      object: 'model',
      type: 'text',
      name: 'Test Chat',
      owned_by: 'Test Labs',
      created: 1_700_000_000,
      context_length: 32_000,
      pricing: { prompt: '0.000001', completion: '0.000002' },
      status: 'Active',
      posture: 'GA',
      retires_at: null,
    });
    expect(body.data[1]).toMatchObject({ posture: 'Deprecated', retires_at: '2030-06-30', pricing: { prompt: '0.0000005', completion: '0.0000015' } });
    expect(body.data[2]).toMatchObject({ posture: 'Contact sales' });
    expect(res.headers.get('ratelimit-policy')).toBe('"key";q=100000;w=60');
  });

  it('an agent key sees its one model; with ?type= an empty list', async () => {
    const res = await call('/v1/models', { key: agentKey });
    const body = (await res.json()) as { data: Array<{ id: string }> };
    expect(body.data.map((r) => r.id)).toEqual([MODEL]);
    const media = await call('/v1/models?type=image', { key: agentKey });
    expect(await media.json()).toEqual({ object: 'list', data: [] });
  });

  it('any other type is 400 with param type', async () => {
    const err = await envelope(await call('/v1/models?type=text'), 400, 'invalid_request');
    expect(err.param).toBe('type');
    await envelope(await call('/v1/models?type=bogus'), 400, 'invalid_request');
  });
});

describe('postures on the injected clock', () => {
  it('a Deprecated model is callable until its retires_at, with Deprecation and Sunset headers', async () => {
    const res = await chat({ model: LEGACY, messages: hi, max_tokens: 5 });
    expect(res.status).toBe(200);
    await res.json();
    expect(res.headers.get('deprecation')).not.toBeNull();
    const sunset = res.headers.get('sunset');
    expect(sunset).not.toBeNull();
    expect(new Date(sunset!).toISOString()).toBe('2030-06-30T00:00:00.000Z');

    const streamed = await chat({ model: LEGACY, messages: hi, max_tokens: 5, stream: true });
    expect(streamed.status).toBe(200);
    expect(streamed.headers.get('deprecation')).not.toBeNull();
    expect(streamed.headers.get('sunset')).toBe(sunset);
    expect(await streamed.text()).toContain('data: [DONE]');

    // GA models carry neither.
    const ga = await chat({ model: MODEL, messages: hi, max_tokens: 5 });
    expect(ga.status).toBe(200);
    expect(ga.headers.get('deprecation')).toBeNull();
    expect(ga.headers.get('sunset')).toBeNull();
  });

  it('once retires_at has passed the model leaves the listing and calls get 404 model_not_found', async () => {
    const ids = async () => ((await (await call('/v1/models')).json()) as { data: Array<{ id: string }> }).data.map((r) => r.id);
    clock = Date.UTC(2030, 5, 29, 23, 59, 59, 999);
    expect(await ids()).toContain(LEGACY);
    const before = await chat({ model: LEGACY, messages: hi, max_tokens: 5 });
    expect(before.status).toBe(200);
    await before.text();

    clock = Date.UTC(2030, 5, 30);
    expect(await ids()).toEqual([MODEL, ENTERPRISE]);
    const err = await envelope(await chat({ model: LEGACY, messages: hi }), 404, 'model_not_found');
    expect(err.param).toBe('model');
    expect(err.type).toBe('invalid_request_error');
  });

  it('a Contact sales model needs a grant: 403 permission_denied before, 200 after setGrants', async () => {
    const err = await envelope(await chat({ model: ENTERPRISE, messages: hi, max_tokens: 5 }), 403, 'permission_denied');
    expect(err.type).toBe('permission_error');
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
    await gateway.admin.setGrants(ACCOUNT, [ENTERPRISE]);
    const res = await chat({ model: ENTERPRISE, messages: hi, max_tokens: 5 });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { model: string; choices: unknown[] };
    expect(body.model).toBe(ENTERPRISE);
    // Another account is still not granted.
    const other = await chat({ model: ENTERPRISE, messages: hi, max_tokens: 5 }, { key: cappedKey });
    await envelope(other, 403, 'permission_denied');
  });

  it('unknown model: 404 model_not_found with param model', async () => {
    const err = await envelope(await chat({ model: 'no/such-model', messages: hi }), 404, 'model_not_found');
    expect(err.param).toBe('model');
  });

  it('agent key on another model: 403 model_not_allowed', async () => {
    const err = await envelope(await chat({ model: LEGACY, messages: hi }, { key: agentKey }), 403, 'model_not_allowed');
    expect(err.type).toBe('permission_error');
  });
});

describe('monthly cap', () => {
  it('402 insufficient_quota with limit_source key_monthly_cap when the hold would pass the cap', async () => {
    const res = await chat({ model: MODEL, messages: hi, max_tokens: 1000 }, { key: cappedKey });
    const err = await envelope(res, 402, 'insufficient_quota');
    expect(err.type).toBe('insufficient_quota');
    expect(res.headers.get('x-should-retry')).toBe('false');
    const affordable = affordableUnits(parseUsd(CAP_USD), PROMPT_PICO * BigInt(await promptEstimate(hi)), COMPLETION_PICO);
    expect(affordable).toBeGreaterThan(0n);
    expect(affordable).toBeLessThan(1000n);
    expect(err.metadata).toEqual({ limit_source: 'key_monthly_cap', affordable_max_tokens: Number(affordable) });
    expect(err.message).toContain(
      `This request requires more credits, or fewer max_tokens. You requested up to 1000 tokens, but can only afford ${affordable}.`,
    );
    // The wallet itself is fine; nothing was held or charged.
    expect(await stores.billing.wallet(CAPPED)).toEqual({ balance: parseUsd(100), held: 0n });

    // Within the cap the same key works; the cap resets at 00:00 UTC on the 1st.
    const ok = await chat({ model: MODEL, messages: hi, max_tokens: Number(affordable) }, { key: cappedKey });
    expect(ok.status).toBe(200);
    await ok.json();
  });

  it('a wallet that cannot pay is 402 with limit_source wallet', async () => {
    await gateway.admin.createAccount({ id: 'acct_empty', walletUsd: 0 });
    const { key } = await gateway.admin.createKey({ account: 'acct_empty' });
    const res = await chat({ model: MODEL, messages: hi }, { key });
    const err = await envelope(res, 402, 'insufficient_quota');
    expect(err.metadata).toEqual({ limit_source: 'wallet', affordable_max_tokens: 0 });
    expect(err.message).toContain('You requested up to 4096 tokens, but can only afford 0.');
  });
});

describe('GET /key', () => {
  const DATA_KEYS = [
    'created_at',
    'id',
    'kind',
    'label',
    'limit',
    'limit_remaining',
    'limit_reset',
    'model',
    'rate_limit',
    'resets_at',
    'usage',
    'usage_monthly',
    'wallet',
  ];

  it('a developer key without a cap', async () => {
    const res = await call('/v1/key');
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: Record<string, unknown> };
    expect(Object.keys(body)).toEqual(['data']);
    expect(Object.keys(body.data).sort()).toEqual(DATA_KEYS);
    expect(body.data).toMatchObject({
      label: 'test developer key',
      kind: 'developer',
      model: null,
      usage: 0,
      usage_monthly: 0,
      limit: null,
      limit_remaining: null,
      limit_reset: null,
      resets_at: '2030-02-01T00:00:00.000Z',
      wallet: { balance: 100, held: 0 },
      rate_limit: { requests: 100_000, interval: '60s' },
      created_at: Math.floor(START / 1000),
    });
    expect(body.data.id).toMatch(/^key_/);
    expect(JSON.stringify(body)).not.toContain(devKey);
  });

  it('an agent key names its model', async () => {
    const body = (await (await call('/v1/key', { key: agentKey })).json()) as { data: Record<string, unknown> };
    expect(body.data).toMatchObject({ kind: 'agent', model: MODEL, label: 'test agent key' });
  });

  it('a capped key: figures come from the ledger, remaining = cap - monthly spend', async () => {
    const res = await chat({ model: MODEL, messages: hi, max_tokens: 20 }, { key: cappedKey });
    expect(res.status).toBe(200);
    await res.json();
    const ledger = await chargesOf(stores.billing.ledger(CAPPED));
    expect(ledger).toHaveLength(1);
    const spent = ledger[0]!.cost;
    expect(spent).toBeGreaterThan(0n);
    const body = (await (await call('/v1/key', { key: cappedKey })).json()) as { data: Record<string, unknown> };
    expect(body.data).toMatchObject({
      label: 'capped',
      usage: usdNumber(spent),
      usage_monthly: usdNumber(spent),
      limit: 0.001,
      limit_remaining: usdNumber(parseUsd(CAP_USD) - spent),
      limit_reset: 'monthly',
      resets_at: nextMonthStart(clock).toISOString(),
      wallet: { balance: usdNumber(parseUsd(100) - spent), held: 0 },
    });

    // Next month: the monthly figures start over, the all-time usage stays.
    clock = Date.UTC(2030, 1, 1);
    const next = (await (await call('/v1/key', { key: cappedKey })).json()) as { data: Record<string, unknown> };
    expect(next.data).toMatchObject({
      usage: usdNumber(spent),
      usage_monthly: 0,
      limit_remaining: 0.001,
      resets_at: '2030-03-01T00:00:00.000Z',
    });
  });
});
