/**
 * How each kind's calls authenticate, on the wire: an Anthropic upstream gets `x-api-key` and
 * `anthropic-version: 2023-06-01` (a configured version replaces it), never a bearer; an
 * OpenAI one gets the bearer and no Anthropic headers. Both HTTP clients (undici's pool, and
 * fetch for runtimes without it) send the same.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpUpstream } from '../../src/upstream/client.js';
import { createFetchUpstream } from '../../src/upstream/fetch-upstream.js';
import type { HttpUpstreamOptions } from '../../src/upstream/types.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

const KEY = 'sk-ant-Zq8vW2xK9pL4mR7tJ3';
const clients = [
  { name: 'undici pool', create: (o: HttpUpstreamOptions) => createHttpUpstream('u', o) },
  { name: 'fetch', create: (o: HttpUpstreamOptions) => createFetchUpstream('u', o, (t) => t) },
];

describe.each(clients)('kind headers through the $name client', ({ create }) => {
  let up: TestUpstream;
  beforeAll(async () => {
    up = await startTestUpstream();
    up.setBehavior({ kind: 'json' });
  });
  afterAll(async () => {
    await up?.close();
  });

  async function headersFor(opts: Partial<HttpUpstreamOptions>) {
    up.requests.length = 0;
    const client = create({ baseUrl: up.url, apiKey: KEY, timeoutMs: 5_000, connections: 1, ...opts });
    const res = await client.call({ method: 'POST', path: '/messages', headers: { 'content-type': 'application/json' }, body: '{}' });
    await res.text();
    await client.close();
    return up.requests[0]!.headers;
  }

  it('anthropic: x-api-key and the default version, no bearer', async () => {
    const h = await headersFor({ kind: 'anthropic' });
    expect(h['x-api-key']).toBe(KEY);
    expect(h['anthropic-version']).toBe('2023-06-01');
    expect(h.authorization).toBeUndefined();
  });

  it('anthropic: a configured version (any case) replaces the default', async () => {
    const h = await headersFor({ kind: 'anthropic', headers: { 'Anthropic-Version': '2099-01-01', 'anthropic-beta': 'x' } });
    expect(h['anthropic-version']).toBe('2099-01-01');
    expect(h['anthropic-beta']).toBe('x');
  });

  it('openai: the bearer only', async () => {
    const h = await headersFor({});
    expect(h.authorization).toBe(`Bearer ${KEY}`);
    expect(h['x-api-key']).toBeUndefined();
    expect(h['anthropic-version']).toBeUndefined();
  });
});

describe.each(clients)('a redirect through the $name client', ({ create }) => {
  it('is not followed: the credential and the prompt never reach the Location, the 3xx is the answer', async () => {
    const elsewhere = await startTestUpstream();
    const up = await startTestUpstream();
    up.setBehavior({
      kind: 'custom',
      handle(_req, res) {
        res.writeHead(307, { location: `${elsewhere.url}/collect` }).end();
      },
    });
    try {
      const client = create({ baseUrl: up.url, apiKey: KEY, timeoutMs: 5_000, connections: 1, kind: 'anthropic' });
      const res = await client.call({ method: 'POST', path: '/messages', headers: { 'content-type': 'application/json' }, body: '{"prompt":"secret"}' });
      await res.text();
      await client.close();
      expect(res.status).toBe(307);
      expect(elsewhere.requests).toHaveLength(0);
    } finally {
      await up.close();
      await elsewhere.close();
    }
  });
});
