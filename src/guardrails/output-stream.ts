/**
 * Output guardrails on a stream: a reader over the endpoint's own event reader, on the
 * client's side of it. The inner reader reads the upstream's events (a translated upstream's
 * already in the client's API) and keeps their account for the bill; this one rewrites the
 * frames it returns, so the bill is the upstream's whole answer whatever the client is shown.
 * Each text (a chat or completions choice, a Responses content part, a Messages content block)
 * goes through its own scanner, which holds back only what a match could still span.
 *
 * A block ends the text where OpenAI ends filtered output: chat and completions with a choice
 * whose `finish_reason` is `content_filter`; Responses with `response.incomplete` and
 * `incomplete_details.reason: "content_filter"`; Messages with `stop_reason: "refusal"`. The
 * upstream is still read to its end (its usage is what is billed); what it said after the
 * block never reaches the client. Log probabilities are dropped from a guarded stream (their
 * tokens would spell the text the guardrails withheld).
 */
import type { GatewayError } from '../errors.js';
import type { EventReader, Produced } from '../upstream/stream/reader.js';
import { frameEvent, SseParser } from '../upstream/stream/sse.js';
import { type OutputFinder, TextScanner } from './scanner.js';

/** The APIs whose answers carry text, by the shape of their stream. */
export type OutputFormat = 'chat' | 'completions' | 'responses' | 'messages';

/** Told once per guardrail that acted on an answer (a redaction, a block). */
export type OnAct = (guardrail: string, action: 'redact' | 'block') => void;

const encoder = new TextEncoder();
type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * `inner`'s frames through the output guardrails. `extra` rewrites each piece of text as it is
 * released (a plugin's onOutput redaction); `blocked` (a plugin's block) ends every text at
 * its first delta.
 */
export function guardedEvents(
  inner: EventReader,
  format: OutputFormat,
  finders: readonly OutputFinder[],
  onAct: OnAct,
  extra: ((text: string) => string) | null = null,
  blocked: string | null = null,
): EventReader {
  const texts = new Texts({ finders, onAct, extra, blocked });
  const rewrite = format === 'responses' ? new ResponsesRewrite(texts) : format === 'messages' ? new MessagesRewrite(texts) : new ChoicesRewrite(texts, format);
  const frames = new Frames();
  let finished = false;
  const through = (parts: Uint8Array[]): Uint8Array[] => {
    let out = '';
    for (const f of parts) for (const data of frames.events(f)) out += rewrite.event(data);
    // The answer is complete: a text its upstream never finished still goes out (checked).
    if (inner.done && !finished) {
      finished = true;
      out += rewrite.finish();
    }
    return out ? [encoder.encode(out)] : [];
  };
  return {
    push: (chunk) => through(inner.push(chunk)),
    end: () => through(inner.end()),
    get done() {
      return inner.done;
    },
    get answered() {
      return inner.answered;
    },
    // A `[DONE]` the inner reader framed is dropped here: the relay adds the end frame.
    doneFramed: false,
    get usageInLastEvent() {
      return inner.usageInLastEvent;
    },
    endFrame: inner.endFrame,
    errorFrames: (err: GatewayError) => inner.errorFrames(err),
    produced: (): Produced => inner.produced(),
  };
}

interface TextsOptions {
  finders: readonly OutputFinder[];
  onAct: OnAct;
  extra: ((text: string) => string) | null;
  blocked: string | null;
}

/**
 * The data of each event in the inner reader's frames. They are whole events the gateway wrote
 * (`data: ...`, after an `event:` line in the typed APIs), so a split at blank lines reads
 * them, with no parse character by character; a frame with a CR goes to the generic parser.
 */
class Frames {
  private readonly decoder = new TextDecoder();
  private carry = '';
  private parser: SseParser | null = null;

  events(frame: Uint8Array): string[] {
    if (this.parser) return this.parser.push(frame);
    const text = this.carry + this.decoder.decode(frame, { stream: true });
    if (text.includes('\r')) {
      this.parser = new SseParser();
      this.carry = '';
      return this.parser.push(new TextEncoder().encode(text));
    }
    const out: string[] = [];
    let pos = 0;
    for (;;) {
      const end = text.indexOf('\n\n', pos);
      if (end === -1) break;
      const data = dataOf(text.slice(pos, end));
      if (data !== null) out.push(data);
      pos = end + 2;
    }
    this.carry = text.slice(pos);
    return out;
  }
}

