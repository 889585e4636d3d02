/**
 * Wire fidelity: every answer the gateway writes, and every answer its simulator writes
 * through it, validates against the component schemas of OpenAI's published OpenAPI document
 * (the pinned copy in test/fixtures/openapi): models, chat (plain and each streamed chunk),
 * embeddings, completions (plain and streamed), Responses (plain and each stream event),
 * images, videos (create, retrieve, list, delete) and error envelopes. Typed clients in
 * stricter languages decode these bodies with exactly these schemas.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODEL, eventually, sseData, startGateway, testConfig, testKey, type RunningGateway } from '../helpers/gateway.js';
import { IMAGE, VIDEO, mediaModels } from '../helpers/media.js';
import { openaiSchemas, type OpenAISchemas } from '../helpers/openapi.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const EMBEDDING = 'test/embedding';
/** A key of an account with an empty wallet. */
const brokeKey = testKey();

/** A text model on a scripted upstream, for failures the simulator does not make. */
const SCRIPTED = 'test/scripted';

let schemas: OpenAISchemas;
let up: TestUpstream;
let gw: RunningGateway;
let key: string;

beforeAll(async () => {
  schemas = openaiSchemas();
  up = await startTestUpstream();
  const setup = testConfig({
    walletUsd: 100,
    models: [
      ...mediaModels('test'),
      { id: SCRIPTED, type: 'text', upstream: 'scripted', pricing: { prompt: '0.000001', completion: '0.000002' } },
      { id: EMBEDDING, type: 'text', upstream: 'test', embedding: true, pricing: { prompt: '0.0000001', completion: '0' } },
      { id: 'test/cached-chat', type: 'text', upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000002', cachedPrompt: '0.0000001', cacheWrite: '0.00000125' } },
    ],
    accounts: [{ id: 'acct_broke', walletUsd: 0 }],
    keys: [{ key: brokeKey, account: 'acct_broke', kind: 'developer' }],
    limits: { jobPollIntervalMs: 20 },
  });
  setup.options.upstreams = {
    test: { simulate: true, imageDelayMs: 0, videoDurationMs: 100, chunkDelayMs: 0 },
    scripted: { baseUrl: up.url, apiKey: 'sk-upstream-Qw8rT5yU2iO9pA', timeoutMs: 10_000 },
  };
  key = setup.devKey;
  gw = await startGateway(setup.options);
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await up?.close();
});

const headers = () => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
const get = (path: string) => fetch(`${gw.baseURL}${path}`, { headers: headers() });
const post = (path: string, body: unknown) => fetch(`${gw.baseURL}${path}`, { method: 'POST', headers: headers(), body: JSON.stringify(body) });

/** Asserts `value` conforms to the component schema `name`, showing every way it does not. */
function conforms(name: string, value: unknown): void {
  expect(schemas.check(name, value), `${name}: ${JSON.stringify(value).slice(0, 600)}`).toEqual([]);
}

async function okJson(res: Response): Promise<unknown> {
  const text = await res.text();
  expect(res.status, text).toBeLessThan(300);
  return JSON.parse(text) as unknown;
}

/** The JSON payloads of an SSE answer (without `[DONE]`), and the `event:` names when it has them. */
async function events(res: Response): Promise<{ data: unknown[]; names: string[] }> {
  const text = await res.text();
  expect(res.status, text).toBe(200);
  const names = [...text.matchAll(/^event: (.+)$/gm)].map((m) => m[1]!);
  return { data: sseData(text).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d) as unknown), names };
}

const messages = [{ role: 'user', content: 'Say something about lighthouses.' }];

describe('the checker', () => {
  it('refuses what the schemas forbid: a choice without logprobs, a video without remixed_from_video_id, a bad error', () => {
    const choice = { index: 0, message: { role: 'assistant', content: 'hi', refusal: null }, finish_reason: 'stop' };
    const chat = { id: 'c', object: 'chat.completion', created: 1, model: 'm', choices: [choice] };
    expect(schemas.check('CreateChatCompletionResponse', chat)).toContainEqual(expect.stringContaining("'logprobs'"));
    expect(schemas.check('CreateChatCompletionResponse', { ...chat, choices: [{ ...choice, logprobs: null }] })).toEqual([]);
    const video = { id: 'v', object: 'video', model: 'm', status: 'queued', progress: 0, created_at: 1, completed_at: null, expires_at: null, prompt: 'p', size: '720x1280', seconds: '4', error: null };
    expect(schemas.check('VideoResource', video)).toContainEqual(expect.stringContaining("'remixed_from_video_id'"));
    expect(schemas.check('VideoResource', { ...video, remixed_from_video_id: null })).toEqual([]);
    expect(schemas.check('ErrorResponse', { error: { message: 'x', type: 't', code: null } })).not.toEqual([]);
  });
});

