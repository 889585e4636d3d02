/**
 * Upstream transports. Every upstream speaks the OpenAI HTTP API; an HTTP upstream is an
 * undici Pool (keep-alive, pooled connections) and the simulator is an in-process handler
 * with the same shape.
 */
import type { Dispatcher, Pool } from 'undici';
import { GatewayError } from '../errors.js';
import { nativeSignal } from '../http/node-lane.js';
import { createFetchUpstream } from './fetch-upstream.js';
import { kindOf } from './kinds/index.js';
import type { Readable } from 'node:stream';
import {
  type BodyFlow,
  type BodyListener,
  type HttpUpstreamOptions,
  outgoingHeaders,
  type Upstream,
  type UpstreamCall,
  type UpstreamResponse,
  withQuery,
} from './types.js';

// The transport contract lives in types.ts (both transports implement it); re-exported here
// for the modules that import it with the client.
export type { HttpUpstreamOptions, Upstream, UpstreamCall, UpstreamResponse } from './types.js';

/**
 * An upstream client of your own, given in `upstreams` instead of a `{baseUrl, apiKey}`
 * config: it gets each call (method, path below the base URL, headers, body, abort signal)
 * and answers in the OpenAI HTTP API's shapes. Its credentials are its own business; the
 * gateway sends it no client credential.
 */
export interface UpstreamClient {
  call(call: UpstreamCall): Promise<UpstreamResponse>;
  close?(): Promise<void>;
}

/** Wraps a user's upstream client into the gateway's Upstream. */
export function customUpstream(name: string, client: UpstreamClient): Upstream {
  return {
    name,
    simulated: false,
    // A user's client may hand the signal to fetch, which takes only a native AbortSignal. What
    // it answers is checked for the shape of one: anything else is the upstream failing (502),
    // not the gateway (500).
    call: async (c) => {
      const res = await client.call(c.signal ? { ...c, signal: nativeSignal(c.signal) } : c);
      const body = (res as { body?: { [Symbol.asyncIterator]?: unknown } } | null)?.body;
      if (!res || typeof res !== 'object' || !Number.isInteger(res.status) || typeof res.header !== 'function' || typeof res.text !== 'function' || typeof res.discard !== 'function' || typeof body?.[Symbol.asyncIterator] !== 'function') {
        throw new GatewayError('upstream_error', `The upstream "${name}" answered with something that is not a response.`);
      }
      return res;
    },
    close: async () => {
      await client.close?.();
    },
  };
}

/**
 * undici, loaded by the first call to an HTTP upstream: it is the largest library the gateway
 * holds (about a quarter of an idle process's heap), and a process that has not called out yet
 * (starting, or a serverless route's cold start) has no use for it.
 */
let loadingUndici: Promise<typeof import('undici')> | null = null;
function loadUndici(): Promise<typeof import('undici')> {
  loadingUndici ??= import('undici').catch(
    (err: unknown) => {
      // Tried again by the next call, not failed for good.
      loadingUndici = null;
      throw err;
    },
  );
  return loadingUndici;
}

/** undici's timeouts, by their codes: an error of undici's own shape counts, whichever copy threw it. */
const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']);

/** Maps a transport failure to what the client sees: a timeout is 504 upstream_timeout, anything else 502 upstream_error. */
export function upstreamFailure(err: unknown, upstream: string): GatewayError {
  if (err instanceof GatewayError) return err;
  if (err instanceof Error && TIMEOUT_CODES.has((err as { code?: unknown }).code as string)) {
    return new GatewayError('upstream_timeout', `The upstream "${upstream}" did not answer in time.`, { cause: err });
  }
  return new GatewayError('upstream_error', `The upstream "${upstream}" could not be reached or failed.`, { cause: err });
}

/**
 * `text` without the upstream's own key: an upstream may echo it in an error message ("Incorrect
 * API key provided: ...") that the gateway relays, and no answer may carry key material.
 */
export function redactKey(text: string, apiKey: string): string {
  return apiKey.length >= 8 && text.includes(apiKey) ? text.replaceAll(apiKey, '[redacted]') : text;
}

