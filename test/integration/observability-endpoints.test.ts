/**
 * Every billed endpoint's access line and metrics carry model, tokens and cost (one access
 * line per request: request id, route, status, key id, account, model, latency, tokens, cost;
 * the ledger is the exact figure, the metrics must follow it).
 *
 * For /v1/chat/completions, /v1/completions, /v1/responses (plain and streamed),
 * /v1/embeddings, /v1/audio/speech and /v1/images/generations, one call each against an
 * in-process gateway (gateway.fetch) with the default pino logger writing into an array and
 * Prometheus metrics on /metrics: the call's one access line names the model, the tokens where
 * the endpoint is priced per token, and `cost_usd` (exact: the catalog price x the usage the
 * test upstream reports); `model_gateway_spend_usd_total{model}` moves by that cost and
 * `model_gateway_tokens_total{model,direction}` by those tokens.
 *
 * A video job (POST /v1/videos, then polled until the upstream finished it) is billed when it
 * finishes, after its POST was answered: the spend metric must move by the job's cost then,
 * and a log line must name the job, its model and its cost.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cost, formatUsd, parsePrice } from '../../src/billing/money.js';
import type { Logger } from '../../src/observability/log.js';
import { createLogger } from '../../src/observability/logs.js';
import { chatCost } from '../helpers/billing.js';
import { MODEL, eventually, makeGateway, testConfig } from '../helpers/gateway.js';
import { AUDIO, IMAGE, VIDEO, imageCost, mediaModels, speechCost, speechTokens, videoCost } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { startTestUpstream, type Behavior, type TestUpstream } from '../helpers/upstream.js';
import type { Gateway } from '../../src/gateway.js';
import type { Stores } from '../../src/stores/types.js';

const EMBED = 'test/embed';
const EMBED_PRICE = '0.0000001';

let up: TestUpstream;
let media: MediaUpstream;
let gateway: Gateway;
let stores: Stores;
let devKey: string;

const lines: Array<Record<string, unknown>> = [];
// The default logger (pino, with the hand-serialised access line), writing into this array.
const capture: Logger = createLogger('info', {
  write(line: string) {
    lines.push(JSON.parse(line) as Record<string, unknown>);
  },
});

beforeAll(async () => {
  up = await startTestUpstream();
  media = await startMediaUpstream();
  const setup = testConfig({
    upstreamUrl: up.url,
    walletUsd: 100,
    models: [
      { id: EMBED, type: 'text', upstream: 'test', embedding: true, pricing: { prompt: EMBED_PRICE, completion: '0' }, contextLength: 8_000 },
      ...mediaModels('media'),
    ],
    limits: { jobPollIntervalMs: 20 },
  });
  devKey = setup.devKey;
  setup.options.upstreams = { ...setup.options.upstreams, media: { baseUrl: media.url, apiKey: 'media-upstream-key-0', timeoutMs: 10_000 } };
  ({ gateway, stores } = await makeGateway({ ...setup.options, metrics: { path: '/metrics' }, logger: capture }));
});

afterAll(async () => {
  await gateway?.dispose();
  await stores?.close();
  await up?.close();
  await media?.close();
});

const post = (path: string, body: unknown) =>
  new Request(`http://gw/v1${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

async function scrape(): Promise<string> {
  const res = await gateway.fetch(new Request('http://gw/metrics'));
  expect(res.status).toBe(200);
  return res.text();
}

/** The value of one series in a scrape (0 when the series is not there yet). */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}
const spendOf = (text: string, model: string) => sample(text, `model_gateway_spend_usd_total{model="${model}"}`);
const tokensOf = (text: string, model: string, direction: 'in' | 'out') =>
  sample(text, `model_gateway_tokens_total{model="${model}",direction="${direction}"}`);

const accessLines = (requestId: string | null) => lines.filter((l) => l.msg === 'access' && l.request_id === requestId);

interface Case {
  name: string;
  route: string;
  behavior?: Behavior;
  request: () => Request;
  model: string;
  /** Token counts the access line and tokens_total must show; absent: not priced per token. */
  tokens?: { prompt: number; completion: number };
  /** nano-USD. */
  cost: bigint;
}

