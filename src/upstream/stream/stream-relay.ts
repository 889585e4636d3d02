/**
 * The state of one streamed answer between its upstream and its client (see relay.ts): what
 * was read ahead, the keep-alive timer, the settle before the last frames, a client that left.
 */
import { errors, GatewayError } from '../../errors.js';
import type { RequestContext } from '../../pipeline/types.js';
import { pluginKey } from '../../pipeline/hooks.js';
import { upstreamFailure } from '../client.js';
import { redactedError, upstreamKeysRedactor } from '../key-redactor.js';
import type { BodyFlow, UpstreamResponse } from '../types.js';
import type { Sink } from './bodies.js';
import type { EventReader } from './reader.js';
import { ReadOn } from './read-on.js';
import { type RelayDeps, type StreamCall, settleStream } from './settle.js';
import { KEEP_ALIVE } from './sse.js';
import { drainRest, joined, NOT_YET, nextTurn } from './upstream-reads.js';

/** What `step` returns once the answer is complete: `finish` has taken its last frames. */
const FINISHING = Symbol('finishing');

/**
 * One stream's relay state: what was read ahead, the keep-alive timer, whether it ended.
 *
 * A transport that can hand its reads over as they arrive (`UpstreamResponse.listen`) is read
 * that way: each read is scanned and its frames written in the same turn, with no promise per
 * read and no wait for the client to pull (its backpressure pauses the upstream instead).
 * Others are read through their async iterator, one read per pull of the client's stream.
 */
export class StreamRelay {
  ended = false;
  private keepAlive: NodeJS.Timeout | undefined;
  private iterator: AsyncIterator<Uint8Array> | null = null;
  private pending: Promise<IteratorResult<Uint8Array>> | null = null;
  private carried: Uint8Array[] | null = null;
  /** Frames of the first read that go out before the carried ones (the content up to its end, when that read ended it). */
  private ahead: Uint8Array[] | null = null;
  private carriedError: unknown = null;
  private sink: Sink | null = null;
  /** The read the stream waits on: a read-on after the client left takes its result over. */
  private inflight: Promise<IteratorResult<Uint8Array>> | null = null;
  /** The client left after the answer's end; the upstream is read on for the usage. */
  private readingOn: ReadOn | null = null;
  /** A listened body's backpressure; null while the body is read through its iterator. */
  private flow: BodyFlow | null = null;
  /** The complete answer's settle and last frames, under way. */
  private finishing: Promise<void> | null = null;
  /** Shutdown's grace ran out (not the client leaving): the stream says so if it opens. */
  private cutByShutdown = false;

