/**
 * Requests wait for start-up (seeding) to finish; only /v1 goes on from here; and while the
 * gateway drains for shutdown, new calls are refused (503 with Retry-After).
 */
import { errors, GatewayError } from '../../errors.js';
import type { Stage } from '../types.js';

export interface Lifecycle {
  ready: Promise<void>;
  /** Checked per request before awaiting `ready`: an await costs a tick even once it resolved. */
  isReady(): boolean;
  /** Start-up is waiting for an unreachable store: a call then gets 503 at once, not a wait. */
  storeDown(): boolean;
  /** Start-up's try under way: ends seeded, or meeting an unreachable store. */
  attempt(): Promise<void>;
  /** Set by dispose(): new calls are refused while the ones in flight finish. */
  draining(): boolean;
}

export function drain(life: Lifecycle, v1Slash: string): Stage {
  const stage: Stage = (x, next) => {
    if (!life.isReady()) {
      if (life.storeDown()) throw errors.storeDown();
      return life.attempt().then(() => stage(x, next));
    }
    if (!x.path.startsWith(v1Slash)) throw new GatewayError('not_found', `Unknown route ${x.request.method} ${x.path.slice(0, 200)}.`);
    if (life.draining()) throw errors.shuttingDown();
    return next();
  };
  return stage;
}
