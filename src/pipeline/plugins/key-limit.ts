/**
 * The key's request rate. A billable POST counts against its key in the same store step as
 * its hold (one step fewer per call): the check travels on the exchange until the billed call
 * takes it, and the limiter still answers 429 before any other answer it would get. Every
 * other request is counted here, before its operation runs.
 */
import type { Limiter } from '../../limits/limiter.js';
import type { Stage } from '../types.js';

export function keyLimit(limiter: Limiter): Stage {
  return async (x, next) => {
    if (x.route!.idempotent) return limiter.deferKey(x, x.key!, x.headers, next);
    Object.assign(x.headers, await limiter.checkKey(x.key!));
    return next();
  };
}
