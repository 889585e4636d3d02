/** Every /v1 request counts against its client address before anything else is looked at. */
import type { Limiter } from '../../limits/limiter.js';
import type { Stage } from '../types.js';

export function ipLimit(limiter: Limiter): Stage {
  return (x, next) => {
    const peer = x.serverContext?.clientAddress ?? x.serverContext?.req?.socket?.remoteAddress ?? '0.0.0.0';
    x.clientIp = limiter.clientAddress(peer, x.request.headers.get('x-forwarded-for'));
    const counted = limiter.checkIp(x.clientIp);
    return counted ? counted.then(next) : next();
  };
}
