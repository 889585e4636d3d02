/**
 * Every answer names its request (and, once authenticated, carries the key's rate-limit
 * state); a thrown error becomes the one error envelope. Unexpected errors are masked (500
 * internal_error, logged with the request id), never echoed.
 */
import { type ErrorShape, errorResponse, errors, GatewayError } from '../../errors.js';
import type { Logger } from '../../observability/log.js';
import { isStoreUnavailable } from '../../stores/errors.js';
import { type Hooks, pluginKey } from '../hooks.js';
import type { Stage } from '../types.js';

/** `shapeOf`: the error shape a path's clients read (Anthropic's on the Messages API). */
export function errorEnvelope(hooks: Hooks, log: Logger, shapeOf: (path: string) => ErrorShape = () => 'openai'): Stage {
  return async (x, next) => {
    try {
      const res = await next();
      if (x.late) for (const k in x.headers) x.late[k] = x.headers[k]!;
      else for (const k in x.headers) res.headers.set(k, x.headers[k]!);
      return res;
    } catch (err) {
      if (hooks.has('onError')) await hooks.run('onError', { error: err, requestId: x.requestId, key: x.key ? pluginKey(x.key) : null });
      const gErr = asGatewayError(err, x.requestId, x.request.signal?.aborted === true, log);
      const r = x.observed.record;
      r.errorCode = gErr.code;
      // A refusal before any hold (a model the key may not call) still names its model, so
      // the access line and the per-model counts show it.
      if (r.model === null && gErr.model !== undefined) r.model = gErr.model;
      const meta = gErr.metadata as { limit?: unknown; limit_source?: unknown } | undefined;
      const limit = meta?.limit ?? meta?.limit_source;
      if (typeof limit === 'string') r.limit = limit;
      return errorResponse(gErr, x.requestId, x.headers, shapeOf(x.path));
    }
  };
}

/** The error a client is told: its own when it is a GatewayError, else a masked one. */
export function asGatewayError(err: unknown, requestId: string, clientGone: boolean, log: Logger): GatewayError {
  if (err instanceof GatewayError) return err;
  if (isStoreUnavailable(err)) {
    log.warn({ msg: 'store unavailable', request_id: requestId, err: err.message });
    return errors.storeDown(err);
  }
  // The client went away mid-request; nobody will read this answer.
  if (clientGone) return new GatewayError('client_closed', 'The client closed the request.');
  log.error({ msg: 'unexpected error', request_id: requestId, err });
  return new GatewayError('internal_error', `Internal error. Quote request id ${requestId} when reporting it.`);
}
