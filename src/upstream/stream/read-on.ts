/**
 * An upstream read on after its client left, for the usage that follows the answer's end (a
 * chat usage chunk, Messages' message_delta): at most `graceMs`, and then, or at the body's
 * end or failure, what was seen is billed by the caller. A listened body keeps handing its
 * reads over (`onto`); an iterated one is read here.
 */
import type { BodyFlow, UpstreamResponse } from '../types.js';
import type { EventReader } from './reader.js';

/** What a read-on takes over from the stream's relay when the client leaves. */
export interface ReadOnSource {
  reader: EventReader;
  res: UpstreamResponse;
  /** A listened body's backpressure; null when the body is read through its iterator. */
  flow: BodyFlow | null;
  /** The read the stream waited on when the client left: the read-on takes its result. */
  inflight: Promise<IteratorResult<Uint8Array>> | null;
  read(): Promise<IteratorResult<Uint8Array>>;
}

export class ReadOn {
  /** Ends a read-on of a listened body (its end, its failure, or the grace running out). */
  private done: (() => void) | null = null;

  constructor(private readonly src: ReadOnSource) {}

  /** Reads the upstream to its end (or until `graceMs` passed or it failed) with nobody to send to. */
  run(graceMs: number): Promise<void> {
    return this.src.flow ? this.listened(graceMs, this.src.flow) : this.iterated(graceMs);
  }

  private async iterated(graceMs: number): Promise<void> {
    const { reader, res } = this.src;
    const timer = setTimeout(() => res.discard(), graceMs);
    let pending = this.src.inflight;
    try {
      for (;;) {
        const next = await (pending ?? this.src.read());
        pending = null;
        if (next.done) {
          reader.end();
          break;
        }
        reader.push(next.value);
        if (reader.done) break;
      }
    } catch {
      // The upstream failed, or the grace ran out: what was seen is billed.
    } finally {
      clearTimeout(timer);
    }
    res.discard();
  }

  /** A listened body: its reads keep coming to `onto`. */
  private listened(graceMs: number, flow: BodyFlow): Promise<void> {
    const res = this.src.res;
    return new Promise((resolve) => {
      const timer = setTimeout(() => res.discard(), graceMs);
      this.done = () => {
        this.done = null;
        clearTimeout(timer);
        res.discard();
        resolve();
      };
      flow.resume();
    });
  }

  /** One read (null: the end) of a listened body read on for its usage. */
  onto(chunk: Uint8Array | null): void {
    const reader = this.src.reader;
    try {
      if (chunk === null) reader.end();
      else reader.push(chunk);
    } catch {
      // A bad event: what was seen is billed.
      this.done?.();
      return;
    }
    if (chunk === null || reader.done) this.done?.();
  }

  /** The listened body failed: what was seen is billed. */
  failed(): void {
    this.done?.();
  }
}
