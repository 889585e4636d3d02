/**
 * Hostile input, property-based (fast-check): over 10,000 generated requests in total, run in
 * process through `gateway.fetch(new Request(...), { clientAddress })`:
 *
 *   bodies    deep nesting, wrong types, huge / odd numbers (1e400, -0, 2**64), prototype
 *             keys (__proto__, constructor, prototype), duplicate keys, very long strings,
 *             invalid UTF-8, bodies over limits.maxBodyBytes (declared, or streamed without a
 *             length);
 *   headers   odd Authorization values, content types, X-Forwarded-For junk behind trusted
 *             and untrusted peers, Idempotency-Key junk, hop-by-hop and spoofed ids;
 *   methods   standard, custom and prototype-named methods, on random paths under /v1 and
 *   & paths   outside, with encoded characters, "..", malformed escapes, very long segments.
 *
 * Every answer: no 5xx (the upstreams are the built-in simulator and a healthy test upstream,
 * so not even the documented 502/503/504), x-request-id, and for errors exactly the
 * error envelope with a (status, code, type) of the README's error table. No unhandled rejection.
 *
 * Nothing invalid reaches the upstream: two models run on a real HTTP test upstream (one with
 * an upstreamModel, so the body is rebuilt; one without, so the client's bytes go through as
 * they came), and every request it records is checked: parsed strictly (a duplicate key is an
 * ambiguity the upstream may resolve differently from the gateway), a valid chat request
 * (model, non-empty messages with valid roles, sane numbers), no brand / knowledge, only
 * allowlisted headers with the upstream's own key, and only for a request the gateway
 * answered 200.
 *
 * Last: slow-body clients (real node:http) are cut off by limits.bodyTimeoutMs.
 */
import fc from 'fast-check';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../../src/gateway.js';
import type { Stores } from '../../src/stores/types.js';
import {
  ACCOUNT,
  COMPLETION_PRICE,
  MODEL,
  PROMPT_PRICE,
  UPSTREAM_API_KEY,
  makeGateway,
  startGateway,
  testConfig,
  testKey,
} from '../helpers/gateway.js';
import { AUDIO, IMAGE, VIDEO, mediaModels } from '../helpers/media.js';
import { startTestUpstream, type RecordedRequest, type TestUpstream } from '../helpers/upstream.js';
import { chargesOf } from '../helpers/billing.js';

/** On the HTTP test upstream, with an upstreamModel: the gateway rebuilds the body. */
const HTTP_MODEL = 'test/chat-http';
const HTTP_UPSTREAM_MODEL = 'provider-http-1';
/** On the HTTP test upstream, no upstreamModel: a plain call forwards the client's bytes. */
const RAW_MODEL = 'test/chat-raw';
const MAX_BODY = 16 * 1024;
const POOR = 'acct_poor';
const OTHER = 'acct_other';
const poorKey = testKey();
const otherKey = testKey();
const ROLES = new Set(['system', 'user', 'assistant', 'tool', 'developer']);

/**
 * The README's error table (plus the codes errors.ts documents beside it), written out here on
 * purpose rather than imported: the test checks src/errors.ts against the documented table,
 * not against itself.
 */
const ERROR_TABLE: Record<string, [number, string]> = {
  invalid_json: [400, 'invalid_request_error'],
  invalid_request: [400, 'invalid_request_error'],
  unsupported_tool: [400, 'invalid_request_error'],
  invalid_api_key: [401, 'authentication_error'],
  insufficient_quota: [402, 'insufficient_quota'],
  model_not_allowed: [403, 'permission_error'],
  permission_denied: [403, 'permission_error'],
  model_not_found: [404, 'invalid_request_error'],
  knowledge_not_found: [404, 'invalid_request_error'],
  brand_not_found: [404, 'invalid_request_error'],
  job_not_found: [404, 'invalid_request_error'],
  not_found: [404, 'invalid_request_error'],
  method_not_allowed: [405, 'invalid_request_error'],
  request_timeout: [408, 'invalid_request_error'],
  idempotency_conflict: [409, 'invalid_request_error'],
  request_too_large: [413, 'invalid_request_error'],
  idempotency_mismatch: [422, 'invalid_request_error'],
  rate_limit_exceeded: [429, 'rate_limit_exceeded'],
};
/** Headers the upstream may see: the allowlist and what HTTP itself adds. */
const UPSTREAM_HEADERS = new Set(['content-type', 'accept', 'x-request-id', 'authorization', 'host', 'connection', 'content-length']);

let gateway: Gateway;
let stores: Stores;
let up: TestUpstream;
let devKey: string;
let agentKey: string;
let disabledKey: string;
let secrets: string[];
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);
const stats = { requests: 0, byStatus: new Map<number, number>(), upstreamChecked: 0 };