describe('models', () => {
  it('the text listing, each media listing, and a retrieved model', async () => {
    conforms('ListModelsResponse', await okJson(await get('/models')));
    for (const type of ['image', 'audio', 'video']) conforms('ListModelsResponse', await okJson(await get(`/models?type=${type}`)));
    conforms('Model', await okJson(await get(`/models/${encodeURIComponent(MODEL)}`)));
    conforms('Model', await okJson(await get(`/models/${encodeURIComponent(VIDEO)}`)));
  });
});

describe('chat completions', () => {
  it('a plain answer', async () => {
    conforms('CreateChatCompletionResponse', await okJson(await post('/chat/completions', { model: MODEL, messages })));
  });

  it('a plain answer reporting cached tokens', async () => {
    const long = [{ role: 'system', content: 'House rules about tides. '.repeat(400) }, ...messages];
    await okJson(await post('/chat/completions', { model: 'test/cached-chat', messages: long }));
    const again = (await okJson(await post('/chat/completions', { model: 'test/cached-chat', messages: long }))) as { usage: { prompt_tokens_details: { cached_tokens: number } } };
    expect(again.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    conforms('CreateChatCompletionResponse', again);
  });

  it('every streamed chunk, the usage chunk included', async () => {
    const { data } = await events(await post('/chat/completions', { model: MODEL, messages, stream: true, stream_options: { include_usage: true } }));
    expect(data.length).toBeGreaterThan(3);
    expect(data.some((c) => (c as { usage?: unknown }).usage)).toBe(true);
    for (const chunk of data) conforms('CreateChatCompletionStreamResponse', chunk);
  });
});

describe('completions and embeddings', () => {
  it('a plain completion and every streamed chunk', async () => {
    conforms('CreateCompletionResponse', await okJson(await post('/completions', { model: MODEL, prompt: 'Once upon a time' })));
    const { data } = await events(await post('/completions', { model: MODEL, prompt: 'Once upon a time', stream: true, stream_options: { include_usage: true } }));
    expect(data.length).toBeGreaterThan(2);
    // The document has no chunk schema for legacy completions: its streams are typed with the
    // final answer's schema, whose `finish_reason` is a string. Every chunk before the last
    // carries `finish_reason: null`, as OpenAI's own completion streams do; checked as the
    // schema types the last chunk, everything else is checked as it is.
    for (const chunk of data as Array<{ choices: Array<{ finish_reason: string | null }> }>) {
      conforms('CreateCompletionResponse', { ...chunk, choices: chunk.choices.map((c) => ({ ...c, finish_reason: c.finish_reason ?? 'stop' })) });
    }
    expect(data.filter((c) => (c as { choices: Array<{ finish_reason: unknown }> }).choices.some((x) => x.finish_reason === 'stop'))).toHaveLength(1);
  });

  it('embeddings of a string and of a list', async () => {
    conforms('CreateEmbeddingResponse', await okJson(await post('/embeddings', { model: EMBEDDING, input: 'hello' })));
    conforms('CreateEmbeddingResponse', await okJson(await post('/embeddings', { model: EMBEDDING, input: ['a', 'b'], dimensions: 8 })));
  });
});

describe('Responses', () => {
  it('a plain answer', async () => {
    conforms('Response', await okJson(await post('/responses', { model: MODEL, input: 'Say hello.' })));
  });

  it('every stream event, each named as its type says', async () => {
    const { data, names } = await events(await post('/responses', { model: MODEL, input: 'Say hello.', stream: true }));
    expect(data.length).toBeGreaterThan(5);
    expect(names).toEqual(data.map((e) => (e as { type: string }).type));
    for (const event of data) conforms('ResponseStreamEvent', event);
  });
});

describe('images and videos', () => {
  it('an image answered inline', async () => {
    conforms('ImagesResponse', await okJson(await post('/images/generations', { model: IMAGE, prompt: 'a lighthouse', size: '1024x1024' })));
    conforms('ImagesResponse', await okJson(await post('/images/generations', { model: IMAGE, prompt: 'a lighthouse', n: 2, response_format: 'url' })));
  });

  it('a video job: created, polled while running and once done, listed, deleted', async () => {
    const created = (await okJson(await post('/videos', { model: VIDEO, prompt: 'waves at dusk', size: '1280x720', seconds: '4' }))) as { id: string };
    conforms('VideoResource', created);
    const defaults = (await okJson(await post('/videos', { model: VIDEO, prompt: 'waves at dawn' }))) as { id: string };
    conforms('VideoResource', defaults);
    conforms('VideoResource', await okJson(await get(`/videos/${created.id}`)));
    let done: unknown;
    await eventually(
      async () => {
        done = await okJson(await get(`/videos/${created.id}`));
        return (done as { status: string }).status === 'completed';
      },
      'the video job to complete',
      10_000,
    );
    conforms('VideoResource', done);
    await eventually(async () => ((await okJson(await get(`/videos/${defaults.id}`))) as { status: string }).status === 'completed', 'the second job', 10_000);
    conforms('VideoResource', await okJson(await get(`/videos/${defaults.id}`)));
    conforms('VideoListResource', await okJson(await get('/videos?limit=5')));
    const failed = (await okJson(await post('/videos', { model: VIDEO, prompt: 'waves [fail]', size: '720x1280' }))) as { id: string };
    let view: unknown;
    await eventually(
      async () => {
        view = await okJson(await get(`/videos/${failed.id}`));
        return (view as { status: string }).status === 'failed';
      },
      'the failing job to fail',
      10_000,
    );
    conforms('VideoResource', view);
    conforms('DeletedVideoResource', await okJson(await fetch(`${gw.baseURL}/videos/${created.id}`, { method: 'DELETE', headers: headers() })));
  });
});

describe('error envelopes', () => {
  const cases: Array<[string, () => Promise<Response>, number]> = [
    ['401 no key', () => fetch(`${gw.baseURL}/models`), 401],
    ['400 invalid JSON', () => fetch(`${gw.baseURL}/chat/completions`, { method: 'POST', headers: headers(), body: '{' }), 400],
    ['400 a bad field', () => post('/chat/completions', { model: MODEL, messages: 'nope' }), 400],
    ['404 an unknown model', () => post('/chat/completions', { model: 'no/such', messages }), 404],
    ['404 an unknown route', () => get('/nowhere'), 404],
    ['404 an unknown job', () => get('/videos/video_nothing'), 404],
    ['502 an upstream failure', () => post('/images/generations', { model: IMAGE, prompt: 'a lighthouse [fail]' }), 502],
    ['405 a wrong method', () => fetch(`${gw.baseURL}/models`, { method: 'DELETE', headers: headers() }), 405],
    [
      '402 an empty wallet',
      () => fetch(`${gw.baseURL}/chat/completions`, { method: 'POST', headers: { ...headers(), authorization: `Bearer ${brokeKey}` }, body: JSON.stringify({ model: MODEL, messages }) }),
      402,
    ],
  ];
  it.each(cases)('%s', async (_name, call, status) => {
    const res = await call();
    const body = (await res.json()) as unknown;
    expect(res.status).toBe(status);
    conforms('ErrorResponse', body);
  });
});

describe('failures the gateway reports', () => {
  it('an upstream 4xx relayed in the envelope', async () => {
    up.setBehavior({ kind: 'error', status: 400, message: 'bad temperature', type: 'invalid_request_error', code: 'invalid_value', param: 'temperature' });
    const res = await post('/chat/completions', { model: SCRIPTED, messages });
    expect(res.status).toBe(400);
    conforms('ErrorResponse', await res.json());
  });

  it('a chat stream cut after its 200 ends with an error event in the envelope', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['a', 'b', 'c'], resetAfter: 2 });
    const { data } = await events(await post('/chat/completions', { model: SCRIPTED, messages, stream: true }));
    const last = data[data.length - 1] as { error?: unknown };
    expect(last.error).toBeDefined();
    conforms('ErrorResponse', last);
    for (const chunk of data.slice(0, -1)) conforms('CreateChatCompletionStreamResponse', chunk);
  });

  it("a Responses stream that fails ends with Responses' own error event", async () => {
    up.setBehavior({ kind: 'response', chunks: ['a', 'b', 'c'], errorAfter: 1 });
    const { data } = await events(await post('/responses', { model: SCRIPTED, input: 'hi', stream: true }));
    const last = data[data.length - 1] as { type?: string };
    expect(last.type).toBe('error');
    conforms('ResponseStreamEvent', last);
  });
});
