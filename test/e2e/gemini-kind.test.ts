/**
 * A Gemini-kind upstream behind the gateway, with the official `openai` SDK in front: chat
 * (plain and streamed, tools and a tool result round trip) and Responses (plain and
 * streamed, text and a function tool) are translated to Google's generateContent wire format
 * and back; the bill is usageMetadata at list price, to the nano-USD; what Gemini cannot
 * carry is a 400 naming it that never reaches the upstream; the upstream gets its key as
 * `x-goog-api-key` and never the client's. The upstream is a loopback server written from
 * Google's documented format (test/helpers/gemini-upstream.ts), not from the translators.
 */
import OpenAI, { APIError, BadRequestError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatCost, chargesOf } from '../helpers/billing.js';
import { ACCOUNT, MODEL, UPSTREAM_MODEL, eventually, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { rememberResponseOwner } from '../../src/operations/response-owners.js';
import type { Services } from '../../src/services.js';
import { defaultAnswer, startGeminiUpstream, type GeminiUpstream } from '../helpers/gemini-upstream.js';

const GEMINI_KEY = 'AIzaSyTestKey-q8Zw2Kx9Lp4Rm7Tj3Vb';

/**
 * A model priced apart for cache reads. USD per token: prompt 0.000003, cache read
 * 0.0000003333, completion 0.000015 (pico-USD 3_000_000, 333_300, 15_000_000).
 */
const CACHED_MODEL = 'test/gemini-cached';
const CACHED_PRICING = { prompt: '0.000003', completion: '0.000015', cachedPrompt: '0.0000003333' };
/** Gemini reports 2001 prompt tokens of which 1501 cached, 277 candidate tokens and 500 thinking ones. */
const CACHED_USAGE = { promptTokenCount: 2001, cachedContentTokenCount: 1501, candidatesTokenCount: 277, thoughtsTokenCount: 500, totalTokenCount: 2778 };
/**
 *   uncached   (2001 - 1501) x  3_000_000 =  1_500_000_000 pico
 *   reads       1501 x   333_300          =    500_283_300
 *   completion  (277 + 500) x 15_000_000  = 11_655_000_000   (thinking is completion)
 *   total                                 = 13_655_283_300 pico -> rounded up: 13_655_284 nano
 */
const CACHED_GOLDEN_NANO = 13_655_284n;
const CACHED_UNITS = { kind: 'tokens', prompt: 2001, completion: 777, cachedPrompt: 1501, reasoning: 500 };

let gem: GeminiUpstream;
let gw: RunningGateway;
let devKey: string;

beforeAll(async () => {
  gem = await startGeminiUpstream(GEMINI_KEY);
  const setup = testConfig({
    walletUsd: 100,
    models: [{ id: CACHED_MODEL, type: 'text', upstream: 'test', upstreamModel: 'gemini-cached', pricing: CACHED_PRICING, contextLength: 32_000, maxOutputTokens: 4096 }],
  });
  setup.options.upstreams = { test: { kind: 'gemini', baseUrl: gem.url, apiKey: GEMINI_KEY, timeoutMs: 10_000 } };
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw?.close();
  await gem?.close();
});

const client = () => new OpenAI({ apiKey: devKey, baseURL: gw.baseURL, maxRetries: 0 });
const balance = async () => (await gw.stores.billing.wallet(ACCOUNT)).balance;

/** The charge of request `requestId` once it is settled, and what the wallet lost meanwhile. */
async function chargeOf(requestId: string | null) {
  await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).some((e) => e.id === requestId), `ledger entry ${requestId}`);
  await eventually(async () => (await gw.stores.billing.openHolds(ACCOUNT)) === 0, 'no open hold');
  return (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).find((e) => e.id === requestId)!;
}

const weatherTool = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
  },
};

