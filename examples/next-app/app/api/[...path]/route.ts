/** Every /api/v1/* request goes to the gateway (Node.js runtime, never cached). */
import { lastForwardedFor, toNext } from 'model-gateway/next';
import { getGateway } from '../../../../lib/gateway';

export const runtime = 'nodejs';
export const dynamic = 'force-dynamic';

// Next.js gives a route no socket: the address comes from X-Forwarded-For. Read the
// README's Limits (client address) before exposing `next start` without a proxy.
export const { GET, POST } = toNext(getGateway, { basePath: '/api', clientAddress: lastForwardedFor });
