/**
 * toNext's `basePath` and Next.js's own: Next.js 16 hands a route handler a URL without the
 * app's `basePath` (next.config), where the adapter's docs said to include it, so every call
 * was the gateway's 404. Both forms of the option, and both forms of the URL, now reach the
 * gateway's routes. (The URL Next.js 16 hands over was seen under `next start` with a basePath.)
 */
import { NextRequest } from 'next/server.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lastForwardedFor, toNext } from '../../adapters/next.js';
import type { Gateway } from '../../src/gateway.js';
import { makeGateway, testConfig } from '../helpers/gateway.js';

let gateway: Gateway;
let devKey: string;

beforeAll(async () => {
  const setup = testConfig();
  devKey = setup.devKey;
  ({ gateway } = await makeGateway(setup.options));
});
afterAll(() => gateway?.dispose());

/** The request Next.js hands the route: a NextRequest, which knows the app's basePath. */
const models = (handlers: ReturnType<typeof toNext>, url: string) =>
  handlers.GET(new NextRequest(url, { headers: { authorization: `Bearer ${devKey}`, 'x-forwarded-for': '127.0.0.1' }, nextConfig: { basePath: '/app' } }));

describe("toNext's basePath", () => {
  it("takes Next.js's own basePath given or left out, in a URL with it or without it", async () => {
    for (const basePath of ['/app/api', '/api']) {
      const handlers = toNext(gateway, { basePath, clientAddress: lastForwardedFor });
      for (const url of ['http://127.0.0.1:3000/api/v1/models', 'http://127.0.0.1:3000/app/api/v1/models']) {
        const res = await models(handlers, url);
        expect(res.status, `${basePath} ${url}`).toBe(200);
        expect(((await res.json()) as { object: string }).object).toBe('list');
      }
    }
  });

  it("takes a route at the app's root, whose basePath is Next.js's own", async () => {
    const handlers = toNext(gateway, { basePath: '/app', clientAddress: lastForwardedFor });
    for (const url of ['http://127.0.0.1:3000/v1/models', 'http://127.0.0.1:3000/app/v1/models']) {
      expect((await models(handlers, url)).status, url).toBe(200);
    }
  });

  it('leaves a path outside it to the gateway as it came (its 404)', async () => {
    const res = await models(toNext(gateway, { basePath: '/api', clientAddress: lastForwardedFor }), 'http://127.0.0.1:3000/other/v1/models');
    expect(res.status).toBe(404);
  });
});
