/**
 * The model's limits checked before anything is held or sent upstream: a prompt estimated
 * past the model's context window, or an output cap past the model's `maxOutputTokens`, can
 * only fail (or be cut) upstream, after a hold and possibly a charge for the prompt.
 */
import type { Model } from '../catalog/catalog.js';
import { GatewayError } from '../errors.js';

/**
 * 400 `max_tokens`-style when a requested output cap exceeds the model's `maxOutputTokens`.
 * `caps` maps each field the client may send (e.g. `max_tokens`, `max_completion_tokens`) to
 * its value; the first one over the limit is named in `param`.
 */
export function checkOutputCap(model: Model, caps: Record<string, number | null | undefined>): void {
  for (const [param, value] of Object.entries(caps)) {
    if (typeof value === 'number' && value > model.maxOutputTokens) {
      throw new GatewayError(
        'invalid_request',
        `Invalid value for '${param}': ${value} is more than the ${model.maxOutputTokens} output tokens \`${model.id}\` can produce.`,
        { param },
      );
    }
  }
}

/**
 * 400 `context_length_exceeded` when the prompt does not fit the model's context window.
 * `bound` is a cheap upper bound of the prompt's tokens (its UTF-8 bytes): when it fits, the
 * prompt fits and nothing is counted. Otherwise the tokenizer's count (no margin: a prompt is
 * refused only when it really is too long) decides.
 */
export function checkContextWindow(model: Model, bound: number, count: () => number, param: string): void {
  if (bound <= model.contextLength) return;
  const tokens = count();
  if (tokens <= model.contextLength) return;
  throw new GatewayError(
    'context_length_exceeded',
    `This model's maximum context length is ${model.contextLength} tokens. However, your ${param} resulted in about ${tokens} tokens. Please reduce the length of the ${param}.`,
    { param },
  );
}
