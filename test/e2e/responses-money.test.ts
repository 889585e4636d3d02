/**
 * Responses money, end to end with the official `openai` client against a loopback upstream,
 * on memory and on PostgreSQL (two gateway instances sharing one fresh schema):
 *   - input the gateway cannot count (`previous_response_id`, files by id, unknown parts) is
 *     held at the model's context length, so 20 concurrent continuations cannot overdraw a
 *     small wallet;
 *   - a response id is usable only by the account that created it, from any instance;
 *   - hosted tools: unpriced is 400 unsupported_tool before any upstream call; priced is held
 *     (max_tool_calls, else 10) and billed per reported call to the nano-USD; image generation
 *     is refused to agent keys.
 */
import { randomBytes } from 'node:crypto';
import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, dropSchema, freshSchema, postgresProblem } from '../../bench/postgres-util.js';
import { costOf, parsePrice } from '../../src/billing/money.js';
import { createPostgresStores } from '../../src/stores/postgres/entry.js';
import type { LedgerEntry, Stores } from '../../src/stores/types.js';
import { chatCost } from '../helpers/billing.js';
import { ACCOUNT, COMPLETION_PRICE, MODEL, PROMPT_PRICE, eventually, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type Behavior, type TestUpstream } from '../helpers/upstream.js';

const TOOLS_MODEL = 'test/tools';
const SEARCH = '0.01';
const IMAGE = '0.04';
const SMALL = 'acct_small';
const OTHER = 'acct_other';
const CHAT_POOR = 'acct_chat_poor';
const SEARCHER = 'acct_searcher';
const keys = { small: testKey(), other: testKey(), chatPoor: testKey(), toolsAgent: testKey(), searcher: testKey() };
/** MODEL's context length (32,000) at its prompt price: what a call with uncountable input holds for its prompt. */
const CONTEXT_HOLD = chatCost(32_000, 0);

const pgProblem = await postgresProblem(POSTGRES_URL);
const SCHEMA = freshSchema('mgresp');

type Driver = { name: string; stores: () => Promise<[Stores, Stores] | null>; cleanup: () => Promise<void> };
const drivers: Driver[] = [
  { name: 'memory', stores: async () => null, cleanup: async () => {} },
  {
    name: 'postgres',
    stores: async () => [await createPostgresStores({ url: POSTGRES_URL, schema: SCHEMA }), await createPostgresStores({ url: POSTGRES_URL, schema: SCHEMA })],
    cleanup: () => dropSchema(SCHEMA),
  },
];

/** The SDK's request types predate `max_tool_calls`. */
type Plain = OpenAI.Responses.ResponseCreateParamsNonStreaming;
type Streaming = OpenAI.Responses.ResponseCreateParamsStreaming;
const toolCall = (type: string, id: string) => ({ id, type, status: 'completed' });

