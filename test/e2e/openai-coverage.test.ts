/**
 * The OpenAI API beyond chat, with the official `openai` SDK (and the Vercel AI SDK) against
 * a real node:http gateway: models.retrieve, embeddings, the Responses API (plain and
 * streamed), legacy completions (plain and streamed), the context-window and output-cap
 * checks, and videos.list / delete. Every billed call is checked in the ledger, to the nano-USD.
 */
import { createOpenAI } from '@ai-sdk/openai';
import { embed, generateText } from 'ai';
import OpenAI, { APIError, BadRequestError, NotFoundError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { costOf, parsePrice, parseUsd } from '../../src/billing/money.js';
import type { LedgerEntry } from '../../src/stores/types.js';
import { chatCost, loadTokenizer, chargesOf } from '../helpers/billing.js';
import { ACCOUNT, MODEL, UPSTREAM_MODEL, eventually, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { VIDEO, mediaModels } from '../helpers/media.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const EMBED = 'test/embed';
const EMBED_PRICE = '0.0000001';
const SMALL = 'test/small-context';
const POOR = 'acct_poor';
const poorKey = testKey();
const OTHER = 'acct_other';
const otherKey = testKey();

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let agentKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({
    upstreamUrl: up.url,
    models: [
      { id: EMBED, type: 'text', upstream: 'test', upstreamModel: 'provider-embed-1', embedding: true, pricing: { prompt: EMBED_PRICE, completion: '0' }, contextLength: 50 },
      { id: SMALL, type: 'text', upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000002' }, contextLength: 100, maxOutputTokens: 64 },
      ...mediaModels('sim'),
    ],
    accounts: [
      { id: POOR, walletUsd: 0 },
      { id: OTHER, walletUsd: 10 },
    ],
    keys: [
      { key: poorKey, account: POOR, kind: 'developer' },
      { key: otherKey, account: OTHER, kind: 'developer' },
    ],
    brands: [{ id: 'acme', account: ACCOUNT, name: 'Acme', voice: 'Warm and brief.' }],
    limits: { jobPollIntervalMs: 20 },
  });
  setup.options.upstreams = { ...setup.options.upstreams, sim: { simulate: true, imageDelayMs: 0, videoDurationMs: 0, chunkDelayMs: 0 } };
  devKey = setup.devKey;
  agentKey = setup.agentKey;
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const client = (apiKey = devKey) => new OpenAI({ apiKey, baseURL: gw.baseURL, maxRetries: 0 });
const balance = async (account = ACCOUNT) => (await gw.stores.billing.wallet(account)).balance;

/** The one ledger entry of `requestId`, once it is there and no hold is open. */
async function entry(requestId: string | null | undefined, account = ACCOUNT): Promise<LedgerEntry> {
  expect(requestId).toMatch(/^req_/);
  await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(account))).some((e) => e.id === requestId), `ledger entry ${requestId}`);
  await eventually(async () => (await gw.stores.billing.openHolds(account)) === 0, 'no open hold');
  const all = (await chargesOf(gw.gateway.admin.ledger(account))).filter((e) => e.id === requestId);
  expect(all).toHaveLength(1);
  return all[0]!;
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

/** A refused call: 402 with no upstream call and nothing charged. */
async function expectRefused(fn: () => Promise<unknown>): Promise<APIError> {
  const upstreamBefore = up.requests.length;
  const before = await balance(POOR);
  const err = await rejection(fn);
  expect(err.status).toBe(402);
  expect(err.code).toBe('insufficient_quota');
  expect(err.headers?.get('x-should-retry')).toBe('false');
  expect(up.requests.length).toBe(upstreamBefore);
  expect(await balance(POOR)).toBe(before);
  return err;
}

const embedCost = (tokens: number) => costOf([[parsePrice(EMBED_PRICE), tokens]]);

describe('models.retrieve', () => {
  it('returns the row of the listing, for ids with a slash; 404 model_not_found when not visible', async () => {
    const listed = (await client().models.list()).data.find((m) => m.id === MODEL);
    const model = await client().models.retrieve(MODEL);
    expect(model).toEqual(listed);
    expect(model).toMatchObject({ id: MODEL, object: 'model', context_length: 32_000, pricing: { prompt: '0.000001', completion: '0.000002' } });
    // Media rows are retrievable too, as `?type=video` lists them.
    expect(await client().models.retrieve(VIDEO)).toMatchObject({ id: VIDEO, type: 'video', pricing: { unit: 'second' } });

    const unknown = await rejection(() => client().models.retrieve('test/nope'));
    expect(unknown).toBeInstanceOf(NotFoundError);
    expect(unknown.code).toBe('model_not_found');
    expect(unknown.param).toBe('model');
    // An agent key sees only its own model.
    expect((await client(agentKey).models.retrieve(MODEL)).id).toBe(MODEL);
    expect((await rejection(() => client(agentKey).models.retrieve(EMBED))).code).toBe('model_not_found');
  });
});

describe('embeddings.create', () => {
  it('bills the upstream-reported input tokens at the prompt price, completion 0', async () => {
    up.setBehavior({ kind: 'embeddings', promptTokens: 9 });
    const before = await balance();
    const { data, response } = await client().embeddings.create({ model: EMBED, input: ['first text', 'second text'], encoding_format: 'float' }).withResponse();
    expect(data.model).toBe(EMBED);
    expect(data.data).toHaveLength(2);
    expect(data.data[0]!.embedding).toEqual([0.1, 0.2, 0.3]);
    expect(up.requests.at(-1)!.body).toMatchObject({ model: 'provider-embed-1', input: ['first text', 'second text'] });
    const e = await entry(response.headers.get('x-request-id'));
    expect(e).toMatchObject({ model: EMBED, units: { kind: 'tokens', prompt: 9, completion: 0 }, measured: 'usage' });
    expect(e.cost).toBe(embedCost(9));
    expect(await balance()).toBe(before - e.cost);
  });

  it('without usage, counts the input with the tokenizer (token arrays by their length)', async () => {
    const tokenizer = await loadTokenizer();
    up.setBehavior({ kind: 'embeddings', promptTokens: null });
    const text = 'The quick brown fox jumps over the lazy dog.';
    const a = await client().embeddings.create({ model: EMBED, input: text, encoding_format: 'float' }).withResponse();
    expect((await entry(a.response.headers.get('x-request-id'))).units).toEqual({ kind: 'tokens', prompt: tokenizer.count(text), completion: 0 });
    const b = await client().embeddings.create({ model: EMBED, input: [[1, 2, 3], [4, 5]], encoding_format: 'float' }).withResponse();
    const e = await entry(b.response.headers.get('x-request-id'));
    expect(e).toMatchObject({ units: { kind: 'tokens', prompt: 5, completion: 0 }, measured: 'tokenizer' });
    expect(e.cost).toBe(embedCost(5));
  });

  it('bad input: 400 with param; a chat model is not an embedding model; an input over the context window', async () => {
    const before = up.requests.length;
    const empty = await rejection(() => client().embeddings.create({ model: EMBED, input: [] }));
    expect(empty).toBeInstanceOf(BadRequestError);
    expect(empty.param).toBe('input');
    expect((await rejection(() => client().embeddings.create({ model: EMBED, input: [1.5] as unknown as number[] }))).param).toBe('input');
    const chat = await rejection(() => client().embeddings.create({ model: MODEL, input: 'x' }));
    expect(chat.status).toBe(404);
    expect(chat.code).toBe('model_not_found');
    const long = await rejection(() => client().embeddings.create({ model: EMBED, input: ['short', 'word '.repeat(200)] }));
    expect(long.status).toBe(400);
    expect(long.code).toBe('context_length_exceeded');
    expect(long.param).toBe('input');
    expect(up.requests.length).toBe(before);
  });

  it('402 when the wallet cannot pay for the input', async () => {
    const err = await expectRefused(() => client(poorKey).embeddings.create({ model: EMBED, input: 'hello there' }));
    expect(err.message).toContain('input tokens');
  });
});

describe('responses.create', () => {
  it('plain: output relayed, billed usage x price; brand text goes in front of instructions', async () => {
    up.setBehavior({ kind: 'response', chunks: ['Hi', ' there'], usage: { input_tokens: 40, output_tokens: 2 } });
    const before = await balance();
    const { data, response } = await client()
      .responses.create({ model: MODEL, input: 'Say hi', instructions: 'Be short.', max_output_tokens: 50, brand: 'acme' } as OpenAI.Responses.ResponseCreateParamsNonStreaming)
      .withResponse();
    expect(data.output_text).toBe('Hi there');
    expect(data.model).toBe(MODEL);
    const sent = up.requests.at(-1)!;
    expect(sent.path).toBe('/v1/responses');
    expect(sent.body?.model).toBe(UPSTREAM_MODEL);
    expect(sent.body).not.toHaveProperty('brand');
    expect(String(sent.body?.instructions)).toMatch(/^You write on behalf of the brand "Acme"[\s\S]*Warm and brief\.\n\nBe short\.$/);
    const e = await entry(response.headers.get('x-request-id'));
    expect(e).toMatchObject({ model: MODEL, units: { kind: 'tokens', prompt: 40, completion: 2 }, measured: 'usage' });
    expect(e.cost).toBe(chatCost(40, 2));
    expect(await balance()).toBe(before - e.cost);
  });

  it('stream: typed events relayed in order, billed from response.completed', async () => {
    up.setBehavior({ kind: 'response', chunks: ['One', ' two', ' three'], usage: { input_tokens: 21, output_tokens: 3 } });
    const { data: stream, response } = await client().responses.create({ model: MODEL, input: 'Count', stream: true }).withResponse();
    const types: string[] = [];
    let text = '';
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completed = event.response;
    }
    expect(types).toEqual([
      'response.created',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.completed',
    ]);
    expect(text).toBe('One two three');
    // The client sees the model it called, also inside the streamed response objects.
    expect(completed?.model).toBe(MODEL);
    const e = await entry(response.headers.get('x-request-id'));
    expect(e).toMatchObject({ units: { kind: 'tokens', prompt: 21, completion: 3 }, measured: 'usage' });
    expect(e.cost).toBe(chatCost(21, 3));
  });

  it('stream without usage: the produced deltas are counted with the tokenizer', async () => {
    const tokenizer = await loadTokenizer();
    up.setBehavior({ kind: 'response', chunks: ['Counted', ' by the', ' gateway'], usage: null });
    const { data: stream, response } = await client().responses.create({ model: MODEL, input: 'Go', stream: true }).withResponse();
    for await (const _ of stream);
    const e = await entry(response.headers.get('x-request-id'));
    expect(e.measured).toBe('tokenizer');
    expect(e.units).toMatchObject({ kind: 'tokens', completion: tokenizer.count('Counted by the gateway') });
  });

  it('a mid-stream upstream error becomes one error event and the end; what was produced is billed', async () => {
    const tokenizer = await loadTokenizer();
    up.setBehavior({ kind: 'response', chunks: ['Partial', ' answer', ' never', ' finished'], errorAfter: 2 });
    const res = await fetch(`${gw.baseURL}/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: 'Go', stream: true }),
    });
    expect(res.status).toBe(200);
    const body = await res.text();
    const blocks = body.trim().split('\n\n');
    const last = blocks.at(-1)!;
    expect(last.startsWith('event: error\ndata: ')).toBe(true);
    const error = JSON.parse(last.slice('event: error\ndata: '.length)) as Record<string, unknown>;
    expect(error).toMatchObject({ type: 'error', code: 'upstream_error', message: 'upstream broke mid-answer', error: { code: 'upstream_error', type: 'upstream_error' } });
    expect(body).not.toContain('response.completed');
    const e = await entry(res.headers.get('x-request-id'));
    expect(e).toMatchObject({ measured: 'tokenizer', units: { completion: tokenizer.count('Partial answer') } });

    // The SDK raises it.
    const { data: stream } = await client().responses.create({ model: MODEL, input: 'Go', stream: true }).withResponse();
    await expect(async () => {
      for await (const _ of stream);
    }).rejects.toBeInstanceOf(APIError);
  });

  it('bad input and limits: 400 with param, before any upstream call', async () => {
    const before = up.requests.length;
    const cap = await rejection(() => client().responses.create({ model: SMALL, input: 'x', max_output_tokens: 65 }));
    expect(cap).toBeInstanceOf(BadRequestError);
    expect(cap.param).toBe('max_output_tokens');
    const long = await rejection(() => client().responses.create({ model: SMALL, input: 'word '.repeat(150) }));
    expect(long.code).toBe('context_length_exceeded');
    expect(long.param).toBe('input');
    const bad = await rejection(() => client().responses.create({ model: MODEL, input: 42 as unknown as string }));
    expect(bad.param).toBe('input');
    const background = await rejection(() => client().responses.create({ model: MODEL, input: 'x', background: true }));
    expect(background.param).toBe('background');
    expect(up.requests.length).toBe(before);
  });

  it('402 when the wallet cannot hold the worst case', async () => {
    const err = await expectRefused(() => client(poorKey).responses.create({ model: MODEL, input: 'Write a novel.', max_output_tokens: 1000 }));
    expect(err.message).toMatch(/You requested up to 1000 tokens, but can only afford 0\./);
    expect((err.error as { metadata?: unknown }).metadata).toEqual({ limit_source: 'wallet', affordable_max_tokens: 0 });
  });
});

describe('completions.create', () => {
  it('plain: text relayed, billed usage x price', async () => {
    up.setBehavior({ kind: 'completion', chunks: ['Once', ' upon'], usage: { prompt_tokens: 4, completion_tokens: 2 } });
    const { data, response } = await client().completions.create({ model: MODEL, prompt: 'Tell me a story', max_tokens: 20 }).withResponse();
    expect(data.choices[0]!.text).toBe('Once upon');
    expect(data.model).toBe(MODEL);
    expect(up.requests.at(-1)!.body).toMatchObject({ model: UPSTREAM_MODEL, prompt: 'Tell me a story' });
    const e = await entry(response.headers.get('x-request-id'));
    expect(e).toMatchObject({ units: { kind: 'tokens', prompt: 4, completion: 2 }, measured: 'usage' });
    expect(e.cost).toBe(chatCost(4, 2));
  });

  it('stream: chunks relayed, [DONE] at the end; usage asked for upstream but passed on only when the client asked', async () => {
    up.setBehavior({ kind: 'completion', chunks: ['a', 'b', 'c'], usage: { prompt_tokens: 6, completion_tokens: 3 } });
    const { data: stream, response } = await client().completions.create({ model: MODEL, prompt: 'abc', stream: true }).withResponse();
    let text = '';
    let sawUsage = false;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      if (chunk.usage) sawUsage = true;
    }
    expect(text).toBe('abc');
    expect(sawUsage).toBe(false);
    expect(up.requests.at(-1)!.body?.stream_options).toEqual({ include_usage: true });
    const e = await entry(response.headers.get('x-request-id'));
    expect(e).toMatchObject({ units: { kind: 'tokens', prompt: 6, completion: 3 }, measured: 'usage' });

    const withUsage = await client().completions.create({ model: MODEL, prompt: 'abc', stream: true, stream_options: { include_usage: true } });
    let usage: unknown;
    for await (const chunk of withUsage) if (chunk.usage) usage = chunk.usage;
    expect(usage).toMatchObject({ prompt_tokens: 6, completion_tokens: 3 });
  });

  it('a stream cut by the upstream ends with an error event and [DONE]; produced text is billed', async () => {
    const tokenizer = await loadTokenizer();
    up.setBehavior({ kind: 'completion', chunks: ['alpha', ' beta', ' gamma'], resetAfter: 2 });
    const res = await fetch(`${gw.baseURL}/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: 'Go', stream: true }),
    });
    const body = await res.text();
    const events = body.trim().split('\n\n').map((b) => b.slice('data: '.length));
    expect(events.at(-1)).toBe('[DONE]');
    expect(JSON.parse(events.at(-2)!)).toMatchObject({ error: { code: 'upstream_error' }, choices: [{ finish_reason: 'error' }] });
    const e = await entry(res.headers.get('x-request-id'));
    expect(e).toMatchObject({ measured: 'tokenizer', units: { completion: tokenizer.count('alpha beta') } });
  });

  it('bad input, output cap, context window: 400 with param; 402 when unaffordable', async () => {
    const before = up.requests.length;
    expect((await rejection(() => client().completions.create({ model: MODEL } as unknown as OpenAI.CompletionCreateParamsNonStreaming))).param).toBe('prompt');
    const cap = await rejection(() => client().completions.create({ model: SMALL, prompt: 'x', max_tokens: 100 }));
    expect(cap.param).toBe('max_tokens');
    const long = await rejection(() => client().completions.create({ model: SMALL, prompt: 'word '.repeat(150) }));
    expect(long.code).toBe('context_length_exceeded');
    expect(long.param).toBe('prompt');
    expect(up.requests.length).toBe(before);
    await expectRefused(() => client(poorKey).completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 10 }));
  });
});

