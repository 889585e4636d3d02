/**
 * What the chat stream's byte fast path looks for in an event before it lets the event go out
 * unparsed: a usage, an error, a finish, or the upstream's key.
 */

import type { Mark } from './sse-fast.js';

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
 * which a byte search for the plain key misses. Only a `\u` escape can spell a letter, so an
 * event holding one is looked at (content in a provider's ASCII-only JSON holds many: the look
 * is this pattern, and it is parsed only when the pattern matches). Inside a string a quote is
 * escaped, so the pattern matches only a string that opens right after `{` or `,`: a key (or,
 * rarely, an array's string, which only costs a parse).
 */
const UNICODE_ESCAPE = Buffer.from('\\u');
const ESCAPED_KEY = /[{,]\s*"[^"\\]*\\u/;
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
 * upstream has the same. Bounded like any cache keyed by configuration.
 */
const marksByKey = new Map<string, readonly Mark[]>();
export function marksFor(apiKey: string): readonly Mark[] {
  let marks = marksByKey.get(apiKey);
  if (!marks) {
    const always: Mark[] = [USAGE_KEY, ERROR_KEY, FINISHED, UNICODE_ESCAPE];
    marks = apiKey ? [...always, Buffer.from(apiKey)] : always;
    if (marksByKey.size >= 64) marksByKey.clear();
    marksByKey.set(apiKey, marks);
  }
  return marks;
}
