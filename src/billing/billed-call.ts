/**
 * The one door for money: every billable operation opens its call here and nowhere else.
 *
 *   open: refused while the gateway drains; the hold for the worst case, placed atomically
 *         with the request's deferred key-rate check; refused -> 402 worded once, here
 *   then: `await call.bill(units)` exactly once (the charge is in the store, or in the durable
 *         settle journal, when it resolves: an operation sends the end of its answer only
 *         after that), or `call.cancel()` when nothing was produced.
 *
 * The call carries the request's record: the model, tokens and cost reach its access line
 * and the metrics however the operation answers (see meter.ts for the lifecycle itself).
 */
import type { Model } from '../catalog/catalog.js';
import { errors, type GatewayError } from '../errors.js';
import type { RequestContext } from '../pipeline/types.js';
import { affordableUnits, formatUsd } from './money.js';
import { type BilledCall, type HoldRefusal, insufficientQuota, type Meter } from './meter.js';
import { hitCost, listCost } from './pricing.js';
import type { Usage } from './usage.js';
import type { TokenLimiter, TokenTake } from '../limits/tokens.js';
import type { Budget } from '../stores/types.js';

export type { BilledCall } from './meter.js';

/** What the billed call needs of the gateway. */
export interface BillingDoor {
  meter: Meter;
  /** True once shutdown began: no new call is opened. */
  draining(): boolean;
  /** Tokens per minute per key; absent: no token limit. */
  tokenLimiter?: TokenLimiter;
  /** The account's budgets (cached briefly); absent: none. */
  accountBudgets?(accountId: string): Promise<readonly Budget[]>;
}

/** The worst case of a token-priced call. */
export interface TokenHold {
  /** An upper bound of the prompt's tokens that needs no tokenizer (its UTF-8 bytes). */
  bound: number;
  /** The prompt's tokens counted with the tokenizer (with its margin), computed at most once. */
  estimate: () => number;
  /** The most output tokens the call may produce (0 for embeddings). */
  maxOutput: number;
  /** The most calls of each priced hosted tool the call may make (`{web_search: 10}`). */
  tools?: Record<string, number>;
  /**
   * How many outputs share `maxOutput` (chat's `n`; completions' choices per prompt times its
   * prompts): a 402's tokens are per output, as the `max_tokens` a client retries with is.
   * @default 1
   */
  outputs?: number;
}

/** A hold of a known amount (media: images, seconds of video, tokens of speech). */
export interface AmountHold {
  /** The hold id when it is not the request id (a job that outlives its request). */
  id?: string;
  model: Model;
  amount: bigint;
  ttlMs?: number;
  /** A job any instance can finish: shutdown leaves it for the instance that adopts it. */
  durable?: boolean;
  /**
   * A charge beside the request's own (a guardrail's check): it is not the request's record
   * (its model, units and cost stay the call's), and is reported on its own.
   */
  unobserved?: boolean;
}

/** Names the limit that refused, unless it was the wallet. */
function cappedBy(r: HoldRefusal): string {
  if (r.limitSource === 'wallet') return '';
  if (r.limitSource === 'key_monthly_cap') return " (limited by this key's monthly spending cap)";
  const [scope, period] = r.limitSource.split('_');
  return ` (limited by ${scope === 'key' ? "this key's" : "the account's"} ${period} budget)`;
}

/** Opens a call with `amount` held, or returns the refusal. */
async function tryOpen(door: BillingDoor, ctx: RequestContext, hold: AmountHold, tokens?: TokenTake | null) {
  if (door.draining()) throw errors.shuttingDown();
  // A call refused here (402, a cap) was for a known model: its access line and per-model
  // counts name it, as an answered call's do.
  if (!hold.unobserved && ctx.observed && ctx.observed.record.model === null) ctx.observed.record.model = hold.model.id;
  const accountBudgets = door.accountBudgets ? await door.accountBudgets(ctx.key.accountId) : [];
  return door.meter.tryOpen({
    id: hold.id ?? ctx.requestId,
    key: ctx.key,
    model: hold.model,
    amount: hold.amount,
    ttlMs: hold.ttlMs,
    durable: hold.durable,
    observed: hold.unobserved ? undefined : ctx.observed,
    keyCheck: ctx.takeKeyCheck(),
    accountBudgets,
    tokens,
  });
}

/**
 * Takes the call's tokens from its key's tokens-per-minute window (429 when they do not fit).
 * The key's request rate is counted first, so the order of checks stays: rate, tokens, money.
 */
async function takeTokens(door: BillingDoor, ctx: RequestContext, hold: TokenHold): Promise<TokenTake | null> {
  const limiter = door.tokenLimiter;
  if (!limiter || (ctx.key.tokensPerMinute ?? limiter.defaultLimit) === null) return null;
  await ctx.runKeyCheck();
  return limiter.take(ctx.key, ctx.requestId, hold.estimate() + hold.maxOutput, ctx.headers);
}

