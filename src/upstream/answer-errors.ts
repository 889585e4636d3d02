/**
 * An upstream's failed answer as the client's error: its status relayed for a 4xx that is the
 * client's to fix, 502 for what is about the gateway's own upstream account or a 5xx, and the
 * upstream's words cleaned of every configured upstream key.
 */
import type { GatewayConfig } from '../options.js';
import { GatewayError } from '../errors.js';
import type { Logger } from '../observability/log.js';
import type { UpstreamResponse } from './client.js';
import type { Redact } from './key-redactor.js';

/**
 * How the text of a failed answer is cleaned before upstreamError relays or logs it: every
 * configured upstream key's material removed (any upstream may echo any key it was given).
 * Set by callUpstream, which every upstream answer comes through.
 */
const errorRedaction = new WeakMap<UpstreamResponse, Redact>();

/** Marks a failed answer's text to be cleaned with `redact` when it is read. */
export function redactErrorOf(res: UpstreamResponse, redact: Redact): void {
  errorRedaction.set(res, redact);
}

/** The code of a relayed upstream 4xx that named none. */
const CODE_BY_STATUS: Record<number, string> = {
  400: 'invalid_request',
  404: 'not_found',
  408: 'upstream_timeout',
  413: 'request_too_large',
  422: 'invalid_request',
  429: 'rate_limit_exceeded',
};

/**
 * The error for a non-2xx upstream answer. 4xx is relayed with its status and message,
 * except 401 / 402 / 403 and a 429 for want of credit: those are about the gateway's own
 * upstream account, so the client gets 502 instead of being told its key or wallet is wrong.
 * 5xx is 502.
 */
export async function upstreamError(
  res: UpstreamResponse,
  upstreamName: string,
  /** Where to log the failure (its status and the upstream's message), and the request's id. */
  report?: { log: Logger; requestId: string },
): Promise<GatewayError> {
  const err = await errorOf(res, upstreamName);
  report?.log.warn({
    msg: 'upstream failure',
    request_id: report.requestId,
    upstream: upstreamName,
    cause: `status ${res.status}`,
    status: res.status,
    // The upstream's own message (without upstream key material), when it gave one.
    error: err.upstreamMessage ?? err.message,
  });
  return err;
}

async function errorOf(res: UpstreamResponse, upstreamName: string): Promise<GatewayError & { upstreamMessage?: string }> {
  const redact = errorRedaction.get(res) ?? ((t: string) => t);
  let text = '';
  try {
    text = await res.text();
  } catch {
    // The status alone decides.
  }
  return upstreamErrorOf(res.status, text, upstreamName, redact, res.header('retry-after'));
}

/** Words of a provider that say its refusal is about our account with it (its key, its credit). */
const ACCOUNT_WORDS = /credit balance is too low|api key not valid|api key expired|api key not found/i;

/**
 * Whether a 4xx is about the gateway's own account with the provider, not the client's request:
 * the client is then told the upstream failed (a 502), as for a 401, 402 or 403, and never the
 * provider's words about our key or credit. Not every provider says so with its status:
 * - OpenAI's "out of credit" is a 429 with code insufficient_quota (the client's own
 *   insufficient_quota means its wallet);
 * - Anthropic answers a low credit balance with a 400 invalid_request_error, and names
 *   authentication, permission and billing errors by their type;
 * - Gemini answers a bad key with a 400 INVALID_ARGUMENT whose details give the reason
 *   (API_KEY_INVALID, API_KEY_EXPIRED, ...).
 */
function aboutOurAccount(status: number, err: Record<string, unknown>): boolean {
  if (status === 429 && (err.code === 'insufficient_quota' || err.type === 'insufficient_quota')) return true;
  if (err.type === 'authentication_error' || err.type === 'permission_error' || err.type === 'billing_error') return true;
  if (Array.isArray(err.details) && err.details.some((d) => isKeyReason((d as { reason?: unknown } | null)?.reason))) return true;
  return typeof err.message === 'string' && ACCOUNT_WORDS.test(err.message);
}

const isKeyReason = (reason: unknown) => typeof reason === 'string' && reason.startsWith('API_KEY_');

/**
 * The client's error for an upstream's failed answer (`status`, its body `text`): the upstream's
 * own words (its message, code, type and param, with no upstream key material) for a refusal of
 * the request, the gateway's for a failure of the upstream or of our account with it.
 */
export function upstreamErrorOf(
  status: number,
  rawText: string,
  upstreamName: string,
  redact: Redact,
  retryAfter?: string | null,
): GatewayError & { upstreamMessage?: string } {
  // Cleaned before anything is taken from it: an excerpt cut mid-key leaves no piece behind.
  const text = redact(rawText);
  // A 1xx or 3xx (a redirect: not followed) is no answer the client can use, and its page may
  // name where it points (a query key included): the upstream failed, in the gateway's words.
  if (status >= 500 || status < 400 || status === 401 || status === 402 || status === 403) {
    // The client is not told the upstream's words (they are about our provider account); the log is.
    return Object.assign(new GatewayError('upstream_error', `The upstream "${upstreamName}" failed (status ${status}).`), {
      upstreamMessage: text.slice(0, 500),
    });
  }
  let upstreamErr: Record<string, unknown> = {};
  try {
    // Gemini's OpenAI-compatible endpoint may wrap its error in a list.
    const body = JSON.parse(text) as unknown;
    const parsed = (Array.isArray(body) ? body[0] : body) as { error?: unknown } | null;
    if (parsed && typeof parsed.error === 'object' && parsed.error) upstreamErr = parsed.error as Record<string, unknown>;
    else if (parsed && typeof parsed.error === 'string') upstreamErr = { message: parsed.error };
  } catch {
    // Not JSON: keep a short excerpt of the text.
  }
  if (aboutOurAccount(status, upstreamErr) || (typeof upstreamErr.message !== 'string' && ACCOUNT_WORDS.test(text.slice(0, 2000)))) {
    return Object.assign(new GatewayError('upstream_error', `The upstream "${upstreamName}" failed (status ${status}).`), {
      upstreamMessage: text.slice(0, 500),
    });
  }
  const message = typeof upstreamErr.message === 'string' ? upstreamErr.message : text.slice(0, 500) || `Upstream answered ${status}.`;
  const headers: Record<string, string> = {};
  if (status === 429 && retryAfter) headers['retry-after'] = retryAfter;
  // Once more on the parsed fields: JSON escapes (`\u0073k-...`) hide a key from the raw text.
  // Only the upstream's own words are cleaned, never the gateway's codes put in their place.
  const code = typeof upstreamErr.code === 'string' ? redact(upstreamErr.code) : (CODE_BY_STATUS[status] ?? 'upstream_error');
  return new GatewayError(code, redact(message), {
    status,
    // An upstream that names no type (Gemini's errors carry a status word instead) gets the
    // type the gateway's own refusal of that status has: a 429 is a rate limit, not a bad request.
    type: typeof upstreamErr.type === 'string' ? redact(upstreamErr.type) : status === 429 ? 'rate_limit_exceeded' : 'invalid_request_error',
    param: typeof upstreamErr.param === 'string' ? redact(upstreamErr.param) : null,
    headers,
  });
}

/**
 * The key of upstream `name` as far as it must be hidden from clients ('' when it has none, or
 * one too short to search for without hiding ordinary text).
 */
export function upstreamKeyOf(cfg: Pick<GatewayConfig, 'upstreams'>, name: string): string {
  const u = cfg.upstreams[name];
  return u && 'apiKey' in u && typeof u.apiKey === 'string' && u.apiKey.length >= 8 ? u.apiKey : '';
}
