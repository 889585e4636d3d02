/**
 * The byte-level fast path of the SSE relay. Nearly every upstream writes events in the
 * canonical form `data: <one line>\n\n`, which is also the form the gateway sends. While they
 * do, events are found with Buffer.indexOf and, when nothing in them needs a look, forwarded as
 * the very bytes that came in (no decode, no re-encode). At the first event in any other form
 * (comments, `event:` fields, CR line ends, multi-line data) the caller hands the rest of the
 * stream to the generic SseParser, whose output is the same canonical framing.
 */

import { eventTooLarge, MAX_EVENT_BYTES } from './sse.js';

const DATA_PREFIX = Buffer.from('data: ');
const EVENT_END = Buffer.from('\n\n');
const DONE = Buffer.from('[DONE]');

export type EventVerdict =
  /** Forward the event's bytes as they came. */
  | 'verbatim'
  /** Drop the event. */
  | null
  /** Send these bytes instead. */
  | Uint8Array
  /** Forward the event's bytes as they came but for one range (a field renamed in place). */
  | Splice;

/** The event's own bytes with `buf[from..to)` replaced by `bytes`. */
export interface Splice {
  from: number;
  to: number;
  bytes: Uint8Array;
}

/** Looks at one event's data, `buf[start..end)`, and says what to send for it. */
export type EventHandler = (buf: Buffer, start: number, end: number, marked: boolean) => EventVerdict;

export interface FastPathResult {
  /** What to send for the complete canonical events of this chunk, in order. */
  out: Uint8Array[];
  /** Bytes from the first non-canonical event on (the generic parser takes over), or null. */
  rest: Uint8Array | null;
  /** True once `[DONE]` was seen; bytes after it are ignored. */
  done: boolean;
  /**
   * With `done`: the `[DONE]` event's own bytes end the last part of `out` (it followed a run
   * of verbatim events), so the caller must not add one. Saves a copy of the whole answer.
   */
  doneFramed?: boolean;
  /** Where the handler asked for a cut (see `SseFastPath.cut`): the index in `out` where the parts after it start. */
  cutAt?: number;
}

/**
 * Adds the run of verbatim events `buf[start..end)` (none when `start` is -1) to `out`: a run
 * that is the whole read (one event per read, as a model streaming tokens sends them) goes
 * out as the read itself, with no view made of it.
 */
function flushRun(out: Uint8Array[], buf: Buffer, start: number, end: number): void {
  if (start !== -1) out.push(start === 0 && end === buf.length ? buf : buf.subarray(start, end));
}

/** Where a mark of `search` next occurs in `text` at or after `from` (-1: nowhere, or no marks). */
function markAt(search: RegExp | null, text: string, from: number): number {
  if (!search) return -1;
  search.lastIndex = from;
  return search.exec(text)?.index ?? -1;
}

/** `text` as a regular expression that matches it literally. */
export const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

/**
 * Mark searches already built, by the marks array they were built from. Every stream of an
 * upstream is given the same array (usage, error, that upstream's key), and building the
 * expression cost more than the rest of a short stream's setup. One object serves every stream at once: `push` sets
 * `lastIndex` before each `exec` and never yields between them. Weak, so a caller that builds
 * a new array each time only gets a new expression each time.
 */
const searches = new WeakMap<readonly Mark[], RegExp | null>();

/** A byte string to find as it is, or a pattern over the bytes read as latin1. */
export type Mark = Buffer | RegExp;

function markSearchFor(marks: readonly Mark[]): RegExp | null {
  let search = searches.get(marks);
  if (search === undefined) {
    const texts = marks.map((m) => (m instanceof RegExp ? m.source : m.length > 0 ? literal(m.toString('latin1')) : '')).filter((t) => t !== '');
    search = texts.length ? new RegExp(texts.join('|'), 'g') : null;
    searches.set(marks, search);
  }
  return search;
}

export class SseFastPath {
  /** The event still arriving: its first bytes, then the reads that added to it (joined once, at its end). */
  private pending: Buffer | null = null;
  private readonly more: Buffer[] = [];
  private pendingBytes = 0;
  /**
   * Set by the handler while it looks at an event: the parts of `out` are cut there, before
   * that event's bytes or after them, so the caller can send what came before and hold the
   * rest (the first cut of a push counts).
   */
  cut: 'before' | 'after' | null = null;
  /**
   * Every mark in one expression over the chunk's bytes read as latin1 (one character per
   * byte, so a match is a byte match): one pass finds them all, where a `Buffer.indexOf` per
   * mark walked the whole read once for each: one pass costs about what one mark's did.
   */
  private readonly markSearch: RegExp | null;

  /**
   * `marks`: byte strings (none holding a newline) whose presence in an event means it needs a
   * look; `onEvent` is told whether its event holds one. They are searched once per chunk and
   * again only past each match, not once per event: a read holds a score of events.
   */
  constructor(marks: readonly Mark[] = []) {
    this.markSearch = markSearchFor(marks);
  }

