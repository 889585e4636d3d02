/**
 * The undici upstream's `received` and `skipRest`: an answer that came with its headers is
 * taken at once, whole; dropping the rest gives the connection back to the pool; a body that
 * failed already is left to the iterator, which reports the failure.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpUpstream } from '../../src/upstream/client.js';

const ANSWER = 'data: {"a":1}\n\ndata: [DONE]\n\n';
let server: http.Server;
let baseUrl: string;
const sockets = new Set<unknown>();

beforeAll(async () => {
  server = http.createServer((req, res) => {
    sockets.add(req.socket);
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(ANSWER);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe('the undici upstream: what was received with the headers', () => {
  it('is the whole answer, taken at once; dropping the rest frees the connection for the next call', async () => {
    sockets.clear();
    const up = createHttpUpstream('t', { baseUrl, apiKey: '', timeoutMs: 5_000, connections: 1 });
    try {
      for (let i = 0; i < 5; i++) {
        const res = await up.call({ method: 'POST', path: '/chat/completions', headers: {}, body: '{}' });
        const got = res.received!();
        expect(got && Buffer.from(got).toString()).toBe(ANSWER);
        res.skipRest!();
      }
      expect(sockets.size).toBe(1);
    } finally {
      await up.close();
    }
  });

  it('is nothing once the body failed: the iterator reports the failure', async () => {
    const up = createHttpUpstream('t', { baseUrl, apiKey: '', timeoutMs: 5_000, connections: 1 });
    try {
      const res = await up.call({ method: 'POST', path: '/chat/completions', headers: {}, body: '{}' });
      res.discard();
      expect(res.received!()).toBeNull();
      await expect((async () => {
        for await (const _ of res.body);
      })()).rejects.toThrow();
    } finally {
      await up.close();
    }
  });
});