describe('chat completions: context window and output cap', () => {
  it('a prompt over the context window is 400 context_length_exceeded (param messages); max_tokens over the cap is 400', async () => {
    const before = up.requests.length;
    const long = await rejection(() =>
      client().chat.completions.create({ model: SMALL, messages: [{ role: 'user', content: 'word '.repeat(150) }] }),
    );
    expect(long).toBeInstanceOf(BadRequestError);
    expect(long.code).toBe('context_length_exceeded');
    expect(long.param).toBe('messages');
    // A huge prompt is refused up front (and quickly), not relayed.
    const huge = await rejection(() => client().chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x'.repeat(900_000) }] }));
    expect(huge.code).toBe('context_length_exceeded');
    const cap = await rejection(() => client().chat.completions.create({ model: SMALL, messages: [{ role: 'user', content: 'x' }], max_completion_tokens: 65 }));
    expect(cap.param).toBe('max_completion_tokens');
    expect(up.requests.length).toBe(before);
  });
});

describe('videos.list / delete', () => {
  it("pages the account's video jobs, seconds as a string; deletes finished jobs only", async () => {
    const made: string[] = [];
    for (const prompt of ['one', 'two', 'three']) made.push((await client().videos.create({ model: VIDEO, prompt, seconds: '4' })).id);
    await eventually(async () => {
      const all = await Promise.all(made.map((id) => client().videos.retrieve(id)));
      return all.every((v) => v.status === 'completed');
    }, 'videos completed');
    const first = await client().videos.retrieve(made[0]!);
    expect(first.seconds).toBe('4');
    // The listing's order: created_at (seconds), then id for jobs of the same second.
    const created = new Map<string, number>();
    for (const id of made) created.set(id, (await client().videos.retrieve(id)).created_at);
    made.sort((a, b) => created.get(a)! - created.get(b)! || (a < b ? -1 : a > b ? 1 : 0));

    const page = await client().videos.list({ limit: 2, order: 'asc' });
    expect(page.data.map((v) => v.id)).toEqual(made.slice(0, 2));
    expect(page.has_more).toBe(true);
    expect(page.data[0]!.seconds).toBe('4');
    const all: string[] = [];
    for await (const v of client().videos.list({ limit: 2, order: 'asc' })) all.push(v.id);
    expect(all).toEqual(made);
    expect((await client().videos.list()).data.map((v) => v.id)).toEqual([...made].reverse());
    // Another account sees none of them.
    expect((await client(otherKey).videos.list()).data).toEqual([]);

    const bad = await rejection(() => client().videos.list({ limit: 0 }));
    expect(bad.param).toBe('limit');
    expect((await rejection(() => client().videos.list({ order: 'up' as 'asc' }))).param).toBe('order');
    expect((await rejection(() => client(otherKey).videos.list({ after: made[0] }))).param).toBe('after');

    expect((await rejection(() => client(otherKey).videos.delete(made[1]!))).code).toBe('job_not_found');
    const deleted = await client().videos.delete(made[1]!);
    expect(deleted).toEqual({ id: made[1], object: 'video.deleted', deleted: true });
    expect((await rejection(() => client().videos.retrieve(made[1]!))).status).toBe(404);
    const left: string[] = [];
    for await (const v of client().videos.list({ order: 'asc' })) left.push(v.id);
    expect(left).toEqual([made[0], made[2]]);
    // Deleting forgets the job, never its charge.
    expect((await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).some((e) => e.id === made[1])).toBe(true);
  });

  it('a job still running cannot be deleted', async () => {
    // A video that stays queued: the upstream takes long enough for the delete to come first.
    const slow = await startGateway({
      ...testConfig({ models: mediaModels('test') }).options,
      upstreams: { test: { simulate: true, imageDelayMs: 0, videoDurationMs: 60_000, chunkDelayMs: 0 } },
    });
    try {
      const key = (slow.gateway.config.keys[0] as { key: string }).key;
      const c = new OpenAI({ apiKey: key, baseURL: slow.baseURL, maxRetries: 0 });
      const video = await c.videos.create({ model: VIDEO, prompt: 'slow', seconds: '4' });
      const err = await rejection(() => c.videos.delete(video.id));
      expect(err.status).toBe(400);
      expect(err.param).toBe('id');
      expect((await c.videos.retrieve(video.id)).id).toBe(video.id);
    } finally {
      await slow.close();
    }
  });
});

describe('Vercel AI SDK (@ai-sdk/openai)', () => {
  it('embed() and generateText over the Responses provider, billed exactly', async () => {
    const provider = createOpenAI({ apiKey: devKey, baseURL: gw.baseURL });
    up.setBehavior({ kind: 'embeddings', promptTokens: 3 });
    const before = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;
    const { embedding, usage } = await embed({ model: provider.embedding(EMBED), value: 'sunny day', maxRetries: 0 });
    expect(embedding).toEqual([0.1, 0.2, 0.3]);
    expect(usage.tokens).toBe(3);

    up.setBehavior({ kind: 'response', chunks: ['Hello', ' AI SDK'], usage: { input_tokens: 8, output_tokens: 2 } });
    const result = await generateText({ model: provider.responses(MODEL), prompt: 'Say hello', maxRetries: 0 });
    expect(result.text).toBe('Hello AI SDK');
    expect(up.requests.at(-1)!.path).toBe('/v1/responses');

    await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length === before + 2, 'two ledger entries');
    const [a, b] = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).slice(-2);
    expect(a).toMatchObject({ model: EMBED, units: { kind: 'tokens', prompt: 3, completion: 0 } });
    expect(a!.cost).toBe(embedCost(3));
    expect(b).toMatchObject({ model: MODEL, units: { kind: 'tokens', prompt: 8, completion: 2 } });
    expect(b!.cost).toBe(chatCost(8, 2));
  });
});

// Wallet figures are exact bigints; a sanity check of the helper's unit.
it('embedCost is nano-USD', () => {
  expect(embedCost(10)).toBe(parseUsd('0.000001'));
});
