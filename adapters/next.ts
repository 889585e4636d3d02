/**
 * model-gateway/next: route handlers for the Next.js App Router (Node.js runtime).
 *
 *   // app/api/[...path]/route.ts: /api/v1/..., /api/admin (the console), /api/health
 *   export const { GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS } = toNext(getGateway, { basePath: '/api', clientAddress: lastForwardedFor });
 *   export const runtime = 'nodejs';
 *   export const dynamic = 'force-dynamic';
 *
 * One handler answers every method: the gateway routes the request itself (DELETE
 * /v1/videos/{id}, the admin API's PUT and DELETE, CORS preflights) and answers 405 to a method
 * a path does not take. A method the route file does not export is Next.js's own 405 before
 * the gateway sees it, so export them all. Put the route one level above /v1
 * (`app/api/[...path]`, not `app/api/v1/[...path]`) so that it also receives /api/admin, the
 * console and its API, and the probes.
 *
 * `basePath` is the route's path in front of /v1 and /admin ("/api" for app/api/[...path]);
 * it is removed before the gateway routes the request. Next.js's own `basePath` (next.config)
 * may be left out or included: some versions hand the route a URL with it, Next.js 16 one
 * without it, and either is taken.
 *
 * The client address: Next.js gives a route handler no socket, so there is nothing trustworthy
 * to read by default and the choice is yours (`clientAddress` is required):
 * - behind one proxy that appends to or overwrites X-Forwarded-For (nginx with
 *   `$proxy_add_x_forwarded_for`, a cloud load balancer, Vercel): `lastForwardedFor`;
 * - under bare `next start`, Next.js fills X-Forwarded-For from the socket only when the
 *   client sent none, so `lastForwardedFor` gives the real peer to honest clients and lets a
 *   dishonest one pick its address (it escapes, or spends another address's, IP budget);
 * - your own function, e.g. reading a header your platform sets.
 * Returning undefined makes the request count as address "0.0.0.0": every such request
 * shares one IP budget.
 */
import type { Gateway } from '../src/gateway.js';

export interface NextAdapterOptions {
  /** Path in front of /v1 and /admin, e.g. "/api" for app/api/[...path]/route.ts. @default "" */
  basePath?: string;
  /** The client address the per-IP throttle counts (see the module comment). */
  clientAddress: (request: Request) => string | null | undefined;
}

export type NextRouteHandler = (request: Request) => Promise<Response>;

/** A route module's handler for each HTTP method Next.js lets it export. */
export type NextRouteHandlers = Record<'GET' | 'HEAD' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'OPTIONS', NextRouteHandler>;

/**
 * `gateway` may be a function returning it (or a promise of it), called on every request:
 * a route module is evaluated during `next build`, where no gateway should be created, so
 * create it on first use and return the same one after.
 */
export function toNext(
  gateway: Gateway | (() => Gateway | Promise<Gateway>),
  options: NextAdapterOptions,
): NextRouteHandlers {
  if (typeof options?.clientAddress !== 'function') {
    throw new TypeError('toNext: options.clientAddress is required (Next.js exposes no client socket); see model-gateway/next.');
  }
  const basePath = (options.basePath ?? '').replace(/\/+$/, '');
  const handle: NextRouteHandler = async (request) => {
    const target = 'fetch' in gateway ? gateway : await gateway();
    const clientAddress = options.clientAddress(request) ?? undefined;
    return target.fetch(stripBasePath(request, basePath), { clientAddress });
  };
  // The same handler for each: OPTIONS included, so the gateway's `cors` option answers preflights.
  return { GET: handle, HEAD: handle, POST: handle, PUT: handle, PATCH: handle, DELETE: handle, OPTIONS: handle };
}

/** The last X-Forwarded-For entry: the address the proxy nearest to Next.js saw. */
export function lastForwardedFor(request: Request): string | undefined {
  const header = request.headers.get('x-forwarded-for');
  const last = header?.split(',').at(-1)?.trim();
  return last || undefined;
}

/** Whether `path` is `base` or under it. */
const under = (path: string, base: string) => path === base || path.startsWith(`${base}/`);

function stripBasePath(request: Request, basePath: string): Request {
  if (!basePath) return request;
  const url = new URL(request.url);
  // Next.js's own basePath, when this version hands it over in the URL (its NextRequest says
  // which it is), goes first.
  const own = (request as { nextUrl?: { basePath?: unknown } }).nextUrl?.basePath;
  let path = url.pathname;
  if (typeof own === 'string' && own && under(path, own)) path = path.slice(own.length) || '/';
  // Then the longest of basePath and its tails (its leading segments dropped: Next.js's own
  // basePath, given but not in the URL) that the path starts with.
  let base = basePath;
  while (base && !under(path, base)) {
    const next = base.indexOf('/', 1);
    base = next === -1 ? '' : base.slice(next);
  }
  const rest = base ? path.slice(base.length) || '/' : path;
  if (rest === url.pathname) return request;
  url.pathname = rest;
  const init: RequestInit & { duplex?: 'half' } = { method: request.method, headers: request.headers, signal: request.signal };
  if (request.body) {
    init.body = request.body;
    init.duplex = 'half';
  }
  return new Request(url, init);
}
