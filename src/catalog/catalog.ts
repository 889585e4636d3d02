/**
 * The model catalog: prices parsed once at start, listing rows prebuilt, retirement
 * checked against the clock on every call (no restart needed when a date passes).
 */
import { allowsModel } from './allow-list.js';
import { GatewayError } from '../errors.js';
import { formatPrice, parsePrice } from '../billing/money.js';
import type { GatewayConfig, ModelConfig } from '../options.js';
import type { ApiKeyRecord } from '../stores/types.js';

export type Modality = 'text' | 'image' | 'audio' | 'video';
export type Posture = 'GA' | 'Preview' | 'Contact sales' | 'Deprecated';

export interface MediaPrice {
  unit: 'image' | 'token' | 'second';
  fromPico: bigint;
  tiers: ReadonlyMap<string, bigint>;
  defaultTier: string;
  modes: ReadonlySet<string>;
}

/** One upstream serving a model. */
export interface Target {
  upstream: string;
  /** The name sent to this upstream. */
  upstreamModel: string;
  /** Lower first; the next priority is the fallback. */
  priority: number;
  /** Share of the calls among targets of the same priority. */
  weight: number;
}

export interface Model {
  id: string;
  type: Modality;
  name: string;
  ownedBy: string;
  /** The upstream that serves the call: the first target's until a call picked one. */
  upstream: string;
  /** The name sent upstream (the serving target's). */
  upstreamModel: string;
  /** Every upstream that may serve the model, lowest priority first. */
  targets: readonly Target[];
  posture: Posture;
  /** 00:00 UTC of the `retires_at` date, unix ms; the model is retired from then on. */
  retiresAtMs: number | null;
  retiresAt: string | null;
  contextLength: number;
  maxOutputTokens: number;
  /** Prompt tokens held for each image part of a chat prompt. */
  maxTokensPerImage: number;
  /** Prompt tokens held for each audio part of a chat prompt. */
  maxTokensPerAudio: number;
  /** A text model that serves /embeddings (the only models accepted there). */
  embedding: boolean;
  /**
   * Text models: prices in pico-USD per token. Prompt tokens read from and written to the
   * provider's cache have their own prices (the prompt price unless configured).
   */
  text: TextPrices | null;
  /** The prices of the service tiers the model prices, by tier name; absent: none (a request naming one is refused). */
  serviceTiers?: ReadonlyMap<string, TextPrices>;
  /** The prices of a batch's lines (`pricing.batch`); absent: the list prices. */
  batchPrices?: TextPrices;
  /** Hosted tools the model may use, each priced in pico-USD per call; absent: none. */
  toolPrices?: ReadonlyMap<string, bigint>;
  media: MediaPrice | null;
  parameters: Record<string, unknown>;
  /** Listing row without the live `status` field. */
  row: Record<string, unknown>;
  /** Headers added to every call of a Deprecated model. */
  deprecationHeaders: Record<string, string> | null;
}

export interface CatalogDeps {
  now: () => number;
  serviceName: string;
  /** True while the model's upstream circuit is open. */
  isUnavailable: (upstream: string) => boolean;
}

export interface Catalog {
  get(id: string): Model | undefined;
  /**
   * Resolves a model for a call by `key`, or throws the error a client gets:
   * 404 model_not_found (unknown, retired, wrong modality), 403 model_not_allowed (agent key,
   * another model; a key's allow-list without it), 403 permission_denied ("Contact sales" without a grant).
   */
  resolve(id: unknown, key: ApiKeyRecord, modality: Modality, grants: () => Promise<readonly string[]>): Promise<Model>;
  /** The listing rows a key sees (`type` null: text rows). */
  list(key: ApiKeyRecord, type: Exclude<Modality, 'text'> | null): Record<string, unknown>[];
  isRetired(model: Model): boolean;
}

