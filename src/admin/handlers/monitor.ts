/**
 * Admin API handlers for watching this instance: its recent requests and errors, latency and
 * error rate per model (both from its ring of recent requests), its upstreams and their
 * circuit breakers, the recent admin changes and guardrail blocks. Each instance answers for itself.
 */
import type * as S from '../schemas.js';
import type { AdminContext, Call } from './context.js';

export function requests(x: AdminContext, c: Call<undefined, typeof S.requestsQuery>) {
  const q = c.query;
  // One more than the page: whether older requests follow.
  const rows = x.core.recent.list({ account: q.account, key: q.key, errors: q.errors === 'true', before: q.before, limit: q.limit + 1 });
  const data = rows.slice(0, q.limit);
  return Promise.resolve({ object: 'list', kept: x.core.recent.size, data, more: rows.length > q.limit });
}

export function modelStats(x: AdminContext) {
  return Promise.resolve({ object: 'list', kept: x.core.recent.size, data: x.core.recent.modelStats() });
}

export function upstreams(x: AdminContext) {
  const models = x.core.cfg.models;
  const data = [...x.core.upstreams.values()].map((u) => ({
    name: u.name,
    simulated: u.simulated,
    ...x.core.breaker.status(u.name),
    models: models.filter((m) => m.upstream === u.name || m.targets?.some((t) => t.upstream === u.name)).map((m) => m.id),
  }));
  return Promise.resolve({ object: 'list', data });
}

export function changes(x: AdminContext, c: Call<undefined, typeof S.changesQuery>) {
  return Promise.resolve({ object: 'list', data: x.changes.list(c.query.limit) });
}

/** The guardrails this gateway runs, as configured. */
export function guardrails(x: AdminContext) {
  return Promise.resolve({ object: 'list', data: x.core.cfg.guardrails });
}

/** The latest guardrail blocks on this instance, newest first (of one account when asked). */
export function guardrailBlocks(x: AdminContext, c: Call<undefined, typeof S.guardrailBlocksQuery>) {
  return Promise.resolve({ object: 'list', data: x.core.guardrails.recentBlocks(c.query.limit, c.query.account) });
}
