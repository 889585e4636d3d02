/** One entry of the `models` section: what a model is, which upstreams serve it, and its price. */
import { z } from 'zod';
import { modelCacheSchema } from './cache.js';
import { decimalPrice } from './values.js';

export const textPricingSchema = z.strictObject({
  prompt: decimalPrice,
  completion: decimalPrice,
  /** USD per prompt token read from the provider's cache. @default the prompt price */
  cachedPrompt: decimalPrice.optional(),
  /** USD per prompt token written to the provider's cache (Anthropic's 5-minute writes). @default the prompt price */
  cacheWrite: decimalPrice.optional(),
  /** USD per prompt token written to the provider's cache for an hour (Anthropic bills them at twice the prompt price). @default twice the prompt price */
  cacheWrite1h: decimalPrice.optional(),
  /**
   * Prices of the provider's service tiers (`service_tier: "priority"`, `"flex"`; Anthropic's
   * `inference_geo` by its value), USD per token. A request naming a tier (other than `auto`
   * or `default`) the model does not price here is refused: the provider would bill it at
   * another price than the one held.
   */
  serviceTiers: z
    .record(z.string().min(1).max(64), z.strictObject({ prompt: decimalPrice, completion: decimalPrice, cachedPrompt: decimalPrice.optional(), cacheWrite: decimalPrice.optional() }))
    .optional(),
  /**
   * Hosted tools the model may use (`web_search`, `image_generation`, ...): USD per call the
   * upstream reports, by the tool's `type`. A hosted tool not priced here is refused (400
   * `unsupported_tool`): the gateway cannot bill what it has no price for.
   */
  tools: z.record(z.string().min(1).max(100), decimalPrice).optional(),
  /**
   * USD per token of the lines of a batch (`POST /v1/batches`), held and billed at these:
   * providers bill their Batch API at about half the list price. @default the list prices
   */
  batch: z.strictObject({ prompt: decimalPrice, completion: decimalPrice, cachedPrompt: decimalPrice.optional() }).optional(),
});
export const mediaPricingSchema = z.strictObject({
  unit: z.enum(['image', 'token', 'second']),
  from: decimalPrice,
  tiers: z.record(z.string().min(1), decimalPrice).default({}),
});

/**
 * A calendar date "YYYY-MM-DD". A string of that shape that is no date ("2026-13-01") would
 * parse to NaN, and a model retiring then would never retire; one past its month's end
 * ("2026-02-30") would roll over into the next month: both are refused.
 */
const dateString = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}$/, 'must be a date "YYYY-MM-DD"')
  .refine((s) => {
    const ms = Date.parse(`${s}T00:00:00Z`);
    return Number.isFinite(ms) && new Date(ms).toISOString().slice(0, 10) === s;
  }, 'must be a calendar date "YYYY-MM-DD"');

export const modelSchema = z
  .strictObject({
    id: z.string().min(1).max(200),
    type: z.enum(['text', 'image', 'audio', 'video']).default('text'),
    name: z.string().optional(),
    ownedBy: z.string().optional(),
    /** The one upstream serving the model (short form of `targets`). */
    upstream: z.string().min(1).optional(),
    upstreamModel: z.string().min(1).optional(),
    /**
     * Several upstreams serving the model: lower `priority` first (fallbacks), a weighted
     * random choice among targets of equal priority (load balancing).
     */
    targets: z
      .array(
        z.strictObject({
          upstream: z.string().min(1),
          /** The model name this upstream knows it by. @default the model's `upstreamModel`, else its id */
          upstreamModel: z.string().min(1).optional(),
          /** @default 0 */
          priority: z.number().int().nonnegative().default(0),
          /** @default 1 */
          weight: z.number().positive().default(1),
        }),
      )
      .min(1)
      .optional(),
    pricing: z.union([textPricingSchema, mediaPricingSchema]),
    /** @default "GA" */
    posture: z.enum(['GA', 'Preview', 'Contact sales', 'Deprecated']).default('GA'),
    /** @default null */
    retiresAt: dateString.nullable().default(null),
    /** @default 128000 */
    contextLength: z.number().int().positive().default(128_000),
    /** @default 4096 */
    maxOutputTokens: z.number().int().positive().default(4096),
    /** Prompt tokens one image part may cost (held for each before the call). @default 1500 */
    maxTokensPerImage: z.number().int().nonnegative().default(1500),
    /** Prompt tokens one audio part may cost (held for each before the call). @default 10000 */
    maxTokensPerAudio: z.number().int().nonnegative().default(10_000),
    /** JSON Schema of the fields a media model accepts (listed with `?type=`). */
    parameters: z.record(z.string(), z.unknown()).optional(),
    /** Unix seconds shown as `created` in the listing. @default 0 */
    created: z.number().int().nonnegative().default(0),
    /**
     * A text model that serves POST /embeddings (billed per input token at its prompt price).
     * Only such models are accepted there. @default false
     */
    embedding: z.boolean().default(false),
    /** Media models with named modes (video): the modes, each one a priced tier. */
    modes: z.array(z.string()).optional(),
    /** Tier billed when the request names none. @default the cheapest tier, else "default" */
    defaultTier: z.string().optional(),
    /** The response cache for this model: fields over the top-level `cache`, or `false` (never cached). */
    cache: modelCacheSchema.optional(),
  })
  .superRefine((m, ctx) => {
    if ((m.upstream === undefined) === (m.targets === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['upstream'], message: 'a model needs exactly one of `upstream` or `targets`' });
    }
    const isText = m.type === 'text';
    const hasText = 'prompt' in m.pricing;
    if (isText !== hasText) {
      ctx.addIssue({
        code: 'custom',
        path: ['pricing'],
        message: isText ? 'a text model needs {prompt, completion} pricing' : 'a media model needs {unit, from, tiers} pricing',
      });
    }
  });
