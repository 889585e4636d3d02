/** POST /chat/completions: validate, hold, relay (plain or SSE), settle. */
import { z } from 'zod';
import { insufficientQuota } from '../billing/meter.js';
import { choicesText } from '../billing/output.js';
import { listCost } from '../billing/pricing.js';
import { countPromptTokens, estimatePromptTokens, type PromptInput, promptTokensBound } from '../billing/tokens.js';
import type { Model } from '../catalog/catalog.js';
import type { Services, RequestContext } from '../services.js';
import { CONTEXT_FIELDS } from '../context/inject.js';
import { GatewayError } from '../errors.js';
import { withoutFields } from '../http/objects.js';
import { jsonText, parseJsonObject } from '../http/json.js';
import { affordableUnits } from '../billing/money.js';
import type { Measurement } from '../stores/types.js';
import type { UpstreamResponse } from '../upstream/client.js';
import { callModel, pluginFields, upstreamError, upstreamHeaders } from '../upstream/relay.js';
import { type ChatBilling, type Usage, usageFrom } from './chat-billing.js';
import { relayStream } from './chat-stream/relay.js';
import { checkContextWindow, checkOutputCap } from './context-window.js';
import { zodError } from './validation.js';

const part = z.looseObject({ type: z.string() });
const message = z.looseObject({
  role: z.enum(['system', 'user', 'assistant', 'tool', 'developer']),
  content: z.union([z.string(), z.array(part), z.null()]).optional(),
});

export const chatSchema = z.looseObject({
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
  functions: z.array(z.unknown()).nullable().optional(),
  function_call: z.union([z.string(), z.looseObject({})]).nullable().optional(),
  seed: z.int().nullable().optional(),
  reasoning_effort: z.enum(['low', 'medium', 'high']).optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullable().optional(),
  brand: z.string().min(1).optional(),
  knowledge: z.union([z.string().min(1), z.array(z.string().min(1)).min(1).max(10)]).optional(),
});

export type ChatBody = z.infer<typeof chatSchema>;

const ROLES = new Set(['system', 'user', 'assistant', 'tool', 'developer']);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isPositiveInt = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v > 0;

/**
 * Whether `body` is a chat request of the everyday shape that `chatSchema` surely accepts:
 * a model, messages with a known role and string, null or typed-part content, and of the
 * optional fields only the ones checked here (stream, max_tokens, temperature, stream_options).
 * It answers in a fraction of zod's time; false means "not sure", and zod then decides (and
 * words the 400), so it may never accept what the schema refuses (a property test holds it to that).
 */
export function isEverydayChat(body: Record<string, unknown>): boolean {
  if (typeof body.model !== 'string' || body.model.length === 0) return false;
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) return false;
  for (const m of messages) {
    if (!isObject(m) || typeof m.role !== 'string' || !ROLES.has(m.role)) return false;
    const content = m.content;
    if (content === undefined || content === null || typeof content === 'string') continue;
    if (!Array.isArray(content)) return false;
    for (const part of content) if (!isObject(part) || typeof part.type !== 'string') return false;
  }
  for (const k in body) {
    const v = body[k];
    switch (k) {
      case 'model':
      case 'messages':
        break;
      case 'stream':
        if (v !== null && typeof v !== 'boolean') return false;
        break;
      case 'max_tokens':
        if (v !== null && !isPositiveInt(v)) return false;
        break;
      case 'temperature':
        // JSON.parse reads 1e400 as Infinity, which the schema refuses.
        if (v !== null && !(typeof v === 'number' && Number.isFinite(v))) return false;
        break;
      case 'stream_options':
        if (v !== null && !(isObject(v) && (v.include_usage === undefined || typeof v.include_usage === 'boolean'))) return false;
        break;
      default:
        // Any other field the schema knows goes to zod; one it does not know passes, as in the schema.
        if (Object.hasOwn(chatSchema.shape, k)) return false;
    }
  }
  return true;
}

