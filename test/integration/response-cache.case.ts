/**
 * The response cache, the same on every storage driver: a second identical request is a hit
 * with one upstream call (plain, streamed, and across the two), never across accounts or a
 * changed field; a hit is billed at the hit price exactly, through the wallet (402 when empty);
 * entries expire and are purged; an idempotent replay and a hit never both charge; the books
 * stay clean.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditBooks } from '../../src/billing/audit.js';
import { parsePrice } from '../../src/billing/money.js';
import type { LedgerEntry, Stores } from '../../src/stores/types.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';
import { ACCOUNT, COMPLETION_PRICE, MODEL, PROMPT_PRICE, type RunningGateway, startGateway, testConfig, testKey } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const OTHER = 'acct_other';
const POOR = 'acct_poor';
const USAGE = { prompt_tokens: 11, completion_tokens: 7 };
/** The list cost of USAGE in pico-USD: 11 prompt and 7 completion tokens at the test prices. */
const LIST_PICO = parsePrice(PROMPT_PRICE) * 11n + parsePrice(COMPLETION_PRICE) * 7n;
/** A fraction of the list cost, rounded up to the nano-USD. */
const atFraction = (fraction: string) => (LIST_PICO * parsePrice(fraction) + 10n ** 15n - 1n) / 10n ** 15n;

