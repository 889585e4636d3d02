/**
 * The gateway routes by the path its host app routed, with no dot segments resolved that the
 * host did not resolve. The host (real Express 5, real Fastify 5) guards `/api/admin` and
 * mounts the gateway at `/api`; targets such as `/api/v1/../admin/v1/accounts` pass the
 * host's guard (its router does not resolve them) and must not then reach the gateway's
 * admin API or console: they are 404, as they are standalone.
 */
import { request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toExpress } from '../../adapters/express.js';
import { toFastify } from '../../adapters/fastify.js';
import { createGateway, type Gateway } from '../../src/index.js';
import { ADMIN_SHA, ADMIN_TOKEN } from '../admin/token.js';

const quiet = { info() {}, warn() {}, error() {} };

/** Sends `target` byte for byte (fetch would resolve the dot segments itself). */
function get(origin: string, target: string): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(origin);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ hostname, port, path: target, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const TRICKS = [
  '/api/v1/../admin/v1/accounts',
  '/api/./admin/v1/accounts',
  '/api/v1/%2e%2e/admin/v1/accounts',
  '/api/v1/%2E%2E/admin/v1/accounts',
  '/api/v1/.%2e/admin/v1/accounts',
  '/api/v1/../admin',
  '/api/v1/../admin/',
  '/api/./admin',
];

function gatewayWithAdmin(): Gateway {
  return createGateway({
    upstreams: { sim: { simulate: true } },
    models: [{ id: 'sim/chat', type: 'text', upstream: 'sim', pricing: { prompt: '0.000001', completion: '0.000002' } }],
    accounts: [{ id: 'acct_secret', walletUsd: 1 }],
    admin: { tokenSha256: ADMIN_SHA },
    logger: quiet,
  });
}

describe.each([
  [
    'express',
    async (gateway: Gateway) => {
      const app = express();
      app.use('/api/admin', (_req, res) => void res.status(403).send('guarded'));
      app.use('/api', toExpress(gateway));
      const server = await new Promise<Server>((resolve) => {
        const s = app.listen(0, '127.0.0.1', () => resolve(s));
      });
      return {
        origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        close: async () => {
          server.closeAllConnections();
          await new Promise<void>((r) => server.close(() => r()));
        },
      };
    },
  ],
  [
    'fastify',
    async (gateway: Gateway) => {
      const app: FastifyInstance = Fastify();
      app.all('/api/admin', async (_req, reply) => reply.code(403).send('guarded'));
      app.all('/api/admin/*', async (_req, reply) => reply.code(403).send('guarded'));
      await app.register(toFastify(gateway), { prefix: '/api' });
      const origin = await app.listen({ port: 0, host: '127.0.0.1' });
      return { origin, close: () => app.close() };
    },
  ],
] as const)('%s: a guarded /api/admin in front of the gateway at /api', (_name, host) => {
  let gateway: Gateway;
  let served: { origin: string; close: () => Promise<void> };
  beforeAll(async () => {
    gateway = gatewayWithAdmin();
    await gateway.ready;
    served = await host(gateway);
  });
  afterAll(async () => {
    await served.close();
    await gateway.dispose();
  });

  it('the guard holds, and the gateway answers under the prefix', async () => {
    expect((await get(served.origin, '/api/admin/v1/accounts')).status).toBe(403);
    const models = await get(served.origin, '/api/v1/models');
    expect(models.status).toBe(401);
  });

  it.each(TRICKS)('%s does not reach the admin API or console: 404', async (target) => {
    const { status, body } = await get(served.origin, target);
    expect(body).not.toContain('acct_secret');
    expect(status).toBe(404);
  });
});

describe('standalone', () => {
  it.each(TRICKS)('%s (without the /api prefix) is 404', async (target) => {
    const gateway = gatewayWithAdmin();
    await gateway.ready;
    const { createServer } = await import('node:http');
    const server = createServer(gateway);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const { status } = await get(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, target.slice('/api'.length));
      expect(status).toBe(404);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await gateway.dispose();
    }
  });
});