beforeAll(async () => {
  process.on('unhandledRejection', onUnhandled);
  up = await startTestUpstream();
  up.setBehavior((rec) => (rec.body?.stream === true ? { kind: 'stream', chunks: ['Hi', ' there'] } : { kind: 'json' }));
  const textModel = (id: string, upstreamModel?: string) => ({
    id,
    type: 'text' as const,
    upstream: 'http',
    ...(upstreamModel ? { upstreamModel } : {}),
    pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE },
    maxOutputTokens: 1024,
  });
  const setup = testConfig({
    walletUsd: 1_000_000,
    models: [textModel(HTTP_MODEL, HTTP_UPSTREAM_MODEL), textModel(RAW_MODEL), ...mediaModels('test')],
    accounts: [
      { id: POOR, walletUsd: 0 },
      { id: OTHER, walletUsd: 10 },
    ],
    keys: [
      { key: poorKey, account: POOR, kind: 'developer' },
      { key: otherKey, account: OTHER, kind: 'developer' },
    ],
    brands: [
      { id: 'brand_acme', account: ACCOUNT, name: 'Acme', voice: 'Cheerful.' },
      { id: 'brand_of_someone_else', account: OTHER, name: 'Other', voice: 'Grim.' },
    ],
    documents: [{ id: 'doc_refunds', account: ACCOUNT, brand: 'brand_acme', title: 'Refunds', text: 'Refunds within 30 days.' }],
    limits: {
      maxBodyBytes: MAX_BODY,
      jobPollIntervalMs: 50,
      inFlightImageJobs: 64,
      inFlightVideoJobs: 64,
    },
  });
  setup.options.upstreams = {
    test: { simulate: true, chunkDelayMs: 0, imageDelayMs: 0, videoDurationMs: 0 },
    http: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs: 10_000 },
  };
  setup.options.trustProxy = ['10.0.0.0/8', '::1'];
  devKey = setup.devKey;
  agentKey = setup.agentKey;
  ({ gateway, stores } = await makeGateway(setup.options));
  const disabled = await gateway.admin.createKey({ account: ACCOUNT });
  await gateway.admin.disableKey(disabled.id);
  disabledKey = disabled.key;
  secrets = [devKey, agentKey, poorKey, otherKey, disabledKey, UPSTREAM_API_KEY];
});

afterAll(async () => {
  process.off('unhandledRejection', onUnhandled);
  await gateway?.dispose();
  await stores?.close();
  await up?.close();
  // eslint-disable-next-line no-console
  console.log(
    `hostile input: ${stats.requests} requests; by status ${JSON.stringify(Object.fromEntries([...stats.byStatus].sort((a, b) => a[0] - b[0])))}; ` +
      `${stats.upstreamChecked} upstream requests checked`,
  );
});

// ---- the checks every answer goes through --------------------------------------------------

interface Outcome {
  status: number;
  requestId: string;
  code: string | null;
}

async function send(request: Request, clientAddress = '203.0.113.7'): Promise<Outcome> {
  const before = up.requests.length;
  const res = await gateway.fetch(request, { clientAddress });
  const outcome = await checkResponse(res);
  stats.requests++;
  stats.byStatus.set(outcome.status, (stats.byStatus.get(outcome.status) ?? 0) + 1);
  const reached = up.requests.slice(before);
  for (const rec of reached) {
    // Only a request the gateway accepted (and answered 200) ever reaches the upstream.
    expect(rec.headers['x-request-id'], 'an upstream request belongs to this answer').toBe(outcome.requestId);
    expect(outcome.status, 'a rejected request reached the upstream').toBe(200);
    checkUpstreamRequest(rec);
  }
  expect(reached.length).toBeLessThanOrEqual(1);
  return outcome;
}

async function checkResponse(res: Response): Promise<Outcome> {
  const status = res.status;
  const requestId = res.headers.get('x-request-id') ?? '';
  const text = await res.text();
  expect(status, `5xx: ${text.slice(0, 300)}`).toBeLessThan(500);
  expect(status).toBeGreaterThanOrEqual(200);
  expect(requestId).toMatch(/^req_[0-9a-f]{24,}$/);
  for (const s of secrets) expect(text.includes(s), 'key material in a response').toBe(false);
  if (status < 400) {
    const type = res.headers.get('content-type') ?? '';
    if (type.includes('text/event-stream')) {
      expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
      for (const line of text.split('\n')) {
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
        const chunk = JSON.parse(line.slice(6)) as Record<string, unknown>;
        expect(chunk.error, 'an error event from a healthy upstream').toBeUndefined();
      }
    } else if (type.includes('application/json')) {
      expect(() => JSON.parse(text)).not.toThrow();
    }
    return { status, requestId, code: null };
  }
  expect(res.headers.get('content-type')).toContain('application/json');
  const body = JSON.parse(text) as Record<string, unknown>;
  expect(Object.keys(body)).toEqual(['error']);
  const err = body.error as Record<string, unknown>;
  const keys = Object.keys(err);
  expect(keys.filter((k) => k !== 'metadata').sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(typeof err.message === 'string' && err.message.length > 0).toBe(true);
  expect(typeof err.type).toBe('string');
  expect(err.code === null || typeof err.code === 'string').toBe(true);
  expect(err.param === null || typeof err.param === 'string').toBe(true);
  if ('metadata' in err) {
    expect(err.metadata !== null && typeof err.metadata === 'object' && !Array.isArray(err.metadata)).toBe(true);
  }
  const row = ERROR_TABLE[String(err.code)];
  expect(row, `code ${String(err.code)} is in the error table`).toBeDefined();
  expect([status, err.type]).toEqual(row);
  if (status === 405) expect(res.headers.get('allow')).toBeTruthy();
  if (err.code === 'rate_limit_exceeded' && String((err.metadata as { limit?: string })?.limit).endsWith('per_minute')) {
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  }
  if (status === 402) expect(res.headers.get('x-should-retry')).toBe('false');
  return { status, requestId, code: String(err.code) };
}

/** A JSON parser that refuses what JSON.parse silently resolves: duplicate keys. */
function strictJson(text: string): unknown {
  let i = 0;
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i]!)) i++;
  };
  const fail = (why: string): never => {
    throw new Error(`${why} at ${i}`);
  };
  const str = (): string => {
    const start = i;
    i++;
    for (;;) {
      const q = text.indexOf('"', i);
      if (q === -1) fail('unterminated string');
      let b = q - 1;
      while (text[b] === '\\') b--;
      i = q + 1;
      if ((q - 1 - b) % 2 === 0) break;
    }
    return JSON.parse(text.slice(start, i)) as string;
  };
  const value = (): unknown => {
    ws();
    const c = text[i];
    if (c === '{') {
      i++;
      const out: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
      const seen = new Set<string>();
      ws();
      if (text[i] === '}') {
        i++;
        return out;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail('key expected');
        const k = str();
        if (seen.has(k)) fail(`duplicate key "${k}"`);
        seen.add(k);
        ws();
        if (text[i++] !== ':') fail('colon expected');
        out[k] = value();
        ws();
        if (text[i] === ',') i++;
        else if (text[i] === '}') {
          i++;
          return out;
        } else fail('comma or } expected');
      }
    }
    if (c === '[') {
      i++;
      const out: unknown[] = [];
      ws();
      if (text[i] === ']') {
        i++;
        return out;
      }
      for (;;) {
        out.push(value());
        ws();
        if (text[i] === ',') i++;
        else if (text[i] === ']') {
          i++;
          return out;
        } else fail('comma or ] expected');
      }
    }
    if (c === '"') return str();
    const m = /^(-?\d+(\.\d+)?([eE][+-]?\d+)?|true|false|null)/.exec(text.slice(i, i + 400));
    if (!m) fail('value expected');
    i += m![0].length;
    return JSON.parse(m![0]);
  };
  const v = value();
  ws();
  if (i !== text.length) fail('trailing text');
  return v;
}

