/**
 * The simulator's prompt cache, so cached-token billing can be tried without a provider: it
 * behaves like OpenAI's automatic caching. A prompt's prefix (everything before its last
 * turn) of at least 1,024 tokens is cached in steps of 128 tokens. The first call with a
 * prefix writes it (reported as `cache_write_tokens`, OpenRouter's field); a later call with
 * the same prefix reads it (`cached_tokens`). One cache per simulator, of bounded size.
 */
import { createHash } from 'node:crypto';

/** Shortest prefix cached, and the step the cached length goes in (OpenAI's). */
const MIN_TOKENS = 1024;
const STEP = 128;
/** Prefixes remembered; the oldest is forgotten first. */
const CAPACITY = 1000;

export interface CacheUse {
  /** Prompt tokens read from the cache. */
  cached: number;
  /** Prompt tokens written to the cache. */
  written: number;
}

export class PromptCache {
  private readonly seen = new Set<string>();

  /**
   * What a call whose prefix is `prefix` (`prefixTokens` long) reads from or writes to the
   * cache, never more than its `promptTokens`.
   */
  use(prefix: string, prefixTokens: number, promptTokens: number): CacheUse {
    const tokens = Math.min(prefixTokens, promptTokens);
    if (tokens < MIN_TOKENS) return { cached: 0, written: 0 };
    const length = tokens - (tokens % STEP);
    const digest = createHash('sha256').update(prefix).digest('base64');
    if (this.seen.has(digest)) return { cached: length, written: 0 };
    this.seen.add(digest);
    if (this.seen.size > CAPACITY) this.seen.delete(this.seen.values().next().value as string);
    return { cached: 0, written: length };
  }
}
