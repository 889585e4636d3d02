/**
 * Keeping upstream keys out of what clients and logs see. An upstream may echo its key in an
 * error message, whole or cut in pieces ("sk-upstream-S|ECRET-123456"), and a piece is key
 * material too: every run of MIN_RUN or more characters that occurs in a configured upstream
 * key is removed, wherever it stands. Shorter runs stay: below that length, ordinary text
 * ("the", "key ") would match some key by chance and be mangled.
 */
import { GatewayError } from '../errors.js';

/** The shortest run of a key's characters that is removed. */
export const MIN_RUN = 6;
/** What stands where key material was. */
export const REDACTED = '[redacted]';

export type Redact = (text: string) => string;

const identity: Redact = (text) => text;

/**
 * A function that removes from a text every run of MIN_RUN or more characters occurring in
 * one of `keys`. Each key's MIN_RUN-character windows go in one set; the text's windows are
 * looked up in it, and overlapping or touching hits widen into one run (any longer common
 * run is covered by its own windows), replaced by REDACTED. Linear in the text's length.
 */
export function keyRedactor(keys: readonly string[]): Redact {
  const grams = new Set<string>();
  for (const key of keys) for (let i = 0; i + MIN_RUN <= key.length; i++) grams.add(key.slice(i, i + MIN_RUN));
  if (grams.size === 0) return identity;
  return (text) => {
    if (text.length < MIN_RUN) return text;
    let out = '';
    let kept = 0; // text before this index is in `out`
    let runStart = -1;
    let runEnd = -1;
    for (let i = 0; i + MIN_RUN <= text.length; i++) {
      if (!grams.has(text.slice(i, i + MIN_RUN))) continue;
      if (i > runEnd) {
        if (runStart !== -1) {
          out += text.slice(kept, runStart) + REDACTED;
          kept = runEnd;
        }
        runStart = i;
      }
      runEnd = i + MIN_RUN;
    }
    if (runStart === -1) return text;
    return out + text.slice(kept, runStart) + REDACTED + text.slice(runEnd);
  };
}

/**
 * A header or query parameter that carries a credential, by its name: Azure's `api-key`,
 * `x-api-key`, `x-goog-api-key`, `Ocp-Apim-Subscription-Key`, `Authorization`, a `key` or
 * `token` parameter. Other names (`api-version`, `anthropic-version`) are not secret, and
 * redacting their values would cut dates out of ordinary text.
 */
const CREDENTIAL_NAME = /(^|[-_])(key|token|secret|password|auth|authorization|signature|sig)($|[-_])|api[-_]?key/i;

/** The keys of the configured upstreams (a custom client's credentials are its own). */
function upstreamKeys(upstreams: Readonly<Record<string, unknown>>): string[] {
  const keys: string[] = [];
  const add = (value: unknown) => {
    // An Authorization value's scheme ("Bearer ") is a word, not key material.
    const key = typeof value === 'string' ? value.replace(/^(Bearer|Basic|Token)\s+/i, '') : undefined;
    if (key !== undefined && key.length >= MIN_RUN) keys.push(key);
  };
  for (const u of Object.values(upstreams)) {
    if (!u || typeof u !== 'object') continue;
    const { apiKey, headers, query } = u as { apiKey?: unknown; headers?: unknown; query?: unknown };
    add(apiKey);
    for (const named of [headers, query]) {
      if (!named || typeof named !== 'object') continue;
      for (const [name, value] of Object.entries(named)) if (CREDENTIAL_NAME.test(name)) add(value);
    }
  }
  return keys;
}

/** One redactor per configuration: its windows are built once, not per message. */
const byUpstreams = new WeakMap<object, Redact>();

/** The redactor of every upstream key in `cfg`. */
export function upstreamKeysRedactor(cfg: { upstreams: Readonly<Record<string, unknown>> }): Redact {
  let redact = byUpstreams.get(cfg.upstreams);
  if (!redact) byUpstreams.set(cfg.upstreams, (redact = keyRedactor(upstreamKeys(cfg.upstreams))));
  return redact;
}

/**
 * `value` (an upstream's JSON: an error object it wrote) with `redact` applied to every string
 * in it, keys included, to a depth: the same value when nothing changed, else a copy. Each
 * string is read decoded, so a key written with JSON escapes is found too.
 */
export function redactedDeep(value: unknown, redact: Redact, depth = 0): unknown {
  if (typeof value === 'string') return redact(value);
  if (!value || typeof value !== 'object') return value;
  // Deeper than any error an upstream writes: not read further, and not relayed either.
  if (depth > 32) return REDACTED;
  let changed = false;
  if (Array.isArray(value)) {
    const out = value.map((v) => {
      const next = redactedDeep(v, redact, depth + 1);
      if (next !== v) changed = true;
      return next;
    });
    return changed ? out : value;
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    const key = redact(k);
    const next = redactedDeep(v, redact, depth + 1);
    if (key !== k || next !== v) changed = true;
    out[key] = next;
  }
  return changed ? out : value;
}

/**
 * `err` with upstream key material out of its message and param (the parts of it an upstream
 * can have written): the same error when there was none, else a copy.
 */
export function redactedError(err: GatewayError, redact: Redact): GatewayError {
  // The code and type are the gateway's own words (an upstream's were cleaned where they were
  // read): only the message and the parameter can carry what an upstream sent.
  const message = redact(err.message);
  const param = err.param === null ? null : redact(err.param);
  if (message === err.message && param === err.param) return err;
  return new GatewayError(err.code, message, {
    status: err.status,
    type: err.type,
    param,
    headers: err.headers,
    ...(err.metadata ? { metadata: err.metadata } : {}),
  });
}
