/**
 * /v1/messages as Anthropic takes it: a message with empty content is a 400 naming it (only a
 * last assistant message, the start of the answer, may be empty). Before, a turn of `[]` was
 * dropped when translated for another upstream kind, and the upstream got a conversation the
 * client did not send.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODEL, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url });
  devKey = setup.devKey;
  gw = await startGateway(setup.options);
});
afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const messages = (list: unknown[]) =>
  fetch(`${gw.baseURL}/messages`, {
    method: 'POST',
    headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: MODEL, max_tokens: 10, messages: list }),
  });

describe('a Messages turn with empty content', () => {
  it('is a 400 naming it, in the Messages error shape, and nothing reaches the upstream', async () => {
    for (const [list, param] of [
      [[{ role: 'user', content: [] }], 'messages[0].content'],
      [[{ role: 'user', content: 'hi' }, { role: 'assistant', content: '' }, { role: 'user', content: 'again' }], 'messages[1].content'],
    ] as const) {
      const before = up.requests.length;
      const res = await messages([...list]);
      expect(res.status, param).toBe(400);
      const body = (await res.json()) as { type: string; error: { type: string; message: string } };
      expect(body.type).toBe('error');
      expect(body.error.message).toContain(param);
      expect(up.requests.length).toBe(before);
    }
  });

  it('is taken as the last assistant message (the start of the answer)', async () => {
    const res = await messages([{ role: 'user', content: 'hi' }, { role: 'assistant', content: [] }]);
    expect(res.status).toBe(200);
  });
});
