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
import { type EventReader, overReader } from '../upstream/stream/reader.js';
import { frameEvent, SseParser } from '../upstream/stream/sse.js';
import { isObject, type Json, type OnAct, type Text, Texts } from './output-texts.js';
import { MessagesRewrite, ResponsesRewrite } from './output-typed.js';
import type { OutputFinder } from './scanner.js';

export type { OnAct } from './output-texts.js';

/** The APIs whose answers carry text, by the shape of their stream. */
export type OutputFormat = 'chat' | 'completions' | 'responses' | 'messages';

const encoder = new TextEncoder();

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
  // A `[DONE]` the inner reader framed is dropped here: the relay adds the end frame.
  return overReader(inner, { frames: through, reframes: true });
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

/**
 * A chat choice's texts beside its content, each through its own scanner (keyed
 * `<index>:<field>`): the reasoning a provider shows (`reasoning_content`, or `reasoning`) and
 * a refusal. The client reads them as it reads the content.
 */
export const CHAT_SIDE_TEXTS = ['reasoning_content', 'reasoning', 'refusal'] as const;

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
    const delta = isObject(c.delta) ? c.delta : null;
    // The side texts come before the content in a turn (reasoning first): a block in them ends
    // the choice before its content is read.
    const side = this.format === 'chat' ? this.sideTexts(key, delta, typeof c.finish_reason === 'string') : null;
    if (side?.blocked) {
      this.ended.add(key);
      return { ...c, ...('logprobs' in c ? { logprobs: null } : {}), delta: side.released, finish_reason: 'content_filter' };
    }
    const { out, text, t, finishing } = this.take(c, key);
    const next: Json = { ...c };
    if ('logprobs' in next) next.logprobs = null;
    if (this.format === 'chat') {
      next.delta = { ...(delta ?? {}), ...side?.released, ...(typeof text === 'string' || out ? { content: out } : {}) };
      for (const field of CHAT_SIDE_TEXTS) if ((next.delta as Json)[field] === '') delete (next.delta as Json)[field];
    } else next.text = out;
    if (t.blocked) {
      if (this.format === 'chat') next.delta = { ...side?.released, ...(out ? { content: out } : {}) };
      next.finish_reason = 'content_filter';
    } else if (!finishing && !out && !Object.keys((next.delta as Json | undefined) ?? {}).some((k) => k !== 'content')) return null;
    return next;
  }

  /**
   * A chat choice's side texts in `delta` through their scanners. A side text the choice moved
   * on from (its content came, or another side text, or its finish) is decided then: what its
   * scanner held back goes out, or blocks, before anything that follows it in the answer.
   */
  private sideTexts(key: string, delta: Json | null, finishing: boolean): { released: Json; blocked: boolean } | null {
    let released: Json | null = null;
    let blocked = false;
    for (const field of CHAT_SIDE_TEXTS) {
      const value = delta?.[field];
      const given = typeof value === 'string';
      const t = given ? this.texts.of(`${key}:${field}`) : this.texts.get(`${key}:${field}`);
      if (!t || t.blocked) continue;
      let out = given ? t.take(value) : '';
      const movedOn = !given && (typeof delta?.content === 'string' || CHAT_SIDE_TEXTS.some((f) => f !== field && typeof delta?.[f] === 'string'));
      if (!t.blocked && (finishing || movedOn)) out += t.take(null);
      if (given || out) (released ??= {})[field] = out;
      if (t.blocked) {
        blocked = true;
        break;
      }
    }
    return released || blocked ? { released: released ?? {}, blocked } : null;
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
    // A choice with a side text (reasoning, a refusal), now or earlier: the general path, which
    // decides what a side text still holds back before the content that follows it.
    if (chat && (CHAT_SIDE_TEXTS.some((f) => f in (delta as Json)) || this.hasSide(key))) return null;
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

  private hasSide(key: string): boolean {
    return CHAT_SIDE_TEXTS.some((f) => this.texts.get(`${key}:${f}`) !== undefined);
  }

  /** The stream's end without a choice's finish: what each choice still holds goes out. */
  finish(): string {
    const byIndex = new Map<string, Json>();
    for (const [name, t] of this.texts.entries()) {
      const [index = name, field = 'content'] = name.split(':');
      if (this.ended.has(index)) continue;
      let next = byIndex.get(index);
      if (!next) byIndex.set(index, (next = { index: Number(index), finish_reason: null, ...(this.format === 'chat' ? { delta: {} } : { text: '' }) }));
      // Nothing of a choice after a block in it.
      if (next.finish_reason !== null) continue;
      const out = t.take(null);
      if (this.format === 'chat') {
        if (out) (next.delta as Json)[field] = out;
      } else next.text = out;
      if (t.blocked) next.finish_reason = 'content_filter';
    }
    const choices: Json[] = [];
    for (const [index, next] of byIndex) {
      this.ended.add(index);
      const said = this.format === 'chat' ? Object.keys(next.delta as Json).length > 0 : next.text !== '';
      if (said || next.finish_reason !== null) choices.push(next);
    }
    return choices.length ? frameEvent(JSON.stringify({ ...this.last, choices, usage: undefined })) : '';
  }
}
