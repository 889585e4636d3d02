/**
 * What the chat stream's byte fast path looks for in an event before it lets the event go out
 * unparsed: a usage, an error, a finish, or the upstream's key.
 */

// Needles as bytes: a string needle is converted to a Buffer on every Buffer.indexOf call.
export const USAGE_KEY = Buffer.from('"usage"');
const ERROR_KEY = Buffer.from('"error"');
/** A choice that finished (its value a string, not null): the answer's content ended there. */
const FINISHED = Buffer.from('"finish_reason":"');
const FINISHED_SPACED = Buffer.from('"finish_reason": "');
/**
 * A `usage`, `error` or `finish_reason` key with a non-null value. Inside a JSON string a quote is escaped
 * (\"usage\"), so text that merely mentions the word never matches; a false match only costs a parse.
 */
export const MAY_CARRY = /"(?:usage|error|finish_reason)"\s*:\s*[^n\s]/;

/**
 * The fast path's marks for each upstream key ('' for none), built once: every stream of an
 * upstream has the same. Bounded like any cache keyed by configuration.
 */
const marksByKey = new Map<string, readonly Buffer[]>();
export function marksFor(apiKey: string): readonly Buffer[] {
  let marks = marksByKey.get(apiKey);
  if (!marks) {
    const always = [USAGE_KEY, ERROR_KEY, FINISHED, FINISHED_SPACED];
    marks = apiKey ? [...always, Buffer.from(apiKey)] : always;
    if (marksByKey.size >= 64) marksByKey.clear();
    marksByKey.set(apiKey, marks);
  }
  return marks;
}
