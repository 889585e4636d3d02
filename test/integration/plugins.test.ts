/**
 * Plugins: the two examples work end to end; two user plugins see every hook in order with
 * the right arguments; a plugin whose every hook throws changes nothing for the client or the
 * ledger; onRequest may answer and onResponse may add a header; an upstream may be a client
 * object of the embedder's own.
 */
import { createHmac } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entryJson, webhookPerCharge } from '../../examples/plugins/webhook-per-charge.js';
import { rewriteRequest } from '../../examples/plugins/rewrite-request.js';
import type { GatewayPlugin, UpstreamClient } from '../../src/index.js';
import { chatCost, chargesOf } from '../helpers/billing.js';
import { eventually, MODEL, postChat, startGateway, testConfig, type RunningGateway, UPSTREAM_MODEL, withPluginGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
beforeAll(async () => {
  up = await startTestUpstream();
});
afterAll(() => up.close());

const messages = [{ role: 'user' as const, content: 'hello plugins' }];

const withGateway = <T>(plugins: GatewayPlugin[], fn: (gw: RunningGateway, key: string, account: string) => Promise<T>, timeoutMs?: number) =>
  withPluginGateway(up.url, plugins, fn, timeoutMs);

describe('the example plugins', () => {
  it('webhook-per-charge POSTs each ledger entry, signed', async () => {
    const received: Array<{ body: string; signature: string | undefined }> = [];
    const hook = createServer((req: IncomingMessage, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        received.push({ body, signature: req.headers['x-signature'] as string | undefined });
        res.end('ok');
      });
    });
    hook.listen(0, '127.0.0.1');
    await once(hook, 'listening');
    const url = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`;
    try {
      await withGateway([webhookPerCharge({ url, secret: 's3cret' })], async (gw, key, account) => {
        up.setBehavior({ kind: 'json', usage: { prompt_tokens: 21, completion_tokens: 13 } });
        const client = new OpenAI({ baseURL: gw.baseURL, apiKey: key, maxRetries: 0 });
        await client.chat.completions.create({ model: MODEL, messages });
        await eventually(() => received.length === 1, 'the webhook');
        const [entry] = await chargesOf(gw.stores.billing.ledger(account));
        expect(JSON.parse(received[0]!.body)).toEqual(JSON.parse(entryJson(entry!)));
        const parsed = JSON.parse(received[0]!.body) as Record<string, unknown>;
        expect(parsed).toMatchObject({ model: MODEL, cost: chatCost(21, 13).toString(), measured: 'usage', exceededHold: false });
        const expected = createHmac('sha256', 's3cret').update(received[0]!.body).digest('hex');
        expect(received[0]!.signature).toBe(`sha256=${expected}`);
      });
    } finally {
      hook.close();
    }
  });

  it('rewrite-request tags the upstream call with the key id and caps temperature', async () => {
    await withGateway([rewriteRequest({ maxTemperature: 0.5 })], async (gw, key) => {
      up.setBehavior({ kind: 'json' });
      const before = up.requests.length;
      const res = await postChat(gw.baseURL, key, { model: MODEL, messages, temperature: 1.7 });
      expect(res.status).toBe(200);
      const sent = up.requests[before]!.body!;
      expect(sent.temperature).toBe(0.5);
      expect(sent.user).toMatch(/^key_/);
      expect(sent.model).toBe(UPSTREAM_MODEL);
      expect(sent.messages).toEqual(messages);
    });
  });
});

describe('hooks', () => {
  it('two plugins run every hook in order, with the arguments of their stage', async () => {
    const calls: string[] = [];
    const seen: Record<string, unknown> = {};
    const recorder = (tag: string): GatewayPlugin => ({
      name: tag,
      onRequest: ({ request, requestId }) => void calls.push(`${tag}:onRequest ${new URL(request.url).pathname} ${requestId.slice(0, 4)}`),
      onAuthenticated: ({ key, account }) => {
        calls.push(`${tag}:onAuthenticated`);
        seen.key = key;
        seen.account = account;
      },
      onUpstreamRequest: ({ body, path, model, setBody }) => {
        calls.push(`${tag}:onUpstreamRequest ${path} ${model.id}`);
        // The second plugin sees what the first one set.
        setBody({ ...body, metadata: { ...((body.metadata as Record<string, string>) ?? {}), [tag]: 'yes' } });
      },
      onBilled: ({ entry }) => {
        calls.push(`${tag}:onBilled`);
        seen.entry = entry;
      },
      onResponse: ({ response }) => {
        calls.push(`${tag}:onResponse ${response.status}`);
        response.headers.set(`x-plugin-${tag}`, 'seen');
      },
      onError: ({ error, key }) => void calls.push(`${tag}:onError ${(error as { code?: string }).code} ${key?.account ?? 'no key'}`),
      onDispose: () => void calls.push(`${tag}:onDispose`),
    });
    const { options, devKey, account } = testConfig({ upstreamUrl: up.url });
    const gw = await startGateway({ ...options, plugins: [recorder('a'), recorder('b')] });
    up.setBehavior({ kind: 'json', usage: { prompt_tokens: 5, completion_tokens: 6 } });
    const before = up.requests.length;
    const res = await postChat(gw.baseURL, devKey, { model: MODEL, messages });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-plugin-a')).toBe('seen');
    expect(res.headers.get('x-plugin-b')).toBe('seen');
    await eventually(() => calls.filter((c) => c.endsWith('onBilled')).length === 2, 'onBilled');
    expect(up.requests[before]!.body!.metadata).toEqual({ a: 'yes', b: 'yes' });

    // A refusal (unknown model) goes through onRequest, onAuthenticated, onError and onResponse.
    const refused = await postChat(gw.baseURL, devKey, { model: 'nope', messages });
    expect(refused.status).toBe(404);
    await gw.close();

    const id = res.headers.get('x-request-id')!.slice(0, 4);
    // A charge lands in its own time (a plain answer's may land before the answer is sent).
    expect(calls.filter((c) => c.endsWith('onBilled'))).toEqual(['a:onBilled', 'b:onBilled']);
    expect(calls.filter((c) => !c.endsWith('onBilled'))).toEqual([
      `a:onRequest /v1/chat/completions ${id}`,
      `b:onRequest /v1/chat/completions ${id}`,
      'a:onAuthenticated',
      'b:onAuthenticated',
      `a:onUpstreamRequest /chat/completions ${MODEL}`,
      `b:onUpstreamRequest /chat/completions ${MODEL}`,
      'a:onResponse 200',
      'b:onResponse 200',
      expect.stringMatching(/^a:onRequest /),
      expect.stringMatching(/^b:onRequest /),
      'a:onAuthenticated',
      'b:onAuthenticated',
      // The error came after authentication: the hook is told whose key it was.
      `a:onError model_not_found ${account}`,
      `b:onError model_not_found ${account}`,
      'a:onResponse 404',
      'b:onResponse 404',
      'a:onDispose',
      'b:onDispose',
    ]);
    expect(seen.account).toBe(account);
    expect(seen.key).toMatchObject({ account, kind: 'developer', model: null });
    expect(Object.keys(seen.key as object).sort()).toEqual(['account', 'id', 'kind', 'label', 'model', 'prefix']);
    expect(JSON.stringify(seen.key)).not.toContain(devKey);
    expect(seen.entry).toMatchObject({ accountId: account, model: MODEL, cost: chatCost(5, 6) });
  });

  it('onUpstreamRequest runs once per upstream request when no plugin replaces the body', async () => {
    const seen: string[] = [];
    const { options, devKey } = testConfig({ upstreamUrl: up.url });
    const gw = await startGateway({ ...options, plugins: [{ name: 'counter', onUpstreamRequest: ({ requestId }) => void seen.push(requestId) }] });
    try {
      up.setBehavior({ kind: 'json', usage: { prompt_tokens: 5, completion_tokens: 6 } });
      const before = up.requests.length;
      const plain = await postChat(gw.baseURL, devKey, { model: MODEL, messages });
      expect(plain.status).toBe(200);
      up.setBehavior({ kind: 'stream', chunks: ['a', 'b'] });
      const streamed = await postChat(gw.baseURL, devKey, { model: MODEL, messages, stream: true });
      await streamed.text();
      expect(up.requests.length - before).toBe(2);
      expect(seen).toEqual([plain.headers.get('x-request-id'), streamed.headers.get('x-request-id')]);
    } finally {
      await gw.close();
    }
  });

  it('a plugin whose every hook throws changes nothing for the client or the ledger', async () => {
    const boom = () => {
      throw new Error('plugin bug');
    };
    const thrower: GatewayPlugin = {
      name: 'thrower',
      onRequest: boom,
      onAuthenticated: boom,
      onUpstreamRequest: boom,
      onBilled: boom,
      onResponse: async () => Promise.reject(new Error('async plugin bug')),
      onError: boom,
      onDispose: boom,
    };
    const run = (plugins: GatewayPlugin[]) =>
      withGateway(plugins, async (gw, key, account) => {
        up.setBehavior({ kind: 'stream', chunks: ['one ', 'two'], usageCounts: { prompt_tokens: 9, completion_tokens: 2 } });
        const before = up.requests.length;
        const stream = await postChat(gw.baseURL, key, { model: MODEL, stream: true, messages });
        const text = (await stream.text()).replace(/"created":\d+/g, '');
        // What the upstream got, as JSON: without a plugin the client's bytes go with the gateway's fields put ahead.
        const sent = up.requests[before]!.body;
        const refused = await postChat(gw.baseURL, key, { model: MODEL, messages: [] });
        const refusedBody = (await refused.json()) as { error: unknown };
        await eventually(async () => (await chargesOf(gw.stores.billing.ledger(account))).length === 1, 'the charge');
        const ledger = (await chargesOf(gw.stores.billing.ledger(account))).map(({ id: _id, at: _at, keyId: _k, ...rest }) => rest);
        return { status: stream.status, text, sent, refused: [refused.status, refusedBody], ledger, wallet: await gw.stores.billing.wallet(account) };
      });
    const plain = await run([]);
    const withThrower = await run([thrower]);
    expect(withThrower).toEqual(plain);
    expect(plain.ledger[0]).toMatchObject({ cost: chatCost(9, 2) });
  });

  it('onRequest may answer instead of the gateway; onResponse still sees it', async () => {
    let sawStatus = 0;
    const gate: GatewayPlugin = {
      onRequest: ({ request, setResponse }) => {
        if (request.headers.get('x-block') === 'yes') setResponse(new Response('blocked by policy', { status: 451 }));
      },
      onResponse: ({ response }) => void (sawStatus = response.status),
    };
    await withGateway([gate], async (gw, key) => {
      const before = up.requests.length;
      const res = await postChat(gw.baseURL, key, { model: MODEL, messages }, { headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-block': 'yes' } });
      expect(res.status).toBe(451);
      expect(await res.text()).toBe('blocked by policy');
      expect(sawStatus).toBe(451);
      expect(up.requests.length).toBe(before);
    });
  });
});

describe('a plugin replacing a streamed answer', () => {
  it('the replaced stream is let go: its call settles what the upstream produced, no hold left; a wrapped stream kept is read whole', async () => {
    // The first plugin wraps the answer's body in a new Response (the very stream); the
    // second replaces whatever it gets with an answer of its own, so nobody reads the upstream.
    const wrap: GatewayPlugin = {
      onResponse: ({ response, setResponse }) => setResponse(new Response(response.body, { status: response.status, headers: response.headers })),
    };
    const replace: GatewayPlugin = {
      onResponse: ({ request, response, setResponse }) => {
        if (request.headers.get('x-replace') === 'yes' && response.status === 200) setResponse(new Response('data: [DONE]\n\n', { headers: { 'content-type': 'text/event-stream' } }));
      },
    };
    await withGateway([wrap, replace], async (gw, key, account) => {
      // Five words 20 ms apart, then the finish, the usage and [DONE].
      up.setBehavior({
        kind: 'custom',
        handle(_req, res, rec) {
          const model = rec.body?.model;
          const chunk = (delta: object, finish: string | null) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          const words = ['one ', 'two ', 'three ', 'four ', 'five'];
          const timer = setInterval(() => {
            if (res.destroyed) return clearInterval(timer);
            const word = words.shift();
            if (word !== undefined) return void res.write(chunk({ content: word }, null));
            clearInterval(timer);
            res.write(chunk({}, 'stop'));
            res.write(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model, choices: [], usage: { prompt_tokens: 11, completion_tokens: 5, total_tokens: 16 } })}\n\n`);
            res.end('data: [DONE]\n\n');
          }, 20);
        },
      });
      const body = { model: MODEL, messages, stream: true };
      const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
      // In process (an app's own fetch handler): nothing else would ever read the upstream.
      const replaced = await gw.gateway.fetch(
        new Request(`${gw.baseURL}/chat/completions`, { method: 'POST', headers: { ...headers, 'x-replace': 'yes' }, body: JSON.stringify(body) }),
      );
      expect(await replaced.text()).toBe('data: [DONE]\n\n');
      // Let go as a client that left: settled at once, long before the upstream's minute-long
      // timeout would have ended an answer nobody reads, and billed (the prompt at least).
      await eventually(async () => (await gw.stores.billing.openHolds(account)) === 0, 'the replaced call settled', 8_000);
      const [charge] = await chargesOf(gw.gateway.admin.ledger(account));
      expect((charge!.units as { prompt: number }).prompt).toBeGreaterThan(0);
      // Kept, the wrapped stream reaches the client whole and is billed from its usage.
      const kept = await postChat(gw.baseURL, key, body, { headers });
      expect(await kept.text()).toContain('five');
      await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(account))).length === 2, 'the kept call billed');
      const [, second] = await chargesOf(gw.gateway.admin.ledger(account));
      expect(second!.units).toMatchObject({ kind: 'tokens', prompt: 11, completion: 5 });
    }, 60_000);
  }, 40_000);
});

