/**
 * Incremental server-sent-events parser (the WHATWG event-stream rules, data field only):
 * bytes in, complete `data` payloads out, whatever the slicing of the input. Comments and
 * other fields are dropped; the gateway re-frames every event as `data: ...\n\n`.
 */
import { GatewayError } from '../../errors.js';

/**
 * The largest event read: an upstream that never ends one (no blank line) would otherwise grow
 * the relay's memory without bound. Past it the stream fails as an upstream error.
 */
export const MAX_EVENT_BYTES = 32 * 1024 * 1024;

export const eventTooLarge = () => new GatewayError('upstream_error', `The upstream sent an event larger than ${MAX_EVENT_BYTES / 1024 / 1024} MiB.`);

export class SseParser {
  private readonly decoder = new TextDecoder();
  /** The line still arriving (no line end in it yet). */
  private buffer = '';
  private data: string[] = [];
  /** What the event still arriving holds so far, in characters. */
  private size = 0;
  private sawCr = false;

  /** Feeds bytes; returns the data of every event they completed. */
  push(chunk: Uint8Array): string[] {
    return this.feed(this.decoder.decode(chunk, { stream: true }));
  }

  /** Ends the input; returns an event left without its blank line, if any (a truncated stream). */
  end(): { events: string[]; partial: boolean } {
    const events = this.feed(this.decoder.decode());
    const partial = this.buffer.length > 0 || this.data.length > 0;
    this.buffer = '';
    this.data = [];
    return { events, partial };
  }

  private feed(text: string): string[] {
    // Nothing new (an empty chunk, or bytes of a character still incomplete): a CR seen last
    // must still swallow the LF that may follow.
    if (text.length === 0) return [];
    const out: string[] = [];
    // Only the new text is searched for line ends: the line still arriving holds none, so a
    // long event read in many pieces costs its length once, not once per piece.
    let start = 0;
    if (this.sawCr && text.charCodeAt(0) === 10) start = 1;
    this.sawCr = false;
    this.size += text.length;
    for (let i = start; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      const piece = text.slice(start, i);
      const whole = this.buffer ? this.buffer + piece : piece;
      this.line(whole, out);
      this.buffer = '';
      // A blank line ends an event: what follows in this text is the next one's.
      if (whole.length === 0) this.size = text.length - i - 1;
      if (c === 13) {
        if (i + 1 === text.length) this.sawCr = true;
        else if (text.charCodeAt(i + 1) === 10) i++;
      }
      start = i + 1;
    }
    this.buffer += text.slice(start);
    if (this.size > MAX_EVENT_BYTES) throw eventTooLarge();
    return out;
  }

  private line(line: string, out: string[]): void {
    if (line.length === 0) {
      if (this.data.length) out.push(this.data.join('\n'));
      this.data = [];
      return;
    }
    if (line.charCodeAt(0) === 58 /* ':' comment */) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    if (field !== 'data') return;
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    this.data.push(value);
  }
}

const encoder = new TextEncoder();
/**
 * One event out. An event whose data spans several lines (the upstream sent several `data:`
 * fields) goes out as several `data:` fields too: a bare newline would end the field, and the
 * client would lose the rest of the event.
 */
export const frameEvent = (data: string): string =>
  `data: ${data.includes('\n') ? data.replaceAll('\n', '\ndata: ') : data}\n\n`;
export const encodeEvent = (data: string): Uint8Array => encoder.encode(frameEvent(data));
export const DONE_FRAME = 'data: [DONE]\n\n';
export const DONE_EVENT = encoder.encode('data: [DONE]\n\n');
export const KEEP_ALIVE = encoder.encode(': keep-alive\n\n');
