/**
 * Node glue shared by the Express and Fastify adapters: a fetch `Request` from Node's
 * request (path given by the adapter, body streamed, aborted when the client goes away) and
 * a `Response` written back chunk by chunk, so an event stream is never held back.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { bodyStream, drained } from '../../src/http/node-lane.js';

/** What an adapter needs of a Node request; Express's and Fastify's `raw` are both this. */
export type NodeRequest = IncomingMessage;

/**
 * Tells `gateway` an answer is being written to its client until `res` finishes (or closes):
 * a stream's last frames are written after its call ended, and `dispose()` waits for them,
 * so an app that exits once `dispose()` resolves does not cut them off.
 */
export function trackWrite(gateway: object, res: ServerResponse): void {
  const writes = (gateway as Record<symbol, Set<Promise<unknown>> | undefined>)[Symbol.for('model-gateway.adapterWrites')];
  if (!writes || res.writableFinished || res.destroyed) return;
  const done = new Promise<void>((resolve) => {
    res.once('finish', resolve);
    res.once('close', resolve);
  });
  writes.add(done);
  void done.then(() => writes.delete(done));
}

/** Set on a response once the gateway's answer was handed to it (see handOver). */
const HANDED_OVER = Symbol('model-gateway.handedOver');

/**
 * A fetch Request for `req` with `path` (path and query, mount prefix already removed).
 * `body` replaces the stream when a body parser consumed it first. The signal aborts when
 * the response closes before the gateway's answer was written through it: the client went
 * away, or the host app answered first (a timeout middleware's 503). Either way nobody gets
 * this call's answer: the gateway stops the upstream call and bills only what was produced.
 */
export function toFetchRequest(req: NodeRequest, res: ServerResponse, path: string, body?: Uint8Array | string): Request {
  const controller = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished || !(res as unknown as Record<symbol, unknown>)[HANDED_OVER]) {
      controller.abort(new Error(res.writableFinished ? 'The host app answered the request first.' : 'The client disconnected.'));
    }
  });
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || name.startsWith(':')) continue;
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else headers.set(name, value);
  }
  const method = req.method ?? 'GET';
  const init: RequestInit & { duplex?: 'half' } = { method, headers, signal: controller.signal };
  if (method !== 'GET' && method !== 'HEAD') {
    if (body === undefined) {
      init.body = bodyStream(req);
      init.duplex = 'half';
    } else {
      // The parser's byte count is not this body's: say the real one.
      headers.delete('transfer-encoding');
      headers.set('content-length', String(typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength));
      init.body = body as string | Uint8Array<ArrayBuffer>;
    }
  }
  return new Request(originOf(req) + (path.startsWith('/') ? path : `/${path}`), init);
}

/**
 * What the gateway is told of the request besides the Request: the peer's address, and the
 * path as the host app routed it (`path`, mount prefix removed, exactly as sent). The
 * Request's own URL cannot carry it: `new Request()` resolves dot segments, so
 * `/api/v1/../admin/...`, which the host routed past its guard on `/api/admin`, would reach
 * the gateway as `/admin/...`. The gateway routes by this path, as it does standalone.
 */
export function serverContextOf(req: NodeRequest, path: string): { clientAddress: string | undefined; req: { url: string } } {
  return { clientAddress: req.socket.remoteAddress, req: { url: path.startsWith('/') ? path : `/${path}` } };
}

function originOf(req: NodeRequest): string {
  const scheme = (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
  try {
    return new URL(`${scheme}://${req.headers.host ?? 'localhost'}`).origin;
  } catch {
    return `${scheme}://localhost`;
  }
}

/**
 * Takes the gateway's answer for `res`: false when the host app answered the request first
 * (its headers are out), and the answer's body is then cancelled, so a stream's relay ends
 * and bills what was produced, never held open for a client that will not get it.
 */
export function handOver(res: ServerResponse, response: Response): boolean {
  if (res.headersSent || res.writableEnded) {
    void response.body?.cancel().catch(() => undefined);
    return false;
  }
  (res as unknown as Record<symbol, unknown>)[HANDED_OVER] = true;
  return true;
}

/**
 * Writes `response` to `res`: status, headers, then each body chunk as it comes (an event
 * stream's headers go out at once). Stops reading the body when the client goes away.
 */
export async function sendResponse(req: NodeRequest, res: ServerResponse, response: Response): Promise<void> {
  res.statusCode = response.status;
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') res.setHeader(name, value);
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) res.setHeader('set-cookie', cookies);
  // An answer given before the body was read (401, 413, 429): do not read the rest of it.
  if (!req.complete) res.setHeader('connection', 'close');
  const body = response.body;
  if (!body || req.method === 'HEAD') {
    await body?.cancel().catch(() => undefined);
    res.end();
    return;
  }
  const streaming = response.headers.get('content-type')?.startsWith('text/event-stream') ?? false;
  if (streaming) res.flushHeaders();
  const reader = body.getReader();
  const onClose = () => void reader.cancel().catch(() => undefined);
  res.once('close', onClose);
  // Set by the `compression` middleware; without it a compressed stream waits for a full buffer.
  const flush = (res as { flush?: () => void }).flush;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done || res.destroyed) break;
      if (!res.write(value)) await drained(res);
      if (streaming) flush?.call(res);
    }
    res.end();
  } catch (err) {
    res.destroy(err instanceof Error ? err : new Error(String(err)));
  } finally {
    res.off('close', onClose);
  }
}
