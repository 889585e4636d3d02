/** Turns a zod failure into 400 invalid_request with `param` naming the field. */
import type { z } from 'zod';
import { GatewayError } from '../errors.js';

/** ["messages", 0, "role"] -> "messages[0].role" */
export function paramPath(path: ReadonlyArray<PropertyKey>): string | null {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out || null;
}

export function zodError(error: z.ZodError): GatewayError {
  const issue = error.issues[0];
  const param = issue ? paramPath(issue.path) : null;
  let message = issue?.message ?? 'Invalid request.';
  if (issue?.code === 'invalid_type' && issue.input === undefined) message = 'is required';
  return new GatewayError('invalid_request', param ? `Invalid value for '${param}': ${message}` : message, { param });
}
