/**
 * The console works where the host app mounts the gateway: under the prefix "/api" of each
 * adapter, the page at /api/admin (and /api/admin/) loads its assets and calls its API under
 * /api/admin, signs in with the admin token and shows the accounts view, with no request
 * failing and none leaving the prefix. Real headless Chromium against real servers:
 * - Express (`app.use('/api', toExpress(gateway))`) and Fastify (`prefix: '/api'`), which strip
 *   the prefix before the gateway sees the path;
 * - the gateway's own `basePath: '/api'` on node:http and on Bun (examples/bun/server.ts run by
 *   the real `bun` with a config naming basePath), where the gateway removes it itself;
 * - toNext's handlers with `basePath: '/api'` on node:http, as a catch-all route
 *   app/api/admin/[[...path]]/route.ts would call them (Next.js itself is not started here:
 *   examples/next-app routes only /api/v1).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toExpress } from '../../adapters/express.js';
import { toFastify } from '../../adapters/fastify.js';
import { sendResponse, toFetchRequest } from '../../adapters/internal/node.js';
import { lastForwardedFor, toNext } from '../../adapters/next.js';
import { createGateway, type Gateway, type GatewayOptions } from '../../src/index.js';
import { repoRoot, spawnServer, writeConfig } from '../frameworks/spawn.js';
import { launchChromium, watchNetwork } from './chromium.js';
import { ADMIN_SHA, ADMIN_TOKEN } from './token.js';

const ACCOUNT = 'acme';
/** A plain JSON config (the Bun server reads it from a file). */
const CONFIG = {
  upstreams: { sim: { simulate: true, chunkDelayMs: 0 } },
  models: [{ id: 'sim/chat', upstream: 'sim', pricing: { prompt: '0.000001', completion: '0.000002' } }],
  accounts: [{ id: ACCOUNT, walletUsd: '12.5' }],
  admin: { tokenSha256: ADMIN_SHA },
} satisfies GatewayOptions;
const quiet = { info() {}, warn() {}, error() {} };

/** A running host app: its origin; the gateway answers under `${origin}/api`. */
interface Host {
  origin: string;
  close(): Promise<void>;
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** An in-process host around a fresh gateway; `serve` mounts it under /api. */
async function inProcess(options: GatewayOptions, serve: (gateway: Gateway) => Promise<{ origin: string; stop(): Promise<void> }>): Promise<Host> {
  const gateway = createGateway({ ...options, logger: quiet });
  await gateway.ready;
  const app = await serve(gateway);
  return {
    origin: app.origin,
    async close() {
      await app.stop();
      await gateway.dispose();
    },
  };
}

async function nodeServer(handler: Parameters<typeof createServer>[1]): Promise<{ origin: string; stop(): Promise<void> }> {
  const server = createServer(handler);
  const origin = await listen(server);
  return {
    origin,
    stop: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const hosts: Record<string, () => Promise<Host>> = {
  express: () =>
    inProcess(CONFIG, (gateway) => {
      const app = express();
      app.use('/api', toExpress(gateway));
      return nodeServer(app);
    }),
  fastify: () =>
    inProcess(CONFIG, async (gateway) => {
      const app = Fastify();
      await app.register(toFastify(gateway), { prefix: '/api' });
      return { origin: await app.listen({ port: 0, host: '127.0.0.1' }), stop: () => app.close() };
    }),
  'basePath on node:http': () => inProcess({ ...CONFIG, basePath: '/api' }, (gateway) => nodeServer(gateway)),
  'toNext handlers': () =>
    inProcess(CONFIG, (gateway) => {
      const handlers: Record<string, (request: Request) => Promise<Response>> = toNext(gateway, { basePath: '/api', clientAddress: lastForwardedFor });
      return nodeServer((req, res) => {
        const handler = handlers[req.method ?? 'GET'];
        if (!handler) {
          res.writeHead(405).end();
          return;
        }
        void handler(toFetchRequest(req, res, req.url ?? '/')).then((response) => sendResponse(req, res, response));
      });
    }),
  'basePath on Bun': async () => {
    const config = await writeConfig({ ...CONFIG, basePath: '/api' });
    const server = await spawnServer(`${repoRoot}node_modules/.bin/bun`, ['examples/bun/server.ts'], {
      env: { PORT: '0', HOST: '127.0.0.1', MODEL_GATEWAY_CONFIG: config },
      ready: /model-gateway on Bun: (http:\/\/[^/\s]+)\//,
      timeoutMs: 30_000,
    });
    return { origin: server.match[1]!, close: () => server.stop() };
  },
};

let browser: Browser;
beforeAll(async () => {
  browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
});

for (const [name, start] of Object.entries(hosts)) {
  describe(`the console under /api with ${name}`, () => {
    let host: Host;
    beforeAll(async () => {
      host = await start();
    }, 60_000);
    afterAll(async () => {
      await host?.close();
    });

    for (const path of ['/api/admin', '/api/admin/']) {
      it(`signs in at ${path} and shows the accounts view; every request stays under /api/admin and succeeds`, async () => {
        const page = await browser.newPage();
        const network = watchNetwork(page);
        try {
          const answer = await page.goto(`${host.origin}${path}`);
          expect(answer?.status()).toBe(200);
          // Once loaded, the page has asked for its assets: a miss says which, at once.
          expect(network.failures).toEqual([]);
          await page.waitForSelector('#signin:not([hidden])', { timeout: 10_000 });
          await page.fill('#token', ADMIN_TOKEN);
          await page.click('#signin-button');
          await page.waitForSelector('body[data-loaded]', { timeout: 15_000 });
          expect(await page.inputValue('#account')).toBe(ACCOUNT);
          expect(await page.textContent('#balance')).toBe('12.5');
          expect(await page.locator('#spend-chart canvas').count()).toBe(1);
          expect(network.failures).toEqual([]);
          const outside = network.urls.filter((u) => !u.startsWith(`${host.origin}/api/admin`));
          expect(outside).toEqual([]);
          // The assets and the API calls were all asked for, under the prefix.
          for (const asset of ['uplot.css', 'uplot.js', 'console.js', 'v1/accounts']) expect(network.urls).toContain(`${host.origin}/api/admin/${asset}`);
        } finally {
          await page.close();
        }
      }, 30_000);
    }
  });
}
