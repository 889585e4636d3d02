/**
 * Serves node:http's (req, res) for /v1 through the gateway's own bridge (node-lane.ts)
 * instead of the server adapter's, when no plugin is to see the request (a plugin gets the
 * adapter's full Request). Everything else goes to the adapter.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { errorResponse, GatewayError } from '../errors.js';
import type { Logger } from '../observability/log.js';
import type { GatewayServerContext } from '../pipeline/types.js';
import { NodeRequest, writeAnswer } from './node-lane.js';

type Handle = (request: Request, serverContext: GatewayServerContext, late: Record<string, string> | null) => Promise<Response>;

/** The adapter, with node:http's /v1 exchanges taken by the bridge. */
export function withNodeBridge<T extends object>(adapter: T, handle: Handle, v1Slash: string, log: Logger): T {
  function bridge(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const late: Record<string, string> = {};
    return handle(new NodeRequest(req, res) as unknown as Request, { req }, late)
      .catch((err: unknown) => {
        log.error({ msg: 'unexpected error', err });
        return errorResponse(new GatewayError('internal_error', 'Internal error.'), late['x-request-id'] ?? 'unknown');
      })
      .then((response) => writeAnswer(req, res, response, late))
      .catch((err: unknown) => {
        // No answer can be sent now (its head may be out already): end the exchange.
        log.error({ msg: 'writing an answer failed', err: String(err) });
        res.destroy(err instanceof Error ? err : new Error(String(err)));
      });
  }
  return new Proxy(adapter, {
    // EventEmitter calls a listener as `listener.apply(server, args)`: the adapter's own proxy
    // would hand out an `apply` bound to its handler, past this proxy's apply trap.
    get(target, prop, receiver) {
      if (prop === 'apply' || prop === 'call' || prop === 'bind') return Function.prototype[prop];
      return Reflect.get(target, prop, receiver);
    },
    apply(target, thisArg, args: unknown[]) {
      const [req, res] = args;
      if (args.length === 2 && isNodeExchange(req, res) && req.url?.startsWith(v1Slash)) return bridge(req, res as ServerResponse);
      return Reflect.apply(target as (...a: unknown[]) => unknown, thisArg, args);
    },
  });
}

/**
 * Whether a call's arguments are node:http's HTTP/1 request, its body still unread, and its
 * response (not a framework's next(), HTTP/2's compatibility objects, or a request whose body
 * a middleware already read into `req.body`: the adapter takes those).
 */
function isNodeExchange(req: unknown, res: unknown): req is IncomingMessage & { url?: string } {
  const r = req as (Partial<IncomingMessage> & { body?: unknown }) | null;
  const w = res as Partial<ServerResponse> | null;
  return (
    typeof r === 'object' &&
    r !== null &&
    typeof r.on === 'function' &&
    typeof r.read === 'function' &&
    typeof r.headers === 'object' &&
    r.httpVersionMajor === 1 &&
    r.body === undefined &&
    r.readableEnded === false &&
    typeof w === 'object' &&
    w !== null &&
    typeof w.writeHead === 'function' &&
    typeof w.end === 'function'
  );
}
