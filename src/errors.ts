/**
 * The one error class and the one writer of the OpenAI-shaped error envelope:
 *   {"error": {"message", "type", "code", "param", "metadata"?}}
 */

import { Response } from '@whatwg-node/server';
import { withHeaders } from './http/objects.js';

export type ErrorCode =
  | 'invalid_json'
  | 'invalid_request'
  | 'context_length_exceeded'
  | 'content_filter'
  | 'unsupported_tool'
  | 'invalid_api_key'
  | 'insufficient_quota'
  | 'model_not_allowed'
  | 'permission_denied'
  | 'model_not_found'
  | 'knowledge_not_found'
  | 'brand_not_found'
  | 'job_not_found'
  | 'not_found'
  | 'method_not_allowed'
  | 'request_too_large'
  | 'request_timeout'
  | 'rate_limit_exceeded'
  | 'idempotency_conflict'
  | 'idempotency_mismatch'
  | 'idempotency_key_unreplayable'
  | 'upstream_error'
  | 'model_unavailable'
  | 'service_unavailable'
  | 'guardrail_unavailable'
  | 'upstream_timeout'
  | 'internal_error'
  | 'client_closed'
  | (string & {});

const TYPES: Record<string, [status: number, type: string]> = {
  invalid_json: [400, 'invalid_request_error'],
  invalid_request: [400, 'invalid_request_error'],
  /**
   * The client closed the request before its answer: nobody reads it, but the access line and
   * the metrics say so (499, nginx's word for it), apart from the client's own mistakes.
   */
  client_closed: [499, 'invalid_request_error'],
  context_length_exceeded: [400, 'invalid_request_error'],
  /** A guardrail refused the prompt (its id in `metadata.guardrail`). */
  content_filter: [400, 'invalid_request_error'],
  unsupported_tool: [400, 'invalid_request_error'],
  invalid_api_key: [401, 'authentication_error'],
  insufficient_quota: [402, 'insufficient_quota'],
  model_not_allowed: [403, 'permission_error'],
  permission_denied: [403, 'permission_error'],
  model_not_found: [404, 'invalid_request_error'],
  knowledge_not_found: [404, 'invalid_request_error'],
  brand_not_found: [404, 'invalid_request_error'],
  job_not_found: [404, 'invalid_request_error'],
  not_found: [404, 'invalid_request_error'],
  method_not_allowed: [405, 'invalid_request_error'],
  idempotency_conflict: [409, 'invalid_request_error'],
  request_timeout: [408, 'invalid_request_error'],
  request_too_large: [413, 'invalid_request_error'],
  idempotency_mismatch: [422, 'invalid_request_error'],
  idempotency_key_unreplayable: [422, 'invalid_request_error'],
  rate_limit_exceeded: [429, 'rate_limit_exceeded'],
  internal_error: [500, 'internal_error'],
  upstream_error: [502, 'upstream_error'],
  model_unavailable: [503, 'upstream_error'],
  service_unavailable: [503, 'service_unavailable'],
  /** A guardrail could not answer: the call is refused rather than let through (fail closed). */
  guardrail_unavailable: [503, 'service_unavailable'],
  upstream_timeout: [504, 'upstream_error'],
};

export interface GatewayErrorInit {
  param?: string | null;
  metadata?: Record<string, unknown>;
  headers?: Record<string, string>;
  /** Overrides the code's status (an upstream 4xx is relayed with its own status). */
  status?: number;
  /** Overrides the code's type (an upstream 4xx keeps its own type). */
  type?: string;
  cause?: unknown;
  /**
   * The model a refusal concerns (a model the key may not call): never on the wire, but kept
   * on the request's record so its access line and the console's per-model counts name it.
   */
  model?: string;
}

export class GatewayError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  readonly type: string;
  readonly param: string | null;
  readonly metadata: Record<string, unknown> | undefined;
  readonly headers: Record<string, string>;
  /** The model a refusal concerns, for the request's record (not sent). */
  readonly model: string | undefined;

  constructor(code: ErrorCode, message: string, init: GatewayErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'GatewayError';
    const [status, type] = TYPES[code] ?? [500, 'internal_error'];
    this.code = code;
    this.status = init.status ?? status;
    this.type = init.type ?? type;
    this.param = init.param ?? null;
    this.metadata = init.metadata;
    this.headers = init.headers ?? {};
    this.model = init.model;
  }

  /** The envelope body. */
  toJSON(): { error: Record<string, unknown> } {
    const error: Record<string, unknown> = {
      message: this.message,
      type: this.type,
      code: this.code,
      param: this.param,
    };
    if (this.metadata) error.metadata = this.metadata;
    return { error };
  }
}

export function isGatewayError(value: unknown): value is GatewayError {
  return value instanceof GatewayError;
}

/** Anthropic's error types by status, for the Messages API's clients. */
const ANTHROPIC_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  408: 'timeout_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  503: 'overloaded_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};

/** The error in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`, its type told by its status. */
export function anthropicError(err: GatewayError): { type: 'error'; error: { type: string; message: string } } {
  const type = ANTHROPIC_TYPES[err.status] ?? (err.status < 500 ? 'invalid_request_error' : 'api_error');
  return { type: 'error', error: { type, message: err.message } };
}

/** The shape an error body takes: the gateway's own envelope, or Anthropic's on the Messages API. */
export type ErrorShape = 'openai' | 'anthropic';

/** Writes the envelope. The only place an error Response is built. */
export function errorResponse(err: GatewayError, requestId: string, extraHeaders: Record<string, string> = {}, shape: ErrorShape = 'openai'): Response {
  const body = JSON.stringify(shape === 'anthropic' ? anthropicError(err) : err.toJSON());
  // The envelope's own headers win over the error's, which win over the request's.
  const headers = withHeaders(
    withHeaders({ 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), 'x-request-id': requestId }, err.headers),
    extraHeaders,
  );
  if (err.status === 402) headers['x-should-retry'] = 'false';
  return new Response(body, { status: err.status, headers });
}

export const errors = {
  invalid(param: string, message: string): GatewayError {
    return new GatewayError('invalid_request', message, { param });
  },
  /** A new call while the gateway drains, or an answer whose call shutdown released before it went out. */
  shuttingDown(): GatewayError {
    return new GatewayError('service_unavailable', 'The gateway is shutting down. Retry the request.', {
      headers: { 'retry-after': '1', connection: 'close' },
    });
  },
  /** What a stream or an audio answer ends with when shutdown's grace period cut it. */
  cutByShutdown(what = 'answer'): GatewayError {
    return new GatewayError('service_unavailable', `The gateway is shutting down; the ${what} was cut.`);
  },
  /** An upstream answer that cannot be read as the endpoint's answer. */
  malformedAnswer(upstream: string, what = 'answer'): GatewayError {
    return new GatewayError('upstream_error', `The upstream "${upstream}" sent a malformed ${what}.`);
  },
  /** A stream event that cannot be read as one. */
  malformedEvent(): GatewayError {
    return new GatewayError('upstream_error', 'The upstream sent a malformed stream event.');
  },
  /** An error event an upstream sent mid-stream, with its message when it gave one. */
  upstreamFailedMidStream(error: unknown): GatewayError {
    const message = (error as { message?: unknown } | null)?.message;
    return new GatewayError('upstream_error', typeof message === 'string' ? message : 'The upstream failed mid-stream.');
  },
  storeDown(cause?: unknown): GatewayError {
    return new GatewayError('service_unavailable', 'A store the request needs is unreachable. Try again shortly.', {
      headers: { 'retry-after': '1' },
      cause,
    });
  },
};
