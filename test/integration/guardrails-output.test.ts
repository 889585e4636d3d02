/**
 * Output guardrails over loopback upstreams in each provider's wire format: the answer's text
 * is checked before the client sees it, on every text API (chat, Responses, Messages) and
 * every upstream kind (OpenAI, Anthropic and Gemini, translated), plain and streamed. A PII
 * string the upstream streams in three pieces is redacted in what the client receives; a
 * block ends the answer as OpenAI ends filtered output (content_filter; Responses incomplete,
 * Messages refusal) and bills exactly what the same answer bills unguarded; accounts select.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LedgerEntry } from '../../src/index.js';
import { ACCOUNT, eventually, sseData, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { type ScriptedAnswer, startWireUpstream, type WireKind, type WireUpstream } from '../helpers/wire-answers.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';

type Ingress = 'chat' | 'responses' | 'messages';
const UNGUARDED = 'acct_unguarded';
const modelOf = (kind: WireKind) => `wire/${kind}`;

let wire: WireUpstream;
let gw: RunningGateway;
const keys = { guarded: '', unguarded: testKey() };

beforeAll(async () => {
  wire = await startWireUpstream();
  const setup = testConfig({ walletUsd: 1000, accounts: [{ id: UNGUARDED, walletUsd: 1000 }], keys: [{ key: keys.unguarded, account: UNGUARDED }] });
  keys.guarded = setup.devKey;
  const upstream = (kind: WireKind) => ({ kind, baseUrl: wire.url, apiKey: 'sk-wire-upstream-key-0123456789', timeoutMs: 10_000 });
  setup.options.upstreams = { ...setup.options.upstreams, openai: upstream('openai'), anthropic: upstream('anthropic'), gemini: upstream('gemini') };
  setup.options.upstreams = { ...setup.options.upstreams };
  setup.options.models!.push(...(['openai', 'anthropic', 'gemini'] as const).map((kind) => ({
    id: modelOf(kind),
    type: 'text' as const,
    upstream: kind,
    upstreamModel: `${kind}-model-1`,
    pricing: { prompt: '0.000001', completion: '0.000002' },
    contextLength: 32_000,
    maxOutputTokens: 1000,
  })));
  setup.options.guardrails = [
    { id: 'pii-out', kind: 'pii', on: ['output'], action: 'redact', accounts: [ACCOUNT] },
    { id: 'codename', kind: 'regex', on: ['output'], patterns: ['project\\s+nightfall'], ignoreCase: true, action: 'block', accounts: [ACCOUNT] },
    { id: 'gemini-only', kind: 'regex', on: ['output'], patterns: ['grey'], action: 'redact', models: ['wire/gem*'] },
  ];
  setup.options.admin = { tokenSha256: ADMIN_SHA };
  gw = await startGateway(setup.options);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await wire?.close();
});

function requestOf(ingress: Ingress, kind: WireKind, stream: boolean): { path: string; body: Record<string, unknown> } {
  const model = modelOf(kind);
  const prompt = 'Say it.';
  if (ingress === 'chat') return { path: '/chat/completions', body: { model, messages: [{ role: 'user', content: prompt }], stream } };
  if (ingress === 'responses') return { path: '/responses', body: { model, input: prompt, stream } };
  return { path: '/messages', body: { model, max_tokens: 1000, messages: [{ role: 'user', content: prompt }], stream } };
}

interface Seen {
  status: number;
  raw: string;
  /** The answer's text as the client reads it. */
  text: string;
  /** How it ended: chat's finish_reason, Responses' incomplete reason (or "completed"), Messages' stop_reason. */
  ended: unknown;
  charge: LedgerEntry | null;
}

