/**
 * Routing, in two stages. `matchRoute` runs before any refusal a /v1 request can get (shutdown,
 * the IP throttle, auth, the key rate, a store outage): it finds the operation and names the
 * request's route, so the access line and metrics of every refusal carry the pattern the path
 * matched ("unmatched" only when it matched none). `route` runs where the order of checks puts
 * routing, after the IP throttle (which counts every /v1 request, unknown paths included): it
 * answers 404, or 405 with Allow, for a path the first stage found no operation for.
 */
import { GatewayError } from '../../errors.js';
import type { Operation } from '../../operations/types.js';
import type { Services } from '../../services.js';
import type { Router } from '../router.js';
import type { Stage } from '../types.js';

export function matchRoute(router: Router<Operation>, v1: string, core: Services): Stage {
  const v1Slash = `${v1}/`;
  return (x, next) => {
    if (!x.path.startsWith(v1Slash)) return next();
    const m = router.match(x.path.slice(v1.length), x.request.method);
    if (!m) {
      x.refusal = new GatewayError('not_found', `Unknown route ${x.request.method} ${x.path.slice(0, 200)}.`);
    } else if (!m.found) {
      x.observed.record.route = `/v1${m.path}`;
      x.refusal = new GatewayError('method_not_allowed', `Method ${x.request.method} is not allowed on ${x.path}.`, {
        headers: { allow: m.allow.join(', ') },
      });
    } else {
      const op = m.found;
      x.route = { name: `/v1${op.path}`, params: m.params, idempotent: op.idempotent === true, run: (ctx) => op.run(core, ctx) };
      x.observed.record.route = x.route.name;
    }
    return next();
  };
}

export const route: Stage = (x, next) => {
  if (x.refusal) throw x.refusal;
  return next();
};
