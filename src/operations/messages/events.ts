/**
 * How an Anthropic Messages stream is read: typed events (`event:` and `data:`), relayed as
 * they came. `message_start` reports the input (and its cache reads and writes),
 * `message_delta` the stop reason and the output; the answer's content ended at a
 * `message_delta` with a stop reason, and the answer is complete at `message_stop`, which the
 * one relay sends only once the charge is in. A failure after the 200 is Anthropic's own
 * `error` event.
 */
import { collectOutput, noOutput } from '../../billing/output.js';
import { type Usage, usageOfParts } from '../../billing/usage.js';
import type { Model } from '../../catalog/catalog.js';
import { errors, type GatewayError, anthropicError } from '../../errors.js';
import { type EventHandler, parseEvent } from '../../upstream/stream/reader.js';

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/**
 * Messages usage as the gateway's: the prompt is every input token (Anthropic reports cache
 * reads and writes beside `input_tokens`, not in it), and the cached and written parts are
 * named. Null when no input was reported: a prompt is never zero tokens, so a report of none
 * (a translated stream whose upstream sent no usage) is no report.
 */
export function messagesUsage(value: unknown): Usage | null {
  if (!value || typeof value !== 'object') return null;
  const u = value as Record<string, unknown>;
  if (!isCount(u.input_tokens) || !isCount(u.output_tokens)) return null;
  const cachedPrompt = isCount(u.cache_read_input_tokens) ? u.cache_read_input_tokens : 0;
  const cacheWrite = isCount(u.cache_creation_input_tokens) ? u.cache_creation_input_tokens : 0;
  const prompt = u.input_tokens + cachedPrompt + cacheWrite;
  if (prompt === 0) return null;
  return usageOfParts({ prompt, completion: u.output_tokens, cachedPrompt, cacheWrite });
}

/** Anthropic's error event: what a stream that failed after its 200 ends with. */
export const messagesErrorFrame = (err: GatewayError): string => `event: error\ndata: ${JSON.stringify(anthropicError(err))}\n\n`;

export function messagesEvents(model: Model): EventHandler {
  const renames = model.upstreamModel !== model.id;
  /** The usage so far: `message_start`'s, with each `message_delta`'s fields over it. */
  const usage: Record<string, unknown> = {};
  const output = noOutput();
  let answered = false;
  let done = false;
  return {
    event(data) {
      const event = parseEvent(data);
      const type = typeof event.type === 'string' ? event.type : '';
      if (type === 'error') throw errors.upstreamFailedMidStream(event.error);
      let payload = data;
      if (type === 'message_start') {
        const message = (event.message ?? {}) as Record<string, unknown>;
        Object.assign(usage, message.usage);
        // The client sees the model it called, not the upstream's name for it.
        if (renames) payload = JSON.stringify({ ...event, message: { ...message, model: model.id } });
      } else if (type === 'content_block_delta') collectOutput(event.delta, output);
      else if (type === 'content_block_start') collectOutput(event.content_block, output);
      else if (type === 'message_delta') {
        const reported = (event.usage ?? {}) as Record<string, unknown>;
        for (const k in reported) if (reported[k] !== null && reported[k] !== undefined) usage[k] = reported[k];
        if ((event.delta as { stop_reason?: unknown } | undefined)?.stop_reason) answered = true;
      } else if (type === 'message_stop') done = true;
      return `event: ${type || 'message'}\ndata: ${payload}\n\n`;
    },
    complete: () => done,
    answered: () => answered,
    usage: () => messagesUsage(usage),
    produced: () => output,
    endFrame: null,
    errorFrame: messagesErrorFrame,
  };
}

/** The output of a plain Message, for an answer that reports no usage. */
export function messageOutput(content: unknown) {
  const into = noOutput();
  collectOutput(content, into);
  return into;
}
