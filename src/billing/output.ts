/**
 * The output an answer produced, to count with the tokenizer when the upstream reports no
 * usage, or none that is final (a stream cut before its end). Counted generically, not by a
 * list of known fields: every string an output object carries is text (content, reasoning
 * and its details, refusals, tool-call and custom-tool input, transcripts, whatever a provider
 * adds next), except the fields that only name or place things (role, type, ids, indexes).
 * Non-text output (images, audio: data URLs, and long base64 strings outside the text fields)
 * is counted by its size, a token per 4 bytes at least. Produced output is never billed as zero
 * because it came in a field the gateway did not know. Of a chat choice, only its delta,
 * message or text is output; several choices' texts are counted each on its own.
 */

/** What an answer produced: text for the tokenizer, and the bytes of its non-text output. */
export interface OutputCount {
  text: string;
  mediaBytes: number;
  /**
   * The text of an answer's other choices (`n` above 1), by choice index, each tokenized on its
   * own: streamed, the choices' deltas interleave, and one choice's words must not join
   * another's (or a plain answer and its stream would count differently). `text` is the first's.
   */
  more?: Map<number, string>;
}

export const noOutput = (): OutputCount => ({ text: '', mediaBytes: 0 });

/** The characters and bytes a count holds (grows whenever output is added). */
export function outputSize(c: OutputCount): number {
  let n = c.text.length + c.mediaBytes;
  if (c.more) for (const t of c.more.values()) n += t.length;
  return n;
}

/** Whether a count holds no output at all. */
export const isNoOutput = (c: OutputCount): boolean => outputSize(c) === 0;

/** Fields that name, place or describe output rather than carry it. */
const STRUCTURAL = new Set([
  'role',
  'type',
  'id',
  'index',
  'object',
  'status',
  'item_id',
  'call_id',
  'output_index',
  'content_index',
  'summary_index',
  'sequence_number',
  'finish_reason',
  'model',
  'logprobs',
  'format',
  // Random padding some providers add to stream events; and reasoning kept opaque for the
  // next turn (its tokens are the reasoning text's, billed through usage or the summary), or a
  // signature that proves the reasoning text unchanged (Anthropic's thinking, a router's
  // reasoning details, Gemini's parts): bytes the provider adds, not tokens the model wrote.
  'obfuscation',
  'encrypted_content',
  'signature',
  'thoughtSignature',
]);

/** A run this long of base64 characters only is binary data, not text. */
const MIN_BLOB = 256;
const BASE64 = /^[A-Za-z0-9+/_-]+={0,2}$/;

/** Fields whose string is encoded media (audio `data`, image `b64_json`, partial images) whatever its length. */
const MEDIA = new Set(['data', 'b64_json', 'partial_image_b64']);

const isBlob = (s: string) => s.startsWith('data:') || (s.length >= MIN_BLOB && BASE64.test(s));

/**
 * Fields whose string is text the model wrote, however it looks: a long run of base64-like
 * characters there (a model asked to write base64, or a word repeated) is still tokenized, as
 * the same text streamed in short deltas is, so a plain answer and its stream bill alike. Only
 * a data URL there is media.
 */
const TEXT = new Set(['content', 'text', 'refusal', 'reasoning', 'reasoning_content', 'transcript', 'arguments', 'partial_json', 'thinking']);

/**
 * Fields whose object is a tool call's arguments as the model wrote them (Anthropic's
 * `tool_use.input`, Gemini's `functionCall.args`): counted as their JSON text, as the same
 * arguments are when they come as a string. Their keys, numbers and punctuation are output
 * too; read leaf by leaf, a thousand tokens of numbers would count as none.
 */
const STRUCTURED_ARGUMENTS = new Set(['input', 'args', 'arguments']);

/** Deeper than any provider's output nests. */
const MAX_DEPTH = 32;

/**
 * A tool call's arguments object as the JSON text the model wrote (keys, numbers, punctuation),
 * to MAX_DEPTH (never JSON.stringify's own recursion, which a deep enough object overflows).
 */
