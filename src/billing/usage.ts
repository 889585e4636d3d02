/** Token counts an upstream reports, read defensively: a malformed `usage` is no usage. */

export interface Usage {
  /** Every input token, cache reads and writes included. */
  prompt: number;
  completion: number;
  /** Of `prompt`, the tokens read from the provider's prompt cache. */
  cachedPrompt?: number;
  /** Of `prompt`, the tokens written to the provider's prompt cache. */
  cacheWrite?: number;
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** Token counts from a chat or completions `usage` object, or null when it is missing or malformed. */
export function usageFrom(value: unknown): Usage | null {
  if (!value || typeof value !== 'object') return null;
  const u = value as { prompt_tokens?: unknown; completion_tokens?: unknown };
  return isCount(u.prompt_tokens) && isCount(u.completion_tokens) ? { prompt: u.prompt_tokens, completion: u.completion_tokens } : null;
}

/** Token counts of a `usage` under the given field names (no completion field: 0), or null when missing or malformed. */
export function usageOf(value: unknown, promptField: string, completionField: string | null): Usage | null {
  if (!value || typeof value !== 'object') return null;
  const u = value as Record<string, unknown>;
  const p = u[promptField];
  const c = completionField === null ? 0 : u[completionField];
  return isCount(p) && isCount(c) ? { prompt: p, completion: c } : null;
}
