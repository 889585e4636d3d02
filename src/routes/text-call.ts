/**
 * What the token-billed endpoints added beside chat share (embeddings, completions,
 * Responses): the hold on the worst case, worded like chat's 402 when refused, and the one
 * upstream call with the plugins' say on its body. Chat keeps its own copy of the hold
 * because it words its 402 from the messages it estimated.
 */
import { type BilledCall, insufficientQuota } from '../billing/meter.js';
import { listCost } from '../billing/pricing.js';
import type { Model } from '../catalog/catalog.js';
import type { Services, RequestContext } from '../services.js';
import { GatewayError } from '../errors.js';
import { affordableUnits, formatUsd } from '../billing/money.js';
import type { UpstreamResponse } from '../upstream/client.js';
import { callModel, type ModelAnswer, pluginFields, upstreamError, upstreamHeaders } from '../upstream/relay.js';

export interface TokenHold {
  /** An upper bound of the prompt's tokens that needs no tokenizer (its UTF-8 bytes). */
  bound: number;
  /** The prompt's tokens counted with the tokenizer (with its margin), computed at most once. */
  estimate: () => number;
  /** The most output tokens the call may produce (0 for embeddings). */
  maxOutput: number;
}

/**
 * Opens the billed call for a token-priced request: the hold is first tried on the byte
 * bound of the prompt (no tokenizer on the hot path); only when that is refused is the prompt
 * counted, and the counted estimate decides. Refused: 402 in OpenRouter's words.
 */
export async function openTokenCall(core: Services, ctx: RequestContext, model: Model, hold: TokenHold): Promise<BilledCall> {
  const worstCase = (prompt: number) => listCost(model, { kind: 'tokens', prompt, completion: hold.maxOutput });
  const open = (prompt: number) => core.meter.tryOpen({ id: ctx.requestId, key: ctx.key, model, amount: worstCase(prompt) });
  let opened = await open(hold.bound);
  if (!opened.ok && hold.estimate() < hold.bound) opened = await open(hold.estimate());
  if (opened.ok) return opened.call;
  const prices = model.text!;
  const capped = opened.limitSource === 'key_monthly_cap' ? " (limited by this key's monthly spending cap)" : '';
  if (hold.maxOutput === 0) {
    throw insufficientQuota(
      opened,
      `This request requires more credits: its ${hold.estimate()} input tokens cost more than the ${formatUsd(opened.available < 0n ? 0n : opened.available)} USD that can be spent.${capped}`,
    );
  }
  const affordable = affordableUnits(opened.available, prices.promptPico * BigInt(hold.estimate()), prices.completionPico);
  const canAfford = affordable > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(affordable);
  throw insufficientQuota(
    opened,
    `This request requires more credits, or fewer max_tokens. You requested up to ${hold.maxOutput} tokens, but can only afford ${canAfford}.${capped}`,
    { affordable_max_tokens: canAfford },
  );
}

/**
 * Sends `body` (the fields to relay, already with the model's first target's model name) to
 * `path` through the model's targets (retries and fallbacks, callModel), after the plugins'
 * onUpstreamRequest; `encoded` goes as is when nothing changed it and the serving target
 * knows the model by the same name. A failure before any answer, or a non-2xx answer, cancels
 * the call (nothing was produced). With the answer comes the model as served (its upstream).
 */
export async function sendTokenCall(
  core: Services,
  ctx: RequestContext,
  model: Model,
  call: BilledCall,
  path: string,
  body: Record<string, unknown>,
  encoded: string | Uint8Array | null,
): Promise<ModelAnswer> {
  try {
    const answer = await callModel(core, ctx, model, async (served) => {
      const same = served.upstreamModel === model.upstreamModel;
      const fields = same ? body : { ...body, model: served.upstreamModel };
      const replaced = await pluginFields(core, ctx, served, path, fields);
      return {
        method: 'POST',
        path,
        headers: upstreamHeaders(ctx.requestId),
        body: replaced ? JSON.stringify(replaced) : ((same ? encoded : null) ?? JSON.stringify(fields)),
        // The client's signal is the upstream call's: a client that goes away aborts it.
        signal: ctx.request.signal ?? undefined,
      };
    });
    if (answer.res.status < 200 || answer.res.status >= 300) throw await upstreamError(answer.res, answer.served.upstream);
    return answer;
  } catch (err) {
    void call.cancel();
    throw err;
  }
}

/** Token counts of an upstream `usage` under the given field names, or null when missing or malformed. */
export function usageOf(value: unknown, promptField: string, completionField: string | null): { prompt: number; completion: number } | null {
  if (!value || typeof value !== 'object') return null;
  const u = value as Record<string, unknown>;
  const p = u[promptField];
  const c = completionField === null ? 0 : u[completionField];
  const ok = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
  return ok(p) && ok(c) ? { prompt: p, completion: c } : null;
}

/** The answer of a plain (non-streamed) call: parsed JSON, or 502 (and the call cancelled) when malformed. */
export async function readPlainAnswer(core: Services, ctx: RequestContext, model: Model, call: BilledCall, res: UpstreamResponse): Promise<Record<string, unknown>> {
  try {
    const parsed = JSON.parse(await res.text()) as unknown;
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
    return parsed as Record<string, unknown>;
  } catch (err) {
    void call.cancel();
    if (err instanceof GatewayError) throw err;
    core.breaker.failure(model.upstream, ctx.key.accountId);
    throw new GatewayError('upstream_error', `The upstream "${model.upstream}" sent a malformed answer.`);
  }
}

/** Cut by shutdown while the answer was on its way: the hold was released, so the answer is not delivered. */
export function refuseIfClosed(call: BilledCall): void {
  if (call.closed) {
    throw new GatewayError('service_unavailable', 'The gateway is shutting down. Retry the request.', { headers: { 'retry-after': '1' } });
  }
}
