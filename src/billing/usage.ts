/**
 * Token counts an upstream reports, read defensively: a malformed `usage` is no usage.
 *
 * `prompt` is always every input token, cached and cache-written ones included (how OpenAI
 * and OpenRouter count `prompt_tokens`); `cachedPrompt` and `cacheWrite` say how many of them
 * were cache reads and cache writes, which a model may price apart. `completion` is every
 * output token, reasoning included (OpenAI counts `reasoning_tokens` inside
 * `completion_tokens`); `reasoning` only says how many of them were reasoning, it is never
 * billed on its own. The optional counts are present only when above zero.
 */
export interface Usage {
  prompt: number;
  completion: number;
  /** Prompt tokens read from the provider's cache (a part of `prompt`). */
  cachedPrompt?: number;
  /** Prompt tokens written to the provider's cache (a part of `prompt`). */
  cacheWrite?: number;
  /** Of `cacheWrite`, the tokens written to live an hour (priced apart from five-minute writes). */
  cacheWrite1h?: number;
  /** Completion tokens spent on reasoning (a part of `completion`). */
  reasoning?: number;
}

/** A token count as providers report one: a non-negative safe integer. */
export const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** A count inside `details` (`prompt_tokens_details.cached_tokens`), or 0 when absent or malformed. */
function detail(details: unknown, field: string): number {
  if (!details || typeof details !== 'object') return 0;
  const v = (details as Record<string, unknown>)[field];
  return isCount(v) ? v : 0;
}

/**
 * A usage in its one shape, whatever a provider's report looked like: parts of zero are left
 * out, and cache reads and writes are parts of the prompt, so a report whose parts add up to
 * more than its prompt is read as a prompt of that many tokens (each part billed at its own
 * price, no reported token unbilled). Every reader of a provider's usage builds it here.
 */
export function usageOfParts(parts: { prompt: number; completion: number; cachedPrompt?: number; cacheWrite?: number; cacheWrite1h?: number; reasoning?: number }): Usage {
  const cachedPrompt = parts.cachedPrompt ?? 0;
  const cacheWrite = parts.cacheWrite ?? 0;
  const cacheWrite1h = Math.min(parts.cacheWrite1h ?? 0, cacheWrite);
  const reasoning = parts.reasoning ?? 0;
  const usage: Usage = { prompt: Math.max(parts.prompt, cachedPrompt + cacheWrite), completion: parts.completion };
  if (cachedPrompt > 0) usage.cachedPrompt = cachedPrompt;
  if (cacheWrite > 0) usage.cacheWrite = cacheWrite;
  if (cacheWrite1h > 0) usage.cacheWrite1h = cacheWrite1h;
  if (reasoning > 0) usage.reasoning = reasoning;
  return usage;
}

/**
 * The usage with its parts read from the `<field>_details` objects beside the counts
 * (`prompt_tokens_details`, `input_tokens_details`, `completion_tokens_details`, ...).
 */
function withDetails(u: Record<string, unknown>, prompt: number, completion: number, promptField: string, completionField: string | null): Usage {
  const promptDetails = u[`${promptField}_details`];
  return usageOfParts({
    prompt,
    completion,
    cachedPrompt: detail(promptDetails, 'cached_tokens'),
    cacheWrite: detail(promptDetails, 'cache_write_tokens'),
    reasoning: completionField === null ? 0 : detail(u[`${completionField}_details`], 'reasoning_tokens'),
  });
}

/** Token counts from a chat or completions `usage` object, or null when it is missing or malformed. */
export function usageFrom(value: unknown): Usage | null {
  return usageOf(value, 'prompt_tokens', 'completion_tokens');
}

/** Token counts of a `usage` under the given field names (no completion field: 0), or null when missing or malformed. */
export function usageOf(value: unknown, promptField: string, completionField: string | null): Usage | null {
  if (!value || typeof value !== 'object') return null;
  const u = value as Record<string, unknown>;
  const p = u[promptField];
  const c = completionField === null ? 0 : u[completionField];
  return isCount(p) && isCount(c) ? withDetails(u, p, c, promptField, completionField) : null;
}