const isCount = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v > 0;

/** What the upstream got must be a valid, unambiguous chat request with only allowed headers. */
function checkUpstreamRequest(rec: RecordedRequest) {
  stats.upstreamChecked++;
  expect(rec.method).toBe('POST');
  expect(rec.path).toBe('/v1/chat/completions');
  for (const name of Object.keys(rec.headers)) expect(UPSTREAM_HEADERS.has(name), `header ${name} reached the upstream`).toBe(true);
  expect(rec.headers.authorization).toBe(`Bearer ${UPSTREAM_API_KEY}`);
  expect(rec.headers['content-type']).toBe('application/json');
  for (const s of secrets.slice(0, -1)) expect(rec.raw.includes(s), 'a client key in the upstream body').toBe(false);

  let body: Record<string, unknown>;
  try {
    body = strictJson(rec.raw) as Record<string, unknown>;
  } catch (err) {
    throw new Error(`the upstream got an ambiguous or invalid body (${(err as Error).message}): ${rec.raw.slice(0, 300)}`);
  }
  expect(body !== null && typeof body === 'object' && !Array.isArray(body)).toBe(true);
  expect([HTTP_UPSTREAM_MODEL, RAW_MODEL]).toContain(body.model);
  expect(Array.isArray(body.messages) && (body.messages as unknown[]).length > 0).toBe(true);
  for (const m of body.messages as unknown[]) {
    expect(m !== null && typeof m === 'object' && !Array.isArray(m)).toBe(true);
    const msg = m as Record<string, unknown>;
    expect(ROLES.has(msg.role as string), `role ${String(msg.role)}`).toBe(true);
    const c = msg.content;
    expect(c === undefined || c === null || typeof c === 'string' || Array.isArray(c)).toBe(true);
  }
  expect(Object.keys(body)).not.toContain('brand');
  expect(Object.keys(body)).not.toContain('knowledge');
  for (const f of ['max_tokens', 'max_completion_tokens', 'n']) {
    if (body[f] !== undefined && body[f] !== null) expect(isCount(body[f]), `${f}: ${String(body[f])}`).toBe(true);
  }
  for (const f of ['temperature', 'top_p']) {
    if (body[f] !== undefined && body[f] !== null) expect(Number.isFinite(body[f])).toBe(true);
  }
  if (body.stream !== undefined && body.stream !== null) expect(typeof body.stream).toBe('boolean');
  if (body.stream === true) expect((body.stream_options as { include_usage?: unknown }).include_usage).toBe(true);
}

// ---- generators -----------------------------------------------------------------------------

const BASE = 'http://gw.test';
const js = (v: unknown) => JSON.stringify(v);

/** One header-safe character: visible ASCII, space, tab, or Latin-1. */
const headerChar = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0x20, max: 0x7e }) },
  { weight: 1, arbitrary: fc.integer({ min: 0x80, max: 0xff }) },
  { weight: 1, arbitrary: fc.constant(0x09) },
).map((c) => String.fromCharCode(c));
const headerJunk = fc.oneof(
  fc.string({ unit: headerChar, maxLength: 40 }),
  fc.integer({ min: 300, max: 8_000 }).map((n) => 'x'.repeat(n)),
);

/** Number literals JSON.parse accepts but that are not what they seem. */
const oddNumber = fc.constantFrom(
  '1e400',
  '-1e400',
  '-0',
  '-0.0',
  '0',
  '18446744073709551616',
  '9007199254740993',
  '1e-400',
  '1E+308',
  '123456789012345678901234567890',
  '-1',
  '0.5',
  '1.0',
  '1',
  '128',
  '129',
  '4096',
  '1e2',
);

const oddString = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 24 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 24 }) },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
    '__proto__',
    'constructor',
    'prototype',
    'toString',
    '',
    ' ',
    '\u0000',
    '\u2028\u2029',
    '\ud800',
    '<script>alert(1)</script>',
    '../../etc/passwd',
    '%00',
    'null',
    MODEL,
    HTTP_MODEL,
    RAW_MODEL,
    IMAGE,
    'user',
    'brand_acme',
    'doc_refunds',
    ),
  },
  { weight: 1, arbitrary: fc.integer({ min: 2_000, max: 20_000 }).map((n) => 'y'.repeat(n)) },
);

