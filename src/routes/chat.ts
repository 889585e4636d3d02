/** POST /chat/completions: validate, hold, relay (plain or SSE), settle. */
import { z } from 'zod';
import { CALL_HOLD_TTL_MS, insufficientQuota } from '../billing/meter.js';
import { contentText, estimatePromptTokens, promptTokensBound } from '../billing/tokens.js';
import type { Model } from '../catalog/catalog.js';
import type { Core, RequestContext } from '../core.js';
import { GatewayError } from '../errors.js';
import { jsonText, parseJsonObject } from '../http.js';
import { affordableUnits, costOf } from '../money.js';
import type { LedgerUnits } from '../stores/types.js';
import type { UpstreamResponse } from '../upstream/client.js';
import { callUpstream, upstreamError, upstreamHeaders } from '../upstream/relay.js';
import { relayStream } from './chat-stream.js';
import { zodError } from './validation.js';

const part = z.looseObject({ type: z.string() });
const message = z.looseObject({
  role: z.enum(['system', 'user', 'assistant', 'tool', 'developer']),
  content: z.union([z.string(), z.array(part), z.null()]).optional(),
});

const chatSchema = z.looseObject({
  model: z.string().min(1),
  messages: z.array(message).min(1),
  stream: z.boolean().nullable().optional(),
  temperature: z.number().nullable().optional(),
  top_p: z.number().nullable().optional(),
  max_tokens: z.int().positive().nullable().optional(),
  max_completion_tokens: z.int().positive().nullable().optional(),
  n: z.int().min(1).max(128).nullable().optional(),
  stop: z.union([z.string(), z.array(z.string())]).nullable().optional(),
  response_format: z.looseObject({}).nullable().optional(),
  tools: z.array(z.unknown()).nullable().optional(),
  tool_choice: z.union([z.string(), z.looseObject({})]).nullable().optional(),
  seed: z.int().nullable().optional(),
  reasoning_effort: z.enum(['low', 'medium', 'high']).optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullable().optional(),
  brand: z.string().min(1).optional(),
  knowledge: z.union([z.string().min(1), z.array(z.string().min(1)).min(1).max(10)]).optional(),
});

export type ChatBody = z.infer<typeof chatSchema>;

