/**
 * The official Anthropic SDK, unchanged, against the gateway (`baseURL` = the gateway), served
 * by an OpenAI-kind upstream (Messages go as chat and come back) and by an Anthropic-kind one
 * (Messages pass natively): plain, streamed, tool use over two turns, `countTokens`, cache
 * reads and writes billed exactly, answers checked against Anthropic's documented shapes;
 * and the Vercel AI SDK's Anthropic provider with the gateway's base URL. The upstreams are
 * loopback servers written from each provider's published wire format.
 */
import { createAnthropic } from '@ai-sdk/anthropic';
import Anthropic from '@anthropic-ai/sdk';
import { generateText, streamText, tool } from 'ai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { LedgerEntry } from '../../src/stores/types.js';
import { costOf, parsePrice } from '../../src/billing/money.js';
import { estimatePromptTokens } from '../../src/billing/tokens.js';
import { chatCost, loadTokenizer } from '../helpers/billing.js';
import { anthropicUpstream, openaiChatUpstream, type Script } from '../helpers/provider-wire.js';
import { messageSchema, streamEventSchema } from '../helpers/anthropic-shapes.js';
import { ACCOUNT, COMPLETION_PRICE, MODEL, PROMPT_PRICE, UPSTREAM_API_KEY, UPSTREAM_MODEL, eventually, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type RecordedRequest, type TestUpstream } from '../helpers/upstream.js';

const kinds = [
  { kind: 'openai' as const, behave: openaiChatUpstream, path: '/v1/chat/completions' },
  { kind: 'anthropic' as const, behave: anthropicUpstream, path: '/v1/messages' },
];

const weather: Anthropic.Tool = {
  name: 'get_weather',
  description: 'The current weather in a city.',
  input_schema: { type: 'object', properties: { location: { type: 'string' } }, required: ['location'] },
};
const TOOL_CALL = { id: 'toolu_01A09q90qw90lq917835lq9', name: 'get_weather', input: { location: 'Paris' } };
/** A model with cache prices: reads at a tenth of the prompt price, writes at 1.25 times it (Anthropic's ratios). */
const CACHED_MODEL = 'test/cached';
const CACHED_PRICE = '0.0000001';
const WRITE_PRICE = '0.00000125';

