/**
 * Money, round 4, as a hostile client found it on 8a5d6c2, on memory and on Redis (a networked
 * driver): inline documents held at the context window, hour-long cache writes at their own
 * price, price-changing fields priced or refused, the prompt of a stream the client left before
 * its first word, images billed per image returned, and a Responses stream whose text comes
 * only in `.done` events relayed as it arrives.
 */
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { deleteKeysWithPrefix, REDIS_URL, redisProblem } from '../../bench/redis-util.js';
import { auditBooks } from '../../src/billing/audit.js';
import { costOf, parsePrice } from '../../src/billing/money.js';
import type { Stores } from '../../src/index.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { createRedisStores } from '../../src/stores/redis/entry.js';
import { chargesOf, promptEstimate } from '../helpers/billing.js';
import { ACCOUNT, eventually, MODEL, startGateway, testConfig, type RunningGateway } from '../helpers/gateway.js';
import { IMAGE, mediaModels } from '../helpers/media.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const CI = process.env.CI === 'true';
const redisDown = await redisProblem(REDIS_URL);
const drivers: Array<[string, boolean, (prefix: string) => Stores]> = [
  ['memory', true, () => createMemoryStores()],
  ['redis', redisDown === null || CI, (prefix) => createRedisStores({ url: REDIS_URL, keyPrefix: prefix })],
];

const PROMPT_PICO = parsePrice('0.000001');
const COMPLETION_PICO = parsePrice('0.000002');