describe('chat completions over a Gemini upstream', () => {
  it('plain: translated both ways, the key sent as x-goog-api-key, billed exactly from usageMetadata', async () => {
    gem.answer = () => ({
      parts: [{ text: 'Bonjour from Gemini.' }],
      finishReason: 'STOP',
      usageMetadata: { promptTokenCount: 40, cachedContentTokenCount: 16, candidatesTokenCount: 5, thoughtsTokenCount: 3, totalTokenCount: 48 },
    });
    const before = await balance();
    const { data, response } = await client()
      .chat.completions.create({
        model: MODEL,
        messages: [
          { role: 'system', content: 'Answer in French.' },
          { role: 'user', content: 'Hello' },
        ],
        max_tokens: 50,
        temperature: 0.2,
        top_p: 0.9,
        stop: ['END'],
      })
      .withResponse();
    expect(data.choices[0]!.message).toMatchObject({ role: 'assistant', content: 'Bonjour from Gemini.' });
    expect(data.choices[0]!.finish_reason).toBe('stop');
    expect(data.model).toBe(MODEL);
    expect(data.usage).toEqual({
      prompt_tokens: 40,
      completion_tokens: 8,
      total_tokens: 48,
      prompt_tokens_details: { cached_tokens: 16 },
      completion_tokens_details: { reasoning_tokens: 3 },
    });

    const sent = gem.requests.at(-1)!;
    expect(sent.path).toBe(`/v1beta/models/${UPSTREAM_MODEL}:generateContent`);
    expect(sent.body).toEqual({
      systemInstruction: { parts: [{ text: 'Answer in French.' }] },
      contents: [{ role: 'user', parts: [{ text: 'Hello' }] }],
      generationConfig: { maxOutputTokens: 50, temperature: 0.2, topP: 0.9, stopSequences: ['END'] },
    });
    expect(sent.headers['x-goog-api-key']).toBe(GEMINI_KEY);
    expect(sent.headers.authorization).toBeUndefined();
    expect(JSON.stringify(sent.headers)).not.toContain(devKey);

    // 40 prompt tokens (cached ones included) and 5 + 3 thinking completion tokens at list price.
    const entry = await chargeOf(response.headers.get('x-request-id'));
    expect(entry.cost).toBe(chatCost(40, 8));
    expect(before - (await balance())).toBe(chatCost(40, 8));
  });

  it('streamed: chat chunks with a usage chunk and [DONE], billed exactly from the final usageMetadata', async () => {
    gem.answer = () => ({
      parts: [{ text: 'Streaming through Gemini works.' }],
      finishReason: 'STOP',
      usageMetadata: { promptTokenCount: 33, cachedContentTokenCount: 8, candidatesTokenCount: 7, totalTokenCount: 40 },
    });
    const before = await balance();
    const { data: stream, response } = await client()
      .chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Stream please' }], stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let text = '';
    let usage: unknown = null;
    const finishes: Array<string | null> = [];
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      for (const c of chunk.choices) {
        text += c.delta.content ?? '';
        finishes.push(c.finish_reason);
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(chunks).toBeGreaterThan(3);
    expect(text).toBe('Streaming through Gemini works.');
    expect(finishes.at(-1)).toBe('stop');
    expect(usage).toEqual({
      prompt_tokens: 33,
      completion_tokens: 7,
      total_tokens: 40,
      prompt_tokens_details: { cached_tokens: 8 },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
    expect(gem.requests.at(-1)!.path).toBe(`/v1beta/models/${UPSTREAM_MODEL}:streamGenerateContent?alt=sse`);
    const entry = await chargeOf(response.headers.get('x-request-id'));
    expect(entry.cost).toBe(chatCost(33, 7));
    expect(before - (await balance())).toBe(chatCost(33, 7));
  });

  it('a stream the client did not ask usage for still bills it, and hides the usage chunk', async () => {
    gem.answer = () => ({ parts: [{ text: 'No usage shown.' }], finishReason: 'STOP', usageMetadata: { promptTokenCount: 12, candidatesTokenCount: 4 } });
    const { data: stream, response } = await client()
      .chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], stream: true })
      .withResponse();
    let sawUsage = false;
    for await (const chunk of stream) if (chunk.usage) sawUsage = true;
    expect(sawUsage).toBe(false);
    expect((await chargeOf(response.headers.get('x-request-id'))).cost).toBe(chatCost(12, 4));
  });

  it('tools: a function call comes back as tool_calls, and the tool result goes back as a functionResponse with its signature', async () => {
    gem.answer = defaultAnswer;
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const first = await client().chat.completions.create({ model: MODEL, messages, tools: [weatherTool], tool_choice: 'required' });
    const call = first.choices[0]!.message.tool_calls![0]!;
    expect(first.choices[0]!.finish_reason).toBe('tool_calls');
    expect(call.type).toBe('function');
    if (call.type !== 'function') throw new Error('a function call');
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Paris' });
    expect(call.id).toMatch(/^call_/);
    const declared = gem.requests.at(-1)!.body;
    expect(declared.tools).toEqual([
      { functionDeclarations: [{ name: 'get_weather', description: 'The weather in a city', parametersJsonSchema: weatherTool.function.parameters }] },
    ]);
    expect(declared.toolConfig).toEqual({ functionCallingConfig: { mode: 'ANY' } });

    messages.push(first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: '{"temp_c":21}' });
    const second = await client().chat.completions.create({ model: MODEL, messages, tools: [weatherTool] });
    expect(second.choices[0]!.message.content).toBe('The tool said {"temp_c":21}');
    expect(second.choices[0]!.finish_reason).toBe('stop');
    const contents = gem.requests.at(-1)!.body.contents;
    expect(contents).toEqual([
      { role: 'user', parts: [{ text: 'Weather in Paris?' }] },
      { role: 'model', parts: [{ functionCall: { name: 'get_weather', args: { city: 'Paris' } }, thoughtSignature: 'c2lnbmVkLWJ5LWdlbWluaS8rPQ==' }] },
      { role: 'user', parts: [{ functionResponse: { name: 'get_weather', response: { temp_c: 21 } } }] },
    ]);
  });

  it('tools, streamed: the call arrives whole as a tool_calls delta, its id carrying the signature', async () => {
    gem.answer = defaultAnswer;
    const stream = await client().chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Weather?' }],
      tools: [weatherTool],
      stream: true,
    });
    const calls: Array<{ id?: string; name?: string; args: string }> = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        for (const d of c.delta.tool_calls ?? []) {
          calls[d.index] ??= { args: '' };
          if (d.id) calls[d.index]!.id = d.id;
          if (d.function?.name) calls[d.index]!.name = d.function.name;
          calls[d.index]!.args += d.function?.arguments ?? '';
        }
        finish = c.finish_reason ?? finish;
      }
    }
    expect(finish).toBe('tool_calls');
    expect(calls).toHaveLength(1);
    expect(calls[0]!.name).toBe('get_weather');
    expect(JSON.parse(calls[0]!.args)).toEqual({ city: 'Paris' });
    expect(calls[0]!.id).toMatch(/^call_[0-9a-f]{24}_sig_/);
  });

  it('an unsupported parameter is 400 naming it and never reaches the upstream, nothing charged', async () => {
    const requests = gem.requests.length;
    const before = await balance();
    const entries = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;
    for (const [extra, param] of [
      [{ logprobs: true }, 'logprobs'],
      [{ parallel_tool_calls: false, tools: [weatherTool] }, 'parallel_tool_calls'],
      [{ audio: { voice: 'alloy', format: 'mp3' } }, 'audio'],
      [{ logit_bias: { '50256': -100 } }, 'logit_bias'],
    ] as const) {
      const err = await client()
        .chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], ...(extra as object) })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BadRequestError);
      expect((err as BadRequestError).param).toBe(param);
      expect((err as BadRequestError).message).toContain('gemini');
    }
    const image = await client()
      .chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/cat' } }] }],
      })
      .catch((e: unknown) => e);
    expect((image as BadRequestError).param).toBe('messages[0].content[0].image_url.url');
    expect(gem.requests.length).toBe(requests);
    await eventually(async () => (await gw.stores.billing.openHolds(ACCOUNT)) === 0, 'no open hold');
    expect(await balance()).toBe(before);
    expect((await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length).toBe(entries);
  });

  it('images: a data URL goes as inlineData, an image URL as fileData', async () => {
    gem.answer = () => ({ parts: [{ text: 'A cat.' }], finishReason: 'STOP', usageMetadata: { promptTokenCount: 300, candidatesTokenCount: 2 } });
    await client().chat.completions.create({
      model: MODEL,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is this?' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
            { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
          ],
        },
      ],
    });
    expect(gem.requests.at(-1)!.body.contents).toEqual([
      {
        role: 'user',
        parts: [
          { text: 'What is this?' },
          { inlineData: { mimeType: 'image/png', data: 'iVBORw0KGgo=' } },
          { fileData: { mimeType: 'image/jpeg', fileUri: 'https://example.com/cat.jpg' } },
        ],
      },
    ]);
  });

  it("Google's error shape comes out as the gateway's upstream error, nothing charged", async () => {
    gem.answer = () => ({ error: { code: 400, message: 'Request contains an invalid argument.', status: 'INVALID_ARGUMENT' } });
    const before = await balance();
    const err = await client()
      .chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BadRequestError);
    expect((err as BadRequestError).message).toContain('Request contains an invalid argument.');
    await eventually(async () => (await gw.stores.billing.openHolds(ACCOUNT)) === 0, 'no open hold');
    expect(await balance()).toBe(before);
  });

  it('a stream Gemini breaks off, or ends with an error event, ends with an error after what came, never looks finished', async () => {
    const event = (e: unknown) => `data: ${JSON.stringify(e)}\r\n\r\n`;
    const partial = event({ candidates: [{ content: { role: 'model', parts: [{ text: 'Half an ans' }] }, index: 0 }], responseId: 'cut' });
    const failed = partial + event({ error: { code: 500, message: 'Internal error encountered.', status: 'INTERNAL' } });
    for (const [sse, message] of [
      [partial, 'ended before it was complete'],
      [failed, 'Internal error encountered.'],
    ] as const) {
      gem.answer = () => ({ sse });
      const stream = await client().chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], stream: true });
      let text = '';
      const err = await (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      })().catch((e: unknown) => e);
      expect(text).toBe('Half an ans');
      expect(err).toBeInstanceOf(APIError);
      expect((err as APIError).message).toContain(message);
    }
  });
});

