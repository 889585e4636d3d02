/**
 * One body of checks run against every framework adapter (express, fastify, next, bun).
 * A test file starts the slow upstream and a server mounting a gateway configured with
 * `frameworkConfig`, then calls `frameworkCases` with the server's base URL (…/v1).
 *
 * Each check sends from its own loopback address (127.0.0.x, bound with undici's
 * `localAddress`), so the small per-IP budget of one check never spends another's, and
 * the throttle check can show that the adapter hands the gateway the real peer address.
 */
import { performance } from 'node:perf_hooks';
import OpenAI from 'openai';
import { Agent, fetch as undiciFetch, type RequestInit as UndiciRequestInit } from 'undici';
import { afterAll, expect, it as vitestIt } from 'vitest';
import type { GatewayConfigInput } from '../../src/index.js';
import { REPLY, WORDS, type SlowUpstream } from './slow-upstream.js';

export const KEY = 'sk-mg-FRAMEWORKframeworkFRAMEWORKframeworkFRAME0001';
export const MODEL = 'slow/chat';
/** A model on the built-in simulator (no HTTP upstream), streaming a chunk every 50 ms. */
export const SIM_MODEL = 'sim/chat';
/** Requests per minute per client address. */
export const IP_LIMIT = 3;
export const MAX_BODY_BYTES = 64 * 1024;

/** The gateway configuration every framework test serves. */
export function frameworkConfig(upstreamUrl: string): Omit<GatewayConfigInput, 'storage'> {
  return {
    upstreams: { slow: { baseUrl: upstreamUrl, timeoutMs: 10_000 }, sim: { simulate: true, chunkDelayMs: 50 } },
    models: [
      { id: MODEL, type: 'text', upstream: 'slow', pricing: { prompt: '0.000001', completion: '0.000002' } },
      { id: SIM_MODEL, type: 'text', upstream: 'sim', pricing: { prompt: '0.000001', completion: '0.000002' } },
    ],
    accounts: [{ id: 'acme', walletUsd: '100' }],
    keys: [{ key: KEY, account: 'acme', kind: 'developer' }],
    limits: { ipRequestsPerMinute: IP_LIMIT, keyRequestsPerMinute: 1000, maxBodyBytes: MAX_BODY_BYTES },
  };
}

export interface FrameworkTarget {
  /** Base URL of the gateway's API, ending with /v1. */
  baseURL: string;
  upstream: SlowUpstream;
}

export type CaseName = 'plain' | 'stream' | 'sse' | 'unauthorized' | 'throttle' | 'bodyLimit' | 'disconnect';

type Fetch = (url: string, init?: UndiciRequestInit) => Promise<Response>;

/** fetch and an openai client whose connections start from `localAddress`. */
export function clientFrom(localAddress: string, baseURL: () => string, agents: Agent[]) {
  const dispatcher = new Agent({ localAddress });
  agents.push(dispatcher);
  const fetch: Fetch = (url, init) => undiciFetch(url, { ...init, dispatcher }) as unknown as Promise<Response>;
  const openai = (apiKey = KEY) =>
    new OpenAI({ baseURL: baseURL(), apiKey, maxRetries: 0, timeout: 20_000, fetch: fetch as unknown as OpenAI['fetch'] });
  return { fetch, openai };
}

