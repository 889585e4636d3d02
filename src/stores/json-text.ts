/**
 * JSON text for a jsonb parameter. A lone UTF-16 surrogate ("\ud800") is valid JSON but not
 * Unicode, and PostgreSQL refuses it in jsonb: the whole statement would fail and read as the
 * store being down. Such a string is stored as a text column, and every other driver, stores
 * it: each lone surrogate becomes U+FFFD. Well-formed text (nearly all) is stringified once.
 */
const LONE_SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

type WellFormed = { toWellFormed(): string; isWellFormed(): boolean };
const wellFormed = (s: string) => (s as unknown as WellFormed).toWellFormed();
const isWellFormed = (s: string) => (s as unknown as WellFormed).isWellFormed();

function mend(_key: string, value: unknown): unknown {
  if (typeof value === 'string') return wellFormed(value);
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).some((k) => !isWellFormed(k))) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [wellFormed(k), v]));
  }
  return value;
}

export function jsonText(value: unknown): string {
  const text = JSON.stringify(value);
  return LONE_SURROGATE_ESCAPE.test(text) ? JSON.stringify(value, mend) : text;
}