const keyName = fc.oneof(
  fc.constantFrom(
    '__proto__',
    'constructor',
    'prototype',
    'hasOwnProperty',
    'toString',
    'model',
    'messages',
    'stream',
    'max_tokens',
    'n',
    'brand',
    'knowledge',
    'role',
    'content',
    '',
  ),
  fc.string({ maxLength: 12 }),
);

/** Arbitrary JSON text (numbers as odd literals), moderately nested. */
const jsonText: fc.Arbitrary<string> = fc.letrec<{ v: string; arr: string; obj: string }>((tie) => ({
  v: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    oddNumber,
    fc.double().map(js),
    fc.constantFrom('true', 'false', 'null'),
    oddString.map(js),
    tie('arr'),
    tie('obj'),
  ),
  arr: fc.array(tie('v'), { maxLength: 4 }).map((a) => `[${a.join(',')}]`),
  obj: fc.array(fc.tuple(keyName, tie('v')), { maxLength: 4 }).map((kv) => `{${kv.map(([k, v]) => `${js(k)}:${v}`).join(',')}}`),
})).v;

/** Nesting from just over the limit to far past what JSON.stringify survives. */
const deepText = fc
  .tuple(fc.integer({ min: 120, max: 6_000 }), fc.constantFrom('arr', 'obj', 'mixed'))
  .map(([d, kind]) =>
    kind === 'arr'
      ? `${'['.repeat(d)}${']'.repeat(d)}`
      : kind === 'obj'
        ? `${'{"a":'.repeat(d)}1${'}'.repeat(d)}`
        : `${'[{"a":'.repeat(d >> 1)}1${'}]'.repeat(d >> 1)}`,
  );

const anyValue = fc.oneof({ weight: 8, arbitrary: jsonText }, { weight: 1, arbitrary: deepText });

const part = fc.oneof(
  { weight: 4, arbitrary: fc.record({ type: fc.constant('text'), text: oddString }).map(js) },
  { weight: 1, arbitrary: fc.constant('{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}') },
  { weight: 1, arbitrary: anyValue },
);
const goodMessage = fc
  .record({
    role: fc.constantFrom('system', 'user', 'assistant', 'tool', 'developer'),
    content: fc.oneof(oddString.map(js), fc.constant('null'), fc.array(part, { maxLength: 3 }).map((a) => `[${a.join(',')}]`)),
  })
  .map(({ role, content }) => `{"role":${js(role)},"content":${content}}`);
const message = fc.oneof(
  { weight: 16, arbitrary: goodMessage },
  { weight: 1, arbitrary: anyValue },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '{"__proto__":{"role":"user"},"content":"x"}',
      '{"role":"user","content":"hi","__proto__":null}',
      '{"role":"user","role":"admin","content":"x"}',
      '{"role":"admin","role":"user","content":"x"}',
      '{"role":"constructor","content":"x"}',
      '{"role":"user","content":{"text":"not an array"}}',
      '{"role":"user","content":"a","content":"b"}',
    ),
  },
);
const messagesValue = fc.oneof(
  { weight: 8, arbitrary: fc.array(message, { minLength: 1, maxLength: 4 }).map((a) => `[${a.join(',')}]`) },
  { weight: 2, arbitrary: anyValue },
  { weight: 1, arbitrary: fc.constantFrom('[]', '{}', '"hello"', 'null', '{"0":{"role":"user","content":"x"},"length":1}') },
  {
    weight: 1,
    arbitrary: fc.integer({ min: 100, max: 1_200 }).map((n) => `[${Array(n).fill('{"role":"user","content":"x"}').join(',')}]`),
  },
);
const modelValue = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(MODEL, HTTP_MODEL, RAW_MODEL).map(js) },
  { weight: 2, arbitrary: anyValue },
  { weight: 1, arbitrary: fc.constantFrom(IMAGE, 'nope', '', '__proto__', 'constructor', 'toString', 'test/chat ').map(js) },
);
/** Right-ish values first, then odd literals, then anything. */
const numberish = (valid: fc.Arbitrary<string>) =>
  fc.oneof({ weight: 3, arbitrary: valid }, { weight: 2, arbitrary: oddNumber }, { weight: 1, arbitrary: anyValue });
const count = (max: number) => fc.integer({ min: 1, max }).map(String);
/** The field, present with probability `p` (null when absent). */
const opt = (name: string, value: fc.Arbitrary<string>, p: number) =>
  fc.oneof(
    { weight: Math.round((1 - p) * 100), arbitrary: fc.constant(null) },
    { weight: Math.round(p * 100), arbitrary: value.map((v): [string, string] => [name, v]) },
  );