describe('Responses over a Gemini upstream', () => {
  it('plain: instructions and input translated, a Response object back, billed exactly', async () => {
    gem.answer = () => ({
      parts: [{ text: 'Short answer.' }],
      finishReason: 'STOP',
      usageMetadata: { promptTokenCount: 25, cachedContentTokenCount: 10, candidatesTokenCount: 3, thoughtsTokenCount: 2 },
    });
    const before = await balance();
    const { data, response } = await client()
      .responses.create({ model: MODEL, instructions: 'Be brief.', input: 'Say something', max_output_tokens: 64 })
      .withResponse();
    expect(data.object).toBe('response');
    expect(data.status).toBe('completed');
    expect(data.output_text).toBe('Short answer.');
    expect(data.usage).toMatchObject({
      input_tokens: 25,
      input_tokens_details: { cached_tokens: 10 },
      output_tokens: 5,
      output_tokens_details: { reasoning_tokens: 2 },
      total_tokens: 30,
    });
    expect(gem.requests.at(-1)!.body).toEqual({
      systemInstruction: { parts: [{ text: 'Be brief.' }] },
      contents: [{ role: 'user', parts: [{ text: 'Say something' }] }],
      generationConfig: { maxOutputTokens: 64 },
    });
    expect((await chargeOf(response.headers.get('x-request-id'))).cost).toBe(chatCost(25, 5));
    expect(before - (await balance())).toBe(chatCost(25, 5));
  });

  it('streamed: typed events end with response.completed carrying the usage, billed exactly', async () => {
    gem.answer = () => ({ parts: [{ text: 'Streamed response text.' }], finishReason: 'STOP', usageMetadata: { promptTokenCount: 18, candidatesTokenCount: 6 } });
    const before = await balance();
    const { data: stream, response } = await client().responses.create({ model: MODEL, input: 'Stream it', stream: true }).withResponse();
    const types: string[] = [];
    let text = '';
    let completed: OpenAI.Responses.Response | null = null;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completed = event.response;
    }
    expect(text).toBe('Streamed response text.');
    expect(types[0]).toBe('response.created');
    expect(types).toContain('response.output_item.added');
    expect(types).toContain('response.output_text.done');
    expect(types.at(-1)).toBe('response.completed');
    expect(completed!.usage).toMatchObject({ input_tokens: 18, output_tokens: 6, total_tokens: 24 });
    expect(completed!.output[0]).toMatchObject({ type: 'message', content: [{ type: 'output_text', text: 'Streamed response text.' }] });
    expect((await chargeOf(response.headers.get('x-request-id'))).cost).toBe(chatCost(18, 6));
    expect(before - (await balance())).toBe(chatCost(18, 6));
  });

  const responsesTool = {
    type: 'function' as const,
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: weatherTool.function.parameters,
    strict: true,
  };

  it('a function tool: the call comes back as a function_call item, and its output goes back to Gemini', async () => {
    gem.answer = defaultAnswer;
    const first = await client().responses.create({ model: MODEL, input: 'Weather in Paris?', tools: [responsesTool] });
    const call = first.output.find((o) => o.type === 'function_call');
    expect(call).toMatchObject({ type: 'function_call', name: 'get_weather' });
    if (call?.type !== 'function_call') throw new Error('a function call');
    expect(JSON.parse(call.arguments)).toEqual({ city: 'Paris' });
    const second = await client().responses.create({
      model: MODEL,
      input: [
        { role: 'user', content: 'Weather in Paris?' },
        { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
        { type: 'function_call_output', call_id: call.call_id, output: 'sunny' },
      ],
      tools: [responsesTool],
    });
    expect(second.output_text).toBe('The tool said {"output":"sunny"}');
    expect(gem.requests.at(-1)!.body.contents).toEqual([
      { role: 'user', parts: [{ text: 'Weather in Paris?' }] },
      { role: 'model', parts: [{ functionCall: { name: 'get_weather', args: { city: 'Paris' } }, thoughtSignature: 'c2lnbmVkLWJ5LWdlbWluaS8rPQ==' }] },
      { role: 'user', parts: [{ functionResponse: { name: 'get_weather', response: { output: 'sunny' } } }] },
    ]);
  });

  it('a function tool, streamed: output_item.added, arguments delta and done, then response.completed', async () => {
    gem.answer = defaultAnswer;
    const stream = await client().responses.create({ model: MODEL, input: 'Weather?', tools: [responsesTool], stream: true });
    const types: string[] = [];
    let args = '';
    let done: string | null = null;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.function_call_arguments.delta') args += event.delta;
      if (event.type === 'response.function_call_arguments.done') done = event.arguments;
    }
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(JSON.parse(args)).toEqual({ city: 'Paris' });
    expect(done).toBe(args);
  });

  it('what Responses over Gemini cannot carry is 400 naming it, before any upstream call', async () => {
    const requests = gem.requests.length;
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ reasoning: { effort: 'low', summary: 'auto' } }, 'reasoning.summary'],
      [{ store: true }, 'store'],
      [{ input: [{ type: 'item_reference', id: 'msg_1' }] }, 'input[0].type'],
      [{ top_logprobs: 2 }, 'top_logprobs'],
    ];
    // The item referenced is the account's (given it in an answer through the gateway), so the
    // owner check passes and what is judged is whether Gemini can carry it.
    await rememberResponseOwner({ stores: gw.stores } as unknown as Services, '', ACCOUNT, ['msg_1']);
    for (const [extra, param] of cases) {
      const err = await client()
        .responses.create({ model: MODEL, input: 'Hi', ...extra } as OpenAI.Responses.ResponseCreateParamsNonStreaming)
        .catch((e: unknown) => e);
      expect(err, param).toBeInstanceOf(BadRequestError);
      expect((err as BadRequestError).param).toBe(param);
    }
    expect(gem.requests.length).toBe(requests);
  });
});

