/**
 * One body of checks run against every framework adapter (express, fastify, next, bun,
 * node:http). A test file starts the slow upstream, the media upstream and a server mounting a
 * gateway configured with `frameworkConfig`, then calls `frameworkCases` with the server's
 * base URL (…/v1).
 *
 * Each check sends from its own loopback address (127.0.0.x, bound with undici's
 * `localAddress`), so the small per-IP budget of one check never spends another's, and
 * the throttle check can show that the adapter hands the gateway the real peer address.
 */
import { performance } from 'node:perf_hooks';
import OpenAI, { toFile } from 'openai';
import { Agent, fetch as undiciFetch, type RequestInit as UndiciRequestInit } from 'undici';
import { afterAll, expect, it as vitestIt } from 'vitest';
import type { GatewayConfigInput } from '../../src/index.js';
import type { MediaUpstream } from '../helpers/media-upstream.js';
import { REPLY, WORDS, type SlowUpstream } from './slow-upstream.js';

export const KEY = 'sk-mg-FRAMEWORKframeworkFRAMEWORKframeworkFRAME0001';
export const MODEL = 'slow/chat';
/** A model on the built-in simulator (no HTTP upstream), streaming a chunk every 50 ms. */
export const SIM_MODEL = 'sim/chat';
/** A video model on the media upstream (test/helpers/media-upstream.ts). */
export const VIDEO_MODEL = 'media/video';
/** Requests per minute per client address. */
export const IP_LIMIT = 3;
export const MAX_BODY_BYTES = 64 * 1024;

/** The gateway configuration every framework test serves; `mediaUrl` adds the video model. */
export function frameworkConfig(upstreamUrl: string, mediaUrl?: string): Omit<GatewayConfigInput, 'storage'> {
  const upstreams: NonNullable<GatewayConfigInput['upstreams']> = { slow: { baseUrl: upstreamUrl, timeoutMs: 10_000 }, sim: { simulate: true, chunkDelayMs: 50 } };
  if (mediaUrl) upstreams.media = { baseUrl: mediaUrl, timeoutMs: 10_000 };
  const video = { id: VIDEO_MODEL, type: 'video', upstream: 'media', pricing: { unit: 'second', from: '0.1', tiers: { '720P': '0.1' } } } as const;
  return {
    upstreams,
    models: [
      { id: MODEL, type: 'text', upstream: 'slow', pricing: { prompt: '0.000001', completion: '0.000002' } },
      { id: SIM_MODEL, type: 'text', upstream: 'sim', pricing: { prompt: '0.000001', completion: '0.000002' } },
      ...(mediaUrl ? [video] : []),
    ],
    accounts: [{ id: 'acme', walletUsd: '100' }],
    keys: [{ key: KEY, account: 'acme', kind: 'developer' }],
    // Video jobs are polled every 50 ms: a finished upstream job shows within a moment.
    limits: { ipRequestsPerMinute: IP_LIMIT, keyRequestsPerMinute: 1000, maxBodyBytes: MAX_BODY_BYTES, jobPollIntervalMs: 50 },
  };
}

export interface FrameworkTarget {
  /** Base URL of the gateway's API, ending with /v1. */
  baseURL: string;
  upstream: SlowUpstream;
  /** The upstream of VIDEO_MODEL (the gateway's config names its URL). */
  media: MediaUpstream;
}

export type CaseName = 'plain' | 'stream' | 'sse' | 'statusLine' | 'unauthorized' | 'throttle' | 'bodyLimit' | 'disconnect' | 'video' | 'delete';

type Fetch = (url: string, init?: UndiciRequestInit) => Promise<Response>;

/** fetch and an openai client whose connections start from `localAddress`. */
export function clientFrom(localAddress: string, baseURL: () => string, agents: Agent[]) {
  const dispatcher = new Agent({ localAddress });
  agents.push(dispatcher);
  const fetch: Fetch = async (url, init) =>
    undiciFetch(url, { ...(await withEncodedForm(init)), dispatcher }) as unknown as Promise<Response>;
  // The openai client checks the fetch's Response class can encode the global FormData.
  Object.assign(fetch, { Response: globalThis.Response });
  const openai = (apiKey = KEY) =>
    new OpenAI({ baseURL: baseURL(), apiKey, maxRetries: 0, timeout: 20_000, fetch: fetch as unknown as OpenAI['fetch'] });
  return { fetch, openai };
}

/**
 * undici's fetch does not know Node's global FormData (the one the openai client builds for a
 * multipart upload): such a body is encoded here, its boundary in the Content-Type.
 */