/** A chat body: mostly the right fields with right-ish values, hostile everywhere. */
const chatBody = fc
  .record({
    fields: fc.tuple(
      opt('model', modelValue, 0.95),
      opt('messages', messagesValue, 0.95),
      opt('stream', fc.oneof({ weight: 4, arbitrary: fc.constantFrom('true', 'false') }, fc.constantFrom('null', '"true"', '1'), anyValue), 0.5),
      opt('max_tokens', numberish(count(1_000)), 0.4),
      opt('max_completion_tokens', numberish(count(1_000)), 0.15),
      opt('n', numberish(count(2)), 0.15),
      opt('temperature', numberish(fc.double({ min: 0, max: 2, noNaN: true }).map(js)), 0.2),
      opt('seed', numberish(fc.integer().map(String)), 0.1),
      opt(
        'stream_options',
        fc.oneof(
          fc.constantFrom('{"include_usage":true}', '{"include_usage":false}', '{"include_usage":"yes"}', 'null', '{"__proto__":{"include_usage":true}}'),
          anyValue,
        ),
        0.2,
      ),
      opt('brand', fc.oneof(fc.constantFrom('"brand_acme"', '"brand_nope"', '"brand_of_someone_else"', '""', '"__proto__"'), anyValue), 0.15),
      opt(
        'knowledge',
        fc.oneof(fc.constantFrom('"doc_refunds"', '"brand_acme"', '["doc_refunds","nope"]', '[]', '"constructor"', `[${Array(11).fill('"doc_refunds"').join(',')}]`), anyValue),
        0.15,
      ),
      opt('tools', anyValue, 0.1),
      opt('reasoning_effort', fc.oneof(fc.constantFrom('"low"', '"max"', '""'), anyValue), 0.1),
    ),
    extra: fc.oneof({ weight: 3, arbitrary: fc.constant([]) }, { weight: 2, arbitrary: fc.array(fc.tuple(keyName, anyValue), { maxLength: 3 }) }),
    duplicate: fc.oneof(
      { weight: 6, arbitrary: fc.constant(null) },
      {
        weight: 1,
        arbitrary: fc.tuple(
          fc.constantFrom('model', 'messages', 'max_tokens', 'n', 'stream', 'brand'),
          fc.oneof(fc.constantFrom(js(MODEL), js(RAW_MODEL), js('expensive/model'), '1', '100000', '[{"role":"user","content":"x"}]'), anyValue),
          fc.boolean(),
        ),
      },
    ),
    reverse: fc.boolean(),
    pad: fc.constantFrom('', ' ', '\n\t ', '\r\n'),
  })
  .map(({ fields, extra, duplicate, reverse, pad }) => {
    let pairs = [...fields.filter((f): f is [string, string] => f !== null), ...extra];
    if (duplicate) {
      const [k, v, before] = duplicate;
      pairs = before ? [[k, v], ...pairs] : [...pairs, [k, v]];
    }
    if (reverse) pairs.reverse();
    return `${pad}{${pairs.map(([k, v]) => `${js(k)}:${pad}${v}`).join(',')}}${pad}`;
  });

const chatPath = '/v1/chat/completions';
const auth = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });

// ---- the properties ------------------------------------------------------------------------

