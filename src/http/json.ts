/**
 * JSON in and out: a request body parsed strictly (an object, bounded depth, no repeated key)
 * and JSON answers with their Content-Length.
 */
import { isUtf8 } from 'node:buffer';
import { Response } from '@whatwg-node/server';
import { withHeaders } from './objects.js';
import { GatewayError } from '../errors.js';

/**
 * Deepest nesting of arrays / objects a JSON body may have. JSON.parse takes any depth, but
 * JSON.stringify and structuredClone recurse and overflow the stack a few thousand levels
 * down (a 10 KB body), which would turn a bad request into a 500 after a hold was placed.
 */
export const MAX_JSON_DEPTH = 128;

/** What a scan of valid JSON text found wrong: a key repeated in one object, or nesting too deep. */
type JsonFault = { duplicate: string } | { tooDeep: true } | null;

/**
 * One pass over `text` (valid JSON) for the first key that appears twice in one object, and
 * for nesting deeper than MAX_JSON_DEPTH; null when neither. JSON.parse keeps the last of two
 * keys; an upstream's parser may keep the first. A body the gateway relays as it came would
 * then be checked and billed as one request and run as another (another model, more tokens,
 * more images), so such a body is refused. Outside strings, each bracket opens or closes a
 * level, so the count of open scopes is the nesting depth.
 */
function scanJson(text: string): JsonFault {
  const scopes: Array<Set<string> | null> = [];
  let wantKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      // The closing quote is the first one not escaped by an odd run of backslashes.
      let end = i;
      for (;;) {
        end = text.indexOf('"', end + 1);
        let b = end - 1;
        while (text.charCodeAt(b) === 92 /* \ */) b--;
        if ((end - 1 - b) % 2 === 0) break;
      }
      if (wantKey) {
        const raw = text.slice(i + 1, end);
        const key = raw.includes('\\') ? (JSON.parse(text.slice(i, end + 1)) as string) : raw;
        const scope = scopes[scopes.length - 1]!;
        if (scope.has(key)) return { duplicate: key };
        scope.add(key);
        wantKey = false;
      }
      i = end;
    } else if (c === 123 /* { */) {
      if (scopes.push(new Set()) > MAX_JSON_DEPTH) return { tooDeep: true };
      wantKey = true;
    } else if (c === 91 /* [ */) {
      if (scopes.push(null) > MAX_JSON_DEPTH) return { tooDeep: true };
    } else if (c === 125 /* } */ || c === 93 /* ] */) {
      scopes.pop();
      wantKey = false;
    } else if (c === 44 /* , */) {
      wantKey = scopes[scopes.length - 1] != null;
    }
  }
  return null;
}

/**
 * What is wrong with `text` (valid JSON) that JSON.parse lets pass: a key repeated in one
 * object, or nesting too deep, said as the end of a sentence; null when nothing is.
 */
export function jsonTextFault(text: string): string | null {
  const fault = scanJson(text);
  if (!fault) return null;
  if ('tooDeep' in fault) return `nests more than ${MAX_JSON_DEPTH} levels deep.`;
  return `repeats the key ${JSON.stringify(fault.duplicate.slice(0, 100))} in one object.`;
}

/**
 * The top-level fields the gateway reads (of any endpoint), lower-case as every API spells them.
 * A key that is one of them in other letters ("Model", "N", "Max_Tokens") is read by no check
 * of the gateway, but an upstream whose JSON decoder matches keys ignoring case (Go's
 * encoding/json, in several OpenAI-compatible servers) takes it for the field: another model,
 * more choices or more tokens than were held and billed.
 */
const READ_FIELDS = new Set([
  'model', 'messages', 'input', 'prompt', 'instructions', 'system', 'suffix', 'n', 'best_of',
  'max_tokens', 'max_completion_tokens', 'max_output_tokens', 'max_tool_calls', 'stream',
  'stream_options', 'service_tier', 'tools', 'tool_choice', 'functions', 'function_call',
  'reasoning', 'reasoning_effort', 'thinking', 'modalities', 'audio', 'prediction',
  'previous_response_id', 'conversation', 'background', 'web_search_options', 'brand',
  'dimensions', 'encoding_format', 'size', 'quality', 'seconds', 'resolution', 'voice',
]);

/** A top-level key that spells a read field (or another key of the body) in other letters, else null. */
export function caseVariantKey(value: Record<string, unknown>): string | null {
  for (const key in value) {
    if (!/[^a-z0-9_]/.test(key)) continue;
    // Folded as Go folds keys: ASCII case, and the two other letters that fold to ASCII (the
    // Kelvin sign to "k", which toLowerCase does; the long s to "s").
    const folded = key.toLowerCase().replaceAll('\u017f', 's');
    if (folded !== key && (READ_FIELDS.has(folded) || Object.hasOwn(value, folded))) return key;
  }
  return null;
}

/** Parses a JSON object body; anything else is 400 invalid_json / invalid_request. */
export function parseJsonObject(bytes: Uint8Array): Record<string, unknown> {
  let text: string;
  let value: unknown;
  try {
    // isUtf8 + toString (native, fast) refuse invalid UTF-8 like a fatal TextDecoder would;
    // a byte-order mark stays in the text, where JSON.parse refuses it.
    if (!isUtf8(bytes)) throw new Error('invalid UTF-8');
    text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
    value = JSON.parse(text);
  } catch {
    throw new GatewayError('invalid_json', 'The request body is not valid JSON.');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new GatewayError('invalid_request', 'The request body must be a JSON object.');
  }
  const fault = scanJson(text);
  if (fault && 'tooDeep' in fault) {
    throw new GatewayError('invalid_request', `The request body nests more than ${MAX_JSON_DEPTH} levels deep.`);
  }
  if (fault) {
    const key = fault.duplicate.slice(0, 100);
    throw new GatewayError('invalid_request', `The request body repeats the key ${JSON.stringify(key)} in one object.`, { param: key });
  }
  const variant = caseVariantKey(value as Record<string, unknown>);
  if (variant !== null) {
    const key = variant.slice(0, 100);
    throw new GatewayError('invalid_request', `The request body names ${JSON.stringify(key)}, which an upstream may read as another field: spell the field as the API does.`, { param: key });
  }
  return value as Record<string, unknown>;
}

/** A JSON answer. */
export function json(status: number, value: unknown, headers?: Record<string, string>): Response {
  return jsonText(status, JSON.stringify(value), headers);
}

/**
 * A JSON answer from its text, with Content-Length: node:http then sends head and body in one
 * write, with no chunked framing. Built with the server adapter's Response, which hands a
 * string body to node:http directly.
 */
export function jsonText(status: number, text: string, headers?: Record<string, string>): Response {
  return new Response(text, {
    status,
    headers: withHeaders({ 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) }, headers),
  });
}