async function call(ingress: Ingress, kind: WireKind, stream: boolean, answer: ScriptedAnswer, key = keys.guarded): Promise<Seen> {
  wire.script(kind, answer);
  const { path, body } = requestOf(ingress, kind, stream);
  const res = await fetch(`${gw.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const raw = await res.text();
  const id = res.headers.get('x-request-id')!;
  const account = key === keys.guarded ? ACCOUNT : UNGUARDED;
  let charge: LedgerEntry | null = null;
  await eventually(async () => {
    charge = (await gw.gateway.admin.ledger(account)).find((e) => e.id === id) ?? null;
    return charge !== null;
  }, 'the charge');
  return { status: res.status, raw, charge, ...read(ingress, stream, raw) };
}

/** The text and the end of an answer, as an SDK would read them. */
function read(ingress: Ingress, stream: boolean, raw: string): { text: string; ended: unknown } {
  if (!stream) {
    const a = JSON.parse(raw);
    if (ingress === 'chat') return { text: a.choices[0].message.content, ended: a.choices[0].finish_reason };
    if (ingress === 'responses') return { text: a.output.flatMap((i: { content?: Array<{ text: string }> }) => i.content ?? []).map((p: { text: string }) => p.text).join(''), ended: a.incomplete_details?.reason ?? a.status };
    return { text: a.content.map((b: { text: string }) => b.text).join(''), ended: a.stop_reason };
  }
  const events = sseData(raw).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
  if (ingress === 'chat') {
    const choices = events.flatMap((e) => e.choices ?? []);
    return { text: choices.map((c) => c.delta?.content ?? '').join(''), ended: choices.find((c) => c.finish_reason)?.finish_reason };
  }
  if (ingress === 'responses') {
    const last = events.at(-1);
    const done = events.find((e) => e.type === 'response.output_text.done');
    const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    if (done) expect(done.text).toBe(deltas);
    return { text: deltas, ended: last.response.incomplete_details?.reason ?? last.response.status };
  }
  return {
    text: events.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text).join(''),
    ended: events.find((e) => e.type === 'message_delta')?.delta.stop_reason,
  };
}

/** An email the upstream streams in three pieces. */
const SPLIT: ScriptedAnswer = { pieces: ['Write to jane.d', 'oe@exam', 'ple.com today.'], usage: 'final', prompt: 12, completion: 9 };
const SAFE = 'Write to [REDACTED:EMAIL] today.';
/** The codename the upstream streams in three pieces, and more after it. */
const CODENAME: ScriptedAnswer = { pieces: ['The plan is project ', 'night', 'fall, then more words.'], usage: 'final', prompt: 12, completion: 40 };

const CASES: Array<[Ingress, WireKind]> = [
  ['chat', 'openai'],
  ['chat', 'anthropic'],
  ['chat', 'gemini'],
  ['responses', 'openai'],
  ['responses', 'anthropic'],
  ['messages', 'anthropic'],
  ['messages', 'openai'],
];

/** A Responses stream's events numbered as OpenAI numbers them: one after another, none missing or repeated. */
function expectSequenced(raw: string): void {
  const numbers = raw
    .split('\n')
    .filter((l) => l.startsWith('data: {'))
    .map((l) => (JSON.parse(l.slice(6)) as { sequence_number?: number }).sequence_number);
  expect(numbers.length).toBeGreaterThan(2);
  expect(numbers).toEqual(numbers.map((_, i) => numbers[0]! + i));
}

describe('a PII string split across three stream chunks is redacted in what the client receives', () => {
  for (const [ingress, kind] of CASES) {
    for (const stream of [true, false]) {
      it(`${ingress} over ${kind}, ${stream ? 'streamed' : 'plain'}`, async () => {
        const seen = await call(ingress, kind, stream, SPLIT);
        expect(seen.status).toBe(200);
        expect(seen.text).toBe(SAFE);
        for (const piece of ['jane', 'oe@exam', 'example.com']) expect(seen.raw).not.toContain(piece);
        // Billed as the upstream reported it: the redaction changed only the client's copy.
        expect(seen.charge?.units).toMatchObject({ kind: 'tokens', prompt: 12, completion: 9 });
        if (ingress === 'responses' && stream) expectSequenced(seen.raw);
      });
    }
  }

  it('a guardrail runs only on the models it names', async () => {
    const grey: ScriptedAnswer = { pieces: ['a gr', 'ey sky'], usage: 'final', prompt: 3, completion: 3 };
    expect((await call('chat', 'gemini', true, grey, keys.unguarded)).text).toBe('a [REDACTED] sky');
    expect((await call('chat', 'openai', true, grey, keys.unguarded)).text).toBe('a grey sky');
  });

  it('an account the guardrail does not name gets the text as it came', async () => {
    const seen = await call('chat', 'openai', true, SPLIT, keys.unguarded);
    expect(seen.text).toBe('Write to jane.doe@example.com today.');
  });
});

describe('a block on output', () => {
  const ENDED: Record<Ingress, string> = { chat: 'content_filter', responses: 'content_filter', messages: 'refusal' };
  for (const [ingress, kind] of CASES) {
    for (const stream of [true, false]) {
      it(`${ingress} over ${kind}, ${stream ? 'streamed' : 'plain'}: ends with ${ENDED[ingress]}, the match withheld, billed as unguarded`, async () => {
        const seen = await call(ingress, kind, stream, CODENAME);
        expect(seen.status).toBe(200);
        expect(seen.ended).toBe(ENDED[ingress]);
        expect(seen.raw.toLowerCase()).not.toContain('nightfall');
        expect(seen.raw).not.toContain('more words');
        if (stream) expect(seen.text).toBe('The plan is ');
        if (ingress === 'responses' && stream) expectSequenced(seen.raw);
        const unguarded = await call(ingress, kind, stream, CODENAME, keys.unguarded);
        expect(unguarded.text).toBe(CODENAME.pieces.join(''));
        expect(seen.charge?.units).toEqual(unguarded.charge?.units);
        expect(seen.charge?.cost).toBe(unguarded.charge?.cost);
        expect(seen.charge?.units).toMatchObject({ completion: 40 });
      });
    }
  }
});

describe('a Responses stream whose text comes only whole, in its finished item and terminal response', () => {
  it('is redacted there, as the same answer sent plain is', async () => {
    const seen = await call('responses', 'openai', true, { ...SPLIT, textIn: 'item-only' });
    expect(seen.status).toBe(200);
    expect(seen.raw).not.toContain('jane');
    expect(seen.raw).toContain('[REDACTED:EMAIL]');
    expect(seen.ended).toBe('completed');
  });

  it('a block there ends it incomplete, the match withheld', async () => {
    const seen = await call('responses', 'openai', true, { ...CODENAME, textIn: 'item-only' });
    expect(seen.raw.toLowerCase()).not.toContain('nightfall');
    expect(seen.raw).not.toContain('more words');
    expect(seen.ended).toBe('content_filter');
  });
});

describe('what the guardrails did is told', () => {
  it('the admin API lists the recent blocks, newest first, of the account asked for', async () => {
    const seen = await call('messages', 'openai', true, CODENAME);
    const last = await call('chat', 'gemini', false, CODENAME);
    const res = await fetch(`${gw.baseURL.replace(/\/v1$/, '')}/admin/v1/guardrails/blocks?limit=2&account=${ACCOUNT}`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(res.status).toBe(200);
    const { data } = (await res.json()) as { data: Array<Record<string, unknown>> };
    expect(data).toHaveLength(2);
    expect(data[0]).toMatchObject({ guardrail: 'codename', on: 'output', account: ACCOUNT, model: 'wire/gemini', path: '/chat/completions', requestId: last.charge?.id });
    expect(data[1]).toMatchObject({ guardrail: 'codename', on: 'output', account: ACCOUNT, model: 'wire/openai', path: '/messages', requestId: seen.charge?.id });
    const other = await fetch(`${gw.baseURL.replace(/\/v1$/, '')}/admin/v1/guardrails/blocks?account=${UNGUARDED}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(((await other.json()) as { data: unknown[] }).data).toEqual([]);
  });

  it('the admin API lists the guardrails configured', async () => {
    const res = await fetch(`${gw.baseURL.replace(/\/v1$/, '')}/admin/v1/guardrails`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(res.status).toBe(200);
    const { data } = (await res.json()) as { data: Array<Record<string, unknown>> };
    expect(data.map((g) => [g.id, g.kind, g.on, g.action])).toEqual([
      ['pii-out', 'pii', ['output'], 'redact'],
      ['codename', 'regex', ['output'], 'block'],
      ['gemini-only', 'regex', ['output'], 'redact'],
    ]);
    expect(data[2]).toMatchObject({ models: ['wire/gem*'] });
  });
});
