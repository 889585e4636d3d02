/**
 * The gateway's own bridge between node:http and its pipeline, for `createServer(gateway)`.
 *
 * The server adapter's bridge turns every node request into a full fetch `Request` (a URL,
 * a Headers object, an abort controller, a body wrapper) and writes every answer back through
 * a generic path that copies its Headers into the node response; with the promise chains
 * around them that was about a tenth of the gateway's CPU per call. The pipeline reads little
 * of a request: its method, a few headers, its body bytes and whether the client went away.
 * `NodeRequest` answers exactly that from node's own objects, building nothing it is not
 * asked for, and `writeAnswer` hands an answer's status, headers and body to node:http in one
 * `writeHead` and one `end` (or a pipe, for a stream).
 *
 * Only the parts of a Request the gateway itself uses are here. The gateway sends a request
 * this way only when no plugin can see it (a plugin gets a real Request) and only under /v1
 * (the admin API and console read bodies their own way).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline, type Readable } from 'node:stream';

/** Request headers read from node's parsed header object (names already lower case). */
class NodeHeaders {
  constructor(private readonly raw: IncomingMessage['headers']) {}

  get(name: string): string | null {
    const v = this.raw[name] ?? this.raw[name.toLowerCase()];
    return typeof v === 'string' ? v : Array.isArray(v) ? v.join(', ') : null;
  }

  has(name: string): boolean {
    return this.get(name) !== null;
  }

  forEach(fn: (value: string, name: string) => void): void {
    for (const name in this.raw) {
      const v = this.get(name);
      if (v !== null) fn(v, name);
    }
  }

  *entries(): IterableIterator<[string, string]> {
    for (const name in this.raw) {
      const v = this.get(name);
      if (v !== null) yield [name, v];
    }
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }
}

/**
 * The signal a bridged request aborts through when its client goes away. A native
 * AbortSignal costs several microseconds to make and to listen on, per call; this one is a
 * list of listeners. It has what the gateway and undici use of a signal (`aborted`, `reason`,
 * `onabort`, add and remove `abort` listeners, `throwIfAborted`); code that needs a native one
 * (a user's upstream client may hand it to fetch) gets one through `nativeSignal`.
 */
export class ClientSignal {
  aborted = false;
  reason: unknown = undefined;
  onabort: ((event: Event) => void) | null = null;
  private listeners: Array<(event: Event) => void> | null = null;

  addEventListener(type: string, listener: ((event: Event) => void) | null): void {
    if (type !== 'abort' || typeof listener !== 'function') return;
    const listeners = (this.listeners ??= []);
    // As on an EventTarget, the same listener added twice runs once.
    if (!listeners.includes(listener)) listeners.push(listener);
  }

  removeEventListener(type: string, listener: ((event: Event) => void) | null): void {
    if (type !== 'abort' || !this.listeners) return;
    const i = this.listeners.indexOf(listener as (event: Event) => void);
    if (i !== -1) this.listeners.splice(i, 1);
  }

  throwIfAborted(): void {
    if (this.aborted) throw this.reason;
  }

  /**
   * Aborts once: `onabort` and every listener (each at most once, as `{once: true}` ones) run
   * as an EventTarget runs them: with the signal as `this` and as the event's target, and a
   * listener that throws neither stops the others nor the caller (its error is thrown on the
   * next tick, as an uncaught error).
   */
  abort(reason?: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason ?? new DOMException('This operation was aborted', 'AbortError');
    const event = new Event('abort');
    Object.defineProperty(event, 'target', { value: this });
    Object.defineProperty(event, 'currentTarget', { value: this });
    const listeners = this.listeners;
    this.listeners = null;
    const run = (l: (event: Event) => void) => {
      try {
        l.call(this, event);
      } catch (err) {
        process.nextTick(() => {
          throw err;
        });
      }
    };
    if (this.onabort) run(this.onabort);
    if (listeners) for (const l of listeners) run(l);
  }
}

/** A native AbortSignal that follows `signal` (itself when it is native). */
export function nativeSignal(signal: AbortSignal): AbortSignal {
  if (!(signal instanceof ClientSignal)) return signal;
  const controller = new AbortController();
  const follow = signal as unknown as ClientSignal;
  if (follow.aborted) controller.abort(follow.reason);
  else follow.addEventListener('abort', () => controller.abort(follow.reason));
  return controller.signal;
}