export function responseCacheCases(name: string, makeStores: () => Promise<Stores>, dropStores: () => Promise<void> = async () => {}): void {
  describe(`response cache (${name})`, () => {
    let up: TestUpstream;
    let gw: RunningGateway;
    let devKey: string;
    const otherKey = testKey();
    const poorKey = testKey();
    const secondKey = testKey();
    let n = 0;
    /** A prompt no other test sends: each test starts with a cold cache. */
    const fresh = () => [{ role: 'user', content: `question ${name} ${++n} ${Date.now()}` }];

    beforeAll(async () => {
      up = await startTestUpstream();
      up.setBehavior((rec) => (rec.body?.stream ? { kind: 'stream', chunks: ['Hel', 'lo', '!'], usageCounts: USAGE } : { kind: 'json', content: 'Hello!', usage: USAGE }));
      const setup = testConfig({
        upstreamUrl: up.url,
        models: [
          { id: 'test/half', upstream: 'test', upstreamModel: 'provider-chat-1', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE }, cache: { hitPrice: '0.5' } },
          { id: 'test/full', upstream: 'test', upstreamModel: 'provider-chat-1', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE }, cache: { hitPrice: '1' } },
          { id: 'test/third', upstream: 'test', upstreamModel: 'provider-chat-1', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE }, cache: { hitPrice: '0.3333' } },
          { id: 'test/short', upstream: 'test', upstreamModel: 'provider-chat-1', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE }, cache: { ttlSeconds: 1 } },
          { id: 'test/perkey', upstream: 'test', upstreamModel: 'provider-chat-1', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE }, cache: { scope: 'key' } },
          { id: 'test/never', upstream: 'test', upstreamModel: 'provider-chat-1', pricing: { prompt: PROMPT_PRICE, completion: COMPLETION_PRICE }, cache: false },
        ],
        accounts: [
          { id: OTHER, walletUsd: 10 },
          { id: POOR, walletUsd: 1 },
        ],
        keys: [
          { key: otherKey, account: OTHER },
          { key: poorKey, account: POOR },
          { key: secondKey, account: ACCOUNT },
        ],
      });
      devKey = setup.devKey;
      gw = await startGateway({ ...setup.options, cache: {}, admin: { tokenSha256: ADMIN_SHA }, stores: await makeStores() });
    });
    afterAll(async () => {
      await gw?.close();
      await up?.close();
      await dropStores();
    });

    const post = (body: Record<string, unknown>, key = devKey, headers: Record<string, string> = {}) =>
      fetch(`${gw.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
    const sdk = (key = devKey) => new OpenAI({ baseURL: gw.baseURL, apiKey: key, maxRetries: 0 });
    const ledgerOf = async (account: string, id: string | null): Promise<LedgerEntry[]> =>
      (await gw.stores.billing.ledger(account)).filter((e) => e.units.kind !== 'credit' && (id === null || e.id === id));
    const charged = async (res: Response, account = ACCOUNT) => {
      const id = res.headers.get('x-request-id')!;
      const entries = await ledgerOf(account, id);
      return entries;
    };

    it('a second identical plain request is a HIT, one upstream call, billed at the hit price ("0": free)', async () => {
      const body = { model: MODEL, messages: fresh() };
      const calls = up.requests.length;
      const first = await post(body);
      expect(first.status).toBe(200);
      expect(first.headers.get('x-cache')).toBe('MISS');
      const firstJson = await first.json();
      const second = await post(body);
      expect(second.status).toBe(200);
      expect(second.headers.get('x-cache')).toBe('HIT');
      expect(Number(second.headers.get('age'))).toBeGreaterThanOrEqual(0);
      expect(await second.json()).toEqual(firstJson);
      expect(up.requests.length - calls).toBe(1);
      const [entry] = await charged(second);
      expect(entry).toMatchObject({ measured: 'cache', cost: 0n, units: { kind: 'tokens', prompt: 11, completion: 7 } });
    });

    it('a second identical streamed request is a HIT with the same content, finish reason and usage', async () => {
      const messages = fresh();
      const calls = up.requests.length;
      const read = async () => {
        const stream = await sdk().chat.completions.create({ model: MODEL, messages: messages as never, stream: true, stream_options: { include_usage: true } });
        let text = '';
        let finish: string | null = null;
        let usage: unknown = null;
        for await (const chunk of stream) {
          text += chunk.choices[0]?.delta.content ?? '';
          finish = chunk.choices[0]?.finish_reason ?? finish;
          if (chunk.usage) usage = chunk.usage;
        }
        return { text, finish, usage };
      };
      const first = await read();
      const second = await read();
      expect(first).toMatchObject({ text: 'Hello!', finish: 'stop', usage: { prompt_tokens: 11, completion_tokens: 7 } });
      expect(second).toEqual(first);
      expect(up.requests.length - calls).toBe(1);
    });

    it('a stored plain answer serves a streamed request, and a stored stream a plain one', async () => {
      const plainFirst = { model: MODEL, messages: fresh() };
      const calls = up.requests.length;
      const plain = await sdk().chat.completions.create(plainFirst as never);
      const streamed = await post({ ...plainFirst, stream: true, stream_options: { include_usage: true } });
      expect(streamed.headers.get('x-cache')).toBe('HIT');
      expect(streamed.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const again = await sdk().chat.completions.create({ ...plainFirst, stream: true, stream_options: { include_usage: true } } as never);
      let text = '';
      let finish: string | null = null;
      let usage: { prompt_tokens: number; completion_tokens: number } | null = null;
      for await (const chunk of again as unknown as AsyncIterable<OpenAI.Chat.ChatCompletionChunk>) {
        text += chunk.choices[0]?.delta.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (chunk.usage) usage = chunk.usage;
      }
      expect(text).toBe(plain.choices[0]?.message.content);
      expect(finish).toBe(plain.choices[0]?.finish_reason);
      expect(usage).toMatchObject({ prompt_tokens: plain.usage?.prompt_tokens, completion_tokens: plain.usage?.completion_tokens });

      // And back: a stream stored (its client never asked for the usage chunk) serves a plain request.
      const streamFirst = { model: MODEL, messages: fresh() };
      const s = await sdk().chat.completions.create({ ...streamFirst, stream: true } as never);
      let streamedText = '';
      for await (const chunk of s as unknown as AsyncIterable<OpenAI.Chat.ChatCompletionChunk>) streamedText += chunk.choices[0]?.delta.content ?? '';
      const res = await post(streamFirst);
      expect(res.headers.get('x-cache')).toBe('HIT');
      const json = (await res.json()) as OpenAI.Chat.ChatCompletion;
      expect(json).toMatchObject({ object: 'chat.completion', choices: [{ message: { role: 'assistant', content: streamedText }, finish_reason: 'stop' }], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } });
      expect(up.requests.length - calls).toBe(2);
    });

    it("another account's identical request is a MISS; a changed field misses; a model with cache false has no X-Cache", async () => {
      const body = { model: MODEL, messages: fresh() };
      const calls = up.requests.length;
      expect((await post(body)).headers.get('x-cache')).toBe('MISS');
      expect((await post(body, otherKey)).headers.get('x-cache')).toBe('MISS');
      expect((await post({ ...body, temperature: 0.5 })).headers.get('x-cache')).toBe('MISS');
      expect((await post({ ...body, max_tokens: 99 })).headers.get('x-cache')).toBe('MISS');
      expect(up.requests.length - calls).toBe(4);
      // The same fields in another order are the same request.
      expect((await post({ messages: body.messages, model: MODEL })).headers.get('x-cache')).toBe('HIT');
      const never = await post({ model: 'test/never', messages: fresh() });
      expect(never.status).toBe(200);
      expect(never.headers.get('x-cache')).toBeNull();
    });

    it('scope "key": another key of the same account misses; scope "account" (the default): it hits', async () => {
      const perKey = { model: 'test/perkey', messages: fresh() };
      expect((await post(perKey)).headers.get('x-cache')).toBe('MISS');
      expect((await post(perKey, secondKey)).headers.get('x-cache')).toBe('MISS');
      expect((await post(perKey, secondKey)).headers.get('x-cache')).toBe('HIT');
      const shared = { model: MODEL, messages: fresh() };
      expect((await post(shared)).headers.get('x-cache')).toBe('MISS');
      expect((await post(shared, secondKey)).headers.get('x-cache')).toBe('HIT');
    });

    it('Cache-Control: no-store neither reads nor writes (BYPASS); no-cache skips the lookup and refreshes', async () => {
      const body = { model: MODEL, messages: fresh() };
      const calls = up.requests.length;
      expect((await post(body, devKey, { 'cache-control': 'no-store' })).headers.get('x-cache')).toBe('BYPASS');
      expect((await post(body)).headers.get('x-cache')).toBe('MISS');
      expect((await post(body, devKey, { 'cache-control': 'no-store' })).headers.get('x-cache')).toBe('BYPASS');
      expect((await post(body, devKey, { 'cache-control': 'no-cache' })).headers.get('x-cache')).toBe('MISS');
      expect((await post(body)).headers.get('x-cache')).toBe('HIT');
      expect(up.requests.length - calls).toBe(4);
    });

    it('hitPrice "0.5", "1" and "0.3333" bill exactly that fraction of the list cost, rounded up, in one "cache" entry', async () => {
      for (const [model, fraction] of [['test/half', '0.5'], ['test/full', '1'], ['test/third', '0.3333']] as const) {
        const body = { model, messages: fresh() };
        await post(body);
        const { balance: before } = await gw.stores.billing.wallet(ACCOUNT);
        const hit = await post(body);
        expect(hit.headers.get('x-cache')).toBe('HIT');
        const entries = await charged(hit);
        expect(entries).toHaveLength(1);
        expect(entries[0]).toMatchObject({ measured: 'cache', cost: atFraction(fraction), model });
        expect((await gw.stores.billing.wallet(ACCOUNT)).balance).toBe(before - atFraction(fraction));
      }
      expect(atFraction('0.3333')).toBe(8_333n); // 25,000 nano-USD x 0.3333 = 8,332.5, rounded up
      expect(await auditBooks(gw.stores, { account: ACCOUNT })).toMatchObject({ ok: true });
    });

    it('a hit on an empty wallet is 402, and charges nothing', async () => {
      const body = { model: 'test/full', messages: fresh() };
      expect((await post(body, poorKey)).status).toBe(200);
      const { balance } = await gw.stores.billing.wallet(POOR);
      await gw.stores.billing.credit({ accountId: POOR, creditId: `drain-${n}`, amount: -balance, reason: 'drain', adjustment: true, at: Date.now() });
      const hit = await post(body, poorKey);
      expect(hit.status).toBe(402);
      expect(((await hit.json()) as { error: { code: string } }).error.code).toBe('insufficient_quota');
      expect((await gw.stores.billing.wallet(POOR)).balance).toBe(0n);
      expect(await auditBooks(gw.stores, { account: POOR })).toMatchObject({ ok: true });
    });

    it('an entry expires after its TTL', async () => {
      const body = { model: 'test/short', messages: fresh() };
      const calls = up.requests.length;
      await post(body);
      expect((await post(body)).headers.get('x-cache')).toBe('HIT');
      await new Promise((r) => setTimeout(r, 1_100));
      expect((await post(body)).headers.get('x-cache')).toBe('MISS');
      expect(up.requests.length - calls).toBe(2);
    });

    it("DELETE /admin/v1/cache?account= purges that account's entries only; without it, all", async () => {
      const body = { model: MODEL, messages: fresh() };
      await post(body);
      await post(body, otherKey);
      const purge = (query: string) => fetch(`${gw.origin}/admin/v1/cache${query}`, { method: 'DELETE', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      const one = await purge(`?account=${OTHER}`);
      expect(one.status).toBe(200);
      // The other account's entries (this test's, and an earlier test's) go.
      expect(((await one.json()) as { purged: number }).purged).toBeGreaterThanOrEqual(1);
      expect((await post(body, otherKey)).headers.get('x-cache')).toBe('MISS');
      expect((await post(body)).headers.get('x-cache')).toBe('HIT');
      const all = (await (await purge('')).json()) as { purged: number };
      expect(all.purged).toBeGreaterThanOrEqual(2);
      expect((await post(body)).headers.get('x-cache')).toBe('MISS');
    });

    it('an idempotent replay and a cache hit never both charge', async () => {
      const body = { model: 'test/full', messages: fresh() };
      const key = `idem-${name}-${n}`;
      const first = await post(body, devKey, { 'idempotency-key': key });
      expect(first.headers.get('x-cache')).toBe('MISS');
      const replay = await post(body, devKey, { 'idempotency-key': key });
      expect(replay.status).toBe(200);
      // The replay is the first answer, paid once: no cache hit billed for it.
      const before = (await ledgerOf(ACCOUNT, null)).length;
      expect(before).toBeGreaterThan(0);
      const hitKey = `${key}-hit`;
      const hit = await post(body, devKey, { 'idempotency-key': hitKey });
      expect(hit.headers.get('x-cache')).toBe('HIT');
      const hitReplay = await post(body, devKey, { 'idempotency-key': hitKey });
      expect(hitReplay.status).toBe(200);
      const entries = await ledgerOf(ACCOUNT, null);
      // Exactly one more entry: the hit's; its replay charged nothing.
      expect(entries.length - before).toBe(1);
      expect(entries.filter((e) => e.id === first.headers.get('x-request-id'))).toHaveLength(1);
      expect(entries.filter((e) => e.measured === 'cache' && e.id === hit.headers.get('x-request-id'))).toHaveLength(1);
      expect(await auditBooks(gw.stores, { account: ACCOUNT })).toMatchObject({ ok: true });
    });
  });
}
