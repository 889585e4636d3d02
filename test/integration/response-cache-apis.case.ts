/**
 * The response cache on the other cached APIs: legacy completions and Anthropic Messages (a
 * hit with one upstream call, plain stored and streamed served, and back, read by the official
 * SDKs) and embeddings (a hit, billed at the hit price).
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import type { Stores } from '../../src/stores/types.js';
import { ACCOUNT, COMPLETION_PRICE, MODEL, PROMPT_PRICE, type RunningGateway, startGateway, testConfig } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';

const USAGE = { prompt_tokens: 11, completion_tokens: 3 };
const EMBED = 'test/embed';

export function responseCacheApiCases(name: string, makeStores: () => Promise<Stores>, dropStores: () => Promise<void> = async () => {}): void {
  describe(`response cache on completions, Messages and embeddings (${name})`, () => {
    let up: TestUpstream;
    let gw: RunningGateway;
    let devKey: string;
    let n = 0;
    const fresh = () => `question ${name} ${++n} ${Date.now()}`;

    beforeAll(async () => {
      up = await startTestUpstream();
      up.setBehavior((rec) => {
        if (rec.path.endsWith('/embeddings')) return { kind: 'embeddings', promptTokens: 9 };
        if (rec.path.endsWith('/chat/completions')) return rec.body?.stream ? { kind: 'stream', chunks: ['Hel', 'lo', '!'], usageCounts: USAGE } : { kind: 'json', content: 'Hello!', usage: USAGE };
        return { kind: 'completion', chunks: ['Hel', 'lo', '!'], usage: USAGE };
      });
      const setup = testConfig({
        upstreamUrl: up.url,
        models: [{ id: EMBED, upstream: 'test', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE }, embedding: true, cache: { hitPrice: '1' } }],
      });
      devKey = setup.devKey;
      gw = await startGateway({ ...setup.options, cache: { hitPrice: '0.5' }, metrics: { path: '/metrics' }, admin: { tokenSha256: ADMIN_SHA }, stores: await makeStores() });
    });
    afterAll(async () => {
      await gw?.close();
      await up?.close();
      await dropStores();
    });

    const openai = () => new OpenAI({ baseURL: gw.baseURL, apiKey: devKey, maxRetries: 0 });
    const anthropic = () => new Anthropic({ baseURL: gw.origin, apiKey: devKey, maxRetries: 0 });

    it('completions: a plain answer serves a streamed request, and a stream a plain one, with one upstream call each', async () => {
      const prompt = fresh();
      const calls = up.requests.length;
      const plain = await openai().completions.create({ model: MODEL, prompt });
      const stream = await openai().completions.create({ model: MODEL, prompt, stream: true, stream_options: { include_usage: true } });
      let text = '';
      let finish: string | null = null;
      let usage: unknown = null;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.text ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (chunk.usage) usage = chunk.usage;
      }
      expect(text).toBe(plain.choices[0]?.text);
      expect(finish).toBe(plain.choices[0]?.finish_reason);
      expect(usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 3 });

      const other = fresh();
      const s = await openai().completions.create({ model: MODEL, prompt: other, stream: true });
      let streamed = '';
      for await (const chunk of s) streamed += chunk.choices[0]?.text ?? '';
      const res = await fetch(`${gw.baseURL}/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt: other }),
      });
      expect(res.headers.get('x-cache')).toBe('HIT');
      expect(await res.json()).toMatchObject({ object: 'text_completion', choices: [{ text: streamed, finish_reason: 'stop' }], usage: { prompt_tokens: 11, completion_tokens: 3 } });
      expect(up.requests.length - calls).toBe(2);
    });

    it('Messages: a plain Message serves a streamed request, and a stream a plain one, read by the Anthropic SDK', async () => {
      const calls = up.requests.length;
      const ask = (content: string) => ({ model: MODEL, max_tokens: 100, messages: [{ role: 'user' as const, content }] });
      const q = fresh();
      const message = await anthropic().messages.create(ask(q));
      const final = await anthropic().messages.stream(ask(q)).finalMessage();
      expect(final.content).toEqual(message.content);
      expect(final.stop_reason).toBe(message.stop_reason);
      expect(final.usage).toMatchObject({ input_tokens: message.usage.input_tokens, output_tokens: message.usage.output_tokens });

      const other = fresh();
      const streamed = await anthropic().messages.stream(ask(other)).finalMessage();
      const plain = await anthropic().messages.create(ask(other)).withResponse();
      expect(plain.response.headers.get('x-cache')).toBe('HIT');
      expect(plain.data.content).toEqual(streamed.content);
      expect(plain.data.stop_reason).toBe(streamed.stop_reason);
      expect(plain.data.usage).toMatchObject({ input_tokens: streamed.usage.input_tokens, output_tokens: streamed.usage.output_tokens });
      expect(up.requests.length - calls).toBe(2);
    });

    it('embeddings: a second identical request is a HIT billed at the hit price, one upstream call', async () => {
      const calls = up.requests.length;
      const input = fresh();
      const first = await openai().embeddings.create({ model: EMBED, input }).withResponse();
      const second = await openai().embeddings.create({ model: EMBED, input }).withResponse();
      expect(first.response.headers.get('x-cache')).toBe('MISS');
      expect(second.response.headers.get('x-cache')).toBe('HIT');
      expect(second.data.data[0]?.embedding).toEqual(first.data.data[0]?.embedding);
      expect(up.requests.length - calls).toBe(1);
      const id = second.response.headers.get('x-request-id');
      const [entry] = (await gw.stores.billing.ledger(ACCOUNT)).filter((e) => e.id === id);
      // 9 prompt tokens at 0.000001 USD, at hitPrice "1": 9,000 nano-USD.
      expect(entry).toMatchObject({ measured: 'cache', cost: 9_000n, units: { kind: 'tokens', prompt: 9, completion: 0 } });
      expect(await auditBooks(gw.stores, { account: ACCOUNT })).toMatchObject({ ok: true });
    });

    it('the metrics and the admin API count the hits, misses and USD saved, per account and model', async () => {
      // So far: completions and Messages 2 hits and 2 misses each at hitPrice "0.5" (11 prompt and
      // 3 completion tokens: 17,000 nano-USD listed, 8,500 saved a hit); embeddings 1 and 1 at "1".
      const stats = (await (await fetch(`${gw.origin}/admin/v1/cache`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).json()) as {
        total: { hits: number; misses: number; saved_usd: string; hit_rate: number };
        data: Array<{ account: string; model: string; hits: number; saved_usd: string }>;
      };
      expect(stats.total).toMatchObject({ hits: 5, misses: 5, saved_usd: '0.000034', hit_rate: 0.5 });
      expect(stats.data).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ account: ACCOUNT, model: MODEL, hits: 4, saved_usd: '0.000034' }),
          expect.objectContaining({ account: ACCOUNT, model: EMBED, hits: 1, saved_usd: '0' }),
        ]),
      );
      const text = await (await fetch(`${gw.origin}/metrics`)).text();
      expect(text).toMatch(/^model_gateway_cache_hits_total 5$/m);
      expect(text).toMatch(/^model_gateway_cache_misses_total 5$/m);
      expect(text).toMatch(/^model_gateway_cache_saved_usd_total 0\.000034$/m);
      expect(text).toMatch(/^model_gateway_cache_stored_bytes_total [1-9]\d*$/m);
    });
  });
}