describe('cached and thinking tokens from usageMetadata, golden to the nano-USD', () => {
  const cases = [
    ['chat', false],
    ['chat', true],
    ['responses', false],
    ['responses', true],
  ] as const;
  it.each(cases)('%s, streamed: %s', async (api, stream) => {
    gem.answer = () => ({ parts: [{ text: 'Cached answer.' }], finishReason: 'STOP', usageMetadata: CACHED_USAGE });
    const before = await balance();
    let requestId: string | null;
    if (api === 'chat') {
      const body = { model: CACHED_MODEL, messages: [{ role: 'user' as const, content: 'Hi' }] };
      if (stream) {
        const { data, response } = await client().chat.completions.create({ ...body, stream: true }).withResponse();
        for await (const _ of data);
        requestId = response.headers.get('x-request-id');
      } else requestId = (await client().chat.completions.create(body).withResponse()).response.headers.get('x-request-id');
    } else if (stream) {
      const { data, response } = await client().responses.create({ model: CACHED_MODEL, input: 'Hi', stream: true }).withResponse();
      for await (const _ of data);
      requestId = response.headers.get('x-request-id');
    } else requestId = (await client().responses.create({ model: CACHED_MODEL, input: 'Hi' }).withResponse()).response.headers.get('x-request-id');
    const entry = await chargeOf(requestId);
    expect(entry.units).toEqual(CACHED_UNITS);
    expect(entry.cost).toBe(CACHED_GOLDEN_NANO);
    expect(before - (await balance())).toBe(CACHED_GOLDEN_NANO);
  });
});