/** One event's data (its `data:` lines joined), or null when it has none. */
function dataOf(block: string): string | null {
  if (block.startsWith('data: ') && !block.includes('\n')) return block.slice(6);
  let data: string | null = null;
  for (const line of block.split('\n')) {
    if (!line.startsWith('data:')) continue;
    const value = line.slice(line.charCodeAt(5) === 32 ? 6 : 5);
    data = data === null ? value : `${data}\n${value}`;
  }
  return data;
}

/** One text's scanner, and what it released. */
class Text {
  readonly scanner: TextScanner;
  released = '';
  /** Some of its text came (a delta). */
  seen = false;
  /** Its block was told (once). */
  private told = false;
  constructor(private readonly o: TextsOptions) {
    this.scanner = new TextScanner(o.finders);
    if (o.blocked !== null) {
      // Blocked before its first text by a plugin, which was named then.
      this.scanner.blocked = o.blocked;
      this.told = true;
    }
  }
  /** The text to release for `delta` (or, with null, for the text's end). */
  take(delta: string | null): string {
    const s = this.scanner;
    if (delta !== null) this.seen = true;
    const before = s.redactedBy.size;
    let out = delta === null ? s.flush() : s.push(delta);
    if (s.redactedBy.size > before) for (const id of [...s.redactedBy].slice(before)) this.o.onAct(id, 'redact');
    if (s.blocked !== null && !this.told) {
      this.told = true;
      this.o.onAct(s.blocked, 'block');
    }
    if (out && this.o.extra) out = this.o.extra(out);
    this.released += out;
    return out;
  }
  get blocked(): boolean {
    return this.scanner.blocked !== null;
  }
}

class Texts {
  private readonly texts = new Map<string, Text>();
  constructor(private readonly o: TextsOptions) {}
  of(key: string): Text {
    let t = this.texts.get(key);
    if (!t) this.texts.set(key, (t = new Text(this.o)));
    return t;
  }
  get(key: string): Text | undefined {
    return this.texts.get(key);
  }
  entries(): IterableIterator<[string, Text]> {
    return this.texts.entries();
  }
}

/** Chat and legacy completions chunks: each choice's text (`delta.content`, or `text`). */
class ChoicesRewrite {
  private last: Json = {};
  /** Choices whose text ended (finished, or blocked). */
  private readonly ended = new Set<string>();
  constructor(
    private readonly texts: Texts,
    private readonly format: 'chat' | 'completions',
  ) {}

  event(data: string): string {
    if (data === '[DONE]') return '';
    let chunk: Json;
    try {
      chunk = JSON.parse(data) as Json;
    } catch {
      return frameEvent(data);
    }
    if (!isObject(chunk) || !Array.isArray(chunk.choices) || chunk.choices.length === 0) return frameEvent(data);
    this.last = chunk;
    if (chunk.choices.length === 1) {
      const one = this.single(data, chunk, chunk.choices[0]);
      if (one !== null) return one;
    }
    const choices: Json[] = [];
    for (const c of chunk.choices as unknown[]) {
      if (!isObject(c)) continue;
      const next = this.choice(c);
      if (next) choices.push(next);
    }
    if (choices.length === 0 && !isObject(chunk.usage)) return '';
    return frameEvent(JSON.stringify({ ...chunk, choices }));
  }

  /** A choice's text through its scanner: what it released, whether it is blocked or finishing. */
  private take(c: Json, key: string): { out: string; text: unknown; t: Text; finishing: boolean } {
    const t = this.texts.of(key);
    const text = this.format === 'chat' ? (c.delta as Json | undefined)?.content : c.text;
    let out = typeof text === 'string' ? t.take(text) : '';
    const finishing = typeof c.finish_reason === 'string';
    if (!t.blocked && finishing) out += t.take(null);
    if (t.blocked || finishing) this.ended.add(key);
    return { out, text, t, finishing };
  }

