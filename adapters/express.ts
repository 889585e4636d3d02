/**
 * model-gateway/express: the gateway as Express middleware (Express 5, and 4).
 *
 *   app.use('/api', toExpress(gateway));   // -> /api/v1/chat/completions
 *
 * Mount it at any prefix: Express strips the mount path, so leave the gateway's `basePath`
 * unset. Everything under the prefix is the gateway's. Mount it before any body parser. If a
 * parser ran anyway (`express.json()` in front), the parsed body is re-serialised: a JSON
 * object becomes JSON again (bytes may differ from what the client sent, and the parser's
 * own size limit and error page apply first), a Buffer or string from `express.raw()` /
 * `express.text()` is passed as is.
 *
 * The client address for the per-IP throttle is the socket's peer; the gateway's own
 * `trustProxy` decides whether X-Forwarded-For is believed (Express's `trust proxy` is not used).
 */
import type { ServerResponse } from 'node:http';
import type { Gateway } from '../src/gateway.js';
import { handOver, sendResponse, serverContextOf, toFetchRequest, trackWrite, type NodeRequest } from './internal/node.js';

/** The parts of an Express request the middleware reads (Express 4 and 5 both fit). */
export interface ExpressRequestLike extends NodeRequest {
  /** Set by a body parser that ran before the gateway. */
  body?: unknown;
}

export type ExpressMiddleware = (req: ExpressRequestLike, res: ServerResponse, next: (err?: unknown) => void) => void;

export function toExpress(gateway: Gateway): ExpressMiddleware {
  return (req, res, next) => {
    // The host app answered already (a timeout middleware that calls next() after its 503):
    // nobody would get this call's answer, so it is never made.
    if (res.headersSent || res.writableEnded) return;
    let request: Request;
    // Express removed the mount prefix from req.url and left the rest as the client sent it.
    const path = req.url ?? '/';
    try {
      request = toFetchRequest(req, res, path, parsedBody(req));
    } catch (err) {
      next(err);
      return;
    }
    trackWrite(gateway, res);
    Promise.resolve(gateway.fetch(request, serverContextOf(req, path)))
      .then((response) => (handOver(res, response) ? sendResponse(req, res, response) : undefined))
      .catch(next);
  };
}

/** The body a parser already read, re-serialised; undefined when the stream is still unread. */
function parsedBody(req: ExpressRequestLike): Uint8Array | string | undefined {
  if (!req.readableEnded) return undefined;
  const body = req.body;
  if (body instanceof Uint8Array || typeof body === 'string') return body;
  if (body !== null && typeof body === 'object') return JSON.stringify(body);
  return '';
}