const DEFAULT_MEDIA_PARAMETERS: Record<Exclude<Modality, 'text'>, Record<string, unknown>> = {
  image: {
    type: 'object',
    required: ['prompt'],
    properties: {
      prompt: { type: 'string' },
      n: { type: 'integer', minimum: 1, maximum: 10, default: 1 },
      size: { type: 'string', pattern: '^\\d+x\\d+$' },
      resolution: { type: 'string', enum: ['480P', '720P', '1080P', '4K'] },
      quality: { type: 'string' },
      response_format: { type: 'string', enum: ['url', 'b64_json'] },
    },
  },
  audio: {
    type: 'object',
    required: ['input', 'voice'],
    properties: {
      input: { type: 'string', maxLength: 4096 },
      voice: { type: 'string' },
      response_format: { type: 'string', enum: ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'], default: 'mp3' },
      speed: { type: 'number', minimum: 0.25, maximum: 4 },
      instructions: { type: 'string' },
    },
  },
  video: {
    type: 'object',
    required: ['prompt'],
    properties: {
      prompt: { type: 'string' },
      seconds: { type: 'integer', minimum: 1, maximum: 120, default: 4 },
      size: { type: 'string', pattern: '^\\d+x\\d+$' },
      resolution: { type: 'string', enum: ['480P', '720P', '1080P', '4K'] },
      mode: { type: 'string' },
    },
  },
};

function httpDate(ms: number): string {
  return new Date(ms).toUTCString();
}

/** A text model's prices, pico-USD per token. */
export interface TextPrices {
  promptPico: bigint;
  completionPico: bigint;
  cachedPromptPico: bigint;
  /** Cache writes that live five minutes (and every write of a provider with one kind). */
  cacheWritePico: bigint;
  /** Cache writes that live an hour (Anthropic's `ttl: "1h"`). */
  cacheWrite1hPico: bigint;
}

/** Text prices from their decimal USD strings: cache reads and writes at the prompt price unless set, hour-long writes at twice it. */
function textPrices(p: { prompt: string; completion: string; cachedPrompt?: string | undefined; cacheWrite?: string | undefined; cacheWrite1h?: string | undefined }): TextPrices {
  const promptPico = parsePrice(p.prompt);
  return {
    promptPico,
    completionPico: parsePrice(p.completion),
    cachedPromptPico: p.cachedPrompt === undefined ? promptPico : parsePrice(p.cachedPrompt),
    cacheWritePico: p.cacheWrite === undefined ? promptPico : parsePrice(p.cacheWrite),
    cacheWrite1hPico: p.cacheWrite1h === undefined ? 2n * promptPico : parsePrice(p.cacheWrite1h),
  };
}

/**
 * The model as a service tier bills it: the same model at the tier's prices, so the hold and
 * the charge of a call that asked for it are at the price the provider bills.
 */
export function atServiceTier(model: Model, tier: string): Model | null {
  const prices = model.serviceTiers?.get(tier);
  return prices ? { ...model, text: prices } : null;
}

/** The model as a batch's line bills it: at its batch prices, else at its list prices. */
export function atBatchPrice(model: Model): Model {
  return model.batchPrices ? { ...model, text: model.batchPrices } : model;
}

function buildModel(m: ModelConfig, serviceName: string): Model {
  const retiresAtMs = m.retiresAt ? Date.parse(`${m.retiresAt}T00:00:00Z`) : null;
  let text: Model['text'] = null;
  let media: MediaPrice | null = null;
  let pricing: Record<string, unknown>;
  let toolPrices: Map<string, bigint> | undefined;
  let serviceTiers: Map<string, TextPrices> | undefined;
  let batchPrices: TextPrices | undefined;
  if ('prompt' in m.pricing) {
    const { cachedPrompt, cacheWrite } = m.pricing;
    text = textPrices(m.pricing);
    if (m.pricing.serviceTiers) {
      const base = m.pricing;
      serviceTiers = new Map(Object.entries(m.pricing.serviceTiers).map(([tier, p]) => [tier, textPrices({ ...p, cacheWrite1h: base.cacheWrite1h })]));
    }
    if (m.pricing.batch) {
      // A cache read in a batch costs no more than a prompt token of it (nor than a cache read outside it).
      const cached = m.pricing.batch.cachedPrompt ?? (parsePrice(m.pricing.batch.prompt) < text.cachedPromptPico ? m.pricing.batch.prompt : undefined);
      batchPrices = textPrices({ ...m.pricing, ...m.pricing.batch, cachedPrompt: cached ?? m.pricing.cachedPrompt ?? m.pricing.prompt });
    }
    pricing = { prompt: formatPrice(text.promptPico), completion: formatPrice(text.completionPico) };
    // Listed under OpenRouter's names, only when configured (else they are the prompt price).
    if (cachedPrompt !== undefined) pricing.input_cache_read = formatPrice(text.cachedPromptPico);
    if (cacheWrite !== undefined) pricing.input_cache_write = formatPrice(text.cacheWritePico);
    if (m.pricing.tools) {
      toolPrices = new Map(Object.entries(m.pricing.tools).map(([tool, price]) => [tool, parsePrice(price)]));
      // Listed as configured, USD per call, so a client can see what a hosted tool costs.
      pricing.tools = Object.fromEntries([...toolPrices].map(([tool, p]) => [tool, formatPrice(p)]));
    }
  } else {
    const tiers = new Map<string, bigint>();
    for (const [tier, price] of Object.entries(m.pricing.tiers)) tiers.set(tier, parsePrice(price));
    const fromPico = parsePrice(m.pricing.from);
    media = {
      unit: m.pricing.unit,
      fromPico,
      tiers,
      defaultTier: m.defaultTier ?? [...tiers].find(([, p]) => p === fromPico)?.[0] ?? 'default',
      modes: new Set(m.modes ?? []),
    };
    pricing = {
      unit: media.unit,
      from: formatPrice(fromPico),
      tiers: Object.fromEntries([...tiers].map(([t, p]) => [t, formatPrice(p)])),
    };
  }
  const isText = m.type === 'text';
  const targets: Target[] = (m.targets ?? [{ upstream: m.upstream!, priority: 0, weight: 1 }])
    .map((t) => ({ upstream: t.upstream, upstreamModel: ('upstreamModel' in t && t.upstreamModel) || m.upstreamModel || m.id, priority: t.priority, weight: t.weight }))
    .sort((a, b) => a.priority - b.priority);
  const parameters = m.type === 'text' ? {} : (m.parameters ?? DEFAULT_MEDIA_PARAMETERS[m.type]);
  const row: Record<string, unknown> = {
    id: m.id,
    object: 'model',
    type: m.type,
    name: m.name ?? m.id,
    owned_by: isText ? (m.ownedBy ?? targets[0]!.upstream) : serviceName,
    created: m.created,
    context_length: isText ? m.contextLength : undefined,
    pricing,
    posture: m.posture,
    retires_at: m.retiresAt,
    parameters: isText ? undefined : parameters,
  };
  for (const k of Object.keys(row)) if (row[k] === undefined) delete row[k];
  return {
    id: m.id,
    type: m.type,
    name: m.name ?? m.id,
    ownedBy: String(row.owned_by),
    upstream: targets[0]!.upstream,
    upstreamModel: targets[0]!.upstreamModel,
    targets,
    posture: m.posture,
    retiresAtMs,
    retiresAt: m.retiresAt,
    contextLength: m.contextLength,
    maxOutputTokens: m.maxOutputTokens,
    maxTokensPerImage: m.maxTokensPerImage,
    maxTokensPerAudio: m.maxTokensPerAudio,
    embedding: m.embedding,
    text,
    ...(toolPrices ? { toolPrices } : {}),
    ...(serviceTiers ? { serviceTiers } : {}),
    ...(batchPrices ? { batchPrices } : {}),
    media,
    parameters,
    row,
    deprecationHeaders:
      m.posture === 'Deprecated'
        ? {
            deprecation: 'true',
            ...(retiresAtMs !== null ? { sunset: httpDate(retiresAtMs) } : {}),
          }
        : null,
  };
}

export function createCatalog(cfg: GatewayConfig, deps: CatalogDeps): Catalog {
  const models = new Map<string, Model>();
  for (const m of cfg.models) models.set(m.id, buildModel(m, deps.serviceName));
  const ordered = [...models.values()];

  const isRetired = (m: Model) => m.retiresAtMs !== null && deps.now() >= m.retiresAtMs;
  const withStatus = (m: Model) => ({
    ...m.row,
    status: m.targets.every((t) => deps.isUnavailable(t.upstream)) ? 'Unavailable' : 'Active',
  });
  const notFound = (id: string) =>
    new GatewayError('model_not_found', `The model \`${id}\` does not exist or you do not have access to it.`, {
      param: 'model',
    });

  return {
    get: (id) => models.get(id),
    isRetired,
    async resolve(id, key, modality, grants) {
      if (typeof id !== 'string' || id.length === 0) {
        throw new GatewayError('invalid_request', 'The `model` field is required and must be a string.', { param: 'model' });
      }
      const model = models.get(id);
      if (key.kind === 'agent') {
        if (modality !== 'text') {
          throw new GatewayError('permission_denied', 'Agent keys cannot use media endpoints.');
        }
        if (id !== key.model) {
          throw new GatewayError('model_not_allowed', `This agent key may only call the model \`${key.model}\`.`, {
            param: 'model',
            model: model?.id,
          });
        }
      } else if (!allowsModel(key.models, id)) {
        throw new GatewayError('model_not_allowed', `This API key may not call the model \`${id.slice(0, 200)}\`.`, {
          param: 'model',
          // Only a listed model names the refusal in the access line and the per-model counts:
          // a name the client made up would be a new metrics series per call.
          model: model?.id,
        });
      }
      if (!model || model.type !== modality || isRetired(model)) throw notFound(id);
      if (model.posture === 'Contact sales' && !(await grants()).includes(model.id)) {
        throw new GatewayError(
          'permission_denied',
          `The model \`${id}\` is available on request. Contact sales to enable it for your account.`,
          { param: 'model', model: model.id },
        );
      }
      return model;
    },
    list(key, type) {
      if (key.kind === 'agent') {
        if (type !== null) return [];
        const m = key.model ? models.get(key.model) : undefined;
        return m && !isRetired(m) ? [withStatus(m)] : [];
      }
      const want: Modality = type ?? 'text';
      return ordered.filter((m) => m.type === want && !isRetired(m) && allowsModel(key.models, m.id)).map(withStatus);
    },
  };
}