/**
 * What a token call holds with a prompt of `prompt` tokens: the worst case at list price, the
 * prompt and every output token the call may produce, and its held tool calls. A batch holds its
 * lines by the same rule, at its own price.
 */
export function tokenHoldCost(model: Model, hold: Pick<TokenHold, 'maxOutput' | 'tools'>, prompt: number): bigint {
  return listCost(model, { kind: 'tokens', prompt, completion: hold.maxOutput, tools: hold.tools });
}

/**
 * Opens the billed call of a token-priced request: the hold is first tried on the byte bound
 * of the prompt (no tokenizer on the hot path); only when that is refused is the prompt
 * counted, and the counted estimate decides. Refused: 402 in OpenRouter's words.
 */
export async function openTokenCall(door: BillingDoor, ctx: RequestContext, model: Model, hold: TokenHold): Promise<BilledCall> {
  const amount = (prompt: number) => tokenHoldCost(model, hold, prompt);
  const tokens = await takeTokens(door, ctx, hold);
  let opened: Awaited<ReturnType<typeof tryOpen>>;
  try {
    opened = await tryOpen(door, ctx, { model, amount: amount(hold.bound) }, tokens);
    if (!opened.ok && hold.estimate() < hold.bound) opened = await tryOpen(door, ctx, { model, amount: amount(hold.estimate()) }, tokens);
  } catch (err) {
    await tokens?.correct(0);
    throw err;
  }
  if (opened.ok) return opened.call;
  // Not held: the call never runs, so it uses none of the tokens it took.
  await tokens?.correct(0);
  throw tokensRefused(opened, model, hold);
}

function tokensRefused(r: HoldRefusal, model: Model, hold: TokenHold): GatewayError {
  if (hold.maxOutput === 0) {
    const spendable = formatUsd(r.available < 0n ? 0n : r.available);
    return insufficientQuota(
      r,
      `This request requires more credits: its ${hold.estimate()} input tokens cost more than the ${spendable} USD that can be spent.${cappedBy(r)}`,
    );
  }
  const prices = model.text!;
  // What the prompt and the held tool calls take comes first; the rest buys output tokens.
  let fixed = prices.promptPico * BigInt(hold.estimate());
  for (const [tool, calls] of Object.entries(hold.tools ?? {})) fixed += (model.toolPrices?.get(tool) ?? 0n) * BigInt(calls);
  const outputs = Math.max(1, Math.floor(hold.outputs ?? 1));
  const affordable = affordableUnits(r.available, fixed, prices.completionPico) / BigInt(outputs);
  const canAfford = affordable > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(affordable);
  return insufficientQuota(
    r,
    // OpenRouter's wording, which clients parse: with n outputs its figures are per output, as
    // `max_tokens` is.
    `This request requires more credits, or fewer max_tokens. You requested up to ${Math.ceil(hold.maxOutput / outputs)} tokens, but can only afford ${canAfford}.${cappedBy(r)}`,
    { affordable_max_tokens: canAfford },
  );
}

/** Opens the billed call of a request of known price (`what` names it in the 402). */
export async function openAmountCall(door: BillingDoor, ctx: RequestContext, hold: AmountHold, what: string): Promise<BilledCall> {
  const opened = await tryOpen(door, ctx, hold);
  if (opened.ok) return opened.call;
  throw insufficientQuota(
    opened,
    `This request requires more credits: ${what} costs ${formatUsd(hold.amount)} USD, but only ${formatUsd(opened.available)} USD can be spent.${cappedBy(opened)}`,
  );
}

/** Shutdown released the call while its answer was on its way: the unpaid answer is not delivered. */
export function refuseIfClosed(call: BilledCall): void {
  if (call.closed) throw errors.shuttingDown();
}

/** What a cache hit was billed, and the list cost it would have had as an upstream call. */
export interface HitCharge {
  cost: bigint;
  listCost: bigint;
}

/**
 * Bills a response-cache hit: `hitPrice` (a decimal fraction) times the list cost of the
 * stored answer's usage (its hosted tool calls included), rounded up once. It is held and charged like any call (the wallet,
 * the key's cap and budgets, the key's request rate on the hold; 402 when it cannot be paid),
 * and written as one ledger entry measured "cache", with the fraction among its prices.
 */
export async function billCacheHit(
  door: BillingDoor,
  ctx: RequestContext,
  model: Model,
  usage: Usage,
  hitPrice: string,
  tools: Record<string, number> | null,
): Promise<HitCharge> {
  const units = { kind: 'tokens' as const, ...usage, ...(tools ? { tools } : {}) };
  const cost = hitCost(model, units, hitPrice);
  const call = await openAmountCall(door, ctx, { model, amount: cost }, 'this cached answer');
  await call.bill(units, 'cache', { hitPrice });
  return { cost, listCost: listCost(model, units) };
}
