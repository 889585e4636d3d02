/**
 * The response cache on a token-priced call: the lookup once the upstream body is known
 * (before any hold), a hit billed at the cache's hit price and replayed in the client's
 * format (a stored plain answer as a stream, a stored stream as a plain answer), and the
 * `X-Cache` / `Age` headers.
 */
import { Response } from '@whatwg-node/server';
import { billCacheHit } from '../billing/billed-call.js';
import type { CacheTicket } from '../cache/cache.js';
import type { CacheFormat } from '../cache/format.js';
import { jsonText } from '../http/json.js';
import type { RequestContext } from '../pipeline/types.js';
import type { Services } from '../services.js';
import type { TextPlan } from './types.js';

/**
 * The request's ticket through the cache (null when its model's answers are not cached).
 * `upstreamBody` is what the model's own target would receive.
 */
export async function cacheTicket(core: Services, ctx: RequestContext, plan: TextPlan, path: string, format: CacheFormat | undefined, upstreamBody: () => Record<string, unknown>, bypass: boolean): Promise<CacheTicket | null> {
  const settings = format && core.cache ? core.cache.settingsFor(plan.model.id) : null;
  if (!settings || !format || !core.cache) return null;
  return core.cache.lookup({
    settings,
    accountId: ctx.key.accountId,
    keyId: ctx.key.id,
    model: plan.model.id,
    path,
    body: upstreamBody(),
    cacheControl: ctx.request.headers.get('cache-control'),
    bypass,
    format,
  });
}

const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache, no-transform', 'x-accel-buffering': 'no' };

/**
 * Answers from a stored entry once its charge is in (402 when it cannot be paid, as any call):
 * plain, or as the stream of the stored answer. `request` is the client's body.
 */
export async function serveHit(core: Services, ctx: RequestContext, plan: TextPlan, ticket: CacheTicket, format: CacheFormat, request: Record<string, unknown>): Promise<Response> {
  const cache = core.cache!;
  const hit = ticket.hit!;
  const settings = cache.settingsFor(plan.model.id)!;
  const charge = await billCacheHit(core, ctx, plan.model, hit.entry.usage, settings.hitPrice, hit.entry.tools ?? null);
  cache.countHit(ctx.key.accountId, plan.model.id, charge.listCost, charge.cost);
  ctx.releaseBody();
  // A Deprecated model's answer says so, served from an entry or not.
  const headers = { ...plan.model.deprecationHeaders, 'x-cache': 'HIT', age: String(hit.ageSeconds) };
  if (!plan.stream) return jsonText(200, JSON.stringify(hit.entry.body), headers);
  return new Response(format.stream(hit.entry, request), { status: 200, headers: { ...SSE_HEADERS, ...headers } });
}
