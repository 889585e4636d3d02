/**
 * A stream translator over the upstream's SSE events, one translated text per event. An error
 * event met after other events of the same read is held back and thrown at the next call, so
 * what the stream produced before it still reaches the client (and its bill) first.
 */
import { SseParser } from '../stream/sse.js';
import type { StreamTranslator } from './types.js';

const encoder = new TextEncoder();

export abstract class EventTranslator implements StreamTranslator {
  private readonly parser = new SseParser();
  private failed: unknown = null;

  /** The translated frames of one upstream event's data; throws a GatewayError on an error event. */
  protected abstract event(data: string): string;

  /** True once the translated answer ended: later events are dropped. */
  protected stopped(): boolean {
    return false;
  }

  /** What goes out after the upstream's body ended without an error. */
  protected tail(): string {
    return '';
  }

  push(chunk: Uint8Array): Uint8Array[] {
    if (this.failed) throw this.failed;
    return this.frames(this.parser.push(chunk));
  }

  end(): Uint8Array[] {
    if (this.failed) throw this.failed;
    const out = this.frames(this.parser.end().events);
    if (this.failed) throw this.failed;
    const tail = this.tail();
    return tail ? [...out, encoder.encode(tail)] : out;
  }

  private frames(events: string[]): Uint8Array[] {
    let out = '';
    try {
      for (const data of events) if (!this.stopped()) out += this.event(data);
    } catch (err) {
      if (!out) throw err;
      this.failed = err;
    }
    return out ? [encoder.encode(out)] : [];
  }
}
