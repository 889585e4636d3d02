/**
 * The simulator's prompt cache, through the gateway: a long prefix (a system message of more
 * than 1,024 tokens) is written on its first call and read on the next, in steps of 128
 * tokens, and the gateway bills each part at the model's cache prices. A short prompt is
 * never cached.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargesOf } from '../helpers/billing.js';
import { startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';

const MODEL = 'sim/cached';
const PRICING = { prompt: '0.000002', completion: '0.000008', cachedPrompt: '0.0000005', cacheWrite: '0.0000025' };
const LONG = `You are a careful assistant. ${'Remember the house rules about lighthouses and tides. '.repeat(150)}`;

let gw: RunningGateway;
let key: string;
let account: string;
beforeAll(async () => {
  const setup = testConfig({ models: [{ id: MODEL, type: 'text', upstream: 'test', pricing: PRICING }] });
  gw = await startGateway(setup.options);
  key = setup.devKey;
  account = setup.account;
});
afterAll(() => gw?.close());

async function call(path: string, body: Record<string, unknown>) {
  const res = await fetch(`${gw.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, ...body }),
  });
  expect(res.status).toBe(200);
  const answer = (await res.json()) as { usage: Record<string, unknown> };
  const charges = await chargesOf(gw.stores.billing.ledger(account));
  return { usage: answer.usage, entry: charges[charges.length - 1]! };
}

/** Cost in nano-USD at PRICING (pico: 2_000_000, 8_000_000, 500_000, 2_500_000), rounded up. */
const nano = (prompt: number, cached: number, written: number, completion: number) =>
  (BigInt(prompt - cached - written) * 2_000_000n + BigInt(cached) * 500_000n + BigInt(written) * 2_500_000n + BigInt(completion) * 8_000_000n + 999n) / 1000n;

describe('the simulator reports cached tokens', () => {
  it('chat: the first call writes the long prefix, the next reads it, each billed at its price', async () => {
    const messages = [
      { role: 'system', content: LONG },
      { role: 'user', content: 'first question' },
    ];
    const first = await call('/chat/completions', { messages });
    const details = first.usage.prompt_tokens_details as { cached_tokens: number; cache_write_tokens: number };
    expect(details.cached_tokens).toBe(0);
    expect(details.cache_write_tokens).toBeGreaterThanOrEqual(1024);
    expect(details.cache_write_tokens % 128).toBe(0);
    const written = details.cache_write_tokens;
    const prompt = first.usage.prompt_tokens as number;
    expect(first.entry.units).toMatchObject({ prompt, cacheWrite: written });
    expect(first.entry.units).not.toHaveProperty('cachedPrompt');
    expect(first.entry.cost).toBe(nano(prompt, 0, written, first.usage.completion_tokens as number));

    // Same prefix, another last turn: a cache hit of the same length.
    const second = await call('/chat/completions', { messages: [messages[0], { role: 'user', content: 'second question' }] });
    const hit = second.usage.prompt_tokens_details as { cached_tokens: number; cache_write_tokens: number };
    expect(hit.cached_tokens).toBe(written);
    expect(hit.cache_write_tokens).toBe(0);
    expect(second.entry.units).toMatchObject({ cachedPrompt: written });
    expect(second.entry.units).not.toHaveProperty('cacheWrite');
    expect(second.entry.cost).toBe(nano(second.usage.prompt_tokens as number, written, 0, second.usage.completion_tokens as number));
    expect(second.entry.cost).toBeLessThan(first.entry.cost);
  });

  it('Responses: instructions are the cached prefix', async () => {
    const first = await call('/responses', { instructions: LONG, input: 'one' });
    const written = (first.usage.input_tokens_details as { cache_write_tokens: number }).cache_write_tokens;
    expect(written).toBeGreaterThanOrEqual(1024);
    const second = await call('/responses', { instructions: LONG, input: 'two' });
    expect((second.usage.input_tokens_details as { cached_tokens: number }).cached_tokens).toBe(written);
    expect(second.entry.units).toMatchObject({ cachedPrompt: written });
  });

  it('a short prompt is never cached', async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'hi' },
    ];
    await call('/chat/completions', { messages });
    const again = await call('/chat/completions', { messages });
    expect(again.usage.prompt_tokens_details).toEqual({ cached_tokens: 0, cache_write_tokens: 0 });
    expect(Object.keys(again.entry.units).sort()).toEqual(['completion', 'kind', 'prompt']);
  });
});
