/** Where a request goes: its path and query, read from the request target only. */
import type { GatewayServerContext } from '../pipeline/types.js';

/**
 * The path and query of a request, read from the request target only. On node:http the
 * server adapter builds `request.url` by pasting the Host header in front of the target, so a
 * Host such as "x/v1/images/generations?" would move the path; node's own `req.url` is the
 * target as sent. Elsewhere `request.url` was parsed as a URL, whose authority cannot hold a
 * "/" or "?".
 */
export function requestTarget(request: Request, serverContext: GatewayServerContext | undefined): { path: string; query: string } {
  let target = serverContext?.req?.originalUrl ?? serverContext?.req?.url;
  if (typeof target !== 'string' || !target.startsWith('/')) {
    // An adapter's Request, or an absolute-form target ("http://host/path"): its URL parse.
    const url = typeof target === 'string' && target !== '' && target !== '*' ? target : request.url;
    const authority = url.indexOf('//');
    const pathStart = url.indexOf('/', authority === -1 ? 0 : authority + 2);
    target = pathStart === -1 ? '/' : url.slice(pathStart);
  }
  const queryStart = target.indexOf('?');
  const end = queryStart === -1 ? target.length : queryStart;
  // A fragment is never part of the path or the query.
  const hash = target.indexOf('#');
  return {
    path: target.slice(0, hash !== -1 && hash < end ? hash : end),
    query: queryStart === -1 ? '' : target.slice(queryStart + 1, hash > queryStart ? hash : undefined),
  };
}
