/**
 * The console works where the host app mounts the gateway, and runs the business from there.
 * Under the prefix "/api" of each adapter, real headless Chromium (one browser, a page per
 * check) signs in at /api/admin and, through the UI only, creates an account, a key (its secret
 * shown once) and a top-up; then the official openai client calls /api/v1 with that key, and
 * the console shows the call in recent requests and its spend in the overview, the account's
 * by-key table names the key's label, the CSV export holds the call, and selecting another
 * account clears the secret. No request fails and none leaves the prefix. The hosts:
 * - Express (`app.use('/api', toExpress(gateway))`) and Fastify (`prefix: '/api'`), which strip
 *   the prefix before the gateway sees the path;
 * - the gateway's own `basePath: '/api'` on node:http and on Bun (examples/bun/server.ts run by
 *   the real `bun` with a config naming basePath), where the gateway removes it itself;
 * - toNext's handlers with `basePath: '/api'` on node:http, as the catch-all route
 *   app/api/[...path]/route.ts calls them;
 * - examples/next-app under `next start`, that route for real (Next.js answers /api/admin/
 *   with a redirect to /api/admin: the page is the same).
 */
import { mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import OpenAI from 'openai';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toExpress } from '../../adapters/express.js';
import { toFastify } from '../../adapters/fastify.js';
import { sendResponse, toFetchRequest } from '../../adapters/internal/node.js';
import { lastForwardedFor, toNext } from '../../adapters/next.js';
import { createGateway, type Gateway, type GatewayOptions } from '../../src/index.js';
import { NEXT_START_TIMEOUT_MS, startNextExample } from '../frameworks/next-example.js';
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
  'examples/next-app': async () => {
    const app = await startNextExample(CONFIG);
    return { origin: app.origin, close: () => app.stop() };
  },
};

let browser: Browser;
beforeAll(async () => {
  browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
});

const NEW_ACCOUNT = 'shop-co';
/** Screenshots of the console after the flow (git-ignored). */
const ARTIFACTS = new URL('../artifacts/', import.meta.url).pathname;

/** Signs in at `url` and waits for the first full load. */
async function signIn(page: Page, url: string): Promise<void> {
  const answer = await page.goto(url);
  expect(answer?.status()).toBe(200);
  await page.waitForSelector('#signin:not([hidden])', { timeout: 10_000 });
  await page.fill('#token', ADMIN_TOKEN);
  await page.click('#signin-button');
  await page.waitForSelector('body[data-loaded]', { timeout: 15_000 });
}

/** Creates an account, a key and a top-up through the UI; answers the key's secret. */
async function openAccountInUi(page: Page): Promise<string> {
  await page.fill('#new-account-id', NEW_ACCOUNT);
  await page.click('#create-account');
  await page.waitForSelector(`#accounts tr.selected[data-account="${NEW_ACCOUNT}"]`);
  await page.waitForFunction((id) => document.querySelector('#account-name')?.textContent === id, NEW_ACCOUNT);
  expect(await page.textContent('#balance')).toBe('0.00');

  await page.fill('#key-label', 'checkout');
  await page.click('#create-key');
  const secret = (await page.locator('#new-secret code.secret').textContent({ timeout: 10_000 })) ?? '';
  expect(secret).toMatch(/^sk-mg-/);
  await page.waitForSelector('#keys td:text-is("checkout")');

  await page.fill('#credit-amount', '5');
  await page.fill('#credit-reason', 'first top-up');
  await page.click('#credit-submit');
  await page.waitForFunction(() => document.querySelector('#balance')?.textContent === '5.00');
  // The secret stays on screen until another account is chosen.
  expect(await page.locator('#new-secret code.secret').count()).toBe(1);
  return secret;
}

