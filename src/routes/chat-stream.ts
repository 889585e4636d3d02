/**
 * The SSE relay: each upstream event is re-framed as `data: ...\n\n` and flushed as it
 * arrives; a `: keep-alive` comment goes out while the upstream is silent; a failure after
 * the 200 becomes one error event with finish_reason "error", then [DONE]. Whatever way the
 * stream ends, billing happens once: upstream usage when it came, else the produced text
 * counted with the tokenizer, else (nothing produced) the hold is released.
 */
import type { Core, RequestContext } from '../core.js';
import { GatewayError } from '../errors.js';
import type { UpstreamResponse } from '../upstream/client.js';
import { redactKey, upstreamFailure } from '../upstream/client.js';
import { SseFastPath, type EventVerdict } from '../upstream/sse-fast.js';
import { DONE_EVENT, KEEP_ALIVE, SseParser, encodeEvent, frameEvent } from '../upstream/sse.js';
import { choicesText } from '../billing/output.js';
import { type ChatBilling, usageFrom, type Usage } from './chat-billing.js';
import { Readable } from 'node:stream';
import { Response } from '@whatwg-node/server';

const encoder = new TextEncoder();
/**
 * Whether answers are built with the server adapter's own Response (Node): it takes a Node
 * Readable as a body and pipes it. Elsewhere (Bun, Next.js edge) Response is the runtime's.
 */
const NODE_BODIES = Response !== globalThis.Response;
/**
 * A `usage` or `error` key with a non-null value. Inside a JSON string a quote is escaped
 * (\"usage\"), so text that merely mentions the word never matches; a false match only costs a parse.
 */
const MAY_CARRY = /"(?:usage|error)"\s*:\s*[^n\s]/;

