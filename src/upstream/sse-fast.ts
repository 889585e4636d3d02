/**
 * The byte-level fast path of the SSE relay. Nearly every upstream writes events in the
 * canonical form `data: <one line>\n\n`, which is also the form the gateway sends. While they
 * do, events are found with Buffer.indexOf and, when nothing in them needs a look, forwarded as
 * the very bytes that came in (no decode, no re-encode). At the first event in any other form
 * (comments, `event:` fields, CR line ends, multi-line data) the caller hands the rest of the
 * stream to the generic SseParser, whose output is the same canonical framing.
 */

const DATA_PREFIX = Buffer.from('data: ');
const EVENT_END = Buffer.from('\n\n');
const DONE = Buffer.from('[DONE]');

export type EventVerdict =
  /** Forward the event's bytes as they came. */
  | 'verbatim'
  /** Drop the event. */
  | null
  /** Send these bytes instead. */
  | Uint8Array;

export interface FastPathResult {
  /** What to send for the complete canonical events of this chunk, in order. */
  out: Uint8Array[];
  /** Bytes from the first non-canonical event on (the generic parser takes over), or null. */
  rest: Uint8Array | null;
  /** True once `[DONE]` was seen; bytes after it are ignored. */
  done: boolean;
}

export class SseFastPath {
  private pending: Buffer | null = null;

  /**
   * Splits `chunk` (with the bytes left from the previous one) into events. `onEvent` gets each
   * event's data bytes and says what to send.
   */
  push(chunk: Uint8Array, onEvent: (data: Buffer) => EventVerdict): FastPathResult {
    const incoming = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const buf = this.pending ? Buffer.concat([this.pending, incoming]) : incoming;
    this.pending = null;
    const out: Uint8Array[] = [];
    let runStart = -1;
    let runEnd = -1;
    const flushRun = () => {
      if (runStart !== -1) out.push(buf.subarray(runStart, runEnd));
      runStart = -1;
    };
    // CR line ends are legal SSE but not canonical: the generic parser handles the whole rest.
    const firstCr = buf.indexOf(13);
    let pos = 0;
    while (pos < buf.length) {
      const end = buf.indexOf(EVENT_END, pos);
      if (end === -1 || (firstCr !== -1 && firstCr < end + 2)) {
        if (end === -1 && firstCr === -1 && this.looksCanonical(buf, pos, buf.length)) {
          this.pending = Buffer.from(buf.subarray(pos)); // an event still arriving
          break;
        }
        flushRun();
        return { out, rest: buf.subarray(pos), done: false };
      }
      // Canonical: "data: " then one line, and the line's end is the event's end.
      if (!this.looksCanonical(buf, pos, end) || buf.indexOf(10, pos) !== end) {
        flushRun();
        return { out, rest: buf.subarray(pos), done: false };
      }
      const data = buf.subarray(pos + DATA_PREFIX.length, end);
      if (data.equals(DONE)) {
        flushRun();
        return { out, rest: null, done: true };
      }
      const verdict = onEvent(data);
      if (verdict === 'verbatim') {
        if (runStart === -1) runStart = pos;
        runEnd = end + 2;
      } else {
        flushRun();
        if (verdict) out.push(verdict);
      }
      pos = end + 2;
    }
    flushRun();
    return { out, rest: null, done: false };
  }

  /** Bytes of an event still incomplete at the end of the stream. */
  takePending(): Uint8Array | null {
    const p = this.pending;
    this.pending = null;
    return p;
  }

  private looksCanonical(buf: Buffer, from: number, to: number): boolean {
    const n = Math.min(DATA_PREFIX.length, to - from);
    return buf.compare(DATA_PREFIX, 0, n, from, from + n) === 0;
  }
}