describe('hostile input (property-based, in process)', () => {
  it('chat bodies: wrong types, odd numbers, prototype and duplicate keys, deep nesting, long strings (3,400 runs)', async () => {
    await fc.assert(
      fc.asyncProperty(chatBody, fc.constantFrom('dev', 'dev', 'dev', 'agent', 'poor'), async (body, who) => {
        const key = who === 'dev' ? devKey : who === 'agent' ? agentKey : poorKey;
        await send(new Request(BASE + chatPath, { method: 'POST', headers: auth(key), body }));
      }),
      { numRuns: 3_400 },
    );
  });

  it('media bodies: images, speech and videos with hostile fields (800 runs)', async () => {
    const mediaBody = fc
      .record({
        path: fc.constantFrom('/v1/images/generations', '/v1/audio/speech', '/v1/videos'),
        model: fc.oneof({ weight: 4, arbitrary: fc.constantFrom(IMAGE, AUDIO, VIDEO, MODEL).map(js) }, { weight: 1, arbitrary: anyValue }),
        fields: fc.tuple(
          opt('prompt', fc.oneof({ weight: 3, arbitrary: oddString.map(js) }, { weight: 1, arbitrary: anyValue }), 0.9),
          opt('input', fc.oneof({ weight: 3, arbitrary: oddString.map(js) }, { weight: 1, arbitrary: anyValue }), 0.5),
          opt('voice', fc.oneof(fc.constantFrom('"alloy"', '{"id":"x"}', '""'), anyValue), 0.5),
          opt('n', numberish(count(3)), 0.3),
          opt('size', fc.oneof(fc.constantFrom('"1024x1024"', '"512x512"', '"0x0"', '"99999999x1"', '"x"', '"-1x-1"', '"1e400x1"'), anyValue), 0.4),
          opt('seconds', numberish(count(8)), 0.3),
          opt('resolution', fc.oneof(fc.constantFrom('"720P"', '"8K"', '"__proto__"'), anyValue), 0.2),
          opt('mode', fc.oneof(fc.constantFrom('"fast"', '"constructor"', '"toString"'), anyValue), 0.2),
          opt('speed', numberish(fc.constantFrom('1', '0.5', '4')), 0.2),
          opt('response_format', fc.oneof(fc.constantFrom('"mp3"', '"url"', '"b64_json"', '"exe"'), anyValue), 0.2),
        ),
      })
      .map(({ path, model, fields }) => ({
        path,
        body: `{${[['model', model] as [string, string], ...fields.filter((f): f is [string, string] => f !== null)]
          .map(([k, v]) => `${js(k)}:${v}`)
          .join(',')}}`,
      }));
    await fc.assert(
      fc.asyncProperty(mediaBody, fc.constantFrom('dev', 'dev', 'agent', 'poor'), async ({ path, body }, who) => {
        const key = who === 'dev' ? devKey : who === 'agent' ? agentKey : poorKey;
        await send(new Request(BASE + path, { method: 'POST', headers: auth(key), body }));
      }),
      { numRuns: 800 },
    );
  });

  it('raw bytes: invalid UTF-8, BOMs, UTF-16, truncated and non-object JSON (1,500 runs)', async () => {
    const valid = (model: string) => js({ model, messages: [{ role: 'user', content: 'hello there, gateway' }] });
    const badSeq = fc.constantFrom(
      [0x80],
      [0xff],
      [0xc0, 0xaf],
      [0xed, 0xa0, 0x80],
      [0xf4, 0x90, 0x80, 0x80],
      [0xe2, 0x82],
      [0xfe, 0xff],
      [0x00],
      [0xf0, 0x9f, 0x98],
    );
    const model = fc.constantFrom(MODEL, HTTP_MODEL, RAW_MODEL);
    const bytes = fc.oneof(
      fc.uint8Array({ maxLength: 400 }),
      fc.tuple(model, badSeq, fc.nat()).map(([m, bad, at]) => {
        const base = Buffer.from(valid(m));
        const pos = base.indexOf('hello') + (at % 20);
        return new Uint8Array(Buffer.concat([base.subarray(0, pos), Buffer.from(bad), base.subarray(pos)]));
      }),
      fc.tuple(model, badSeq).map(([m, bad]) => new Uint8Array(Buffer.concat([Buffer.from(bad), Buffer.from(valid(m))]))),
      model.map((m) => new Uint8Array(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(valid(m))]))),
      model.map((m) => new Uint8Array(Buffer.from(valid(m), 'utf16le'))),
      fc.tuple(model, fc.nat()).map(([m, n]) => new Uint8Array(Buffer.from(valid(m)).subarray(0, n % valid(m).length))),
      fc.jsonValue().map((v) => new Uint8Array(Buffer.from(js(v) ?? 'null'))),
      fc.string({ unit: 'binary', maxLength: 60 }).map((s) => new Uint8Array(Buffer.from(`{"model":"${MODEL}","messages":[{"role":"user","content":"${s}"}]}`))),
    );
    await fc.assert(
      fc.asyncProperty(bytes, fc.constantFrom(chatPath, chatPath, '/v1/images/generations', '/v1/audio/speech', '/v1/videos'), async (b, path) => {
        const outcome = await send(new Request(BASE + path, { method: 'POST', headers: auth(devKey), body: b }));
        // Bytes that are not UTF-8 are never JSON to the gateway.
        if (!isUtf8(b)) expect(outcome.code).toBe('invalid_json');
      }),
      { numRuns: 1_500 },
    );
  });

  it(`bodies over limits.maxBodyBytes (${MAX_BODY}): declared or streamed without a length -> 413, nothing read past the limit (300 runs)`, async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 3 * MAX_BODY }),
        fc.constantFrom('declared', 'streamed', 'plain'),
        fc.integer({ min: 1, max: 4_096 }),
        fc.constantFrom(chatPath, '/v1/images/generations', '/v1/audio/speech', '/v1/videos'),
        async (over, how, chunk, path) => {
          const size = MAX_BODY + over;
          const text = `{"model":"${MODEL}","messages":[{"role":"user","content":"${'z'.repeat(size - 60)}"}]}`;
          const bytes = new TextEncoder().encode(text);
          let pulled = 0;
          let request: Request;
          if (how === 'streamed') {
            let at = 0;
            const stream = new ReadableStream<Uint8Array>({
              pull(c) {
                if (at >= bytes.length) return c.close();
                const piece = bytes.subarray(at, at + chunk);
                at += piece.length;
                pulled += piece.length;
                c.enqueue(piece);
              },
            });
            request = new Request(BASE + path, { method: 'POST', headers: auth(devKey), body: stream, duplex: 'half' } as RequestInit);
          } else {
            const headers: Record<string, string> = auth(devKey);
            if (how === 'declared') headers['content-length'] = String(bytes.length);
            request = new Request(BASE + path, { method: 'POST', headers, body: bytes });
          }
          const outcome = await send(request);
          expect(outcome.status).toBe(413);
          expect(outcome.code).toBe('request_too_large');
          if (how === 'streamed') expect(pulled).toBeLessThanOrEqual(MAX_BODY + 2 * chunk);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('headers: Authorization, content types, X-Forwarded-For behind trusted and untrusted peers, Idempotency-Key junk (2,200 runs)', async () => {
    const authorization = fc.oneof(
      { weight: 5, arbitrary: fc.constantFrom('DEV', 'DEV_LOWER', 'DEV_SPACES', 'AGENT', 'POOR', 'OTHER', 'DISABLED', 'NONE', 'TWO', 'DEV_SUFFIX') },
      { weight: 1, arbitrary: headerJunk },
      {
        weight: 1,
        arbitrary: fc
          .tuple(fc.constantFrom('Bearer ', 'bearer ', 'BEARER  ', 'Basic ', 'Token ', 'Bearer\t', ''), fc.string({ unit: headerChar, maxLength: 60 }))
          .map(([a, b]) => a + b),
      },
      { weight: 1, arbitrary: fc.constantFrom(`Bearer sk-mg-${'A'.repeat(40)}`, `Bearer sk-mg-${'A'.repeat(201)}`, 'Bearer sk-mg-', 'Bearer sk-mg-é'.padEnd(50, 'é')) },
    );
    const contentType = fc.oneof(
      fc.constantFrom(
        'application/json',
        'text/plain',
        'application/json; charset=utf-16',
        'multipart/form-data; boundary=xyz',
        'application/x-www-form-urlencoded',
        '*/*',
        'application/json;;;',
        'NONE',
      ),
      headerJunk,
    );
    const hop = fc.oneof(fc.ipV4(), fc.ipV6(), fc.constantFrom('unknown', '', ' ', '999.1.1.1', '10.0.0.1', '::1', '_hidden', '[::1]:80'), headerJunk);
    const xff = fc.option(
      fc.oneof(fc.array(hop, { maxLength: 8 }).map((a) => a.join(', ')), headerJunk, fc.integer({ min: 100, max: 2_000 }).map((n) => '1.2.3.4,'.repeat(n))),
      { nil: null },
    );
    const peer = fc.oneof(
      fc.constantFrom('10.0.0.7', '::1', '203.0.113.9', '::ffff:10.0.0.1', '', 'not-an-ip', '999.1.1.1', 'fe80::1%eth0', '0.0.0.0'),
      fc.ipV4(),
      fc.ipV6(),
    );
    const idem = fc.option(fc.oneof(fc.string({ unit: headerChar, maxLength: 300 }), fc.constantFrom('a', 'x'.repeat(255), 'x'.repeat(256), 'ä', ' k ')), {
      nil: null,
      freq: 2,
    });
    const extraHeaders = fc.dictionary(
      fc.constantFrom('x-request-id', 'cookie', 'x-api-key', 'proxy-authorization', 'openai-organization', 'accept', 'connection', 'te', 'upgrade', 'keep-alive', 'x-custom'),
      headerJunk,
      { maxKeys: 4 },
    );
    const body = fc.tuple(fc.constantFrom(MODEL, HTTP_MODEL, RAW_MODEL), fc.boolean(), fc.boolean()).map(([model, stream, brand]) =>
      js({ model, messages: [{ role: 'user', content: 'hi' }], ...(stream ? { stream } : {}), ...(brand ? { brand: 'brand_acme' } : {}) }),
    );
    await fc.assert(
      fc.asyncProperty(authorization, contentType, xff, peer, idem, extraHeaders, body, async (a, ct, x, p, k, extra, b) => {
        const headers = new Headers();
        for (const [name, value] of Object.entries(extra)) headers.set(name, value);
        const named: Record<string, string | null> = {
          DEV: `Bearer ${devKey}`,
          DEV_LOWER: `bearer ${devKey}`,
          DEV_SPACES: `Bearer    ${devKey}   `,
          DEV_SUFFIX: `Bearer ${devKey}x`,
          AGENT: `Bearer ${agentKey}`,
          POOR: `Bearer ${poorKey}`,
          OTHER: `Bearer ${otherKey}`,
          DISABLED: `Bearer ${disabledKey}`,
          TWO: `Bearer ${devKey}, Bearer ${agentKey}`,
          NONE: null,
        };
        const authValue = a in named ? named[a]! : a;
        if (authValue !== null) headers.set('authorization', authValue);
        if (ct !== 'NONE') headers.set('content-type', ct);
        if (x !== null) headers.set('x-forwarded-for', x);
        if (k !== null) headers.set('idempotency-key', k);
        const outcome = await send(new Request(BASE + chatPath, { method: 'POST', headers, body: b }), p);
        if (authValue === null || a === 'DISABLED' || a === 'DEV_SUFFIX' || a === 'TWO') expect(outcome.status).toBe(401);
      }),
      { numRuns: 2_200 },
    );
  });

  it('methods and paths: inside and outside /v1, encoded characters, "..", malformed escapes, very long (2,200 runs)', async () => {
    const segment = fc.oneof(
      {
        weight: 4,
        arbitrary: fc.constantFrom(
          'v1',
          'chat',
          'completions',
          'models',
          'key',
          'brands',
          'knowledge',
          'images',
          'generations',
          'audio',
          'speech',
          'videos',
          'content',
          'health',
        ),
      },
      {
        weight: 2,
        arbitrary: fc.constantFrom(
          '..',
          '.',
          '%2e%2e',
          '%2E%2E',
          '%2F',
          '%00',
          '%zz',
          '%',
          '%E0%A4%A',
          '%C0%AF',
          'ü',
          '日本',
          '__proto__',
          'constructor',
          `img_${'A'.repeat(32)}`,
          `video_${'B'.repeat(32)}`,
          ';x',
          '\\',
          '%5C',
          ' ',
          '%20',
          '~',
          '*',
          '@',
          'v2',
          'V1',
          '',
        ),
      },
      { weight: 1, arbitrary: fc.webSegment() },
      { weight: 1, arbitrary: fc.string({ maxLength: 12 }) },
      { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 9_000 }).map((n) => 'a'.repeat(n)) },
    );
    const query = fc.option(
      fc.oneof(fc.constantFrom('?type=image', '?type=audio', '?type=video', '?type=text', '?type=', '?type=__proto__', '?type=image&type=video', '?%zz', '?a=%'), fc.string({ maxLength: 20 }).map((s) => `?type=${s}`)),
      { nil: '' },
    );
    const path = fc
      .tuple(fc.constantFrom('/v1/', '/v1/', '/v1/', '/', '/api/v1/', '//v1/', '/v1//', '/V1/', '/v1', '/v1/../v1/'), fc.array(segment, { maxLength: 5 }), query)
      .map(([prefix, segs, q]) => prefix + segs.join('/') + q);
    const method = fc.constantFrom(
      'GET',
      'GET',
      'POST',
      'POST',
      'PUT',
      'DELETE',
      'PATCH',
      'OPTIONS',
      'HEAD',
      'get',
      'post',
      'FOO',
      'PROPFIND',
      'constructor',
      '__proto__',
      'toString',
      'hasOwnProperty',
      'M-SEARCH',
    );
    const known = fc.constantFrom('/v1/models', '/v1/key', '/v1/brands', '/v1/knowledge', '/v1/chat/completions', '/v1/images/x', '/v1/videos/x/content', '/health');
    await fc.assert(
      fc.asyncProperty(fc.oneof({ weight: 5, arbitrary: path }, { weight: 1, arbitrary: known }), method, fc.constantFrom('dev', 'agent', 'none'), async (p, m, who) => {
        const headers: Record<string, string> = {};
        if (who !== 'none') headers.authorization = `Bearer ${who === 'dev' ? devKey : agentKey}`;
        const upper = m.toUpperCase();
        const init: RequestInit = { method: m, headers };
        if (upper !== 'GET' && upper !== 'HEAD') {
          headers['content-type'] = 'application/json';
          init.body = js({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
        }
        let request: Request;
        try {
          request = new Request(BASE + p, init);
        } catch (err) {
          throw new Error(`the generator built an unusable request (${m} ${p}): ${(err as Error).message}`);
        }
        const outcome = await send(request);
        const url = new URL(request.url);
        if (!url.pathname.startsWith('/v1/') && url.pathname !== '/health') expect(outcome.code).toBe('not_found');
      }),
      { numRuns: 2_200 },
    );
  });
});

