/**
 * The chat stream's protocol: upstream SSE events in, client frames out. Each event is
 * re-framed as `data: ...\n\n`. Canonical events take a byte fast path and go out as they came
 * when nothing in them needs a look, under an alias with the model renamed in their bytes (to
 * the one the client called; top-fields.ts); a usage-only chunk has only its usage parsed (and
 * is dropped unless the client asked for it). The others are parsed: usage is kept, the model
 * renamed, the upstream's key redacted, and an error event or a malformed one throws. `[DONE]`
 * ends the answer, or the body's clean end once every choice finished.
 */
import type { Model } from '../../catalog/catalog.js';
import { errors, type GatewayError } from '../../errors.js';
import { redactKey } from '../client.js';
import { type EventHandler, type EventVerdict, type Splice, SseFastPath } from './sse-fast.js';
import { modelKeyWithin, modelToken, renameNeeded, TopFields } from './top-fields.js';
import { createStreamOutput, type StreamOutput } from './chat-output.js';
import { type EventReader, parseEvent, type Produced } from './reader.js';
import { DONE_EVENT, encodeEvent, frameEvent, SseParser } from './sse.js';
import { usageFrom } from '../../billing/usage.js';
import { hasEscapedKey, MAY_CARRY, marksFor, needsLook, USAGE_KEY } from './chat-marks.js';

const encoder = new TextEncoder();
/** What `onEvent` returns for an event that goes out exactly as it came. */
const AS_IS = Symbol('as is');

export interface ChatEventsOptions {
  model: Pick<Model, 'id' | 'upstreamModel'>;
  /** The upstream's key, or '' when there is none to hide. */
  apiKey: string;
  /** Whether the client asked for the usage chunk (stream_options.include_usage). */
  clientWantsUsage: boolean;
  /** Where usage and produced text are recorded for billing. @default a new one */
  output?: StreamOutput;
  /** The choices asked for (`n`): the content ended once that many finished. @default 1 */
  choices?: number;
}

/** The chat stream's reader: `[DONE]` ends the answer. */
export type ChatEvents = EventReader;

/** The error event a stream that failed after its 200 ends with (then `[DONE]`). */
export const errorEvent = (err: GatewayError): Uint8Array =>
  encodeEvent(
    JSON.stringify({
      ...err.toJSON(),
      choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }],
    }),
  );

export function createChatEvents({ model, apiKey, clientWantsUsage, output = createStreamOutput(), choices = 1 }: ChatEventsOptions): ChatEvents {
  return new ChatEventReader(model, apiKey, clientWantsUsage, output, choices);
}

class ChatEventReader implements EventReader {
  /** True once `[DONE]` was seen: the answer is complete. */
  done = false;
  /** True when the frames returned already end with the `[DONE]` event: add none. */
  doneFramed = false;
  /** True once every choice asked for finished: the usage chunk may still follow. */
  answered = false;
  /** Of the last push's frames, where those that wait for the settle start (the read the content ended in); null: all. */
  heldFrom: number | null = null;
  /** Where the frames the generic parser is writing are cut (the content's end), set by `onEvent`. */
  private slowCut: 'before' | 'after' | null = null;
  /** The choices that finished so far, by index (a chunk that finishes one is always parsed). */
  private readonly finished = new Set<number>();
  readonly endFrame = DONE_EVENT;
  /** The generic parser, made at the first event not in canonical form (rare). */
  private parser: SseParser | null = null;
  // The upstream's key never reaches a client, even echoed inside a streamed chunk: an event
  // that contains it leaves the byte fast path and goes out redacted. So does one that may
  // carry usage or an error.
  private readonly fast: SseFastPath;
  /** Set at the first non-canonical event: the generic parser takes the rest of the stream. */
  private slow = false;
  private readonly renames: boolean;
  /** The fast path's look at one canonical event (bound once: it is handed to every push). */
  private readonly onEventBytes: EventHandler;
  /** The client's model name as a JSON string token: what an upstream's own name is replaced by. */
  private readonly token: { text: string; bytes: Buffer };
  /** The last byte scan's findings (one scan at a time: reused). */
  private readonly fields = new TopFields();
  /** The last rename's splice, handed to the fast path, which reads it at once (reused). */
  private readonly splice: Splice = { from: 0, to: 0, bytes: new Uint8Array(0) };
  /**
   * A stream's chunks start alike (id, object, created, model): the bytes of the last scanned
   * event up to the end of its model string, where its model string starts in them, and
   * whether it needed the rename. An event that starts with the very same bytes has its
   * top-level model in the same place with the same value (the scan reads left to right and
   * stops there), so only the rest of it is searched, for a second `"model"`.
   */
  private lead: Buffer | null = null;
  private leadModelFrom = 0;
  private leadRenames = false;

