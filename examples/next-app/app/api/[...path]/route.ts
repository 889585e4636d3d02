/**
 * Every /api/* request goes to the gateway (Node.js runtime, never cached): the API at
 * /api/v1, the console and its API at /api/admin, the probes at /api/health and /api/ready.
 */
import { lastForwardedFor, toNext } from 'model-gateway/next';
import { getGateway } from '../../../lib/gateway';

export const runtime = 'nodejs';
export const dynamic = 'force-dynamic';

// Every method: the gateway routes them (DELETE /api/v1/videos/{id}, the console's PUT and
// DELETE); one left out is Next.js's 405. Next.js gives a route no socket: the address comes
// from X-Forwarded-For. Read the README's section on the client address before exposing
// `next start` without a proxy.
export const { GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS } = toNext(getGateway, { basePath: '/api', clientAddress: lastForwardedFor });