  /** One choice as the client gets it, or null when it has nothing to say. */
  private choice(c: Json): Json | null {
    const key = String(c.index ?? 0);
    if (this.ended.has(key)) return null;
    const { out, text, t, finishing } = this.take(c, key);
    const delta = isObject(c.delta) ? c.delta : null;
    const next: Json = { ...c };
    if ('logprobs' in next) next.logprobs = null;
    if (this.format === 'chat') next.delta = { ...(delta ?? {}), ...(typeof text === 'string' || out ? { content: out } : {}) };
    else next.text = out;
    if (t.blocked) {
      if (this.format === 'chat') next.delta = out ? { content: out } : {};
      next.finish_reason = 'content_filter';
    } else if (!finishing && !out && !(delta && Object.keys(delta).some((k) => k !== 'content'))) return null;
    return next;
  }

  /**
   * The usual chunk, one choice with a text and no log probabilities: the event with only its
   * text replaced in place, without building or serialising the chunk again; null for any
   * other chunk (the general path takes it).
   */
  private single(data: string, chunk: Json, c: unknown): string | null {
    if (!isObject(c) || c.logprobs != null) return null;
    const key = String(c.index ?? 0);
    const chat = this.format === 'chat';
    const delta = chat ? c.delta : null;
    if (this.ended.has(key) || (chat && !isObject(delta))) return null;
    const was = chat ? (delta as Json).content : c.text;
    const field = chat ? '"content":' : '"text":';
    const needle = typeof was === 'string' ? `${field}${JSON.stringify(was)}` : '';
    const at = needle ? data.indexOf(needle) : -1;
    if (at === -1 || data.indexOf(needle, at + 1) !== -1) return null;
    const { out, t, finishing } = this.take(c, key);
    if (t.blocked) {
      const blocked: Json = { ...c, logprobs: null, finish_reason: 'content_filter' };
      if (chat) blocked.delta = out ? { content: out } : {};
      else blocked.text = out;
      return frameEvent(JSON.stringify({ ...chunk, choices: [blocked] }));
    }
    // Nothing released and nothing else in it: the event is not sent.
    if (!out && !finishing && !isObject(chunk.usage) && !(chat && Object.keys(delta as Json).length > 1)) return '';
    return frameEvent(`${data.slice(0, at)}${field}${JSON.stringify(out)}${data.slice(at + needle.length)}`);
  }

  /** The stream's end without a choice's finish: what each choice still holds goes out. */
  finish(): string {
    const choices: Json[] = [];
    for (const [index, t] of this.texts.entries()) {
      if (this.ended.has(index)) continue;
      const out = t.take(null);
      const next: Json = { index: Number(index), finish_reason: t.blocked ? 'content_filter' : null };
      if (this.format === 'chat') next.delta = out ? { content: out } : {};
      else next.text = out;
      if (out || t.blocked) choices.push(next);
      this.ended.add(index);
    }
    return choices.length ? frameEvent(JSON.stringify({ ...this.last, choices, usage: undefined })) : '';
  }
}

const typed = (event: Json): string => `event: ${String(event.type)}\ndata: ${JSON.stringify(event)}\n\n`;
const asIs = (type: string, data: string): string => `event: ${type}\ndata: ${data}\n\n`;
const RESPONSE_END = new Set(['response.completed', 'response.incomplete', 'response.failed']);

/** A Responses stream: each output_text part (by output and content index). */
class ResponsesRewrite {
  private blocked = false;
  constructor(private readonly texts: Texts) {}

