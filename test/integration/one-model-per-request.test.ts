/**
 * A request is billed as the one model it names, at that model's price, and an agent key
 * reaches only the model it is pinned to, and never media. A router upstream (OpenRouter) also
 * reads a `models` list (other models it may answer with) and `plugins` (paid web search and
 * file parsing): relayed, either would buy another model or paid work at the named model's
 * price, for any key. And a text model may speak or draw (`audio`, `modalities`): media an
 * agent key must not get. Each is refused, naming the field, before anything is held or sent.
 */
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODEL, postChat, type RunningGateway, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
let gw: RunningGateway;
let devKey: string;
let agentKey: string;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url });
  ({ devKey, agentKey } = setup);
  gw = await startGateway(setup.options);
});

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

async function post(path: string, key: string, body: Record<string, unknown>) {
  const res = await fetch(`${gw.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as { error?: { code?: string; param?: string; type?: string; message?: string } };
  return { status: res.status, error: json.error };
}

/** The status, code and field of a refusal (Anthropic's error shape, on /messages, names neither: its message names the field). */
const refusal = (path: string, r: Awaited<ReturnType<typeof post>>) =>
  path === '/messages' ? [r.status, r.error?.type, r.error?.message?.match(/'(\w+)'/)?.[1]] : [r.status, r.error?.code, r.error?.param];

const endpoints: Array<[string, Record<string, unknown>]> = [
  ['/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 }],
  ['/completions', { prompt: 'hi', max_tokens: 20 }],
  ['/responses', { input: 'hi', max_output_tokens: 20 }],
  ['/embeddings', { input: 'hi' }],
  ['/messages', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 }],
];

describe('a router’s model list and plugins', () => {
  for (const [path, body] of endpoints) {
    it(`${path}: \`models\` and \`plugins\` are refused for every key, and nothing reaches the upstream`, async () => {
      const before = up.requests.length;
      for (const key of [devKey, agentKey]) {
        const listed = await post(path, key, { model: MODEL, models: ['openai/o1-pro', 'anthropic/claude-opus-4'], route: 'fallback', ...body });
        expect(refusal(path, listed)).toEqual([400, path === '/messages' ? 'invalid_request_error' : 'invalid_request', 'models']);
        const plugged = await post(path, key, { model: MODEL, plugins: [{ id: 'web', max_results: 5 }], ...body });
        expect(refusal(path, plugged)).toEqual([400, path === '/messages' ? 'invalid_request_error' : 'unsupported_tool', 'plugins']);
      }
      expect(up.requests.length).toBe(before);
    });
  }

  it('a batch line naming a model list is refused when the batch is created', async () => {
    const openai = new OpenAI({ apiKey: devKey, baseURL: gw.baseURL, maxRetries: 0 });
    const line = { custom_id: 'a', method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, models: ['openai/o1-pro'], max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] } };
    const input = await openai.files.create({ file: await toFile(Buffer.from(JSON.stringify(line)), 'in.jsonl'), purpose: 'batch' });
    const refused = await openai.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' }).then(
      () => null,
      (err: unknown) => err as { status?: number; param?: string; message?: string },
    );
    expect(refused?.status).toBe(400);
    expect(refused?.message).toMatch(/Line 1/);
    expect(refused?.message).toMatch(/models/);
  });
});

describe('an agent key asking a text model for media', () => {
  const ask = { model: MODEL, messages: [{ role: 'user', content: 'say hi' }], max_tokens: 20 };

  it('spoken output is refused (403 permission_denied naming the field); a developer key gets it', async () => {
    const before = up.requests.length;
    for (const [extra, param] of [
      [{ modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'wav' } }, 'audio'],
      [{ modalities: ['text', 'audio'] }, 'modalities'],
      [{ audio: { voice: 'alloy', format: 'wav' } }, 'audio'],
    ] as const) {
      const res = await post('/chat/completions', agentKey, { ...ask, ...extra });
      expect([res.status, res.error?.code, res.error?.type, res.error?.param]).toEqual([403, 'permission_denied', 'permission_error', param]);
    }
    expect(up.requests.length).toBe(before);
    up.setBehavior({ kind: 'json' });
    const dev = await postChat(gw.baseURL, devKey, { ...ask, modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'wav' } });
    expect(dev.status).toBe(200);
    await dev.arrayBuffer();
  });

  it('image output is refused; text alone is not', async () => {
    const before = up.requests.length;
    const res = await post('/chat/completions', agentKey, { ...ask, modalities: ['image', 'text'] });
    expect([res.status, res.error?.code, res.error?.param]).toEqual([403, 'permission_denied', 'modalities']);
    expect(up.requests.length).toBe(before);
    up.setBehavior({ kind: 'json' });
    const text = await postChat(gw.baseURL, agentKey, { ...ask, modalities: ['text'] });
    expect(text.status).toBe(200);
    await text.arrayBuffer();
  });
});
