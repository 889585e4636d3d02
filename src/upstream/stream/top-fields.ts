/**
 * The top-level fields of one JSON object read from its text, without parsing it: where the
 * `model` value is (to rename it in place), and for a chat chunk whether `choices` is empty and
 * where `usage` is (to read only that, and drop an unasked usage chunk). A relayed answer is
 * mostly content the gateway never needs to look at; a parse and a re-serialise per event cost
 * more than the rest of the relay does.
 *
 * The scan walks the object's top level only: a nested value is skipped as a whole, its strings
 * by their closing quote (an escaped quote never ends one), so a `"model":"…"` written inside
 * content text, or a `model` key in a nested object, is never taken for the answer's own. It
 * is no validator: it answers "unsure" (false) at anything it does not expect (not an object, a
 * key written with escapes, a `model` key twice, a malformed member) and the caller then parses.
 * It reads bytes or a JS string alike: every character it looks at is ASCII, and UTF-8 never
 * has an ASCII byte inside a multi-byte character.
 */
import { hasEscapedKey } from './chat-marks.js';

/** What a scan found; a position is -1 where the field is absent. Reused: a scan resets it. */
export class TopFields {
  /** The `model` value, `[modelFrom, modelTo)`: a string token with its quotes, or any other value. */
  modelFrom = -1;
  modelTo = -1;
  /** The `choices` value. */
  choicesFrom = -1;
  choicesTo = -1;
  /** The `usage` value. */
  usageFrom = -1;
  usageTo = -1;
  /** Whether the object has a top-level `error` key. */
  error = false;

  private reset(): void {
    this.modelFrom = this.modelTo = this.choicesFrom = this.choicesTo = this.usageFrom = this.usageTo = -1;
    this.error = false;
  }

  /**
   * Scans the object in `src[start..end)`; false when unsure. With `untilModel`, stops at the
   * `model` member (the fields after it are not read; the rest is only searched for a second
   * `"model"`, which makes the scan unsure, since a parse would take the last).
   */
  scan(src: Source, start: number, end: number, untilModel = false): boolean {
    this.reset();
    let i = skipSpace(src, start, end);
    if (at(src, i) !== OPEN_BRACE) return false;
    i = skipSpace(src, i + 1, end);
    if (at(src, i) === CLOSE_BRACE) return skipSpace(src, i + 1, end) === end;
    for (;;) {
      if (at(src, i) !== QUOTE) return false;
      const keyFrom = i + 1;
      const keyEnd = stringEnd(src, i, end);
      if (keyEnd === -1) return false;
      const key = keyOf(src, keyFrom, keyEnd - 1);
      if (key === UNSURE) return false;
      i = skipSpace(src, keyEnd, end);
      if (at(src, i) !== COLON) return false;
      const valueFrom = skipSpace(src, i + 1, end);
      const valueTo = valueEnd(src, valueFrom, end);
      if (valueTo === -1) return false;
      if (key === MODEL) {
        if (this.modelFrom !== -1) return false;
        this.modelFrom = valueFrom;
        this.modelTo = valueTo;
        if (untilModel) return indexOf(src, MODEL_KEY_TEXT, valueTo, end) === -1;
      } else if (key === CHOICES) {
        this.choicesFrom = valueFrom;
        this.choicesTo = valueTo;
      } else if (key === USAGE) {
        this.usageFrom = valueFrom;
        this.usageTo = valueTo;
      } else if (key === ERROR) this.error = true;
      i = skipSpace(src, valueTo, end);
      const c = at(src, i);
      if (c === CLOSE_BRACE) return skipSpace(src, i + 1, end) === end;
      if (c !== COMMA) return false;
      i = skipSpace(src, i + 1, end);
    }
  }

  /** Whether the scan found `choices` as an empty array. */
  noChoices(src: Source): boolean {
    if (this.choicesFrom === -1 || at(src, this.choicesFrom) !== OPEN_BRACKET) return false;
    return skipSpace(src, this.choicesFrom + 1, this.choicesTo) === this.choicesTo - 1;
  }
}

/** Bytes or a decoded string: the scan reads either. */
export type Source = Uint8Array | string;

const QUOTE = 34;
const BACKSLASH = 92;
const COMMA = 44;
const COLON = 58;
const OPEN_BRACE = 123;
const CLOSE_BRACE = 125;
const OPEN_BRACKET = 91;
const CLOSE_BRACKET = 93;

// Past the end a byte reads undefined, which equals no character the scan looks for.
const at = (src: Source, i: number): number => (typeof src === 'string' ? src.charCodeAt(i) : (src[i] as number));

/** A JSON whitespace character (space, tab, LF, CR). */
const isSpace = (c: number) => c === 32 || c === 10 || c === 13 || c === 9;

function skipSpace(src: Source, i: number, end: number): number {
  while (i < end && isSpace(at(src, i))) i++;
  return i;
}

/**
 * The first `text` (ASCII) in `src[from..end)`, or -1. Bytes are searched by a loop bounded by
 * `end`: a native search would run on past the event's end, into the next events of the read.
 */
function indexOf(src: Source, text: string, from: number, end: number): number {
  if (typeof src === 'string') {
    const found = src.indexOf(text, from);
    return found !== -1 && found + text.length <= end ? found : -1;
  }
  const first = text.charCodeAt(0);
  const last = end - text.length;
  for (let j = from; j <= last; j++) if (src[j] === first && spells(src, j, text)) return j;
  return -1;
}

/**
 * The position of the first `"` in `src[from..end)`, or -1. A loop: the strings looked through
 * are short (keys, ids, names), where a native search's call costs more than the search.
 */
