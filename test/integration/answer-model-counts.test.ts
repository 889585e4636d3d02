/**
 * What the answer model counts when the upstream's report does not cover the output, read the
 * same plain and streamed, whatever the upstream's kind:
 *
 * - a Gemini report that counts only the thinking (no `candidatesTokenCount`) bills that
 *   thinking plus the visible output counted; before, a plain answer billed the thinking alone
 *   (5 tokens for 341 written) and a stream the larger of the two;
 * - a tool call's arguments that come as a JSON object (Anthropic's `tool_use.input`, Gemini's
 *   `functionCall.args`) count as their JSON text, as the same arguments do as a string; before,
 *   only their string leaves counted (2 tokens for a thousand);
 * - a Responses answer that failed (`response.failed`) before any output releases the hold;
 *   before, it was charged the prompt as a complete answer.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LedgerEntry } from '../../src/index.js';
import { loadTokenizer } from '../helpers/billing.js';
import { ACCOUNT, chargedCall, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

type TokenUnits = { kind: 'tokens'; prompt: number; completion: number };
type Answer = (req: IncomingMessage, res: ServerResponse) => void;

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let count: (text: string) => number;

beforeAll(async () => {
  up = await startTestUpstream();
  const tokenizer = await loadTokenizer();
  count = (t) => tokenizer.count(t);
  const setup = testConfig({ walletUsd: 1_000 });
  devKey = setup.devKey;
  const upstream = (kind: 'openai' | 'anthropic' | 'gemini') => ({ kind, baseUrl: up.url, apiKey: 'sk-counts-upstream-key-0123456789', timeoutMs: 10_000 });
  setup.options.upstreams = { openai: upstream('openai'), anthropic: upstream('anthropic'), gemini: upstream('gemini') };
  setup.options.models = (['openai', 'anthropic', 'gemini'] as const).map((kind) => ({
    id: `p/${kind}`,
    type: 'text' as const,
    upstream: kind,
    upstreamModel: `${kind}-model`,
    pricing: { prompt: '0.000001', completion: '0.000002' },
    contextLength: 32_000,
    maxOutputTokens: 4_000,
  }));
  setup.options.keys = [{ key: devKey, account: ACCOUNT, kind: 'developer', label: 'dev' }];
  gw = await startGateway(setup.options);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const sse = (events: unknown[]) => events.map((e) => `data: ${JSON.stringify(e)}\r\n\r\n`).join('');
const typed = (events: Array<Record<string, unknown>>) => events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`).join('');

function answering(answer: Answer): void {
  up.setBehavior({ kind: 'custom', handle: (req, res) => answer(req, res) });
}
const json = (res: ServerResponse, body: unknown) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};
const events = (res: ServerResponse, body: string) => {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.end(body);
};

/** One call; the charge it landed (null: released), once nothing is held. */
const call = (path: string, body: Record<string, unknown>) => chargedCall(gw, devKey, path, body);
const completionOf = (e: LedgerEntry | null) => (e?.units as TokenUnits | undefined)?.completion;
const chat = (model: string, stream: boolean, extra: Record<string, unknown> = {}) => ({ model, messages: [{ role: 'user', content: 'Hi' }], stream, ...extra });

const TEXT = 'The sea rolls in, grey and green under a low sky, again and again. '.repeat(20);

describe('a Gemini report that counts only the thinking', () => {
  it('bills the thinking it reports plus the visible output counted, plain and streamed alike, through every ingress', async () => {
    const usageMetadata = { promptTokenCount: 7, thoughtsTokenCount: 500, totalTokenCount: 507 };
    const part = (text: string, finish?: string) => ({ candidates: [{ content: { role: 'model', parts: [{ text }] }, index: 0, ...(finish ? { finishReason: finish } : {}) }] });
    answering((req, res) => {
      if (req.url?.includes('streamGenerateContent')) events(res, sse([part(TEXT.slice(0, 300)), { ...part(TEXT.slice(300), 'STOP'), usageMetadata }]));
      else json(res, { ...part(TEXT, 'STOP'), usageMetadata });
    });
    const expected = 500 + count(TEXT);
    for (const stream of [false, true]) {
      const through = [
        await call('/chat/completions', chat('p/gemini', stream)),
        await call('/responses', { model: 'p/gemini', input: 'Hi', stream }),
        await call('/messages', { model: 'p/gemini', max_tokens: 4_000, messages: [{ role: 'user', content: 'Hi' }], stream }),
      ];
      for (const r of through) {
        expect(r.status).toBe(200);
        expect(completionOf(r.charge), `stream: ${stream}`).toBe(expected);
        expect((r.charge!.units as TokenUnits).prompt).toBe(7);
      }
    }
  });
});

