/**
 * What the Messages <-> chat translations share: stop reasons both ways, usage both ways
 * (Anthropic counts cache reads and writes apart from `input_tokens`; chat counts them inside
 * `prompt_tokens`), and the refusal of a parameter the other API cannot carry.
 */
import { GatewayError } from '../../../errors.js';
import { eventData } from '../shared.js';

export type Json = Record<string, unknown>;

export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
export const present = (v: unknown): boolean => v !== undefined && v !== null;
const count = (v: unknown): number => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : 0);

/** 400 naming `param`: the serving upstream's API has no way to carry it, and it is never dropped silently. */
export function cannotCarry(param: string, what: string): GatewayError {
  return new GatewayError('invalid_request', `Invalid value for '${param}': ${what}`, { param });
}

const TO_CHAT_FINISH: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  pause_turn: 'stop',
  max_tokens: 'length',
  model_context_window_exceeded: 'length',
  tool_use: 'tool_calls',
  refusal: 'content_filter',
};

const TO_STOP_REASON: Record<string, string> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  function_call: 'tool_use',
  content_filter: 'refusal',
};

/** A Messages `stop_reason` as a chat `finish_reason`. */
export const chatFinish = (stopReason: unknown): string => (typeof stopReason === 'string' && TO_CHAT_FINISH[stopReason]) || 'stop';

/** A chat `finish_reason` as a Messages `stop_reason`. */
export const stopReason = (finish: unknown): string => (typeof finish === 'string' && TO_STOP_REASON[finish]) || 'end_turn';

/** Messages usage: `input_tokens` excludes the cache reads and writes reported beside it. */
export interface MessagesUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

/** Chat usage (`prompt_tokens` is the whole input, cached and written parts included) as Messages usage. */
export function messagesUsageOf(chat: unknown): MessagesUsage {
  const u = isObject(chat) ? chat : {};
  const details = isObject(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
  const read = count(details.cached_tokens);
  const written = count(details.cache_write_tokens);
  return {
    input_tokens: Math.max(0, count(u.prompt_tokens) - read - written),
    output_tokens: count(u.completion_tokens),
    cache_creation_input_tokens: written,
    cache_read_input_tokens: read,
  };
}

/** Messages usage as chat usage: `prompt_tokens` is the whole input, its cache reads and writes named in the details. */
export function chatUsageOf(messages: unknown): Json {
  const u = isObject(messages) ? messages : {};
  const read = count(u.cache_read_input_tokens);
  const written = count(u.cache_creation_input_tokens);
  const prompt = count(u.input_tokens) + read + written;
  const completion = count(u.output_tokens);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: read, cache_write_tokens: written },
  };
}

/** One Messages stream event, framed as Anthropic sends it (an `event:` line naming its type). */
export const messagesEvent = (event: Json): string => `event: ${String(event.type)}\ndata: ${JSON.stringify(event)}\n\n`;

/** One stream event's data as a JSON object, or 502 as a malformed event. */
export const eventOf = (data: string): Json => eventData(data) as Json;

/**
 * A chat message's or delta's text: a string, or the text of an array of parts (some
 * compatible servers send `[{type: "text", text}]`). What the client is sent is what is billed.
 */
export function answerText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let text = '';
  for (const part of content) if (isObject(part) && typeof part.text === 'string') text += part.text;
  return text;
}