const SPEECH_INPUT = 'The lighthouse keeper rang the bell twice.';

const cases: Case[] = [
  {
    name: 'chat, plain',
    route: '/v1/chat/completions',
    behavior: { kind: 'json', content: 'hi', usage: { prompt_tokens: 10, completion_tokens: 5 } },
    request: () => post('/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hello' }] }),
    model: MODEL,
    tokens: { prompt: 10, completion: 5 },
    cost: chatCost(10, 5),
  },
  {
    name: 'chat, streamed',
    route: '/v1/chat/completions',
    behavior: { kind: 'stream', chunks: ['a', 'b', 'c'], delayMs: 5, usageCounts: { prompt_tokens: 4, completion_tokens: 3 } },
    request: () => post('/chat/completions', { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hello' }] }),
    model: MODEL,
    tokens: { prompt: 4, completion: 3 },
    cost: chatCost(4, 3),
  },
  {
    name: 'completions, plain',
    route: '/v1/completions',
    behavior: { kind: 'completion', chunks: ['Once', ' upon', ' a', ' time'], usage: { prompt_tokens: 12, completion_tokens: 4 } },
    request: () => post('/completions', { model: MODEL, prompt: 'Tell me a story', max_tokens: 20 }),
    model: MODEL,
    tokens: { prompt: 12, completion: 4 },
    cost: chatCost(12, 4),
  },
  {
    name: 'completions, streamed',
    route: '/v1/completions',
    behavior: { kind: 'completion', chunks: ['Once', ' upon', ' a', ' time', '.'], usage: { prompt_tokens: 13, completion_tokens: 5 } },
    request: () => post('/completions', { model: MODEL, prompt: 'Tell me a story', max_tokens: 20, stream: true }),
    model: MODEL,
    tokens: { prompt: 13, completion: 5 },
    cost: chatCost(13, 5),
  },
  {
    name: 'responses, plain',
    route: '/v1/responses',
    behavior: { kind: 'response', chunks: ['Hello', ' there'], usage: { input_tokens: 14, output_tokens: 2 } },
    request: () => post('/responses', { model: MODEL, input: 'Say hello', max_output_tokens: 20 }),
    model: MODEL,
    tokens: { prompt: 14, completion: 2 },
    cost: chatCost(14, 2),
  },
  {
    name: 'responses, streamed',
    route: '/v1/responses',
    behavior: { kind: 'response', chunks: ['Hello', ' from', ' Responses'], usage: { input_tokens: 15, output_tokens: 3 } },
    request: () => post('/responses', { model: MODEL, input: 'Say hello', max_output_tokens: 20, stream: true }),
    model: MODEL,
    tokens: { prompt: 15, completion: 3 },
    cost: chatCost(15, 3),
  },
  {
    name: 'embeddings',
    route: '/v1/embeddings',
    behavior: { kind: 'embeddings', promptTokens: 9 },
    request: () => post('/embeddings', { model: EMBED, input: ['a red bicycle', 'a blue bicycle'] }),
    model: EMBED,
    tokens: { prompt: 9, completion: 0 },
    cost: cost(parsePrice(EMBED_PRICE), 9),
  },
  {
    name: 'speech',
    route: '/v1/audio/speech',
    request: () => post('/audio/speech', { model: AUDIO, voice: 'alloy', input: SPEECH_INPUT, response_format: 'wav' }),
    model: AUDIO,
    tokens: { prompt: speechTokens(SPEECH_INPUT), completion: 0 },
    cost: speechCost(SPEECH_INPUT),
  },
  {
    name: 'images (answered inline)',
    route: '/v1/images/generations',
    // 1024x1024: the shorter side 1024 is 1080P.
    request: () => post('/images/generations', { model: IMAGE, prompt: 'a red bicycle', n: 2, size: '1024x1024' }),
    model: IMAGE,
    cost: imageCost('1080P', 2),
  },
];

describe('every billed endpoint: one access line with model, tokens and cost; spend and token metrics move by the call', () => {
  for (const c of cases) {
    it(c.name, async () => {
      if (c.behavior) up.setBehavior(c.behavior);
      const before = await scrape();
      const res = await gateway.fetch(c.request());
      expect(res.status).toBe(200);
      // The whole answer (a stream to its end).
      await res.arrayBuffer();
      const requestId = res.headers.get('x-request-id');
      expect(requestId).toMatch(/^req_/);
      await eventually(() => accessLines(requestId).length > 0, `the access line of ${c.name}`);
      const found = accessLines(requestId);
      expect(found, 'one access line per request').toHaveLength(1);
      const line = found[0]!;

      expect(line).toMatchObject({ route: c.route, status: 200, model: c.model, cost_usd: formatUsd(c.cost) });
      if (c.tokens) {
        expect(line.prompt_tokens).toBe(c.tokens.prompt);
        expect(line.completion_tokens ?? 0).toBe(c.tokens.completion);
      }

      const after = await scrape();
      expect(spendOf(after, c.model) - spendOf(before, c.model)).toBeCloseTo(Number(c.cost) / 1e9, 12);
      if (c.tokens) {
        expect(tokensOf(after, c.model, 'in') - tokensOf(before, c.model, 'in')).toBe(c.tokens.prompt);
        expect(tokensOf(after, c.model, 'out') - tokensOf(before, c.model, 'out')).toBe(c.tokens.completion);
      } else {
        expect(tokensOf(after, c.model, 'in') - tokensOf(before, c.model, 'in')).toBe(0);
        expect(tokensOf(after, c.model, 'out') - tokensOf(before, c.model, 'out')).toBe(0);
      }
      // The ledger agrees with what was reported.
      const entry = (await gateway.admin.ledger('acct_test')).find((e) => e.id === requestId);
      expect(entry?.cost).toBe(c.cost);
    });
  }

  it('a video job: once it finishes, the spend metric moves by its cost and a log line names the job, model and cost', async () => {
    const before = await scrape();
    const res = await gateway.fetch(post('/videos', { model: VIDEO, prompt: 'a bicycle crossing a bridge', seconds: '4', size: '1280x720' }));
    expect(res.status).toBe(202);
    const job = (await res.json()) as { id: string; status: string };
    const requestId = res.headers.get('x-request-id');
    await eventually(() => accessLines(requestId).length > 0, 'the access line of the POST');
    expect(accessLines(requestId)[0]).toMatchObject({ route: '/v1/videos', status: 202, model: VIDEO });

    await eventually(() => media.videos().length > 0, 'the upstream job');
    media.finishVideo(media.videos().at(-1)!.id);
    await eventually(async () => {
      const poll = await gateway.fetch(new Request(`http://gw/v1/videos/${job.id}`, { headers: { authorization: `Bearer ${devKey}` } }));
      return ((await poll.json()) as { status: string }).status === 'completed';
    }, 'the video job completed');
    // 1280x720: the shorter side 720 is 720P, 0.1 USD a second.
    const jobCost = videoCost('720P', 4);
    await eventually(async () => (await gateway.admin.ledger('acct_test')).some((e) => e.id === job.id), 'the job in the ledger');
    expect((await gateway.admin.ledger('acct_test')).find((e) => e.id === job.id)?.cost).toBe(jobCost);

    const moved = async () => spendOf(await scrape(), VIDEO) - spendOf(before, VIDEO);
    await eventually(async () => Math.abs((await moved()) - Number(jobCost) / 1e9) < 1e-12, 'the spend metric moved by the job cost', 2_000).catch(() => undefined);
    expect(await moved(), 'model_gateway_spend_usd_total{model="test/video"} moved by the job cost').toBeCloseTo(Number(jobCost) / 1e9, 12);

    const usd = formatUsd(jobCost);
    const names = (l: Record<string, unknown>) => {
      const values = Object.values(l).map((v) => (typeof v === 'number' ? String(v) : v));
      return values.includes(job.id) && values.includes(VIDEO) && values.includes(usd);
    };
    expect(
      lines.filter(names),
      `a log line names the job ${job.id}, the model ${VIDEO} and the cost ${usd}; the lines that name the job: ${JSON.stringify(lines.filter((l) => Object.values(l).includes(job.id)))}`,
    ).not.toHaveLength(0);
  });
});
