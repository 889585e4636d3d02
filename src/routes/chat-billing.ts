/** What the plain and the streamed chat answers share: the token counts and how a call is settled. */
import type { BilledCall } from '../billing/meter.js';
import type { Model } from '../catalog/catalog.js';
import type { Measurement } from '../stores/types.js';

export interface Usage {
  prompt: number;
  completion: number;
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** Token counts from an upstream `usage` object, or null when it is missing or malformed. */
export function usageFrom(value: unknown): Usage | null {
  if (!value || typeof value !== 'object') return null;
  const u = value as { prompt_tokens?: unknown; completion_tokens?: unknown };
  return isCount(u.prompt_tokens) && isCount(u.completion_tokens)
    ? { prompt: u.prompt_tokens, completion: u.completion_tokens }
    : null;
}

export interface ChatBilling {
  call: BilledCall;
  model: Model;
  /** The tokenizer's estimate of the prompt, for billing a stream that ended without usage. */
  promptTokens(): number;
  /** Settles `usage` measured as said (or releases when null: nothing was produced). */
  finish(usage: Usage | null, measured?: Measurement): void;
}