/**
 * A node stream's reads handed to `listener` as they come, then its end or its failure once
 * (a stream destroyed without an error fails too: it did not end). A stream that already
 * ended or failed says so on the next turn.
 */
function listenTo(body: Readable, listener: BodyListener): BodyFlow {
  let over = false;
  const once = (fn: () => void) => {
    if (over) return;
    over = true;
    fn();
  };
  const closed = () => once(() => listener.error(body.errored ?? new Error('The upstream body was closed before its end.')));
  body.on('error', (err) => once(() => listener.error(err)));
  body.on('close', closed);
  if (body.readableEnded) queueMicrotask(() => once(() => listener.end()));
  else if (body.destroyed) queueMicrotask(closed);
  else {
    body.on('end', () => once(() => listener.end()));
    body.on('data', (chunk: Uint8Array) => {
      if (!over) listener.data(chunk);
    });
  }
  return { pause: () => void body.pause(), resume: () => void body.resume() };
}

export function createHttpUpstream(name: string, opts: HttpUpstreamOptions): Upstream {
  // Bun ships its own partial `undici` without a working Pool: use the runtime's fetch there.
  if (process.versions.bun) return createFetchUpstream(name, opts, (text) => redactKey(text, opts.apiKey));
  const base = new URL(opts.baseUrl);
  const prefix = base.pathname.replace(/\/+$/, '');
  let pool: Pool | null = null;
  const openPool = async (): Promise<Pool> => {
    const { Pool } = await loadUndici();
    pool ??= new Pool(base.origin, {
      connections: opts.maxConnections ?? opts.connections,
      keepAliveTimeout: 30_000,
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
      connect: { timeout: Math.min(opts.timeoutMs, 10_000) },
    });
    return pool;
  };
  const auth = opts.apiKey ? kindOf(opts.kind).auth(opts.apiKey) : null;
  // The kind's own headers first: an upstream's configured ones replace them.
  const extra = { ...kindOf(opts.kind).headers, ...opts.headers };
  return {
    name,
    simulated: false,
    async call(c) {
      const headers = outgoingHeaders(c.headers, extra, auth);
      let res: Dispatcher.ResponseData;
      try {
        res = await (pool ?? (await openPool())).request({
          origin: base.origin,
          path: withQuery(prefix + c.path, opts.query),
          method: c.method,
          headers,
          // A string body goes as the one Buffer undici would make of it: it keeps both the
          // string and its bytes until the answer ends, for a stream as long as it lasts.
          body: typeof c.body === 'string' ? Buffer.from(c.body) : (c.body ?? null),
          signal: c.signal,
        });
      } catch (err) {
        if (c.signal?.aborted) throw err;
        throw upstreamFailure(err, name);
      }
      const body = res.body;
      return {
        status: res.statusCode,
        header(h) {
          const v = res.headers[h];
          return Array.isArray(v) ? v.join(', ') : v;
        },
        body,
        async text() {
          try {
            return redactKey(await body.text(), opts.apiKey);
          } catch (err) {
            throw upstreamFailure(err, name);
          }
        },
        discard() {
          // Destroying emits an abort error: nobody reads this body any more, so it is dropped.
          body.on('error', () => undefined);
          body.destroy();
        },
        received() {
          // A fast upstream's answer often arrives in the same read as its headers: undici has
          // pushed it (and the end) into the body's buffer before this response resolved.
          // A body that failed already keeps its buffer readable: it is left to the iterator,
          // which reports the failure as it did before.
          if (body.destroyed || body.errored || body.readableFlowing !== null || body.readableLength === 0) return null;
          return body.read() as Buffer | null;
        },
        skipRest() {
          // Flowing with no 'data' listener drops every chunk; the end then frees the body. An
          // error after the answer was complete (a reset) has nobody left to tell.
          body.on('error', () => undefined);
          body.resume();
        },
        listen: (listener) => listenTo(body, listener),
      };
    },
    async close() {
      const p = pool;
      if (p) await p.close().catch(() => p.destroy());
    },
  };
}