  constructor(
    private readonly model: Pick<Model, 'id' | 'upstreamModel'>,
    private readonly apiKey: string,
    private readonly clientWantsUsage: boolean,
    private readonly output: StreamOutput,
    private readonly choices: number,
  ) {
    this.fast = new SseFastPath(marksFor(apiKey));
    this.renames = model.upstreamModel !== model.id;
    this.token = modelToken(model.id);
    this.splice.bytes = this.token.bytes;
    // `marked`: the event holds usage, an error, a finish or the key.
    this.onEventBytes = (buf, start, end, marked) => {
      const object = buf[start] === 123 && buf[end - 1] === 125;
      if (object && (!marked || !needsLook(apiKey, buf, start, end))) {
        // Under an alias, the upstream's own name is replaced in the event's bytes: the rest of
        // the event goes out as it came, unparsed. A scan that is unsure leaves it to the parse.
        const verdict = this.renames ? this.renamed(buf, start, end) : 'verbatim';
        if (verdict !== undefined) {
          this.output.deferBytes(buf, start, end);
          return verdict;
        }
      } else if (object && within(buf.indexOf(USAGE_KEY, start), end)) {
        const verdict = this.usageOnly(buf, start, end);
        if (verdict !== undefined) return verdict;
      }
      // Parsed (usage, an error, the key, a finish), but usually sent unchanged: then its bytes
      // go out as they came, in the same write as the events around it, with no re-encoding.
      const frame = this.onEvent(buf.toString('utf8', start, end), buf, start, end);
      return frame === AS_IS ? 'verbatim' : frame === null ? null : typeof frame === 'string' ? encoder.encode(frame) : frame;
    };
  }

  /**
   * The verdict for an event whose top-level `model` may need the client's name, read from its
   * bytes; undefined when the scan is unsure (the event is then parsed).
   */
  private renamed(buf: Buffer, start: number, end: number): EventVerdict | undefined {
    const lead = this.lead;
    if (lead !== null && end - start > lead.length && buf.compare(lead, 0, lead.length, start, start + lead.length) === 0) {
      if (modelKeyWithin(buf, start + lead.length, end)) return undefined;
      if (!this.leadRenames) return 'verbatim';
      this.splice.from = start + this.leadModelFrom;
      this.splice.to = start + lead.length;
      return this.splice;
    }
    const fields = this.fields;
    if (!fields.scan(buf, start, end, true)) return undefined;
    const need = renameNeeded(buf, fields, this.token);
    if (need === 'unsure') return undefined;
    if (fields.modelFrom !== -1 && buf[fields.modelFrom] === 34) {
      this.lead = Buffer.from(buf.subarray(start, fields.modelTo));
      this.leadModelFrom = fields.modelFrom - start;
      this.leadRenames = need === 'yes';
    }
    if (need === 'no') return 'verbatim';
    this.splice.from = fields.modelFrom;
    this.splice.to = fields.modelTo;
    return this.splice;
  }

  /** `renamed` for an event's text: the text to send, or undefined when the scan is unsure. */
  private renamedText(data: string): string | undefined {
    const fields = this.fields;
    if (!fields.scan(data, 0, data.length, true)) return undefined;
    const need = renameNeeded(data, fields, this.token);
    if (need === 'unsure') return undefined;
    return need === 'no' ? data : data.slice(0, fields.modelFrom) + this.token.text + data.slice(fields.modelTo);
  }

