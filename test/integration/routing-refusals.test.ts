/**
 * A target that cannot take a request does not end the call: another target may. A target
 * whose kind cannot carry a feature of the request (Gemini and `logprobs`) is passed over,
 * whichever priority it has; and a fallback whose plugins change its body past what was held
 * (more output asked) is passed over too, never sent: the upstream is never asked for more
 * than the hold covers. When no target can take it, the client gets the refusal.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { GatewayOptions } from '../../src/index.js';
import { chatCost, chargesOf } from '../helpers/billing.js';
import { postChat, type RunningGateway, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const pricing = { prompt: '0.000001', completion: '0.000002' };
let a: TestUpstream;
let b: TestUpstream;
let gem: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let account: string;
/** What the plugin sets `max_tokens` to in a body for upstream b (null: leaves it). */
let maxTokensForB: number | null = null;

beforeAll(async () => {
  [a, b, gem] = await Promise.all([startTestUpstream(), startTestUpstream(), startTestUpstream()]);
  const setup = testConfig({
    upstreamUrl: a.url,
    models: [
      { id: 'r/openai-first', type: 'text', pricing, targets: [{ upstream: 'a', priority: 0 }, { upstream: 'g', priority: 1 }] },
      { id: 'r/gemini-first', type: 'text', pricing, targets: [{ upstream: 'g', priority: 0 }, { upstream: 'a', priority: 1 }] },
      { id: 'r/plugged', type: 'text', pricing, targets: [{ upstream: 'a', priority: 0 }, { upstream: 'b', priority: 1 }] },
    ],
  });
  devKey = setup.devKey;
  account = setup.account;
  const options: GatewayOptions = {
    ...setup.options,
    upstreams: {
      ...setup.options.upstreams,
      a: { baseUrl: a.url },
      b: { baseUrl: b.url },
      g: { kind: 'gemini', baseUrl: gem.url, apiKey: 'gemini-key' },
    },
    routing: { retries: 1, backoffMs: 1 },
    plugins: [
      {
        name: 'fallback-body',
        onUpstreamRequest: ({ model, body, setBody }) => {
          if (model.upstream === 'b' && maxTokensForB !== null) setBody({ ...body, max_tokens: maxTokensForB });
        },
      },
    ],
  };
  gw = await startGateway(options);
});
afterAll(async () => {
  await gw?.close();
  await Promise.all([a, b, gem].map((u) => u?.close()));
});
afterEach(() => {
  for (const u of [a, b, gem]) u.requests.length = 0;
  maxTokensForB = null;
});

const charges = () => chargesOf(gw.gateway.admin.ledger(account));
const ask = (model: string, extra: Record<string, unknown> = {}) => postChat(gw.baseURL, devKey, { model, messages: [{ role: 'user', content: 'hi' }], ...extra });

describe('a target that cannot take the request is passed over', () => {
  it('a kind that cannot carry logprobs, tried first: the next target serves it', async () => {
    a.setBehavior({ kind: 'json', usage: { prompt_tokens: 3, completion_tokens: 4 } });
    const res = await ask('r/gemini-first', { logprobs: true });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(a.requests).toHaveLength(1);
    expect(gem.requests).toHaveLength(0);
  });

  it('the first target failing and the only other one unable to carry it: the failure is what the client gets, not a 400', async () => {
    a.setBehavior({ kind: 'error', status: 500, message: 'broken' });
    const before = (await charges()).length;
    const res = await ask('r/openai-first', { logprobs: true });
    expect(res.status).toBe(502);
    expect(gem.requests).toHaveLength(0);
    expect((await charges()).length).toBe(before);
  });

  it('no target can carry it: the 400 names the field', async () => {
    const { options, devKey: key } = testConfig({ upstreamUrl: gem.url, models: [{ id: 'r/gemini-only', type: 'text', pricing, upstream: 'g' }] });
    const only = await startGateway({ ...options, upstreams: { ...options.upstreams, g: { kind: 'gemini', baseUrl: gem.url, apiKey: 'gemini-key' } } });
    try {
      const res = await postChat(only.baseURL, key, { model: 'r/gemini-only', messages: [{ role: 'user', content: 'hi' }], logprobs: true });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { param: string } }).error.param).toBe('logprobs');
    } finally {
      await only.close();
    }
  });

  it("a fallback whose plugins ask for more output than was held is never sent; one within the hold serves, billed once", async () => {
    a.setBehavior({ kind: 'error', status: 500, message: 'broken' });
    b.setBehavior({ kind: 'json', usage: { prompt_tokens: 3, completion_tokens: 3_000 } });
    maxTokensForB = 4_000;
    const before = (await charges()).length;
    const refused = await ask('r/plugged', { max_tokens: 10 });
    expect(refused.status).toBe(502);
    expect(b.requests).toHaveLength(0);
    expect((await charges()).length).toBe(before);

    b.setBehavior({ kind: 'json', usage: { prompt_tokens: 3, completion_tokens: 8 } });
    maxTokensForB = 8;
    const served = await ask('r/plugged', { max_tokens: 10 });
    expect(served.status).toBe(200);
    expect(b.requests).toHaveLength(1);
    expect(b.requests[0]!.body).toMatchObject({ max_tokens: 8 });
    const after = await charges();
    expect(after.length).toBe(before + 1);
    expect(after.at(-1)!.cost).toBe(chatCost(3, 8));
  });
});
