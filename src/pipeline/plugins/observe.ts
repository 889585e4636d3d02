/**
 * First stage: timing, Server-Timing, and the record the access log, metrics and traces
 * report once the request is over (a stream: when it ended; a billed call: when it settled).
 */
import type { Stage } from '../types.js';

export const observe: Stage = async (x, next) => {
  const res = await next();
  const r = x.observed.record;
  r.status = res.status;
  r.respondedMs = performance.now() - r.startedAt;
  const timing = `gateway;dur=${Math.max(0, r.respondedMs - r.upstreamMs).toFixed(1)}, upstream;dur=${r.upstreamMs.toFixed(1)}`;
  if (x.late) x.late['server-timing'] = timing;
  else res.headers.set('server-timing', timing);
  x.observed.release();
  return res;
};
