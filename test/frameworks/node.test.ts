/** The shared framework checks against node:http, the gateway itself as the request listener. */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe } from 'vitest';
import { createGateway, type Gateway } from '../../src/index.js';
import { startMediaUpstream, type MediaUpstream } from '../helpers/media-upstream.js';
import { frameworkCases, frameworkConfig } from './shared.case.js';
import { startSlowUpstream, type SlowUpstream } from './slow-upstream.js';

describe('node:http', () => {
  let upstream: SlowUpstream;
  let media: MediaUpstream;
  let gateway: Gateway;
  let server: Server;
  let baseURL: string;

  beforeAll(async () => {
    upstream = await startSlowUpstream();
    media = await startMediaUpstream();
    gateway = createGateway({ ...frameworkConfig(upstream.url, media.url), logger: { info() {}, warn() {}, error() {} } });
    server = createServer(gateway);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    baseURL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await gateway.dispose();
    await upstream.close();
    await media.close();
  });

  frameworkCases(() => ({ baseURL, upstream, media }));
});