function quoteFrom(src: Source, from: number, end: number): number {
  if (typeof src === 'string') {
    const q = src.indexOf('"', from);
    return q !== -1 && q < end ? q : -1;
  }
  for (let j = from; j < end; j++) if (src[j] === QUOTE) return j;
  return -1;
}

/** Just past the string token opening at `i` (its closing quote: one preceded by an even run of backslashes), or -1. */
export function stringEnd(src: Source, i: number, end: number): number {
  let from = i + 1;
  for (;;) {
    const q = quoteFrom(src, from, end);
    if (q === -1) return -1;
    let slashes = 0;
    while (at(src, q - 1 - slashes) === BACKSLASH) slashes++;
    if (slashes % 2 === 0) return q + 1;
    from = q + 1;
  }
}

/** Just past the value starting at `i`: a string, an object or array (nested to any depth), or a bare word or number; -1 when malformed. */
function valueEnd(src: Source, i: number, end: number): number {
  const c = at(src, i);
  if (c === QUOTE) return stringEnd(src, i, end);
  if (c === OPEN_BRACE || c === OPEN_BRACKET) {
    let depth = 0;
    for (let j = i; j < end; j++) {
      const d = at(src, j);
      if (d === QUOTE) {
        const e = stringEnd(src, j, end);
        if (e === -1) return -1;
        j = e - 1;
      } else if (d === OPEN_BRACE || d === OPEN_BRACKET) depth++;
      else if (d === CLOSE_BRACE || d === CLOSE_BRACKET) {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    return -1;
  }
  // true, false, null or a number: runs to the next delimiter.
  let j = i;
  while (j < end) {
    const d = at(src, j);
    if (d === COMMA || d === CLOSE_BRACE || d === CLOSE_BRACKET || isSpace(d)) break;
    if (d === QUOTE || d === OPEN_BRACE || d === OPEN_BRACKET || d === COLON) return -1;
    j++;
  }
  return j === i ? -1 : j;
}

const MODEL = 1;
const CHOICES = 2;
const USAGE = 3;
const ERROR = 4;
const OTHER = 0;
const UNSURE = -1;
const MODEL_KEY_TEXT = '"model"';

/** Which of the keys the scan looks for `src[from..to)` spells (a key with escapes is decoded first); UNSURE when malformed. */
function keyOf(src: Source, from: number, to: number): number {
  const n = to - from;
  for (let j = from; j < to; j++) if (at(src, j) === BACKSLASH) return escapedKeyOf(src, from, to);
  if (n === 5) {
    if (spells(src, from, 'model')) return MODEL;
    if (spells(src, from, 'usage')) return USAGE;
    if (spells(src, from, 'error')) return ERROR;
  } else if (n === 7 && spells(src, from, 'choices')) return CHOICES;
  return OTHER;
}

/** keyOf for a key written with escapes (rare): its token decoded by a parse. */
function escapedKeyOf(src: Source, from: number, to: number): number {
  let key: unknown;
  try {
    key = JSON.parse(typeof src === 'string' ? src.slice(from - 1, to + 1) : Buffer.from(src.buffer, src.byteOffset, src.byteLength).toString('utf8', from - 1, to + 1));
  } catch {
    return UNSURE;
  }
  return key === 'model' ? MODEL : key === 'usage' ? USAGE : key === 'error' ? ERROR : key === 'choices' ? CHOICES : OTHER;
}

function spells(src: Source, from: number, word: string): boolean {
  for (let k = 0; k < word.length; k++) if (at(src, from + k) !== word.charCodeAt(k)) return false;
  return true;
}

/**
 * A model name as its JSON string token (quotes included), in bytes and as text, built once
 * per name. Bounded like any cache keyed by configuration.
 */
const tokens = new Map<string, { text: string; bytes: Buffer }>();
export function modelToken(name: string): { text: string; bytes: Buffer } {
  let token = tokens.get(name);
  if (!token) {
    const text = JSON.stringify(name);
    token = { text, bytes: Buffer.from(text) };
    if (tokens.size >= 256) tokens.clear();
    tokens.set(name, token);
  }
  return token;
}

/**
 * Whether the `model` value a scan found needs renaming to `token`: 'no' when it is not a
 * string or already the token, 'yes' when it is another name written without escapes, and
 * 'unsure' when it holds an escape (it might spell the very name).
 */
export function renameNeeded(src: Source, fields: TopFields, token: { text: string; bytes: Buffer }): 'no' | 'yes' | 'unsure' {
  const from = fields.modelFrom;
  const to = fields.modelTo;
  if (from === -1 || at(src, from) !== QUOTE) return 'no';
  if (typeof src === 'string') {
    if (to - from === token.text.length && src.startsWith(token.text, from)) return 'no';
  } else if (to - from === token.bytes.length && token.bytes.compare(src, from, to) === 0) return 'no';
  for (let j = from + 1; j < to - 1; j++) if (at(src, j) === BACKSLASH) return 'unsure';
  return 'yes';
}

/** Whether `src[from..end)` holds a `"model"` (a second top-level one makes a scan unsure). */
export const modelKeyWithin = (src: Source, from: number, end: number): boolean => indexOf(src, MODEL_KEY_TEXT, from, end) !== -1;

const scratch = new TopFields();

/**
 * `text` (one JSON object) with its top-level `model` string replaced by `name`, in place; null
 * when the scan is unsure, a key is written with an escape, or it finds no model string (the caller then re-serialises its parse).
 */
export function withModel(text: string, name: string): string | null {
  // A key written with an escape may be a second `model`, which JSON reads last: re-serialise.
  if (hasEscapedKey(text) || !scratch.scan(text, 0, text.length, true)) return null;
  const token = modelToken(name);
  if (renameNeeded(text, scratch, token) !== 'yes') return null;
  return text.slice(0, scratch.modelFrom) + token.text + text.slice(scratch.modelTo);
}
