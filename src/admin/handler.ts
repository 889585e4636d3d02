/** Mounting the admin API and console apart from the gateway's own routes. */
import type { Gateway } from '../gateway.js';
import type { AdminHttpOptions } from './http.js';

/**
 * The admin API (/admin/v1) and console (/admin) of a gateway as a fetch handler, to mount
 * apart from /v1 (e.g. on an internal port).
 * @example
 * const admin = createAdminHandler(gateway, { tokenSha256: process.env.ADMIN_TOKEN_SHA256! });
 * Bun.serve({ port: 9090, fetch: admin });
 */
export function createAdminHandler(gateway: Gateway, options: AdminHttpOptions): (request: Request) => Promise<Response> {
  return gateway.adminHandler(options);
}