describe.each(drivers)('Responses money on $name', (driver) => {
  const skip = driver.name === 'postgres' && pgProblem !== null && process.env.CI !== 'true';
  let up: TestUpstream;
  /** Two instances sharing the stores (the same one on memory). */
  let gwA: RunningGateway;
  let gwB: RunningGateway;
  let devKey: string;
  let agentKey: string;

  beforeAll(async () => {
    if (skip) return;
    up = await startTestUpstream();
    const setup = testConfig({
      upstreamUrl: up.url,
      models: [
        {
          id: TOOLS_MODEL,
          type: 'text',
          upstream: 'test',
          pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE, tools: { web_search: SEARCH, image_generation: IMAGE } },
          contextLength: 32_000,
          maxOutputTokens: 1000,
        },
      ],
      accounts: [
        { id: SMALL, walletUsd: '0.05' },
        { id: OTHER, walletUsd: 10 },
        { id: CHAT_POOR, walletUsd: '0.01' },
        { id: SEARCHER, walletUsd: '0.05' },
      ],
      keys: [
        { key: keys.small, account: SMALL, kind: 'developer' },
        { key: keys.other, account: OTHER, kind: 'developer' },
        { key: keys.chatPoor, account: CHAT_POOR, kind: 'developer' },
        { key: keys.toolsAgent, account: ACCOUNT, kind: 'agent', model: TOOLS_MODEL },
        { key: keys.searcher, account: SEARCHER, kind: 'developer' },
      ],
    });
    devKey = setup.devKey;
    agentKey = setup.agentKey;
    const shared = await driver.stores();
    gwA = await startGateway({ ...setup.options, ...(shared ? { stores: shared[0] } : {}) });
    gwB = shared ? await startGateway({ ...setup.options, stores: shared[1] }) : gwA;
  });

  afterAll(async () => {
    if (skip) return;
    await gwA?.close();
    if (gwB !== gwA) await gwB?.close();
    await up?.close();
    await driver.cleanup();
  });

  const client = (key: string, gw = gwA) => new OpenAI({ apiKey: key, baseURL: gw.baseURL, maxRetries: 0 });
  const balance = async (account: string) => (await gwA.stores.billing.wallet(account)).balance;
  const ledger = (account: string) => gwA.gateway.admin.ledger(account);

  async function entry(requestId: string | null, account = ACCOUNT): Promise<LedgerEntry> {
    await eventually(async () => (await ledger(account)).some((e) => e.id === requestId), `ledger entry ${requestId}`);
    await eventually(async () => (await gwA.stores.billing.openHolds(account)) === 0, 'no open hold');
    return (await ledger(account)).find((e) => e.id === requestId)!;
  }

  async function rejection(fn: () => Promise<unknown>): Promise<APIError> {
    try {
      await fn();
    } catch (err) {
      expect(err).toBeInstanceOf(APIError);
      return err as APIError;
    }
    throw new Error('expected the call to fail');
  }

  /** Creates a response as `key` (plain, or streamed) whose id is `id`. */
  async function createOwned(key: string, id: string, stream = false, gw = gwA) {
    up.setBehavior({ kind: 'response', id, usage: { input_tokens: 5, output_tokens: 3 } });
    if (!stream) return (await client(key, gw).responses.create({ model: MODEL, input: 'Start a thread', max_output_tokens: 10 })).id;
    let seen = '';
    for await (const event of await client(key, gw).responses.create({ model: MODEL, input: 'Start', max_output_tokens: 10, stream: true })) {
      if (event.type === 'response.completed') seen = event.response.id;
    }
    return seen;
  }

  it.skipIf(skip)('20 concurrent continuations of a thread against a 0.05 USD wallet: held at context length, never overdrawn', async () => {
    const id = await createOwned(keys.small, `resp_small_${driver.name}`);
    // Each continuation reads a 31,000-token thread the gateway never saw: 0.0312 USD.
    up.setBehavior({ kind: 'response', id: 'resp_next', usage: { input_tokens: 31_000, output_tokens: 100 } });
    const before = await balance(SMALL);
    const calls = Array.from({ length: 20 }, (_, i) =>
      client(keys.small, i % 2 ? gwB : gwA)
        .responses.create({ model: MODEL, input: 'Go on', previous_response_id: id, max_output_tokens: 100 })
        .withResponse()
        .then(
          (r) => ({ ok: true as const, requestId: r.response.headers.get('x-request-id') }),
          (err: APIError) => ({ ok: false as const, status: err.status }),
        ),
    );
    const results = await Promise.all(calls);
    const ok = results.filter((r) => r.ok);
    expect(ok.length).toBeGreaterThanOrEqual(1);
    expect(results.filter((r) => !r.ok).every((r) => r.status === 402)).toBe(true);
    // The hold (context length x prompt price + max output) covers what one call can cost, so
    // the wallet cannot go below zero, and no entry exceeded its hold.
    const held = CONTEXT_HOLD + chatCost(0, 100);
    expect(before).toBeLessThan(held * 2n);
    for (const r of ok) {
      const e = await entry(r.requestId, SMALL);
      expect(e.held).toBe(held);
      expect(e.cost).toBe(chatCost(31_000, 100));
      expect(e.exceededHold).toBe(false);
    }
    expect(await balance(SMALL)).toBe(before - BigInt(ok.length) * chatCost(31_000, 100));
    expect(await balance(SMALL)).toBeGreaterThanOrEqual(0n);
  });

  it.skipIf(skip)('a file by id or a part of unknown type is held at context length too (Responses and chat)', async () => {
    up.setBehavior({ kind: 'response' });
    const before = up.requests.length;
    const file = await rejection(() =>
      client(keys.chatPoor).responses.create({
        model: MODEL,
        input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'file_abc' }] }],
        max_output_tokens: 10,
      }),
    );
    expect(file.status).toBe(402);
    const chat = await rejection(() =>
      client(keys.chatPoor).chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: [{ type: 'mystery_part', ref: 'x' } as never] }],
        max_tokens: 10,
      }),
    );
    expect(chat.status).toBe(402);
    expect(up.requests.length).toBe(before);
    // The same wallet pays for what it can count.
    up.setBehavior({ kind: 'json' });
    await client(keys.chatPoor).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 });
  });

  it.skipIf(skip)('a response id is usable only by the account that created it, from either instance', async () => {
    const plain = await createOwned(devKey, `resp_owner_plain_${driver.name}`);
    const streamed = await createOwned(devKey, `resp_owner_stream_${driver.name}`, true);
    expect(streamed).toBe(`resp_owner_stream_${driver.name}`);
    up.setBehavior({ kind: 'response', id: 'resp_follow' });
    for (const id of [plain, streamed]) {
      const before = up.requests.length;
      const stolen = await rejection(() => client(keys.other, gwB).responses.create({ model: MODEL, input: 'Tell me', previous_response_id: id }));
      expect(stolen.status).toBe(404);
      expect(stolen.code).toBe('not_found');
      expect(stolen.param).toBe('previous_response_id');
      expect(up.requests.length).toBe(before);
      // The owner continues it on the other instance.
      const own = await client(devKey, gwB).responses.create({ model: MODEL, input: 'Go on', previous_response_id: id, max_output_tokens: 10 });
      expect(own.id).toBe('resp_follow');
    }
    const unknown = await rejection(() => client(devKey).responses.create({ model: MODEL, input: 'x', previous_response_id: 'resp_never_seen' }));
    expect(unknown.status).toBe(404);
    // An id longer than any (random: a repeated letter compresses under PostgreSQL's index row limit)
    // is unknown too, on every driver: never a store refusing its key (a 503 to retry).
    const huge = await rejection(() => client(devKey).responses.create({ model: MODEL, input: 'x', previous_response_id: `resp_${randomBytes(3000).toString('base64url')}` }, { maxRetries: 0 }));
    expect(huge.status).toBe(404);
    expect(huge.param).toBe('previous_response_id');
  });

  it.skipIf(skip)('a stored item is usable only by the account given it, from either instance; a conversation by none', async () => {
    for (const stream of [false, true]) {
      const itemId = `rs_${driver.name}_${stream ? 'streamed' : 'plain'}`;
      up.setBehavior({ kind: 'response', id: `resp_items_${driver.name}_${stream}`, items: [{ id: itemId, type: 'reasoning', summary: [] }] });
      if (stream) for await (const event of await client(devKey).responses.create({ model: MODEL, input: 'Think', max_output_tokens: 10, stream: true })) void event;
      else await client(devKey).responses.create({ model: MODEL, input: 'Think', max_output_tokens: 10 });
      up.setBehavior({ kind: 'response', id: 'resp_follow' });
      const byReference = [{ type: 'item_reference', id: itemId }, { role: 'user', content: 'Repeat it' }] as Plain['input'];
      const byId = [{ type: 'reasoning', id: itemId, summary: [] }, { role: 'user', content: 'Repeat it' }] as Plain['input'];
      for (const input of [byReference, byId]) {
        const before = up.requests.length;
        const stolen = await rejection(() => client(keys.other, gwB).responses.create({ model: MODEL, input, max_output_tokens: 10 }));
        expect([stolen.status, stolen.code, stolen.param]).toEqual([404, 'not_found', 'input']);
        expect(up.requests.length).toBe(before);
        // The owner uses it on the other instance (a streamed answer's items are recorded as they end, not awaited).
        await eventually(async () => {
          try {
            return (await client(devKey, gwB).responses.create({ model: MODEL, input, max_output_tokens: 10 })).id === 'resp_follow';
          } catch {
            return false;
          }
        }, `${itemId} usable by its owner`);
      }
    }
    // A reference may leave out its type (the API takes an item with neither type nor role as one).
    const before0 = up.requests.length;
    const untyped = [{ id: `rs_${driver.name}_plain` }, { role: 'user', content: 'Repeat it' }] as Plain['input'];
    const stolenUntyped = await rejection(() => client(keys.other).responses.create({ model: MODEL, input: untyped, max_output_tokens: 10 }));
    expect([stolenUntyped.status, stolenUntyped.param]).toEqual([404, 'input']);
    expect(up.requests.length).toBe(before0);
    // An item given with its content is used as given: no record needed.
    up.setBehavior({ kind: 'response', id: 'resp_follow' });
    const given = [{ type: 'reasoning', id: 'rs_never_seen', summary: [], encrypted_content: 'gAAAA' }, { role: 'user', content: 'Go on' }] as Plain['input'];
    expect((await client(keys.other).responses.create({ model: MODEL, input: given, max_output_tokens: 10 })).id).toBe('resp_follow');
    const noId = await rejection(() => client(devKey).responses.create({ model: MODEL, input: [{ type: 'item_reference' }] as Plain['input'] }));
    expect([noId.status, noId.param]).toEqual([400, 'input']);
    // No conversation is made through the gateway: none is any tenant's.
    const before = up.requests.length;
    for (const conversation of ['conv_someone_elses', { id: 'conv_someone_elses' }]) {
      const refused = await rejection(() => client(devKey).responses.create({ model: MODEL, input: 'What was said?', conversation }));
      expect([refused.status, refused.code, refused.param]).toEqual([404, 'not_found', 'conversation']);
    }
    // An id with a NUL is an unknown id on every driver (PostgreSQL's text holds none): never a 503 to retry.
    const nul = await rejection(() => client(devKey).responses.create({ model: MODEL, input: 'x', previous_response_id: 'resp_\u0000' }));
    expect([nul.status, nul.param]).toEqual([404, 'previous_response_id']);
    const nulItem = await rejection(() => client(devKey).responses.create({ model: MODEL, input: [{ type: 'item_reference', id: 'msg_\u0000' }] as Plain['input'] }));
    expect([nulItem.status, nulItem.param]).toEqual([404, 'input']);
    expect(up.requests.length).toBe(before);
  });

  it.skipIf(skip)("a chat answer's audio is given back only by the account it was given to, from either instance", async () => {
    const spoken = (id: string) => ({
      id: 'chatcmpl-audio',
      object: 'chat.completion',
      created: 1,
      model: MODEL,
      choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: null, audio: { id, data: 'AAAA', expires_at: 2, transcript: 'Hi' } } }],
      usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 },
    });
    const audioAsk = { modalities: ['text', 'audio'] as Array<'text' | 'audio'>, audio: { voice: 'alloy' as const, format: 'pcm16' as const } };
    // Plain: recorded before the answer goes out.
    up.setBehavior({ kind: 'json', body: spoken('audio_plain_1') });
    await client(devKey).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 10, ...audioAsk });
    // Streamed: the id comes in the first audio delta; recorded as it goes by.
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const chunk = (delta: unknown, finish: string | null = null) =>
          `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
        res.end(
          chunk({ role: 'assistant', content: null }) +
            chunk({ audio: { id: 'audio_streamed_1', transcript: 'Hi' } }) +
            chunk({ audio: { data: 'AAAA' } }) +
            chunk({ audio: { expires_at: 2 } }, 'stop') +
            `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } })}\n\n` +
            'data: [DONE]\n\n',
        );
      },
    });
    for await (const c of await client(devKey).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 10, stream: true, ...audioAsk })) void c;
    up.setBehavior({ kind: 'json' });
    for (const id of ['audio_plain_1', 'audio_streamed_1']) {
      const messages = [
        { role: 'user', content: 'Say hi' },
        { role: 'assistant', audio: { id } },
        { role: 'user', content: 'Again' },
      ] as OpenAI.ChatCompletionMessageParam[];
      const before = up.requests.length;
      const stolen = await rejection(() => client(keys.other, gwB).chat.completions.create({ model: MODEL, messages, max_tokens: 10 }));
      expect([stolen.status, stolen.code, stolen.param]).toEqual([404, 'not_found', 'messages']);
      expect(up.requests.length).toBe(before);
      // A plain answer's audio is recorded before the answer goes out: usable at once; a
      // streamed one's as it goes by (not awaited).
      if (id === 'audio_plain_1') expect((await client(devKey, gwB).chat.completions.create({ model: MODEL, messages, max_tokens: 10 })).choices).toHaveLength(1);
      else {
        await eventually(async () => {
          try {
            return (await client(devKey, gwB).chat.completions.create({ model: MODEL, messages, max_tokens: 10 })).choices.length === 1;
          } catch {
            return false;
          }
        }, `${id} usable by its owner`);
      }
    }
    // An audio id the gateway never relayed is nobody's.
    const unknown = await rejection(() =>
      client(devKey).chat.completions.create({ model: MODEL, messages: [{ role: 'assistant', audio: { id: 'audio_never_seen' } }, { role: 'user', content: 'x' }], max_tokens: 10 }),
    );
    expect([unknown.status, unknown.param]).toEqual([404, 'messages']);
  });

  it.skipIf(skip)('an unpriced hosted tool is 400 unsupported_tool and nothing reaches the upstream', async () => {
    const before = up.requests.length;
    const search = await rejection(() => client(devKey).responses.create({ model: MODEL, input: 'News?', tools: [{ type: 'web_search' }] }));
    expect(search.status).toBe(400);
    expect(search.code).toBe('unsupported_tool');
    expect(search.param).toBe('tools');
    const code = await rejection(() =>
      client(devKey).responses.create({ model: TOOLS_MODEL, input: 'Run it', tools: [{ type: 'code_interpreter', container: { type: 'auto' } }] }),
    );
    expect(code.code).toBe('unsupported_tool');
    const chat = await rejection(() =>
      client(devKey).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'web_search' } as never] }),
    );
    expect(chat.code).toBe('unsupported_tool');
    const chatSearch = await rejection(() => client(devKey).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], web_search_options: {} }));
    expect(chatSearch.param).toBe('web_search_options');
    expect(up.requests.length).toBe(before);
  });

  it.skipIf(skip)('/models lists the tool prices', async () => {
    const row = await client(devKey).models.retrieve(TOOLS_MODEL);
    expect((row as unknown as { pricing: unknown }).pricing).toEqual({
      prompt: PROMPT_PRICE,
      completion: COMPLETION_PRICE,
      tools: { web_search: SEARCH, image_generation: IMAGE },
    });
  });

  it.skipIf(skip)('priced web_search: held at max_tool_calls (else 10) calls, billed per reported call to the nano-USD', async () => {
    const search: Behavior = {
      kind: 'response',
      usage: { input_tokens: 20, output_tokens: 10 },
      items: [toolCall('web_search_call', 'ws_1'), toolCall('web_search_call', 'ws_2'), toolCall('web_search_call', 'ws_3')],
    };
    up.setBehavior(search);
    const expected = costOf([
      [parsePrice(PROMPT_PRICE), 20],
      [parsePrice(COMPLETION_PRICE), 10],
      [parsePrice(SEARCH), 3],
    ]);
    // Plain and streamed.
    const { response } = await client(devKey)
      .responses.create({ model: TOOLS_MODEL, input: 'News?', tools: [{ type: 'web_search' }], max_output_tokens: 50 })
      .withResponse();
    const plain = await entry(response.headers.get('x-request-id'));
    expect(plain.units).toEqual({ kind: 'tokens', prompt: 20, completion: 10, tools: { web_search: 3 } });
    expect(plain.cost).toBe(expected);
    // The hold: 10 calls (no max_tool_calls) at 0.01 on top of the tokens.
    expect(plain.held).toBeGreaterThanOrEqual(costOf([[parsePrice(SEARCH), 10]]) + chatCost(0, 50));
    const { data: stream, response: streamed } = await client(devKey, gwB)
      .responses.create({ model: TOOLS_MODEL, input: 'News?', tools: [{ type: 'web_search' }], max_tool_calls: 4, max_output_tokens: 50, stream: true } as Streaming)
      .withResponse();
    for await (const _ of stream);
    const s = await entry(streamed.headers.get('x-request-id'));
    expect(s.units).toEqual({ kind: 'tokens', prompt: 20, completion: 10, tools: { web_search: 3 } });
    expect(s.cost).toBe(expected);

  });

  it.skipIf(skip)('a 0.05 USD wallet cannot hold 10 searches (0.10 USD); with max_tool_calls: 2 it can', async () => {
    up.setBehavior({ kind: 'response', usage: { input_tokens: 5, output_tokens: 5 }, items: [toolCall('web_search_call', 'ws_9')] });
    const before = up.requests.length;
    const refused = await rejection(() =>
      client(keys.searcher).responses.create({ model: TOOLS_MODEL, input: 'x', tools: [{ type: 'web_search' }], max_output_tokens: 10 }),
    );
    expect(refused.status).toBe(402);
    expect(up.requests.length).toBe(before);
    const { response } = await client(keys.searcher)
      .responses.create({ model: TOOLS_MODEL, input: 'x', tools: [{ type: 'web_search' }], max_tool_calls: 2, max_output_tokens: 10 } as Plain)
      .withResponse();
    const e = await entry(response.headers.get('x-request-id'), SEARCHER);
    expect(e.units).toEqual({ kind: 'tokens', prompt: 5, completion: 5, tools: { web_search: 1 } });
    expect(e.cost).toBe(costOf([[parsePrice(PROMPT_PRICE), 5], [parsePrice(COMPLETION_PRICE), 5], [parsePrice(SEARCH), 1]]));
  });

  it.skipIf(skip)('image_generation: 403 for an agent key even when priced; a developer key is billed per image call', async () => {
    const before = up.requests.length;
    const agent = await rejection(() =>
      client(keys.toolsAgent).responses.create({ model: TOOLS_MODEL, input: 'Draw a cat', tools: [{ type: 'image_generation' }] }),
    );
    expect(agent.status).toBe(403);
    expect(agent.code).toBe('permission_denied');
    // The agent key of MODEL, which prices no tools: refused too.
    expect((await rejection(() => client(agentKey).responses.create({ model: MODEL, input: 'x', tools: [{ type: 'image_generation' }] }))).status).toBe(400);
    expect(up.requests.length).toBe(before);

    up.setBehavior({ kind: 'response', usage: { input_tokens: 8, output_tokens: 4 }, items: [toolCall('image_generation_call', 'ig_1')] });
    const { response } = await client(devKey)
      .responses.create({ model: TOOLS_MODEL, input: 'Draw a cat', tools: [{ type: 'image_generation' }], max_tool_calls: 1, max_output_tokens: 20 } as Plain)
      .withResponse();
    const e = await entry(response.headers.get('x-request-id'));
    expect(e.units).toEqual({ kind: 'tokens', prompt: 8, completion: 4, tools: { image_generation: 1 } });
    expect(e.cost).toBe(costOf([[parsePrice(PROMPT_PRICE), 8], [parsePrice(COMPLETION_PRICE), 4], [parsePrice(IMAGE), 1]]));
  });
});
