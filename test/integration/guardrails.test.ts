/**
 * Input guardrails on a real gateway over loopback upstreams that record what they received:
 * PII in a prompt never reaches the upstream on any text or media endpoint, speech and a
 * fallback target included (the recorded body holds the markers instead), a block refuses before any upstream call and bills nothing (in
 * Anthropic's shape on /v1/messages), the hold is computed on the redacted body, and accounts
 * and models select which guardrails run.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Gateway } from '../../src/gateway.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, MODEL, makeGateway, testConfig, testKey } from '../helpers/gateway.js';
import { AUDIO, IMAGE, VIDEO, mediaModels, speechCost } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const EMBED = 'test/embed';
const OTHER = 'test/other-chat';
const UNCOVERED = 'acct_uncovered';
const SMALL = 'acct_small';
const FALLBACK = 'test/fallback-chat';

const EMAIL = 'jane.doe@example.com';
const CARD = '4111 1111 1111 1111';
const IBAN = 'DE89 3704 0044 0532 0130 00';
const SSN = '123-45-6789';
const PHONE = '+1 415 555 0100';
const PII = [EMAIL, CARD, IBAN, SSN, PHONE];
const SENTENCE = `Write to ${EMAIL}, card ${CARD}, IBAN ${IBAN}, SSN ${SSN}, phone ${PHONE}.`;
const REDACTED = 'Write to [REDACTED:EMAIL], card [REDACTED:CREDIT_CARD], IBAN [REDACTED:IBAN], SSN [REDACTED:SSN], phone [REDACTED:PHONE].';

let up: TestUpstream;
/** The first target of FALLBACK: it fails, so the call falls back to "test". */
let first: TestUpstream;
let media: MediaUpstream;
let gateway: Gateway;
let stores: Stores;
const keys = { dev: '', uncovered: testKey(), small: testKey() };

