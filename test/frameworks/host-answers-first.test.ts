/**
 * The host app answers a request before the gateway does: a timeout middleware (Express) or
 * hook (Fastify) sends its own 503 while the model has not answered yet. Nobody will get the
 * gateway's answer, so its call must end as a client that left ends one: the upstream call
 * stopped, the hold released, nothing charged for an answer nobody got, streamed or plain.
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toExpress } from '../../adapters/express.js';
import { toFastify } from '../../adapters/fastify.js';
import { createGateway, type Gateway } from '../../src/index.js';
import { eventually } from '../helpers/gateway.js';
import { frameworkConfig, KEY, MODEL } from './shared.case.js';
import { startSlowUpstream, type SlowUpstream } from './slow-upstream.js';

const quiet = { info() {}, warn() {}, error() {} };
/** The host's deadline, and how long the upstream takes to answer at all (longer). */
const HOST_TIMEOUT_MS = 300;
const UPSTREAM_WAIT_MS = 1_500;

interface Mounted {
  baseURL: string;
  close(): Promise<void>;
}

async function mountExpress(gateway: Gateway): Promise<Mounted> {
  const app = express();
  // What connect-timeout and similar middlewares do: answer 503 after a deadline.
  app.use((_req, res, next) => {
    const timer = setTimeout(() => {
      if (!res.headersSent) res.status(503).json({ error: { message: 'The host timed out.' } });
    }, HOST_TIMEOUT_MS);
    res.on('close', () => clearTimeout(timer));
    next();
  });
  app.use('/api/ai', toExpress(gateway));
  app.use((_err: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    if (!res.headersSent) res.status(500).end();
  });
  return listen(app);
}

/** Serves an Express app on loopback; its gateway is mounted at /api/ai. */
async function listen(app: express.Express): Promise<Mounted> {
  const server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return {
    baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/ai/v1`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function mountFastify(gateway: Gateway): Promise<Mounted> {
  const app: FastifyInstance = Fastify();
  app.addHook('onRequest', async (_request, reply) => {
    const timer = setTimeout(() => {
      if (!reply.sent) void reply.code(503).send({ error: { message: 'The host timed out.' } });
    }, HOST_TIMEOUT_MS);
    reply.raw.on('close', () => clearTimeout(timer));
  });
  await app.register(toFastify(gateway), { prefix: '/api/ai' });
  const origin = await app.listen({ port: 0, host: '127.0.0.1' });
  return { baseURL: `${origin}/api/ai/v1`, close: () => app.close() };
}

describe.each([
  ['express', mountExpress],
  ['fastify', mountFastify],
] as const)('%s: the host app answers before the gateway', (_name, mount) => {
  let upstream: SlowUpstream;
  let gateway: Gateway;
  let mounted: Mounted;

  beforeAll(async () => {
    upstream = await startSlowUpstream();
    gateway = createGateway({ ...frameworkConfig(upstream.url), logger: quiet });
    await gateway.ready;
    mounted = await mount(gateway);
  });

  afterAll(async () => {
    await mounted.close();
    await gateway.dispose();
    await upstream.close();
  });

  for (const stream of [true, false]) {
    it(`${stream ? 'a stream' : 'a plain call'}: the upstream call is stopped, nothing is held or charged`, async () => {
      const before = await gateway.admin.wallet('acme');
      const n = upstream.exchanges.length;
      const res = await fetch(`${mounted.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, stream, messages: [{ role: 'user', content: `[wait:${UPSTREAM_WAIT_MS}] Say hello.` }] }),
      });
      expect(res.status).toBe(503);
      await res.arrayBuffer();
      await eventually(() => upstream.exchanges.length > n, 'the upstream was called');
      const exchange = upstream.exchanges[n]!;
      await exchange.over;
      expect(exchange.closedEarly).toBe(true);
      // The upstream's answer would have come by now: nothing may be charged for it after.
      await new Promise((r) => setTimeout(r, UPSTREAM_WAIT_MS));
      await eventually(async () => (await gateway.admin.wallet('acme')).heldUsd === '0', 'the hold released');
      expect(await gateway.admin.wallet('acme')).toEqual(before);
    });
  }
});

describe('express: the host answered before the gateway middleware ran', () => {
  let upstream: SlowUpstream;
  let gateway: Gateway;
  let mounted: Mounted;

  beforeAll(async () => {
    upstream = await startSlowUpstream();
    gateway = createGateway({ ...frameworkConfig(upstream.url), logger: quiet });
    await gateway.ready;
    const app = express();
    app.use(express.json());
    // connect-timeout's known case: the deadline answers 503, and a slow body parser then calls next().
    app.use((_req, res, next) => {
      res.status(503).json({ error: { message: 'The host timed out.' } });
      setTimeout(next, 50);
    });
    app.use('/api/ai', toExpress(gateway));
    mounted = await listen(app);
  });

  afterAll(async () => {
    await mounted.close();
    await gateway.dispose();
    await upstream.close();
  });

  it('the call is never made: no upstream call, nothing held or charged', async () => {
    const before = await gateway.admin.wallet('acme');
    const res = await fetch(`${mounted.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello.' }] }),
    });
    expect(res.status).toBe(503);
    await res.arrayBuffer();
    // The gateway middleware runs 50 ms after the answer; the slow upstream answers in ~1.2 s.
    await new Promise((r) => setTimeout(r, 1_500));
    expect({ upstreamCalls: upstream.exchanges.length, wallet: await gateway.admin.wallet('acme') }).toEqual({ upstreamCalls: 0, wallet: before });
  });
});
