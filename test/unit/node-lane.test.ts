/**
 * The gateway's node:http bridge reading a request whose client is already gone: the body
 * read fails at once (its events fired before anyone listened), not after the body timeout.
 */
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { NodeRequest } from '../../src/http/node-lane.js';

/** One request to a server whose handler runs `onGone` once the client's socket is closed. */
async function afterClientLeft(headers: Record<string, string>, body: string, onGone: (req: IncomingMessage, res: ServerResponse) => Promise<void>): Promise<void> {
  let done!: Promise<void>;
  const handled = new Promise<void>((resolve) => {
    const server = createServer((req, res) => {
      req.socket.once('close', () => {
        done = onGone(req, res).finally(() => {
          server.close();
          resolve();
        });
      });
    });
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      const client = httpRequest({ host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions', headers });
      client.on('error', () => undefined);
      client.write(body);
      // The whole body (or part of it) is out; then the client goes away.
      setTimeout(() => client.destroy(), 50);
    });
  });
  await handled;
  await done;
}

describe('NodeRequest after the client left', () => {
  it.each([
    ['a whole body with a length', { 'content-length': '13' }, '{"model":"x"}'],
    ['half a body with a length', { 'content-length': '100' }, '{"model":'],
    ['a chunked body', { 'transfer-encoding': 'chunked' }, '5\r\nhello\r\n'],
  ])('%s: arrayBuffer() and the body stream fail at once, and the signal is aborted', async (_name, headers, body) => {
    await afterClientLeft(headers, body, async (req, res) => {
      const request = new NodeRequest(req, res);
      expect(request.signal.aborted).toBe(true);
      const started = Date.now();
      await expect(request.arrayBuffer()).rejects.toThrow(/closed the connection/);
      const reader = new NodeRequest(req, res).body!.getReader();
      await expect(reader.read()).rejects.toThrow(/closed the connection/);
      expect(Date.now() - started).toBeLessThan(1_000);
    });
  });
});