export async function chatCompletions(core: Services, ctx: RequestContext): Promise<Response> {
  const bytes = await ctx.body();
  const body = parseJsonObject(bytes);
  if (!isEverydayChat(body)) {
    const checked = chatSchema.safeParse(body);
    if (!checked.success) throw zodError(checked.error, body);
  }
  const req = body as ChatBody;
  const model = await core.catalog.resolve(req.model, ctx.key, 'text', () => core.grants(ctx.key.accountId));
  const prices = model.text!;
  checkOutputCap(model, { max_tokens: req.max_tokens, max_completion_tokens: req.max_completion_tokens });
  const injected = await core.context.apply(ctx.key.accountId, req, req.messages);
  const messages = injected?.length ? [...injected, ...req.messages] : req.messages;

  // The most output the call may produce: the larger of the two caps a client may send (an
  // upstream may honour either), else the model's own, for each of the n choices.
  const perChoice = Math.max(req.max_tokens ?? 0, req.max_completion_tokens ?? 0) || model.maxOutputTokens;
  const maxOutput = perChoice * (req.n ?? 1);
  // Everything a provider bills as prompt: messages, tool and function definitions, the tool
  // or function choice, and image and audio parts at the model's per-part maximum.
  const input: PromptInput = {
    messages,
    extras: [req.tools, req.functions, req.tool_choice, req.function_call],
    parts: { image: model.maxTokensPerImage, audio: model.maxTokensPerAudio },
  };
  const worstCase = (prompt: number) => listCost(model, { kind: 'tokens', prompt, completion: maxOutput });
  let estimate: number | undefined;
  const promptTokens = () => (estimate ??= estimatePromptTokens(core.tokenizer, input));
  const open = (prompt: number) => core.meter.tryOpen({ id: ctx.requestId, key: ctx.key, model, amount: worstCase(prompt), observed: ctx.observed });
  // The hold is first placed on a byte bound of the prompt (no tokenizer on the hot path).
  // Only when that is refused are the tokens counted, and the exact estimate decides.
  const bound = promptTokensBound(input);
  // The injected brand and knowledge count too: they are part of what the model must read.
  checkContextWindow(model, bound, () => countPromptTokens(core.tokenizer, input), 'messages');
  let opened = await open(bound);
  if (!opened.ok && promptTokens() < bound) opened = await open(promptTokens());
  if (!opened.ok) {
    const affordable = affordableUnits(opened.available, prices.promptPico * BigInt(promptTokens()), prices.completionPico);
    const canAfford = affordable > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(affordable);
    throw insufficientQuota(
      opened,
      `This request requires more credits, or fewer max_tokens. You requested up to ${maxOutput} tokens, but can only afford ${canAfford}.` +
        (opened.limitSource === 'key_monthly_cap' ? " (limited by this key's monthly spending cap)" : ''),
      { affordable_max_tokens: canAfford },
    );
  }

  const call = opened.call;
  const billing: ChatBilling = {
    call,
    model,
    promptTokens,
    finish(usage, measured = 'usage') {
      if (!usage) void call.cancel();
      else void call.bill({ kind: 'tokens', prompt: usage.prompt, completion: usage.completion }, measured, { upstream: billing.model.upstream });
    },
  };

  const stream = req.stream === true;
  const plugins = core.hooks.has('onUpstreamRequest');
  // A stream must ask the upstream for its usage chunk (the bill comes from it); a client that
  // asked for it already needs no rewrite of its body.
  const addsUsage = stream && req.stream_options?.include_usage !== true;
  const changes = plugins || addsUsage || injected || 'brand' in req || 'knowledge' in req;
  /** The body for one target: forwarded as it came unless the gateway must change something in it. */
  const bodyFor = async (served: Model): Promise<string | Uint8Array> => {
    if (!changes && served.upstreamModel === model.id) return bytes;
    // The gateway's own fields (brand, knowledge) never go upstream.
    const out = withoutFields(body, CONTEXT_FIELDS);
    out.model = served.upstreamModel;
    out.messages = messages;
    if (stream) out.stream_options = { ...(req.stream_options ?? {}), include_usage: true };
    return JSON.stringify((plugins && (await pluginFields(core, ctx, served, '/chat/completions', out))) || out);
  };

  let res: UpstreamResponse;
  try {
    // Retries and fallbacks happen inside this one billed call, before anything reaches the
    // client. The client's signal is the upstream call's: a client that goes away aborts it.
    const answer = await callModel(core, ctx, model, async (served) => ({
      method: 'POST',
      path: '/chat/completions',
      headers: upstreamHeaders(ctx.requestId),
      body: await bodyFor(served),
      signal: ctx.request.signal ?? undefined,
    }));
    res = answer.res;
    billing.model = answer.served;
    if (res.status < 200 || res.status >= 300) throw await upstreamError(res, answer.served.upstream, { log: core.log, requestId: ctx.requestId });
  } catch (err) {
    billing.finish(null);
    throw err;
  }

  const headers: Record<string, string> = model.deprecationHeaders ?? {};
  if (stream) return relayStream(core, ctx, res, billing, req.stream_options?.include_usage === true, headers);
  return plainAnswer(core, ctx, res, billing, billing.model, headers);
}

async function plainAnswer(
  core: Services,
  ctx: RequestContext,
  res: UpstreamResponse,
  billing: ChatBilling,
  model: Model,
  headers: Record<string, string>,
): Promise<Response> {
  let text: string;
  let usage: Usage;
  let measured: Measurement;
  // Everything that can fail on a hostile answer (a JSON nested too deep to re-serialise or
  // count) happens before billing: the client is charged only for an answer it gets.
  try {
    text = await res.text();
    const parsed = JSON.parse(text) as Record<string, unknown>;
    if (!parsed || typeof parsed !== 'object' || !Array.isArray(parsed.choices)) throw new Error('no choices');
    const reported = usageFrom(parsed.usage);
    usage = reported ?? { prompt: billing.promptTokens(), completion: core.tokenizer.count(choicesText(parsed.choices, 'message')) };
    measured = reported ? 'usage' : 'tokenizer';
    if (model.upstreamModel !== model.id && parsed.model !== model.id) {
      parsed.model = model.id;
      text = JSON.stringify(parsed);
    }
  } catch (err) {
    billing.finish(null);
    if (err instanceof GatewayError) throw err;
    core.breaker.failure(model.upstream, ctx.key.accountId);
    throw new GatewayError('upstream_error', `The upstream "${model.upstream}" sent a malformed answer.`);
  }
  // Cut by shutdown while the answer was on its way: the hold was released, so the answer
  // (which was not paid for) is not delivered.
  if (billing.call.closed) throw new GatewayError('service_unavailable', 'The gateway is shutting down. Retry the request.', { headers: { 'retry-after': '1' } });
  billing.finish(usage, measured);
  return jsonText(200, text, headers);
}
