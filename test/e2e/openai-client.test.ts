/**
 * The official `openai` SDK against a real node:http gateway server in front of a test
 * upstream: answers, exact billing, and the SDK's error classes with code / param / request id.
 */
import OpenAI, {
  APIError,
  AuthenticationError,
  BadRequestError,
  NotFoundError,
  PermissionDeniedError,
} from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { affordableUnits, formatUsd, parseUsd } from '../../src/billing/money.js';
import { COMPLETION_PICO, PROMPT_PICO, chatCost, promptEstimate, chargesOf } from '../helpers/billing.js';
import { ACCOUNT, MODEL, eventually, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const OTHER_MODEL = 'test/other';
const POOR = 'acct_poor';
const POOR_WALLET = '0.001'; // 1,000,000 nano-USD
const poorKey = testKey();
const WALLET = parseUsd(100);

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let agentKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({
    upstreamUrl: up.url,
    walletUsd: 100,
    // The 402 test asks for 100,000 output tokens: the model must allow that many.
    maxOutputTokens: 100_000,
    models: [
      {
        id: OTHER_MODEL,
        type: 'text',
        upstream: 'test',
        pricing: { prompt: '0.000001', completion: '0.000002' },
      },
    ],
    accounts: [{ id: POOR, walletUsd: POOR_WALLET }],
    keys: [{ key: poorKey, account: POOR, kind: 'developer' }],
  });
  devKey = setup.devKey;
  agentKey = setup.agentKey;
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw.close();
  await up.close();
});

const client = (apiKey: string, maxRetries = 0) => new OpenAI({ apiKey, baseURL: gw.baseURL, maxRetries });

async function ledgerOf(account: string, n: number) {
  await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(account))).length === n, `${n} ledger entries`);
  await eventually(async () => (await gw.stores.billing.openHolds(account)) === 0, 'no open hold');
  return chargesOf(gw.gateway.admin.ledger(account));
}

/** Runs `fn`, expecting it to throw; returns the error. */
async function rejection(fn: () => Promise<unknown>): Promise<unknown> {
  try {
    await fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected the call to fail');
}

describe('chat with the openai SDK', () => {
  it('plain: content relayed, billed exactly usage x price', async () => {
    up.setBehavior({ kind: 'json', content: 'Hello, SDK!', usage: { prompt_tokens: 12, completion_tokens: 5 } });
    const before = (await chargesOf(gw.gateway.admin.ledger(ACCOUNT))).length;
    const { data, response } = await client(devKey)
      .chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 20 })
      .withResponse();
    expect(data.choices[0]!.message.content).toBe('Hello, SDK!');
    expect(data.model).toBe(MODEL);
    expect(data.usage).toMatchObject({ prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 });
    expect(response.headers.get('x-request-id')).toMatch(/^req_/);
    expect(response.headers.get('x-ratelimit-limit-requests')).toBe('100000');

    const ledger = await ledgerOf(ACCOUNT, before + 1);
    const entry = ledger.at(-1)!;
    // 12 x 0.000001 + 5 x 0.000002 = 0.000022 USD = 22,000 nano-USD.
    expect(entry.cost).toBe(22_000n);
    expect(entry.cost).toBe(chatCost(12, 5));
    expect(entry).toMatchObject({
      id: response.headers.get('x-request-id'),
      accountId: ACCOUNT,
      model: MODEL,
      units: { kind: 'tokens', prompt: 12, completion: 5 },
    });
    const spent = ledger.reduce((s, e) => s + e.cost, 0n);
    expect(await gw.gateway.admin.wallet(ACCOUNT)).toEqual({
      balanceUsd: formatUsd(WALLET - spent),
      heldUsd: '0',
    });
    expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(WALLET - spent);
  });

  it('streamed: content relayed chunk by chunk, billed exactly the upstream usage', async () => {
    up.setBehavior({
      kind: 'stream',
      chunks: ['Stream', 'ing ', 'works', '.'],
      usageCounts: { prompt_tokens: 30, completion_tokens: 4 },
    });
    const before = await chargesOf(gw.gateway.admin.ledger(ACCOUNT));
    const stream = await client(devKey).chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Stream please' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: unknown = null;
    const finishReasons: Array<string | null> = [];
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        text += c.delta.content ?? '';
        finishReasons.push(c.finish_reason);
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe('Streaming works.');
    expect(finishReasons.at(-1)).toBe('stop');
    expect(usage).toMatchObject({ prompt_tokens: 30, completion_tokens: 4 });

    const ledger = await ledgerOf(ACCOUNT, before.length + 1);
    const entry = ledger.at(-1)!;
    expect(entry.units).toEqual({ kind: 'tokens', prompt: 30, completion: 4 });
    expect(entry.cost).toBe(38_000n); // 30 x 1,000 + 4 x 2,000 nano-USD
    const spent = ledger.reduce((s, e) => s + e.cost, 0n);
    expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(WALLET - spent);
  });
});

