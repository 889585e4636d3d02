/**
 * POST /embeddings: `input` is a string, an array of strings, an array of token ids or an
 * array of token-id arrays. Billed per input token at the model's prompt price (completion
 * 0): the upstream's `usage.prompt_tokens` when it reports it, else the input counted with the
 * tokenizer (token arrays count their length). Only models configured with `embedding: true`
 * are served here.
 */
import { embeddingsFormat } from '../cache/openai-formats.js';
import { z } from 'zod';
import { noOutput } from '../billing/output.js';
import { usageOf } from '../billing/usage.js';
import { GatewayError } from '../errors.js';
import { checkContextWindow, refuseContextFields, textModel, zodError } from './shared.js';
import { bodyHold, textOperation } from './text.js';

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
  // Embeddings are one JSON answer: a stream asked of an upstream that honoured it could not be read.
  stream: z.literal(false).nullable().optional(),
});

/** The inputs as separate items: each is embedded (and limited by the context window) on its own. */
function itemsOf(input: z.infer<typeof embeddingsSchema>['input']): Array<string | number[]> {
  if (typeof input === 'string') return [input];
  if (input.length > 0 && typeof input[0] === 'number') return [input as number[]];
  return input as Array<string | number[]>;
}

export const createEmbeddings = textOperation({
  path: '/embeddings',
  cache: embeddingsFormat,
  async plan(core, ctx, body) {
    const checked = embeddingsSchema.safeParse(body);
    if (!checked.success) throw zodError(checked.error, body);
    const req = checked.data;
    refuseContextFields(body, '/embeddings');
    const model = await textModel(core, ctx, body, req.model);
    if (!model.embedding) {
      throw new GatewayError('model_not_found', `The model \`${model.id}\` is not an embedding model.`, { param: 'model' });
    }
    const items = itemsOf(req.input);
    const utf8 = (t: string) => Buffer.byteLength(t, 'utf8');
    const countOne = (item: string | number[]) => (typeof item === 'string' ? core.tokenizer.count(item) : item.length);
    let bound = 0;
    for (const item of items) {
      const itemBound = typeof item === 'string' ? utf8(item) : item.length;
      checkContextWindow(model, itemBound, () => countOne(item), 'input');
      bound += itemBound;
    }
    let counted: number | undefined;
    const count = () => (counted ??= items.reduce((n, item) => n + countOne(item), 0));
    return {
      model,
      hold: { bound, estimate: count, maxOutput: 0 },
      stream: false,
      promptTokens: count,
      holdFor: (fields) => bodyHold(core, fields, 0),
      unchanged: true,
      fields: (served) => ({ ...body, model: served.upstreamModel }),
      events() {
        throw new Error('embeddings are never streamed');
      },
      answer(answer) {
        if (!Array.isArray(answer.data)) throw new Error('no data');
        // Input tokens only: an embedding produces no output tokens.
        return { usage: usageOf(answer.usage, 'prompt_tokens', null), output: noOutput };
      },
    };
  },
});