function argumentsText(value: unknown, into: OutputCount, depth: number): void {
  if (typeof value === 'string') {
    // Arguments are text the model wrote (streamed, the same call's arguments are tokenized).
    into.text += JSON.stringify(value);
    return;
  }
  if (value === null || typeof value !== 'object') {
    into.text += String(value);
    return;
  }
  if (depth > MAX_DEPTH) return;
  const array = Array.isArray(value);
  into.text += array ? '[' : '{';
  let first = true;
  for (const [k, v] of array ? value.entries() : Object.entries(value as Record<string, unknown>)) {
    if (!first) into.text += ',';
    first = false;
    if (!array) into.text += `${JSON.stringify(k)}:`;
    argumentsText(v, into, depth + 1);
  }
  into.text += array ? ']' : '}';
}

/** Adds every output string of `value` (any depth) to `into`; `key` is the field it came in. */
export function collectOutput(value: unknown, into: OutputCount, depth = 0, key = ''): void {
  if (typeof value === 'string') {
    if (MEDIA.has(key) || (TEXT.has(key) ? value.startsWith('data:') : isBlob(value))) into.mediaBytes += value.length;
    else into.text += value;
    return;
  }
  // Nesting deeper than any provider's output is not output; JSON parsing already bounds it.
  if (!value || typeof value !== 'object' || depth > MAX_DEPTH) return;
  if (STRUCTURED_ARGUMENTS.has(key)) {
    // A streamed call's opening `{}` (its arguments follow as text deltas) is no output.
    if (Object.keys(value).length > 0) argumentsText(value, into, depth);
    return;
  }
  if (Array.isArray(value)) {
    for (const v of value) collectOutput(v, into, depth + 1, key);
    return;
  }
  const fields = value as Record<string, unknown>;
  // Encrypted reasoning (a router's `reasoning.encrypted` detail) is opaque, as
  // `encrypted_content` is: its text's tokens are billed through usage or the summary.
  if (fields.type === 'reasoning.encrypted') return;
  for (const k in fields) {
    if (STRUCTURAL.has(k)) continue;
    // A router (OpenRouter) sends the same reasoning twice in one delta or message: as the
    // text `reasoning` and as `reasoning_details` items. It was produced once, so it counts
    // once: the details only when there is no reasoning text beside them.
    if (k === 'reasoning_details' && typeof fields.reasoning === 'string' && fields.reasoning !== '') continue;
    collectOutput(fields[k], into, depth + 1, k);
  }
}

/** The completion tokens `count` stands for: the tokenizer's count of the text, plus a token per 4 bytes of media. */
export function outputTokens(count: OutputCount, tokenize: (text: string) => number): number {
  let tokens = (count.text ? tokenize(count.text) : 0) + Math.ceil(count.mediaBytes / 4);
  if (count.more) for (const t of count.more.values()) if (t) tokens += tokenize(t);
  return tokens;
}

const sizeOf = outputSize;

/**
 * The output of every choice of a chunk (`delta`) or a plain answer (`message`, or legacy
 * `text`). Only those carry output: what else a choice holds describes it (Azure's
 * `content_filter_results`, a router's `native_finish_reason`, `logprobs`).
 */
export function choicesOutput(choices: unknown, into: OutputCount = noOutput()): OutputCount {
  if (!Array.isArray(choices)) return into;
  for (let i = 0; i < choices.length; i++) {
    const c: unknown = choices[i];
    if (!c || typeof c !== 'object') continue;
    const choice = c as Record<string, unknown>;
    const index = typeof choice.index === 'number' && Number.isSafeInteger(choice.index) ? choice.index : i;
    // The first choice's text goes straight in; another's is kept apart, in its own run.
    const own = index === 0 ? into : noOutput();
    if (choice.delta !== undefined) collectOutput(choice.delta, own, 1, 'delta');
    if (choice.message !== undefined) collectOutput(choice.message, own, 1, 'message');
    if (typeof choice.text === 'string') collectOutput(choice.text, own, 1, 'text');
    if (own !== into) addChoice(into, index, own);
  }
  return into;
}