/**
 * What the pipeline reads of a request, straight from node's IncomingMessage. The abort
 * signal is made when first asked for and aborts, as the adapter's does, when the response
 * closes before it finished (the client went away).
 */
export class NodeRequest {
  readonly method: string;
  readonly headers: NodeHeaders;
  private clientSignal: ClientSignal | undefined;
  private consumed = false;

  constructor(
    readonly raw: IncomingMessage,
    private readonly res: ServerResponse,
  ) {
    this.method = raw.method ?? 'GET';
    this.headers = new NodeHeaders(raw.headers);
  }

  get url(): string {
    const scheme = (this.raw.socket as { encrypted?: boolean } | null)?.encrypted ? 'https' : 'http';
    return `${scheme}://${this.raw.headers.host ?? 'localhost'}${this.raw.url ?? '/'}`;
  }

  get signal(): AbortSignal {
    if (this.clientSignal) return this.clientSignal as unknown as AbortSignal;
    const signal = new ClientSignal();
    this.clientSignal = signal;
    const res = this.res;
    // 'close' follows an 'error' too: one listener sees both.
    const gone = () => {
      if (!res.writableFinished) signal.abort(res.errored ?? undefined);
    };
    // The response, not the request: node destroys a request once its body has been read.
    if (res.closed || res.destroyed) gone();
    else res.once('close', gone);
    return signal as unknown as AbortSignal;
  }

  get bodyUsed(): boolean {
    return this.consumed;
  }

  /** The whole body, as one Buffer. Rejects when the connection fails or closes before its end. */
  arrayBuffer(): Promise<Buffer> {
    this.consumed = true;
    const req = this.raw;
    return new Promise((resolve, reject) => {
      if (req.readableEnded) {
        resolve(Buffer.alloc(0));
        return;
      }
      // Gone before the body was read: its events have fired already, and will not again.
      if (req.destroyed) {
        reject(new Error('The client closed the connection before the body was read.'));
        return;
      }
      const parts: Buffer[] = [];
      const onData = (chunk: Buffer) => parts.push(chunk);
      const cleanup = () => {
        req.off('data', onData);
        req.off('end', onEnd);
        req.off('error', onError);
        req.off('close', onClose);
      };
      const onEnd = () => {
        cleanup();
        resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts));
      };
      const onError = (err: Error) => {
        cleanup();
        reject(err);
      };
      const onClose = () => {
        if (req.complete) return;
        cleanup();
        reject(new Error('The client closed the connection before the body ended.'));
      };
      req.on('data', onData);
      req.once('end', onEnd);
      req.once('error', onError);
      req.once('close', onClose);
    });
  }

  async text(): Promise<string> {
    return (await this.arrayBuffer()).toString('utf8');
  }

  async json(): Promise<unknown> {
    return JSON.parse(await this.text()) as unknown;
  }

  /**
   * The body as a web stream, for a body without a declared length. Cancelling it (the
   * gateway does when a body passes the size limit) leaves the socket alone, so the 413 still
   * reaches the client; the rest of the body is discarded.
   */
  get body(): ReadableStream<Uint8Array> | null {
    if (this.method === 'GET' || this.method === 'HEAD') return null;
    this.consumed = true;
    return bodyStream(this.raw);
  }
}

/**
 * A node request's body as a web stream. Unlike `Readable.toWeb`, cancelling it (the gateway
 * does when a body passes the size limit) leaves the socket alone, so the 413 still reaches
 * the client; the rest of the body is discarded. A connection that closes before the body
 * ended errors the stream.
 */
export function bodyStream(req: IncomingMessage): ReadableStream<Uint8Array> {
  let done = false;
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        // Already over: its events have fired, and will not again.
        if (req.readableEnded) {
          done = true;
          controller.close();
          return;
        }
        if (req.destroyed) {
          done = true;
          controller.error(new Error('The client closed the connection before the body was read.'));
          return;
        }
        req.on('data', (chunk: Buffer) => {
          if (done) return;
          controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
          if ((controller.desiredSize ?? 1) <= 0) req.pause();
        });
        req.once('end', () => {
          if (done) return;
          done = true;
          controller.close();
        });
        req.once('error', (err) => {
          if (done) return;
          done = true;
          controller.error(err);
        });
        req.once('close', () => {
          if (done || req.complete) return;
          done = true;
          controller.error(new Error('The client closed the connection before the body ended.'));
        });
      },
      pull() {
        req.resume();
      },
      cancel() {
        done = true;
        req.resume();
      },
    },
    { highWaterMark: 64 * 1024, size: (chunk) => chunk.byteLength },
  );
}

