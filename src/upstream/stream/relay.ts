/**
 * The one SSE relay of every streamed endpoint. The endpoint's event reader turns each
 * upstream read into the client's frames, flushed as they arrive; a `: keep-alive` comment
 * goes out while the upstream is silent; a failure after the 200 (the upstream broke off, sent
 * garbage or an error event, or shutdown cut the stream) becomes the reader's error frames: a
 * cut answer never looks like a finished one.
 *
 * Whatever way the stream ends, it is billed once (`settleStream`): the upstream's usage when
 * it came, else the produced output counted with the tokenizer, else (nothing produced) the
 * hold is released. The answer's last frames (the usage chunk, the end marker) are written
 * only after that charge is in the store: a client holding a whole answer has paid for it.
 */
import { Response } from '@whatwg-node/server';
import type { BilledCall } from '../../billing/meter.js';
import { outputTokens } from '../../billing/output.js';
import type { Tokenizer } from '../../billing/tokens.js';
import type { Model } from '../../catalog/catalog.js';
import { errors, GatewayError } from '../../errors.js';
import { withHeaders } from '../../http/objects.js';
import type { RequestContext } from '../../pipeline/types.js';
import type { Services } from '../../services.js';
import { upstreamFailure } from '../client.js';
import { redactedError, upstreamKeysRedactor } from '../key-redactor.js';
import type { UpstreamResponse } from '../types.js';
import { type Sink, streamBody } from './bodies.js';
import type { EventReader } from './reader.js';
import { KEEP_ALIVE } from './sse.js';

/** The billed call a stream settles, and how to count a prompt whose usage never came. */
export interface StreamCall {
  call: BilledCall;
  /** The model as served (its upstream is the one that answered). */
  model: Model;
  promptTokens(): number;
}

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

/**
 * Bills what the stream produced, once. Usage is final only at the end of a complete stream,
 * when no output came after it and it accounts for the output there was (a report of zero
 * completion tokens after output is an opening report, not an account of it): then it is
 * billed as reported. Any other stream (cut, failed, or complete with a report that was not
 * final) bills the larger of the usage seen and the count of what was produced: produced
 * output is never billed as zero. Nothing produced and no usage releases the hold.
 */
export function settleStream(billing: StreamCall, reader: EventReader, tokenizer: Tokenizer): Promise<void> {
  const { call, model } = billing;
  const { usage, output, tools: toolsOf, outputAfterUsage } = reader.produced();
  // Hosted tool calls are billed per call beside the tokens, however the tokens are measured.
  const tools = toolsOf?.() ?? null;
  const toolCalls = tools ? { tools } : {};
  // Counted only when needed: a final report with output in it is billed without parsing the stream.
  let counted: number | undefined;
  const producedTokens = () => (counted ??= outputTokens(output(), (t) => tokenizer.count(t)));
  if (usage && reader.done && !outputAfterUsage?.() && (usage.completion > 0 || producedTokens() === 0)) {
    return call.bill({ kind: 'tokens', ...usage, ...toolCalls }, 'usage', { upstream: model.upstream });
  }
  const completion = producedTokens();
  if (completion === 0 && !usage?.completion && !tools) return call.cancel();
  // The prompt is the provider's to count whenever it said (it does not grow mid-stream).
  const prompt = usage?.prompt ?? billing.promptTokens();
  // The usage's cache reads and writes stay parts of its prompt, priced as such.
  return call.bill({ kind: 'tokens', ...usage, prompt, completion: Math.max(usage?.completion ?? 0, completion), ...toolCalls }, 'tokenizer', {
    upstream: model.upstream,
  });
}

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  // no-transform: proxies and compression middleware must not buffer the stream.
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
};

export async function relayStream(
  core: Services,
  ctx: RequestContext,
  res: UpstreamResponse,
  billing: StreamCall,
  reader: EventReader,
  headers: Record<string, string>,
): Promise<Response> {
  // Shutdown's grace ended (and released the call) while the upstream's headers were on their
  // way: the answer, which nobody will pay for, is not relayed.
  if (billing.call.closed) {
    res.discard();
    throw errors.shuttingDown();
  }
  const relay = new StreamRelay(core, ctx, res, billing, reader);
  // What the upstream sent along with its headers is read before the answer starts. A short
  // answer from a fast upstream is often complete by then (its end included): it goes out as
  // one body with a Content-Length, in one write like a plain answer, instead of through a
  // stream, chunked framing and a keep-alive timer. Otherwise the frames read so far (or the
  // failure found in them) open the stream below, and nothing is read twice.
  const complete = await relay.completeOnArrival();
  if (complete) {
    const h = withHeaders({ ...SSE_HEADERS }, headers);
    h['content-length'] = String(complete.byteLength);
    return new Response(complete as Uint8Array<ArrayBuffer>, { status: 200, headers: h });
  }
  const stream = streamBody({
    start: (sink) => relay.start(sink),
    pull: (sink) => relay.pullInto(sink),
    cancel: () => relay.cancel(),
    ended: () => relay.ended,
  });
  return new Response(stream as ReadableStream<Uint8Array>, { status: 200, headers: withHeaders({ ...SSE_HEADERS }, headers) });
}