  event(data: string): string {
    let event: Json;
    try {
      event = JSON.parse(data) as Json;
    } catch {
      return frameEvent(data);
    }
    if (!isObject(event)) return frameEvent(data);
    const type = typeof event.type === 'string' ? event.type : 'message';
    const key = `${String(event.output_index)}:${String(event.content_index)}`;
    if (RESPONSE_END.has(type)) return typed(this.ending(event));
    if (this.blocked) return '';
    if (type === 'response.output_text.delta' && typeof event.delta === 'string') {
      const t = this.texts.of(key);
      const out = t.take(event.delta);
      if (t.blocked) this.blocked = true;
      return out ? typed(withoutLogprobs({ ...event, delta: out })) : '';
    }
    if (type === 'response.output_text.done') {
      const t = this.texts.of(key);
      // A text that came only whole, in its done event, is checked whole here.
      let out = !t.seen && typeof event.text === 'string' ? t.take(event.text) : '';
      if (!t.blocked) out += t.take(null);
      if (t.blocked) this.blocked = true;
      const delta = out ? typed({ ...withoutLogprobs(event), type: 'response.output_text.delta', delta: out, text: undefined }) : '';
      return this.blocked ? delta : delta + typed(withoutLogprobs({ ...event, text: t.released }));
    }
    if (type === 'response.content_part.done' && isObject(event.part)) {
      const t = this.texts.get(key);
      return t ? typed({ ...event, part: { ...event.part, text: t.released } }) : asIs(type, data);
    }
    if (type === 'response.output_item.done' && isObject(event.item)) return typed({ ...event, item: this.item(event.item, event.output_index) });
    return asIs(type, data);
  }

  finish(): string {
    return '';
  }

  /** An output item with each text part as released. */
  private item(item: Json, index: unknown): Json {
    if (!Array.isArray(item.content)) return item;
    return {
      ...item,
      content: item.content.map((part: unknown, j) => {
        const t = this.texts.get(`${String(index)}:${j}`);
        return t && isObject(part) && typeof part.text === 'string' ? { ...part, text: t.released, logprobs: undefined } : part;
      }),
    };
  }

  /** The terminal event: its output as released; after a block, the response is incomplete. */
  private ending(event: Json): Json {
    const response = isObject(event.response) ? event.response : {};
    const output = Array.isArray(response.output) ? response.output.map((item: unknown, i) => (isObject(item) ? this.item(item, i) : item)) : response.output;
    if (!this.blocked) return { ...event, response: { ...response, output } };
    return {
      ...event,
      type: 'response.incomplete',
      response: { ...response, output, status: 'incomplete', incomplete_details: { reason: 'content_filter' } },
    };
  }
}

const withoutLogprobs = (event: Json): Json => ('logprobs' in event ? { ...event, logprobs: [] } : event);

/** A Messages stream: each text content block (by index). */
class MessagesRewrite {
  private blocked = false;
  constructor(private readonly texts: Texts) {}

  event(data: string): string {
    let event: Json;
    try {
      event = JSON.parse(data) as Json;
    } catch {
      return frameEvent(data);
    }
    if (!isObject(event)) return frameEvent(data);
    const type = typeof event.type === 'string' ? event.type : 'message';
    if (type === 'message_delta' && this.blocked) {
      return typed({ ...event, delta: { ...(isObject(event.delta) ? event.delta : {}), stop_reason: 'refusal', stop_sequence: null } });
    }
    if (this.blocked) return type === 'message_stop' || type === 'ping' ? asIs(type, data) : '';
    const key = String(event.index);
    const delta = isObject(event.delta) ? event.delta : null;
    if (type === 'content_block_delta' && delta?.type === 'text_delta' && typeof delta.text === 'string') {
      const t = this.texts.of(key);
      const out = t.take(delta.text);
      return this.released(event, t, out);
    }
    if (type === 'content_block_stop') {
      const t = this.texts.get(key);
      if (!t) return asIs(type, data);
      const out = t.take(null);
      if (t.blocked) return this.released(event, t, out);
      return (out ? typed({ type: 'content_block_delta', index: event.index, delta: { type: 'text_delta', text: out } }) : '') + asIs(type, data);
    }
    return asIs(type, data);
  }

  finish(): string {
    return '';
  }

  /** A text delta's frames; a block closes its content block there. */
  private released(event: Json, t: Text, out: string): string {
    const frame = out ? typed({ type: 'content_block_delta', index: event.index, delta: { type: 'text_delta', text: out } }) : '';
    if (!t.blocked) return frame;
    this.blocked = true;
    return frame + typed({ type: 'content_block_stop', index: event.index });
  }
}