async function withEncodedForm(init: UndiciRequestInit | undefined): Promise<UndiciRequestInit | undefined> {
  if (!(init?.body instanceof FormData)) return init;
  const encoded = new Response(init.body);
  const headers = Object.fromEntries(new Headers(init.headers as HeadersInit));
  headers['content-type'] = encoded.headers.get('content-type') ?? '';
  return { ...init, headers, body: new Uint8Array(await encoded.arrayBuffer()) };
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

  it('statusLine', "sends a stream's 200 when the upstream's arrives, not with the model's first event", async () => {
    const { upstream } = target();
    const before = upstream.exchanges.length;
    const body = JSON.stringify({ model: MODEL, stream: true, messages: [{ role: 'user', content: '[late:1500] Say hello.' }] });
    const res = await client('127.0.0.20').fetch(url('/chat/completions'), { method: 'POST', headers: auth, body });
    const headersAt = performance.now();
    expect(res.status).toBe(200);
    const text = await res.text();
    const exchange = upstream.exchanges[before]!;
    await exchange.over;
    // The client had the status line before the upstream wrote its first event.
    expect(headersAt).toBeLessThan(exchange.sentAt[0]!);
    // What went before the first event is a comment, which every SSE client skips.
    expect(text.slice(0, text.indexOf('data: '))).toMatch(/^(: [^\n]*\n\n)*$/);
    expect(text).toContain('data: [DONE]');
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

  it('bodyLimit', 'a connection that got an early 413 still serves the calls after it', async () => {
    // One connection for both calls: the second goes where the refused body was left unread.
    const one = new Agent({ localAddress: '127.0.0.31', connections: 1 });
    agents.push(one);
    const big = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x'.repeat(2 * 1024 * 1024) }] });
    const refused = await undiciFetch(url('/chat/completions'), { method: 'POST', headers: auth, body: big, dispatcher: one });
    expect(refused.status).toBe(413);
    await refused.arrayBuffer();
    // Answered at all: a hung connection is cut only by the server's keep-alive timeout.
    const next = await undiciFetch(url('/models'), { headers: auth, dispatcher: one, signal: AbortSignal.timeout(15_000) });
    expect(next.status).toBe(200);
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

  it('video', "creates a video from a multipart body (the openai client's videos.create): the upstream gets its fields and file", async () => {
    const { media } = target();
    const before = media.requests.length;
    const reference = await toFile(PNG, 'reference.png', { type: 'image/png' });
    const video = await client('127.0.0.17')
      .openai()
      .videos.create({ model: VIDEO_MODEL, prompt: 'Waves at dusk.', seconds: '4', size: '720x1280', input_reference: reference });
    expect(video.status).toBe('queued');
    expect(video.model).toBe(VIDEO_MODEL);
    const sent = media.requests.slice(before).filter((r) => r.method === 'POST' && r.path === '/videos');
    expect(sent).toHaveLength(1);
    // The body is multipart and says its boundary, so the upstream could read it: each field,
    // and the file with its name and bytes.
    expect(sent[0]!.contentType).toMatch(/^multipart\/form-data; ?boundary=/);
    expect(sent[0]!.fields).toEqual({ model: VIDEO_MODEL, prompt: 'Waves at dusk.', seconds: '4', size: '720x1280' });
    expect(sent[0]!.raw.includes(Buffer.from('filename="reference.png"'))).toBe(true);
    expect(sent[0]!.raw.includes(PNG)).toBe(true);
    // Nothing left running: an open hold would show in the wallet other checks read.
    await finishUpstreamVideo(media, 'Waves at dusk.');
  });

  it('delete', 'deletes a finished video job (DELETE /videos/{id}) through the openai client', async () => {
    const { media } = target();
    const { openai } = client('127.0.0.18');
    const video = await openai().videos.create({ model: VIDEO_MODEL, prompt: 'A job to delete.', seconds: '4' });
    await finishUpstreamVideo(media, 'A job to delete.');
    // The client looks from another address (the per-IP budget is small).
    const watcher = client('127.0.0.19').openai();
    await expect.poll(async () => (await watcher.videos.retrieve(video.id)).status, { timeout: 10_000, interval: 400 }).toBe('completed');

    expect(await openai().videos.delete(video.id)).toEqual({ id: video.id, object: 'video.deleted', deleted: true });
    const gone = await openai()
      .videos.retrieve(video.id)
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(gone).toBeInstanceOf(OpenAI.NotFoundError);
  });
}

/** Ends the upstream job of the video asked with `prompt`; resolves once the gateway's poller has seen it end. */
async function finishUpstreamVideo(media: MediaUpstream, prompt: string): Promise<void> {
  const job = media.videos().find((v) => v.prompt === prompt);
  expect(job, `an upstream video job for "${prompt}"`).toBeDefined();
  const finishedAt = media.requests.length;
  media.finishVideo(job!.id);
  const polled = () => media.requests.slice(finishedAt).some((r) => r.method === 'GET' && r.path === `/videos/${job!.id}`);
  await expect.poll(polled, { timeout: 10_000 }).toBe(true);
}

/** A 1x1 PNG: the reference image sent with a video. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==', 'base64');