describe.each(drivers)('money round 4 on %s', (_name, enabled, makeStores) => {
  let up: TestUpstream;
  let gw: RunningGateway;
  let devKey: string;
  let prefix: string;

  async function start(walletUsd: string | number, tweak?: (o: ReturnType<typeof testConfig>['options']) => void) {
    prefix = `mg-r4-${Math.random().toString(36).slice(2)}:`;
    const setup = testConfig({ upstreamUrl: up.url, walletUsd, models: mediaModels('test') });
    devKey = setup.devKey;
    tweak?.(setup.options);
    gw = await startGateway({ ...setup.options, stores: makeStores(prefix) });
  }

  const post = (path: string, body: unknown, init: RequestInit = {}) =>
    fetch(`${gw.baseURL}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      ...init,
    });
  const charges = () => chargesOf(gw.gateway.admin.ledger(ACCOUNT));
  // A client gone after the answer's content ended leaves the upstream read on for its usage
  // (usageGraceMs, 5 s by default) before the bill: wait past that.
  const settled = () =>
    eventually(async () => (await gw.stores.billing.openHolds(ACCOUNT)) === 0 && (await gw.stores.billing.wallet(ACCOUNT)).held === 0n, 'no hold left', 15_000);

  beforeEach(async () => {
    up = await startTestUpstream();
  });
  afterEach(async () => {
    await gw?.close();
    await up.close();
    if (!_name.startsWith('memory') && enabled) {
      const c = new Redis(REDIS_URL);
      await deleteKeysWithPrefix(c, prefix);
      c.disconnect();
    }
  });

  it.runIf(enabled)('1. an inline PDF is held at the context window on chat and Responses alike: 402 on a wallet it would overdraw, nothing sent', async () => {
    // 32,000 tokens of context at 0.000001 USD is 0.032 USD: more than the wallet holds.
    await start('0.03');
    up.setBehavior({ kind: 'json' });
    const pdf = `data:application/pdf;base64,${Buffer.from('%PDF-1.4 tiny').toString('base64')}`;
    const chat = await post('/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Summarise' }, { type: 'file', file: { filename: 'a.pdf', file_data: pdf } }] }],
    });
    expect(chat.status).toBe(402);
    const responses = await post('/responses', {
      model: MODEL,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'Summarise' }, { type: 'input_file', filename: 'a.pdf', file_data: pdf }] }],
    });
    expect(responses.status).toBe(402);
    // The same PDF (or a video) sent as an image part is a document too: an upstream that takes
    // any inline data (Gemini) bills it by its pages, not as one image.
    const chatImage = await post('/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Summarise' }, { type: 'image_url', image_url: { url: pdf } }] }],
    });
    expect(chatImage.status).toBe(402);
    const responsesImage = await post('/responses', {
      model: MODEL,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'Summarise' }, { type: 'input_image', image_url: 'data:video/mp4;base64,AAAA' }] }],
    });
    expect(responsesImage.status).toBe(402);
    const messagesImage = await post('/messages', {
      model: MODEL,
      max_tokens: 10,
      messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0xLjQ=' } }] }],
    });
    expect(messagesImage.status).toBe(402);
    expect(up.requests).toHaveLength(0);
    expect(await charges()).toEqual([]);
    // A real image still fits the wallet it fitted.
    const png = await post('/chat/completions', {
      model: MODEL,
      max_tokens: 5,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is it?' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${IMAGE}` } }] }],
    });
    expect(png.status).toBe(200);
  });

  it.runIf(enabled)("2. Anthropic's hour-long cache writes are billed at cacheWrite1h (default twice the prompt price)", async () => {
    await start(100, (o) => {
      o.upstreams = { test: { kind: 'anthropic', baseUrl: up.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 10_000 } };
    });
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            id: 'msg_1',
            type: 'message',
            role: 'assistant',
            model: 'claude',
            content: [{ type: 'text', text: 'ok' }],
            stop_reason: 'end_turn',
            stop_sequence: null,
            usage: {
              input_tokens: 10,
              cache_read_input_tokens: 0,
              cache_creation_input_tokens: 3000,
              cache_creation: { ephemeral_5m_input_tokens: 1000, ephemeral_1h_input_tokens: 2000 },
              output_tokens: 5,
            },
          }),
        );
      },
    });
    const res = await post('/messages', { model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    await settled();
    const [entry] = await charges();
    expect(entry!.units).toMatchObject({ kind: 'tokens', prompt: 3010, completion: 5, cacheWrite: 3000, cacheWrite1h: 2000 });
    // 10 uncached + 1,000 five-minute writes at the prompt price, 2,000 hour-long writes at twice it.
    expect(entry!.cost).toBe(costOf([[PROMPT_PICO, 1010], [2n * PROMPT_PICO, 2000], [COMPLETION_PICO, 5]]));
    // The charge keeps the hour-long price, and the audit re-derives its cost from it.
    expect(await auditBooks(gw.stores, { account: ACCOUNT })).toMatchObject({ ok: true });
  });

  it.runIf(enabled)('3. service_tier "priority" is refused unless the model prices it, and then billed at its price', async () => {
    await start(100, (o) => {
      const m = o.models![0]!;
      o.models!.push({ ...m, id: 'test/priced', pricing: { prompt: '0.000001', completion: '0.000002', serviceTiers: { priority: { prompt: '0.000002', completion: '0.000004' } } } });
    });
    up.setBehavior({ kind: 'json' });
    for (const path of ['/chat/completions', '/responses']) {
      const body = path === '/responses' ? { model: MODEL, input: 'hi', service_tier: 'priority' } : { model: MODEL, messages: [{ role: 'user', content: 'hi' }], service_tier: 'priority' };
      const res = await post(path, body);
      expect(res.status, path).toBe(400);
      expect(((await res.json()) as { error: { param: string } }).error.param).toBe('service_tier');
    }
    const geo = await post('/messages', { model: MODEL, max_tokens: 10, inference_geo: 'us', messages: [{ role: 'user', content: 'hi' }] });
    expect(geo.status).toBe(400);
    expect(up.requests).toHaveLength(0);
    const ok = await post('/chat/completions', { model: 'test/priced', messages: [{ role: 'user', content: 'hi' }], service_tier: 'priority' });
    expect(ok.status).toBe(200);
    const answer = (await ok.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    await settled();
    const [entry] = await charges();
    expect(entry!.cost).toBe(costOf([[2n * PROMPT_PICO, answer.usage.prompt_tokens], [2n * COMPLETION_PICO, answer.usage.completion_tokens]]));
    // Charged at the tier's prices, kept on the entry: the audit re-derives the cost.
    expect(await auditBooks(gw.stores, { account: ACCOUNT })).toMatchObject({ ok: true });
    // Standard tiers are the list price and pass.
    const standard = await post('/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], service_tier: 'default' });
    expect(standard.status).toBe(200);
  });

  it.runIf(enabled)('3b. legacy completions and embeddings price service_tier as chat does; embeddings refuse brand, knowledge and stream; nothing sent', async () => {
    const tiers = { priority: { prompt: '0.000002', completion: '0.000004' } };
    await start(100, (o) => {
      const m = o.models![0]!;
      o.models!.push(
        { ...m, id: 'test/priced', pricing: { prompt: '0.000001', completion: '0.000002', serviceTiers: tiers } },
        { id: 'test/embed', type: 'text', upstream: 'test', embedding: true, pricing: { prompt: '0.000001', completion: '0' }, contextLength: 8_000 },
        { id: 'test/embed-priced', type: 'text', upstream: 'test', embedding: true, pricing: { prompt: '0.000001', completion: '0', serviceTiers: tiers }, contextLength: 8_000 },
      );
    });
    const refused: Array<[string, Record<string, unknown>, string]> = [
      ['/completions', { model: MODEL, prompt: 'hi', service_tier: 'priority' }, 'service_tier'],
      ['/completions', { model: MODEL, prompt: 'hi', service_tier: 'flex' }, 'service_tier'],
      ['/embeddings', { model: 'test/embed', input: 'hi', service_tier: 'priority' }, 'service_tier'],
      ['/embeddings', { model: 'test/embed', input: 'hi', brand: 'nope' }, 'brand'],
      ['/embeddings', { model: 'test/embed', input: 'hi', knowledge: ['x'] }, 'knowledge'],
      ['/embeddings', { model: 'test/embed', input: 'hi', stream: true }, 'stream'],
    ];
    for (const [path, body, param] of refused) {
      const res = await post(path, body);
      expect(res.status, `${path} ${param}`).toBe(400);
      expect(((await res.json()) as { error: { param: string } }).error.param, path).toBe(param);
    }
    expect(up.requests).toHaveLength(0);

    up.setBehavior({ kind: 'json' });
    const ok = await post('/completions', { model: 'test/priced', prompt: 'hi', service_tier: 'priority' });
    expect(ok.status).toBe(200);
    const answer = (await ok.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    await settled();
    const [entry] = await charges();
    expect(entry!.cost).toBe(costOf([[2n * PROMPT_PICO, answer.usage.prompt_tokens], [2n * COMPLETION_PICO, answer.usage.completion_tokens]]));

    up.setBehavior({ kind: 'embeddings', promptTokens: 9 });
    const embedded = await post('/embeddings', { model: 'test/embed-priced', input: 'hi', service_tier: 'priority' });
    expect(embedded.status).toBe(200);
    await settled();
    const all = await charges();
    expect(all).toHaveLength(2);
    expect(all.find((e) => e.model === 'test/embed-priced')!.cost).toBe(costOf([[2n * PROMPT_PICO, 9]]));
    expect(await auditBooks(gw.stores, { account: ACCOUNT })).toMatchObject({ ok: true });
    // Standard tiers are the list price and pass.
    expect((await post('/embeddings', { model: 'test/embed', input: 'hi', service_tier: 'default', stream: false })).status).toBe(200);
  });

  it.runIf(enabled)('4. a stream the client leaves before its first word pays its prompt', async () => {
    await start(100);
    up.setBehavior({ kind: 'stream', chunks: ['never', ' sent'], delayMs: 3_000, usage: false });
    const abort = new AbortController();
    const messages = [{ role: 'user', content: 'A long prompt the provider reads in full. '.repeat(20) }];
    const res = await post('/chat/completions', { model: MODEL, messages, stream: true }, { signal: abort.signal });
    expect(res.status).toBe(200);
    await res.body!.getReader().read();
    abort.abort();
    await settled();
    const [entry] = await charges();
    const prompt = await promptEstimate(messages);
    expect(entry!.units).toMatchObject({ kind: 'tokens', prompt, completion: 0 });
    expect(entry!.cost).toBe(costOf([[PROMPT_PICO, prompt]]));
  });

  it.runIf(enabled)('5. images are billed per image returned: 8 returned for n=1 are 8 charged', async () => {
    await start(100);
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ created: 1, data: Array.from({ length: 8 }, (_, i) => ({ url: `https://img.example/${i}.png` })) }));
      },
    });
    const res = await post('/images/generations', { model: IMAGE, prompt: 'a cat', n: 1, size: '1024x1024' });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: unknown[] }).data).toHaveLength(8);
    await settled();
    const [entry] = await charges();
    expect(entry!.units).toMatchObject({ kind: 'images', images: 8 });
  });

  it.runIf(enabled)("5b. a plugin's body is what a media call is held and billed at: 4K and n: 4 asked by the plugin, not 256x256 by the client", async () => {
    let ran = 0;
    // 4 images at 4K (0.16 USD each) is 0.64 USD: more than this wallet holds.
    await start('0.5', (o) => {
      o.plugins = [
        {
          onUpstreamRequest: ({ path, body, setBody }) => {
            if (path !== '/images/generations') return;
            ran++;
            if (body.prompt === 'a cat') setBody({ ...body, size: '3840x2160', n: 4 });
          },
        },
      ];
    });
    up.setBehavior({
      kind: 'custom',
      handle(_req, res, rec) {
        const n = Number(rec.body?.n ?? 1);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ created: 1, data: Array.from({ length: n }, (_, i) => ({ url: `https://img.example/${i}.png` })) }));
      },
    });
    const refused = await post('/images/generations', { model: IMAGE, prompt: 'a cat', n: 1, size: '256x256' });
    expect(refused.status).toBe(402);
    expect(up.requests).toHaveLength(0);
    await gw.gateway.admin.topUp(ACCOUNT, '1');
    const res = await post('/images/generations', { model: IMAGE, prompt: 'a cat', n: 1, size: '256x256' });
    expect(res.status).toBe(200);
    await settled();
    const [entry] = await charges();
    expect(entry!.units).toMatchObject({ kind: 'images', images: 4, tier: '4K' });
    expect(entry!.cost).toBe(4n * 160_000_000n);
    expect(entry!.exceededHold).toBe(false);
    // The upstream got the plugin's body, and the plugin ran once per request.
    expect(up.requests.at(-1)!.body).toMatchObject({ size: '3840x2160', n: 4 });
    expect(ran).toBe(2);
    // A request the plugin only looks at: it runs once (not again when the body is sent).
    expect((await post('/images/generations', { model: IMAGE, prompt: 'a dog', n: 1, size: '256x256' })).status).toBe(200);
    await settled();
    expect(ran).toBe(3);
    expect((await charges())[1]!.units).toMatchObject({ kind: 'images', images: 1, tier: '480P' });
  });

  it.runIf(enabled)('5c. a usage report of zero prompt tokens for a prompt is no count: the prompt is counted, for chat and embeddings alike', async () => {
    await start(100, (o) => {
      o.models = [...(o.models ?? []), { id: 'test/embed', type: 'text', upstream: 'test', embedding: true, pricing: { prompt: '0.000001', completion: '0' }, contextLength: 8_000 }];
    });
    const messages = [{ role: 'user', content: 'Three hundred words of prompt, reported as none at all by a broken usage report.' }];
    up.setBehavior({ kind: 'json', usage: { prompt_tokens: 0, completion_tokens: 7 } });
    expect((await post('/chat/completions', { model: MODEL, messages })).status).toBe(200);
    up.setBehavior({ kind: 'embeddings', promptTokens: 0 });
    expect((await post('/embeddings', { model: 'test/embed', input: 'some words to embed, several of them' })).status).toBe(200);
    await settled();
    const [chat, embed] = await charges();
    expect(chat!.units).toMatchObject({ kind: 'tokens', prompt: await promptEstimate(messages), completion: 7 });
    expect(chat!.measured).toBe('tokenizer');
    expect((embed!.units as { prompt: number }).prompt).toBeGreaterThan(0);
    expect(embed!.cost).toBeGreaterThan(0n);
  });

  it.runIf(enabled)('8. a Responses stream whose text comes only in .done events goes out as it arrives; a client that leaves then pays for it', async () => {
    await start(100);
    const text = Array.from({ length: 1000 }, (_, i) => `word${i}`).join(' ');
    const event = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    let upstreamClosed = false;
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.on('close', () => {
          upstreamClosed = true;
        });
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(
          event('response.created', { response: { id: 'resp_r4', object: 'response', status: 'in_progress', output: [] } }) +
            event('response.output_item.added', { output_index: 0, item: { id: 'msg_1', type: 'message', role: 'assistant', content: [] } }) +
            event('response.output_text.done', { item_id: 'msg_1', output_index: 0, content_index: 0, text }) +
            event('response.output_item.done', { output_index: 0, item: { id: 'msg_1', type: 'message', role: 'assistant', content: [{ type: 'output_text', text, annotations: [] }] } }),
        );
        // ...and then it stalls: the connection stays open until the client leaves.
      },
    });
    const abort = new AbortController();
    const res = await post('/responses', { model: MODEL, input: 'go', stream: true }, { signal: abort.signal });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let got = '';
    while (!got.includes('response.output_item.done')) {
      const { value, done } = await reader.read();
      if (done) break;
      got += new TextDecoder().decode(value);
    }
    // The upstream has not ended: the events came because they were relayed as they arrived.
    expect(got).toContain('word999');
    expect(upstreamClosed).toBe(false);
    abort.abort();
    await settled();
    const [entry] = await charges();
    expect((entry!.units as { completion: number }).completion).toBeGreaterThan(1000);
  });

  it.runIf(enabled)('4b. a plain call the client leaves after the upstream answered 200 pays its prompt', async () => {
    await start(100);
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        // The 200 and the start of the body, then the rest never comes while the client waits.
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"id":"chatcmpl-1","object":"chat.completion","choices":[');
      },
    });
    const messages = [{ role: 'user', content: 'A prompt the provider read in full. '.repeat(10) }];
    const abort = new AbortController();
    const pending = post('/chat/completions', { model: MODEL, messages }, { signal: abort.signal }).catch(() => null);
    await eventually(() => up.requests.length === 1, 'the upstream to have the request');
    await new Promise((r) => setTimeout(r, 200));
    abort.abort();
    await pending;
    await settled();
    const [entry] = await charges();
    const prompt = await promptEstimate(messages);
    expect(entry!.units).toMatchObject({ kind: 'tokens', prompt, completion: 0 });
  });

  it.runIf(enabled)('the upstream gets the held cap back when a plugin removed the client\'s', async () => {
    await start(100, (o) => {
      o.plugins = [
        {
          onUpstreamRequest({ body, setBody }) {
            const { max_output_tokens: _a, max_completion_tokens: _b, max_tokens: _c, ...rest } = body;
            setBody(rest);
          },
        },
      ];
    });
    up.setBehavior({ kind: 'json' });
    const chat = await post('/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 100 });
    expect(chat.status).toBe(200);
    expect(up.requests.at(-1)!.body!.max_completion_tokens).toBe(100);
  });
});