  constructor(
    private readonly core: RelayDeps,
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
        void settleStream(this.billing, this.reader, this.core.tokenizer, 'stopped');
        this.res.discard();
        return;
      }
      if (this.ended) return;
      this.cutByShutdown = true;
      this.res.discard();
      void this.end('stopped');
      this.tellError(errors.cutByShutdown());
    });
    // Belt and braces: some servers report a disconnect only through the request's signal,
    // and a client may have left while the upstream's answer was on its way.
    if (ctx.request.signal?.aborted) queueMicrotask(() => this.cancel());
    else ctx.request.signal?.addEventListener('abort', this.clientGone, { once: true });
  }

  /** The client left; once the relay stopped, nothing is left to cancel and it is removed. */
  private readonly clientGone = (): void => this.cancel();

  /**
   * Whether frames wait for the settle now: from the answer's content end on, when its usage
   * comes in events of their own after it (chat's usage chunk, Messages' message_delta). A
   * reader whose usage comes in its last event holds nothing back: that event alone waits.
   */
  private holding(): boolean {
    return this.reader.answered && !this.reader.usageInLastEvent;
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
    // The request's signal outlives the answer in the scavenger's eyes (as the call does, see
    // the meter's close()): listening on, it would keep this relay and all it holds.
    this.ctx.request.signal?.removeEventListener('abort', this.clientGone);
    return true;
  }

  /**
   * Ends the relay once and bills it; resolves when the charge is in the store. `cause` says
   * who ended an answer that is not complete (ignored when it is).
   */
  private async end(cause: 'upstream' | 'stopped' = 'stopped'): Promise<void> {
    if (!this.stop()) return;
    await settleStream(this.billing, this.reader, this.core.tokenizer, cause);
    // An answer whose own end says it failed (Responses' response.failed) ends the stream as
    // the upstream sent it, but the request's record says it failed (an Idempotency-Key keeps no such answer).
    if ((this.billing.account ?? this.reader.produced()).failed?.()) this.ctx.observed.record.errorCode ??= 'upstream_error';
    if (this.reader.done) {
      await this.reader.kept?.();
      await this.billing.complete?.();
    }
  }

  /** Reads the rest of a body nobody needs (ignored), so its connection can go back to the pool. */
  private drain(): void {
    if (this.flow) this.flow.resume();
    else drainRest(this.iter());
  }

  /**
   * The whole answer, when it came with the headers (settled before it is returned), else
   * null with what was read kept for the stream. A transport that can tell hands over what it
   * has already received at once (given until the next turn when it had nothing yet);
   * otherwise the first read is given until the next turn.
   */
  async completeOnArrival(): Promise<Uint8Array | null> {
    let received = this.res.received?.() ?? null;
    if (!received && this.res.listen) {
      await nextTurn();
      if (this.ended) return null;
      received = this.res.received?.() ?? null;
      // Nothing yet: the stream opens and the body is listened to from its first read.
      if (!received) return null;
    }
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
    if (!this.reader.done) {
      // The content ended in this first read: its frames up to that end need not wait.
      const at = this.holding() ? (this.reader.heldFrom ?? 0) : 0;
      if (at > 0) {
        this.ahead = this.carried.slice(0, at);
        this.carried = this.carried.slice(at);
      }
      return null;
    }
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
      // Cut by shutdown before the stream opened: it says so and ends (a client that left
      // meanwhile gets nothing more).
      if (this.cutByShutdown) this.tellError(errors.cutByShutdown());
      else sink.close();
      return;
    }
    // The upstream's status line came, but no event the client can have yet: a comment (every
    // SSE client skips it) makes every transport send the 200 now, not with the first event,
    // which a model may take seconds to write (a client timing its headers would give up,
    // still owing the prompt). It goes on the next turn, when the response is being written
    // (node:http's direct path takes the sink over only while nothing is buffered in it), and
    // only if nothing went out meanwhile.
    const ready = this.ahead !== null || this.carriedError !== null || (this.carried !== null && this.carried.length > 0 && !this.holding());
    if (!ready) {
      setImmediate(() => {
        if (this.ended || this.ctx.observed.record.ttfbMs !== null) return;
        try {
          sink.push(KEEP_ALIVE);
        } catch {
          // The client is gone: the next pull ends the relay.
        }
      });
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

  /**
   * The answer's body bytes, noting when the first one went out (time to first token).
   * False when the client has enough buffered for now.
   */
  private send(sink: Sink, parts: Uint8Array[]): boolean {
    if (parts.length === 0) return true;
    const record = this.ctx.observed.record;
    if (record.ttfbMs === null) record.ttfbMs = performance.now() - record.startedAt;
    return sink.push(joined(parts));
  }

  /** The client wants more: writes something, ends the stream, or lets a listened body flow again; never throws. */
  async pullInto(sink: Sink): Promise<void> {
    if (this.ended) return;
    if (this.flow) return this.flow.resume();
    try {
      if (this.carriedError) {
        const err = this.carriedError;
        this.carriedError = null;
        throw err;
      }
      if (this.ahead) {
        const parts = this.ahead;
        this.ahead = null;
        this.send(sink, parts);
        if (this.res.listen && !this.iterator) this.listen(sink);
        return;
      }
      if (this.carried && !this.holding()) {
        const parts = this.carried;
        this.carried = null;
        if (parts.length) {
          this.send(sink, parts);
          if (this.res.listen && !this.iterator) this.listen(sink);
          return;
        }
      }
      if (this.res.listen && !this.iterator) return this.listen(sink);
      for (;;) {
        const read = (this.inflight = this.read());
        const next = await read;
        this.inflight = null;
        if (this.ended) return;
        const out = this.step(sink, next.done ? null : next.value);
        if (out === FINISHING) return void (await this.finishing);
        if (out.length) return void this.send(sink, out);
      }
    } catch (err) {
      if (this.ended) return;
      await this.fail(sink, err);
    }
  }

  /**
   * One upstream read (null: the body ended): the frames to send now, or FINISHING when the
   * answer is complete (`finish` then settles and sends the rest). Once the answer's content
   * ended, its last frames wait for the end and its settle: the usage chunk, like [DONE],
   * reaches the client only once the charge is in. Throws on a bad event or a cut body.
   */
  private step(sink: Sink, chunk: Uint8Array | null): Uint8Array[] | typeof FINISHING {
    this.keepAlive?.refresh();
    const reader = this.reader;
    const was = this.holding();
    let frames = chunk === null ? reader.end() : reader.push(chunk);
    const holding = this.holding();
    // The read the content ended in: its frames up to that end (the last words, the finish)
    // go out now; only what follows (the usage, the end) waits for the settle.
    let early: Uint8Array[] = [];
    if (holding && !was) {
      const at = reader.heldFrom ?? 0;
      early = frames.slice(0, at);
      frames = frames.slice(at);
    }
    const parts = holding && this.carried ? [...this.carried, ...frames] : frames;
    if (holding) this.carried = null;
    if (chunk === null && !reader.done) {
      this.send(sink, [...early, ...parts]);
      throw new GatewayError('upstream_error', 'The upstream stream ended before it was complete.');
    }
    if (reader.done) {
      if (early.length) this.send(sink, early);
      // Failed only after the relay ended (the charge is the journal's then): nothing to tell.
      this.finishing = this.finish(sink, parts, chunk === null).catch(() => undefined);
      return FINISHING;
    }
    if (holding) {
      this.carried = parts;
      return early;
    }
    return parts;
  }

  /** Reads a listened body from here on: each read is relayed as it arrives. */
  private listen(sink: Sink): void {
    const onChunk = (chunk: Uint8Array | null): void => {
      this.readingOn?.onto(chunk);
      if (this.ended) return;
      try {
        const out = this.step(sink, chunk);
        if (out !== FINISHING && out.length && !this.send(sink, out)) this.flow?.pause();
      } catch (err) {
        if (!this.ended) void this.fail(sink, err);
      }
    };
    this.flow = this.res.listen!({
      data: onChunk,
      end: () => onChunk(null),
      error: (err) => {
        if (this.readingOn) this.readingOn.failed();
        else if (!this.ended) void this.fail(sink, err);
      },
    });
  }

  /**
   * The answer is complete: the charge lands first, then the last frames and the end marker
   * go out. An upstream that keeps its side open after its end has the rest of its body read
   * (and ignored) in the background, so the connection can go back to the pool.
   */
  private async finish(sink: Sink, parts: Uint8Array[], bodyEnded: boolean): Promise<void> {
    if (!bodyEnded) this.drain();
    try {
      await this.end();
    } catch (err) {
      // The charge could be kept nowhere (SettleLostError): the answer's last frames are
      // withheld and the stream ends with an error event instead of [DONE].
      this.sink = sink;
      this.tellError(err instanceof GatewayError ? err : errors.storeDown(err));
      return;
    }
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
    core.log.warn({ msg: 'stream failed', request_id: ctx.requestId, upstream: billing.model.upstream, code: gErr.code });
    // Before the settle: the access line is written when the billed call ends.
    ctx.observed.record.errorCode = gErr.code;
    if (core.hooks.has('onError')) void core.hooks.run('onError', { error: gErr, requestId: ctx.requestId, key: pluginKey(ctx.key) });
    // A charge kept nowhere changes nothing here: the stream ends with an error event anyway.
    await this.end('upstream').catch(() => {});
    this.sink = sink;
    // The answer's held-back last frames (its content went out before them) precede the error,
    // and so do the events read before the bad one in the read that failed (they are billed).
    const held = [...(this.ahead ?? []), ...(this.carried ?? []), ...(this.reader.takeUnsent?.() ?? [])];
    this.ahead = null;
    this.carried = null;
    this.tellError(gErr, held);
  }

  /**
   * Ends the stream with the error event of `err` (after `before`), if the client is still
   * there. The 200 went out, but the request's record says how it ended: an Idempotency-Key
   * keeps no answer that failed (the access line, written when the billed call ends, has it
   * from `fail` or the shutdown cut, which set it first).
   */
  private tellError(err: GatewayError, before: Uint8Array[] = []): void {
    this.ctx.observed.record.errorCode = err.code;
    try {
      for (const f of [...before, ...this.reader.errorFrames(err)]) this.sink?.push(f);
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
    // A translated answer's content end is read in the upstream's format: its translation may
    // say it only with its last events (Messages' message_delta carries the usage it waits for).
    const answered = this.billing.account?.answered?.() || this.reader.answered;
    if (answered && !this.reader.done && graceMs > 0) {
      const on = new ReadOn({ reader: this.reader, res: this.res, flow: this.flow, inflight: this.inflight, read: () => this.read() });
      this.readingOn = on;
      void on.run(graceMs).then(() => settleStream(this.billing, this.reader, this.core.tokenizer, 'stopped'));
      return;
    }
    this.res.discard();
    void settleStream(this.billing, this.reader, this.core.tokenizer, 'stopped');
  }
}
