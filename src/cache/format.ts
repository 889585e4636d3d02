/**
 * How a cached endpoint's answers are kept and replayed. An entry is the answer model's record
 * of an answer: the whole answer as a plain body of the client's API, and its usage as the
 * answer model reads it (what a hit is priced from). A stored plain answer is replayed as it
 * came, or as the events of a stream; a streamed answer is collected from the frames the
 * client got into the plain body it stands for.
 */
import type { Usage } from '../billing/usage.js';

export interface CacheEntry {
  /** The whole answer, as a plain (not streamed) body of the endpoint's API. */
  body: Record<string, unknown>;
  /** Its usage in the answer model (a hit's price is the list cost of this). */
  usage: Usage;
  /** Calls of priced hosted tools the answer made (`{web_search: 1}`): priced on a hit too. */
  tools?: Record<string, number> | null;
}

/** Collects a streamed answer, one client event's data at a time. */
export interface Collector {
  event(data: string): void;
  /** The plain body the stream stood for (its usage from `usage` when no event carried it); null when no whole answer came. */
  body(usage: Usage): Record<string, unknown> | null;
}

export interface CacheFormat {
  /** The endpoint's answers as SSE frames of a stream, for a streamed request served from `entry`. */
  stream(entry: CacheEntry, request: Record<string, unknown>): string;
  collect(): Collector;
}

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** An OpenAI-style `usage` object for the answer model's usage (the details only when there are some). */
export function openAIUsage(u: Usage): Record<string, unknown> {
  const out: Record<string, unknown> = { prompt_tokens: u.prompt, completion_tokens: u.completion, total_tokens: u.prompt + u.completion };
  if (u.cachedPrompt || u.cacheWrite) {
    out.prompt_tokens_details = { cached_tokens: u.cachedPrompt ?? 0, ...(u.cacheWrite ? { cache_write_tokens: u.cacheWrite } : {}) };
  }
  if (u.reasoning) out.completion_tokens_details = { reasoning_tokens: u.reasoning };
  return out;
}

export const sse = (value: unknown, event?: string): string => `${event ? `event: ${event}\n` : ''}data: ${JSON.stringify(value)}\n\n`;
