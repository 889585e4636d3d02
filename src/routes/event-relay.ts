/**
 * The SSE relay of the streamed endpoints added beside chat (legacy completions, Responses):
 * each upstream event is interpreted by the endpoint's `EventHandler`, re-framed and flushed
 * as it arrives; a `: keep-alive` comment goes out while the upstream is silent. Whatever way
 * the stream ends, the call is billed once: the upstream's usage when it came, else the
 * produced text counted with the tokenizer, else (nothing produced) the hold is released.
 * A failure after the 200 (the upstream broke off, sent garbage or an error event, or shutdown
 * cut the stream) becomes the endpoint's one error event, then the end of the stream: a cut
 * answer never looks like a finished one.
 */
import { Response } from '@whatwg-node/server';
import { withHeaders } from '../http/objects.js';
import type { BilledCall } from '../billing/meter.js';
import type { Model } from '../catalog/catalog.js';
import type { Services, RequestContext } from '../services.js';
import { GatewayError } from '../errors.js';
import { redactKey, upstreamFailure, type UpstreamResponse } from '../upstream/client.js';
import { KEEP_ALIVE, SseParser } from '../upstream/sse.js';
import { type Sink, streamBody } from './chat-stream/bodies.js';

const encoder = new TextEncoder();

export interface EventHandler {
  /** The frame to send for one upstream event's data, or null to skip it; throws a GatewayError on an error event. */
  event(data: string): string | null;
  /** Whether the upstream reached its proper end (its last event came). */
  complete(): boolean;
  /** The usage the upstream reported, once it did. */
  usage(): { prompt: number; completion: number } | null;
  /** Every kind of output produced so far, as text to count when no usage came. */
  produced(): string;
  /** What goes out after the last event (`data: [DONE]`), if anything. */
  endFrame: string | null;
  /** The one event that reports a failure after the 200. */
  errorFrame(err: GatewayError): string;
}

export interface RelayBilling {
  call: BilledCall;
  model: Model;
  /** The prompt's tokens counted with the tokenizer, for a stream that ended without usage. */
  promptTokens(): number;
}

export function relayEvents(
  core: Services,
  ctx: RequestContext,
  res: UpstreamResponse,
  billing: RelayBilling,
  handler: EventHandler,
  headers: Record<string, string>,
): Response {
  const { call, model } = billing;
  const parser = new SseParser();
  const iterator = res.body[Symbol.asyncIterator]();
  const upstreamCfg = core.cfg.upstreams[model.upstream];
  // The upstream's key never reaches a client, even echoed inside an event.
  const apiKey = upstreamCfg && 'apiKey' in upstreamCfg && upstreamCfg.apiKey.length >= 8 ? upstreamCfg.apiKey : '';
  let ended = false;
  let keepAlive: NodeJS.Timeout | undefined;
  /** Where the answer is written (set when the body starts). */
  let sink: Sink | null = null;

  const bill = () => {
    const usage = handler.usage();
    if (usage) return void call.bill({ kind: 'tokens', ...usage }, 'usage', { upstream: model.upstream });
    const produced = handler.produced();
    if (produced.length === 0) return void call.cancel();
    void call.bill({ kind: 'tokens', prompt: billing.promptTokens(), completion: core.tokenizer.count(produced) }, 'tokenizer', {
      upstream: model.upstream,
    });
  };

  const end = () => {
    if (ended) return false;
    ended = true;
    clearTimeout(keepAlive);
    bill();
    return true;
  };

  const send = (text: string) => {
    try {
      if (text) sink?.push(encoder.encode(text));
    } catch {
      // The client is gone.
    }
  };
  const close = () => {
    try {
      sink?.close();
    } catch {
      // Already closed.
    }
  };

  /** Ends the stream with the endpoint's error event (after billing what was produced). */
  const fail = (err: GatewayError) => {
    if (!end()) return;
    res.discard();
    core.log.warn({ msg: 'stream failed', requestId: ctx.requestId, code: err.code });
    if (core.hooks.has('onError')) void core.hooks.run('onError', { error: err, requestId: ctx.requestId });
    send(handler.errorFrame(err));
    close();
  };

  const framesOf = (events: string[]): string => {
    let out = '';
    for (const raw of events) {
      if (handler.complete()) break;
      const frame = handler.event(apiKey ? redactKey(raw, apiKey) : raw);
      if (frame) out += frame;
    }
    return out;
  };

  const pull = async () => {
    if (ended) return;
    try {
      for (;;) {
        const next = await iterator.next();
        if (ended) return;
        keepAlive?.refresh();
        if (next.done) {
          send(framesOf(parser.end().events));
          if (!handler.complete()) throw new GatewayError('upstream_error', 'The upstream stream ended before it was complete.');
          end();
          if (handler.endFrame) send(handler.endFrame);
          close();
          return;
        }
        const text = framesOf(parser.push(next.value));
        if (handler.complete()) {
          end();
          send(text + (handler.endFrame ?? ''));
          close();
          // The rest of the body is read (and ignored) in the background, so the connection
          // can go back to the pool.
          void (async () => {
            try {
              while (!(await iterator.next()).done);
            } catch {
              // Failed after the answer was complete: nothing left to bill or tell.
            }
          })();
          return;
        }
        if (text) {
          send(text);
          return;
        }
      }
    } catch (err) {
      if (ended) return;
      const gErr = err instanceof GatewayError ? err : upstreamFailure(err, model.upstream);
      if (!(err instanceof GatewayError) || gErr.code === 'upstream_error') core.breaker.failure(model.upstream, ctx.key.accountId);
      fail(gErr);
    }
  };

  /** The client went away: stop the upstream and bill what was produced so far. */
  const cancel = () => {
    if (ended) return;
    res.discard();
    end();
  };

  // Shutdown's grace period is over: the answer is cut like any failed stream and what was
  // produced so far is billed.
  call.onAbort(() => fail(new GatewayError('service_unavailable', 'The gateway is shutting down; the answer was cut.')));
  ctx.request.signal?.addEventListener('abort', cancel, { once: true });

  const stream = streamBody({
    start(s) {
      sink = s;
      keepAlive = setTimeout(function tick() {
        if (ended) return;
        try {
          s.push(KEEP_ALIVE);
        } catch {
          return;
        }
        keepAlive?.refresh();
      }, core.cfg.limits.streamKeepAliveMs);
    },
    pull: () => pull(),
    cancel,
    ended: () => ended,
  });
  return new Response(stream as ReadableStream<Uint8Array>, {
    status: 200,
    headers: withHeaders(
      {
        'content-type': 'text/event-stream; charset=utf-8',
        // no-transform: proxies and compression middleware must not buffer the stream.
        'cache-control': 'no-cache, no-transform',
        'x-accel-buffering': 'no',
      },
      headers,
    ),
  });
}

/** Parses one event's data as a JSON object, or 502 as a malformed event. */
export function parseEvent(data: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch {
    throw new GatewayError('upstream_error', 'The upstream sent a malformed stream event.');
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    throw new GatewayError('upstream_error', 'The upstream sent a malformed stream event.');
  }
  return value as Record<string, unknown>;
}
