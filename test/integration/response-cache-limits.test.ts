/**
 * A response-cache hit counts as a request for its key's rate like any call, a streamed
 * answer the client left before its end is never stored, and an answer the output guardrails
 * rewrite is never served from an entry (a hit would skip their checks). A hit of a Deprecated
 * model carries its Deprecation and Sunset headers, as the call that stored it did; a hit is
 * priced on the stored hosted tool calls too; the key is the body the upstream receives (a
 * brand that changed misses); an answer over maxEntryBytes is not kept.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargesOf } from '../helpers/billing.js';
import { ACCOUNT, MODEL, type RunningGateway, postChat, startGateway, testConfig, testKey } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const LEGACY = 'test/legacy-cached';
const SEARCH = 'test/search-cached';
/** A model whose entries may hold at most 600 bytes. */
const SMALL = 'test/small-entries';

describe('response cache and limits', () => {
  let up: TestUpstream;
  let gw: RunningGateway;
  let devKey: string;
  const rateKey = testKey();
  const guardedKey = testKey();
  const legacyKey = testKey();
  const searchKey = testKey();
  const brandKey = testKey();
  const smallKey = testKey();
  const tinyKey = testKey();
  const refreshKey = testKey();
  const oldKey = testKey();
  beforeAll(async () => {
    up = await startTestUpstream();
    const setup = testConfig({
      upstreamUrl: up.url,
      limits: { keyRequestsPerMinute: 3 },
      accounts: [
        { id: 'acct_guarded', walletUsd: 100 },
        { id: 'acct_search', walletUsd: 100 },
      ],
      keys: [
        { key: rateKey, account: ACCOUNT },
        { key: guardedKey, account: 'acct_guarded' },
        { key: legacyKey, account: ACCOUNT },
        { key: searchKey, account: 'acct_search' },
        { key: brandKey, account: ACCOUNT },
        { key: smallKey, account: ACCOUNT },
        { key: tinyKey, account: ACCOUNT },
        { key: refreshKey, account: ACCOUNT },
        { key: oldKey, account: ACCOUNT },
      ],
      brands: [{ id: 'kettleco', account: ACCOUNT, name: 'KettleCo', description: 'Kettles', voice: 'Speak like a kettle.' }],
      models: [
        { id: LEGACY, type: 'text', upstream: 'test', pricing: { prompt: '0.0000005', completion: '0.0000015' }, posture: 'Deprecated', retiresAt: '2099-06-30' },
        // A hit at full price: what the call cost, its search included.
        { id: SEARCH, type: 'text', upstream: 'test', pricing: { prompt: '0.0000005', completion: '0.0000015', tools: { web_search: '0.01' } }, cache: { hitPrice: '1' } },
        { id: SMALL, type: 'text', upstream: 'test', pricing: { prompt: '0.0000005', completion: '0.0000015' }, cache: { maxEntryBytes: 600 } },
      ],
    });
    devKey = setup.devKey;
    const guardrails = [{ id: 'pii-out', kind: 'pii' as const, on: ['output' as const], action: 'redact' as const, accounts: ['acct_guarded'] }];
    gw = await startGateway({ ...setup.options, cache: {}, guardrails });
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
  });

  it('a stream the client left before its end is not stored: the next identical request misses', async () => {
    up.setBehavior({ kind: 'stream', chunks: ['a', 'b', 'c', 'd', 'e', 'f'], delayMs: 100 });
    const body = { model: MODEL, messages: [{ role: 'user', content: 'cut' }], stream: true };
    const controller = new AbortController();
    const res = await postChat(gw.baseURL, devKey, body, { signal: controller.signal });
    expect(res.headers.get('x-cache')).toBe('MISS');
    const reader = res.body!.getReader();
    await reader.read();
    controller.abort();
    await reader.read().catch(() => undefined);
    await up.requests[up.requests.length - 1]!.closed;
    up.setBehavior({ kind: 'json', content: 'Hello!' });
    const again = await postChat(gw.baseURL, devKey, { ...body, stream: false });
    expect(again.headers.get('x-cache')).toBe('MISS');
  });

  it('a hit counts for the key’s request rate: the request after the limit is 429, hit or not', async () => {
    up.setBehavior({ kind: 'json', content: 'Hello!' });
    const calls = up.requests.length;
    const body = { model: MODEL, messages: [{ role: 'user', content: 'rate' }] };
    expect((await postChat(gw.baseURL, rateKey, body)).headers.get('x-cache')).toBe('MISS');
    expect((await postChat(gw.baseURL, rateKey, body)).headers.get('x-cache')).toBe('HIT');
    expect((await postChat(gw.baseURL, rateKey, body)).headers.get('x-cache')).toBe('HIT');
    const limited = await postChat(gw.baseURL, rateKey, body);
    expect(limited.status).toBe(429);
    expect(up.requests.length - calls).toBe(1);
  });

  it('an answer the output guardrails rewrite bypasses the cache: each call goes upstream and is checked', async () => {
    up.setBehavior({ kind: 'json', content: 'Write to jane.doe@example.com today.' });
    const calls = up.requests.length;
    const body = { model: MODEL, messages: [{ role: 'user', content: 'guarded' }] };
    for (let i = 0; i < 2; i++) {
      const res = await postChat(gw.baseURL, guardedKey, body);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-cache')).toBe('BYPASS');
      const answer = (await res.json()) as { choices: { message: { content: string } }[] };
      expect(answer.choices[0]!.message.content).toBe('Write to [REDACTED:EMAIL] today.');
    }
    expect(up.requests.length - calls).toBe(2);
  });

  it('a hit of a Deprecated model carries its Deprecation and Sunset headers, plain and streamed', async () => {
    up.setBehavior({ kind: 'json', content: 'Old news.' });
    const body = { model: LEGACY, messages: [{ role: 'user', content: 'deprecated' }] };
    // A key of its own: the key rate here is 3 a minute, and this takes 3.
    const miss = await postChat(gw.baseURL, legacyKey, body);
    expect(miss.headers.get('x-cache')).toBe('MISS');
    const sunset = miss.headers.get('sunset');
    expect(new Date(sunset!).toISOString()).toBe('2099-06-30T00:00:00.000Z');
    for (const stream of [false, true]) {
      const hit = await postChat(gw.baseURL, legacyKey, { ...body, stream });
      expect(hit.headers.get('x-cache')).toBe('HIT');
      expect(hit.headers.get('deprecation')).toBe(miss.headers.get('deprecation'));
      expect(hit.headers.get('sunset')).toBe(sunset);
      await hit.text();
    }
  });

  it('a hit is priced on the stored answer’s hosted tool calls too, plain and streamed', async () => {
    up.setBehavior({ kind: 'json', content: 'Found it.' });
    const body = { model: SEARCH, messages: [{ role: 'user', content: 'search' }], web_search_options: {} };
    const ledger = () => chargesOf(gw.stores.billing.ledger('acct_search'));
    expect((await postChat(gw.baseURL, searchKey, body)).headers.get('x-cache')).toBe('MISS');
    const [paid] = await ledger();
    expect(paid!.units).toMatchObject({ kind: 'tokens', tools: { web_search: 1 } });
    for (const stream of [false, true]) {
      const hit = await postChat(gw.baseURL, searchKey, { ...body, stream });
      expect(hit.headers.get('x-cache')).toBe('HIT');
      await hit.text();
    }
    const hits = (await ledger()).slice(1);
    expect(hits).toHaveLength(2);
    for (const h of hits) {
      expect(h.units).toMatchObject({ kind: 'tokens', tools: { web_search: 1 } });
      expect(h.cost).toBe(paid!.cost);
    }
  });

  it('the key is the body the upstream receives: a brand whose voice changed misses', async () => {
    up.setBehavior({ kind: 'json', content: 'Steam!' });
    const body = { model: MODEL, brand: 'kettleco', messages: [{ role: 'user', content: 'branded' }] };
    expect((await postChat(gw.baseURL, brandKey, body)).headers.get('x-cache')).toBe('MISS');
    expect((await postChat(gw.baseURL, brandKey, body)).headers.get('x-cache')).toBe('HIT');
    await gw.gateway.admin.putBrand({ id: 'kettleco', account: ACCOUNT, name: 'KettleCo', voice: 'Speak like a teapot.' });
    const after = await postChat(gw.baseURL, brandKey, body);
    expect(after.headers.get('x-cache')).toBe('MISS');
    expect(JSON.stringify(up.requests.at(-1)!.body)).toContain('teapot');
  });

  it('an answer larger than maxEntryBytes is not kept: the next identical request misses, a small one hits', async () => {
    const body = { model: SMALL, messages: [{ role: 'user', content: 'size' }] };
    up.setBehavior({ kind: 'json', content: 'x'.repeat(800) });
    expect((await postChat(gw.baseURL, smallKey, body)).headers.get('x-cache')).toBe('MISS');
    expect((await postChat(gw.baseURL, smallKey, body)).headers.get('x-cache')).toBe('MISS');
    up.setBehavior({ kind: 'json', content: 'ok' });
    const small = { ...body, messages: [{ role: 'user', content: 'tiny' }] };
    expect((await postChat(gw.baseURL, tinyKey, small)).headers.get('x-cache')).toBe('MISS');
    expect((await postChat(gw.baseURL, tinyKey, small)).headers.get('x-cache')).toBe('HIT');
    // A refresh (no-cache) whose answer is too large to keep replaces the kept one all the same:
    // the next request misses, not served the old answer.
    const kept = { ...body, messages: [{ role: 'user', content: 'refreshed' }] };
    expect((await postChat(gw.baseURL, refreshKey, kept)).headers.get('x-cache')).toBe('MISS');
    up.setBehavior({ kind: 'json', content: 'x'.repeat(800) });
    const fresh = await postChat(gw.baseURL, refreshKey, kept, { headers: { authorization: `Bearer ${refreshKey}`, 'content-type': 'application/json', 'cache-control': 'no-cache' } });
    expect(fresh.headers.get('x-cache')).toBe('MISS');
    up.setBehavior({ kind: 'json', content: 'new' });
    const next = await postChat(gw.baseURL, refreshKey, kept);
    expect(next.headers.get('x-cache')).toBe('MISS');
    expect((await next.json()).choices[0].message.content).toBe('new');
  });

  it('an entry kept before entries counted hosted tool calls is a miss: it may have made a priced call', async () => {
    up.setBehavior({ kind: 'json', content: 'Older.' });
    const body = { model: MODEL, messages: [{ role: 'user', content: 'old entry' }] };
    // Kept as the previous version kept it: no tool counts in the entry.
    const cache = gw.stores.responseCache;
    const put = cache.put;
    cache.put = (account, key, value, ttlMs, maxBytes) => {
      const { tools: _tools, ...old } = JSON.parse(value) as Record<string, unknown>;
      return put.call(cache, account, key, JSON.stringify(old), ttlMs, maxBytes);
    };
    try {
      expect((await postChat(gw.baseURL, oldKey, body)).headers.get('x-cache')).toBe('MISS');
    } finally {
      cache.put = put;
    }
    expect((await postChat(gw.baseURL, oldKey, body)).headers.get('x-cache')).toBe('MISS');
    expect((await postChat(gw.baseURL, oldKey, body)).headers.get('x-cache')).toBe('HIT');
  });
});
