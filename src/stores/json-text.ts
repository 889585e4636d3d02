/**
 * JSON text for a jsonb parameter. A lone UTF-16 surrogate ("\ud800") is valid JSON but not
 * Unicode, and a NUL is not text PostgreSQL keeps: it refuses either in jsonb, and the whole
 * statement would fail and read as the store being down (a job the upstream answered with a
 * NUL in its text would never end). Such strings are stored with each lone surrogate and each
 * NUL as U+FFFD (the other drivers keep them as given). Text without either (nearly all) is
 * stringified once.
 */
const LONE_SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;
/** NUL, which jsonb refuses too ("unsupported Unicode escape sequence"): text an upstream sent may hold it. */
const NUL_ESCAPE = '\\u0000';

type WellFormed = { toWellFormed(): string; isWellFormed(): boolean };
const wellFormed = (s: string) => (s as unknown as WellFormed).toWellFormed();
const isWellFormed = (s: string) => (s as unknown as WellFormed).isWellFormed();

/** `s` as jsonb keeps it: lone surrogates and NULs become U+FFFD. */
const storable = (s: string) => wellFormed(s).replaceAll('\u0000', '\ufffd');
const isStorable = (s: string) => isWellFormed(s) && !s.includes('\u0000');

function mend(_key: string, value: unknown): unknown {
  if (typeof value === 'string') return storable(value);
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).some((k) => !isStorable(k))) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [storable(k), v]));
  }
  return value;
}

export function jsonText(value: unknown): string {
  const text = JSON.stringify(value);
  return LONE_SURROGATE_ESCAPE.test(text) || text.includes(NUL_ESCAPE) ? JSON.stringify(value, mend) : text;
}