export interface Usage {
  prompt: number;
  completion: number;
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** Token counts from an upstream `usage` object, or null when it is missing or malformed. */
export function usageFrom(value: unknown): Usage | null {
  if (!value || typeof value !== 'object') return null;
  const u = value as { prompt_tokens?: unknown; completion_tokens?: unknown };
  return isCount(u.prompt_tokens) && isCount(u.completion_tokens)
    ? { prompt: u.prompt_tokens, completion: u.completion_tokens }
    : null;
}

export interface ChatBilling {
  holdId: string;
  model: Model;
  /** The tokenizer's estimate of the prompt, for billing a stream that ended without usage. */
  promptTokens(): number;
  /** Settles `usage` (or releases when null: nothing was produced). */
  finish(usage: Usage | null): void;
}

export async function chatCompletions(core: Core, ctx: RequestContext): Promise<Response> {
  const bytes = await ctx.body();
  const body = parseJsonObject(bytes);
  const checked = chatSchema.safeParse(body);
  if (!checked.success) throw zodError(checked.error, body);
  const req = body as ChatBody;
  const model = await core.catalog.resolve(req.model, ctx.key, 'text', () => core.grants(ctx.key.accountId));
  const prices = model.text!;
  const injected = await core.context.apply(ctx, req, req.messages);
  const messages = injected && injected.length ? [...injected, ...req.messages] : req.messages;

  const perChoice = req.max_tokens ?? req.max_completion_tokens ?? model.maxOutputTokens;
  const maxOutput = perChoice * (req.n ?? 1);
  const worstCase = (promptTokens: number) =>
    costOf([
      [prices.promptPico, promptTokens],
      [prices.completionPico, maxOutput],
    ]);
  let estimate: number | undefined;
  const promptTokens = () => (estimate ??= estimatePromptTokens(core.tokenizer, messages, req.tools ?? undefined));
  const holdId = ctx.requestId;
  // The hold is first placed on a byte bound of the prompt (no tokenizer on the hot path).
  // Only when that is refused are the tokens counted, and the exact estimate decides.
  const bound = promptTokensBound(messages, req.tools ?? undefined);
  let held = await core.meter.tryHold(holdId, ctx.key, worstCase(bound), CALL_HOLD_TTL_MS);
  if (!held.ok && promptTokens() < bound) held = await core.meter.tryHold(holdId, ctx.key, worstCase(promptTokens()), CALL_HOLD_TTL_MS);
  if (!held.ok) {
    const affordable = affordableUnits(held.available, prices.promptPico * BigInt(promptTokens()), prices.completionPico);
    const canAfford = affordable > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(affordable);
    throw insufficientQuota(
      held,
      `This request requires more credits, or fewer max_tokens. You requested up to ${maxOutput} tokens, but can only afford ${canAfford}.` +
        (held.limitSource === 'key_monthly_cap' ? " (limited by this key's monthly spending cap)" : ''),
      { affordable_max_tokens: canAfford },
    );
  }

  let settledOnce = false;
  const billing: ChatBilling = {
    holdId,
    model,
    promptTokens,
    finish(usage) {
      if (settledOnce) return;
      settledOnce = true;
      if (!usage) {
        void core.meter.release(ctx.key.accountId, holdId);
        return;
      }
      const units: LedgerUnits = { kind: 'tokens', prompt: usage.prompt, completion: usage.completion };
      void core.meter.settle({
        holdId,
        accountId: ctx.key.accountId,
        cost: costOf([
          [prices.promptPico, usage.prompt],
          [prices.completionPico, usage.completion],
        ]),
        entry: { id: ctx.requestId, accountId: ctx.key.accountId, keyId: ctx.key.id, model: model.id, units, at: core.now() },
      });
    },
  };

  const stream = req.stream === true;
  // The body is forwarded as it came unless the gateway must change something in it.
  let upstreamBody: string | Uint8Array = bytes;
  if (stream || injected || model.upstreamModel !== model.id || 'brand' in req || 'knowledge' in req) {
    const out: Record<string, unknown> = { ...body, model: model.upstreamModel, messages };
    delete out.brand;
    delete out.knowledge;
    if (stream) out.stream_options = { ...(req.stream_options ?? {}), include_usage: true };
    upstreamBody = JSON.stringify(out);
  }

  let res: UpstreamResponse;
  try {
    // The client's signal is the upstream call's: a client that goes away aborts it.
    res = await callUpstream(core, model.upstream, {
      method: 'POST',
      path: '/chat/completions',
      headers: upstreamHeaders(ctx.requestId),
      body: upstreamBody,
      signal: ctx.request.signal ?? undefined,
    });
    if (res.status < 200 || res.status >= 300) throw await upstreamError(res, model.upstream);
  } catch (err) {
    billing.finish(null);
    throw err;
  }

  const headers: Record<string, string> = { ...ctx.headers, ...(model.deprecationHeaders ?? {}) };
  if (stream) return relayStream(core, ctx, res, billing, req.stream_options?.include_usage === true, headers);
  return plainAnswer(core, res, billing, model, headers);
}

async function plainAnswer(
  core: Core,
  res: UpstreamResponse,
  billing: ChatBilling,
  model: Model,
  headers: Record<string, string>,
): Promise<Response> {
  let text: string;
  let usage: Usage;
  // Everything that can fail on a hostile answer (a JSON nested too deep to re-serialise or
  // count) happens before billing: the client is charged only for an answer it gets.
  try {
    text = await res.text();
    const parsed = JSON.parse(text) as Record<string, unknown>;
    if (!parsed || typeof parsed !== 'object' || !Array.isArray(parsed.choices)) throw new Error('no choices');
    usage = usageFrom(parsed.usage) ?? { prompt: billing.promptTokens(), completion: countChoices(core, parsed.choices) };
    if (model.upstreamModel !== model.id && parsed.model !== model.id) {
      parsed.model = model.id;
      text = JSON.stringify(parsed);
    }
  } catch (err) {
    billing.finish(null);
    if (err instanceof GatewayError) throw err;
    core.breaker.failure(model.upstream);
    throw new GatewayError('upstream_error', `The upstream "${model.upstream}" sent a malformed answer.`);
  }
  billing.finish(usage);
  return jsonText(200, text, headers);
}

/** Completion tokens of non-streamed choices, counted when the upstream sent no usage. */
function countChoices(core: Core, choices: unknown[]): number {
  let n = 0;
  for (const c of choices) {
    const m = (c as { message?: Record<string, unknown> } | null)?.message;
    if (!m) continue;
    n += core.tokenizer.count(contentText(m.content));
    if (typeof m.reasoning_content === 'string') n += core.tokenizer.count(m.reasoning_content);
    if (m.tool_calls !== undefined) n += core.tokenizer.count(JSON.stringify(m.tool_calls));
  }
  return n;
}