describe('tool-call arguments that come as a JSON object', () => {
  const ARGS = { numbers: Array.from({ length: 300 }, (_, i) => i * 7919), flag: true, city: 'Paris' };
  const tools = [{ type: 'function', function: { name: 'get', parameters: { type: 'object' } } }];

  it('count as their JSON text when no usage came, as the same arguments do as a string', async () => {
    const asText = count(JSON.stringify(ARGS));
    answering((_req, res) =>
      json(res, { id: 'c', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get', arguments: JSON.stringify(ARGS) } }] }, finish_reason: 'tool_calls' }] }),
    );
    const openai = completionOf((await call('/chat/completions', chat('p/openai', false, { tools }))).charge)!;
    expect(openai).toBeGreaterThanOrEqual(asText);

    answering((_req, res) => json(res, { id: 'msg_1', type: 'message', role: 'assistant', model: 'a', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get', input: ARGS }], stop_reason: 'tool_use', stop_sequence: null }));
    const anthropic = await call('/messages', { model: 'p/anthropic', max_tokens: 4_000, messages: [{ role: 'user', content: 'Hi' }], tools: [{ name: 'get', input_schema: { type: 'object' } }] });
    expect(completionOf(anthropic.charge)).toBeGreaterThanOrEqual(asText);

    const call1 = { candidates: [{ content: { role: 'model', parts: [{ functionCall: { name: 'get', args: ARGS } }] }, finishReason: 'STOP', index: 0 }] };
    answering((req, res) => (req.url?.includes('streamGenerateContent') ? events(res, sse([call1])) : json(res, call1)));
    for (const stream of [false, true]) {
      const gemini = await call('/chat/completions', chat('p/gemini', stream, { tools }));
      expect(gemini.status).toBe(200);
      expect(completionOf(gemini.charge), `stream: ${stream}`).toBeGreaterThanOrEqual(asText);
    }
  });
});

describe('a Responses answer that failed before any output', () => {
  const failed = { id: 'resp_1', object: 'response', status: 'failed', model: 'm', output: [], error: { code: 'server_error', message: 'The model failed' }, usage: null };

  it('releases its hold, streamed or plain: nothing was produced', async () => {
    answering((_req, res) => events(res, typed([{ type: 'response.created', sequence_number: 0, response: { ...failed, status: 'in_progress', error: null } }, { type: 'response.failed', sequence_number: 1, response: failed }])));
    const streamed = await call('/responses', { model: 'p/openai', input: 'Hi', stream: true });
    expect(streamed.status).toBe(200);
    expect(streamed.text).toContain('response.failed');
    expect(streamed.charge).toBeNull();

    answering((_req, res) => json(res, failed));
    const plain = await call('/responses', { model: 'p/openai', input: 'Hi' });
    expect(plain.charge).toBeNull();
  });

  it('tells its error without upstream key material, streamed or plain', async () => {
    const KEY = 'sk-counts-upstream-key-0123456789';
    const withKey = { ...failed, error: { code: 'server_error', message: `bad key ${KEY.slice(0, 14)}|${KEY.slice(14)} and \u0073k-counts` } };
    answering((_req, res) => events(res, typed([{ type: 'response.created', sequence_number: 0, response: { ...failed, status: 'in_progress', error: null } }, { type: 'response.failed', sequence_number: 1, response: withKey }])));
    const streamed = await call('/responses', { model: 'p/openai', input: 'Hi', stream: true });
    answering((_req, res) => json(res, withKey));
    const plain = await call('/responses', { model: 'p/openai', input: 'Hi' });
    for (const text of [streamed.text, plain.text]) {
      expect(text).toContain('bad key');
      for (const part of [KEY.slice(0, 14), KEY.slice(14)]) expect(text).not.toContain(part);
    }
  });

  it('is still billed what it produced when it failed part way', async () => {
    const partial = { ...failed, output: [{ id: 'msg_1', type: 'message', role: 'assistant', status: 'incomplete', content: [{ type: 'output_text', text: TEXT, annotations: [] }] }] };
    answering((_req, res) =>
      events(res, typed([
        { type: 'response.created', sequence_number: 0, response: { ...failed, status: 'in_progress', error: null } },
        { type: 'response.output_text.delta', sequence_number: 1, item_id: 'msg_1', output_index: 0, content_index: 0, delta: TEXT },
        { type: 'response.failed', sequence_number: 2, response: partial },
      ])),
    );
    const r = await call('/responses', { model: 'p/openai', input: 'Hi', stream: true });
    expect(completionOf(r.charge)).toBe(count(TEXT));
  });
});
