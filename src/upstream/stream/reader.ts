/**
 * What the one stream relay needs of an API's events: an event reader turns the upstream's
 * reads into the frames the client gets, says when the answer is complete, how a failure
 * after the 200 is told, and what the stream produced for its bill. Chat has a byte-level
 * reader (chat-events.ts); the other APIs read parsed events through `eventReader`.
 */
import { errors, type GatewayError } from '../../errors.js';
import type { AnswerAccount } from '../../billing/answer.js';
import { redactKey } from '../client.js';
import { SseParser } from './sse.js';

const encoder = new TextEncoder();

/** What a stream produced: its account in the answer model. */
export type Produced = AnswerAccount;

export interface EventReader {
  /** The frames to send for one upstream read. Throws a GatewayError on an error event or a malformed one. */
  push(chunk: Uint8Array): Uint8Array[];
  /** The frames of what the upstream left when its body ended. Throws like `push`. */
  end(): Uint8Array[];
  /** True once the answer's end came: the answer is complete, and its usage final. */
  readonly done: boolean;
  /**
   * True once the answer's content ended (a `finish_reason`, `response.output_text.done`) while
   * its usage may still follow: a client that leaves now still pays that usage.
   */
  readonly answered: boolean;
  /** True when the frames returned already end with `endFrame`: add none. */
  readonly doneFramed: boolean;
  /**
   * In the read the answer's content ended in (`answered` turned true), the index of the first
   * of its frames that waits for the settle: those before it (the content up to its end) go out
   * at once. Null or absent: every frame of that read waits.
   */
  readonly heldFrom?: number | null;
  /**
   * True when the usage comes in the answer's last event (Responses' `response.completed`):
   * nothing before it waits for the settle, only that event. Else the frames from `answered`
   * on wait (chat's usage chunk and Messages' `message_delta` follow the content's end).
   */
  readonly usageInLastEvent?: boolean;
  /** What goes out after the last event of a complete answer (`data: [DONE]`), or null. */
  readonly endFrame: Uint8Array | null;
  /** The frames a stream that failed after its 200 ends with. */
  errorFrames(err: GatewayError): Uint8Array[];
  /**
   * After a push or end that threw on a bad event: the frames of the events before it in that
   * read, which the client gets before the error (they count toward the bill). Taken once.
   */
  takeUnsent?(): Uint8Array[];
  produced(): Produced;
  /**
   * What the gateway records of the answer as it streams (who owns the ids it names), settled:
   * awaited once a complete answer is billed, before its last frames go out, so an id the
   * client has at the end is usable at once, on any instance. Never rejects.
   */
  kept?(): Promise<void>;
}

/** How one API's parsed events are read (the generic reader's part per API). */
export interface EventHandler {
  /** The frame to send for one upstream event's data, or null to skip it; throws a GatewayError on an error event. */
  event(data: string): string | null;
  /** Whether the upstream reached its proper end (its last event came). */
  complete(): boolean;
  /** What the answer produced, in the answer model (the API's own reader fills it). */
  readonly account: AnswerAccount;
  /** Whether the answer's content ended (its usage may still follow). */
  answered?(): boolean;
  /** What goes out after the last event (`data: [DONE]`), if anything. */
  endFrame: string | null;
  /** The usage comes in the last event (see EventReader). */
  usageInLastEvent?: boolean;
  /** The event(s) that report a failure after the 200. */
  errorFrame(err: GatewayError): string;
}

/**
 * A reader over the generic SSE parser: each event's data (the upstream's key redacted) goes
 * to `handler`, whose frames go out together, one part per upstream read.
 */
export function eventReader(handler: EventHandler, apiKey: string): EventReader {
  const parser = new SseParser();
  let heldFrom: number | null = null;
  const answered = () => handler.answered?.() === true;
  // The event that ends the content (a Messages `message_delta` with its stop reason and usage)
  // waits for the settle with what follows; what came before it in the read goes out at once.
  let unsent: Uint8Array[] | null = null;
  const framesOf = (events: string[]): Uint8Array[] => {
    heldFrom = null;
    const parts: Uint8Array[] = [];
    let out = '';
    for (const raw of events) {
      if (handler.complete()) break;
      const was = answered();
      let frame: string | null;
      try {
        frame = handler.event(apiKey ? redactKey(raw, apiKey) : raw);
      } catch (err) {
        if (out) parts.push(encoder.encode(out));
        unsent = parts;
        throw err;
      }
      if (!was && answered() && heldFrom === null) {
        if (out) parts.push(encoder.encode(out));
        out = '';
        heldFrom = parts.length;
      }
      if (frame) out += frame;
    }
    if (out) parts.push(encoder.encode(out));
    return parts;
  };
  const endFrame = handler.endFrame ? encoder.encode(handler.endFrame) : null;
  return {
    push: (chunk) => framesOf(parser.push(chunk)),
    end: () => framesOf(parser.end().events),
    get done() {
      return handler.complete();
    },
    get answered() {
      return answered();
    },
    get heldFrom() {
      return heldFrom;
    },
    doneFramed: false,
    usageInLastEvent: handler.usageInLastEvent === true,
    endFrame,
    errorFrames: (err) => [encoder.encode(handler.errorFrame(err))],
    takeUnsent() {
      const u = unsent ?? [];
      unsent = null;
      return u;
    },
    produced: () => handler.account,
  };
}

/** Parses one event's data as a JSON object, or 502 as a malformed event. */
export function parseEvent(data: string): Record<string, unknown> {
  const malformed = errors.malformedEvent;
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch {
    throw malformed();
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw malformed();
  return value as Record<string, unknown>;
}

/**
 * A reader over `reader`: the frames of each read go through `frames` (what a wrapper changes
 * or watches on their way out) and what was produced through `produced`; everything else is
 * the reader's own. `doneFramed` is false when `frames` may drop a `[DONE]` the reader framed.
 */
export function overReader(
  reader: EventReader,
  over: { frames?: (frames: Uint8Array[]) => Uint8Array[]; produced?: () => Produced; reframes?: boolean; kept?: () => Promise<void> },
): EventReader {
  const frames = over.frames ?? ((f: Uint8Array[]) => f);
  // The cut of a read's frames holds only while a wrapper hands them on as they came.
  let same = true;
  const through = (inner: Uint8Array[]) => {
    const out = frames(inner);
    same = out === inner;
    return out;
  };
  return {
    push: (chunk) => through(reader.push(chunk)),
    end: () => through(reader.end()),
    get heldFrom() {
      return same ? reader.heldFrom : null;
    },
    get done() {
      return reader.done;
    },
    get answered() {
      return reader.answered;
    },
    get doneFramed() {
      return over.reframes ? false : reader.doneFramed;
    },
    get usageInLastEvent() {
      return reader.usageInLastEvent;
    },
    get endFrame() {
      return reader.endFrame;
    },
    errorFrames: (err) => reader.errorFrames(err),
    // What the reader left unsent goes out through the wrapper, as every frame does (a guard
    // still redacts it).
    takeUnsent: () => {
      const unsent = reader.takeUnsent?.() ?? [];
      return unsent.length ? frames(unsent) : unsent;
    },
    produced: over.produced ?? (() => reader.produced()),
    ...(reader.kept || over.kept ? { kept: () => Promise.all([reader.kept?.(), over.kept?.()]).then(() => {}) } : {}),
  };
}