/** Adds the output of the choice (or candidate) at `index`, above 0, read apart in `own`: its text in its own run. */
export function addChoice(into: OutputCount, index: number, own: OutputCount): void {
  into.mediaBytes += own.mediaBytes;
  if (own.text) (into.more ??= new Map()).set(index, (into.more.get(index) ?? '') + own.text);
}

/** The output of a Responses `output` array (a plain answer, or a finished stream's response). */
export function responseOutput(output: unknown): OutputCount {
  const into = noOutput();
  collectOutput(output, into);
  return into;
}

/**
 * A Responses stream's output, from every output event: `*.delta` events add their delta,
 * `*.done` events carry the whole text of the same part, `response.output_item.done` the
 * whole item, and the final response every item. Each part and item is counted once, at the
 * largest of what was streamed and what a `.done` said, so a text sent both ways is never
 * counted twice and a text sent only in a `.done` is still counted.
 */
export class ResponsesOutput {
  /** Per output index: its parts (by content or summary index, or the item's own stream) and the whole item when it was given. */
  private readonly items = new Map<number, { parts: Map<string, { streamed: OutputCount; done: OutputCount | null }>; whole: OutputCount | null }>();

  private item(index: number) {
    let it = this.items.get(index);
    if (!it) this.items.set(index, (it = { parts: new Map(), whole: null }));
    return it;
  }

  private part(event: Record<string, unknown>) {
    const index = typeof event.output_index === 'number' ? event.output_index : -1;
    const key = typeof event.content_index === 'number' ? `c${event.content_index}` : typeof event.summary_index === 'number' ? `s${event.summary_index}` : '-';
    const parts = this.item(index).parts;
    let p = parts.get(key);
    if (!p) parts.set(key, (p = { streamed: noOutput(), done: null }));
    return p;
  }

  /** Takes one parsed stream event. */
  add(event: Record<string, unknown>): void {
    const type = typeof event.type === 'string' ? event.type : '';
    if (type === 'response.output_item.done') {
      const index = typeof event.output_index === 'number' ? event.output_index : -1;
      this.item(index).whole = larger(this.item(index).whole, responseOutput(event.item));
    } else if (type === 'response.completed' || type === 'response.incomplete' || type === 'response.failed') {
      const output = (event.response as { output?: unknown } | undefined)?.output;
      if (Array.isArray(output)) output.forEach((item, i) => void (this.item(i).whole = larger(this.item(i).whole, responseOutput([item]))));
    } else if (type.endsWith('.delta')) {
      collectOutput(event.delta, this.part(event).streamed);
    } else if (type.endsWith('.done') || type.endsWith('.partial_image')) {
      const whole = noOutput();
      for (const k in event) if (k !== 'response' && k !== 'item' && !STRUCTURAL.has(k)) collectOutput(event[k], whole);
      const p = this.part(event);
      if (type.endsWith('.partial_image')) p.streamed = larger(p.streamed, whole)!;
      else p.done = larger(p.done, whole);
    }
  }

  /** Everything produced so far, each part and item counted once. */
  total(): OutputCount {
    const out = noOutput();
    for (const it of this.items.values()) {
      const parts = noOutput();
      for (const p of it.parts.values()) {
        const best = larger(p.done, p.streamed)!;
        parts.text += best.text;
        parts.mediaBytes += best.mediaBytes;
      }
      const best = larger(it.whole, parts)!;
      out.text += best.text;
      out.mediaBytes += best.mediaBytes;
    }
    return out;
  }
}

function larger(a: OutputCount | null, b: OutputCount): OutputCount;
function larger(a: OutputCount | null, b: OutputCount | null): OutputCount | null;
function larger(a: OutputCount | null, b: OutputCount | null): OutputCount | null {
  if (!a) return b;
  if (!b) return a;
  return sizeOf(b) > sizeOf(a) ? b : a;
}
