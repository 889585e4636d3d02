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

/**
 * An exact thinking budget in tokens (0: thinking off), put on a chat request by a translation
 * from an API that says one (Messages' `thinking`) for a second translation that can say it too
 * (Gemini's `thinkingBudget`). Chat itself says only an effort, three sizes for any budget: the
 * client that asked for 3,000 tokens of thinking, or none, would get and pay for 8,192, or the
 * model's default. A Symbol key: JSON never writes it, so no upstream sees it.
 */
export const EXACT_THINKING_BUDGET = Symbol('model-gateway.exactThinkingBudget');

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
