/**
 * What a plugin hands over as the answer goes out as given, with the request id: a Response
 * whose headers are immutable (`Response.redirect()`, a `fetch()` answer, its body decoded
 * from gzip), or of another package's Response class. Anything else is that plugin's error,
 * skipped: the gateway answers, billed once.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { Response as UndiciResponse } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GatewayPlugin } from '../../src/index.js';
import { chargesOf } from '../helpers/billing.js';
import { eventually, MODEL, postChat, type RunningGateway, withPluginGateway } from '../helpers/gateway.js';
import { startTestUpstream, type TestUpstream } from '../helpers/upstream.js';

let up: TestUpstream;
beforeAll(async () => {
  up = await startTestUpstream();
});
afterAll(() => up.close());

const messages = [{ role: 'user' as const, content: 'hello plugins' }];
const withGateway = <T>(plugins: GatewayPlugin[], fn: (gw: RunningGateway, key: string, account: string) => Promise<T>) => withPluginGateway(up.url, plugins, fn);

describe('answers plugins hand over', () => {
  it('with immutable headers (Response.redirect, a fetch() answer, gzipped on the wire) go out as given, with the request id', async () => {
    // A server that answers gzipped: fetch() hands the plugin the body decoded.
    const zipped = createServer((_req, res) => {
      res.writeHead(203, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
      res.end(gzipSync(JSON.stringify({ from: 'elsewhere' })));
    }).listen(0, '127.0.0.1');
    await once(zipped, 'listening');
    const gate: GatewayPlugin = {
      onRequest: async ({ request, setResponse }) => {
        const how = request.headers.get('x-answer');
        if (how === 'redirect') setResponse(Response.redirect('http://example.com/elsewhere', 302));
        if (how === 'fetched') setResponse(await fetch(`http://127.0.0.1:${(zipped.address() as AddressInfo).port}/`));
        // Another package's Response class (not the runtime's own) is a Response too.
        if (how === 'undici') setResponse(new UndiciResponse('from the plugin', { status: 418 }) as unknown as Response);
      },
    };
    try {
      await withGateway([gate], async (gw, key) => {
        const headers = (how: string) => ({ headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-answer': how } });
        const redirected = await postChat(gw.baseURL, key, { model: MODEL, messages }, { ...headers('redirect'), redirect: 'manual' });
        expect(redirected.status).toBe(302);
        expect(redirected.headers.get('location')).toBe('http://example.com/elsewhere');
        expect(redirected.headers.get('x-request-id')).toMatch(/^req_/);
        const fetched = await postChat(gw.baseURL, key, { model: MODEL, messages }, headers('fetched'));
        expect(fetched.status).toBe(203);
        expect(fetched.headers.get('x-request-id')).toMatch(/^req_/);
        expect(await fetched.json()).toEqual({ from: 'elsewhere' });
        const before = up.requests.length;
        const other = await postChat(gw.baseURL, key, { model: MODEL, messages }, headers('undici'));
        expect(other.status).toBe(418);
        expect(await other.text()).toBe('from the plugin');
        expect(up.requests.length).toBe(before);
      });
    } finally {
      zipped.close();
    }
  });

  it('a plugin handing over something other than a Response is skipped: the gateway answers, billed once', async () => {
    const broken: GatewayPlugin = {
      onResponse: ({ setResponse }) => setResponse(null as unknown as Response),
    };
    await withGateway([broken], async (gw, key, account) => {
      up.setBehavior({ kind: 'json', usage: { prompt_tokens: 5, completion_tokens: 6 } });
      const before = (await chargesOf(gw.gateway.admin.ledger(account))).length;
      const res = await postChat(gw.baseURL, key, { model: MODEL, messages });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-request-id')).toMatch(/^req_/);
      expect(((await res.json()) as { object: string }).object).toBe('chat.completion');
      await eventually(async () => (await chargesOf(gw.gateway.admin.ledger(account))).length === before + 1, 'one charge');
    });
  });
});