/**
 * On a streamed body that can write itself: hands the answer to a node:http response to write
 * into directly, instead of being piped through a stream. False (and nothing done) once the
 * body was read from some other way.
 */
export const WRITE_DIRECT = Symbol('write direct');

export interface DirectBody {
  [WRITE_DIRECT](res: ServerResponse): boolean;
}

const isDirectBody = (v: unknown): v is DirectBody =>
  v !== null && typeof v === 'object' && typeof (v as Partial<DirectBody>)[WRITE_DIRECT] === 'function';

/** The fields of the server adapter's Response that say what its body is without building a stream. */
interface AdapterBody {
  bodyType?: string;
  bodyInit?: unknown;
  _buffer?: Buffer;
}

const isNodeReadable = (v: unknown): v is Readable =>
  v !== null && typeof v === 'object' && typeof (v as Readable).pipe === 'function' && typeof (v as Readable).read === 'function';

/**
 * Writes `response` to `res`: status and headers (the answer's own, then `late`, which win)
 * in one writeHead, then the body: a string or bytes in one `end`, a relay that writes itself
 * handed the response, a node stream piped (and destroyed when the client goes away), a web
 * stream pumped chunk by chunk.
 */
export function writeAnswer(req: IncomingMessage, res: ServerResponse, response: Response, late: Record<string, string> | null): void {
  if (res.closed || res.destroyed || res.writableEnded) return;
  const headers: Record<string, string | string[]> = {};
  response.headers.forEach((value, name) => {
    headers[name] = value;
  });
  if (late) for (const k in late) headers[k] = late[k]!;
  const cookies = response.headers.getSetCookie?.();
  if (cookies && cookies.length > 0) headers['set-cookie'] = cookies;
  if (response.statusText) res.writeHead(response.status, response.statusText, headers);
  else res.writeHead(response.status, headers);

  const own = response as unknown as AdapterBody;
  if (own.bodyType === 'String' && typeof own.bodyInit === 'string') {
    res.end(own.bodyInit);
    return;
  }
  if (own._buffer) {
    res.end(own._buffer);
    return;
  }
  if (own.bodyType === 'Readable' && isNodeReadable(own.bodyInit)) {
    pipeStream(req, res, own.bodyInit);
    return;
  }
  const body = response.body as unknown;
  if (body == null) {
    res.end();
    return;
  }
  if (isNodeReadable(body)) {
    pipeStream(req, res, body);
    return;
  }
  pumpWebStream(req, res, body as ReadableStream<Uint8Array>);
}

/** A streamed answer's socket: no idle timeout, no Nagle delay, kept alive (as the adapter does). */
function configureSocket(req: IncomingMessage): void {
  req.socket?.setTimeout?.(0);
  req.socket?.setNoDelay?.(true);
  req.socket?.setKeepAlive?.(true);
}

/**
 * A node stream into the answer: a relay that can write itself is handed the response;
 * anything else is piped, either side failing or closing ending the other.
 */
function pipeStream(req: IncomingMessage, res: ServerResponse, body: Readable): void {
  configureSocket(req);
  if (isDirectBody(body) && body[WRITE_DIRECT](res)) return;
  pipeline(body, res, () => undefined);
}

function pumpWebStream(req: IncomingMessage, res: ServerResponse, body: ReadableStream<Uint8Array>): void {
  configureSocket(req);
  const reader = body.getReader();
  const onClose = () => void reader.cancel().catch(() => undefined);
  res.once('close', onClose);
  void (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done || res.destroyed) break;
        if (!res.write(value)) await drained(res);
      }
      res.end();
    } catch (err) {
      res.destroy(err instanceof Error ? err : new Error(String(err)));
    } finally {
      res.off('close', onClose);
    }
  })();
}

/** Resolves when `res` can take more (or is closed). */
export function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}
