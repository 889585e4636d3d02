/**
 * CORS for browser apps (option `cors`, off by default): a preflight from an allowed origin
 * is answered here, before the IP throttle and authentication (it carries no key and costs
 * nothing), and every answer to an allowed origin, errors included, carries
 * Access-Control-Allow-Origin and exposes the headers clients read (request id, retry and
 * rate-limit headers). Keys travel in the Authorization header, never in cookies, so
 * credentials mode is never enabled. An origin that is not allowed gets no CORS headers: the
 * browser then refuses the answer to the page.
 */
import { Response } from '@whatwg-node/server';
import type { Stage } from '../types.js';

export interface CorsOptions {
  /** Allowed origins ("https://app.example.com"), or ["*"] for any. */
  origins: string[];
  maxAgeSeconds: number;
}

export interface Cors {
  /** The answer to a preflight (OPTIONS with Access-Control-Request-Method), else null. */
  preflight(request: Request, requestId: string): Response | null;
  /** `response` with the CORS headers when the request came from an allowed origin. */
  decorate(request: Request, response: Response): Response;
}

/** The API's methods: DELETE included (a file, a video). */
const ALLOW_METHODS = 'GET, HEAD, POST, DELETE, OPTIONS';
const DEFAULT_ALLOW_HEADERS = 'authorization, content-type, idempotency-key, x-request-id';
const EXPOSE_HEADERS = [
  'x-request-id',
  'retry-after',
  'retry-after-ms',
  'x-should-retry',
  'ratelimit',
  'ratelimit-policy',
  'x-ratelimit-limit-requests',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-reset-requests',
  'location',
  'idempotent-replayed',
  'deprecation',
  'sunset',
].join(', ');
/** A list of header names (RFC 9110 tokens), as Access-Control-Request-Headers carries it. */
const HEADER_LIST = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+(\s*,\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*$/;

export function createCors(options: CorsOptions | null): Cors | null {
  if (!options) return null;
  const any = options.origins.includes('*');
  const allowed = new Set(options.origins.map((o) => o.toLowerCase()));
  /** The Access-Control-Allow-Origin value for this request, or null when not allowed. */
  const allowOrigin = (request: Request): string | null => {
    const origin = request.headers.get('origin');
    if (!origin) return null;
    if (any) return '*';
    return allowed.has(origin.toLowerCase()) ? origin : null;
  };

  return {
    preflight(request, requestId) {
      if (request.method !== 'OPTIONS' || !request.headers.has('access-control-request-method')) return null;
      const origin = allowOrigin(request);
      const headers: Record<string, string> = { 'x-request-id': requestId, vary: 'Origin, Access-Control-Request-Headers' };
      if (origin) {
        // Echo what the page asked to send (the OpenAI SDK adds its own x-stainless-* headers);
        // the key is checked on the real request whatever headers it carries.
        const asked = request.headers.get('access-control-request-headers')?.trim() ?? '';
        Object.assign(headers, {
          'access-control-allow-origin': origin,
          'access-control-allow-methods': ALLOW_METHODS,
          'access-control-allow-headers': asked.length <= 2_000 && HEADER_LIST.test(asked) ? asked : DEFAULT_ALLOW_HEADERS,
          'access-control-max-age': String(options.maxAgeSeconds),
        });
      }
      return new Response(null, { status: 204, headers });
    },

    decorate(request, response) {
      const origin = allowOrigin(request);
      if (!origin) return response;
      const extra: Record<string, string> = {
        'access-control-allow-origin': origin,
        'access-control-expose-headers': EXPOSE_HEADERS,
      };
      const vary = response.headers.get('vary');
      extra.vary = vary ? `${vary}, Origin` : 'Origin';
      try {
        for (const [k, v] of Object.entries(extra)) response.headers.set(k, v);
        return response;
      } catch {
        // A Response with immutable headers (one straight from fetch): copy it.
        const headers = new Headers(response.headers);
        for (const [k, v] of Object.entries(extra)) headers.set(k, v);
        return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
      }
    },
  };
}

/**
 * The CORS stage for the API under `v1` (its path): answers preflights, and decorates every
 * other answer for allowed origins. Nothing else the gateway serves is for other origins: the
 * console, the admin API, /metrics and the probes get no CORS headers, so no page a browser
 * visits can read them (a gateway on an internal network included).
 */
export function corsStage(cors: Cors | null, v1: string): Stage | null {
  if (!cors) return null;
  return (x, next) => {
    if (x.path !== v1 && !x.path.startsWith(`${v1}/`)) return next();
    return cors.preflight(x.request, x.requestId) ?? next().then((res) => cors.decorate(x.request, res));
  };
}
