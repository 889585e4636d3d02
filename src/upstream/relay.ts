/**
 * Calling an upstream through its circuit breaker (open: 503 model_unavailable with Retry-After),
 * and turning its failures into the gateway's errors (502 upstream_error, 504 upstream_timeout).
 */
import type { Model } from '../catalog/catalog.js';
import type { Core, RequestContext } from '../core.js';
import { pluginKey } from '../plugins.js';
import { GatewayError } from '../errors.js';
import { upstreamFailure, type UpstreamCall, type UpstreamResponse } from './client.js';
import { SpanStatusCode } from '@opentelemetry/api';
import type { Logger } from '../log.js';
import { failureCause } from '../observability/logs.js';
import type { CallRecord } from '../observability/record.js';
import { startUpstreamSpan } from '../observability/traces.js';

/** Request headers sent upstream: built from scratch, never copied from the client. */
export function upstreamHeaders(requestId: string, contentType = 'application/json'): Record<string, string> {
  return { 'content-type': contentType, accept: '*/*', 'x-request-id': requestId };
}

/**
 * Calls an upstream through its circuit breaker. With the request's `record`, the wait for
 * the answer's headers is timed, the call is a child span whose trace context travels
 * upstream, and a transport failure is logged with its cause (DNS, connect refused, TLS,
 * timeout, reset).
 */
export async function callUpstream(core: Core, upstreamName: string, call: UpstreamCall, record?: CallRecord): Promise<UpstreamResponse> {
  const upstream = core.upstreams.get(upstreamName);
  if (!upstream) throw new GatewayError('internal_error', `No upstream named ${upstreamName}.`);
  const admitted = core.breaker.admit(upstreamName);
  if (!admitted.ok) {
    throw new GatewayError('model_unavailable', 'The model is temporarily unavailable. Try again later.', {
      headers: { 'retry-after': String(admitted.retryAfterS) },
    });
  }
  const span = record ? startUpstreamSpan(record.span, upstreamName, call.path, call.headers) : null;
  const started = performance.now();
  let res: UpstreamResponse;
  try {
    res = await upstream.call(call);
  } catch (err) {
    if (record) record.upstreamMs += performance.now() - started;
    span?.setStatus({ code: SpanStatusCode.ERROR, message: failureCause(err) });
    span?.end();
    if (call.signal?.aborted) throw err;
    core.breaker.failure(upstreamName);
    core.log.warn({
      msg: 'upstream failure',
      request_id: call.headers['x-request-id'],
      upstream: upstreamName,
      path: call.path,
      cause: failureCause(err),
      error: err instanceof Error ? err.message : String(err),
    });
    throw upstreamFailure(err, upstreamName);
  }
  if (record) record.upstreamMs += performance.now() - started;
  span?.setAttribute('http.response.status_code', res.status);
  if (res.status >= 500) span?.setStatus({ code: SpanStatusCode.ERROR });
  span?.end();
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
    // The upstream's own message (its key redacted by the transport), when it gave one.
    error: err.upstreamMessage ?? err.message,
  });
  return err;
}

async function errorOf(res: UpstreamResponse, upstreamName: string): Promise<GatewayError & { upstreamMessage?: string }> {
  let text = '';
  try {
    text = await res.text();
  } catch {
    // The status alone decides.
  }
  if (res.status >= 500 || res.status === 401 || res.status === 402 || res.status === 403) {
    // The client is not told the upstream's words (they are about our provider account); the log is.
    return Object.assign(new GatewayError('upstream_error', `The upstream "${upstreamName}" failed (status ${res.status}).`), {
      upstreamMessage: text.slice(0, 500),
    });
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

/**
 * The body to send upstream once the plugins' onUpstreamRequest hooks have seen it: `encoded`
 * as it is when no plugin replaced it (the common case costs nothing), else the replacement
 * as JSON. Each plugin sees the body the plugins before it left.
 */
export async function pluginBody(
  core: Core,
  ctx: RequestContext,
  model: Model,
  path: string,
  body: Record<string, unknown>,
  encoded: string | Uint8Array,
): Promise<string | Uint8Array> {
  const replaced = await pluginFields(core, ctx, model, path, body);
  return replaced ? JSON.stringify(replaced) : encoded;
}

/** Runs onUpstreamRequest over `body`; the replacement, or null when no plugin replaced it. */
export async function pluginFields(
  core: Core,
  ctx: RequestContext,
  model: Model,
  path: string,
  body: Record<string, unknown>,
): Promise<Record<string, unknown> | null> {
  if (!core.hooks.has('onUpstreamRequest')) return null;
  let current = body;
  let replaced = false;
  await core.hooks.run('onUpstreamRequest', {
    request: ctx.request,
    requestId: ctx.requestId,
    key: pluginKey(ctx.key),
    model: { id: model.id, upstream: model.upstream, upstreamModel: model.upstreamModel },
    path,
    // A copy: a plugin that edits it in place without setBody changes nothing.
    get body() {
      return JSON.parse(JSON.stringify(current)) as Record<string, unknown>;
    },
    setBody(next: Record<string, unknown>) {
      current = next;
      replaced = true;
    },
  });
  return replaced ? current : null;
}
