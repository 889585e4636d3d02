/**
 * Tokens per minute per key: an exact sliding window of 60 s in the limit store. A call takes
 * its estimated tokens (the prompt as the hold counts it, plus the most output it may produce)
 * when they fit the window, after the key's request rate and before its hold; when the call
 * is billed, its take is corrected to the tokens it used (to none when it produced nothing).
 * Refused: 429 `key_tpm`, with Retry-After when enough of the window frees within it.
 */
import { GatewayError } from '../errors.js';
import type { Logger } from '../observability/log.js';
import type { ApiKeyRecord, LimitStore, TokenResult } from '../stores/types.js';
import { WINDOW_MS } from './window.js';

/** A call's take from its key's window. */
export interface TokenTake {
  /** Sets the take to what the call used. Never throws: a failed correction is logged (the take leaves the window within a minute). */
  correct(tokens: number): Promise<void>;
}

export interface TokenLimiter {
  /** The configured limit for keys that set none; null: such keys have no token limit. */
  readonly defaultLimit: number | null;
  /**
   * Takes `tokens` for the call `takeId` from its key's window, writing the token policy's
   * headers into `headers`; throws the 429 when they do not fit. Null when the key has no
   * token limit.
   */
  take(key: ApiKeyRecord, takeId: string, tokens: number, headers: Record<string, string>): Promise<TokenTake | null>;
}

/** Appends an item to a structured-field list header (the request policy's item comes first). */
function append(headers: Record<string, string>, name: string, item: string): void {
  headers[name] = headers[name] ? `${headers[name]}, ${item}` : item;
}

function writeHeaders(r: TokenResult, headers: Record<string, string>): void {
  const resetS = r.allowed ? Math.max(r.resetMs > 0 ? 1 : 0, Math.ceil(r.resetMs / 1000)) : Math.ceil(Math.max(0, r.resetMs) / 1000);
  append(headers, 'ratelimit-policy', `"tokens";q=${r.limit};w=${WINDOW_MS / 1000}`);
  append(headers, 'ratelimit', `"tokens";r=${r.remaining};t=${resetS}`);
  headers['x-ratelimit-limit-tokens'] = String(r.limit);
  headers['x-ratelimit-remaining-tokens'] = String(r.remaining);
  headers['x-ratelimit-reset-tokens'] = `${resetS}s`;
}

function refused(r: TokenResult, tokens: number, headers: Record<string, string>): GatewayError {
  const base = `Rate limit reached for this API key: ${r.limit} tokens per minute, and this request needs up to ${tokens} (its prompt and max_tokens).`;
  if (r.resetMs < 0) {
    return new GatewayError('rate_limit_exceeded', `${base} Ask for fewer max_tokens or send a shorter prompt.`, {
      metadata: { limit: 'key_tpm' },
      headers: { ...headers },
    });
  }
  const seconds = Math.min(59, Math.max(1, Math.ceil(r.resetMs / 1000)));
  return new GatewayError('rate_limit_exceeded', `${base} Try again in ${seconds} s.`, {
    metadata: { limit: 'key_tpm' },
    headers: { ...headers, 'retry-after': String(seconds), 'retry-after-ms': String(Math.max(1, Math.ceil(r.resetMs))) },
  });
}

export function createTokenLimiter(defaultLimit: number | null, limits: LimitStore, log: Logger): TokenLimiter {
  return {
    defaultLimit,
    async take(key, takeId, tokens, headers) {
      const limit = key.tokensPerMinute ?? defaultLimit;
      if (limit === null) return null;
      const bucket = `tpm:${key.id}`;
      const r = await limits.takeTokens(bucket, takeId, tokens, limit, WINDOW_MS, key.accountId);
      writeHeaders(r, headers);
      if (!r.allowed) throw refused(r, tokens, headers);
      return {
        async correct(used) {
          try {
            await limits.setTokens(bucket, takeId, Math.max(0, Math.ceil(used)), key.accountId);
          } catch (err) {
            log.warn({ msg: 'correcting a token take failed; it leaves the window within a minute', key_id: key.id, err: String(err) });
          }
        },
      };
    },
  };
}
