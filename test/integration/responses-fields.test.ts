/**
 * The Responses API's own fields are checked as OpenAI checks their types: a wrong one is a
 * 400 naming it, and nothing reaches the upstream. Well-typed, they are relayed as sent.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODEL, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gw: RunningGateway;
let key: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url, walletUsd: 10 });
  key = setup.devKey;
  gw = await startGateway(setup.options);
});
afterAll(async () => {
  await gw.close();
  await up.close();
});

const post = (body: Record<string, unknown>) =>
  fetch(`${gw.baseURL}/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, input: 'hi', ...body }),
  });

describe('Responses fields', () => {
  it('a wrong type or value is 400 naming the field; nothing is sent', async () => {
    const wrong: Array<[Record<string, unknown>, string]> = [
      [{ conversation: 5 }, 'conversation'],
      [{ conversation: { name: 'no id' } }, 'conversation'],
      [{ metadata: 'x' }, 'metadata'],
      [{ metadata: { k: 5 } }, 'metadata.k'],
      [{ store: 'yes' }, 'store'],
      [{ truncation: 'sometimes' }, 'truncation'],
      [{ include: 'x' }, 'include'],
      [{ parallel_tool_calls: 'x' }, 'parallel_tool_calls'],
      [{ reasoning: { effort: 'extreme' } }, 'reasoning.effort'],
      [{ reasoning: 'high' }, 'reasoning'],
      [{ top_logprobs: 50 }, 'top_logprobs'],
    ];
    for (const [body, param] of wrong) {
      const res = await post(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const { error } = (await res.json()) as { error: { code: string; param: string } };
      expect(error, JSON.stringify(body)).toMatchObject({ code: 'invalid_request', param });
    }
    expect(up.requests).toHaveLength(0);
  });

  it('well-typed, they are relayed as sent', async () => {
    up.setBehavior({ kind: 'json' });
    const fields = {
      metadata: { team: 'a' },
      store: false,
      truncation: 'auto',
      include: ['reasoning.encrypted_content'],
      parallel_tool_calls: true,
      reasoning: { effort: 'minimal' },
      top_logprobs: 2,
      user: 'u1',
    };
    const res = await post(fields);
    expect(res.status).toBe(200);
    expect(up.requests).toHaveLength(1);
    expect(up.requests[0]!.body).toMatchObject(fields);
  });
});