beforeAll(async () => {
  up = await startTestUpstream();
  first = await startTestUpstream();
  first.setBehavior({ kind: 'error', status: 500 });
  media = await startMediaUpstream();
  const setup = testConfig({
    upstreamUrl: up.url,
    models: [
      { id: EMBED, type: 'text', upstream: 'test', embedding: true, pricing: { prompt: '0.0000001', completion: '0' }, contextLength: 8_000 },
      { id: OTHER, type: 'text', upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000002' }, contextLength: 32_000 },
      {
        id: FALLBACK,
        type: 'text',
        pricing: { prompt: '0.000001', completion: '0.000002' },
        targets: [
          { upstream: 'first', upstreamModel: 'first-model', priority: 0 },
          { upstream: 'test', upstreamModel: 'second-model', priority: 1 },
        ],
      },
      ...mediaModels('media'),
    ],
    // SMALL can afford a short prompt's hold, not one of 20 000 bytes.
    accounts: [{ id: UNCOVERED, walletUsd: 10 }, { id: SMALL, walletUsd: '0.001' }],
    keys: [
      { key: keys.uncovered, account: UNCOVERED },
      { key: keys.small, account: SMALL },
    ],
  });
  keys.dev = setup.devKey;
  setup.options.upstreams = {
    ...setup.options.upstreams,
    media: { baseUrl: media.url, apiKey: 'media-upstream-key-0', timeoutMs: 10_000 },
    first: { baseUrl: first.url, timeoutMs: 10_000 },
  };
  setup.options.guardrails = [
    { id: 'pii', kind: 'pii', action: 'redact', accounts: [ACCOUNT, SMALL] },
    { id: 'codenames', kind: 'regex', patterns: ['project\\s+nightfall'], ignoreCase: true, action: 'block', models: ['test/*'] },
    { id: 'other-model-only', kind: 'regex', patterns: ['internal-[0-9]+'], action: 'redact', models: [OTHER] },
    { id: 'filler', kind: 'regex', patterns: ['Z{100,}'], action: 'redact', accounts: [SMALL] },
  ];
  ({ gateway, stores } = await makeGateway(setup.options));
});

afterAll(async () => {
  await gateway?.dispose();
  await stores?.close();
  await up?.close();
  await first?.close();
  await media?.close();
});

beforeEach(() => {
  up.requests.length = 0;
  up.setBehavior({ kind: 'json', content: 'ok' });
});

const post = async (path: string, body: unknown, key = keys.dev): Promise<Response> =>
  gateway.fetch(
    new Request(`http://gw/v1${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify(body),
    }),
  );

/** What the last upstream request carried: none of the PII, and the sentence's markers. */
function expectRedacted(raw: string, markers = REDACTED) {
  for (const value of PII) expect(raw).not.toContain(value);
  expect(raw).toContain(JSON.stringify(markers).slice(1, -1));
}

describe('PII never reaches the upstream', () => {
  it('chat: content strings and text parts, plain and streamed', async () => {
    for (const stream of [false, true]) {
      up.requests.length = 0;
      if (stream) up.setBehavior({ kind: 'stream', chunks: ['ok'] });
      const res = await post('/chat/completions', {
        model: MODEL,
        stream,
        messages: [
          { role: 'system', content: SENTENCE },
          { role: 'user', content: [{ type: 'text', text: SENTENCE }] },
        ],
      });
      expect(res.status).toBe(200);
      await res.text();
      const messages = up.requests[0]!.body!.messages as Array<{ content: unknown }>;
      expect(messages[0]!.content).toBe(REDACTED);
      expect(messages[1]!.content).toEqual([{ type: 'text', text: REDACTED }]);
      expectRedacted(up.requests[0]!.raw);
    }
  });

  it('a text split over parts is read as the model reads it, joined: a value across two parts is redacted', async () => {
    const cut = SENTENCE.indexOf(CARD) + 7;
    const parts = [
      { type: 'text', text: SENTENCE.slice(0, cut) },
      { type: 'text', text: SENTENCE.slice(cut) },
    ];
    for (const [path, body] of [
      ['/chat/completions', { model: MODEL, messages: [{ role: 'user', content: parts }] }],
      ['/responses', { model: MODEL, input: [{ role: 'user', content: parts.map((p) => ({ ...p, type: 'input_text' })) }] }],
    ] as const) {
      up.requests.length = 0;
      if (path === '/responses') up.setBehavior({ kind: 'response' });
      const res = await post(path, body);
      expect(res.status, path).toBe(200);
      await res.text();
      expectRedacted(up.requests[0]!.raw);
      up.setBehavior({ kind: 'json', content: 'ok' });
    }
  });

  it('legacy completions: the prompt', async () => {
    up.setBehavior({ kind: 'completion' });
    const res = await post('/completions', { model: MODEL, prompt: SENTENCE, max_tokens: 20 });
    expect(res.status).toBe(200);
    expect(up.requests[0]!.body!.prompt).toBe(REDACTED);
  });

  it('Responses: instructions and input items', async () => {
    up.setBehavior({ kind: 'response', chunks: ['ok'] });
    const res = await post('/responses', {
      model: MODEL,
      instructions: SENTENCE,
      input: [
        { role: 'user', content: [{ type: 'input_text', text: SENTENCE }] },
        { type: 'function_call', call_id: 'call_1', name: 'lookup', arguments: '{}' },
        { type: 'function_call_output', call_id: 'call_1', output: SENTENCE },
      ],
      max_output_tokens: 20,
    });
    expect(res.status).toBe(200);
    const body = up.requests[0]!.body!;
    expect(body.instructions).toBe(REDACTED);
    expect(body.input).toEqual([
      { role: 'user', content: [{ type: 'input_text', text: REDACTED }] },
      { type: 'function_call', call_id: 'call_1', name: 'lookup', arguments: '{}' },
      { type: 'function_call_output', call_id: 'call_1', output: REDACTED },
    ]);
    expectRedacted(up.requests[0]!.raw);
  });

  it('Anthropic Messages: system and content blocks (translated for an OpenAI upstream)', async () => {
    const res = await post('/messages', {
      model: MODEL,
      max_tokens: 50,
      system: SENTENCE,
      messages: [{ role: 'user', content: [{ type: 'text', text: SENTENCE }] }],
    });
    expect(res.status).toBe(200);
    expect(up.requests).toHaveLength(1);
    expectRedacted(up.requests[0]!.raw);
  });

  it('text the model reads outside content: tool call arguments and inputs, a text document, a prediction, a suffix, prompt variables', async () => {
    const args = JSON.stringify({ note: SENTENCE });
    // The same arguments with every character of the email escaped: read decoded, still found.
    const hidden = [...EMAIL].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
    const escaped = JSON.stringify({ note: SENTENCE }).replace(EMAIL, hidden);
    expect(escaped).not.toContain(EMAIL);
    // A number past double precision, a key repeated (the parse keeps the last), the email as a
    // key: the strings are rewritten where they stand, the rest of the text as it came.
    const tricky = `{"order_id": 12345678901234567890, "to":"${hidden}", "to":"x", "${hidden}": 1}`;
    const chat = await post('/chat/completions', {
      model: MODEL,
      messages: [
        { role: 'user', content: 'Send it.' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'send', arguments: args } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'sent' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_2', type: 'function', function: { name: 'send', arguments: escaped } }] },
        { role: 'tool', tool_call_id: 'call_2', content: 'sent' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_3', type: 'function', function: { name: 'send', arguments: tricky } }] },
        { role: 'tool', tool_call_id: 'call_3', content: 'sent' },
      ],
      prediction: { type: 'content', content: SENTENCE },
    });
    expect(chat.status).toBe(200);
    const sent = up.requests[0]!.body!.messages as Array<{ tool_calls?: Array<{ function: { name: string; arguments: string } }> }>;
    // Still the JSON the model wrote, with the PII redacted inside it.
    expect(JSON.parse(sent[1]!.tool_calls![0]!.function.arguments)).toEqual({ note: REDACTED });
    expect(sent[1]!.tool_calls![0]!.function.name).toBe('send');
    expect(JSON.parse(sent[3]!.tool_calls![0]!.function.arguments)).toEqual({ note: REDACTED });
    expect(sent[5]!.tool_calls![0]!.function.arguments).toBe('{"order_id": 12345678901234567890, "to":"[REDACTED:EMAIL]", "to":"x", "[REDACTED:EMAIL]": 1}');
    expect(up.requests[0]!.body!.prediction).toEqual({ type: 'content', content: REDACTED });
    expectRedacted(up.requests[0]!.raw);

    up.requests.length = 0;
    up.setBehavior({ kind: 'response', chunks: ['ok'] });
    const responses = await post('/responses', {
      model: MODEL,
      input: [{ type: 'function_call', call_id: 'call_2', name: 'send', arguments: args }],
      prompt: { id: 'pmpt_1', variables: { customer: SENTENCE } },
      max_output_tokens: 20,
    });
    expect(responses.status).toBe(200);
    const body = up.requests[0]!.body!;
    expect(JSON.parse((body.input as Array<{ arguments: string }>)[0]!.arguments)).toEqual({ note: REDACTED });
    expect(body.prompt).toEqual({ id: 'pmpt_1', variables: { customer: REDACTED } });
    expectRedacted(up.requests[0]!.raw);

    up.requests.length = 0;
    up.setBehavior({ kind: 'json', content: 'ok' });
    const messages = await post('/messages', {
      model: MODEL,
      max_tokens: 50,
      messages: [
        { role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: SENTENCE } }, { type: 'text', text: 'Summarize.' }] },
        // Nested deeper than any message shape: every string of a tool's input is read.
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'send', input: { note: SENTENCE, to: [SENTENCE], a: { b: { c: { d: { e: { f: { g: { h: SENTENCE } } } } } } } } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sent' }] },
      ],
    });
    expect(messages.status).toBe(200);
    for (const value of PII) expect(up.requests[0]!.raw).not.toContain(value);

    up.requests.length = 0;
    up.setBehavior({ kind: 'completion' });
    const completion = await post('/completions', { model: MODEL, prompt: 'Say', suffix: SENTENCE, max_tokens: 20 });
    expect(completion.status).toBe(200);
    expect(up.requests[0]!.body!.suffix).toBe(REDACTED);
  });

  it('embeddings: every input string', async () => {
    up.setBehavior({ kind: 'embeddings' });
    const res = await post('/embeddings', { model: EMBED, input: [SENTENCE, `only ${EMAIL}`] });
    expect(res.status).toBe(200);
    expect(up.requests[0]!.body!.input).toEqual([REDACTED, 'only [REDACTED:EMAIL]']);
  });

  it('an image prompt and a video prompt', async () => {
    const image = await post('/images/generations', { model: IMAGE, prompt: SENTENCE, size: '1024x1024' });
    expect(image.status).toBe(200);
    const sent = media.imageRequests().at(-1)!;
    expect(sent.fields.prompt).toBe(REDACTED);
    expectRedacted(sent.raw.toString('utf8'));

    const video = await post('/videos', { model: VIDEO, prompt: SENTENCE, seconds: 2 });
    expect(video.status).toBe(202);
    const job = media.requests.filter((r) => r.path.endsWith('/videos') && r.method === 'POST').at(-1)!;
    expect(job.fields.prompt).toBe(REDACTED);
    expectRedacted(job.raw.toString('utf8'));
    // The job the gateway keeps (and shows) holds what was rendered, not the PII taken out.
    expect(((await video.json()) as { prompt: string }).prompt).toBe(REDACTED);
  });

  it('speech: the input spoken is the redacted text, and it is priced as such', async () => {
    const res = await post('/audio/speech', { model: AUDIO, voice: 'alloy', input: SENTENCE });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const sent = media.requests.filter((r) => r.path.endsWith('/audio/speech')).at(-1)!;
    expect(sent.fields.input).toBe(REDACTED);
    const charge = (await stores.billing.ledger(ACCOUNT)).find((e) => e.id === res.headers.get('x-request-id'));
    expect(charge?.cost).toBe(speechCost(REDACTED));
  });

  it('every target of a model gets the redacted body: the one that failed and the fallback that answered', async () => {
    first.requests.length = 0;
    const res = await post('/chat/completions', { model: FALLBACK, messages: [{ role: 'user', content: SENTENCE }] });
    expect(res.status).toBe(200);
    expect(first.requests.length).toBeGreaterThan(0);
    for (const rec of [...first.requests, ...up.requests]) expect(rec.body!.messages).toEqual([{ role: 'user', content: REDACTED }]);
    expect(up.requests.map((r) => r.body!.model)).toEqual(['second-model']);
  });

  it('the hold is computed on the redacted body: a prompt the wallet could not hold for is affordable once redacted', async () => {
    const res = await post('/chat/completions', { model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: `note ${'Z'.repeat(20_000)} end` }] }, keys.small);
    expect(res.status).toBe(200);
    expect(up.requests[0]!.body!.messages).toEqual([{ role: 'user', content: 'note [REDACTED] end' }]);
  });
});

describe('a block', () => {
  const blocked = { role: 'user', content: [{ type: 'text', text: 'Status of Project  Nightfall?' }] };

  async function expectNothingBilled(run: () => Promise<Response>) {
    const wallet = await stores.billing.wallet(ACCOUNT);
    const ledger = (await stores.billing.ledger(ACCOUNT)).length;
    const holds = await stores.billing.openHolds(ACCOUNT);
    const res = await run();
    expect(up.requests).toHaveLength(0);
    expect(media.requests.filter((r) => r.method === 'POST')).toHaveLength(mediaPosts);
    expect(await stores.billing.wallet(ACCOUNT)).toEqual(wallet);
    expect((await stores.billing.ledger(ACCOUNT)).length).toBe(ledger);
    expect(await stores.billing.openHolds(ACCOUNT)).toBe(holds);
    return res;
  }
  let mediaPosts = 0;
  beforeEach(() => {
    mediaPosts = media.requests.filter((r) => r.method === 'POST').length;
  });

  it('is 400 content_filter naming the guardrail, with no upstream call and nothing billed', async () => {
    const cases: Array<[string, unknown]> = [
      ['/chat/completions', { model: MODEL, messages: [blocked] }],
      ['/chat/completions', { model: MODEL, stream: true, messages: [blocked] }],
      // Split over two parts, or over a system's blocks: the model reads one text.
      ['/chat/completions', { model: MODEL, messages: [{ role: 'user', content: [{ type: 'text', text: 'tell me about project' }, { type: 'text', text: ' nightfall' }] }] }],
      ['/chat/completions', { model: MODEL, messages: [{ role: 'user', content: [{ type: 'text', text: 'tell me about project' }, { type: 'text', text: 'nightfall' }] }] }],
      ['/completions', { model: MODEL, prompt: ['fine', 'project nightfall'] }],
      ['/responses', { model: MODEL, input: 'PROJECT NIGHTFALL' }],
      ['/embeddings', { model: EMBED, input: 'project nightfall' }],
      ['/images/generations', { model: IMAGE, prompt: 'a poster for Project Nightfall' }],
      ['/videos', { model: VIDEO, prompt: 'a trailer for Project Nightfall', seconds: 2 }],
    ];
    for (const [path, body] of cases) {
      const res = await expectNothingBilled(() => post(path, body));
      expect(res.status, path).toBe(400);
      expect(await res.json()).toEqual({
        error: { message: 'The request was blocked by the guardrail "codenames".', type: 'invalid_request_error', code: 'content_filter', param: null, metadata: { guardrail: 'codenames' } },
      });
    }
  });

  it('on /v1/messages is in the Messages error shape', async () => {
    const res = await expectNothingBilled(() => post('/messages', { model: MODEL, max_tokens: 50, system: 'Project Nightfall', messages: [{ role: 'user', content: 'hi' }] }));
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: 'The request was blocked by the guardrail "codenames".' } });
  });
});

describe('accounts and models select the guardrails', () => {
  it('an account a guardrail does not name sends its prompt as it is', async () => {
    const res = await post('/chat/completions', { model: MODEL, messages: [{ role: 'user', content: SENTENCE }] }, keys.uncovered);
    expect(res.status).toBe(200);
    expect(up.requests[0]!.body!.messages).toEqual([{ role: 'user', content: SENTENCE }]);
  });

  it('a guardrail runs only on the models it names', async () => {
    const prompt = 'ticket internal-4411';
    expect((await post('/chat/completions', { model: MODEL, messages: [{ role: 'user', content: prompt }] })).status).toBe(200);
    expect((await post('/chat/completions', { model: OTHER, messages: [{ role: 'user', content: prompt }] })).status).toBe(200);
    expect(up.requests.map((r) => (r.body!.messages as Array<{ content: string }>)[0]!.content)).toEqual([prompt, 'ticket [REDACTED]']);
  });
});