/** Registers the shared checks; `target` is read when the checks run (after beforeAll). */
export function frameworkCases(target: () => FrameworkTarget): void {
  const agents: Agent[] = [];
  afterAll(async () => {
    await Promise.all(agents.map((a) => a.close()));
  });

  const client = (localAddress: string) => clientFrom(localAddress, () => target().baseURL, agents);
  // Each check is named, so a target's output says which of the shared checks it ran.
  const it = (_name: CaseName, title: string, fn: () => Promise<void>) => vitestIt(title, fn);
  const url = (path: string) => `${target().baseURL}${path}`;
  const chatBody = (stream: boolean) =>
    JSON.stringify({ model: MODEL, stream, messages: [{ role: 'user', content: 'Say hello.' }] });
  const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };

  it('plain', 'answers a plain chat completion through the openai client', async () => {
    const completion = await client('127.0.0.11')
      .openai()
      .chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Say hello.' }] });
    expect(completion.choices[0]?.message.content).toBe(REPLY);
    expect(completion.usage?.completion_tokens).toBe(WORDS.length);
  });

  it('stream', 'streams a chat completion through the openai client', async () => {
    const stream = await client('127.0.0.12')
      .openai()
      .chat.completions.create({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'Say hello.' }] });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe(REPLY);
  });

  it('sse', 'relays SSE unbuffered: the first chunk arrives before the upstream sends its last', async () => {
    const { upstream } = target();
    const before = upstream.exchanges.length;
    const res = await client('127.0.0.13').fetch(url('/chat/completions'), { method: 'POST', headers: auth, body: chatBody(true) });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    let firstContentAt: number | undefined;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      if (firstContentAt === undefined && text.includes(WORDS[0]!)) firstContentAt = performance.now();
    }
    const exchange = upstream.exchanges[before]!;
    await exchange.over;
    expect(text).toContain('data: [DONE]');
    expect(exchange.sentAt).toHaveLength(WORDS.length);
    expect(firstContentAt).toBeDefined();
    expect(firstContentAt!).toBeLessThan(exchange.sentAt.at(-1)!);
  });

  it('unauthorized', 'refuses a wrong key with 401 and the error envelope', async () => {
    const err = await client('127.0.0.14')
      .openai('sk-mg-WRONGwrongWRONGwrongWRONGwrongWRONGwrong0000')
      .models.list()
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as InstanceType<typeof OpenAI.AuthenticationError>).status).toBe(401);
    expect((err as InstanceType<typeof OpenAI.AuthenticationError>).code).toBe('invalid_api_key');
  });

  it('throttle', 'throttles per client address, with Retry-After, and each address has its own budget', async () => {
    const first = client('127.0.0.2');
    for (let i = 0; i < IP_LIMIT; i++) {
      const res = await first.fetch(url('/models'), { headers: auth });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    const limited = await first.fetch(url('/models'), { headers: auth });
    expect(limited.status).toBe(429);
    const retryAfter = Number(limited.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(Number(limited.headers.get('retry-after-ms'))).toBeGreaterThan(0);
    const body = (await limited.json()) as { error: { code: string; metadata?: { limit?: string } } };
    expect(body.error.code).toBe('rate_limit_exceeded');
    expect(body.error.metadata?.limit).toBe('ip_requests_per_minute');

    const second = await client('127.0.0.3').fetch(url('/models'), { headers: auth });
    expect(second.status).toBe(200);
    await second.arrayBuffer();
  });

  it('bodyLimit', 'refuses a body over the limit with 413, declared or streamed', async () => {
    const { fetch } = client('127.0.0.15');
    const big = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x'.repeat(MAX_BODY_BYTES * 2) }] });
    const declared = await fetch(url('/chat/completions'), { method: 'POST', headers: auth, body: big });
    expect(declared.status).toBe(413);
    expect(((await declared.json()) as { error: { code: string } }).error.code).toBe('request_too_large');

    const bytes = new TextEncoder().encode(big);
    // No Content-Length: the limit has to hold while the body streams in.
    async function* chunked() {
      for (let at = 0; at < bytes.length; at += 16 * 1024) yield bytes.subarray(at, at + 16 * 1024);
    }
    const streamed = await fetch(url('/chat/completions'), { method: 'POST', headers: auth, body: chunked(), duplex: 'half' });
    expect(streamed.status).toBe(413);
    expect(((await streamed.json()) as { error: { code: string } }).error.code).toBe('request_too_large');
  });

  it('disconnect', 'passes a client disconnect on: the upstream call is stopped', async () => {
    const { upstream } = target();
    const before = upstream.exchanges.length;
    const abort = new AbortController();
    const res = await client('127.0.0.16').fetch(url('/chat/completions'), {
      method: 'POST',
      headers: auth,
      body: chatBody(true),
      signal: abort.signal,
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    await reader.read();
    abort.abort();
    await reader.cancel().catch(() => undefined);
    const exchange = upstream.exchanges[before]!;
    await exchange.over;
    expect(exchange.closedEarly).toBe(true);
    expect(exchange.sentAt.length).toBeLessThan(WORDS.length);
  });
}