/** The body of a raw HTTP/1.1 answer (de-chunked when it is chunked). */
function bodyOf(answer: string): string {
  const end = answer.indexOf('\r\n\r\n');
  const head = answer.slice(0, end).toLowerCase();
  let rest = answer.slice(end + 4);
  if (!head.includes('transfer-encoding: chunked')) return rest;
  let out = '';
  for (;;) {
    const line = rest.indexOf('\r\n');
    const size = parseInt(rest.slice(0, line), 16);
    if (!size) return out;
    out += rest.slice(line + 2, line + 2 + size);
    rest = rest.slice(line + 2 + size + 2);
  }
}

function isUtf8(bytes: Uint8Array): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    return true;
  } catch {
    return false;
  }
}

describe('after all of it', () => {
  it('no unhandled rejection fired; no hold is left open; the wallet equals the ledger', async () => {
    expect(stats.requests).toBeGreaterThanOrEqual(10_000);
    expect(stats.upstreamChecked).toBeGreaterThan(200);
    // Streams settle in the background: give them a moment.
    for (let i = 0; i < 200 && (await stores.billing.openHolds(ACCOUNT)) > 0; i++) await new Promise((r) => setTimeout(r, 25));
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(0);
    const ledger = await chargesOf(gateway.admin.ledger(ACCOUNT));
    const spent = ledger.reduce((s, e) => s + e.cost, 0n);
    const wallet = await stores.billing.wallet(ACCOUNT);
    expect(wallet.balance).toBe(1_000_000n * 1_000_000_000n - spent);
    expect(unhandled).toEqual([]);
  });
});