/** One stream's relay state: what was read ahead, the keep-alive timer, whether it ended. */
class StreamRelay {
  ended = false;
  private keepAlive: NodeJS.Timeout | undefined;
  private iterator: AsyncIterator<Uint8Array> | null = null;
  private pending: Promise<IteratorResult<Uint8Array>> | null = null;
  private carried: Uint8Array[] | null = null;
  private carriedError: unknown = null;
  private sink: Sink | null = null;
  /** The read the stream waits on: a read-on after the client left takes its result over. */
  private inflight: Promise<IteratorResult<Uint8Array>> | null = null;
  /** The client left after the answer's end; the upstream is read on for the usage. */
  private readingOn = false;

  constructor(
    private readonly core: Services,
    private readonly ctx: RequestContext,
    private readonly res: UpstreamResponse,
    private readonly billing: StreamCall,
    private readonly reader: EventReader,
  ) {
    ctx.observed.record.stream = true;
    core.counters.openStreams++;
    // Shutdown's grace period is over: the answer is cut like any failed stream, and what was
    // produced so far is billed.
    billing.call.onAbort(() => {
      if (this.readingOn) {
        // The grace for the usage is cut short: what was seen is billed now.
        void settleStream(this.billing, this.reader, this.core.tokenizer);
        this.res.discard();
        return;
      }
      if (this.ended) return;
      this.res.discard();
      void this.end();
      this.tell(this.reader.errorFrames(errors.cutByShutdown()));
    });
    // Belt and braces: some servers report a disconnect only through the request's signal,
    // and a client may have left while the upstream's answer was on its way.
    if (ctx.request.signal?.aborted) queueMicrotask(() => this.cancel());
    else ctx.request.signal?.addEventListener('abort', () => this.cancel(), { once: true });
  }

  private iter(): AsyncIterator<Uint8Array> {
    return (this.iterator ??= this.res.body[Symbol.asyncIterator]());
  }

  /** Stops the relay once; false when it had stopped already. */
  private stop(): boolean {
    if (this.ended) return false;
    this.ended = true;
    this.core.counters.openStreams--;
    clearTimeout(this.keepAlive);
    return true;
  }

  /** Ends the relay once and bills it; resolves when the charge is in the store. */
  private end(): Promise<void> {
    return this.stop() ? settleStream(this.billing, this.reader, this.core.tokenizer) : Promise.resolve();
  }

  /**
   * The whole answer, when it came with the headers (settled before it is returned), else
   * null with what was read kept for the stream. A transport that can tell hands over what it
   * has already received at once; otherwise the first read is given until the next turn.
   */
  async completeOnArrival(): Promise<Uint8Array | null> {
    const received = this.res.received?.() ?? null;
    let early: IteratorResult<Uint8Array> | typeof NOT_YET;
    if (received) early = { done: false, value: received };
    else {
      this.pending = this.iter().next();
      early = await Promise.race([this.pending, nextTurn()]).catch((): typeof NOT_YET => NOT_YET);
    }
    // Cut by shutdown meanwhile: the stream opens only to tell so (see start).
    if (this.ended) return null;
    if (typeof early !== 'object' || early.done) return null;
    this.pending = null;
    try {
      this.carried = this.reader.push(early.value);
    } catch (err) {
      this.carriedError = err;
      return null;
    }
    if (!this.reader.done) return null;
    const parts = this.carried;
    this.carried = null;
    if (!this.reader.doneFramed && this.reader.endFrame) parts.push(this.reader.endFrame);
    if (this.iterator || !this.res.skipRest) drainRest(this.iter());
    else this.res.skipRest();
    await this.end();
    const record = this.ctx.observed.record;
    record.ttfbMs = performance.now() - record.startedAt;
    return joined(parts);
  }

  start(sink: Sink): void {
    this.sink = sink;
    if (this.ended) {
      // Cut by shutdown before the stream opened: it says so and ends.
      this.tell(this.reader.errorFrames(errors.cutByShutdown()));
      return;
    }
    const core = this.core;
    this.keepAlive = setTimeout(
      function tick(this: void, relay: StreamRelay) {
        if (relay.ended) return;
        try {
          sink.push(KEEP_ALIVE);
        } catch {
          return;
        }
        relay.keepAlive?.refresh();
      },
      core.cfg.limits.streamKeepAliveMs,
      this,
    );
  }

  private read(): Promise<IteratorResult<Uint8Array>> {
    const p = this.pending ?? this.iter().next();
    this.pending = null;
    return p;
  }