for (const [name, start] of Object.entries(hosts)) {
  describe(`the console under /api with ${name}`, () => {
    let host: Host;
    beforeAll(async () => {
      host = await start();
    }, NEXT_START_TIMEOUT_MS);
    afterAll(async () => {
      await host?.close();
    });

    it('signs in at /api/admin/ and shows the accounts view; every request stays under /api/admin and succeeds', async () => {
      const page = await browser.newPage();
      const network = watchNetwork(page);
      try {
        await signIn(page, `${host.origin}/api/admin/`);
        expect(await page.textContent('#account-name')).toBe(ACCOUNT);
        expect(await page.textContent('#balance')).toBe('12.50');
        expect(await page.locator('#spend-chart canvas').count()).toBe(1);
        expect(network.failures).toEqual([]);
        expect(network.urls.filter((u) => !u.startsWith(`${host.origin}/api/admin/`) && u !== `${host.origin}/api/admin`)).toEqual([]);
      } finally {
        await page.close();
      }
    }, 30_000);

    it('at /api/admin: creates an account, a key and a top-up in the UI; the call with that key shows in recent requests and the overview', async () => {
      const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
      const network = watchNetwork(page);
      try {
        await signIn(page, `${host.origin}/api/admin`);
        // The assets and the API calls were all asked for, under the prefix.
        for (const asset of ['uplot.css', 'uplot.js', 'console.js', 'v1/accounts?limit=1']) expect(network.urls).toContain(`${host.origin}/api/admin/${asset}`);
        const secret = await openAccountInUi(page);

        const client = new OpenAI({ apiKey: secret, baseURL: `${host.origin}/api/v1`, maxRetries: 0 });
        const { data: answer, response } = await client.chat.completions
          .create({ model: 'sim/chat', messages: [{ role: 'user', content: 'hello from the shop' }], max_tokens: 20 })
          .withResponse();
        expect(answer.usage?.total_tokens).toBeGreaterThan(0);
        const requestId = response.headers.get('x-request-id') ?? '';
        expect(requestId).toMatch(/^req_/);

        await page.click('#refresh');
        const row = page.locator(`#requests tr[data-request="${requestId}"]`);
        await row.waitFor({ timeout: 10_000 });
        expect(await row.textContent()).toContain(NEW_ACCOUNT);
        expect(await row.textContent()).toContain('/v1/chat/completions');
        // The spend: the overview's total and top accounts, to the unit the ledger has (the exact
        // figure is each amount's title; the text shows cents).
        const spent = await page.locator(`#top-accounts tr[data-account="${NEW_ACCOUNT}"] td.num`).last().getAttribute('title');
        expect(Number(spent?.replace(/ USD$/, ''))).toBeGreaterThan(0);
        expect(await page.getAttribute('#ov-total', 'title')).toBe(spent);
        expect(await page.textContent('#ov-calls')).toBe('1');
        expect(await page.getAttribute('#spend-chart', 'data-points')).toBe('1');
        expect(await page.textContent('#by-key tbody')).toContain('checkout');
        expect(await page.getAttribute('#total', 'title')).toBe(spent);

        const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export-account')]);
        const csv = await new Promise<string>((resolve, reject) => {
          void download.createReadStream().then((stream) => {
            const parts: Buffer[] = [];
            stream.on('data', (b: Buffer) => parts.push(b));
            stream.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
            stream.on('error', reject);
          }, reject);
        });
        expect(csv).toContain(requestId);
        expect(csv).toContain('first top-up');

        // Choosing another account clears the secret from the screen.
        await page.click(`#accounts tr[data-account="${ACCOUNT}"]`);
        await page.waitForFunction((id) => document.querySelector('#account-name')?.textContent === id, ACCOUNT);
        expect(await page.locator('#new-secret code.secret').count()).toBe(0);
        expect(await page.textContent('#changes tbody')).toContain('/admin/v1/accounts/{id}/credits');
        mkdirSync(ARTIFACTS, { recursive: true });
        await page.screenshot({ path: `${ARTIFACTS}console-under-api-${name.replace(/\W+/g, '-')}.png`, fullPage: true });

        expect(network.failures).toEqual([]);
        expect(network.urls.filter((u) => !u.startsWith(`${host.origin}/api/admin`) && !u.startsWith('blob:'))).toEqual([]);
      } finally {
        await page.close();
      }
    }, 60_000);
  });
}
