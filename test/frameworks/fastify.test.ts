/** The shared framework checks against Fastify 5, in process, registered under a prefix. */
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toFastify } from '../../adapters/fastify.js';
import { createGateway, type Gateway } from '../../src/index.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { frameworkCases, frameworkConfig } from './shared.case.js';
import { startSlowUpstream, type SlowUpstream } from './slow-upstream.js';

describe('fastify', () => {
  let upstream: SlowUpstream;
  let media: MediaUpstream;
  let gateway: Gateway;
  let app: FastifyInstance;
  let origin: string;

  beforeAll(async () => {
    upstream = await startSlowUpstream();
    media = await startMediaUpstream();
    gateway = createGateway({ ...frameworkConfig(upstream.url, media.url), logger: { info() {}, warn() {}, error() {} } });
    app = Fastify({ bodyLimit: 1024 });
    await app.register(toFastify(gateway), { prefix: '/api/gateway' });
    app.post('/echo', async (request) => request.body);
    origin = await app.listen({ port: 0, host: '127.0.0.1' });
  });

  afterAll(async () => {
    await app.close();
    await gateway.dispose();
    await upstream.close();
    await media.close();
  });

  frameworkCases(() => ({ baseURL: `${origin}/api/gateway/v1`, upstream, media }));

  it('keeps its body parsers to itself: the rest of the app still parses JSON', async () => {
    const res = await fetch(`${origin}/echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"ok":true}' });
    expect(await res.json()).toEqual({ ok: true });
  });
});