  /**
   * Splits `chunk` (with the bytes left from the previous one) into events. `onEvent` gets each
   * event's data bytes as `buf[start..end)` (a read holds a score of events: no Buffer is made
   * per event), and whether they hold one of the marks, and says what to send.
   */
  push(chunk: Uint8Array, onEvent: EventHandler): FastPathResult {
    // A transport's reads are Buffers already: no view is made of them.
    const incoming = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.pending) {
      // A long event arrives in many reads: a read that cannot end it (no newline: the event's
      // end is two; no CR) is only kept, so the event is copied and searched once, at its end.
      if (incoming.indexOf(10) === -1 && incoming.indexOf(13) === -1) {
        this.more.push(Buffer.from(incoming));
        this.pendingBytes += incoming.length;
        if (this.pendingBytes > MAX_EVENT_BYTES) throw eventTooLarge();
        return { out: [], rest: null, done: false };
      }
    }
    let buf = incoming;
    if (this.pending) {
      buf = Buffer.concat([this.pending, ...this.more, incoming]);
      this.pending = null;
      this.more.length = 0;
      this.pendingBytes = 0;
    }
    const out: Uint8Array[] = [];
    let runStart = -1;
    let runEnd = -1;
    // Where a mark next occurs at or after the event being looked at (-1: nowhere further).
    // Marks hold no newline, so a match lies inside one event.
    const search = this.markSearch;
    const text = search ? buf.toString('latin1') : '';
    let nextMark = markAt(search, text, 0);
    // CR line ends are legal SSE but not canonical: the generic parser handles the whole rest.
    const firstCr = buf.indexOf(13);
    let cutAt: number | undefined;
    let pos = 0;
    while (pos < buf.length) {
      // A blank line between events (legal SSE: an empty event, which dispatches nothing) is
      // stepped over; a run of verbatim events around it keeps it, which clients ignore too.
      if (buf[pos] === 10) {
        pos++;
        continue;
      }
      // The event's end: its first newline when a second follows (one search, the usual case).
      const nl = buf.indexOf(10, pos);
      const end = nl !== -1 && buf[nl + 1] === 10 ? nl : nl === -1 ? -1 : buf.indexOf(EVENT_END, nl);
      if (end === -1 || (firstCr !== -1 && firstCr < end + 2)) {
        if (end === -1 && firstCr === -1 && this.looksCanonical(buf, pos, buf.length)) {
          this.pending = Buffer.from(buf.subarray(pos)); // an event still arriving
          this.pendingBytes = this.pending.length;
          if (this.pendingBytes > MAX_EVENT_BYTES) throw eventTooLarge();
          break;
        }
        flushRun(out, buf, runStart, runEnd);
        return { out, rest: buf.subarray(pos), done: false, ...(cutAt === undefined ? {} : { cutAt }) };
      }
      // Canonical: "data: " then one line, and the line's end is the event's end.
      if (nl !== end || !this.looksCanonical(buf, pos, end)) {
        flushRun(out, buf, runStart, runEnd);
        return { out, rest: buf.subarray(pos), done: false, ...(cutAt === undefined ? {} : { cutAt }) };
      }
      const dataStart = pos + DATA_PREFIX.length;
      if (end - dataStart === DONE.length && buf[dataStart] === 91 && buf.subarray(dataStart, end).equals(DONE)) {
        // Canonical, so its bytes are exactly "data: [DONE]\n\n": they end the run before them.
        const framed = runStart !== -1 && runEnd === pos;
        if (framed) runEnd = end + 2;
        flushRun(out, buf, runStart, runEnd);
        return { out, rest: null, done: true, doneFramed: framed, ...(cutAt === undefined ? {} : { cutAt }) };
      }
      if (nextMark !== -1 && nextMark < pos) nextMark = markAt(search, text, pos);
      let verdict: EventVerdict;
      try {
        verdict = onEvent(buf, dataStart, end, nextMark !== -1 && nextMark < end);
      } catch (err) {
        // A bad event: what the events before it in this read came to is kept for the caller
        // (they were read, and count toward the bill), then the failure goes on.
        flushRun(out, buf, runStart, runEnd);
        this.unsent = out;
        throw err;
      }
      const cut = this.cut;
      this.cut = null;
      if (cut === 'before' && cutAt === undefined) {
        flushRun(out, buf, runStart, runEnd);
        runStart = -1;
        cutAt = out.length;
      }
      if (verdict === 'verbatim') {
        if (runStart === -1) runStart = pos;
        runEnd = end + 2;
      } else if (verdict !== null && !(verdict instanceof Uint8Array)) {
        // The run goes on around the new bytes: no copy of the event, no break in the write.
        if (runStart === -1) runStart = pos;
        out.push(buf.subarray(runStart, verdict.from), verdict.bytes);
        runStart = verdict.to;
        runEnd = end + 2;
      } else {
        flushRun(out, buf, runStart, runEnd);
        runStart = -1;
        if (verdict) out.push(verdict);
      }
      if (cut === 'after' && cutAt === undefined) {
        flushRun(out, buf, runStart, runEnd);
        runStart = -1;
        cutAt = out.length;
      }
      pos = end + 2;
    }
    flushRun(out, buf, runStart, runEnd);
    return { out, rest: null, done: false, ...(cutAt === undefined ? {} : { cutAt }) };
  }

  /** What the events before a bad one came to, in the push that threw (taken once). */
  private unsent: Uint8Array[] | null = null;

  takeUnsent(): Uint8Array[] {
    const u = this.unsent ?? [];
    this.unsent = null;
    return u;
  }

  /** Bytes of an event still incomplete at the end of the stream. */
  takePending(): Uint8Array | null {
    const p = this.pending && this.more.length ? Buffer.concat([this.pending, ...this.more]) : this.pending;
    this.pending = null;
    this.more.length = 0;
    this.pendingBytes = 0;
    return p;
  }

  /** Whether the bytes from `from` (up to `to`) start like "data: ", compared here rather than by a native call. */
  private looksCanonical(buf: Buffer, from: number, to: number): boolean {
    const n = Math.min(DATA_PREFIX.length, to - from);
    for (let i = 0; i < n; i++) if (buf[from + i] !== DATA_PREFIX[i]) return false;
    return true;
  }
}