describe('SDK error classes', () => {
  beforeEach(() => up.setBehavior({ kind: 'json' }));

  it('401 AuthenticationError for an unknown key, with code and request id', async () => {
    const err = await rejection(() =>
      client(testKey()).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }),
    );
    expect(err).toBeInstanceOf(AuthenticationError);
    const e = err as AuthenticationError;
    expect(e.status).toBe(401);
    expect(e.code).toBe('invalid_api_key');
    expect(e.type).toBe('authentication_error');
    expect(e.requestID).toMatch(/^req_[0-9a-f]{32}$/);
  });

  it('404 NotFoundError for an unknown model, with code model_not_found and param model', async () => {
    const err = await rejection(() =>
      client(devKey).chat.completions.create({ model: 'nope/unknown', messages: [{ role: 'user', content: 'x' }] }),
    );
    expect(err).toBeInstanceOf(NotFoundError);
    const e = err as NotFoundError;
    expect(e.status).toBe(404);
    expect(e.code).toBe('model_not_found');
    expect(e.param).toBe('model');
    expect(e.type).toBe('invalid_request_error');
    expect(e.requestID).toMatch(/^req_/);
  });

  it('BadRequestError with param for an invalid reasoning_effort', async () => {
    const err = await rejection(() =>
      client(devKey).chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: 'x' }],
        reasoning_effort: 'extreme' as 'low',
      }),
    );
    expect(err).toBeInstanceOf(BadRequestError);
    const e = err as BadRequestError;
    expect(e.status).toBe(400);
    expect(e.code).toBe('invalid_request');
    expect(e.param).toBe('reasoning_effort');
    expect(e.requestID).toMatch(/^req_/);
  });

  it('403 PermissionDeniedError for an agent key calling another model', async () => {
    const err = await rejection(() =>
      client(agentKey).chat.completions.create({ model: OTHER_MODEL, messages: [{ role: 'user', content: 'x' }] }),
    );
    expect(err).toBeInstanceOf(PermissionDeniedError);
    const e = err as PermissionDeniedError;
    expect(e.status).toBe(403);
    expect(e.code).toBe('model_not_allowed');
    expect(e.type).toBe('permission_error');
    expect(e.param).toBe('model');
    expect(e.requestID).toMatch(/^req_/);
  });

  it('the agent key may call its own model', async () => {
    const res = await client(agentKey).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] });
    expect(res.choices[0]!.message.content).toBe('Hello from the test upstream.');
  });

  it('no key material in error messages', async () => {
    const key = testKey();
    const err = (await rejection(() =>
      client(key).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }),
    )) as APIError;
    expect(err.message).not.toContain(key);
    expect(err.message).not.toContain(key.slice(12));
  });
});

describe('402 insufficient_quota', () => {
  it('is not retried: one request reaches the gateway, none the upstream', async () => {
    up.setBehavior({ kind: 'json' });
    const messages = [{ role: 'user' as const, content: 'Write a novel.' }];
    const gatewayBefore = gw.requestCount();
    const upstreamBefore = up.requests.length;
    const err = await rejection(() =>
      client(poorKey, 3).chat.completions.create({ model: MODEL, messages, max_tokens: 100_000 }),
    );
    expect(err).toBeInstanceOf(APIError);
    const e = err as APIError;
    expect(e.status).toBe(402);
    expect(e.code).toBe('insufficient_quota');
    expect(e.type).toBe('insufficient_quota');
    expect(e.headers?.get('x-should-retry')).toBe('false');
    expect(e.requestID).toMatch(/^req_/);
    expect(gw.requestCount() - gatewayBefore).toBe(1);
    expect(up.requests.length - upstreamBefore).toBe(0);

    // OpenRouter's wording, with the numbers of this request.
    const estimate = await promptEstimate(messages);
    const affordable = affordableUnits(parseUsd(POOR_WALLET), PROMPT_PICO * BigInt(estimate), COMPLETION_PICO);
    expect(affordable).toBe(BigInt(Math.floor((1_000_000 * 1000 - estimate * 1_000_000) / 2_000_000)));
    expect(e.message).toBe(
      `402 This request requires more credits, or fewer max_tokens. You requested up to 100000 tokens, but can only afford ${affordable}.`,
    );
    const body = e.error as { metadata?: Record<string, unknown> };
    expect(body.metadata).toEqual({ limit_source: 'wallet', affordable_max_tokens: Number(affordable) });

    // The affordable amount really is affordable, and nothing was charged for the refusal.
    expect((await gw.stores.billing.wallet(POOR)).balance).toBe(parseUsd(POOR_WALLET));
    up.setBehavior({ kind: 'json', usage: { prompt_tokens: 1, completion_tokens: 1 } });
    const ok = await client(poorKey).chat.completions.create({ model: MODEL, messages, max_tokens: Number(affordable) });
    expect(ok.choices).toHaveLength(1);

    // With n choices the cap is per choice, and so is what the 402 says can be afforded: a
    // retry with it is held, not refused again.
    const many = (await rejection(() => client(poorKey).chat.completions.create({ model: MODEL, messages, n: 3, max_tokens: 100_000 }))) as APIError;
    const perChoice = affordable / 3n;
    expect(many.message).toBe(
      `402 This request requires more credits, or fewer max_tokens. You requested up to 100000 tokens, but can only afford ${perChoice}.`,
    );
    expect((many.error as { metadata?: Record<string, unknown> }).metadata).toEqual({ limit_source: 'wallet', affordable_max_tokens: Number(perChoice) });
    const retried = await client(poorKey).chat.completions.create({ model: MODEL, messages, n: 3, max_tokens: Number(perChoice) });
    expect(retried.choices).toHaveLength(1);
  });
});
