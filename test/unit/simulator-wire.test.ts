/**
 * The simulator's own answers, read straight from it (before the gateway relays or rewraps
 * them), validate against OpenAI's published schemas: it stands in for an OpenAI upstream, so
 * what it writes is what such an upstream writes. Text (plain and each stream event), images,
 * its video object and its error bodies.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { Upstream } from '../../src/upstream/client.js';
import { createSimulator } from '../../src/upstream/simulator/index.js';
import { loadTokenizer } from '../helpers/billing.js';
import { sseData } from '../helpers/gateway.js';
import { openaiSchemas, type OpenAISchemas } from '../helpers/openapi.js';

let sim: Upstream;
let schemas: OpenAISchemas;
beforeAll(async () => {
  schemas = openaiSchemas();
  sim = createSimulator('sim', { chunkDelayMs: 0, imageDelayMs: 0, videoDurationMs: 0 }, await loadTokenizer());
});

const call = (method: 'GET' | 'POST', path: string, body?: unknown) =>
  sim.call({
    method,
    path,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    signal: new AbortController().signal,
  });

async function json(method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; value: unknown }> {
  const res = await call(method, path, body);
  return { status: res.status, value: JSON.parse(await res.text()) as unknown };
}

async function stream(path: string, body: unknown): Promise<unknown[]> {
  const res = await call('POST', path, body);
  expect(res.status).toBe(200);
  return sseData(await res.text())
    .filter((d) => d !== '[DONE]')
    .map((d) => JSON.parse(d) as unknown);
}

function conforms(name: string, value: unknown): void {
  expect(schemas.check(name, value), `${name}: ${JSON.stringify(value).slice(0, 400)}`).toEqual([]);
}

const LONG = [
  { role: 'system', content: 'Tide tables and lighthouse rules. '.repeat(300) },
  { role: 'user', content: 'When is high tide?' },
];

describe('the simulator writes what OpenAI does', () => {
  it('chat: plain (cache write, then cache read) and every chunk of a stream with usage', async () => {
    for (let i = 0; i < 2; i++) {
      const { status, value } = await json('POST', '/chat/completions', { model: 'm', messages: LONG, max_tokens: 5 });
      expect(status).toBe(200);
      conforms('CreateChatCompletionResponse', value);
    }
    const chunks = await stream('/chat/completions', { model: 'm', messages: LONG, stream: true, stream_options: { include_usage: true } });
    expect(chunks.length).toBeGreaterThan(3);
    for (const c of chunks) conforms('CreateChatCompletionStreamResponse', c);
  });

  it('Responses: plain and every stream event', async () => {
    conforms('Response', (await json('POST', '/responses', { model: 'm', instructions: 'Be brief.', input: 'hi' })).value);
    const events = await stream('/responses', { model: 'm', input: [{ role: 'user', content: 'hi' }], stream: true });
    for (const e of events) conforms('ResponseStreamEvent', e);
  });

  it('completions (the last chunk; see the e2e test for the others) and embeddings', async () => {
    conforms('CreateCompletionResponse', (await json('POST', '/completions', { model: 'm', prompt: 'Once' })).value);
    const chunks = await stream('/completions', { model: 'm', prompt: 'Once', stream: true });
    conforms('CreateCompletionResponse', chunks[chunks.length - 1]);
    conforms('CreateEmbeddingResponse', (await json('POST', '/embeddings', { model: 'm', input: ['a', 'b'] })).value);
  });

  it('images, and the video object while queued and once done or failed', async () => {
    conforms('ImagesResponse', (await json('POST', '/images/generations', { model: 'm', prompt: 'a lighthouse', n: 2 })).value);
    const created = (await json('POST', '/videos', { model: 'm', prompt: 'waves', seconds: '4', size: '1280x720' })).value as { id: string };
    conforms('VideoResource', created);
    conforms('VideoResource', (await json('GET', `/videos/${created.id}`)).value);
    const failed = (await json('POST', '/videos', { model: 'm', prompt: 'waves [fail]' })).value as { id: string };
    const view = (await json('GET', `/videos/${failed.id}`)).value as { status: string };
    expect(view.status).toBe('failed');
    conforms('VideoResource', view);
  });

  it('its error bodies are OpenAI error envelopes', async () => {
    const answers = [
      await json('POST', '/chat/completions', '{'),
      await json('POST', '/nowhere', {}),
      await json('GET', '/videos/none'),
      await json('POST', '/images/generations', { model: 'm', prompt: 'x [fail]' }),
      await json('POST', '/audio/speech', { model: 'm', input: 'x', voice: 'alloy', response_format: 'flac' }),
    ];
    expect(answers.map((a) => a.status)).toEqual([400, 404, 404, 500, 400]);
    for (const a of answers) conforms('ErrorResponse', a.value);
  });
});
