/**
 * Calling an upstream through its circuit breaker (open: 503 model_unavailable with Retry-After),
 * and turning its failures into the gateway's errors (502 upstream_error, 504 upstream_timeout).
 */
import type { Core } from '../core.js';
import { GatewayError } from '../errors.js';
import { upstreamFailure, type UpstreamCall, type UpstreamResponse } from './client.js';

/** Request headers sent upstream: built from scratch, never copied from the client. */
export function upstreamHeaders(requestId: string, contentType = 'application/json'): Record<string, string> {
  return { 'content-type': contentType, accept: '*/*', 'x-request-id': requestId };
}

export async function callUpstream(core: Core, upstreamName: string, call: UpstreamCall): Promise<UpstreamResponse> {
  const upstream = core.upstreams.get(upstreamName);
  if (!upstream) throw new GatewayError('internal_error', `No upstream named ${upstreamName}.`);
  const admitted = core.breaker.admit(upstreamName);
  if (!admitted.ok) {
    throw new GatewayError('model_unavailable', 'The model is temporarily unavailable. Try again later.', {
      headers: { 'retry-after': String(admitted.retryAfterS) },
    });
  }
  let res: UpstreamResponse;
  try {
    res = await upstream.call(call);
  } catch (err) {
    if (call.signal?.aborted) throw err;
    core.breaker.failure(upstreamName);
    throw upstreamFailure(err, upstreamName);
  }
  if (res.status >= 500) core.breaker.failure(upstreamName);
  else core.breaker.success(upstreamName);
  return res;
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
 * except 401 / 402 / 403: those are about the gateway's own upstream account, so the client
 * gets 502 instead of being told its key or wallet is wrong. 5xx is 502.
 */
export async function upstreamError(res: UpstreamResponse, upstreamName: string): Promise<GatewayError> {
  let text = '';
  try {
    text = await res.text();
  } catch {
    // The status alone decides.
  }
  if (res.status >= 500 || res.status === 401 || res.status === 402 || res.status === 403) {
    return new GatewayError('upstream_error', `The upstream "${upstreamName}" failed (status ${res.status}).`);
  }
  let upstreamErr: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(text) as { error?: unknown };
    if (parsed && typeof parsed.error === 'object' && parsed.error) upstreamErr = parsed.error as Record<string, unknown>;
    else if (parsed && typeof parsed.error === 'string') upstreamErr = { message: parsed.error };
  } catch {
    // Not JSON: keep a short excerpt of the text.
  }
  const message =
    typeof upstreamErr.message === 'string' ? upstreamErr.message : text.slice(0, 500) || `Upstream answered ${res.status}.`;
  const headers: Record<string, string> = {};
  const retryAfter = res.header('retry-after');
  if (res.status === 429 && retryAfter) headers['retry-after'] = retryAfter;
  const code = typeof upstreamErr.code === 'string' ? upstreamErr.code : (CODE_BY_STATUS[res.status] ?? 'upstream_error');
  return new GatewayError(code, message, {
    status: res.status,
    type: typeof upstreamErr.type === 'string' ? upstreamErr.type : 'invalid_request_error',
    param: typeof upstreamErr.param === 'string' ? upstreamErr.param : null,
    headers,
  });
}
