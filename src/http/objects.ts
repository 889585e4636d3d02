/** Building the objects the gateway sends on (answer headers, forwarded bodies) so that later writes to them stay cheap. */
/**
 * `own` (a fresh object literal) with the headers of `extra` it does not set itself, copied
 * in key by key. Not a spread: an object spread from another object gets a map on which every
 * later header set costs microseconds, and the gateway sets the request id and the rate-limit
 * headers on every answer after its route built it.
 */
export function withHeaders(own: Record<string, string>, extra: Record<string, string> | undefined): Record<string, string> {
  if (extra) for (const k in extra) if (!Object.hasOwn(own, k)) own[k] = extra[k]!;
  return own;
}

/**
 * A copy of a JSON object without the fields in `drop`: a fresh object filled key by key,
 * not a spread followed by `delete` (deleting a property turns the object into a dictionary,
 * which every later write and JSON.stringify pays for).
 */
export function withoutFields(source: Record<string, unknown>, drop: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k in source) if (!drop.includes(k)) out[k] = source[k];
  return out;
}