describe("the simulator's gemini kind", () => {
  let sim: RunningGateway;
  let key: string;
  beforeAll(async () => {
    const setup = testConfig({ walletUsd: 100 });
    setup.options.upstreams = { test: { simulate: true, kind: 'gemini', chunkDelayMs: 0, imageDelayMs: 0, videoDurationMs: 0 } };
    key = setup.devKey;
    sim = await startGateway(setup.options);
  });
  afterAll(async () => {
    await sim?.close();
  });
  const simClient = () => new OpenAI({ apiKey: key, baseURL: sim.baseURL, maxRetries: 0 });
  async function simCharge(requestId: string | null) {
    await eventually(async () => (await chargesOf(sim.gateway.admin.ledger(ACCOUNT))).some((e) => e.id === requestId), `ledger entry ${requestId}`);
    return (await chargesOf(sim.gateway.admin.ledger(ACCOUNT))).find((e) => e.id === requestId)!;
  }

  it('answers chat plain and streamed in the Gemini wire format, a repeated prompt start reporting cached tokens, billed from them', async () => {
    // A system instruction long enough for the simulated implicit cache (1,024 tokens and up).
    const system = { role: 'system' as const, content: 'The quick brown fox jumps over the lazy dog. '.repeat(120) };
    const first = await simClient()
      .chat.completions.create({ model: MODEL, messages: [system, { role: 'user', content: 'Tell me about caching' }] })
      .withResponse();
    expect(first.data.choices[0]!.message.content).toContain('as a Gemini model would');
    expect(first.data.usage!.prompt_tokens_details?.cached_tokens ?? 0).toBe(0);
    const u1 = first.data.usage!;
    expect((await simCharge(first.response.headers.get('x-request-id'))).cost).toBe(chatCost(u1.prompt_tokens, u1.completion_tokens));

    // The same start with another question: the simulated implicit cache reports the start read.
    const { data: stream, response } = await simClient()
      .chat.completions.create({ model: MODEL, messages: [system, { role: 'user', content: 'And more?' }], stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      usage = chunk.usage ?? usage;
    }
    expect(text).toContain('And more?');
    const cached = usage!.prompt_tokens_details!.cached_tokens!;
    expect(cached).toBeGreaterThanOrEqual(1024);
    expect(cached % 128).toBe(0);
    expect(cached).toBeLessThan(usage!.prompt_tokens);
    // MODEL has no cached price: cache reads cost the prompt price.
    expect((await simCharge(response.headers.get('x-request-id'))).cost).toBe(chatCost(usage!.prompt_tokens, usage!.completion_tokens));
  });

  it('answers Responses too', async () => {
    const res = await simClient().responses.create({ model: MODEL, input: 'Hello there' });
    expect(res.output_text).toContain('Hello there');
    expect(res.usage!.input_tokens).toBeGreaterThan(0);
  });
});
