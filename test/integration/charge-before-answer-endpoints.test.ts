/**
 * "The charge lands before the answer ends" on every billed endpoint, not
 * only chat: a plain answer is sent only once its settle is in the store, a stream's final
 * events only after its settle has landed.
 *
 * In process (gateway.fetch) on memory stores whose settles take 200 ms to land (the store's
 * `settle` waits, then writes): the moment the client holds the whole answer, the call's
 * ledger entry must already be in the store, with its exact cost. Kill -9 and the real drivers
 * are in charge-before-answer.test.ts (chat) and key-after-answer.test.ts; this file holds
 * each route to the same order.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cost, parsePrice } from '../../src/billing/money.js';
import type { Gateway } from '../../src/gateway.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import type { BillingStore, Stores } from '../../src/stores/types.js';
import { chatCost } from '../helpers/billing.js';
import { ACCOUNT, MODEL, makeGateway, testConfig } from '../helpers/gateway.js';
import { AUDIO, IMAGE, imageCost, mediaModels, speechCost } from '../helpers/media.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { startTestUpstream, type Behavior, type TestUpstream } from '../helpers/upstream.js';

const SETTLE_MS = 200;
const EMBED = 'test/embed';
const EMBED_PRICE = '0.0000001';

let up: TestUpstream;
let media: MediaUpstream;
let gateway: Gateway;
let stores: Stores;
let devKey: string;

/** Memory stores whose settles land `ms` after they were asked for. */
function slowSettles(inner: Stores, ms: number): Stores {
  const billing = new Proxy(inner.billing, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (prop === 'settle') {
        return async (...args: Parameters<BillingStore['settle']>) => {
          await new Promise((r) => setTimeout(r, ms));
          return target.settle(...args);
        };
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { ...inner, billing };
}

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
  });
  devKey = setup.devKey;
  setup.options.upstreams = { ...setup.options.upstreams, media: { baseUrl: media.url, apiKey: 'media-upstream-key-0', timeoutMs: 10_000 } };
  ({ gateway, stores } = await makeGateway({ ...setup.options, stores: slowSettles(createMemoryStores(), SETTLE_MS) }));
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

const SPEECH_INPUT = 'The ferry leaves at noon.';

const cases: Array<{ name: string; behavior?: Behavior; request: () => Request; cost: bigint }> = [
  {
    name: 'chat, plain',
    behavior: { kind: 'json', content: 'hi', usage: { prompt_tokens: 10, completion_tokens: 5 } },
    request: () => post('/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hello' }] }),
    cost: chatCost(10, 5),
  },
  {
    name: 'chat, streamed',
    behavior: { kind: 'stream', chunks: ['a', 'b'], delayMs: 5, usageCounts: { prompt_tokens: 4, completion_tokens: 2 } },
    request: () => post('/chat/completions', { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hello' }] }),
    cost: chatCost(4, 2),
  },
  {
    name: 'completions, plain',
    behavior: { kind: 'completion', usage: { prompt_tokens: 12, completion_tokens: 4 } },
    request: () => post('/completions', { model: MODEL, prompt: 'Tell me a story', max_tokens: 20 }),
    cost: chatCost(12, 4),
  },
  {
    name: 'completions, streamed',
    behavior: { kind: 'completion', usage: { prompt_tokens: 13, completion_tokens: 4 } },
    request: () => post('/completions', { model: MODEL, prompt: 'Tell me a story', max_tokens: 20, stream: true }),
    cost: chatCost(13, 4),
  },
  {
    name: 'responses, plain',
    behavior: { kind: 'response', chunks: ['Hi'], usage: { input_tokens: 14, output_tokens: 1 } },
    request: () => post('/responses', { model: MODEL, input: 'Say hi', max_output_tokens: 20 }),
    cost: chatCost(14, 1),
  },
  {
    name: 'responses, streamed',
    behavior: { kind: 'response', chunks: ['Hi', ' there'], usage: { input_tokens: 15, output_tokens: 2 } },
    request: () => post('/responses', { model: MODEL, input: 'Say hi', max_output_tokens: 20, stream: true }),
    cost: chatCost(15, 2),
  },
  {
    name: 'embeddings',
    behavior: { kind: 'embeddings', promptTokens: 9 },
    request: () => post('/embeddings', { model: EMBED, input: 'a red bicycle' }),
    cost: cost(parsePrice(EMBED_PRICE), 9),
  },
  {
    name: 'speech',
    request: () => post('/audio/speech', { model: AUDIO, voice: 'alloy', input: SPEECH_INPUT }),
    cost: speechCost(SPEECH_INPUT),
  },
  {
    name: 'images (answered inline)',
    request: () => post('/images/generations', { model: IMAGE, prompt: 'a red bicycle', size: '1024x1024' }),
    cost: imageCost('1080P'),
  },
];

describe(`every billed endpoint: the client holds its whole answer only once the charge is in the store (settles take ${SETTLE_MS} ms)`, () => {
  for (const c of cases) {
    it(c.name, async () => {
      if (c.behavior) up.setBehavior(c.behavior);
      const res = await gateway.fetch(c.request());
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      const requestId = res.headers.get('x-request-id');
      // The whole answer is here: its charge must be in the store now, not later.
      const entries = (await stores.billing.ledger(ACCOUNT)).filter((e) => e.id === requestId);
      expect(
        entries.map((e) => e.cost),
        `the ledger holds the charge of ${requestId} when the client holds its whole answer`,
      ).toEqual([c.cost]);
    });
  }
});
