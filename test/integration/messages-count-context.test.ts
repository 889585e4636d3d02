/**
 * `POST /messages/count_tokens` counts what the same `/messages` call is billed for as prompt:
 * the brand and knowledge the gateway puts in front of `system` included, and an unknown
 * knowledge id is the same 404 there as on the call.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACCOUNT, MODEL, type RunningGateway, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const TEXT = Array.from({ length: 40 }, (_, i) => `Kettles bought in store ${i} may be returned within 45 days for a refund of the full price.`).join(' ');
const QUESTION = 'How many days do I have to return a kettle for a refund?';
let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url });
  devKey = setup.devKey;
  gw = await startGateway({
    ...setup.options,
    brands: [{ id: 'kettleco', account: ACCOUNT, name: 'KettleCo', description: 'Makers of kettles.', voice: 'Cheerful, short sentences, British spelling.' }],
    documents: [{ id: 'returns', account: ACCOUNT, brand: 'kettleco', title: 'Returns policy', text: TEXT }],
  });
});

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const post = (path: string, body: Record<string, unknown>) =>
  fetch(`${gw.baseURL}${path}`, {
    method: 'POST',
    headers: { 'x-api-key': devKey, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: QUESTION }], ...body }),
  });

describe('count_tokens with brand and knowledge', () => {
  it('counts the brand and knowledge text the Messages call sends, exactly as the call holds it', async () => {
    const bare = (await (await post('/messages/count_tokens', {})).json()) as { input_tokens: number };
    const res = await post('/messages/count_tokens', { brand: 'kettleco', knowledge: ['returns'] });
    expect(res.status).toBe(200);
    const counted = ((await res.json()) as { input_tokens: number }).input_tokens;
    expect(counted).toBeGreaterThan(bare.input_tokens + 50);
    // The same call, sent: the upstream receives the brand and knowledge as system text; its
    // prompt, counted the way count_tokens counts, is the figure above.
    up.setBehavior({ kind: 'json' });
    const call = await post('/messages', { max_tokens: 5, brand: 'kettleco', knowledge: ['returns'] });
    expect(call.status).toBe(200);
    await call.arrayBuffer();
    const sent = up.requests.at(-1)!.body as { messages: Array<{ role: string; content: string }> };
    const system = sent.messages.filter((m) => m.role === 'system').map((m) => m.content).join('\n\n');
    expect(system).toContain('KettleCo');
    expect(system).toContain('[Source: Returns policy (returns)]');
    const asSystem = (await (await post('/messages/count_tokens', { system })).json()) as { input_tokens: number };
    expect(counted).toBe(asSystem.input_tokens);
  });

  it('an unknown knowledge id or brand is 404, as on /messages', async () => {
    for (const [field, value] of [
      ['knowledge', ['no-such-doc']],
      ['brand', 'no-such-brand'],
    ] as const) {
      const res = await post('/messages/count_tokens', { [field]: value });
      expect(res.status).toBe(404);
      await res.arrayBuffer();
    }
  });
});
