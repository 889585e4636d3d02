/**
 * model-gateway/bun: a `fetch` handler for Bun.serve.
 *
 *   Bun.serve({ port: 3000, fetch: toBun(gateway) });   // -> /v1/chat/completions
 *
 * The client address for the per-IP throttle is `server.requestIP(request)`; the gateway's
 * `trustProxy` decides about X-Forwarded-For. Bun closes a connection idle for `idleTimeout`
 * seconds (10 by default): shorter than a slow upstream's silence before its answer, or the
 * gaps between an event stream's keep-alives. The handler therefore lifts that limit for
 * each gateway request (`server.timeout(request, 0)`); the gateway's own body and upstream
 * timeouts still bound it.
 */
import type { Gateway } from '../src/gateway.js';

/** The parts of Bun's `Server` the handler uses (no dependency on bun-types). */
export interface BunServerLike {
  requestIP(request: Request): { address: string } | null;
  timeout?(request: Request, seconds: number): void;
}

export type BunFetchHandler = (request: Request, server: BunServerLike) => Promise<Response>;

export function toBun(gateway: Gateway): BunFetchHandler {
  return async (request, server) => {
    server.timeout?.(request, 0);
    return gateway.fetch(request, { clientAddress: server.requestIP(request)?.address });
  };
}
