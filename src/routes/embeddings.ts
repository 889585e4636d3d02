/**
 * POST /embeddings: `input` is a string, an array of strings, an array of token ids or an
 * array of token-id arrays. Billed per input token at the model's prompt price (completion
 * 0): the upstream's `usage.prompt_tokens` when it reports it, else the input counted with the
 * tokenizer (token arrays count their length). Only models configured with `embedding: true`
 * are served here.
 */
import { z } from 'zod';
import type { Services, RequestContext } from '../services.js';
import { GatewayError } from '../errors.js';
import { jsonText, parseJsonObject } from '../http/json.js';
import { checkContextWindow } from './context-window.js';
import { openTokenCall, readPlainAnswer, refuseIfClosed, sendTokenCall, usageOf } from './text-call.js';
import { zodError } from './validation.js';

/** Most inputs in one request, as OpenAI allows. */
const MAX_INPUTS = 2048;
const tokenId = z.int().min(0);

const embeddingsSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([
    z.string().min(1),
    z.array(z.string().min(1)).min(1).max(MAX_INPUTS),
    z.array(tokenId).min(1),
    z.array(z.array(tokenId).min(1)).min(1).max(MAX_INPUTS),
  ]),
  encoding_format: z.enum(['float', 'base64']).optional(),
  dimensions: z.int().positive().optional(),
  user: z.string().optional(),
});

/** The inputs as separate items: each is embedded (and limited by the context window) on its own. */
function itemsOf(input: z.infer<typeof embeddingsSchema>['input']): Array<string | number[]> {
  if (typeof input === 'string') return [input];
  if (input.length > 0 && typeof input[0] === 'number') return [input as number[]];
  return input as Array<string | number[]>;
}

export async function createEmbeddings(core: Services, ctx: RequestContext): Promise<Response> {
  const bytes = await ctx.body();
  const body = parseJsonObject(bytes);
  const checked = embeddingsSchema.safeParse(body);
  if (!checked.success) throw zodError(checked.error, body);
  const req = checked.data;
  let model = await core.catalog.resolve(req.model, ctx.key, 'text', () => core.grants(ctx.key.accountId));
  if (!model.embedding) {
    throw new GatewayError('model_not_found', `The model \`${model.id}\` is not an embedding model.`, { param: 'model' });
  }

  const items = itemsOf(req.input);
  const utf8 = (t: string) => Buffer.byteLength(t, 'utf8');
  let bound = 0;
  for (const item of items) {
    const itemBound = typeof item === 'string' ? utf8(item) : item.length;
    checkContextWindow(model, itemBound, () => (typeof item === 'string' ? core.tokenizer.count(item) : item.length), 'input');
    bound += itemBound;
  }
  let counted: number | undefined;
  const count = () => (counted ??= items.reduce((n, item) => n + (typeof item === 'string' ? core.tokenizer.count(item) : item.length), 0));
  const call = await openTokenCall(core, ctx, model, { bound, estimate: count, maxOutput: 0 });

  const renamed = model.upstreamModel !== model.id;
  const sent = await sendTokenCall(core, ctx, model, call, '/embeddings', { ...body, model: model.upstreamModel }, renamed ? null : bytes);
  const res = sent.res;
  // From here on, the model as served: its upstream is the target that answered.
  model = sent.served;
  const answer = await readPlainAnswer(core, ctx, model, call, res);
  if (!Array.isArray(answer.data)) {
    void call.cancel();
    core.breaker.failure(model.upstream, ctx.key.accountId);
    throw new GatewayError('upstream_error', `The upstream "${model.upstream}" sent a malformed answer.`);
  }
  refuseIfClosed(call);
  const reported = usageOf(answer.usage, 'prompt_tokens', null);
  void call.bill({ kind: 'tokens', prompt: reported?.prompt ?? count(), completion: 0 }, reported ? 'usage' : 'tokenizer', {
    upstream: model.upstream,
  });
  // The client sees the model it called, not the upstream's name for it.
  if (renamed) answer.model = model.id;
  return jsonText(200, JSON.stringify(answer), model.deprecationHeaders ?? {});
}
