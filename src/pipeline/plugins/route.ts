/** Finds the operation for the path after /v1 (404, or 405 with Allow), and names the request's route. */
import { GatewayError } from '../../errors.js';
import type { Operation } from '../../operations/types.js';
import type { Services } from '../../services.js';
import type { Router } from '../router.js';
import type { Stage } from '../types.js';

export function route(router: Router<Operation>, v1: string, core: Services): Stage {
  return (x, next) => {
    const sub = x.path.slice(v1.length);
    const m = router.match(sub, x.request.method);
    if (!m) throw new GatewayError('not_found', `Unknown route ${x.request.method} ${x.path.slice(0, 200)}.`);
    if (!m.found) {
      throw new GatewayError('method_not_allowed', `Method ${x.request.method} is not allowed on ${x.path}.`, {
        headers: { allow: m.allow.join(', ') },
      });
    }
    const op = m.found;
    x.route = { name: `/v1${op.path}`, params: m.params, idempotent: op.idempotent === true, run: (ctx) => op.run(core, ctx) };
    x.observed.record.route = x.route.name;
    return next();
  };
}
