/**
 * The other half of the Messages work: the `openai` SDK's chat (plain, streamed, tools) served
 * by an Anthropic-kind upstream (a loopback server written from Anthropic's wire format), with
 * cache reads and writes in chat's usage and billed exactly; a chat feature Messages cannot
 * carry refused naming it; the simulator speaking `kind: "anthropic"` with cache reads; the
 * brand going into `system`; and errors on /v1/messages in Anthropic's shape with the same
 * statuses (401, 400 naming the field, 402, 404, 429 with retry-after, a failure after the 200).
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { chatCost } from '../helpers/billing.js';
import { errorSchema, messageSchema, streamEvents, streamEventSchema } from '../helpers/anthropic-shapes.js';
import { anthropicUpstream, type Script } from '../helpers/provider-wire.js';
import { ACCOUNT, MODEL, UPSTREAM_API_KEY, UPSTREAM_MODEL, eventually, sseData, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { openaiSchemas } from '../helpers/openapi.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const TOOL_CALL = { id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6', name: 'get_weather', input: { location: 'Paris', unit: 'celsius' } };
const weather: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'The weather in a city.', parameters: { type: 'object', properties: { location: { type: 'string' } } } },
};
const POOR = 'acct_poor';
const poorKey = testKey();

describe('an Anthropic-kind upstream', () => {
  let up: TestUpstream;
  let gw: RunningGateway;
  let devKey: string;
  let openai: OpenAI;

  beforeAll(async () => {
    up = await startTestUpstream();
    const setup = testConfig({
      upstreamUrl: up.url,
      accounts: [{ id: POOR, walletUsd: '0.000001' }],
      keys: [{ key: poorKey, account: POOR, kind: 'developer' }],
      brands: [{ id: 'kettleco', account: ACCOUNT, name: 'KettleCo', voice: 'Cheerful, short sentences.' }],
    });
    setup.options.upstreams = { test: { baseUrl: up.url, apiKey: UPSTREAM_API_KEY, timeoutMs: 10_000, kind: 'anthropic' } };
    gw = await startGateway(setup.options);
    devKey = setup.devKey;
    openai = new OpenAI({ apiKey: devKey, baseURL: gw.baseURL, maxRetries: 0 });
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
  });
  beforeEach(() => {
    up.requests.length = 0;
  });

  const script = (s: Script) => up.setBehavior(anthropicUpstream(s));
  async function cost(requestId: string | null): Promise<bigint> {
    const ledger = () => gw.gateway.admin.ledger(ACCOUNT);
    await eventually(async () => (await ledger()).some((e) => e.id === requestId), `ledger entry ${requestId}`);
    return (await ledger()).find((e) => e.id === requestId)!.cost;
  }
  const sent = () => up.requests[0]!.body!;

  it('openai chat, plain: a chat completion back, cache reads and writes in prompt_tokens_details, billed exactly', async () => {
    script({ text: 'Bonjour!', usage: { input: 9, output: 3, cacheRead: 500, cacheWrite: 100 } });
    const { data, response } = await openai.chat.completions
      .create({ model: MODEL, messages: [{ role: 'system', content: 'Be French.' }, { role: 'user', content: 'Hello' }], max_tokens: 50 })
      .withResponse();
    expect(data.object).toBe('chat.completion');
    expect(data.model).toBe(MODEL);
    expect(data.choices[0]!.message.content).toBe('Bonjour!');
    expect(data.choices[0]!.finish_reason).toBe('stop');
    expect(data.usage).toMatchObject({ prompt_tokens: 609, completion_tokens: 3, total_tokens: 612, prompt_tokens_details: { cached_tokens: 500 } });
    expect(data.usage!.prompt_tokens_details).toMatchObject({ cache_write_tokens: 100 });
    expect(up.requests[0]!.path).toBe('/v1/messages');
    expect(up.requests[0]!.headers['x-api-key']).toBe(UPSTREAM_API_KEY);
    expect(sent()).toEqual({ model: UPSTREAM_MODEL, max_tokens: 50, system: 'Be French.', messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }] });
    expect(await cost(response.headers.get('x-request-id'))).toBe(chatCost(609, 3));
  });

  it('openai chat, streamed: content deltas, the finish, and the usage chunk asked for; billed exactly', async () => {
    script({ text: 'Streaming from Claude.', usage: { input: 20, output: 7, cacheRead: 300 } });
    const { data: stream, response } = await openai.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'Stream' }], stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe('Streaming from Claude.');
    expect(finish).toBe('stop');
    expect(usage).toMatchObject({ prompt_tokens: 320, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 300 } });
    // A chat request without a cap still names one: Messages requires max_tokens.
    expect(sent()).toMatchObject({ stream: true, max_tokens: 4096 });
    expect(await cost(response.headers.get('x-request-id'))).toBe(chatCost(320, 7));
  });

  it('openai chat with tools, plain then the tool result: tool_calls out, tool_result blocks in', async () => {
    script({ tool: TOOL_CALL, usage: { input: 50, output: 20 } });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const first = await openai.chat.completions.create({ model: MODEL, messages, tools: [weather], tool_choice: 'required' });
    const choice = first.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.tool_calls).toEqual([{ id: TOOL_CALL.id, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify(TOOL_CALL.input) } }]);
    expect(sent().tools).toEqual([{ name: 'get_weather', description: 'The weather in a city.', input_schema: weather.function.parameters }]);
    expect(sent().tool_choice).toEqual({ type: 'any' });

    up.requests.length = 0;
    script({ text: 'Sunny, 18 C.', usage: { input: 80, output: 6 } });
    messages.push(choice.message, { role: 'tool', tool_call_id: TOOL_CALL.id, content: '18 C, sunny' });
    const second = await openai.chat.completions.create({ model: MODEL, messages, tools: [weather] });
    expect(second.choices[0]!.message.content).toBe('Sunny, 18 C.');
    expect(sent().messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] },
      { role: 'assistant', content: [{ type: 'tool_use', ...TOOL_CALL }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: TOOL_CALL.id, content: '18 C, sunny' }] },
    ]);
  });

  it('openai chat with tools, streamed: the tool call assembled from its argument deltas', async () => {
    script({ text: 'Checking.', tool: TOOL_CALL, usage: { input: 50, output: 20 } });
    const stream = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Weather?' }], tools: [weather], stream: true });
    let args = '';
    let name = '';
    let id = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      const call = chunk.choices[0]?.delta.tool_calls?.[0];
      if (call?.id) id = call.id;
      if (call?.function?.name) name = call.function.name;
      args += call?.function?.arguments ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect({ id, name, input: JSON.parse(args) }).toEqual(TOOL_CALL);
    expect(finish).toBe('tool_calls');
  });

  it("chat answers translated from Messages validate against OpenAI's published schemas, plain and streamed", async () => {
    const schemas = openaiSchemas();
    const post = (stream: boolean) =>
      fetch(`${gw.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], tools: [weather], stream, stream_options: stream ? { include_usage: true } : undefined }),
      });
    script({ text: 'Checking.', tool: TOOL_CALL, usage: { input: 10, output: 4, cacheRead: 20 } });
    expect(schemas.check('CreateChatCompletionResponse', await (await post(false)).json())).toEqual([]);
    const chunks = sseData(await (await post(true)).text()).filter((d) => d !== '[DONE]');
    expect(chunks.length).toBeGreaterThan(3);
    for (const chunk of chunks) expect(schemas.check('CreateChatCompletionStreamResponse', JSON.parse(chunk)), chunk).toEqual([]);
  });

  it('Responses through chat to Messages, plain and streamed, billed exactly', async () => {
    script({ text: 'Responses via Claude.', usage: { input: 15, output: 5, cacheRead: 100 } });
    const { data, response } = await openai.responses.create({ model: MODEL, input: 'Hi', max_output_tokens: 40 }).withResponse();
    expect(data.output_text).toBe('Responses via Claude.');
    expect(data.usage).toMatchObject({ input_tokens: 115, output_tokens: 5 });
    expect(up.requests[0]!.path).toBe('/v1/messages');
    expect(sent()).toMatchObject({ model: UPSTREAM_MODEL, max_tokens: 40, messages: [{ role: 'user' }] });
    expect(await cost(response.headers.get('x-request-id'))).toBe(chatCost(115, 5));

    up.requests.length = 0;
    const { data: stream, response: streamed } = await openai.responses.create({ model: MODEL, input: 'Hi', stream: true }).withResponse();
    let text = '';
    let completed = false;
    for await (const event of stream) {
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completed = true;
    }
    expect(text).toBe('Responses via Claude.');
    expect(completed).toBe(true);
    expect(await cost(streamed.headers.get('x-request-id'))).toBe(chatCost(115, 5));
  });

  it('a chat feature Messages cannot carry is a 400 naming it, before any upstream call', async () => {
    for (const [param, extra] of [
      ['n', { n: 2 }],
      ['logprobs', { logprobs: true }],
      ['response_format', { response_format: { type: 'json_object' } }],
    ] as const) {
      const err = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], ...extra }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(APIError);
      expect((err as APIError).status).toBe(400);
      expect((err as APIError).param).toBe(param);
    }
    expect(up.requests).toHaveLength(0);
  });

  it('the brand goes in front of system, as text blocks', async () => {
    script({ text: 'Cheers!', usage: { input: 30, output: 2 } });
    const anthropic = new Anthropic({ apiKey: devKey, baseURL: gw.origin, maxRetries: 0 });
    await anthropic.messages.create({ model: MODEL, max_tokens: 20, system: 'Answer in English.', messages: [{ role: 'user', content: 'Hi' }], brand: 'kettleco' } as Anthropic.MessageCreateParamsNonStreaming);
    const system = sent().system as Array<{ type: string; text: string }>;
    expect(system).toHaveLength(2);
    expect(system[0]!.text).toContain('KettleCo');
    expect(system[1]).toEqual({ type: 'text', text: 'Answer in English.' });
    expect(sent().brand).toBeUndefined();
  });

  it('a failure after the 200 is an Anthropic error event, and no message_stop', async () => {
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const message = { id: 'msg_x', type: 'message', role: 'assistant', model: UPSTREAM_MODEL, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } };
        res.write(`event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message })}\n\n`);
        res.write(`event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n`);
        res.write(`event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Half an"}}\n\n`);
        res.end(`event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n`);
      },
    });
    const res = await fetch(`${gw.baseURL}/messages`, {
      method: 'POST',
      headers: { 'x-api-key': devKey, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'Hi' }] }),
    });
    expect(res.status).toBe(200);
    const events = streamEvents(await res.text());
    for (const e of events) expect(streamEventSchema.safeParse(e).error).toBeUndefined();
    const last = events.at(-1)!;
    expect(last.type).toBe('error');
    expect(errorSchema.safeParse(last).error).toBeUndefined();
    expect(events.some((e) => e.type === 'message_stop')).toBe(false);
  });

  describe("errors on /v1/messages in Anthropic's shape, with the gateway's statuses", () => {
    const post = (body: unknown, headers: Record<string, string> = { 'x-api-key': devKey }) =>
      fetch(`${gw.baseURL}/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...headers }, body: JSON.stringify(body) });
    const hi = { model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: 'Hi' }] };

    async function expectError(res: Response, status: number, type: string): Promise<string> {
      expect(res.status).toBe(status);
      const body = (await res.json()) as unknown;
      expect(errorSchema.safeParse(body).error).toBeUndefined();
      expect((body as { error: { type: string } }).error.type).toBe(type);
      expect(res.headers.get('x-request-id')).toBeTruthy();
      return (body as { error: { message: string } }).error.message;
    }

    it('401 for an unknown key, and through the SDK an AuthenticationError', async () => {
      await expectError(await post(hi, { 'x-api-key': testKey() }), 401, 'authentication_error');
      await expectError(await post(hi, {}), 401, 'authentication_error');
      const sdk = new Anthropic({ apiKey: testKey(), baseURL: gw.origin, maxRetries: 0 });
      const err = await sdk.messages.create(hi as Anthropic.MessageCreateParamsNonStreaming).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    });

    it('400 naming the bad field', async () => {
      expect(await expectError(await post({ model: MODEL, messages: hi.messages }), 400, 'invalid_request_error')).toContain('max_tokens');
      expect(await expectError(await post({ ...hi, temperature: 5 }), 400, 'invalid_request_error')).toContain('temperature');
      const bad = { ...hi, messages: [{ role: 'user', content: [{ type: 'video', url: 'x' }] }] };
      expect(await expectError(await post(bad), 400, 'invalid_request_error')).toContain('messages[0].content[0]');
      // A server tool is priced per use, which no usage field reports: refused, not relayed unbilled.
      const search = { ...hi, tools: [{ type: 'web_search_20250305', name: 'web_search' }] };
      expect(await expectError(await post(search), 400, 'invalid_request_error')).toContain('web_search');
      // So do remote MCP servers and a code-execution container, which Anthropic bills beside the tokens.
      const mcp = { ...hi, mcp_servers: [{ type: 'url', url: 'https://mcp.example.com/sse', name: 'x' }] };
      expect(await expectError(await post(mcp), 400, 'invalid_request_error')).toContain('mcp_servers');
      expect(await expectError(await post({ ...hi, container: 'container_1' }), 400, 'invalid_request_error')).toContain('container');
      expect(up.requests).toHaveLength(0);
    });

    it('402 billing_error for a wallet that cannot cover the hold', async () => {
      await expectError(await post(hi, { 'x-api-key': poorKey }), 402, 'billing_error');
    });

    it('404 not_found_error for an unknown model; the unknown path too', async () => {
      await expectError(await post({ ...hi, model: 'nobody/nothing' }), 404, 'not_found_error');
      const res = await fetch(`${gw.baseURL}/messages/batches`, { method: 'POST', headers: { 'x-api-key': devKey }, body: '{}' });
      await expectError(res, 404, 'not_found_error');
    });

    it('429 rate_limit_error with retry-after when the key is over its rate', async () => {
      const setup = testConfig({ upstreamUrl: up.url, limits: { keyRequestsPerMinute: 1 } });
      const limited = await startGateway(setup.options);
      try {
        script({ text: 'ok', usage: { input: 3, output: 1 } });
        const url = `${limited.baseURL}/messages/count_tokens`;
        const init = { method: 'POST', headers: { 'x-api-key': setup.devKey, 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, messages: hi.messages }) };
        expect((await fetch(url, init)).status).toBe(200);
        const res = await fetch(url, init);
        await expectError(res, 429, 'rate_limit_error');
        expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      } finally {
        await limited.close();
      }
    });
  });
});

describe('the simulator speaking kind "anthropic"', () => {
  let gw: RunningGateway;
  let client: Anthropic;
  beforeAll(async () => {
    const setup = testConfig();
    setup.options.upstreams = { test: { simulate: true, kind: 'anthropic', chunkDelayMs: 0, imageDelayMs: 0, videoDurationMs: 0 } };
    gw = await startGateway(setup.options);
    client = new Anthropic({ apiKey: setup.devKey, baseURL: gw.origin, maxRetries: 0 });
  });
  afterAll(async () => {
    await gw?.close();
  });

  // Over 1,024 tokens: the simulator caches a prompt's prefix (here the system) like OpenAI does.
  const system: Anthropic.TextBlockParam[] = [{ type: 'text', text: 'You are the house style guide of a careful publisher. '.repeat(120) }];

  async function call(streamed: boolean, content: string) {
    const params = { model: MODEL, max_tokens: 200, system, messages: [{ role: 'user' as const, content }] };
    if (streamed) {
      const stream = client.messages.stream(params);
      const message = await stream.finalMessage();
      return { message, requestId: (await stream.withResponse()).response.headers.get('x-request-id') };
    }
    const { data, response } = await client.messages.create(params).withResponse();
    return { message: data, requestId: response.headers.get('x-request-id') };
  }

  it('answers Messages plain and streamed: the cache written, then read, each billed on the whole input', async () => {
    const ledger = () => gw.gateway.admin.ledger(ACCOUNT);
    const calls = [await call(false, 'Say hello'), await call(true, 'Say hello again'), await call(false, 'And once more')];
    expect(calls[0]!.message.usage.cache_creation_input_tokens).toBeGreaterThan(1000);
    expect(calls[0]!.message.usage.cache_read_input_tokens).toBe(0);
    for (const { message } of calls.slice(1)) expect(message.usage.cache_read_input_tokens).toBe(calls[0]!.message.usage.cache_creation_input_tokens);
    for (const { message, requestId } of calls) {
      expect((message.content[0] as Anthropic.TextBlock).text).toContain('simulator');
      const u = message.usage;
      const whole = u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
      await eventually(async () => (await ledger()).some((e) => e.id === requestId), 'the charge');
      const entry = (await ledger()).find((e) => e.id === requestId)!;
      expect(entry.units).toMatchObject({ prompt: whole, completion: u.output_tokens });
      expect(entry.cost).toBe(chatCost(whole, u.output_tokens));
    }
  });

  it('serves chat completions too, translated to Messages and back', async () => {
    const openai = new OpenAI({ apiKey: client.apiKey!, baseURL: gw.baseURL, maxRetries: 0 });
    const answer = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hello' }] });
    expect(answer.choices[0]!.message.content).toContain('simulator');
    expect(answer.usage!.prompt_tokens).toBeGreaterThan(0);
  });
});

describe("Messages over the simulator's gemini kind (through chat)", () => {
  let gw: RunningGateway;
  let client: Anthropic;
  beforeAll(async () => {
    const setup = testConfig();
    setup.options.upstreams = { test: { simulate: true, kind: 'gemini', chunkDelayMs: 0, imageDelayMs: 0, videoDurationMs: 0 } };
    gw = await startGateway(setup.options);
    client = new Anthropic({ apiKey: setup.devKey, baseURL: gw.origin, maxRetries: 0 });
  });
  afterAll(async () => {
    await gw?.close();
  });

  it.each([false, true])('the Anthropic SDK gets a Message (stream: %s), billed on the usage it reports', async (streamed) => {
    const params = { model: MODEL, max_tokens: 100, messages: [{ role: 'user' as const, content: 'Hello Gemini' }] };
    let message: Anthropic.Message;
    let requestId: string | null;
    if (streamed) {
      const stream = client.messages.stream(params);
      message = await stream.finalMessage();
      requestId = (await stream.withResponse()).response.headers.get('x-request-id');
    } else {
      const { data, response } = await client.messages.create(params).withResponse();
      message = data;
      requestId = response.headers.get('x-request-id');
    }
    expect(messageSchema.safeParse(message).error).toBeUndefined();
    expect((message.content[0] as Anthropic.TextBlock).text).toContain('simulator');
    expect(message.usage.input_tokens).toBeGreaterThan(0);
    const ledger = () => gw.gateway.admin.ledger(ACCOUNT);
    await eventually(async () => (await ledger()).some((e) => e.id === requestId), 'the charge');
    const entry = (await ledger()).find((e) => e.id === requestId)!;
    expect(entry.measured).toBe('usage');
    expect(entry.cost).toBe(chatCost(message.usage.input_tokens + (message.usage.cache_read_input_tokens ?? 0), message.usage.output_tokens));
  });
});
