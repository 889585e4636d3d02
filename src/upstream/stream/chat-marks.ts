/**
 * What the chat stream's byte fast path looks for in an event before it lets the event go out
 * unparsed: a usage, an error, a finish, the upstream's key, or a key written with an escape.
 */

import { literal, type Mark } from './sse-fast.js';

// Needles as bytes: a string needle is converted to a Buffer on every Buffer.indexOf call.
export const USAGE_KEY = Buffer.from('"usage"');
const ERROR_KEY = Buffer.from('"error"');
/**
 * A choice that finished (its value a string, not null): the answer's content ended there. JSON
 * allows any whitespace around the colon, and a provider that writes `"finish_reason" : "stop"`
 * must end the answer as one that writes it tight does.
 */
const FINISHED = /"finish_reason"\s*:\s*"/;
/**
 * A key written with an escape (`"us\u0061ge"`, `"mod\u0065l"`): JSON reads it as the plain key,
 * which a byte search for the plain key misses. Only a `\u` escape can spell a letter. Inside a
 * string a quote is escaped, so this matches only a string that opens right after `{` or `,`: a
 * key (or, rarely, an array's string, which only costs a parse). Content in a provider's
 * ASCII-only JSON holds many `\u` in its values: those events stay on the fast path.
 */
const ESCAPED_KEY = /[{,]\s*"[^"\\]*\\u/;
const UNICODE_ESCAPE = Buffer.from('\\u');
/** Whether a JSON object's text has a key written with a `\u` escape (see ESCAPED_KEY). */
export const hasEscapedKey = (text: string): boolean => text.includes('\\u') && ESCAPED_KEY.test(text);
/**
 * A `usage`, `error` or `finish_reason` key with a non-null value. Inside a JSON string a
 * quote is escaped (\"usage\"), so text that merely mentions the word never matches; a false
 * match only costs a parse. (Keys written with escapes: hasEscapedKey.)
 */
export const MAY_CARRY = /"(?:usage|error|finish_reason)"\s*:\s*[^n\s]/;

/**
 * The fast path's marks for each upstream key ('' for none), built once: every stream of an
 * upstream has the same. Bounded like any cache keyed by configuration. `\u` is among them, so
 * an event holding one is looked at; `needsLook` then says whether it needs more than that.
 */
const marksByKey = new Map<string, { marks: readonly Mark[]; others: RegExp }>();
function marksOf(apiKey: string): { marks: readonly Mark[]; others: RegExp } {
  let found = marksByKey.get(apiKey);
  if (!found) {
    const always: Mark[] = [USAGE_KEY, ERROR_KEY, FINISHED];
    const others = apiKey ? [...always, Buffer.from(apiKey)] : always;
    const source = others.map((m) => (m instanceof RegExp ? m.source : literal(m.toString('latin1')))).join('|');
    found = { marks: [...others, UNICODE_ESCAPE], others: new RegExp(source) };
    if (marksByKey.size >= 64) marksByKey.clear();
    marksByKey.set(apiKey, found);
  }
  return found;
}

export const marksFor = (apiKey: string): readonly Mark[] => marksOf(apiKey).marks;

/**
 * Whether a marked event, `buf[start..end)`, needs the look its mark asked for: any mark but a
 * `\u`, or a key written with one. An event marked only by a `\u` in its values (non-ASCII text
 * from a provider writing ASCII-only JSON, Go's `\u003c` for "<") goes out as the fast path
 * sends any other.
 */
export function needsLook(apiKey: string, buf: Buffer, start: number, end: number): boolean {
  const text = buf.toString('latin1', start, end);
  return marksOf(apiKey).others.test(text) || ESCAPED_KEY.test(text);
}