describe('an upstream client object of your own', () => {
  it('serves calls like a configured upstream, billed from its usage', async () => {
    const seenCalls: Array<{ path: string; body: unknown; auth: string | undefined }> = [];
    const client: UpstreamClient = {
      async call(call) {
        seenCalls.push({ path: call.path, body: JSON.parse(String(Buffer.from(call.body as Uint8Array))), auth: call.headers.authorization });
        const text = JSON.stringify({
          id: 'own-1',
          object: 'chat.completion',
          created: 1,
          model: 'mine',
          choices: [{ index: 0, message: { role: 'assistant', content: 'from my client' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
        });
        return {
          status: 200,
          header: (name) => (name === 'content-type' ? 'application/json' : undefined),
          body: (async function* () {
            yield Buffer.from(text);
          })(),
          text: async () => text,
          discard() {},
        };
      },
    };
    const { options, devKey, account } = testConfig({ upstreamUrl: up.url });
    const gw = await startGateway({
      ...options,
      upstreams: { ...options.upstreams, own: client },
      models: [...(options.models ?? []), { id: 'own/chat', upstream: 'own', pricing: { prompt: '0.000001', completion: '0.000002' } }],
    });
    try {
      const ai = new OpenAI({ baseURL: gw.baseURL, apiKey: devKey, maxRetries: 0 });
      const answer = await ai.chat.completions.create({ model: 'own/chat', messages });
      expect(answer.choices[0]?.message.content).toBe('from my client');
      expect(seenCalls).toHaveLength(1);
      expect(seenCalls[0]).toMatchObject({ path: '/chat/completions', body: { model: 'own/chat', messages } });
      expect(seenCalls[0]!.auth).toBeUndefined();
      await eventually(async () => (await chargesOf(gw.stores.billing.ledger(account))).length === 1, 'the charge');
      expect((await chargesOf(gw.stores.billing.ledger(account)))[0]).toMatchObject({ model: 'own/chat', cost: chatCost(3, 4), upstream: 'own' });
    } finally {
      await gw.close();
    }
  });

  it('that answers with something that is not a response: 502 upstream_error (not 500), no hold left', async () => {
    const answers: unknown[] = [null, 'ok', { status: 'ok', header: () => undefined }, { status: 200 }];
    for (const answer of answers) {
      const { options, devKey, account } = testConfig({ upstreamUrl: up.url });
      const gw = await startGateway({
        ...options,
        upstreams: { ...options.upstreams, own: { call: async () => answer as never } },
        models: [...(options.models ?? []), { id: 'own/chat', upstream: 'own', pricing: { prompt: '0.000001', completion: '0.000002' } }],
      });
      try {
        const res = await postChat(gw.baseURL, devKey, { model: 'own/chat', messages });
        expect([res.status, ((await res.json()) as { error: { code: string } }).error.code], JSON.stringify(answer)).toEqual([502, 'upstream_error']);
        await eventually(async () => (await gw.stores.billing.openHolds(account)) === 0, 'no hold left');
      } finally {
        await gw.close();
      }
    }
  });

  it("whose answer's body fails after its 200: 502 upstream_error, retried, nothing charged (not 500)", async () => {
    let calls = 0;
    const client: UpstreamClient = {
      async call() {
        calls++;
        return {
          status: 200,
          header: (name) => (name === 'content-type' ? 'application/json' : undefined),
          body: { [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(new TypeError('terminated')) }) },
          text: () => Promise.reject(new TypeError('terminated')),
          discard() {},
        };
      },
    };
    const { options, devKey, account } = testConfig({ upstreamUrl: up.url });
    const gw = await startGateway({
      ...options,
      routing: { retries: 1, backoffMs: 1 },
      upstreams: { ...options.upstreams, own: client },
      models: [...(options.models ?? []), { id: 'own/chat', upstream: 'own', pricing: { prompt: '0.000001', completion: '0.000002' } }],
    });
    try {
      const res = await postChat(gw.baseURL, devKey, { model: 'own/chat', messages });
      expect(res.status).toBe(502);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('upstream_error');
      expect(calls).toBe(2);
      await eventually(async () => (await gw.stores.billing.openHolds(account)) === 0, 'no hold left');
      expect(await chargesOf(gw.stores.billing.ledger(account))).toHaveLength(0);
    } finally {
      await gw.close();
    }
  });
});

describe('a body a plugin replaces is what is held and sent, and no more', () => {
  it('a body kept by a plugin and changed after setBody (after the hold) changes nothing sent', async () => {
    const kept = new Map<string, Record<string, unknown>>();
    const plugin: GatewayPlugin = {
      name: 'late-mutator',
      onUpstreamRequest({ body, requestId, setBody }) {
        const mine = { ...body };
        kept.set(requestId, mine);
        setBody(mine);
      },
      // Runs after the hold was computed on the body (for a stream, before the model is asked).
      onOutput({ requestId }) {
        const mine = kept.get(requestId);
        if (mine) mine.max_tokens = 4000;
      },
    };
    await withGateway([plugin], async (gw, key) => {
      up.setBehavior({ kind: 'stream', chunks: ['a'], usageCounts: { prompt_tokens: 5, completion_tokens: 1 } });
      const before = up.requests.length;
      const res = await postChat(gw.baseURL, key, { model: MODEL, messages, max_tokens: 10, stream: true });
      await res.text();
      expect(res.status).toBe(200);
      expect(up.requests[before]!.body!.max_tokens).toBe(10);
    });
  });

  it('a plugin may not change what decides the price beyond tokens: the stream flag, the service tier, hosted tools', async () => {
    const cases: Array<[string, (body: Record<string, unknown>) => Record<string, unknown>, string]> = [
      ['service_tier', (b) => ({ ...b, service_tier: 'priority' }), '/chat/completions'],
      ['stream', (b) => ({ ...b, stream: true }), '/chat/completions'],
      ['web_search_options', (b) => ({ ...b, web_search_options: {} }), '/chat/completions'],
      ['tools', (b) => ({ ...b, tools: [{ type: 'web_search' }] }), '/responses'],
    ];
    for (const [field, change, path] of cases) {
      const plugin: GatewayPlugin = { name: `changes-${field}`, onUpstreamRequest: ({ body, setBody }) => setBody(change(body)) };
      await withGateway([plugin], async (gw, key, account) => {
        up.setBehavior(path === '/responses' ? { kind: 'response' } : { kind: 'stream', chunks: ['a', 'b'] });
        const before = up.requests.length;
        const body = path === '/responses' ? { model: MODEL, input: 'hi' } : { model: MODEL, messages };
        const res = await fetch(`${gw.baseURL}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
        const answer = (await res.json()) as { error: { code: string; message: string } };
        expect([res.status, answer.error.code], field).toEqual([500, 'internal_error']);
        expect(answer.error.message).toContain(`'${field}'`);
        expect(up.requests.length, field).toBe(before);
        expect(await gw.stores.billing.wallet(account)).toMatchObject({ held: 0n });
      });
    }
  });

  it("a replaced body's 402 with n choices says what each choice can afford, and a retry with it is held", async () => {
    const plugin: GatewayPlugin = { name: 'copies', onUpstreamRequest: ({ body, setBody }) => setBody({ ...body }) };
    const setup = testConfig({ upstreamUrl: up.url, walletUsd: '0.01' });
    const gw = await startGateway({ ...setup.options, plugins: [plugin] });
    try {
      up.setBehavior({ kind: 'json', usage: { prompt_tokens: 5, completion_tokens: 5 } });
      const refused = await postChat(gw.baseURL, setup.devKey, { model: MODEL, messages, n: 3, max_tokens: 4000 });
      const body = (await refused.json()) as { error: { message: string; metadata: { affordable_max_tokens: number } } };
      expect(refused.status).toBe(402);
      expect(body.error.message).toContain(`You requested up to 4000 tokens, but can only afford ${body.error.metadata.affordable_max_tokens}.`);
      const perChoice = body.error.metadata.affordable_max_tokens;
      expect(perChoice).toBeGreaterThan(0);
      expect(perChoice * 3).toBeLessThan(5000);
      const retried = await postChat(gw.baseURL, setup.devKey, { model: MODEL, messages, n: 3, max_tokens: perChoice });
      expect(retried.status, await retried.clone().text()).toBe(200);
    } finally {
      await gw.close();
    }
  });

  it('setBody takes a JSON object only: anything else throws in the plugin, which changes nothing', async () => {
    const plugin: GatewayPlugin = { name: 'not-an-object', onUpstreamRequest: ({ setBody }) => setBody([] as unknown as Record<string, unknown>) };
    await withGateway([plugin], async (gw, key) => {
      up.setBehavior({ kind: 'json' });
      const before = up.requests.length;
      const res = await postChat(gw.baseURL, key, { model: MODEL, messages, max_tokens: 7 });
      expect(res.status).toBe(200);
      expect(up.requests[before]!.body).toMatchObject({ messages, max_tokens: 7 });
    });
  });
});

describe('what a plugin may change, and what it may not, per endpoint', () => {
  const SEARCH = 'test/search';
  async function withEndpointGateway(plugin: GatewayPlugin, anthropic: boolean, fn: (gw: RunningGateway, key: string) => Promise<void>) {
    const { options, devKey } = testConfig({
      upstreamUrl: up.url,
      models: [{ id: SEARCH, type: 'text', upstream: 'test', pricing: { prompt: '0.000001', completion: '0.000002', tools: { web_search: '0.01' } } }],
    });
    if (anthropic) options.upstreams = { test: { kind: 'anthropic', baseUrl: up.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 10_000 } };
    const gw = await startGateway({ ...options, plugins: [plugin] });
    try {
      await fn(gw, devKey);
    } finally {
      await gw.close();
    }
  }
  const post = (gw: RunningGateway, key: string, path: string, body: unknown) =>
    fetch(`${gw.baseURL}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const anthropicMessage = {
    kind: 'custom' as const,
    handle(_req: unknown, res: import('node:http').ServerResponse) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: [{ type: 'text', text: 'ok' }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 10, output_tokens: 2 } }));
    },
  };
  const toolsOf = (body: Record<string, unknown>) => body.tools as Array<Record<string, unknown>> | undefined;

  it('may mark or remove tools that cost only tokens, remove a hosted tool, and say a standard tier', async () => {
    const cases: Array<[string, GatewayPlugin['onUpstreamRequest'], boolean, string, Record<string, unknown>]> = [
      [
        'cache_control on an Anthropic client tool',
        ({ body, setBody }) => setBody({ ...body, tools: toolsOf(body)!.map((t) => ({ ...t, cache_control: { type: 'ephemeral' } })) }),
        true,
        '/messages',
        { model: MODEL, max_tokens: 10, messages, tools: [{ type: 'text_editor_20250124', name: 'str_replace_editor' }] },
      ],
      [
        'the bash tool removed',
        ({ body, setBody }) => setBody({ ...body, tools: toolsOf(body)!.filter((t) => !String(t.type).startsWith('bash_')) }),
        true,
        '/messages',
        { model: MODEL, max_tokens: 10, messages, tools: [{ type: 'bash_20250124', name: 'bash' }, { name: 'lookup', input_schema: { type: 'object' } }] },
      ],
      ['a priced web_search removed', ({ body, setBody }) => setBody({ ...body, tools: [] }), false, '/responses', { model: SEARCH, input: 'hi', tools: [{ type: 'web_search' }] }],
      ['service_tier default', ({ body, setBody }) => setBody({ ...body, service_tier: 'default' }), false, '/responses', { model: MODEL, input: 'hi' }],
    ];
    for (const [what, onUpstreamRequest, anthropic, path, body] of cases) {
      await withEndpointGateway({ name: what, onUpstreamRequest }, anthropic, async (gw, key) => {
        up.setBehavior(anthropic ? anthropicMessage : { kind: 'response' });
        const res = await post(gw, key, path, body);
        expect(res.status, `${what}: ${await res.text()}`).toBe(200);
      });
    }
  });

  it('may not change where a call runs, its MCP servers or container, or its hosted tool calls held', async () => {
    const msg = { model: MODEL, max_tokens: 10, messages };
    const cases: Array<[string, boolean, string, Record<string, unknown>, (b: Record<string, unknown>) => Record<string, unknown>]> = [
      ['inference_geo', true, '/messages', msg, (b) => ({ ...b, inference_geo: 'us' })],
      ['mcp_servers', true, '/messages', msg, (b) => ({ ...b, mcp_servers: [{ type: 'url', url: 'https://mcp.example.com/sse', name: 'x' }] })],
      ['container', true, '/messages', msg, (b) => ({ ...b, container: 'container_1' })],
      ['max_tool_calls', false, '/responses', { model: SEARCH, input: 'hi', tools: [{ type: 'web_search' }], max_tool_calls: 1 }, (b) => ({ ...b, max_tool_calls: 100 })],
    ];
    for (const [field, anthropic, path, body, change] of cases) {
      await withEndpointGateway({ name: `changes-${field}`, onUpstreamRequest: ({ body: b, setBody }) => setBody(change(b)) }, anthropic, async (gw, key) => {
        up.setBehavior(anthropic ? anthropicMessage : { kind: 'response' });
        const before = up.requests.length;
        const res = await post(gw, key, path, body);
        // Messages answers in Anthropic's error shape (a type, no code).
        const answer = (await res.json()) as { error: { code?: string; type: string; message: string } };
        expect([res.status, answer.error.code ?? answer.error.type, up.requests.length - before], field).toEqual([500, anthropic ? 'api_error' : 'internal_error', 0]);
        expect(answer.error.message).toContain(`'${field}'`);
      });
    }
  });

  it('an own upstream client answering a stream with no body: 502 upstream_error, no hold left', async () => {
    const { options, devKey, account } = testConfig({ upstreamUrl: up.url });
    const gw = await startGateway({
      ...options,
      upstreams: { ...options.upstreams, own: { call: async () => ({ status: 200, header: () => undefined }) as never } },
      models: [...(options.models ?? []), { id: 'own/chat', upstream: 'own', pricing: { prompt: '0.000001', completion: '0.000002' } }],
    });
    try {
      const res = await postChat(gw.baseURL, devKey, { model: 'own/chat', messages, stream: true });
      expect([res.status, ((await res.json()) as { error: { code: string } }).error.code]).toEqual([502, 'upstream_error']);
      await eventually(async () => (await gw.stores.billing.openHolds(account)) === 0, 'no hold left');
    } finally {
      await gw.close();
    }
  });
});