export function relayStream(
  core: Core,
  ctx: RequestContext,
  res: UpstreamResponse,
  billing: ChatBilling,
  clientWantsUsage: boolean,
  headers: Record<string, string>,
): Response {
  const parser = new SseParser();
  const iterator = res.body[Symbol.asyncIterator]();
  let produced = '';
  /** Events relayed without parsing; parsed only if the produced text has to be counted. */
  const unparsed: Array<string | Uint8Array> = [];
  const fast = new SseFastPath();
  /** Set at the first non-canonical event: the generic parser takes the rest of the stream. */
  let slow = false;
  const renames = billing.model.upstreamModel !== billing.model.id;
  // The upstream's key never reaches a client, even echoed inside a streamed chunk: an event
  // that contains it leaves the byte fast path and goes out redacted.
  const upstreamCfg = core.cfg.upstreams[billing.model.upstream];
  const apiKey = upstreamCfg && 'apiKey' in upstreamCfg && upstreamCfg.apiKey.length >= 8 ? upstreamCfg.apiKey : '';
  const keyBytes = apiKey ? Buffer.from(apiKey) : null;
  let usage: Usage | null = null;
  let sawDone = false;
  let ended = false;
  let keepAlive: NodeJS.Timeout | undefined;

  const bill = () => {
    if (usage) return billing.finish(usage);
    for (const data of unparsed) {
      try {
        addProduced(JSON.parse(typeof data === 'string' ? data : Buffer.from(data).toString('utf8')) as { choices?: unknown });
      } catch {
        // Relayed as it came; it carries nothing countable.
      }
    }
    unparsed.length = 0;
    if (produced.length === 0) return billing.finish(null);
    billing.finish({ prompt: billing.promptTokens(), completion: core.tokenizer.count(produced) }, 'tokenizer');
  };

  const end = () => {
    if (ended) return false;
    ended = true;
    clearTimeout(keepAlive);
    bill();
    return true;
  };

  const errorEvent = (err: GatewayError) =>
    encodeEvent(
      JSON.stringify({
        ...err.toJSON(),
        choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }],
      }),
    );

  /** Adds the text a chunk produced (every kind of output a provider bills) to `produced`. */
  function addProduced(chunk: { choices?: unknown }): void {
    produced += choicesText(chunk?.choices, 'delta');
  }

  /** Handles one upstream event; returns the frame to send, or null to skip it. Throws on a bad event. */
  const onEvent = (raw: string): string | null => {
    const data = apiKey ? redactKey(raw, apiKey) : raw;
    if (data === '[DONE]') {
      sawDone = true;
      return null;
    }
    // Fast path: a JSON object that carries no usage and no error, under the model's own name,
    // goes out as it came, unparsed; its text is counted later only if usage never arrives.
    if (!renames && data.charCodeAt(0) === 123 && data.charCodeAt(data.length - 1) === 125 && !MAY_CARRY.test(data)) {
      unparsed.push(data);
      return frameEvent(data);
    }
    let chunk: { choices?: unknown; usage?: unknown; error?: unknown; model?: unknown };
    try {
      chunk = JSON.parse(data) as typeof chunk;
    } catch {
      throw new GatewayError('upstream_error', 'The upstream sent a malformed stream event.');
    }
    if (chunk === null || typeof chunk !== 'object') {
      throw new GatewayError('upstream_error', 'The upstream sent a malformed stream event.');
    }
    if (chunk.error) {
      const e = chunk.error as { message?: unknown };
      throw new GatewayError('upstream_error', typeof e.message === 'string' ? e.message : 'The upstream failed mid-stream.');
    }
    const u = usageFrom(chunk.usage);
    if (u) usage = u;
    const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
    addProduced(chunk);
    // The usage-only chunk was asked for by the gateway, not the client: keep it to ourselves.
    if (u && choices.length === 0 && !clientWantsUsage) return null;
    // Like plain answers: the client sees the model it called, not the upstream's name for it.
    const { id, upstreamModel } = billing.model;
    if (upstreamModel !== id && typeof chunk.model === 'string' && chunk.model !== id) {
      return frameEvent(JSON.stringify({ ...chunk, model: id }));
    }
    return frameEvent(data);
  };

  /** The fast path's look at one canonical event (see src/upstream/sse-fast.ts). */
  const onEventBytes = (data: Buffer): EventVerdict => {
    const plainObject = data[0] === 123 && data[data.length - 1] === 125;
    if (
      !renames &&
      plainObject &&
      data.indexOf('"usage"') === -1 &&
      data.indexOf('"error"') === -1 &&
      (keyBytes === null || data.indexOf(keyBytes) === -1)
    ) {
      unparsed.push(data);
      return 'verbatim';
    }
    const frame = onEvent(data.toString('utf8'));
    return frame === null ? null : encoder.encode(frame);
  };

  /**
   * The frames of one upstream read go out as one chunk: a read usually holds several events,
   * and one write per event would cost a syscall each.
   */
  const framesOf = (events: string[]): string => {
    let out = '';
    for (const data of events) {
      if (sawDone) break;
      const frame = onEvent(data);
      if (frame) out += frame;
    }
    return out;
  };

  /** Everything to send for one upstream read. */
  const relay = (chunk: Uint8Array): Uint8Array[] => {
    if (slow) {
      const text = framesOf(parser.push(chunk));
      return text ? [encoder.encode(text)] : [];
    }
    const r = fast.push(chunk, onEventBytes);
    if (r.done) sawDone = true;
    if (r.rest) {
      slow = true;
      const text = framesOf(parser.push(r.rest));
      if (text) r.out.push(encoder.encode(text));
    }
    return r.out;
  };
  const joined = (parts: Uint8Array[]): Uint8Array => (parts.length === 1 ? parts[0]! : Buffer.concat(parts));

  /** Where the relay writes: a web ReadableStream's controller, or a Node Readable. */
  interface Sink {
    push(chunk: Uint8Array): void;
    close(): void;
  }

  /** Reads the upstream until something was sent or the stream ended; never throws. */
  const pullInto = async (sink: Sink): Promise<void> => {
    if (ended) return;
    try {
      for (;;) {
        const next = await iterator.next();
        if (ended) return;
        keepAlive?.refresh();
        if (next.done) {
          const pending = fast.takePending();
          const parts = pending ? relay(pending) : [];
          const text = framesOf(parser.end().events);
          if (text) parts.push(encoder.encode(text));
          if (parts.length) sink.push(joined(parts));
          if (!sawDone) throw new GatewayError('upstream_error', 'The upstream stream ended before it was complete.');
          end();
          sink.push(DONE_EVENT);
          sink.close();
          return;
        }
        const parts = relay(next.value);
        if (sawDone) {
          // [DONE] finishes the answer even if the upstream keeps its side open a while: the
          // rest of its body is read (and ignored) in the background, so the connection can
          // still go back to the pool, and the body timeout bounds a misbehaving upstream.
          end();
          parts.push(DONE_EVENT);
          sink.push(joined(parts));
          sink.close();
          void (async () => {
            try {
              while (!(await iterator.next()).done);
            } catch {
              // Failed after the answer was complete: nothing left to bill or tell.
            }
          })();
          return;
        }
        if (parts.length) {
          sink.push(joined(parts));
          return;
        }
      }
    } catch (err) {
      if (ended) return;
      res.discard();
      const gErr = err instanceof GatewayError ? err : upstreamFailure(err, billing.model.upstream);
      if (!(err instanceof GatewayError) || gErr.code === 'upstream_error') core.breaker.failure(billing.model.upstream);
      core.log.warn({ msg: 'stream failed', requestId: ctx.requestId, code: gErr.code });
      end();
      try {
        sink.push(errorEvent(gErr));
        sink.push(DONE_EVENT);
        sink.close();
      } catch {
        // The client is gone too.
      }
    }
  };

  /** The client went away: stop the upstream and bill what was produced so far. */
  const cancel = () => {
    res.discard();
    end();
  };

  let activeSink: Sink | null = null;
  // Shutdown's grace period is over: the answer is cut like any failed stream (an error event,
  // then [DONE]) and what was produced so far is billed.
  billing.call.onAbort(() => {
    if (ended) return;
    res.discard();
    end();
    try {
      activeSink?.push(errorEvent(new GatewayError('service_unavailable', 'The gateway is shutting down; the answer was cut.')));
      activeSink?.push(DONE_EVENT);
      activeSink?.close();
    } catch {
      // The client is gone too.
    }
  });

  const startKeepAlive = (sink: Sink) => {
    activeSink = sink;
    keepAlive = setTimeout(function tick() {
      if (ended) return;
      try {
        sink.push(KEEP_ALIVE);
      } catch {
        return;
      }
      keepAlive?.refresh();
    }, core.cfg.limits.streamKeepAliveMs);
  };

  let stream: ReadableStream<Uint8Array> | Readable;
  if (NODE_BODIES) {
    // On Node, the server adapter pipes a Node Readable straight into the socket; a web
    // ReadableStream would first be wrapped into one, chunk by chunk.
    const readable = new Readable({
      read() {
        void pullInto(sink);
      },
      destroy(err, callback) {
        if (!ended) cancel();
        callback(err);
      },
    });
    const sink: Sink = { push: (chunk) => void readable.push(chunk), close: () => void readable.push(null) };
    startKeepAlive(sink);
    stream = readable;
  } else {
    stream = new ReadableStream<Uint8Array>(
      {
        start(controller) {
          startKeepAlive({ push: (chunk) => controller.enqueue(chunk), close: () => controller.close() });
        },
        pull: (controller) => pullInto({ push: (chunk) => controller.enqueue(chunk), close: () => controller.close() }),
        cancel,
      },
      { highWaterMark: 0 },
    );
  }
  // Belt and braces: some servers report a disconnect only through the request's signal.
  ctx.request.signal?.addEventListener(
    'abort',
    () => {
      if (!ended) {
        res.discard();
        end();
      }
    },
    { once: true },
  );
  return new Response(stream as ReadableStream<Uint8Array>, {
    status: 200,
    headers: {
      ...headers,
      'content-type': 'text/event-stream; charset=utf-8',
      // no-transform: proxies and compression middleware must not buffer the stream.
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
    },
  });
}
