/**
 * The admin HTTP API (under /admin/v1) and the web console (at /admin). Operators only: every
 * /admin/v1 route but the OpenAPI document needs `Authorization: Bearer <admin token>`, whose
 * SHA-256 is compared in constant time with the configured digest (the token is never kept).
 * It is outside /v1 and its limits; errors use the same envelope as /v1.
 *
 * The routes are declared in routes.ts. A request is answered in this order: a path no route
 * declares is 404 without the token; then a missing or wrong token is 401; then a method the
 * path does not take is 405 with Allow; then the route's handler.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Response } from '@whatwg-node/server';
import type { z } from 'zod';
import { AdminError, type Admin } from './accounts.js';
import type { Services } from '../services.js';
import { GatewayError, errorResponse } from '../errors.js';
import { readBody } from '../http/body.js';
import { json, parseJsonObject } from '../http/json.js';
import { isStoreUnavailable } from '../stores/errors.js';
import { adminTokenId, createChangeLog } from './change-log.js';
import { consoleAsset } from './console/assets.js';
import { AdminContext, type Call } from './handlers/context.js';
import { openApiDocument } from './openapi.js';
import { type AdminRoute, adminRouter } from './routes.js';
import { refuseInexactNumbers } from './exact-numbers.js';


export interface AdminHttpOptions {
  /** Hex SHA-256 of the admin token. */
  tokenSha256: string;
  /** Who the token is in the admin change log. @default "admin" */
  label?: string;
}

/** Parses with a schema; a violation is 400 invalid_request naming the field. */
function parse<T>(schema: z.ZodType<T>, value: unknown, where: 'body' | 'query'): T {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  // An unknown key is the field at fault: `param` names it, as any other bad field is named.
  const path = [...(issue?.path ?? []), ...(issue?.code === 'unrecognized_keys' ? issue.keys.slice(0, 1) : [])];
  const param = path.map(String).join('.') || null;
  throw new GatewayError('invalid_request', `${param ?? where}: ${issue?.message ?? 'invalid'}`, { param });
}

/**
 * A NUL in a path parameter or the query names nothing any store holds (PostgreSQL cannot
 * even bind it, and would answer as if it were down): 404 naming the parameter, on every driver.
 */
function refuseNul(params: Record<string, string>, query: string): void {
  const named = [...Object.entries(params), ...new URLSearchParams(query)].find(([, v]) => v.includes('\u0000'));
  if (named) throw new GatewayError('not_found', `No ${named[0]} with that id: it contains NUL.`, { param: named[0] });
}

/** Whether `path` (under /admin) is the console's: anything but the API under /admin/v1. */
const isConsolePath = (path: string) =>
  path === '/admin' || path === '/admin/' || (path.startsWith('/admin/') && !path.startsWith('/admin/v1/') && path !== '/admin/v1');

/** A console page or asset: GET and HEAD only. */
async function consoleResponse(request: Request, path: string): Promise<Response> {
  const asset = await consoleAsset(path.slice('/admin'.length));
  if (!asset) throw new GatewayError('not_found', `Unknown route ${request.method} ${path.slice(0, 200)}.`);
  if (request.method !== 'GET' && request.method !== 'HEAD') {
    throw new GatewayError('method_not_allowed', `Method ${request.method} is not allowed on ${path}.`, { headers: { allow: 'GET, HEAD' } });
  }
  return asset;
}

