/** Turns a zod failure into 400 invalid_request with `param` naming the field. */
import type { z } from 'zod';
import { GatewayError } from '../errors.js';

/** ["messages", 0, "role"] -> "messages[0].role" */
export function paramPath(path: ReadonlyArray<PropertyKey>): string | null {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out || null;
}

/** Whether `path` leads to a present value in `input`. */
function present(input: unknown, path: ReadonlyArray<PropertyKey>): boolean {
  let at: unknown = input;
  for (const p of path) {
    if (at === null || typeof at !== 'object' || !Object.hasOwn(at, p)) return false;
    at = (at as Record<PropertyKey, unknown>)[p];
  }
  return at !== undefined;
}

export function zodError(error: z.ZodError, input: unknown): GatewayError {
  const issue = error.issues[0];
  const param = issue ? paramPath(issue.path) : null;
  let message = issue?.message ?? 'Invalid request.';
  if (issue?.code === 'invalid_type' && !present(input, issue.path)) message = 'is required';
  return new GatewayError('invalid_request', param ? `Invalid value for '${param}': ${message}` : message, { param });
}
