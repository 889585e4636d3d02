/**
 * The official clients, unchanged, meet an input guardrail over real HTTP: a redacted prompt is
 * answered as usual (the upstream never saw the PII), and a block surfaces as each SDK's own
 * 400 error: OpenAI's `BadRequestError` with `code: "content_filter"`, Anthropic's
 * `BadRequestError` with `invalid_request_error` on /v1/messages.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODEL, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gw: RunningGateway;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  up = await startTestUpstream();
  up.setBehavior({ kind: 'json', content: 'noted' });
  const setup = testConfig({ upstreamUrl: up.url });
  setup.options.guardrails = [
    { id: 'no-pii', kind: 'pii', action: 'redact', entities: ['email'] },
    { id: 'no-codenames', kind: 'regex', patterns: ['Nightfall'], action: 'block' },
  ];
  gw = await startGateway(setup.options);
  openai = new OpenAI({ baseURL: gw.baseURL, apiKey: setup.devKey, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: gw.origin, apiKey: setup.devKey, maxRetries: 0 });
});

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

describe('input guardrails through the official SDKs', () => {
  it('openai: a redacted prompt is answered; a blocked one is BadRequestError content_filter naming the guardrail', async () => {
    const answer = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'mail bo@example.com' }] });
    expect(answer.choices[0]?.message.content).toBe('noted');
    expect(up.requests.at(-1)!.body!.messages).toEqual([{ role: 'user', content: 'mail [REDACTED:EMAIL]' }]);

    const before = up.requests.length;
    const err = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Nightfall status?' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err).toMatchObject({ status: 400, code: 'content_filter', type: 'invalid_request_error', error: { metadata: { guardrail: 'no-codenames' } } });
    expect(up.requests.length).toBe(before);
  });

  it('anthropic: a block on /v1/messages is its BadRequestError, in its error shape', async () => {
    const before = up.requests.length;
    const err = await anthropic.messages.create({ model: MODEL, max_tokens: 20, messages: [{ role: 'user', content: 'Nightfall status?' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err).toMatchObject({ status: 400, error: { type: 'error', error: { type: 'invalid_request_error', message: 'The request was blocked by the guardrail "no-codenames".' } } });
    expect(up.requests.length).toBe(before);
  });
});
