/**
 * The output guardrails' rewrite of the typed event streams (`event:` and `data:`): Responses'
 * `output_text` parts and Messages' text content blocks. A block ends a Responses stream with
 * `response.incomplete` (`incomplete_details.reason: "content_filter"`) and a Messages stream
 * with `stop_reason: "refusal"`; every later copy of a text (its `.done` events, the terminal
 * response) carries what was released.
 */
import { frameEvent } from '../upstream/stream/sse.js';
import { isObject, type Json, type Text, type Texts } from './output-texts.js';

const typed = (event: Json): string => `event: ${String(event.type)}\ndata: ${JSON.stringify(event)}\n\n`;
const asIs = (type: string, data: string): string => `event: ${type}\ndata: ${data}\n\n`;
/** A typed API's event, parsed; null when it is not a JSON object (it goes out as it came). */
function typedEvent(data: string): Json | null {
  try {
    const event = JSON.parse(data) as unknown;
    return isObject(event) ? event : null;
  } catch {
    return null;
  }
}

const RESPONSE_END = new Set(['response.completed', 'response.incomplete', 'response.failed']);

/** A Responses stream: each output_text part (by output and content index). */
export class ResponsesRewrite {
  private blocked = false;
  /** The next event's sequence_number (from the first event's own). */
  private sequence: number | null = null;
  constructor(private readonly texts: Texts) {}

  /**
   * The client's frames for one event, numbered anew: the guardrails hold back, withhold and
   * split events, and a client (or a resume by `starting_after`) reads the numbers as one
   * after another, none missing or repeated. In JSON text `"sequence_number":` can only be a
   * key (a quote inside a string is escaped), and each event has one, at its top level.
   */
  event(data: string): string {
    const out = this.rewrite(data);
    if (!out.includes('"sequence_number":')) return out;
    return out.replace(/"sequence_number":(\d+)/g, (_, n: string) => {
      this.sequence ??= Number(n);
      return `"sequence_number":${this.sequence++}`;
    });
  }

  private rewrite(data: string): string {
    const event = typedEvent(data);
    if (!event) return frameEvent(data);
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
      const text = this.part(event.part, key);
      // Its log probabilities go with the text they spell: the rewritten part carries none.
      return text === null ? asIs(type, data) : typed({ ...event, part: withoutLogprobs({ ...event.part, text }) });
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
        const text = isObject(part) ? this.part(part, `${String(index)}:${j}`) : null;
        return text === null ? part : { ...(part as Json), text, logprobs: undefined };
      }),
    };
  }

  /**
   * A text part's text as released; null for a part that is no text. An output_text part whose
   * text no delta or done event carried (an upstream that sends it only whole, in the item or
   * the terminal response) is checked whole here, as the same answer sent plain is.
   */
  private part(part: Json, key: string): string | null {
    if (typeof part.text !== 'string') return null;
    let t = this.texts.get(key);
    if (!t && part.type === 'output_text') {
      t = this.texts.of(key);
      t.take(part.text);
      if (!t.blocked) t.take(null);
    }
    if (!t) return null;
    if (t.blocked) this.blocked = true;
    return t.released;
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
export class MessagesRewrite {
  private blocked = false;
  constructor(private readonly texts: Texts) {}

  event(data: string): string {
    const event = typedEvent(data);
    if (!event) return frameEvent(data);
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
