/**
 * docs/configuration.md's "Upstreams by kind" example, as written: it is a valid config, and
 * each upstream's `baseUrl` leads a chat call to the provider's real endpoint with the key in
 * the provider's header. The providers' hosts are swapped for one loopback recorder (their
 * paths kept), which answers 400 so nothing is retried.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway, type GatewayOptions } from '../../src/index.js';
import { silentLogger } from '../../src/observability/log.js';
import { testKey } from '../helpers/gateway.js';

const seen: Array<{ path: string; headers: IncomingHttpHeaders }> = [];
let server: Server;
let origin: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push({ path: req.url ?? '', headers: req.headers });
    req.resume();
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: 'recorded', type: 'invalid_request_error' } }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

async function documentedConfig(): Promise<{ upstreams: Record<string, { baseUrl: string }>; models: Array<{ id: string; upstream: string }> }> {
  const doc = await readFile(new URL('../../docs/configuration.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('\n## Upstreams by kind\n'));
  const block = /```json\n([\s\S]*?)```/.exec(section)?.[1];
  if (!block) throw new Error('no JSON example under "Upstreams by kind"');
  return JSON.parse(block.replace(/\$\{(\w+)\}/g, (_, name: string) => `key-of-${name}`));
}

describe('the documented upstream of each kind', () => {
  it.each([
    ['openai/gpt-4o-mini', 'https://api.openai.com/v1/chat/completions', 'authorization', 'Bearer key-of-OPENAI_API_KEY'],
    ['anthropic/claude-sonnet-4-5', 'https://api.anthropic.com/v1/messages', 'x-api-key', 'key-of-ANTHROPIC_API_KEY'],
    ['google/gemini-2.5-flash', 'https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent', 'x-goog-api-key', 'key-of-GEMINI_API_KEY'],
  ])('%s goes to %s, key in %s', async (model, endpoint, header, value) => {
    const config = await documentedConfig();
    const upstreams = Object.fromEntries(
      Object.entries(config.upstreams).map(([name, u]) => {
        const real = new URL(u.baseUrl);
        return [name, { ...u, baseUrl: `${origin}${real.pathname}`, realOrigin: real.origin }];
      }),
    );
    const target = Object.values(upstreams).find((u) => endpoint.startsWith(`${u.realOrigin}${new URL(u.baseUrl).pathname}`));
    expect(target, `an upstream whose baseUrl leads to ${endpoint}`).toBeDefined();
    const key = testKey();
    const options = {
      ...config,
      upstreams: Object.fromEntries(Object.entries(upstreams).map(([name, { realOrigin: _, ...u }]) => [name, u])),
      accounts: [{ id: 'acme', walletUsd: '10' }],
      keys: [{ key, account: 'acme' }],
      logger: silentLogger,
    } as GatewayOptions;
    const gateway = createGateway(options);
    try {
      await gateway.ready;
      const before = seen.length;
      const res = await gateway.fetch(
        new Request('http://localhost/v1/chat/completions', {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model, max_tokens: 16, messages: [{ role: 'user', content: 'Hello!' }] }),
        }),
      );
      await res.text();
      const call = seen[before];
      expect(call, 'the upstream was called').toBeDefined();
      expect(`${new URL(endpoint).origin}${call!.path}`).toBe(endpoint);
      expect(call!.headers[header]).toBe(value);
    } finally {
      await gateway.dispose();
    }
  });
});
