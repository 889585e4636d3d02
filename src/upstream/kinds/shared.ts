/** What the translations share: how they refuse a field, and how they read values and events. */
import { errors, GatewayError } from '../../errors.js';

/**
 * A request field the serving upstream's kind cannot carry is a 400 naming the field: a
 * client that asked for it must learn it did not happen, rather than get an answer made
 * without it.
 */
export function notCarried(param: string, kind: string, detail?: string): GatewayError {
  const why = detail ? `: ${detail}` : '.';
  return new GatewayError('invalid_request', `\`${param}\` is not supported for a model served by a ${kind} upstream${why}`, { param });
}

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A field left out, or sent as null: both mean "not asked for". */
export const absent = (v: unknown): v is null | undefined => v === undefined || v === null;

/** One streamed event's data as a JSON object; 502 for anything else. */
export function eventData(data: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch {
    throw errors.malformedEvent();
  }
  if (!isObject(value)) throw errors.malformedEvent();
  return value;
}
