/**
 * What the operations share: a zod failure as 400 naming the field, the model's limits
 * checked before anything is held or sent upstream, and the agent-key refusal of media.
 */
import type { z } from 'zod';
import { atServiceTier, type Model } from '../catalog/catalog.js';
import { CONTEXT_FIELDS } from '../context/inject.js';
import { GatewayError } from '../errors.js';
import type { RequestContext } from '../pipeline/types.js';
import type { Services } from '../services.js';
import { asksPricedTier } from '../billing/service-tiers.js';

/** ["messages", 0, "role"] -> "messages[0].role" */
export function paramPath(path: ReadonlyArray<PropertyKey>): string | null {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out || null;
}

/** Whether `path` leads to a present value in `input`. */
function present(input: unknown, path: ReadonlyArray<PropertyKey>): boolean {
  let at: unknown = input;
  for (const p of path) {
    if (at === null || typeof at !== 'object' || !Object.hasOwn(at, p)) return false;
    at = (at as Record<PropertyKey, unknown>)[p];
  }
  return at !== undefined;
}

export function zodError(error: z.ZodError, input: unknown): GatewayError {
  const issue = error.issues[0];
  const param = issue ? paramPath(issue.path) : null;
  let message = issue?.message ?? 'Invalid request.';
  if (issue?.code === 'invalid_type' && !present(input, issue.path)) message = 'is required';
  return new GatewayError('invalid_request', param ? `Invalid value for '${param}': ${message}` : message, { param });
}


/**
 * 400 `max_tokens`-style when a requested output cap exceeds the model's `maxOutputTokens`.
 * `caps` maps each field the client may send (e.g. `max_tokens`, `max_completion_tokens`) to
 * its value; the first one over the limit is named in `param`.
 */
export function checkOutputCap(model: Model, caps: Record<string, number | null | undefined>): void {
  for (const [param, value] of Object.entries(caps)) {
    if (typeof value === 'number' && value > model.maxOutputTokens) {
      throw new GatewayError(
        'invalid_request',
        `Invalid value for '${param}': ${value} is more than the ${model.maxOutputTokens} output tokens \`${model.id}\` can produce.`,
        { param },
      );
    }
  }
}

/**
 * 400 `context_length_exceeded` when the prompt does not fit the model's context window.
 * `bound` is a cheap upper bound of the prompt's tokens (its UTF-8 bytes): when it fits, the
 * prompt fits and nothing is counted. Otherwise the tokenizer's count (no margin: a prompt is
 * refused only when it really is too long) decides.
 */
export function checkContextWindow(model: Model, bound: number, count: () => number, param: string): void {
  if (bound <= model.contextLength) return;
  const tokens = count();
  if (tokens <= model.contextLength) return;
  throw new GatewayError(
    'context_length_exceeded',
    `This model's maximum context length is ${model.contextLength} tokens. However, your ${param} resulted in about ${tokens} tokens. Please reduce the length of the ${param}.`,
    { param },
  );
}

export function refuseAgentKeys(ctx: RequestContext): void {
  if (ctx.key.kind === 'agent') throw new GatewayError('permission_denied', 'Agent keys cannot use media endpoints.');
}


export { asksPricedTier };

/**
 * The model as the request's price-changing field bills it (`service_tier`, Anthropic's
 * `inference_geo`): the model itself when the field is absent or asks for the standard price,
 * the model at the tier's prices when it prices that tier, else 400 naming the field: the
 * provider would bill more than the gateway held and charged.
 */
export function pricedTier(model: Model, body: Record<string, unknown>, field: string): Model {
  const value = body[field];
  if (!asksPricedTier(value)) return model;
  const tier = typeof value === 'string' ? atServiceTier(model, value) : null;
  if (tier) return tier;
  throw new GatewayError('invalid_request', `Invalid value for '${field}': ${JSON.stringify(value)} is billed at a price \`${model.id}\` does not list here.`, {
    param: field,
  });
}

/**
 * Refuses what a router upstream (OpenRouter) reads to serve a request with more than the one
 * model it names: a `models` list (other models it may answer with) and `plugins` (its web
 * search and file parsing, paid per use). The gateway resolves, holds and bills one model at
 * its list price, so either would buy another model, or paid work, at that model's price, and
 * take an agent key past the one model it is pinned to. Fallbacks between models are the
 * gateway's own (a model's targets).
 */
function refuseRouterFields(body: Record<string, unknown>): void {
  if (body.models !== undefined) {
    throw new GatewayError('invalid_request', "'models' is not supported through this gateway: name one model in 'model' (the gateway's own fallbacks route between models).", {
      param: 'models',
    });
  }
  if (body.plugins !== undefined) {
    throw new GatewayError('unsupported_tool', "'plugins' (a router's web search and file parsing, paid per use) is not supported through this gateway, which cannot bill them.", {
      param: 'plugins',
    });
  }
}

/**
 * The text model a request names, as the key may call it, at the service tier it asks for;
 * a router's fields that would serve it with other models or paid plugins are refused first.
 */
export async function textModel(core: Services, ctx: RequestContext, body: Record<string, unknown>, id: string): Promise<Model> {
  refuseRouterFields(body);
  return pricedTier(await core.catalog.resolve(id, ctx.key, 'text', () => core.grants(ctx.key.accountId)), body, 'service_tier');
}

/**
 * Refuses the gateway's own context fields (`brand`, `knowledge`) on an endpoint that does not
 * use them: sent on, they would reach the upstream unread instead of being applied and removed.
 */
export function refuseContextFields(body: Record<string, unknown>, endpoint: string): void {
  for (const field of CONTEXT_FIELDS) {
    if (field in body) {
      throw new GatewayError('invalid_request', `'${field}' is supported on /chat/completions and /responses, not on ${endpoint}.`, { param: field });
    }
  }
}

/**
 * The output cap to send when the client named none: the model's most per choice, less what a
 * long prompt leaves of the context window (providers refuse a prompt plus cap over it). The
 * prompt is counted only when its byte bound says it may matter.
 */
export function capWithin(model: Model, perChoice: number, promptBound: number, promptTokens: () => number): number {
  if (promptBound + perChoice <= model.contextLength) return perChoice;
  return Math.max(1, Math.min(perChoice, model.contextLength - promptTokens()));
}