  /**
   * A usage-only chunk (`"choices":[]` and a usage, no error) read from its bytes: only its
   * usage is parsed and reported, and the chunk is dropped when the gateway asked for it, not
   * the client; else it goes out as it came (renamed). Undefined when it is not one, when the
   * scan is unsure, or when it holds the upstream's key and must go out redacted: it is then parsed.
   */
  private usageOnly(buf: Buffer, start: number, end: number): EventVerdict | undefined {
    const fields = this.fields;
    if (!fields.scan(buf, start, end) || fields.error || fields.usageFrom === -1 || !fields.noChoices(buf)) return undefined;
    let verdict: EventVerdict = null;
    if (this.clientWantsUsage) {
      if (this.apiKey && within(buf.indexOf(this.apiKey, start), end)) return undefined;
      const need = this.renames ? renameNeeded(buf, fields, this.token) : 'no';
      if (need === 'unsure') return undefined;
      verdict = need === 'no' ? 'verbatim' : { from: fields.modelFrom, to: fields.modelTo, bytes: this.token.bytes };
    }
    let usage: unknown;
    try {
      usage = JSON.parse(buf.toString('utf8', fields.usageFrom, fields.usageTo));
    } catch {
      return undefined;
    }
    const u = usageFrom(usage);
    if (!u) return undefined;
    this.output.report(u);
    return verdict;
  }

  /**
   * Handles one upstream event; returns the frame to send, AS_IS when that frame is the event's
   * own data unchanged, a splice of its bytes (given them) when only its model is renamed, or
   * null to skip it. Throws on a bad event.
   */
  private onEvent(raw: string, buf?: Buffer, start = 0, end = 0): string | typeof AS_IS | Splice | null {
    const data = this.apiKey ? redactKey(raw, this.apiKey) : raw;
    if (data === '[DONE]') {
      this.done = true;
      return null;
    }
    // Fast path: a JSON object that carries no usage and no error goes out as it came (under
    // an alias, its model renamed in its text), unparsed; its text is counted later only if
    // usage never arrives.
    if (data.charCodeAt(0) === 123 && data.charCodeAt(data.length - 1) === 125 && !MAY_CARRY.test(data) && !hasEscapedKey(data)) {
      const renamed = this.renames ? this.renamedText(data) : data;
      if (renamed !== undefined) {
        this.output.defer(data);
        return renamed === raw ? AS_IS : frameEvent(renamed);
      }
    }
    const chunk = parseChunk(data);
    const wasAnswered = this.answered;
    if (!wasAnswered) this.noteFinished(chunk.choices);
    const u = usageFrom(chunk.usage);
    // The content ended here: what came before goes out now, and this chunk too unless it
    // carries the usage; only the rest (the usage chunk, [DONE]) waits for the settle.
    if (!wasAnswered && this.answered) {
      const side = u ? 'before' : 'after';
      if (this.slow) this.slowCut = side;
      else this.fast.cut = side;
    }
    const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
    this.output.add(chunk);
    // After the chunk's own output: a report counts the chunk that carries it.
    if (u) this.output.report(u);
    // The usage-only chunk was asked for by the gateway, not the client: keep it to ourselves.
    if (u && choices.length === 0 && !this.clientWantsUsage) return null;
    // Like plain answers: the client sees the model it called, not the upstream's name for it.
    const { id, upstreamModel } = this.model;
    if (upstreamModel !== id && typeof chunk.model === 'string' && chunk.model !== id) {
      // In the event's own bytes when it came canonical and unredacted; else re-serialised (also
      // when a key is written with an escape: a second `model` may hide there, which the parse
      // read last and a splice of the first would leave in).
      const splice = buf && data === raw && !hasEscapedKey(data) ? this.renamed(buf, start, end) : undefined;
      if (splice && splice !== 'verbatim') return splice as Splice;
      return frameEvent(JSON.stringify({ ...chunk, model: id }));
    }
    return data === raw ? AS_IS : frameEvent(data);
  }

  /** Records the choices a parsed chunk finished: the content ended once all asked for did. */
  private noteFinished(choices: unknown): void {
    if (!Array.isArray(choices)) return;
    choices.forEach((c: { index?: unknown; finish_reason?: unknown } | null, i) => {
      if (typeof c?.finish_reason === 'string') this.finished.add(typeof c.index === 'number' ? c.index : i);
    });
    if (this.finished.size >= this.choices) this.answered = true;
  }

