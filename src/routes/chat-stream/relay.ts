/**
 * The SSE relay: each upstream event is re-framed as `data: ...\n\n` and flushed as it
 * arrives (events.ts); a `: keep-alive` comment goes out while the upstream is silent; a
 * failure after the 200 becomes one error event with finish_reason "error", then [DONE].
 * Whatever way the stream ends, billing happens once (output.ts): upstream usage when it came,
 * else the produced text counted with the tokenizer, else (nothing produced) the hold is released.
 */
import { Response } from '@whatwg-node/server';
import { withHeaders } from '../../http/objects.js';
import type { Services, RequestContext } from '../../services.js';
import { GatewayError } from '../../errors.js';
import { upstreamFailure } from '../../upstream/client.js';
import { DONE_EVENT, KEEP_ALIVE } from '../../upstream/sse.js';
import type { UpstreamResponse } from '../../upstream/types.js';
import type { ChatBilling } from '../chat-billing.js';
import { type Sink, streamBody } from './bodies.js';
import { createChatEvents, errorEvent } from './events.js';
import { createStreamOutput } from './output.js';

const joined = (parts: Uint8Array[]): Uint8Array => (parts.length === 1 ? parts[0]! : Buffer.concat(parts));

/** What Promise.race returns when the upstream had nothing more buffered this turn. */
const NOT_YET = Symbol('not yet');
const nextTurn = (): Promise<typeof NOT_YET> => new Promise((resolve) => setImmediate(resolve, NOT_YET));

/** Reads the rest of an upstream body nobody needs, so its connection can go back to the pool. */
const drainRest = (iterator: AsyncIterator<Uint8Array>): void => {
  void (async () => {
    try {
      while (!(await iterator.next()).done);
    } catch {
      // Failed after the answer was complete: nothing left to bill or tell.
    }
  })();
};

export async function relayStream(
  core: Services,
  ctx: RequestContext,
  res: UpstreamResponse,
  billing: ChatBilling,
  clientWantsUsage: boolean,
  headers: Record<string, string>,
): Promise<Response> {
  const upstreamCfg = core.cfg.upstreams[billing.model.upstream];
  const apiKey = upstreamCfg && 'apiKey' in upstreamCfg && upstreamCfg.apiKey.length >= 8 ? upstreamCfg.apiKey : '';
  const output = createStreamOutput();
  const events = createChatEvents({ model: billing.model, apiKey, clientWantsUsage, output });
  let ended = false;
  let keepAlive: NodeJS.Timeout | undefined;
  const record = ctx.observed.record;
  record.stream = true;
  core.counters.openStreams++;

  const end = () => {
    if (ended) return false;
    ended = true;
    core.counters.openStreams--;
    clearTimeout(keepAlive);
    output.bill(billing, core.tokenizer);
    return true;
  };
  /** The answer's headers, a fresh object each time (see withHeaders). */
  const sseHeaders = (): Record<string, string> =>
    withHeaders(
      {
        'content-type': 'text/event-stream; charset=utf-8',
        // no-transform: proxies and compression middleware must not buffer the stream.
        'cache-control': 'no-cache, no-transform',
        'x-accel-buffering': 'no',
      },
      headers,
    );

  // What the upstream sent along with its headers is read before the answer starts. A short
  // answer from a fast upstream is often complete by then ([DONE] included): it goes out as
  // one body with a Content-Length, in one write like a plain answer, instead of through a
  // stream, chunked framing and a keep-alive timer. Otherwise the frames read so far (or the
  // failure found in them) open the stream below, and nothing is read twice. A transport that
  // can tell hands over what it has already received at once (no async iterator is made for an
  // answer that was complete); otherwise the first read is given until the next turn.
  let iterator: AsyncIterator<Uint8Array> | null = null;
  const iter = (): AsyncIterator<Uint8Array> => (iterator ??= res.body[Symbol.asyncIterator]());
  let pending: Promise<IteratorResult<Uint8Array>> | null = null;
  let carried: Uint8Array[] | null = null;
  let carriedError: unknown = null;
  const received = res.received?.() ?? null;
  let early: IteratorResult<Uint8Array> | typeof NOT_YET;
  if (received) early = { done: false, value: received };
  else {
    pending = iter().next();
    early = await Promise.race([pending, nextTurn()]).catch((): typeof NOT_YET => NOT_YET);
  }
  if (typeof early === 'object' && !early.done) {
    pending = null;
    try {
      carried = events.push(early.value);
    } catch (err) {
      carriedError = err;
    }
    if (carried && events.done) {
      end();
      if (!events.doneFramed) carried.push(DONE_EVENT);
      const body = joined(carried);
      record.ttfbMs = performance.now() - record.startedAt;
      if (iterator || !res.skipRest) drainRest(iter());
      else res.skipRest();
      const complete = sseHeaders();
      complete['content-length'] = String(body.byteLength);
      return new Response(body as Uint8Array<ArrayBuffer>, { status: 200, headers: complete });
    }
  }
  // The rest goes through the body's iterator (its listeners come with its first read; until
  // then an error on the body is heard by the transport's own listener, as undici keeps one).
  const rest = iter();
  const read = (): Promise<IteratorResult<Uint8Array>> => {
    const p = pending ?? rest.next();
    pending = null;
    return p;
  };

  /** Reads the upstream until something was sent or the stream ended; never throws. */
  const pullInto = async (sink: Sink): Promise<void> => {
    if (ended) return;
    try {
      if (carriedError) {
        const err = carriedError;
        carriedError = null;
        throw err;
      }
      if (carried) {
        const parts = carried;
        carried = null;
        if (parts.length) {
          sink.push(joined(parts));
          return;
        }
      }
      for (;;) {
        const next = await read();
        if (ended) return;
        keepAlive?.refresh();
        if (next.done) {
          const parts = events.end();
          if (parts.length) sink.push(joined(parts));
          if (!events.done) throw new GatewayError('upstream_error', 'The upstream stream ended before it was complete.');
          end();
          if (!events.doneFramed) sink.push(DONE_EVENT);
          sink.close();
          return;
        }
        const parts = events.push(next.value);
        if (events.done) {
          // [DONE] finishes the answer even if the upstream keeps its side open a while: the
          // rest of its body is read (and ignored) in the background, so the connection can
          // still go back to the pool, and the body timeout bounds a misbehaving upstream.
          end();
          if (!events.doneFramed) parts.push(DONE_EVENT);
          sink.push(joined(parts));
          sink.close();
          drainRest(rest);
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
      if (!(err instanceof GatewayError) || gErr.code === 'upstream_error') core.breaker.failure(billing.model.upstream, ctx.key.accountId);
      core.log.warn({ msg: 'stream failed', requestId: ctx.requestId, code: gErr.code });
      if (core.hooks.has('onError')) void core.hooks.run('onError', { error: gErr, requestId: ctx.requestId });
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

  /** The answer's body bytes, noting when the first one went out (time to first token). */
  const timed = (sink: Sink): Sink => ({
    push(chunk) {
      if (record.ttfbMs === null) record.ttfbMs = performance.now() - record.startedAt;
      sink.push(chunk);
    },
    close: () => sink.close(),
  });
  const stream = streamBody({ start: startKeepAlive, pull: (sink) => pullInto(timed(sink)), cancel, ended: () => ended });
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
  return new Response(stream as ReadableStream<Uint8Array>, { status: 200, headers: sseHeaders() });
}
