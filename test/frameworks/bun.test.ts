/** The shared framework checks against examples/bun, run by the real `bun` binary. */
import { performance } from 'node:perf_hooks';
import type { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { clientFrom, frameworkCases, frameworkConfig, KEY, SIM_MODEL } from './shared.case.js';
import { startSlowUpstream, type SlowUpstream } from './slow-upstream.js';
import { repoRoot, spawnServer, writeConfig, type Spawned } from './spawn.js';

// Bun resolves `undici` to its own built-in module without a working Pool; the gateway's HTTP
// upstream then runs over Bun's fetch (src/upstream/fetch-upstream.ts). Every shared check
// runs against a real HTTP upstream, and the simulator cases below cover the same ground.

describe('bun', () => {
  let upstream: SlowUpstream;
  let media: MediaUpstream;
  let server: Spawned;
  let baseURL: string;
  const agents: Agent[] = [];

  beforeAll(async () => {
    upstream = await startSlowUpstream();
    media = await startMediaUpstream();
    const config = await writeConfig(frameworkConfig(upstream.url, media.url));
    server = await spawnServer(`${repoRoot}node_modules/.bin/bun`, ['examples/bun/server.ts'], {
      env: { PORT: '0', HOST: '127.0.0.1', MODEL_GATEWAY_CONFIG: config },
      ready: /model-gateway on Bun: (http:\/\/\S+\/v1)/,
      timeoutMs: 30_000,
    });
    baseURL = server.match[1]!;
  });

  afterAll(async () => {
    await Promise.all(agents.map((a) => a.close()));
    await server?.stop();
    await upstream?.close();
    await media?.close();
  });

  frameworkCases(() => ({ baseURL, upstream, media }));

  describe('with the built-in simulator upstream', () => {
    it('answers plain and streamed chat through the openai client', async () => {
      const openai = clientFrom('127.0.0.21', () => baseURL, agents).openai();
      const completion = await openai.chat.completions.create({ model: SIM_MODEL, messages: [{ role: 'user', content: 'hi' }] });
      expect(completion.choices[0]?.message.content).toMatch(/^Hello!/);
      const stream = await openai.chat.completions.create({ model: SIM_MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text).toBe(completion.choices[0]?.message.content);
    });

    it('relays SSE unbuffered: chunks arrive spread over the stream, not at its end', async () => {
      const { fetch } = clientFrom('127.0.0.22', () => baseURL, agents);
      const res = await fetch(`${baseURL}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: SIM_MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const reader = res.body!.getReader();
      let first: number | undefined;
      for (;;) {
        const { done } = await reader.read();
        if (done) break;
        first ??= performance.now();
      }
      // About 30 chunks 50 ms apart: buffered, they would all arrive at the end.
      expect(performance.now() - first!).toBeGreaterThan(500);
    });

    it('passes a client disconnect on: the stream is billed for what was produced', async () => {
      const { fetch } = clientFrom('127.0.0.23', () => baseURL, agents);
      const headers = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
      const body = JSON.stringify({ model: SIM_MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] });
      type KeyView = { data: { usage: number; wallet: { held: number } } };
      const keyView = async () => ((await (await fetch(`${baseURL}/key`, { headers })).json()) as KeyView).data;

      // What a whole answer costs.
      const before = await keyView();
      const whole = await fetch(`${baseURL}/chat/completions`, { method: 'POST', headers, body });
      await whole.text();
      await new Promise((r) => setTimeout(r, 200));
      const afterWhole = await keyView();
      const wholeCost = afterWhole.usage - before.usage;
      expect(wholeCost).toBeGreaterThan(0);

      // Hang up after the first words, then wait longer than the whole stream takes.
      const abort = new AbortController();
      const res = await clientFrom('127.0.0.24', () => baseURL, agents).fetch(`${baseURL}/chat/completions`, {
        method: 'POST',
        headers,
        body,
        signal: abort.signal,
      });
      const reader = res.body!.getReader();
      let seen = '';
      while (!seen.includes('Hello')) seen += new TextDecoder().decode((await reader.read()).value);
      abort.abort();
      await new Promise((r) => setTimeout(r, 2_500));
      const afterCut = await clientFrom('127.0.0.25', () => baseURL, agents)
        .fetch(`${baseURL}/key`, { headers })
        .then(async (r) => ((await r.json()) as KeyView).data);
      // Billed (the hold is gone) and for less than a whole answer: the stream was stopped.
      expect(afterCut.wallet.held).toBe(0);
      expect(afterCut.usage - afterWhole.usage).toBeGreaterThan(0);
      expect(afterCut.usage - afterWhole.usage).toBeLessThan(wholeCost);
    });
  });
});