  /** The answer's body bytes, noting when the first one went out (time to first token). */
  private send(sink: Sink, parts: Uint8Array[]): void {
    if (parts.length === 0) return;
    const record = this.ctx.observed.record;
    if (record.ttfbMs === null) record.ttfbMs = performance.now() - record.startedAt;
    sink.push(joined(parts));
  }

  /** Reads the upstream until something was sent or the stream ended; never throws. */
  async pullInto(sink: Sink): Promise<void> {
    if (this.ended) return;
    try {
      if (this.carriedError) {
        const err = this.carriedError;
        this.carriedError = null;
        throw err;
      }
      if (this.carried && !this.reader.answered) {
        const parts = this.carried;
        this.carried = null;
        if (parts.length) return this.send(sink, parts);
      }
      for (;;) {
        const read = (this.inflight = this.read());
        const next = await read;
        this.inflight = null;
        if (this.ended) return;
        this.keepAlive?.refresh();
        const frames = next.done ? this.reader.end() : this.reader.push(next.value);
        // Once the answer's content ended, its last frames wait for the end and its settle:
        // the usage chunk, like [DONE], reaches the client only once the charge is in.
        const parts = this.reader.answered && this.carried ? [...this.carried, ...frames] : frames;
        if (this.reader.answered) this.carried = null;
        if (next.done && !this.reader.done) {
          this.send(sink, parts);
          throw new GatewayError('upstream_error', 'The upstream stream ended before it was complete.');
        }
        if (this.reader.done) return await this.finish(sink, parts, next.done === true);
        if (this.reader.answered) {
          this.carried = parts;
          continue;
        }
        if (parts.length) return this.send(sink, parts);
      }
    } catch (err) {
      if (this.ended) return;
      await this.fail(sink, err);
    }
  }

  /**
   * The answer is complete: the charge lands first, then the last frames and the end marker
   * go out. An upstream that keeps its side open after its end has the rest of its body read
   * (and ignored) in the background, so the connection can go back to the pool.
   */
  private async finish(sink: Sink, parts: Uint8Array[], bodyEnded: boolean): Promise<void> {
    if (!bodyEnded) drainRest(this.iter());
    await this.end();
    if (!this.reader.doneFramed && this.reader.endFrame) parts.push(this.reader.endFrame);
    this.send(sink, parts);
    sink.close();
  }

  private async fail(sink: Sink, err: unknown): Promise<void> {
    const { core, ctx, billing } = this;
    this.res.discard();
    // An upstream's error event is relayed in the client's last frame: no upstream key material in it.
    const gErr = redactedError(err instanceof GatewayError ? err : upstreamFailure(err, billing.model.upstream), upstreamKeysRedactor(core.cfg));
    if (!(err instanceof GatewayError) || gErr.code === 'upstream_error') core.breaker.failure(billing.model.upstream, ctx.key.accountId);
    core.log.warn({ msg: 'stream failed', request_id: ctx.requestId, code: gErr.code });
    if (core.hooks.has('onError')) void core.hooks.run('onError', { error: gErr, requestId: ctx.requestId });
    await this.end();
    this.sink = sink;
    // The answer's held-back last frames (its content went out before them) precede the error.
    const held = this.carried ?? [];
    this.carried = null;
    this.tell([...held, ...this.reader.errorFrames(gErr)]);
  }

  /** Writes frames that end the stream, if the client is still there. */
  private tell(frames: Uint8Array[]): void {
    try {
      for (const f of frames) this.sink?.push(f);
      this.sink?.close();
    } catch {
      // The client is gone too.
    }
  }

  /**
   * The client went away: stop the upstream and bill what was produced so far. Gone after the
   * answer's end, it still pays the usage that follows: the upstream is read on for it, at
   * most `usageGraceMs`.
   */
  cancel(): void {
    const graceMs = this.core.cfg.usageGraceMs;
    if (!this.stop()) return;
    if (this.reader.answered && !this.reader.done && graceMs > 0) {
      this.readingOn = true;
      void this.readOn(graceMs).then(() => settleStream(this.billing, this.reader, this.core.tokenizer));
      return;
    }
    this.res.discard();
    void settleStream(this.billing, this.reader, this.core.tokenizer);
  }

  /** Reads the upstream to its end (or until `graceMs` passed or it failed) with nobody to send to. */
  private async readOn(graceMs: number): Promise<void> {
    const timer = setTimeout(() => this.res.discard(), graceMs);
    let pending = this.inflight;
    try {
      for (;;) {
        const next = await (pending ?? this.read());
        pending = null;
        if (next.done) {
          this.reader.end();
          break;
        }
        this.reader.push(next.value);
        if (this.reader.done) break;
      }
    } catch {
      // The upstream failed, or the grace ran out: what was seen is billed.
    } finally {
      clearTimeout(timer);
    }
    this.res.discard();
  }
}
