/**
 * Liveness and readiness, outside /v1, without a key and outside every limit, for GET and HEAD:
 *
 * - `/health` answers 200 while the process serves requests at all (seeding may still run);
 * - `/ready` answers 200 only when start-up finished and every store answers, else 503 in the
 *   error envelope, naming the part that is not ready in the message and in
 *   `metadata.checks`. What a part failed with is logged, not answered: the probe is public,
 *   and a Redis error names internal addresses.
 */
import { GatewayError, errorResponse } from '../../errors.js';
import { json } from '../../http/json.js';
import type { Logger } from '../../observability/log.js';
import type { Stores } from '../../stores/types.js';
import type { Metrics } from '../../observability/metrics.js';
import type { Stage } from '../types.js';

export type StartupState = 'pending' | 'ok' | 'failed';
type Check = 'ok' | 'pending' | 'failed' | 'unavailable' | 'draining';

/** A store ping that hangs (a custom store) must not hang the probe. */
const PING_TIMEOUT_MS = 5_000;

export interface Probes {
  /** The answer for `kind` (request method checked here: GET and HEAD only). */
  answer(kind: 'health' | 'ready', request: Request, requestId: string): Promise<Response>;
}

export function createProbes(deps: {
  stores: Stores;
  startup: () => StartupState;
  /** True once shutdown began: a load balancer should stop sending new calls. */
  draining?: () => boolean;
  log: Logger;
}): Probes {
  async function storage(requestId: string): Promise<Check> {
    if (!deps.stores.ping) return 'ok';
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        deps.stores.ping(),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no answer within ${PING_TIMEOUT_MS} ms`)), PING_TIMEOUT_MS);
        }),
      ]);
      return 'ok';
    } catch (err) {
      deps.log.warn({ msg: 'readiness: storage does not answer', request_id: requestId, err: (err as Error)?.message ?? String(err) });
      return 'unavailable';
    } finally {
      clearTimeout(timer);
    }
  }

  async function ready(requestId: string): Promise<Response> {
    const checks: Record<string, Check> = { startup: deps.startup(), storage: await storage(requestId) };
    if (deps.draining?.()) checks.shutdown = 'draining';
    const down = Object.entries(checks).filter(([, v]) => v !== 'ok');
    if (down.length === 0) return json(200, { status: 'ready', checks }, { 'x-request-id': requestId });
    const why = down.map(([part, state]) =>
      state === 'draining' ? 'the gateway is shutting down' : `${part} is ${state === 'unavailable' ? 'unavailable (it does not answer)' : state}`,
    );
    const err = new GatewayError('service_unavailable', `Not ready: ${why.join('; ')}.`, {
      metadata: { checks },
      headers: { 'retry-after': '1', 'cache-control': 'no-store' },
    });
    return errorResponse(err, requestId);
  }

  return {
    async answer(kind, request, requestId) {
      const method = request.method;
      if (method !== 'GET' && method !== 'HEAD') {
        // Thrown: the error stage answers it, and the access line and metrics name its code.
        throw new GatewayError('method_not_allowed', `Method ${method.slice(0, 20)} is not allowed on /${kind}.`, {
          headers: { allow: 'GET, HEAD' },
        });
      }
      // HEAD gets the GET answer: the HTTP server sends its status and headers, not its body.
      return kind === 'health' ? json(200, { status: 'ok' }, { 'x-request-id': requestId }) : ready(requestId);
    },
  };
}

/** Liveness, readiness and the metrics scrape answer while seeding runs, without a key and outside every limit. */
export function probesStage(paths: { health: string; ready: string; metrics: string | null }, probes: Probes, metrics: Metrics | null): Stage {
  return (x, next) => {
    if (x.path === paths.health) return probes.answer('health', x.request, x.requestId);
    if (x.path === paths.ready) return probes.answer('ready', x.request, x.requestId);
    if (metrics && x.path === paths.metrics) return metrics.answer(x.request, x.requestId);
    return next();
  };
}
