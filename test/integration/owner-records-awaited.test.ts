/**
 * The ids a streamed answer names (a Responses id and its output items, a chat answer's audio)
 * are recorded with their account, and only that account may use them in its next request.
 * That next request comes as soon as the stream ends, maybe to another instance: a complete
 * stream's last event waits for the records, so the id works at once however slow the store
 * is. The store here is a real memory store whose owner records take 300 ms to land.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { Stores } from '../../src/stores/types.js';
import { MODEL, type RunningGateway, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const SLOW_MS = 300;

/** The store's owner records (idempotency `complete`) land SLOW_MS late. */
function slowRecords(stores: Stores): Stores {
  const complete = stores.idempotency.complete.bind(stores.idempotency);
  stores.idempotency.complete = async (...args) => {
    await new Promise((r) => setTimeout(r, SLOW_MS));
    return complete(...args);
  };
  return stores;
}

let up: TestUpstream;
let gw: RunningGateway;
let client: OpenAI;

beforeAll(async () => {
  up = await startTestUpstream();
  const setup = testConfig({ upstreamUrl: up.url });
  gw = await startGateway({ ...setup.options, stores: slowRecords(createMemoryStores()) });
  client = new OpenAI({ apiKey: setup.devKey, baseURL: gw.baseURL, maxRetries: 0 });
});

afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const sse = (events: unknown[]) => events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('');

describe('ids a stream names are usable by their owner as soon as the stream ends', () => {
  it("a streamed Responses answer's id, as previous_response_id", async () => {
    const response = (status: string, output: unknown[]) => ({ id: 'resp_slow_1', object: 'response', status, model: MODEL, output });
    const item = { id: 'msg_slow_1', type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Hi' }] };
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(
          sse([
            { type: 'response.created', response: response('in_progress', []) },
            { type: 'response.output_text.delta', output_index: 0, content_index: 0, delta: 'Hi' },
            { type: 'response.output_item.done', output_index: 0, item },
            { type: 'response.completed', response: { ...response('completed', [item]), usage: { input_tokens: 5, output_tokens: 1, total_tokens: 6 } } },
          ]),
        );
      },
    });
    const events: string[] = [];
    for await (const e of await client.responses.create({ model: MODEL, input: 'Say hi', stream: true })) events.push(e.type);
    expect(events.at(-1)).toBe('response.completed');
    up.setBehavior({ kind: 'json', body: { id: 'resp_slow_2', object: 'response', status: 'completed', model: MODEL, output: [], usage: { input_tokens: 5, output_tokens: 0, total_tokens: 5 } } });
    const next = await client.responses.create({ model: MODEL, input: 'Again', previous_response_id: 'resp_slow_1' });
    expect(next.id).toBe('resp_slow_2');
  });

  it("a streamed chat answer's audio, given back by id", async () => {
    const chunk = (delta: unknown, finish: string | null = null) => ({ id: 'c', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }] });
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(
          sse([
            chunk({ role: 'assistant', content: null }),
            chunk({ audio: { id: 'audio_slow_1', transcript: 'Hi' } }),
            chunk({ audio: { data: 'AAAA', expires_at: 2 } }, 'stop'),
            { id: 'c', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } },
          ]) + 'data: [DONE]\n\n',
        );
      },
    });
    const audioAsk = { modalities: ['text', 'audio'] as Array<'text' | 'audio'>, audio: { voice: 'alloy' as const, format: 'pcm16' as const } };
    for await (const c of await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 10, stream: true, ...audioAsk })) void c;
    up.setBehavior({ kind: 'json' });
    const messages = [
      { role: 'user', content: 'Say hi' },
      { role: 'assistant', audio: { id: 'audio_slow_1' } },
      { role: 'user', content: 'Again' },
    ] as OpenAI.ChatCompletionMessageParam[];
    const next = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 10 });
    expect(next.choices).toHaveLength(1);
  });
});