describe.each(kinds)('the Anthropic SDK through the gateway, served by an $kind-kind upstream', ({ kind, behave, path }) => {
  let up: TestUpstream;
  let gw: RunningGateway;
  let devKey: string;
  let client: Anthropic;

  beforeAll(async () => {
    up = await startTestUpstream();
    const setup = testConfig({
      upstreamUrl: up.url,
      models: [
        {
          id: CACHED_MODEL,
          type: 'text',
          upstream: 'test',
          pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE, cachedPrompt: CACHED_PRICE, cacheWrite: WRITE_PRICE },
          contextLength: 32_000,
          maxOutputTokens: 1000,
        },
      ],
    });
    setup.options.upstreams = { test: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs: 10_000, kind } };
    gw = await startGateway(setup.options);
    devKey = setup.devKey;
    // The SDK appends /v1/messages to its base URL: the gateway's origin is its base.
    client = new Anthropic({ apiKey: devKey, baseURL: gw.origin, maxRetries: 0 });
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
  });
  beforeEach(() => {
    up.requests.length = 0;
  });

  const ledger = () => gw.gateway.admin.ledger(ACCOUNT);
  async function entry(requestId: string | null): Promise<LedgerEntry> {
    await eventually(async () => (await ledger()).some((e) => e.id === requestId), `ledger entry ${requestId}`);
    return (await ledger()).find((e) => e.id === requestId)!;
  }
  const script = (s: Script) => up.setBehavior(behave(s));
  const only = (): RecordedRequest => {
    expect(up.requests).toHaveLength(1);
    return up.requests[0]!;
  };

  /** What the upstream got: its own API at its own path, the upstream's key, never the client's. */
  function expectUpstreamCall(rec: RecordedRequest) {
    expect(rec.path).toBe(path);
    expect(rec.body?.model).toBe(UPSTREAM_MODEL);
    expect(JSON.stringify(rec.headers)).not.toContain(devKey);
    if (kind === 'anthropic') {
      expect(rec.headers['x-api-key']).toBe(UPSTREAM_API_KEY);
      expect(rec.headers['anthropic-version']).toBe('2023-06-01');
      expect(rec.headers.authorization).toBeUndefined();
    } else expect(rec.headers.authorization).toBe(`Bearer ${UPSTREAM_API_KEY}`);
  }

  it('plain: a Message of the documented shape, the model the client called, billed at list price', async () => {
    script({ text: 'Hello there, traveller.', usage: { input: 20, output: 6 } });
    const { data, response } = await client.messages
      .create({ model: MODEL, max_tokens: 100, system: 'Be brief.', messages: [{ role: 'user', content: 'Hi' }] })
      .withResponse();
    expect(messageSchema.safeParse(data).error).toBeUndefined();
    expect(data.content).toEqual([{ type: 'text', text: 'Hello there, traveller.' }]);
    expect(data.model).toBe(MODEL);
    expect(data.stop_reason).toBe('end_turn');
    expect(data.usage).toMatchObject({ input_tokens: 20, output_tokens: 6 });
    const rec = only();
    expectUpstreamCall(rec);
    if (kind === 'openai') {
      expect(rec.body?.messages).toEqual([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }]);
      expect(rec.body?.max_completion_tokens).toBe(100);
      expect(rec.body?.max_tokens).toBeUndefined();
    } else expect(rec.body).toEqual({ model: UPSTREAM_MODEL, max_tokens: 100, system: 'Be brief.', messages: [{ role: 'user', content: 'Hi' }] });
    const e = await entry(response.headers.get('x-request-id'));
    expect(e.cost).toBe(chatCost(20, 6));
    expect(e.measured).toBe('usage');
  });

  it('streamed: every event of the documented shape, the text whole, and the charge in before message_stop', async () => {
    script({ text: 'Streaming works through the gateway.', usage: { input: 30, output: 8 } });
    const { data: stream, response } = await client.messages
      .create({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'Stream please' }], stream: true })
      .withResponse();
    const requestId = response.headers.get('x-request-id');
    const types: string[] = [];
    let text = '';
    let chargedAtStop: LedgerEntry | undefined;
    for await (const event of stream) {
      expect(streamEventSchema.safeParse(event).error).toBeUndefined();
      types.push(event.type);
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
      if (event.type === 'message_start') expect(event.message.model).toBe(MODEL);
      if (event.type === 'message_stop') chargedAtStop = (await ledger()).find((e) => e.id === requestId);
    }
    expect(text).toBe('Streaming works through the gateway.');
    expect(types[0]).toBe('message_start');
    expect(types.at(-2)).toBe('message_delta');
    expect(types.at(-1)).toBe('message_stop');
    expect(chargedAtStop?.cost).toBe(chatCost(30, 8));
    expectUpstreamCall(only());
    if (kind === 'openai') expect(only().body?.stream_options).toEqual({ include_usage: true });
  });

  it.runIf(kind === 'openai')('an upstream stream without usage: billed on the tokenizer count of prompt and output', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['Counted', ' by', ' the', ' gateway.'], usage: false });
    const messages = [{ role: 'user' as const, content: 'Count me' }];
    const stream = client.messages.stream({ model: MODEL, max_tokens: 50, messages });
    const final = await stream.finalMessage();
    expect(final.content).toEqual([{ type: 'text', text: 'Counted by the gateway.' }]);
    const e = await entry((await stream.withResponse()).response.headers.get('x-request-id'));
    const tokenizer = await loadTokenizer();
    const prompt = estimatePromptTokens(tokenizer, { messages });
    const completion = tokenizer.count('Counted by the gateway.');
    expect(e.measured).toBe('tokenizer');
    expect(e.units).toMatchObject({ prompt, completion });
    expect(e.cost).toBe(chatCost(prompt, completion));
  });

  it('MessageStream helper: finalMessage carries the usage, input included', async () => {
    script({ text: 'Final.', usage: { input: 12, output: 2 } });
    const final = await client.messages.stream({ model: MODEL, max_tokens: 50, messages: [{ role: 'user', content: 'Go' }] }).finalMessage();
    expect(messageSchema.safeParse(final).error).toBeUndefined();
    expect(final.content).toEqual([{ type: 'text', text: 'Final.' }]);
    expect(final.usage).toMatchObject({ input_tokens: 12, output_tokens: 2 });
  });

  it('tool use over two turns, plain: tool_use with its parsed input, then the tool result reaches the upstream', async () => {
    script({ text: 'Let me check.', tool: TOOL_CALL, usage: { input: 40, output: 15 } });
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const first = await client.messages.create({ model: MODEL, max_tokens: 200, tools: [weather], tool_choice: { type: 'auto' }, messages });
    expect(messageSchema.safeParse(first).error).toBeUndefined();
    expect(first.stop_reason).toBe('tool_use');
    expect(first.content).toEqual([{ type: 'text', text: 'Let me check.' }, { type: 'tool_use', ...TOOL_CALL }]);
    const sent = only().body!;
    if (kind === 'openai') {
      expect(sent.tools).toEqual([{ type: 'function', function: { name: weather.name, description: weather.description, parameters: weather.input_schema } }]);
      expect(sent.tool_choice).toBe('auto');
    } else expect(sent.tools).toEqual([weather]);

    up.requests.length = 0;
    script({ text: 'It is 18 C and sunny in Paris.', usage: { input: 60, output: 10 } });
    messages.push({ role: 'assistant', content: first.content });
    messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: TOOL_CALL.id, content: '18 C, sunny' }] });
    const second = await client.messages.create({ model: MODEL, max_tokens: 200, tools: [weather], messages });
    expect(second.content).toEqual([{ type: 'text', text: 'It is 18 C and sunny in Paris.' }]);
    const turn = only().body!.messages as Array<Record<string, unknown>>;
    if (kind === 'openai') {
      expect(turn.slice(1)).toEqual([
        {
          role: 'assistant',
          content: 'Let me check.',
          tool_calls: [{ id: TOOL_CALL.id, type: 'function', function: { name: 'get_weather', arguments: '{"location":"Paris"}' } }],
        },
        { role: 'tool', tool_call_id: TOOL_CALL.id, content: '18 C, sunny' },
      ]);
    } else expect(turn[2]).toEqual({ role: 'user', content: [{ type: 'tool_result', tool_use_id: TOOL_CALL.id, content: '18 C, sunny' }] });
  });

  it('tool use, streamed: input_json_delta pieces build the tool input', async () => {
    script({ tool: TOOL_CALL, usage: { input: 40, output: 15 } });
    const stream = client.messages.stream({ model: MODEL, max_tokens: 200, tools: [weather], messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    const deltas: string[] = [];
    stream.on('inputJson', (partial) => deltas.push(partial));
    const final = await stream.finalMessage();
    expect(final.stop_reason).toBe('tool_use');
    expect(final.content).toEqual([{ type: 'tool_use', ...TOOL_CALL }]);
    expect(deltas.join('')).toBe(JSON.stringify(TOOL_CALL.input));
  });

  // OpenAI reports cache reads inside prompt_tokens and no cache writes; Anthropic reports
  // both beside input_tokens. Either way the prompt billed is the whole input.
  const cache = kind === 'anthropic' ? { input: 10, output: 5, cacheRead: 1000, cacheWrite: 200 } : { input: 10, output: 5, cacheRead: 1000 };
  const wholeInput = 10 + 1000 + (cache.cacheWrite ?? 0);

  it.each([false, true])('cache reads and writes (stream: %s): reported as Anthropic does, the whole input billed, exact', async (streamed) => {
    script({ text: 'Cached.', usage: cache });
    const params = { model: MODEL, max_tokens: 50, messages: [{ role: 'user' as const, content: 'Again' }] };
    let usage: Anthropic.Usage;
    let requestId: string | null;
    if (streamed) {
      const stream = client.messages.stream(params);
      usage = (await stream.finalMessage()).usage;
      requestId = (await stream.withResponse()).response.headers.get('x-request-id');
    } else {
      const { data, response } = await client.messages.create(params).withResponse();
      usage = data.usage;
      requestId = response.headers.get('x-request-id');
    }
    expect(usage).toMatchObject({ input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 1000, cache_creation_input_tokens: cache.cacheWrite ?? 0 });
    const e = await entry(requestId);
    expect(e.units).toMatchObject({ kind: 'tokens', prompt: wholeInput, completion: 5 });
    expect(e.cost).toBe(chatCost(wholeInput, 5));
  });

  it.each([false, true])('golden, cache prices set (stream: %s): uncached input, cache reads, cache writes and output each at their price', async (streamed) => {
    script({ text: 'Priced.', usage: cache });
    const params = { model: CACHED_MODEL, max_tokens: 50, messages: [{ role: 'user' as const, content: 'Priced again' }] };
    let requestId: string | null;
    if (streamed) {
      const stream = client.messages.stream(params);
      await stream.finalMessage();
      requestId = (await stream.withResponse()).response.headers.get('x-request-id');
    } else requestId = (await client.messages.create(params).withResponse()).response.headers.get('x-request-id');
    const e = await entry(requestId);
    const written = cache.cacheWrite ?? 0;
    expect(e.units).toMatchObject({ prompt: wholeInput, completion: 5, cachedPrompt: 1000, ...(written ? { cacheWrite: written } : {}) });
    // 10 x 1e-6 + 1000 x 1e-7 + 200 x 1.25e-6 + 5 x 2e-6 USD, in nano-USD, written out.
    const golden = kind === 'anthropic' ? 10_000n + 100_000n + 250_000n + 10_000n : 10_000n + 100_000n + 10_000n;
    expect(e.cost).toBe(golden);
    expect(e.cost).toBe(costOf([[parsePrice(PROMPT_PRICE), 10], [parsePrice(CACHED_PRICE), 1000], [parsePrice(WRITE_PRICE), written], [parsePrice(COMPLETION_PRICE), 5]]));
  });

  it('countTokens: the input counted by the gateway, authenticated, nothing sent upstream or billed', async () => {
    const before = (await gw.stores.billing.wallet(ACCOUNT)).balance;
    const short = await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }] });
    const long = await client.messages.countTokens({
      model: MODEL,
      system: 'You are a meticulous assistant who answers in full sentences.',
      messages: [{ role: 'user', content: 'Tell me about the weather in Paris in the spring, please.' }],
      tools: [weather],
    });
    expect(short.input_tokens).toBeGreaterThan(0);
    expect(long.input_tokens).toBeGreaterThan(short.input_tokens + 20);
    expect(up.requests).toHaveLength(0);
    expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(before);
    const stranger = new Anthropic({ apiKey: 'sk-mg-unknown', baseURL: gw.origin, maxRetries: 0 });
    await expect(stranger.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }] })).rejects.toBeInstanceOf(
      Anthropic.AuthenticationError,
    );
  });

  it('a bearer token works like x-api-key', async () => {
    script({ text: 'Bearer.', usage: { input: 3, output: 1 } });
    const bearer = new Anthropic({ authToken: devKey, apiKey: null, baseURL: gw.origin, maxRetries: 0 });
    const m = await bearer.messages.create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: 'Hi' }] });
    expect(m.content).toEqual([{ type: 'text', text: 'Bearer.' }]);
  });

  it("the Vercel AI SDK's Anthropic provider: generateText and streamText with the gateway's base URL", async () => {
    const anthropic = createAnthropic({ baseURL: gw.baseURL, apiKey: devKey });
    script({ text: 'From the AI SDK.', usage: { input: 14, output: 5 } });
    const plain = await generateText({ model: anthropic(MODEL), prompt: 'Hello', maxOutputTokens: 100 });
    expect(plain.text).toBe('From the AI SDK.');
    expect(plain.usage.outputTokens).toBe(5);
    expect(plain.finishReason).toBe('stop');

    script({ text: 'Streamed by the AI SDK.', usage: { input: 14, output: 6 } });
    const streamed = streamText({ model: anthropic(MODEL), prompt: 'Hello', maxOutputTokens: 100 });
    let text = '';
    for await (const piece of streamed.textStream) text += piece;
    expect(text).toBe('Streamed by the AI SDK.');
    expect((await streamed.usage).outputTokens).toBe(6);
    expect(await streamed.finishReason).toBe('stop');
  });

  it("the Vercel AI SDK's Anthropic provider: a tool call comes back typed", async () => {
    const anthropic = createAnthropic({ baseURL: gw.baseURL, apiKey: devKey });
    script({ tool: TOOL_CALL, usage: { input: 30, output: 12 } });
    const tools = { get_weather: tool({ description: 'The weather in a city.', inputSchema: z.object({ location: z.string() }) }) };
    const result = await generateText({ model: anthropic(MODEL), prompt: 'Weather in Paris?', tools, maxOutputTokens: 100 });
    expect(result.finishReason).toBe('tool-calls');
    expect(result.toolCalls).toMatchObject([{ toolCallId: TOOL_CALL.id, toolName: 'get_weather', input: TOOL_CALL.input }]);
  });
});