export function createAdminHttp(core: Services, admin: Admin, options: AdminHttpOptions) {
  // Checked here as the configuration checks it: a digest of another length would make every
  // call's comparison throw (a 500 to each caller) instead of saying what is wrong, once.
  if (typeof options.tokenSha256 !== 'string' || !/^[0-9a-fA-F]{64}$/.test(options.tokenSha256)) {
    throw new TypeError('tokenSha256 must be the SHA-256 of the admin token, as 64 hex digits');
  }
  const expected = Buffer.from(options.tokenSha256.toLowerCase(), 'hex');
  const changes = createChangeLog(core.log, { admin: options.label ?? 'admin', tokenId: adminTokenId(options.tokenSha256) }, core.now);
  const context = new AdminContext(core, admin, changes);

  function authorize(request: Request): void {
    const header = request.headers.get('authorization') ?? '';
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    const presented = createHash('sha256').update(m?.[1] ?? '').digest();
    // Digests of equal length: the comparison time says nothing about the token.
    if (!m || !timingSafeEqual(presented, expected)) {
      throw new GatewayError('invalid_api_key', 'Missing or invalid admin token.', { headers: { 'www-authenticate': 'Bearer' } });
    }
  }

  /** The call to a route: the body is read only for a route that declares one. */
  async function callOf(r: AdminRoute, request: Request, params: Record<string, string>, query: string): Promise<Call<z.ZodType, z.ZodType>> {
    const { maxBodyBytes, bodyTimeoutMs } = core.cfg.limits;
    let body: unknown;
    if (r.body) {
      const bytes = await readBody(request, maxBodyBytes, bodyTimeoutMs);
      const value = parseJsonObject(bytes);
      // Money may come as a JSON number: one with more digits than a double keeps is refused.
      refuseInexactNumbers(new TextDecoder().decode(bytes));
      body = parse(r.body, value, 'body');
    }
    return {
      params,
      body,
      query: r.query ? parse(r.query, Object.fromEntries(new URLSearchParams(query)), 'query') : undefined,
    };
  }

  /**
   * Answers `sub` (the path after /admin/v1). Throws GatewayError for refusals. `onRoute` is
   * told the declared pattern a request matched ("/admin/v1/accounts/{id}"): metrics and
   * access lines name it, never the raw path (ids would make every label value unique).
   */
  async function route(request: Request, sub: string, query: string, requestId: string, onRoute?: (route: string) => void): Promise<Response> {
    if (sub === '/openapi.json' && (request.method === 'GET' || request.method === 'HEAD')) {
      onRoute?.('/admin/v1/openapi.json');
      return json(200, openApi());
    }
    const m = adminRouter.match(sub, request.method);
    if (!m) throw new GatewayError('not_found', `Unknown route ${request.method} /admin/v1${sub.slice(0, 200)}.`);
    if (m.found) onRoute?.(`/admin/v1${m.found.path}`);
    authorize(request);
    if (!m.found) {
      throw new GatewayError('method_not_allowed', `Method ${request.method} is not allowed on /admin/v1${sub}.`, {
        headers: { allow: m.allow.join(', ') },
      });
    }
    refuseNul(m.params, query);
    const r = m.found;
    let result: unknown;
    try {
      const call = await callOf(r, request, m.params, query);
      result = await r.run(context, call);
      // Every call that changes something says who made it and what it changed.
      if (r.method !== 'GET') changes.record({ requestId, method: r.method, route: `/admin/v1${r.path}`, params: m.params, body: call.body, result });
    } catch (err) {
      // The admin's own refusals (no such account, a bad amount or time) are the caller's mistake.
      if (err instanceof AdminError) throw new GatewayError('invalid_request', err.message, err.param ? { param: err.param } : {});
      if (err instanceof RangeError) throw new GatewayError('invalid_request', err.message);
      throw err;
    }
    return result instanceof Response ? result : json(r.status ?? 200, result, { 'cache-control': 'no-store' });
  }

  let doc: unknown;
  /** The OpenAPI 3.1 document, generated once from the route declarations. */
  function openApi(): unknown {
    doc ??= openApiDocument(adminRouter.routes, `${core.cfg.serviceName} admin API`);
    return doc;
  }

  /**
   * Handles a request whose path starts with /admin: the console's pages and assets, or the
   * API. Every refusal is the error envelope. `onRoute` hears the route pattern that matched.
   */
  async function handle(request: Request, path: string, query: string, requestId: string, onRoute?: (route: string) => void): Promise<Response> {
    try {
      const res = isConsolePath(path) ? await consoleResponse(request, path) : await route(request, path.slice('/admin/v1'.length), query, requestId, onRoute);
      res.headers.set('x-request-id', requestId);
      return res;
    } catch (err) {
      if (err instanceof GatewayError) return errorResponse(err, requestId);
      if (isStoreUnavailable(err)) {
        return errorResponse(new GatewayError('service_unavailable', 'A store is unreachable. Try again shortly.', { headers: { 'retry-after': '1' } }), requestId);
      }
      core.log.error({ msg: 'admin API: unexpected error', request_id: requestId, err });
      return errorResponse(new GatewayError('internal_error', `Internal error. Quote request id ${requestId} when reporting it.`), requestId);
    }
  }

  return { handle, openApi };
}