  /**
   * The frames of the generic parser's events, as one chunk: a read usually holds several
   * events, and one write per event would cost a syscall each.
   */
  private framesOf(events: string[], into: Uint8Array[]): void {
    let out = '';
    for (const raw of events) {
      if (this.done) break;
      // No bytes given: never a splice.
      let frame: string | typeof AS_IS | null;
      try {
        frame = this.onEvent(raw) as string | typeof AS_IS | null;
      } catch (err) {
        if (out) into.push(encoder.encode(out));
        throw err;
      }
      const cut = this.slowCut;
      this.slowCut = null;
      if (cut === 'before' && this.heldFrom === null) out = this.cutAt(out, into);
      if (frame) out += frame === AS_IS ? frameEvent(raw) : frame;
      if (cut === 'after' && this.heldFrom === null) out = this.cutAt(out, into);
    }
    if (out) into.push(encoder.encode(out));
  }

  /** Ends the frames written so far at the content's end: what follows waits for the settle. */
  private cutAt(out: string, into: Uint8Array[]): string {
    if (out) into.push(encoder.encode(out));
    this.heldFrom = into.length;
    return '';
  }

  /** Everything to send for one upstream read. */
  push(chunk: Uint8Array): Uint8Array[] {
    this.heldFrom = null;
    try {
      return this.pushed(chunk, null);
    } catch (err) {
      this.unsent = this.building ?? [];
      this.building = null;
      throw err;
    }
  }

  /** What the events before a bad one in the read that threw came to (taken once). */
  private unsent: Uint8Array[] | null = null;
  /** The frames of the read under way: what a bad event leaves unsent. */
  private building: Uint8Array[] | null = null;

  takeUnsent(): Uint8Array[] {
    const u = this.unsent ?? [];
    this.unsent = null;
    return u;
  }

  /** The frames of one read, added to `into` (null: the fast path's own list is the answer, no copy). */
  private pushed(chunk: Uint8Array, into: Uint8Array[] | null): Uint8Array[] {
    if (this.slow) {
      const target = (this.building = into ?? []);
      this.framesOf((this.parser ??= new SseParser()).push(chunk), target);
      this.building = null;
      return target;
    }
    let r: ReturnType<SseFastPath['push']>;
    try {
      r = this.fast.push(chunk, this.onEventBytes);
    } catch (err) {
      const target = (this.building = into ?? []);
      for (const f of this.fast.takeUnsent()) target.push(f);
      throw err;
    }
    let target = r.out;
    if (into) {
      if (r.cutAt !== undefined) this.heldFrom = into.length + r.cutAt;
      for (const f of r.out) into.push(f);
      target = into;
    } else if (r.cutAt !== undefined) this.heldFrom = r.cutAt;
    if (r.done) {
      this.done = true;
      this.doneFramed = r.doneFramed === true;
    }
    if (r.rest) {
      this.slow = true;
      this.building = target;
      this.framesOf((this.parser ??= new SseParser()).push(r.rest), target);
      this.building = null;
    }
    return target;
  }

  end(): Uint8Array[] {
    this.heldFrom = null;
    const parts: Uint8Array[] = [];
    try {
      const pending = this.fast.takePending();
      if (pending) this.pushed(pending, parts);
      if (this.parser) this.framesOf(this.parser.end().events, parts);
    } catch (err) {
      this.unsent = parts;
      this.building = null;
      throw err;
    }
    // A body that ended cleanly after every choice finished is a whole answer without its
    // `[DONE]` (some OpenAI-compatible servers never send one): it ends as a whole one, with
    // the usage that came final. The Messages and Gemini translations end it the same way.
    if (!this.done && this.answered) this.done = true;
    return parts;
  }

  errorFrames(err: GatewayError): Uint8Array[] {
    return [errorEvent(err), DONE_EVENT];
  }

  produced(): Produced {
    return this.output.produced();
  }
}

/** Whether a search's hit (-1: none) lies before `end`. */
const within = (found: number, end: number) => found !== -1 && found < end;

/** One parsed chunk; a malformed one or an error event throws. */
function parseChunk(data: string): { choices?: unknown; usage?: unknown; error?: unknown; model?: unknown } {
  const chunk = parseEvent(data);
  if (chunk.error) throw errors.upstreamFailedMidStream(chunk.error);
  return chunk;
}