describe('slow-body clients are cut off by a timeout (real node:http)', () => {
  /** Sends `head` and `body` on a raw socket; resolves with what came back when it closed or a whole answer arrived. */
  function rawExchange(port: number, head: string, writeBody: (write: (s: string) => void) => void): Promise<{ text: string; closed: boolean }> {
    return new Promise((resolve, reject) => {
      const sock = connect(port, '127.0.0.1');
      let buf = '';
      const guard = setTimeout(() => {
        sock.destroy();
        reject(new Error('no answer and no close within 15 s'));
      }, 15_000);
      const done = (closed: boolean) => {
        clearTimeout(guard);
        sock.destroy();
        resolve({ text: buf, closed });
      };
      sock.on('data', (d: Buffer) => {
        buf += d.toString('latin1');
        const end = buf.indexOf('\r\n\r\n');
        if (end === -1) return;
        const len = /content-length: (\d+)/i.exec(buf.slice(0, end));
        if (len ? buf.length >= end + 4 + Number(len[1]) : buf.endsWith('\r\n0\r\n\r\n')) done(false);
      });
      sock.on('close', () => done(true));
      sock.on('error', () => undefined);
      sock.write(head);
      writeBody((s) => {
        if (!sock.destroyed) sock.write(s);
      });
    });
  }

  it('headers and half a body then a stall, a stalled chunked body, or a trickle -> 408 request_timeout (or closed); nothing reaches the upstream', async () => {
    const setup = testConfig({ upstreamUrl: up.url, limits: { bodyTimeoutMs: 300 } });
    const gw = await startGateway(setup.options);
    const timers: NodeJS.Timeout[] = [];
    try {
      const port = Number(new URL(gw.origin).port);
      const before = up.requests.length;
      const body = js({ model: MODEL, messages: [{ role: 'user', content: 'z'.repeat(400) }] });
      const head = (extra: string) =>
        `POST /v1/chat/completions HTTP/1.1\r\nhost: gw.test\r\nauthorization: Bearer ${setup.devKey}\r\ncontent-type: application/json\r\n${extra}\r\n`;
      const cases: Array<[string, string, (write: (s: string) => void) => void]> = [
        ['half a body, then nothing', head(`content-length: ${body.length}\r\n`), (w) => w(body.slice(0, body.length >> 1))],
        ['headers only', head(`content-length: ${body.length}\r\n`), () => undefined],
        ['a chunked body that stops mid-chunk', head('transfer-encoding: chunked\r\n'), (w) => w(`${body.length.toString(16)}\r\n${body.slice(0, 50)}`)],
        [
          'a trickle: one byte every 100 ms',
          head(`content-length: ${body.length}\r\n`),
          (w) => {
            let i = 0;
            const t = setInterval(() => (i < body.length ? w(body[i++]!) : clearInterval(t)), 100);
            timers.push(t);
          },
        ],
      ];
      for (const [name, h, writeBody] of cases) {
        const { text, closed } = await rawExchange(port, h, writeBody);
        if (text === '') {
          expect(closed, name).toBe(true);
          continue;
        }
        expect(text.slice(0, 12), name).toBe('HTTP/1.1 408');
        const payload = JSON.parse(bodyOf(text)) as { error: Record<string, unknown> };
        expect(payload.error, name).toMatchObject({ code: 'request_timeout', type: 'invalid_request_error', param: null });
        expect(text.toLowerCase(), name).toContain('x-request-id: req_');
      }
      expect(up.requests.length).toBe(before);
      expect(await gw.stores.billing.openHolds(ACCOUNT)).toBe(0);
      expect(await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).toEqual([]);
    } finally {
      for (const t of timers) clearInterval(t);
      await gw.close();
    }
  });
});
